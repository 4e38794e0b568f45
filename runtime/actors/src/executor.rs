//! The executor: a leaf actor that owns one slot and runs one attempt at a time in it.
//!
//! The actor's loop stays thin: a `Run` starts the process runner on a tokio task and
//! returns at once, so `Cancel` is handled while the attempt runs. The runner reports
//! straight to the agent. If this actor dies (panic), its state — and with it the
//! attempt's cancel sender — is dropped, which kills the attempt's process group; the
//! agent, as supervisor, records the attempt as lost and starts a fresh executor.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::oneshot;

use crate::process::{self, CancelRequest, Finished, Launch};

/// Reported by an executor's runner to its agent when an attempt ends.
#[derive(Debug)]
pub struct AttemptDone {
    pub executor: u32,
    pub attempt: u64,
    pub finished: Finished,
}

#[derive(Debug)]
pub enum ExecutorMsg {
    Run {
        attempt: u64,
        launch: Box<Launch>,
    },
    Cancel {
        attempt: u64,
    },
    /// Test hook: makes the handler panic, to exercise supervision.
    #[cfg(test)]
    Panic,
}

/// Where an executor sends [`AttemptDone`]; implemented by the agent's message type.
pub trait DoneSink: Send + Sync + 'static {
    fn attempt_done(&self, done: AttemptDone);
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
    /// The running attempt and the sender that cancels it. Dropping it kills the task.
    current: Option<(u64, oneshot::Sender<CancelRequest>)>,
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
            current: None,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ExecutorMsg::Run { attempt, launch } => {
                let (cancel_tx, cancel_rx) = oneshot::channel();
                // A new Run means the agent saw the previous attempt finish.
                state.current = Some((attempt, cancel_tx));
                let sink = state.sink.clone();
                let executor = state.id;
                tokio::spawn(async move {
                    let finished = process::run(*launch, cancel_rx).await;
                    sink.attempt_done(AttemptDone {
                        executor,
                        attempt,
                        finished,
                    });
                });
            }
            ExecutorMsg::Cancel { attempt } => {
                if let Some((current, _)) = &state.current
                    && *current == attempt
                    && let Some((_, sender)) = state.current.take()
                {
                    let _ = sender.send(CancelRequest);
                }
            }
            #[cfg(test)]
            ExecutorMsg::Panic => panic!("executor panic requested by a test"),
        }
        Ok(())
    }
}
