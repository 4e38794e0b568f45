//! How an HPC job's ranks start: which MPI, and what starts its remote daemons. The
//! core schedules an HPC job as a gang and never reads these; they live here so that
//! the job spec, the wire and the agents name them with one type.

use std::str::FromStr;

/// Which MPI starts an HPC job's ranks, or how they wire up. In specs and JSON:
/// `"none"`, `"openmpi"`, `"mpich"`, `"pmi"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(
    feature = "rkyv",
    derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize),
    rkyv(derive(Debug, Clone, Copy, PartialEq, Eq), compare(PartialEq))
)]
pub enum MpiKind {
    /// No MPI: Saker starts each rank itself, with a rendezvous environment.
    #[default]
    None,
    /// OpenMPI's `mpirun.openmpi`, with Saker's agents as its remote shell.
    Openmpi,
    /// MPICH's `mpiexec.mpich` (hydra), with Saker's agents as its remote shell.
    Mpich,
    /// No launcher: the agents start every rank themselves and serve it the PMI-1
    /// wire protocol (MPICH, MVAPICH, Intel MPI). Under `srun`: `--mpi=pmi2`.
    Pmi,
}

/// What starts an MPI job's remote daemons. In specs and JSON: `"agents"`, `"srun"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
#[cfg_attr(
    feature = "rkyv",
    derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize),
    rkyv(derive(Debug, Clone, Copy, PartialEq, Eq), compare(PartialEq))
)]
pub enum LauncherKind {
    /// Saker's own agents, in the slots the job holds (the default).
    #[default]
    Agents,
    /// One `srun --overlap --exact` step on the job's nodes (inside Slurm).
    Srun,
    /// The job's command runs once, on the first node, as a batch script does; each
    /// `saker mpiexec` in it has the agents start the ranks (PMI jobs only).
    Script,
}

impl MpiKind {
    /// The name specs, the CLI and JSON use.
    pub fn name(self) -> &'static str {
        match self {
            MpiKind::None => "none",
            MpiKind::Openmpi => "openmpi",
            MpiKind::Mpich => "mpich",
            MpiKind::Pmi => "pmi",
        }
    }
}

impl LauncherKind {
    /// The name specs, the CLI and JSON use.
    pub fn name(self) -> &'static str {
        match self {
            LauncherKind::Agents => "agents",
            LauncherKind::Srun => "srun",
            LauncherKind::Script => "script",
        }
    }
}

/// A name that is no MPI, or no launcher.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownKind {
    #[error("unknown MPI {name:?}: use none, openmpi, mpich or pmi")]
    Mpi { name: String },
    #[error("unknown launcher {name:?}: use agents, srun or script")]
    Launcher { name: String },
}

impl FromStr for MpiKind {
    type Err = UnknownKind;

    fn from_str(text: &str) -> Result<Self, UnknownKind> {
        [
            MpiKind::None,
            MpiKind::Openmpi,
            MpiKind::Mpich,
            MpiKind::Pmi,
        ]
        .into_iter()
        .find(|kind| kind.name() == text)
        .ok_or_else(|| UnknownKind::Mpi {
            name: text.to_owned(),
        })
    }
}

impl FromStr for LauncherKind {
    type Err = UnknownKind;

    fn from_str(text: &str) -> Result<Self, UnknownKind> {
        [
            LauncherKind::Agents,
            LauncherKind::Srun,
            LauncherKind::Script,
        ]
        .into_iter()
        .find(|kind| kind.name() == text)
        .ok_or_else(|| UnknownKind::Launcher {
            name: text.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_others_are_refused_with_the_choices() {
        for kind in [
            MpiKind::None,
            MpiKind::Openmpi,
            MpiKind::Mpich,
            MpiKind::Pmi,
        ] {
            assert_eq!(kind.name().parse::<MpiKind>(), Ok(kind));
        }
        for kind in [
            LauncherKind::Agents,
            LauncherKind::Srun,
            LauncherKind::Script,
        ] {
            assert_eq!(kind.name().parse::<LauncherKind>(), Ok(kind));
        }
        let error = "mpich2".parse::<MpiKind>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown MPI \"mpich2\": use none, openmpi, mpich or pmi"
        );
        assert!("ssh".parse::<LauncherKind>().is_err());
    }
}
