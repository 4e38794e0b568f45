//! The executor: a leaf actor that owns one slot and runs its attempts.
//!
//! The actor owns the slot's thread, which takes attempts straight from the agent
//! (through [`SlotRuns`], no actor mailbox on the way), runs each blocking (see
//! [`crate::process`]), reports it to the agent's sink, and starts whatever the sink
//! hands back as the slot's next attempt, so a busy slot goes from one task to the
//! next without waiting for any actor. Cancels go through
//! the agent's board, which holds every attempt's stop handle; if this actor dies
//! (panic), the agent, as supervisor, drops that handle (which kills the attempt's
//! process group), records the attempt as lost and starts a fresh executor, and the
//! old thread's report is ignored; the old thread ends once its channel is closed.
//!
//! The thread also keeps the agent's report clock when the board gives it to this
//! slot ([`DoneSink::report_clock`]): idle, it waits for work until the clock's time;
//! busy, the runner hands it back at that time ([`process::Running::wait_until`]).

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Instant;

use crate::board::NextAttempt;
use crate::process::{self, Finished, Scratch, Start};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use saker_wire::messages::{Outcome, Output};

/// Reported by an executor's runner to its agent when an attempt ends.
#[derive(Debug)]
pub struct AttemptDone {
    pub executor: u32,
    pub attempt: u64,
    pub finished: Finished,
}

/// Work for a slot's thread: the attempt, and the slot's generation as the agent's
/// board knew it when it started the attempt.
pub type SlotRun = (NextAttempt, u64);

/// The agent's end of a slot thread's queue. The thread ends once this and its
/// executor are both gone.
pub type SlotRuns = mpsc::Sender<SlotRun>;

/// An executor has nothing to be told: its thread takes work from the agent directly.
#[derive(Debug)]
pub enum ExecutorMsg {
    /// Test hook: makes the handler panic, to exercise supervision.
    #[cfg(test)]
    Panic,
}

/// Where an executor reports; implemented by the agent.
pub trait DoneSink: Send + Sync + 'static {
    /// An attempt of this slot ended; returns the slot's next attempt, if one is to
    /// start now, and when to call [`DoneSink::report_clock`].
    fn attempt_done(&self, done: AttemptDone, generation: u64) -> AfterAttempt;

    /// The time this slot was given passed: sends the paced report if it is due.
    /// Returns when to call again, if this slot still keeps the clock.
    fn report_clock(&self, executor: u32, generation: u64) -> Option<Instant>;
}

/// What a slot's thread does after an attempt.
#[derive(Debug, Default)]
pub struct AfterAttempt {
    pub next: Option<NextAttempt>,
    /// When to call [`DoneSink::report_clock`], whether the thread runs an attempt
    /// or waits for one by then.
    pub report_at: Option<Instant>,
}

#[derive(Debug)]
pub struct Executor<S> {
    _sink: std::marker::PhantomData<fn() -> S>,
}

impl<S> Default for Executor<S> {
    fn default() -> Self {
        Self {
            _sink: std::marker::PhantomData,
        }
    }
}

#[derive(Debug)]
pub struct ExecutorArgs<S> {
    pub id: u32,
    pub sink: S,
    /// The thread's queue (the agent keeps the sending end).
    pub runs: mpsc::Receiver<SlotRun>,
}

/// Nothing: the thread holds the sink, the agent the thread's queue. When the agent
/// replaces this executor (or exits) it drops that queue, which ends the thread.
#[derive(Debug)]
pub struct ExecutorState<S> {
    _sink: std::marker::PhantomData<fn() -> S>,
}

impl<S: DoneSink + std::fmt::Debug> Actor for Executor<S> {
    type Msg = ExecutorMsg;
    type State = ExecutorState<S>;
    type Arguments = ExecutorArgs<S>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let (id, sink, attempts) = (args.id, Arc::new(args.sink), args.runs);
        std::thread::Builder::new()
            .name(format!("saker-slot-{id}"))
            .spawn(move || slot_thread(attempts, id, sink))?;
        Ok(ExecutorState {
            _sink: std::marker::PhantomData,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            #[cfg(test)]
            ExecutorMsg::Panic => panic!("executor panic requested by a test"),
        }
    }
}

/// The slot's thread: runs attempts back to back for as long as the sink has more,
/// then waits for the next `Run`. Meanwhile it keeps the report clock when the sink
/// gives it one.
fn slot_thread<S: DoneSink>(attempts: mpsc::Receiver<SlotRun>, executor: u32, sink: Arc<S>) {
    let mut scratch = Scratch::default();
    let mut report_at: Option<Instant> = None;
    let mut generation = 0;
    loop {
        let received = match report_at {
            None => attempts.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(at) => attempts.recv_timeout(at.saturating_duration_since(Instant::now())),
        };
        let first = match received {
            Ok((first, of)) => {
                generation = of;
                first
            }
            Err(RecvTimeoutError::Timeout) => {
                report_at = sink.report_clock(executor, generation);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut next = Some(first);
        while let Some(attempt) = next.take() {
            let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_attempt(&attempt, &mut scratch, &mut report_at, || {
                    sink.report_clock(executor, generation)
                })
            }))
            .unwrap_or_else(|panic| panicked(&panic));
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
    attempt: &NextAttempt,
    scratch: &mut Scratch,
    report_at: &mut Option<Instant>,
    mut ring: impl FnMut() -> Option<Instant>,
) -> Finished {
    let mut running = match process::start(&attempt.launch, &attempt.control, scratch) {
        Start::Running(running) => running,
        Start::Failed(finished) => return finished,
        Start::NoResources(error) => {
            let now = process::unix_micros();
            return Finished {
                outcome: Outcome::Lost {
                    reason: error.to_string(),
                },
                start_unix_us: now,
                end_unix_us: now,
                stdout: Output::default(),
                stderr: Output::default(),
            };
        }
    };
    while !running.wait_until(*report_at) {
        let now = Instant::now();
        *report_at = ring().filter(|next| *next > now);
    }
    running.finish()
}

/// A bug in the runner must not leave the slot taken forever: the attempt (whose
/// group was killed as the panic unwound) is reported lost, and the slot goes on.
fn panicked(panic: &(dyn std::any::Any + Send)) -> Finished {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    let now = process::unix_micros();
    Finished {
        outcome: Outcome::Lost {
            reason: format!("the executor failed running the attempt: {message}"),
        },
        start_unix_us: now,
        end_unix_us: now,
        stdout: Output::default(),
        stderr: Output::default(),
    }
}
