//! HPC jobs in a spec: a program on several nodes at once, with its ranks laid out
//! over them and started by an MPI launcher or by Saker itself.
//!
//! A spec is an HPC job when it says anything of the kind (`nodes` above one, ranks,
//! `mpi`, `exclusive`). Its layout: `nodes` nodes, `ranks_per_node` ranks on each
//! (the last may have fewer when `ranks` says so), `cores_per_rank` cores for each
//! (default: the spec's `cores`), so each node holds `ranks_per_node ×
//! cores_per_rank` cores for the job, or all its cores with `exclusive`.

use super::{SpecError, TaskSpec};

pub use saker_core::{LauncherKind, MpiKind};

/// An HPC job's resolved layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub nodes: u32,
    pub ranks: u32,
    pub ranks_per_node: u32,
    pub cores_per_rank: u32,
    pub exclusive: bool,
    pub mpi: MpiKind,
    pub launcher: LauncherKind,
}

impl Layout {
    /// Cores each node holds for the job (before `exclusive` widens it to the node).
    pub fn cores_per_node(&self) -> u32 {
        self.ranks_per_node.saturating_mul(self.cores_per_rank)
    }
}

impl TaskSpec {
    /// Whether the spec asks for anything only an HPC job has.
    pub fn is_hpc(&self) -> bool {
        self.nodes > 1
            || self.mpi.is_some()
            || self.ranks.is_some()
            || self.ranks_per_node.is_some()
            || self.cores_per_rank.is_some()
            || self.exclusive
            || self.launcher.is_some()
    }

    /// The HPC layout, `None` for an ordinary task; an error for one that cannot be.
    pub fn layout(&self) -> Result<Option<Layout>, SpecError> {
        if !self.is_hpc() {
            return Ok(None);
        }
        if self.function.is_some() {
            return Err(SpecError::FunctionAsHpc);
        }
        let nodes = self.nodes.max(1);
        let zero = |field| Err(SpecError::ZeroHpcField { field });
        if self.ranks == Some(0) {
            return zero("ranks");
        }
        if self.ranks_per_node == Some(0) {
            return zero("ranks_per_node");
        }
        if self.cores_per_rank == Some(0) {
            return zero("cores_per_rank");
        }
        let (ranks, ranks_per_node) = match (self.ranks, self.ranks_per_node) {
            (None, None) => (nodes, 1),
            (None, Some(per_node)) => (nodes.saturating_mul(per_node), per_node),
            (Some(ranks), None) => (ranks, ranks.div_ceil(nodes)),
            (Some(ranks), Some(per_node)) => (ranks, per_node),
        };
        // Every node gets at least one rank, and no node more than its share.
        let most = nodes.saturating_mul(ranks_per_node);
        let least = (nodes - 1).saturating_mul(ranks_per_node) + 1;
        if ranks > most || ranks < least {
            return Err(SpecError::RanksDoNotFit {
                ranks,
                nodes,
                ranks_per_node,
            });
        }
        let mpi = self.mpi.unwrap_or(MpiKind::None);
        let launcher = self.launcher.unwrap_or(LauncherKind::Agents);
        if launcher == LauncherKind::Script && mpi != MpiKind::Pmi {
            return Err(SpecError::ScriptWithoutPmi);
        }
        Ok(Some(Layout {
            nodes,
            ranks,
            ranks_per_node,
            cores_per_rank: self.cores_per_rank.unwrap_or(self.cores.max(1)),
            exclusive: self.exclusive,
            mpi,
            launcher,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TaskSpec {
        TaskSpec::new(vec!["./ring".into()])
    }

    #[test]
    fn a_plain_task_has_no_layout() {
        assert_eq!(spec().layout(), Ok(None));
    }

    #[test]
    fn ranks_fill_nodes_in_order() {
        let mut hpc = spec();
        hpc.nodes = 3;
        hpc.ranks_per_node = Some(2);
        hpc.mpi = Some(MpiKind::Openmpi);
        let layout = hpc.layout().unwrap().unwrap();
        assert_eq!((layout.ranks, layout.ranks_per_node), (6, 2));
        assert_eq!(layout.cores_per_node(), 2);
        hpc.ranks_per_node = None;
        hpc.ranks = Some(5);
        hpc.cores = 2;
        let layout = hpc.layout().unwrap().unwrap();
        assert_eq!(
            (layout.ranks, layout.ranks_per_node, layout.cores_per_rank),
            (5, 2, 2)
        );
        assert_eq!(layout.cores_per_node(), 4);
        hpc.ranks = Some(7);
        hpc.ranks_per_node = Some(2);
        assert_eq!(
            hpc.layout(),
            Err(SpecError::RanksDoNotFit {
                ranks: 7,
                nodes: 3,
                ranks_per_node: 2
            })
        );
        hpc.ranks = Some(4);
        hpc.ranks_per_node = Some(1);
        assert!(hpc.layout().is_err(), "4 ranks cannot fill 3 nodes of 1");
    }

    #[test]
    fn nodes_alone_make_one_rank_per_node_without_mpi() {
        let mut hpc = spec();
        hpc.nodes = 4;
        let layout = hpc.layout().unwrap().unwrap();
        assert_eq!((layout.ranks, layout.mpi), (4, MpiKind::None));
    }

    #[test]
    fn what_cannot_be_is_refused() {
        let mut hpc = spec();
        hpc.ranks = Some(0);
        assert_eq!(
            hpc.layout(),
            Err(SpecError::ZeroHpcField { field: "ranks" })
        );
        let mut hpc = spec();
        hpc.launcher = Some(LauncherKind::Srun);
        hpc.nodes = 2;
        assert_eq!(hpc.layout().unwrap().unwrap().launcher, LauncherKind::Srun);
        hpc.launcher = Some(LauncherKind::Script);
        assert_eq!(hpc.layout(), Err(SpecError::ScriptWithoutPmi));
        hpc.mpi = Some(MpiKind::Pmi);
        assert_eq!(
            hpc.layout().unwrap().unwrap().launcher,
            LauncherKind::Script
        );
        assert!("mpich2".parse::<MpiKind>().is_err());
        let json = r#"{"argv": ["./ring"], "nodes": 2, "mpi": "lam"}"#;
        let error = serde_json::from_str::<TaskSpec>(json)
            .unwrap_err()
            .to_string();
        assert!(error.contains("unknown variant `lam`"), "{error}");
    }
}
