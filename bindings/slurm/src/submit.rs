//! Batch submission ([`submit_batch`], like `sbatch`) and [`cancel`] (like `scancel`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::SlurmJobId;
use crate::error::SlurmError;

/// A batch job to submit; the fields map to `sbatch` options. Start from
/// [`BatchRequest::new`] and set what you need.
///
/// Like `sbatch`, submission adds to the job's environment `SLURM_SUBMIT_DIR` (this
/// process's directory), `SLURM_SUBMIT_HOST`, `SLURM_JOB_NAME` (with a name), and
/// `SLURM_NTASKS`, `SLURM_NPROCS`, `SLURM_NTASKS_PER_NODE` (with `ntasks_per_node`);
/// `srun` inside the job reads the task counts from there. slurmd adds the rest
/// (`SLURM_JOB_ID`, `SLURM_JOB_NODELIST`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRequest {
    /// The whole script; it must start with `#!`. `#SBATCH` lines in it are *not*
    /// read (that is `sbatch`'s job, not libslurm's): use the fields.
    pub script: String,
    /// `--job-name`; Slurm's default is empty.
    pub name: Option<String>,
    /// `--nodes=N`: exactly this many nodes (minimum and maximum). At least 1.
    pub nodes: u32,
    /// `--ntasks-per-node`; also sets `--ntasks` to `nodes × ntasks_per_node`, as
    /// `sbatch` does.
    pub ntasks_per_node: Option<u16>,
    /// `--time` in minutes; `None` takes the partition's default.
    pub time_limit_minutes: Option<u32>,
    /// `--partition`; `None` takes the cluster's default.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--chdir`; `None` takes this process's current directory, as `sbatch` does.
    pub working_directory: Option<PathBuf>,
    /// `--output`; `None` is Slurm's `slurm-%j.out` in the working directory. Slurm's
    /// `%j`-style patterns work.
    pub stdout: Option<PathBuf>,
    /// `--error`; `None` goes to the same file as stdout.
    pub stderr: Option<PathBuf>,
    /// The job's environment as `NAME=value` strings, passed as given. `None` copies
    /// this process's environment (`sbatch --export=ALL`) *without* its `SLURM_*` and
    /// `SLURMD_*` variables other than `SLURM_CONF`: they describe the job we may be
    /// running in, and a continuation job submitted from inside an allocation must not
    /// inherit its node list or task counts. Either way the variables `sbatch` itself
    /// adds are set ([`BatchRequest`] has the list). libslurm refuses a job without
    /// an environment.
    pub environment: Option<Vec<String>>,
    /// `--dependency`, e.g. `afterany:123` (a continuation allocation).
    pub dependency: Option<String>,
    /// `--exclusive`: whole nodes, every CPU of each (no other job shares them).
    pub exclusive: bool,
}

impl BatchRequest {
    /// A request for `nodes` nodes running `script`, everything else Slurm's default.
    pub fn new(script: impl Into<String>, nodes: u32) -> Self {
        BatchRequest {
            script: script.into(),
            name: None,
            nodes,
            ntasks_per_node: None,
            time_limit_minutes: None,
            partition: None,
            account: None,
            working_directory: None,
            stdout: None,
            stderr: None,
            environment: None,
            dependency: None,
            exclusive: false,
        }
    }

    /// Checks what libslurm would otherwise misread or reject late.
    pub(crate) fn validate(&self) -> Result<(), SlurmError> {
        let invalid = |field, reason| Err(SlurmError::InvalidRequest { field, reason });
        if self.nodes == 0 {
            return invalid("nodes", "a job needs at least one node");
        }
        if !self.script.starts_with("#!") {
            return invalid("script", "a batch script must start with #!");
        }
        if self.ntasks_per_node == Some(0) {
            return invalid("ntasks_per_node", "must be at least 1");
        }
        if let Some(minutes) = self.time_limit_minutes
            && (minutes == 0 || minutes >= NO_VAL)
        {
            return invalid(
                "time_limit_minutes",
                "must be between 1 and 4294967293 minutes",
            );
        }
        if let Some(per_node) = self.ntasks_per_node
            && u64::from(self.nodes) * u64::from(per_node) >= u64::from(NO_VAL)
        {
            return invalid("ntasks_per_node", "nodes × ntasks_per_node is too large");
        }
        Ok(())
    }
}

/// The job's environment as `NAME=value` byte strings (see
/// [`BatchRequest::environment`]): `request.environment`, or `current` without its
/// job-describing variables, then the variables `sbatch` adds, replacing any of the
/// same name.
#[cfg_attr(not(saker_slurm), allow(dead_code))]
pub(crate) fn job_environment(
    request: &BatchRequest,
    current: impl Iterator<Item = (OsString, OsString)>,
    submit_directory: Option<&Path>,
    submit_host: Option<&str>,
) -> Vec<Vec<u8>> {
    let mut added: Vec<(&str, Vec<u8>)> = Vec::new();
    if let Some(directory) = submit_directory {
        added.push((
            "SLURM_SUBMIT_DIR",
            directory.as_os_str().as_encoded_bytes().to_vec(),
        ));
    }
    if let Some(host) = submit_host {
        added.push(("SLURM_SUBMIT_HOST", host.as_bytes().to_vec()));
    }
    if let Some(name) = &request.name {
        added.push(("SLURM_JOB_NAME", name.as_bytes().to_vec()));
    }
    if let Some(per_node) = request.ntasks_per_node {
        let tasks = (u64::from(request.nodes) * u64::from(per_node)).to_string();
        added.push(("SLURM_NTASKS", tasks.clone().into_bytes()));
        added.push(("SLURM_NPROCS", tasks.into_bytes()));
        added.push(("SLURM_NTASKS_PER_NODE", per_node.to_string().into_bytes()));
    }

    let base: Vec<Vec<u8>> = match &request.environment {
        Some(pairs) => pairs.iter().map(|pair| pair.as_bytes().to_vec()).collect(),
        None => current
            .filter(|(name, _)| inherited_variable(name.as_encoded_bytes()))
            .map(|(name, value)| {
                let mut pair = name.into_encoded_bytes();
                pair.push(b'=');
                pair.extend_from_slice(value.as_encoded_bytes());
                pair
            })
            .collect(),
    };
    let replaced = |pair: &Vec<u8>| {
        let name = pair.split(|&byte| byte == b'=').next().unwrap_or_default();
        added
            .iter()
            .any(|(added_name, _)| added_name.as_bytes() == name)
    };
    let mut environment: Vec<Vec<u8>> = base.into_iter().filter(|pair| !replaced(pair)).collect();
    environment.extend(added.into_iter().map(|(name, value)| {
        let mut pair = name.as_bytes().to_vec();
        pair.push(b'=');
        pair.extend_from_slice(&value);
        pair
    }));
    environment
}

/// Whether a variable of this process goes into a job it submits with a copy of its
/// environment: all but the `SLURM_*` and `SLURMD_*` variables that describe the job
/// this process may run in (`SLURM_CONF` is kept).
pub(crate) fn inherited_variable(name: &[u8]) -> bool {
    name == b"SLURM_CONF" || !(name.starts_with(b"SLURM_") || name.starts_with(b"SLURMD_"))
}

/// Slurm's "no value" marker for 32-bit fields (`NO_VAL` in slurm.h), and the first of
/// the reserved values (`INFINITE` is the next one).
const NO_VAL: u32 = 0xffff_fffe;

/// Submits a batch job (`slurm_submit_batch_job`; `sbatch` in a build without
/// libslurm, see [`crate::commands`]) and returns its id.
///
/// Errors: [`SlurmError::InvalidRequest`] (checked before any call),
/// [`SlurmError::InteriorNul`], [`SlurmError::Unavailable`], [`SlurmError::NoConfig`],
/// and [`SlurmError::Call`] with Slurm's reason when the controller refuses the job.
pub fn submit_batch(request: &BatchRequest) -> Result<SlurmJobId, SlurmError> {
    request.validate()?;
    #[cfg(saker_slurm)]
    {
        crate::libslurm::submit_batch(request)
    }
    #[cfg(not(saker_slurm))]
    {
        crate::commands::submit_batch(request)
    }
}

/// Cancels a job (`signal: None`: `SIGKILL` through the controller, like `scancel`;
/// the job ends `CANCELLED`), or sends `signal` to the batch script and every step
/// (`scancel --full --signal`), e.g. `SIGTERM` to let a pilot drain. A build without
/// libslurm runs `scancel` ([`crate::commands`]).
///
/// Errors: [`SlurmError::UnknownJob`], [`SlurmError::JobFinished`],
/// [`SlurmError::InvalidRequest`] for a signal outside `1..=65535`,
/// [`SlurmError::Unavailable`], [`SlurmError::NoConfig`], [`SlurmError::Call`].
pub fn cancel(job_id: SlurmJobId, signal: Option<i32>) -> Result<(), SlurmError> {
    let signal = match signal {
        None => None,
        Some(number) => Some(u16::try_from(number).ok().filter(|&n| n > 0).ok_or(
            SlurmError::InvalidRequest {
                field: "signal",
                reason: "must be between 1 and 65535",
            },
        )?),
    };
    #[cfg(saker_slurm)]
    {
        crate::libslurm::kill_job(job_id, signal)
    }
    #[cfg(not(saker_slurm))]
    {
        crate::commands::cancel(job_id, signal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason_for(request: &BatchRequest) -> Option<&'static str> {
        match request.validate() {
            Ok(()) => None,
            Err(SlurmError::InvalidRequest { field, .. }) => Some(field),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn validation_catches_what_slurm_would_misread() {
        let good = BatchRequest::new("#!/bin/sh\ntrue\n", 2);
        assert_eq!(reason_for(&good), None);
        assert_eq!(
            reason_for(&BatchRequest::new("#!/bin/sh", 0)),
            Some("nodes")
        );
        assert_eq!(reason_for(&BatchRequest::new("echo hi", 1)), Some("script"));
        for minutes in [0, NO_VAL, u32::MAX] {
            let request = BatchRequest {
                time_limit_minutes: Some(minutes),
                ..good.clone()
            };
            assert_eq!(
                reason_for(&request),
                Some("time_limit_minutes"),
                "{minutes}"
            );
        }
        for per_node in [0, u16::MAX] {
            let request = BatchRequest {
                nodes: u32::MAX / 2,
                ntasks_per_node: Some(per_node),
                ..good.clone()
            };
            assert_eq!(reason_for(&request), Some("ntasks_per_node"), "{per_node}");
        }
    }

    fn strings(environment: Vec<Vec<u8>>) -> Vec<String> {
        environment
            .into_iter()
            .map(|pair| String::from_utf8(pair).expect("test values are UTF-8"))
            .collect()
    }

    #[test]
    fn copied_environment_drops_the_current_jobs_variables() {
        let current = [
            ("PATH", "/bin"),
            ("SLURM_CONF", "/etc/slurm.conf"),
            ("SLURM_JOB_ID", "41"),
            ("SLURM_NTASKS", "6"),
            ("SLURMD_NODENAME", "n1"),
            ("OMP_NUM_THREADS", "2"),
        ]
        .map(|(name, value)| (OsString::from(name), OsString::from(value)));
        let request = BatchRequest {
            name: Some("next".into()),
            ntasks_per_node: Some(3),
            ..BatchRequest::new("#!/bin/sh", 2)
        };
        let environment = job_environment(
            &request,
            current.into_iter(),
            Some(Path::new("/home/me")),
            Some("login1"),
        );
        assert_eq!(
            strings(environment),
            [
                "PATH=/bin",
                "SLURM_CONF=/etc/slurm.conf",
                "OMP_NUM_THREADS=2",
                "SLURM_SUBMIT_DIR=/home/me",
                "SLURM_SUBMIT_HOST=login1",
                "SLURM_JOB_NAME=next",
                "SLURM_NTASKS=6",
                "SLURM_NPROCS=6",
                "SLURM_NTASKS_PER_NODE=3",
            ]
        );
    }

    #[test]
    fn explicit_environment_is_kept_but_sbatchs_variables_win() {
        let request = BatchRequest {
            environment: Some(vec![
                "A=1".into(),
                "SLURM_JOB_NAME=old".into(),
                "SLURM_MPI_TYPE=pmix".into(),
                "B==2".into(),
            ]),
            name: Some("new".into()),
            ..BatchRequest::new("#!/bin/sh", 1)
        };
        let current = [(OsString::from("IGNORED"), OsString::from("1"))];
        assert_eq!(
            strings(job_environment(&request, current.into_iter(), None, None)),
            ["A=1", "SLURM_MPI_TYPE=pmix", "B==2", "SLURM_JOB_NAME=new"]
        );
    }

    #[test]
    fn cancel_rejects_impossible_signals_before_any_call() {
        for signal in [0, -9, 65_536] {
            assert!(
                matches!(
                    cancel(SlurmJobId(1), Some(signal)),
                    Err(SlurmError::InvalidRequest {
                        field: "signal",
                        ..
                    })
                ),
                "{signal}"
            );
        }
    }
}
