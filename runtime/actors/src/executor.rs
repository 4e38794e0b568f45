//! The executor: a leaf actor that owns one slot and runs its attempts.
//!
//! The actor's loop stays thin: a `Run` starts the slot's runner on a tokio task and
//! returns at once. The runner runs the attempt, reports it to the agent's sink, and
//! starts whatever the sink hands back as the slot's next attempt, so a busy slot goes
//! from one task to the next without waiting for any actor. Cancels go through the
//! agent's board, which holds every attempt's cancel sender; if this actor dies
//! (panic), the agent, as supervisor, drops that sender (which kills the attempt's
//! process group), records the attempt as lost and starts a fresh executor, and the
//! old runner's reports are ignored.

use crate::board::NextAttempt;
use crate::process::{self, Finished};
use ractor::{Actor, ActorProcessingErr, ActorRef};

/// Reported by an executor's runner to its agent when an attempt ends.
#[derive(Debug)]
pub struct AttemptDone {
    pub executor: u32,
    pub attempt: u64,
    pub finished: Finished,
}

#[derive(Debug)]
pub enum ExecutorMsg {
    /// Start the slot's runner with `next`. `generation` is the slot's, as the agent's
    /// board knows it when it started the attempt.
    Run { next: NextAttempt, generation: u64 },
    /// Test hook: makes the handler panic, to exercise supervision.
    #[cfg(test)]
    Panic,
}

/// Where an executor reports; implemented by the agent.
pub trait DoneSink: Send + Sync + 'static {
    /// An attempt of this slot ended; returns the slot's next attempt, if one is to
    /// start now.
    fn attempt_done(&self, done: AttemptDone, generation: u64) -> Option<NextAttempt>;
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
}

#[derive(Debug)]
pub struct ExecutorState<S> {
    id: u32,
    sink: std::sync::Arc<S>,
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
        Ok(ExecutorState {
            id: args.id,
            sink: std::sync::Arc::new(args.sink),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ExecutorMsg::Run { next, generation } => {
                tokio::spawn(run_slot(next, state.id, generation, state.sink.clone()));
            }
            #[cfg(test)]
            ExecutorMsg::Panic => panic!("executor panic requested by a test"),
        }
        Ok(())
    }
}

/// The slot's runner: runs attempts back to back for as long as the sink has more.
async fn run_slot<S: DoneSink>(
    first: NextAttempt,
    executor: u32,
    generation: u64,
    sink: std::sync::Arc<S>,
) {
    let mut next = Some(first);
    while let Some(NextAttempt {
        attempt,
        launch,
        cancel,
    }) = next.take()
    {
        let finished = process::run(*launch, cancel).await;
        let done = AttemptDone {
            executor,
            attempt,
            finished,
        };
        next = sink.attempt_done(done, generation);
    }
}
