//! The executor of one slot: a thread that runs the slot's attempts, supervised by the
//! agent.
//!
//! The thread takes attempts straight from the agent (through [`SlotRuns`], no actor
//! mailbox on the way), runs each blocking (see [`crate::process`]), reports it to
//! the agent's [`SlotSink`], and starts whatever the sink hands back as the slot's
//! next attempt, so a busy slot goes from one task to the next without waiting for
//! any actor. Cancels go through the agent, which keeps every running attempt's stop
//! handle (the other side of [`NextAttempt::control`]).
//!
//! The thread also keeps the agent's report clock when the board gives it to this
//! slot ([`SlotSink::report_clock`]): idle, it waits for work until the clock's time;
//! busy, the runner hands it back at that time ([`process::Running::wait_until`]).
//!
//! Design choice: the executor is a plainly supervised thread, not an actor. Its work
//! is blocking (spawn, `poll`, reap) and must stay on a thread of its own for
//! throughput, and its failures happen on that thread: an actor wrapped around it
//! would see none of them, so its supervision could only be exercised by messages
//! made up for tests. Instead the thread ends on a fault — a panic anywhere in it, or
//! a spawn this node cannot make for want of resources ([`SlotFault`]) — and tells the
//! agent with the fault, typed, in the agent's own mailbox ([`SlotSink::slot_failed`]).
//! The agent, as supervisor, reports the attempt in flight lost, and starts a fresh
//! thread for the slot under its [restart strategy](crate::supervision). A task's own
//! failure to start (a missing program) is that attempt's result, not a fault.

use std::io;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Instant;

use std::sync::Arc;

use crate::process::{self, Control, Finished, Launch, ResourceError, Scratch, Start};
use crate::resources::Binding;
use crate::resources::cgroup::SlotCgroup;
use crate::resources::limits::SlotLimits;
use crate::worker::{Call, WorkerCommands, Workers};
use saker_wire::messages::AttemptId;

/// An attempt a slot is to start now: what to run and its side of the stop control.
#[derive(Debug)]
pub struct NextAttempt {
    pub attempt: AttemptId,
    pub work: Work,
    pub control: Arc<Control>,
    /// The CPUs, GPUs and memory limit it runs with.
    pub binding: Binding,
}

/// What an attempt runs on its slot.
#[derive(Debug)]
pub enum Work {
    /// A process of its own.
    Command(Box<Launch>),
    /// A call on the slot's persistent worker of its kind.
    Call(Box<Call>),
}

/// Reported by a slot's thread to its agent when an attempt ends.
#[derive(Debug)]
pub struct AttemptDone {
    pub executor: u32,
    pub attempt: AttemptId,
    pub finished: Finished,
}

/// The agent's end of a slot thread's queue. The thread ends once it is dropped.
pub type SlotRuns = mpsc::Sender<NextAttempt>;

/// Why a slot's thread ended: a fault of the slot, not of a task.
#[derive(Debug, thiserror::Error)]
pub enum SlotFault {
    /// A bug, in the runner or in the agent's books; the message is the panic's.
    #[error("the slot's thread panicked: {message}")]
    Panicked { message: String },
    /// This node could not start an attempt's process.
    #[error("could not start attempt {attempt}")]
    NoResources {
        attempt: AttemptId,
        #[source]
        source: ResourceError,
    },
    /// A fresh thread for the slot could not be started.
    #[error("could not start a thread for the slot")]
    NoThread(#[source] io::Error),
}

/// Where a slot's thread reports; implemented by the agent.
pub trait SlotSink: Send + Sync + 'static {
    /// An attempt of this slot ended; returns the slot's next attempt, if one is to
    /// start now, and when to call [`SlotSink::report_clock`].
    fn attempt_done(&self, done: AttemptDone, generation: u64) -> AfterAttempt;

    /// The time this slot was given passed: sends the paced report if it is due.
    /// Returns when to call again, if this slot still keeps the clock.
    fn report_clock(&self, executor: u32, generation: u64) -> Option<Instant>;

    /// The slot's thread failed and has ended; the attempt it ran is not reported.
    fn slot_failed(&self, executor: u32, generation: u64, fault: SlotFault);

    /// The cgroup that limits the memory of this slot's attempts, if the node has them.
    fn memory_cgroup(&self, _executor: u32) -> Option<SlotCgroup> {
        None
    }
}

/// What a slot's thread does after an attempt.
#[derive(Debug, Default)]
pub struct AfterAttempt {
    pub next: Option<NextAttempt>,
    /// When to call [`SlotSink::report_clock`], whether the thread runs an attempt
    /// or waits for one by then.
    pub report_at: Option<Instant>,
}

/// Starts the thread of slot `executor` as its `generation` (the board's count of
/// the slot's threads, which tells a late report of an earlier thread from this
/// one's). Returns its queue: the thread ends when that is dropped, or on a fault.
pub fn start<S: SlotSink>(executor: u32, generation: u64, sink: S) -> Result<SlotRuns, SlotFault> {
    let (runs, queue) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("saker-slot-{executor}"))
        .spawn(move || {
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_slot(&queue, executor, generation, &sink)
            }));
            let fault = match ran {
                Ok(Ok(())) => return,
                Ok(Err(fault)) => fault,
                Err(panic) => SlotFault::Panicked {
                    message: panic_message(panic.as_ref()),
                },
            };
            // Closed first: from here on, work sent to this slot stays on the board.
            drop(queue);
            sink.slot_failed(executor, generation, fault);
        })
        .map_err(SlotFault::NoThread)?;
    Ok(runs)
}

/// Runs attempts back to back for as long as the sink has more, then waits for the
/// next from the agent, keeping the report clock meanwhile when the sink gives it one.
/// Returns when the agent drops the queue.
fn run_slot<S: SlotSink>(
    queue: &mpsc::Receiver<NextAttempt>,
    executor: u32,
    generation: u64,
    sink: &S,
) -> Result<(), SlotFault> {
    let mut scratch = Scratch::default();
    let mut limits = SlotLimits::new(sink.memory_cgroup(executor));
    // The slot's persistent workers end with its thread (dropped: killed and reaped).
    let mut workers = Workers::new(executor, WorkerCommands::from_env());
    let mut report_at: Option<Instant> = None;
    loop {
        let received = match report_at {
            None => queue.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(at) => queue.recv_timeout(at.saturating_duration_since(Instant::now())),
        };
        let first = match received {
            Ok(first) => first,
            Err(RecvTimeoutError::Timeout) => {
                report_at = sink.report_clock(executor, generation);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        };
        let mut next = Some(first);
        while let Some(attempt) = next.take() {
            let mut ring = || sink.report_clock(executor, generation);
            let oom_kills = limits.apply(&attempt.binding);
            let mut finished = match &attempt.work {
                Work::Command(launch) => run_attempt(
                    launch,
                    &attempt,
                    &mut scratch,
                    &limits,
                    &mut report_at,
                    ring,
                )?,
                Work::Call(call) => workers.run(
                    call,
                    &attempt.control,
                    &attempt.binding,
                    &limits,
                    &mut report_at,
                    &mut ring,
                ),
            };
            limits.judge(&mut finished, oom_kills);
            let done = AttemptDone {
                executor,
                attempt: attempt.attempt,
                finished,
            };
            AfterAttempt { next, report_at } = sink.attempt_done(done, generation);
        }
    }
}

/// Runs one attempt, ringing the report clock at `report_at` meanwhile: `ring` says
/// when to ring next. A next time that has passed already is dropped rather than rung
/// in a loop.
fn run_attempt(
    launch: &process::Launch,
    attempt: &NextAttempt,
    scratch: &mut Scratch,
    limits: &SlotLimits,
    report_at: &mut Option<Instant>,
    mut ring: impl FnMut() -> Option<Instant>,
) -> Result<Finished, SlotFault> {
    let wrapped = limits.wrap(launch, &attempt.binding);
    let launch = wrapped.as_ref().unwrap_or(launch);
    let mut running = match process::start(launch, &attempt.control, scratch) {
        Start::Running(running) => running,
        Start::Failed(finished) => return Ok(finished),
        Start::NoResources(source) => {
            return Err(SlotFault::NoResources {
                attempt: attempt.attempt,
                source,
            });
        }
    };
    while !running.wait_until(*report_at) {
        let now = Instant::now();
        *report_at = ring().filter(|next| *next > now);
    }
    Ok(running.finish())
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::process::{Launch, StopHandle};

    fn attempt(attempt: AttemptId, argv: &[&str], dir: &Path) -> (NextAttempt, StopHandle) {
        let (stop, control) = StopHandle::new();
        let mut launch = Launch::of(argv, &[], dir);
        launch.time_limit = Some(Duration::from_secs(30));
        launch.inline_limit = 64;
        launch.spill_stem = format!("a{attempt}");
        let next = NextAttempt {
            attempt,
            work: Work::Command(Box::new(launch)),
            control,
            binding: Binding::default(),
        };
        (next, stop)
    }

    /// A sink whose books are broken: ringing the report clock panics, once `ready`
    /// exists. After the first attempt it hands over `then` and asks for the clock.
    #[derive(Debug)]
    struct BrokenBooks {
        then: Mutex<Option<NextAttempt>>,
        ready: std::path::PathBuf,
        faults: mpsc::Sender<(u32, u64, SlotFault)>,
    }

    impl SlotSink for BrokenBooks {
        fn attempt_done(&self, _done: AttemptDone, _generation: u64) -> AfterAttempt {
            AfterAttempt {
                next: self.then.lock().unwrap().take(),
                report_at: Some(Instant::now() + Duration::from_millis(10)),
            }
        }

        fn report_clock(&self, _executor: u32, _generation: u64) -> Option<Instant> {
            if !self.ready.exists() {
                return Some(Instant::now() + Duration::from_millis(10));
            }
            panic!("the books are broken")
        }

        fn slot_failed(&self, executor: u32, generation: u64, fault: SlotFault) {
            self.faults.send((executor, generation, fault)).unwrap();
        }
    }

    /// A panic on a slot's thread ends the thread, kills the attempt it ran (the task
    /// and what it started), and reaches the supervisor as a typed fault.
    #[test]
    fn a_panic_on_a_slot_thread_kills_its_attempt_and_reaches_the_supervisor() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!(
            "sleep 30 & echo $! > {f}.tmp; mv {f}.tmp {f}; wait",
            f = pid_file.display()
        );
        let (second, _stop_second) = attempt(AttemptId(2), &["sh", "-c", &script], dir.path());
        let (faults_tx, faults) = mpsc::channel();
        let sink = BrokenBooks {
            then: Mutex::new(Some(second)),
            ready: pid_file.clone(),
            faults: faults_tx,
        };
        let runs = start(3, 7, sink).unwrap();
        let (first, _stop_first) = attempt(AttemptId(1), &["true"], dir.path());
        runs.send(first).unwrap();
        let (executor, generation, fault) = faults
            .recv_timeout(Duration::from_secs(20))
            .expect("the fault reached the supervisor");
        assert_eq!((executor, generation), (3, 7));
        assert!(
            matches!(&fault, SlotFault::Panicked { message } if message == "the books are broken"),
            "{fault:?}"
        );
        // The thread is gone, and so is the attempt it ran (the clock rang while the
        // second attempt ran, once its background process had started).
        let (third, _stop_third) = attempt(AttemptId(3), &["true"], dir.path());
        assert!(runs.send(third).is_err(), "the thread has ended");
        let background: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while crate::test_support::alive(background) {
            assert!(
                Instant::now() < deadline,
                "the attempt's group outlived the panic"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
