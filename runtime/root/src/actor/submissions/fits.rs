//! Whether a job can ever run on this pilot's nodes, judged before it is queued: what
//! no node could ever give is refused at submission with the reason, not left waiting
//! forever.

use saker_actors::resources::NodeResources;
use saker_core::Resources;

use crate::actor::nodes::Offered;
use crate::actor::resources::ResourceNames;
use saker_client::spec::{JobRequest, LauncherKind, TaskSpec};

/// What a submission is checked against: the pilot's nodes, as far as they are known.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape<'a> {
    /// The widest node the pilot will have, when known before nodes join.
    pub expected: Option<&'a NodeResources>,
    /// The most nodes the pilot can have, when known.
    pub max_nodes: Option<u32>,
    /// The pilot runs in a batch allocation.
    pub in_allocation: bool,
    /// What the nodes that joined offer.
    pub offered: Offered,
}

/// Why a job can never run on this pilot's nodes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfit {
    #[error("it asks for {} per task; the widest node has {widest}", plural(.asked, "core"))]
    Cores { asked: u32, widest: u32 },
    #[error("it asks for {} per task; no node has more than {most}", plural(.asked, "GPU"))]
    Gpus { asked: u32, most: u32 },
    #[error("it asks for {asked} MiB of memory per task; the most a node offers is {most} MiB")]
    Memory { asked: u32, most: u32 },
    #[error("it asks for resource {name:?}, which no node offers")]
    NoSuchResource { name: String },
    #[error("it asks for {asked} of resource {name:?} per task; the most a node offers is {most}")]
    Resource { name: String, asked: u32, most: u32 },
    #[error("its {tasks} tasks would all write the same data items: writes are for single tasks")]
    SharedWrites { tasks: u64 },
    #[error("it asks for node {node}; this pilot's nodes are 0 to {}", .max_nodes.saturating_sub(1))]
    NoSuchNode { node: u32, max_nodes: u32 },
    #[error("it asks for {nodes} nodes; this pilot has at most {most}")]
    TooManyNodes { nodes: u32, most: u32 },
    #[error(
        "it needs {cores} cores on each node ({ranks} ranks of {cores_per_rank} cores); the widest node has {widest}"
    )]
    TooWide {
        cores: u32,
        ranks: u32,
        cores_per_rank: u32,
        widest: u32,
    },
    #[error("launcher srun needs a Slurm allocation: this pilot runs outside one")]
    SrunOutsideAllocation,
    #[error("--exclusive needs a node to have joined, to know its size")]
    ExclusiveUnknownWidth,
}

impl Shape<'_> {
    /// Whether some node of this pilot could ever hold one task of `spec`, kind by
    /// kind. Only judged when the pilot knows its nodes: it started them (and found
    /// what they offer) or all have joined; otherwise a task waits for a node it fits.
    /// An HPC job's cores per node are judged with its layout (`check_fits`).
    fn check_resources(&self, names: &ResourceNames, spec: &TaskSpec) -> Result<(), Unfit> {
        // A pilot of no agents of its own (nodes join later) knows nothing of them.
        let all_joined = self
            .max_nodes
            .is_some_and(|most| most > 0 && self.offered.joined >= most);
        if self.expected.is_none() && !all_joined {
            return Ok(());
        }
        let expected = self.expected;
        let most = |joined: &dyn Fn(&Resources) -> u32, expected: u32| {
            let joined = (self.offered.joined > 0).then(|| joined(&self.offered.most));
            joined.unwrap_or(0).max(expected)
        };
        let hpc = matches!(spec.layout(), Ok(Some(_)));
        // A pilot in an allocation may not know its nodes' cores before they join.
        let cores_known = all_joined || expected.is_some_and(|e| e.cores > 0);
        let cores = most(&|c| c.core_count(), expected.map_or(0, |e| e.cores));
        if !hpc && cores_known && spec.cores > cores {
            return Err(Unfit::Cores {
                asked: spec.cores,
                widest: cores,
            });
        }
        let gpus = most(
            &|c| c.gpu_count(),
            expected.map_or(0, |e| e.gpus.len() as u32),
        );
        if spec.gpus > gpus {
            return Err(Unfit::Gpus {
                asked: spec.gpus,
                most: gpus,
            });
        }
        let memory = most(&|c| c.memory_mib(), expected.map_or(0, |e| e.memory_mib));
        if spec.memory_mib > memory {
            return Err(Unfit::Memory {
                asked: spec.memory_mib,
                most: memory,
            });
        }
        for (name, &amount) in &spec.resources {
            let declared = expected
                .and_then(|e| e.custom.iter().find(|(known, _)| known == name))
                .map_or(0, |(_, amount)| *amount);
            let offered = match names.known(name) {
                Some(kind) => most(&|c| c.get(kind), declared),
                None => declared,
            };
            if offered == 0 {
                return Err(Unfit::NoSuchResource { name: name.clone() });
            }
            if amount > offered {
                return Err(Unfit::Resource {
                    name: name.clone(),
                    asked: amount,
                    most: offered,
                });
            }
        }
        Ok(())
    }

    /// Cores of the widest node (what `exclusive` holds of a node): of those that
    /// joined, or of what the pilot was started with; 0 if neither is known.
    pub(super) fn widest_node(&self) -> u32 {
        let joined = (self.offered.joined > 0).then(|| self.offered.most.core_count());
        let expected = self.expected.map(|node| node.cores);
        joined.max(expected).unwrap_or(0)
    }

    /// Whether a job can ever run on this pilot's nodes: resources some node offers,
    /// a node it has; for an HPC job no more nodes than it will have, and no more
    /// cores per node than the widest.
    pub(super) fn check_fits(
        &self,
        names: &ResourceNames,
        request: &JobRequest,
    ) -> Result<(), Unfit> {
        self.check_resources(names, &request.spec)?;
        if !request.spec.writes.is_empty() && request.task_count() > 1 {
            return Err(Unfit::SharedWrites {
                tasks: request.task_count(),
            });
        }
        if let (Some(node), Some(most)) = (request.spec.node, self.max_nodes)
            && node >= most
        {
            return Err(Unfit::NoSuchNode {
                node,
                max_nodes: most,
            });
        }
        let Ok(Some(layout)) = request.spec.layout() else {
            return Ok(());
        };
        if let Some(most) = self.max_nodes
            && layout.nodes > most
        {
            return Err(Unfit::TooManyNodes {
                nodes: layout.nodes,
                most,
            });
        }
        let widest = self.widest_node();
        if widest > 0 && layout.cores_per_node() > widest {
            return Err(Unfit::TooWide {
                cores: layout.cores_per_node(),
                ranks: layout.ranks_per_node,
                cores_per_rank: layout.cores_per_rank,
                widest,
            });
        }
        if layout.launcher == LauncherKind::Srun && !self.in_allocation {
            return Err(Unfit::SrunOutsideAllocation);
        }
        if layout.exclusive && widest == 0 {
            return Err(Unfit::ExclusiveUnknownWidth);
        }
        Ok(())
    }
}

/// `count` `thing`s, in the singular for one.
fn plural(count: &u32, thing: &str) -> String {
    match count {
        1 => format!("1 {thing}"),
        _ => format!("{count} {thing}s"),
    }
}
