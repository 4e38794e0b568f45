//! What Slurm knows about a job: [`job_info`] (libslurm), [`current_job`], and
//! [`JobInfo::from_env`] (the job's environment only, no libslurm).

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use crate::error::{EnvValueError, SlurmError};
use crate::hostlist::{self, MAX_HOSTS};

/// A Slurm job id (`SLURM_JOB_ID`, `sbatch --parsable`): a batch allocation, not a
/// pilot's job (`saker_core::JobId`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlurmJobId(pub u32);

impl fmt::Display for SlurmJobId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(formatter)
    }
}

impl FromStr for SlurmJobId {
    type Err = std::num::ParseIntError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.trim().parse().map(SlurmJobId)
    }
}

/// One job as Slurm describes it; what a pilot needs to span and outlive nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub job_id: SlurmJobId,
    /// The job's name (`--job-name`); empty if unknown.
    pub name: String,
    /// The partition it runs in; empty if unknown.
    pub partition: String,
    /// Slurm's state word as `scontrol` prints it (`PENDING`, `RUNNING`, `CANCELLED`,
    /// `COMPLETING`, …). From the environment it is always `RUNNING`.
    pub state: String,
    /// Every node of the allocation, expanded, in Slurm's order (node 0 first). Empty
    /// while the job is pending.
    pub nodes: Vec<String>,
    /// The node running the batch script (node 0 of a batch job); `None` for
    /// `salloc`/`srun` allocations, pending jobs, and [`JobInfo::from_env`].
    pub batch_host: Option<String>,
    /// CPUs allocated on each node, parallel to `nodes`; empty if Slurm did not say.
    pub cpus_per_node: Vec<u32>,
    /// CPUs allocated in total (requested, while pending).
    pub num_cpus: u32,
    /// When the job started (or is expected to start).
    pub start_time: Option<SystemTime>,
    /// When the allocation ends: the time limit from the start, or the actual end once
    /// the job has ended. `None` while unknown or when the limit is `UNLIMITED` (as
    /// `scontrol` prints `EndTime=Unknown`; Slurm stores start + one year then).
    /// A pilot stops starting work that cannot finish before this.
    pub end_time: Option<SystemTime>,
    /// The time limit; `None` for `UNLIMITED` or not (yet) set.
    pub time_limit: Option<Duration>,
}

/// Information about one job, from the controller (`slurm_load_job`; `squeue` in a
/// build without libslurm, see [`crate::commands`]).
///
/// Errors: [`SlurmError::UnknownJob`], [`SlurmError::Unavailable`] without libslurm
/// and without Slurm's commands, [`SlurmError::Command`] when a command fails,
/// [`SlurmError::NoConfig`] (instead of libslurm ending the process),
/// [`SlurmError::Call`] when the controller cannot be reached.
pub fn job_info(job_id: SlurmJobId) -> Result<JobInfo, SlurmError> {
    #[cfg(saker_slurm)]
    {
        crate::libslurm::load_job(job_id)
    }
    #[cfg(not(saker_slurm))]
    {
        crate::commands::job_info(job_id)
    }
}

/// Every job of this process's user that the controller still knows (pending,
/// running, and ended within its `MinJobAge`), from `slurm_load_job_user` (`squeue
/// --me` without libslurm). A pilot finds its own jobs among them by name.
///
/// Errors: as [`job_info`], except that no job is an empty list.
pub fn user_jobs() -> Result<Vec<JobInfo>, SlurmError> {
    #[cfg(saker_slurm)]
    {
        crate::libslurm::load_own_jobs()
    }
    #[cfg(not(saker_slurm))]
    {
        crate::commands::user_jobs()
    }
}

/// The job this process runs in (`SLURM_JOB_ID`): from the controller (libslurm, or
/// Slurm's commands in a build without it), or from the environment
/// ([`JobInfo::from_env`], no end time before Slurm 23.02) when neither is there or no
/// configuration is found. Other errors (controller unreachable) are returned, not
/// papered over: the end time matters to a pilot. CPUs per node the controller's
/// answer lacks (squeue has none) are taken from the environment.
pub fn current_job() -> Result<JobInfo, SlurmError> {
    let variable = |name: &str| std::env::var(name).ok();
    let job_id = job_id_from(&variable)?;
    match job_info(job_id) {
        Err(SlurmError::Unavailable | SlurmError::NoConfig) => JobInfo::from_env(variable),
        Ok(mut info) if info.cpus_per_node.is_empty() => {
            if let Ok(from_env) = JobInfo::from_env(variable)
                && from_env.cpus_per_node.len() == info.nodes.len()
            {
                info.cpus_per_node = from_env.cpus_per_node;
            }
            Ok(info)
        }
        result => result,
    }
}

impl JobInfo {
    /// Reads the job from the variables Slurm sets in a job's environment, through
    /// `variable` (pass `|name| std::env::var(name).ok()` for the real one).
    ///
    /// Uses `SLURM_JOB_ID` (required), `SLURM_JOB_NODELIST` (or `SLURM_NODELIST`),
    /// `SLURM_JOB_CPUS_PER_NODE` (`4(x3),2`; else `SLURM_CPUS_ON_NODE` for a one-node
    /// job), `SLURM_JOB_NAME`, `SLURM_JOB_PARTITION`, and `SLURM_JOB_START_TIME` /
    /// `SLURM_JOB_END_TIME` (Unix seconds, set by Slurm ≥ 23.02 only; 22.05 gives no
    /// end time, so `end_time` and `time_limit` are then `None`).
    pub fn from_env(variable: impl Fn(&str) -> Option<String>) -> Result<JobInfo, SlurmError> {
        let job_id = job_id_from(&variable)?;
        let nodes = match variable("SLURM_JOB_NODELIST").or_else(|| variable("SLURM_NODELIST")) {
            Some(list) => {
                hostlist::expand_pure(&list).map_err(|source| SlurmError::InvalidEnvironment {
                    variable: "SLURM_JOB_NODELIST",
                    value: list.clone(),
                    source: EnvValueError::Hostlist(source),
                })?
            }
            None => Vec::new(),
        };
        let cpus_per_node = match variable("SLURM_JOB_CPUS_PER_NODE") {
            Some(value) => parse_cpus_per_node(&value, nodes.len()).map_err(|source| {
                SlurmError::InvalidEnvironment {
                    variable: "SLURM_JOB_CPUS_PER_NODE",
                    value,
                    source,
                }
            })?,
            None => match variable("SLURM_CPUS_ON_NODE") {
                Some(value) if nodes.len() == 1 => {
                    vec![parse_number("SLURM_CPUS_ON_NODE", &value)?]
                }
                _ => Vec::new(),
            },
        };
        let start_time = unix_time_from(&variable, "SLURM_JOB_START_TIME")?;
        let end_time = unix_time_from(&variable, "SLURM_JOB_END_TIME")?;
        let time_limit = match (start_time, end_time) {
            (Some(start), Some(end)) => end.duration_since(start).ok(),
            _ => None,
        };
        Ok(JobInfo {
            job_id,
            name: variable("SLURM_JOB_NAME").unwrap_or_default(),
            partition: variable("SLURM_JOB_PARTITION").unwrap_or_default(),
            state: "RUNNING".to_owned(),
            num_cpus: cpus_per_node.iter().sum(),
            nodes,
            batch_host: None,
            cpus_per_node,
            start_time,
            end_time,
            time_limit,
        })
    }
}

fn job_id_from(variable: &impl Fn(&str) -> Option<String>) -> Result<SlurmJobId, SlurmError> {
    let value = variable("SLURM_JOB_ID").ok_or(SlurmError::NotInJob)?;
    parse_number("SLURM_JOB_ID", &value).map(SlurmJobId)
}

fn parse_number(variable: &'static str, value: &str) -> Result<u32, SlurmError> {
    value
        .trim()
        .parse()
        .map_err(|source| SlurmError::InvalidEnvironment {
            variable,
            value: value.to_owned(),
            source: EnvValueError::Number(source),
        })
}

fn unix_time_from(
    variable: &impl Fn(&str) -> Option<String>,
    name: &'static str,
) -> Result<Option<SystemTime>, SlurmError> {
    let Some(value) = variable(name) else {
        return Ok(None);
    };
    let seconds: u64 = value
        .trim()
        .parse()
        .map_err(|source| SlurmError::InvalidEnvironment {
            variable: name,
            value: value.clone(),
            source: EnvValueError::Number(source),
        })?;
    Ok((seconds > 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)))
}

/// Parses Slurm's run-length CPU list (`SLURM_JOB_CPUS_PER_NODE`, `SLURM_TASKS_PER_NODE`):
/// `4(x3),2` is four CPUs on each of three nodes, then two on one. It must describe
/// exactly `nodes` nodes when a node list is known (`nodes > 0`).
pub(crate) fn parse_cpus_per_node(value: &str, nodes: usize) -> Result<Vec<u32>, EnvValueError> {
    let mut counts = Vec::new();
    for item in value.split(',') {
        let item = item.trim();
        let malformed = || EnvValueError::CpuCount {
            item: item.to_owned(),
        };
        let (count, repeat) = match item.split_once('(') {
            None => (item, 1),
            Some((count, rest)) => {
                let repeat = rest
                    .strip_prefix('x')
                    .and_then(|rest| rest.strip_suffix(')'))
                    .ok_or_else(malformed)?;
                if repeat.is_empty() || !repeat.bytes().all(|byte| byte.is_ascii_digit()) {
                    return Err(malformed());
                }
                (
                    count,
                    repeat.parse::<usize>().map_err(EnvValueError::Number)?,
                )
            }
        };
        if count.is_empty() || !count.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(malformed());
        }
        let count: u32 = count.parse().map_err(EnvValueError::Number)?;
        if repeat > MAX_HOSTS - counts.len() {
            return Err(EnvValueError::TooManyNodes { limit: MAX_HOSTS });
        }
        counts.extend(std::iter::repeat_n(count, repeat));
    }
    if nodes > 0 && counts.len() != nodes {
        return Err(EnvValueError::CountMismatch {
            counts: counts.len(),
            nodes,
        });
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn environment(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn cpus_per_node_run_lengths() {
        assert_eq!(parse_cpus_per_node("4(x3),2", 4), Ok(vec![4, 4, 4, 2]));
        assert_eq!(parse_cpus_per_node("1(x2)", 2), Ok(vec![1, 1]));
        assert_eq!(parse_cpus_per_node("8", 1), Ok(vec![8]));
        assert_eq!(parse_cpus_per_node("2,3(x1),4", 0), Ok(vec![2, 3, 4]));
        assert_eq!(parse_cpus_per_node("36(x2), 12", 3), Ok(vec![36, 36, 12]));
    }

    #[test]
    fn cpus_per_node_rejects_malformed_and_mismatched() {
        for bad in [
            "", "4(x)", "4(3)", "4(x3", "x4", "4(x-1)", "-4", "4,,2", "4(x3)x",
        ] {
            assert!(
                matches!(
                    parse_cpus_per_node(bad, 0),
                    Err(EnvValueError::CpuCount { .. })
                ),
                "{bad:?}: {:?}",
                parse_cpus_per_node(bad, 0)
            );
        }
        assert!(matches!(
            parse_cpus_per_node("99999999999", 0),
            Err(EnvValueError::Number(_))
        ));
        assert_eq!(
            parse_cpus_per_node("4(x3)", 2),
            Err(EnvValueError::CountMismatch {
                counts: 3,
                nodes: 2
            })
        );
        // A hostile repeat count is refused before anything is allocated.
        assert_eq!(
            parse_cpus_per_node("1(x4000000000)", 0),
            Err(EnvValueError::TooManyNodes { limit: MAX_HOSTS })
        );
    }

    #[test]
    fn from_env_inside_a_batch_job() {
        // What Slurm 22.05 put in a `sbatch -N 3` job's environment on the test cluster.
        let info = JobInfo::from_env(environment(&[
            ("SLURM_JOB_ID", "22"),
            ("SLURM_JOB_NODELIST", "n[1-2],n4"),
            ("SLURM_JOB_CPUS_PER_NODE", "4(x2),1"),
            ("SLURM_CPUS_ON_NODE", "4"),
            ("SLURM_JOB_NAME", "pilot"),
            ("SLURM_JOB_PARTITION", "debug"),
        ]))
        .expect("complete environment");
        assert_eq!(
            info,
            JobInfo {
                job_id: SlurmJobId(22),
                name: "pilot".into(),
                partition: "debug".into(),
                state: "RUNNING".into(),
                nodes: vec!["n1".into(), "n2".into(), "n4".into()],
                batch_host: None,
                cpus_per_node: vec![4, 4, 1],
                num_cpus: 9,
                start_time: None,
                end_time: None,
                time_limit: None,
            }
        );
    }

    #[test]
    fn from_env_minimal_and_newer_slurm_times() {
        let info = JobInfo::from_env(environment(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_NODELIST", "c05"),
            ("SLURM_CPUS_ON_NODE", "16"),
            ("SLURM_JOB_START_TIME", "1700000000"),
            ("SLURM_JOB_END_TIME", "1700003600"),
        ]))
        .expect("minimal environment");
        assert_eq!(info.nodes, vec!["c05".to_owned()]);
        assert_eq!(info.cpus_per_node, vec![16]);
        assert_eq!(
            info.end_time,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_003_600))
        );
        assert_eq!(info.time_limit, Some(Duration::from_secs(3600)));

        // SLURM_CPUS_ON_NODE describes this node only: not used for several nodes.
        let info = JobInfo::from_env(environment(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_NODELIST", "c[1-2]"),
            ("SLURM_CPUS_ON_NODE", "16"),
        ]))
        .expect("valid environment");
        assert_eq!((info.cpus_per_node, info.num_cpus), (vec![], 0));
    }

    #[test]
    fn from_env_errors_name_the_variable() {
        assert!(matches!(
            JobInfo::from_env(environment(&[])),
            Err(SlurmError::NotInJob)
        ));
        let cases = [
            (vec![("SLURM_JOB_ID", "abc")], "SLURM_JOB_ID"),
            (
                vec![("SLURM_JOB_ID", "1"), ("SLURM_JOB_NODELIST", "n[2-1]")],
                "SLURM_JOB_NODELIST",
            ),
            (
                vec![
                    ("SLURM_JOB_ID", "1"),
                    ("SLURM_JOB_NODELIST", "n[1-2]"),
                    ("SLURM_JOB_CPUS_PER_NODE", "4(x3)"),
                ],
                "SLURM_JOB_CPUS_PER_NODE",
            ),
            (
                vec![("SLURM_JOB_ID", "1"), ("SLURM_JOB_END_TIME", "soon")],
                "SLURM_JOB_END_TIME",
            ),
        ];
        for (pairs, expected) in cases {
            match JobInfo::from_env(environment(&pairs)) {
                Err(SlurmError::InvalidEnvironment { variable, .. }) => {
                    assert_eq!(variable, expected, "{pairs:?}")
                }
                other => panic!("{pairs:?}: expected an invalid {expected}, got {other:?}"),
            }
        }
    }

    #[test]
    fn job_id_parses_and_prints() {
        assert_eq!(" 123\n".parse::<SlurmJobId>(), Ok(SlurmJobId(123)));
        assert!("12a".parse::<SlurmJobId>().is_err());
        assert_eq!(SlurmJobId(42).to_string(), "42");
    }
}
