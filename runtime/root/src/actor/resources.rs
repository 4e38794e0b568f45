//! What a task spec asks for, as the core's resource vector.
//!
//! Cores, GPUs and memory have kinds of their own; named custom resources are numbered
//! by the pilot in the order it first sees them. A resumed root replays submissions in
//! journal order, so every name gets its number again.

use saker_core::{MAX_CUSTOM, ResourceKind, Resources};

use crate::spec::{JobRequest, LauncherKind, TaskSpec};

/// A spec asks for one custom resource more than a pilot can number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "resource {name:?} would be custom kind {} of a pilot that numbers at most {MAX_CUSTOM} (it has {known:?})",
    MAX_CUSTOM + 1
)]
pub struct TooManyKinds {
    pub name: String,
    pub known: Vec<String>,
}

/// The pilot's custom resource names, by kind number.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct ResourceNames {
    names: Vec<String>,
}

impl ResourceNames {
    /// What each task of `spec` needs, numbering names not seen before.
    pub fn vector(&mut self, spec: &TaskSpec) -> Result<Resources, TooManyKinds> {
        let mut needs = Resources::cores(spec.cores)
            .with(ResourceKind::GPUS, spec.gpus)
            .with(ResourceKind::MEMORY_MIB, spec.memory_mib);
        for (name, &amount) in &spec.resources {
            let kind = self.kind(name).ok_or_else(|| TooManyKinds {
                name: name.clone(),
                known: self.names.clone(),
            })?;
            needs = needs.with(kind, amount);
        }
        Ok(needs)
    }

    /// The kind of custom resource `name`, numbering it if it is new and there is
    /// room; `None` if there is not.
    pub fn kind(&mut self, name: &str) -> Option<ResourceKind> {
        let index = match self.names.iter().position(|known| known == name) {
            Some(index) => index,
            None if self.names.len() < MAX_CUSTOM => {
                self.names.push(name.to_owned());
                self.names.len() - 1
            }
            None => return None,
        };
        ResourceKind::custom(index)
    }

    /// The kind of custom resource `name`, if the pilot has numbered it.
    pub fn known(&self, name: &str) -> Option<ResourceKind> {
        let index = self.names.iter().position(|known| known == name)?;
        ResourceKind::custom(index)
    }

    /// The name of custom kind `index`, if the pilot has numbered one.
    pub fn name(&self, index: usize) -> Option<&str> {
        self.names.get(index).map(String::as_str)
    }
}

impl super::ctx::Ctx {
    /// Whether some node of this pilot could ever hold one task of `spec`, kind by
    /// kind. Only judged when the pilot knows its nodes: it started them (and found
    /// what they offer) or all have joined; otherwise a task waits for a node it fits.
    /// An HPC job's cores per node are judged with its layout (`check_fits`).
    pub(super) fn check_resources(
        &self,
        names: &ResourceNames,
        spec: &TaskSpec,
    ) -> Result<(), String> {
        // A pilot of no agents of its own (nodes join later) knows nothing of them.
        let all_joined = self
            .pilot
            .max_nodes
            .is_some_and(|most| most > 0 && self.nodes.len() as u32 >= most);
        if self.pilot.expected_node.is_none() && !all_joined {
            return Ok(());
        }
        let expected = self.pilot.expected_node.as_ref();
        let most = |joined: &dyn Fn(&Resources) -> u32, expected: u32| {
            let joined = self.nodes.values().map(|node| joined(&node.capacity)).max();
            joined.unwrap_or(0).max(expected)
        };
        let hpc = matches!(spec.layout(), Ok(Some(_)));
        // A pilot in an allocation may not know its nodes' cores before they join.
        let cores_known = all_joined || expected.is_some_and(|e| e.cores > 0);
        let cores = most(&|c| c.core_count(), expected.map_or(0, |e| e.cores));
        if !hpc && cores_known && spec.cores > cores {
            return Err(format!(
                "it asks for {} per task; the widest node has {cores}",
                plural(spec.cores, "core")
            ));
        }
        let gpus = most(
            &|c| c.gpu_count(),
            expected.map_or(0, |e| e.gpus.len() as u32),
        );
        if spec.gpus > gpus {
            return Err(format!(
                "it asks for {} per task; no node has more than {gpus}",
                plural(spec.gpus, "GPU")
            ));
        }
        let memory = most(&|c| c.memory_mib(), expected.map_or(0, |e| e.memory_mib));
        if spec.memory_mib > memory {
            return Err(format!(
                "it asks for {} MiB of memory per task; the most a node offers is {memory} MiB",
                spec.memory_mib
            ));
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
                return Err(format!(
                    "it asks for resource {name:?}, which no node offers"
                ));
            }
            if amount > offered {
                return Err(format!(
                    "it asks for {amount} of resource {name:?} per task; the most a node offers is {offered}"
                ));
            }
        }
        Ok(())
    }

    /// The core's time for a wall-clock time (`None` for none, or one already past).
    pub(super) fn core_time(
        &self,
        at: Option<crate::results::Timestamp>,
    ) -> Option<saker_core::Time> {
        let wall = self.timestamp().unix_micros();
        let ahead = at?
            .unix_micros()
            .checked_sub(wall)
            .filter(|ahead| *ahead > 0)?;
        Some(self.now().saturating_add_micros(ahead))
    }

    /// Cores of the widest node (what `exclusive` holds of a node): of those that
    /// joined, or of what the pilot was started with; 0 if neither is known.
    pub(super) fn widest_node(&self) -> u32 {
        let joined = self.nodes.values().map(|node| node.cores).max();
        let expected = self.pilot.expected_node.as_ref().map(|node| node.cores);
        joined.max(expected).unwrap_or(0)
    }

    /// Whether a job can ever run on this pilot's nodes: resources some node offers,
    /// a node it has; for an HPC job no more nodes than it will have, and no more
    /// cores per node than the widest.
    pub(super) fn check_fits(
        &self,
        names: &ResourceNames,
        request: &JobRequest,
    ) -> Result<(), String> {
        self.check_resources(names, &request.spec)?;
        if !request.spec.writes.is_empty() && request.task_count() > 1 {
            return Err(format!(
                "its {} tasks would all write the same data items: writes are for single tasks",
                request.task_count()
            ));
        }
        if let (Some(node), Some(most)) = (request.spec.node, self.pilot.max_nodes)
            && node >= most
        {
            return Err(format!(
                "it asks for node {node}; this pilot's nodes are 0 to {}",
                most.saturating_sub(1)
            ));
        }
        let Ok(Some(layout)) = request.spec.layout() else {
            return Ok(());
        };
        if let Some(most) = self.pilot.max_nodes
            && layout.nodes > most
        {
            return Err(format!(
                "it asks for {} nodes; this pilot has at most {most}",
                layout.nodes
            ));
        }
        let widest = self.widest_node();
        if widest > 0 && layout.cores_per_node() > widest {
            return Err(format!(
                "it needs {} cores on each node ({} ranks of {} cores); the widest node has {widest}",
                layout.cores_per_node(),
                layout.ranks_per_node,
                layout.cores_per_rank
            ));
        }
        if layout.launcher == LauncherKind::Srun && self.pilot.allocation.is_none() {
            return Err(
                "launcher srun needs a Slurm allocation: this pilot runs outside one".into(),
            );
        }
        if layout.exclusive && widest == 0 {
            return Err("--exclusive needs a node to have joined, to know its size".into());
        }
        Ok(())
    }
}

/// `count` `thing`s, in the singular for one.
fn plural(count: u32, thing: &str) -> String {
    match count {
        1 => format!("1 {thing}"),
        _ => format!("{count} {thing}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(resources: &[(&str, u32)]) -> TaskSpec {
        let mut spec = TaskSpec::new(vec!["true".to_owned()]);
        spec.cores = 2;
        spec.gpus = 1;
        spec.memory_mib = 512;
        spec.resources = resources
            .iter()
            .map(|&(name, amount)| (name.to_owned(), amount))
            .collect();
        spec
    }

    #[test]
    fn names_are_numbered_in_the_order_first_seen_and_kept() {
        let mut names = ResourceNames::default();
        let first = names.vector(&spec(&[("licence", 3)])).unwrap();
        let second = names
            .vector(&spec(&[("scratch", 1), ("licence", 2)]))
            .unwrap();
        let licence = ResourceKind::custom(0).unwrap();
        let scratch = ResourceKind::custom(1).unwrap();
        assert_eq!(
            first,
            Resources::cores(2)
                .with(ResourceKind::GPUS, 1)
                .with(ResourceKind::MEMORY_MIB, 512)
                .with(licence, 3)
        );
        assert_eq!((second.get(licence), second.get(scratch)), (2, 1));
        assert_eq!(
            (names.name(0), names.name(1)),
            (Some("licence"), Some("scratch"))
        );
    }

    #[test]
    fn one_name_more_than_the_pilot_can_number_is_refused_and_changes_nothing() {
        let mut names = ResourceNames::default();
        let full: Vec<(String, u32)> = (0..MAX_CUSTOM).map(|i| (format!("r{i}"), 1)).collect();
        let full: Vec<(&str, u32)> = full.iter().map(|(n, a)| (n.as_str(), *a)).collect();
        names.vector(&spec(&full)).unwrap();
        let before = names.clone();
        let error = names.vector(&spec(&[("one-more", 1)])).unwrap_err();
        assert_eq!(error.name, "one-more");
        assert_eq!(names, before);
        assert!(
            names.vector(&spec(&[("r0", 4)])).is_ok(),
            "known names still work"
        );
    }
}
