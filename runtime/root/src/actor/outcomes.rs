//! How an attempt's outcome reads in a result record and an attempt note: exit code,
//! signal, reason and the kind of failure, from an agent's report read in place
//! (archived) or from a gang part's result (owned).

use saker_core::{AttemptOutcome, NodeId};
use saker_wire::messages::{
    ArchivedOutcome, ArchivedOutput, ArchivedResultBody, ArchivedTaskResult, Outcome,
};

use super::results::Detail;
use saker_client::attempts::{AttemptEnd, AttemptNote};
use saker_client::results::{Failure, Timestamp, lossy_text};

/// Whether a task killed by `signal` was stopped from outside rather than failed:
/// SIGHUP, SIGINT and SIGTERM are how a batch system ends an allocation (Slurm's
/// `scancel`, time limit and preemption, PBS's `qdel`: SIGTERM; LSF's `bkill`:
/// SIGINT first) and how an operator stops a session. An agent never sends them (its
/// own stops kill with SIGKILL and report the attempt cancelled or timed out), and a
/// batch system signals the tasks of a step before their agent: one that dies first
/// has its end reported by an agent about to die too. Counted as the task's failure,
/// such an end failed tasks of every allocation cancelled under them; as a loss it is
/// replayed, within the task's `max_replays`. (SIGKILL stays the task's own: it is
/// also the kernel's out-of-memory kill.)
fn stopped_from_outside(signal: i32) -> bool {
    const SIGHUP: i32 = 1;
    const SIGINT: i32 = 2;
    const SIGTERM: i32 = 15;
    matches!(signal, SIGHUP | SIGINT | SIGTERM)
}

/// What an attempt that ended so means to the core.
pub(super) fn core_outcome(outcome: &ArchivedOutcome) -> AttemptOutcome {
    match outcome {
        ArchivedOutcome::Exited { code } if code.to_native() == 0 => AttemptOutcome::Succeeded,
        // A stop signal no agent sends: stopped from outside, so lost.
        ArchivedOutcome::Signaled { signal } if stopped_from_outside(signal.to_native()) => {
            AttemptOutcome::Lost
        }
        ArchivedOutcome::Exited { .. }
        | ArchivedOutcome::Signaled { .. }
        | ArchivedOutcome::TimedOut
        | ArchivedOutcome::OutOfMemory { .. }
        | ArchivedOutcome::SpawnFailed { .. }
        | ArchivedOutcome::WorkerFailed { .. }
        | ArchivedOutcome::Raised { .. } => AttemptOutcome::Failed,
        ArchivedOutcome::Lost { .. } => AttemptOutcome::Lost,
        ArchivedOutcome::Cancelled => AttemptOutcome::Cancelled,
    }
}

/// Exit code, signal and reason of an outcome, as a result record shows them.
fn describe(outcome: &ArchivedOutcome) -> (Option<i32>, Option<i32>, Option<String>) {
    match outcome {
        ArchivedOutcome::Exited { code } => (Some(code.to_native()), None, None),
        ArchivedOutcome::Signaled { signal } if stopped_from_outside(signal.to_native()) => {
            let signal = signal.to_native();
            let reason = format!(
                "killed by signal {signal} ({}) from outside Saker (its allocation \
                 ending, or an operator)",
                saker_client::results::signal_name(signal)
            );
            (None, Some(signal), Some(reason))
        }
        ArchivedOutcome::Signaled { signal } => {
            let signal = signal.to_native();
            (
                None,
                Some(signal),
                Some(format!("killed by signal {signal}")),
            )
        }
        ArchivedOutcome::TimedOut => (None, None, Some("time limit exceeded".into())),
        ArchivedOutcome::OutOfMemory { limit_mib } => {
            (None, Some(9), Some(out_of_memory(limit_mib.to_native())))
        }
        ArchivedOutcome::SpawnFailed { reason } | ArchivedOutcome::WorkerFailed { reason } => {
            (None, None, Some(reason.as_str().to_owned()))
        }
        ArchivedOutcome::Lost { reason } => (None, None, Some(format!("lost: {reason}"))),
        ArchivedOutcome::Cancelled => (None, None, Some("stopped by its agent".into())),
        ArchivedOutcome::Raised { message } => (None, None, Some(format!("raised: {message}"))),
    }
}

/// How an attempt that ended so failed, for the result's `failure` (`None`: it did not).
fn failure_of(outcome: &ArchivedOutcome) -> Option<Failure> {
    Some(match outcome {
        ArchivedOutcome::Exited { code } if code.to_native() == 0 => return None,
        ArchivedOutcome::Exited { .. } => Failure::Exit,
        ArchivedOutcome::Signaled { signal } if stopped_from_outside(signal.to_native()) => {
            Failure::Lost
        }
        ArchivedOutcome::Signaled { .. } => Failure::Signal,
        ArchivedOutcome::TimedOut => Failure::TimeLimit,
        ArchivedOutcome::OutOfMemory { .. } => Failure::OutOfMemory,
        ArchivedOutcome::SpawnFailed { .. } => Failure::Spawn,
        ArchivedOutcome::WorkerFailed { .. } => Failure::WorkerStart,
        ArchivedOutcome::Raised { .. } => Failure::Raised,
        ArchivedOutcome::Lost { .. } => Failure::Lost,
        ArchivedOutcome::Cancelled => return None,
    })
}

/// The reason of an attempt killed at its memory limit.
fn out_of_memory(limit_mib: u32) -> String {
    format!("out of memory: killed at its limit of {limit_mib} MiB")
}

impl Detail {
    /// What the result record will keep of an accepted attempt on `node` (`host`):
    /// the one copy out of the agent's frame.
    pub(super) fn read(node: NodeId, host: String, result: &ArchivedTaskResult) -> Detail {
        let (exit_code, signal, mut reason) = describe(&result.outcome);
        if matches!(result.outcome, ArchivedOutcome::Cancelled) {
            reason = Some("cancelled".into());
        }
        let executor = result.executor.to_native();
        let spill = |output: &ArchivedOutput| output.spill_path.as_ref().map(|p| p.to_string());
        let (stdout, stderr, stdout_path, stderr_path, output) = match &result.body {
            ArchivedResultBody::Command { stdout, stderr } => (
                lossy_text(&stdout.inline),
                lossy_text(&stderr.inline),
                spill(stdout),
                spill(stderr),
                None,
            ),
            ArchivedResultBody::Function { output } => (
                String::new(),
                String::new(),
                None,
                None,
                output.as_ref().map(|bytes| bytes.as_slice().to_vec()),
            ),
            // A part of a gang that is no longer in flight: only ever a duplicate.
            ArchivedResultBody::Part { stdout, stderr, .. } => (
                lossy_text(&stdout.inline),
                lossy_text(&stderr.inline),
                spill(stdout),
                spill(stderr),
                None,
            ),
        };
        Detail {
            node,
            host,
            executor: (executor != u32::MAX).then_some(executor),
            received_unix_us: result.received_unix_us.to_native(),
            fetch_us: result.fetch_us.to_native(),
            start_unix_us: result.start_unix_us.to_native(),
            end_unix_us: result.end_unix_us.to_native(),
            exit_code,
            signal,
            reason,
            failure: failure_of(&result.outcome),
            stdout,
            stderr,
            stdout_path,
            stderr_path,
            output,
            gang: None,
        }
    }
}

pub(super) fn attempt_note(
    result: &ArchivedTaskResult,
    end: AttemptEnd,
    node: Option<String>,
) -> AttemptNote {
    let (exit_code, signal, reason) = describe(&result.outcome);
    AttemptNote {
        attempt: result.attempt.to_native().0,
        end,
        reason: reason.unwrap_or_else(|| format!("exit {}", exit_code.unwrap_or_default())),
        exit_code,
        signal,
        node,
        start_time: Some(Timestamp::from_unix_micros(
            result.start_unix_us.to_native(),
        )),
        end_time: Timestamp::from_unix_micros(result.end_unix_us.to_native()),
    }
}

/// Exit code, signal and reason of a gang part's outcome (owned), as a record shows
/// them.
pub(super) fn describe_owned(outcome: &Outcome) -> (Option<i32>, Option<i32>, Option<String>) {
    match outcome {
        Outcome::Exited { code } => (Some(*code), None, None),
        Outcome::Signaled { signal } => (
            None,
            Some(*signal),
            Some(format!("killed by signal {signal}")),
        ),
        Outcome::TimedOut => (None, None, Some("time limit exceeded".into())),
        Outcome::OutOfMemory { limit_mib } => (None, Some(9), Some(out_of_memory(*limit_mib))),
        Outcome::SpawnFailed { reason } | Outcome::WorkerFailed { reason } => {
            (None, None, Some(reason.clone()))
        }
        Outcome::Lost { reason } => (None, None, Some(format!("lost: {reason}"))),
        Outcome::Cancelled => (None, None, Some("stopped".into())),
        Outcome::Raised { message } => (None, None, Some(format!("raised: {message}"))),
    }
}

/// How an HPC job that ended with `outcome` failed (`None`: it did not).
pub(super) fn failure_of_owned(outcome: &Outcome) -> Option<Failure> {
    Some(match outcome {
        Outcome::Exited { code: 0 } | Outcome::Cancelled => return None,
        Outcome::Exited { .. } => Failure::Exit,
        Outcome::Signaled { .. } => Failure::Signal,
        Outcome::TimedOut => Failure::TimeLimit,
        Outcome::OutOfMemory { .. } => Failure::OutOfMemory,
        Outcome::SpawnFailed { .. } => Failure::Spawn,
        Outcome::WorkerFailed { .. } => Failure::WorkerStart,
        Outcome::Raised { .. } => Failure::Raised,
        Outcome::Lost { .. } => Failure::Lost,
    })
}
