//! The driver's side: [`Pilot`], a handle on the pilot the application submits its
//! typed tasks to, wherever that pilot runs.
//!
//! Two background tasks do the work. The *submitter* takes calls from a channel and
//! sends them as few requests as it can (every call waiting when a request leaves
//! goes in it), so `submit` in a loop is batched submission. The *dispatcher* follows
//! the pilot's results and hands each to the waiter of its task. A result may come
//! before the answer to the submission that made its task: while a submission is in
//! flight, results of unknown tasks are kept until it is answered.

use std::collections::HashMap;
use std::sync::Arc;

use saker_root::client::StatusReport;
use saker_root::results::{JobId, ResultRecord, TaskId, TerminalState};
use saker_root::spec::{FunctionSpec, JobRequest};
use tokio::sync::mpsc;

use crate::error::{Error, TaskError};
use crate::link::{Feed, Link};
use crate::options::TaskOptions;
use crate::task::{Answer, Data, decode_answers};
use crate::worker::RaisedKind;

/// Most calls in one submit request.
const BATCH: usize = 8192;

/// Told the answer (or the failure) for one task.
pub(crate) type Waiter = Box<dyn FnOnce(Result<Arc<ResultRecord>, TaskError>) + Send>;

/// One call for the submitter: its task, and who waits for its result.
pub(crate) struct Submission {
    pub(crate) job: JobRequest,
    pub(crate) waiter: Waiter,
    /// Told the job's id once the pilot accepted it (for dependencies on it).
    pub(crate) id: Option<Arc<JobCell>>,
}

/// A job's id, once its submission is answered (or why it has none).
#[derive(Debug, Default)]
pub(crate) struct JobCell {
    id: std::sync::OnceLock<Result<JobId, String>>,
    set: tokio::sync::Notify,
}

impl JobCell {
    fn set(&self, id: Result<JobId, String>) {
        let _ = self.id.set(id);
        self.set.notify_waiters();
    }

    /// Waits for the id.
    pub(crate) async fn get(&self) -> Result<JobId, String> {
        loop {
            let notified = self.set.notified();
            if let Some(id) = self.id.get() {
                return id.clone();
            }
            notified.await;
        }
    }
}

enum Event {
    /// A submission left: keep results of unknown tasks until it is answered.
    InFlight,
    /// Its answer: the tasks it made and their waiters (empty when it failed).
    Registered(Vec<(TaskId, Waiter)>),
    Result(Arc<ResultRecord>),
    Gone(String),
}

/// A handle on the pilot. Cheap to clone; every clone submits to the same pilot.
#[derive(Clone)]
pub struct Pilot {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) link: Link,
    pub(crate) kind: String,
    pub(crate) submissions: mpsc::UnboundedSender<Submission>,
    /// Cores of the pilot when the driver started (for `map`'s chunk size).
    pub(crate) slots: u32,
}

impl std::fmt::Debug for Pilot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pilot")
            .field("kind", &self.shared.kind)
            .field("slots", &self.shared.slots)
            .finish_non_exhaustive()
    }
}

impl Pilot {
    /// Starts the background tasks on the current tokio runtime.
    pub(crate) async fn start(link: Link, kind: String) -> Result<Pilot, Error> {
        crate::context::set_driver(&link);
        let feed = link.follow().await?;
        let status = link.status().await?;
        let (events, event_rx) = mpsc::unbounded_channel();
        tokio::spawn(forward_results(feed, events.clone()));
        tokio::spawn(dispatch(event_rx));
        let (submissions, submission_rx) = mpsc::unbounded_channel();
        tokio::spawn(submit_loop(link.clone(), submission_rx, events));
        Ok(Pilot {
            shared: Arc::new(Shared {
                link,
                kind,
                submissions,
                slots: status.slots.max(1),
            }),
        })
    }

    /// Options for the tasks submitted through the returned handle.
    pub fn with(&self, options: TaskOptions) -> crate::Submitter {
        crate::Submitter {
            pilot: self.clone(),
            options,
        }
    }

    /// Submits one call of `T` with the default options; see [`crate::Submitter::submit`].
    pub fn submit<T: crate::Task>(&self, input: T::Input) -> crate::TaskHandle<T::Output> {
        self.with(TaskOptions::default()).submit::<T>(input)
    }

    /// Runs `T` on every input; outputs in the inputs' order. See [`crate::Submitter::map`].
    pub fn map<T, I>(&self, inputs: I) -> crate::MapStream<T::Output>
    where
        T: crate::Task,
        I: IntoIterator<Item = T::Input>,
        I::IntoIter: Send + 'static,
    {
        self.with(TaskOptions::default()).map::<T, I>(inputs)
    }

    /// Like [`Self::map`], each output with its input's index as soon as it is ready.
    pub fn map_unordered<T, I>(&self, inputs: I) -> crate::MapStream<T::Output>
    where
        T: crate::Task,
        I: IntoIterator<Item = T::Input>,
        I::IntoIter: Send + 'static,
    {
        self.with(TaskOptions::default())
            .map_unordered::<T, I>(inputs)
    }

    /// Starts actor `A` from `args`: set its placement and restart policy on the
    /// returned [`crate::Spawn`], then `.await` it for a [`crate::RemoteRef`].
    pub fn spawn<A: crate::Actor>(&self, args: A::Args) -> crate::Spawn<A> {
        crate::Spawn::new(args)
    }

    /// The pilot's state now (nodes, slots, counts).
    pub async fn status(&self) -> Result<StatusReport, Error> {
        self.shared.link.status().await
    }

    /// The nodes the pilot has, once every node it expects (its local agents, or its
    /// allocation's nodes) has joined, or after a minute at most: for a driver that
    /// places work on each node.
    pub async fn nodes(&self) -> Result<u32, Error> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let status = self.status().await?;
            let all = status.max_nodes.is_none_or(|max| status.agents >= max);
            if all || tokio::time::Instant::now() >= deadline {
                return Ok(status.agents);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Cores the pilot had when this driver started.
    pub fn slots(&self) -> u32 {
        self.shared.slots
    }

    pub(crate) fn send(&self, job: JobRequest, waiter: Waiter, id: Option<Arc<JobCell>>) {
        let submission = Submission { job, waiter, id };
        if let Err(refused) = self.shared.submissions.send(submission) {
            let reason = "the driver's submitter stopped".to_owned();
            if let Some(id) = &refused.0.id {
                id.set(Err(reason.clone()));
            }
            (refused.0.waiter)(Err(TaskError::PilotGone { reason }));
        }
    }

    /// The job of one call: `payload` for this application's worker kind.
    pub(crate) fn job(&self, payload: Vec<u8>, options: &TaskOptions) -> JobRequest {
        JobRequest::single(options.spec(FunctionSpec {
            kind: self.shared.kind.clone(),
            payload,
        }))
    }
}

async fn forward_results(mut feed: Feed, events: mpsc::UnboundedSender<Event>) {
    loop {
        match feed.next().await {
            Ok(record) => {
                if events.send(Event::Result(record)).is_err() {
                    return;
                }
            }
            Err(reason) => {
                let _ = events.send(Event::Gone(reason));
                return;
            }
        }
    }
}

async fn submit_loop(
    link: Link,
    mut submissions: mpsc::UnboundedReceiver<Submission>,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut batch = Vec::new();
    while submissions.recv_many(&mut batch, BATCH).await > 0 {
        let mut ids = Vec::with_capacity(batch.len());
        let (jobs, waiters): (Vec<JobRequest>, Vec<Waiter>) = batch
            .drain(..)
            .map(|s| {
                ids.push(s.id);
                (s.job, s.waiter)
            })
            .unzip();
        let _ = events.send(Event::InFlight);
        match link.submit(jobs).await {
            Ok(submitted) => {
                for (job, id) in submitted.iter().zip(&ids) {
                    if let Some(id) = id {
                        id.set(Ok(job.job));
                    }
                }
                let registered = submitted
                    .iter()
                    .map(|job| job.first_task)
                    .zip(waiters)
                    .collect();
                let _ = events.send(Event::Registered(registered));
            }
            Err(error) => {
                for id in ids.iter().flatten() {
                    id.set(Err(error.to_string()));
                }
                let failure = match error {
                    Error::PilotGone { reason } => TaskError::PilotGone { reason },
                    other => TaskError::Failed {
                        reason: other.to_string(),
                    },
                };
                for waiter in waiters {
                    waiter(Err(failure.clone()));
                }
                let _ = events.send(Event::Registered(Vec::new()));
            }
        }
    }
}

async fn dispatch(mut events: mpsc::UnboundedReceiver<Event>) {
    let mut waiters: HashMap<TaskId, Waiter> = HashMap::new();
    let mut early: HashMap<TaskId, Arc<ResultRecord>> = HashMap::new();
    let mut in_flight = 0usize;
    let mut gone: Option<String> = None;
    while let Some(event) = events.recv().await {
        match event {
            Event::InFlight => in_flight += 1,
            Event::Registered(registered) => {
                in_flight = in_flight.saturating_sub(1);
                for (task, waiter) in registered {
                    if let Some(record) = early.remove(&task) {
                        waiter(Ok(record));
                    } else if let Some(reason) = &gone {
                        waiter(Err(TaskError::PilotGone {
                            reason: reason.clone(),
                        }));
                    } else {
                        waiters.insert(task, waiter);
                    }
                }
                if in_flight == 0 {
                    // Results nobody here waits for: other clients' tasks.
                    early.clear();
                }
            }
            Event::Result(record) => {
                if let Some(waiter) = waiters.remove(&record.task) {
                    waiter(Ok(record));
                } else if in_flight > 0 {
                    early.insert(record.task, record);
                }
            }
            Event::Gone(reason) => {
                for (_, waiter) in waiters.drain() {
                    waiter(Err(TaskError::PilotGone {
                        reason: reason.clone(),
                    }));
                }
                gone = Some(reason);
            }
        }
    }
}

/// A task's record as the answers of its call (one per input), or why there are none.
pub(crate) fn answers<O: Data>(record: &ResultRecord) -> Result<Vec<Answer<O>>, TaskError> {
    match record.state {
        TerminalState::Succeeded => {
            let output = record.output.as_deref().unwrap_or_default();
            decode_answers(output).map_err(|error| TaskError::InvalidData {
                message: error.to_string(),
            })
        }
        TerminalState::Cancelled => Err(TaskError::Cancelled),
        TerminalState::Failed => {
            let reason = record.reason.clone().unwrap_or_default();
            let raised = record
                .output
                .as_deref()
                .and_then(|o| Some((RaisedKind::from_byte(*o.first()?)?, &o[1..])));
            let Some((kind, message)) = raised else {
                return Err(TaskError::Failed { reason });
            };
            let message = String::from_utf8_lossy(message).into_owned();
            Err(match kind {
                RaisedKind::Panicked => TaskError::Panicked { message },
                RaisedKind::UnknownTask => TaskError::UnknownTask { message },
                RaisedKind::TypeMismatch => TaskError::TypeMismatch { message },
                RaisedKind::InvalidInput => TaskError::InvalidData { message },
            })
        }
    }
}
