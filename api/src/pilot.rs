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
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use saker_client::StatusReport;
use saker_client::results::{JobId, ResultRecord, TaskId, TerminalState};
use saker_client::spec::{FunctionSpec, JobRequest, object_item};
use saker_core::ObjectId;
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, TaskError};
use crate::link::{Feed, Link};
use crate::options::TaskOptions;
use crate::remote::FeedEnded;
use crate::task::{Answer, Data, decode_answers};
use crate::worker::RaisedKind;

/// Most calls in one submit request.
const BATCH: usize = 8192;
/// How long [`Pilot::nodes`] and the start of an embedded pilot wait for every node
/// the pilot expects.
const ALL_NODES_WAIT: Duration = Duration::from_secs(60);
/// How long `map` waits for a first node to tell how wide nodes are, when none has
/// joined (an elastic pilot may get none before work is queued).
const FIRST_NODE_WAIT: Duration = Duration::from_secs(5);
/// Between two looks at the pilot's status while waiting for nodes.
const POLL: Duration = Duration::from_millis(20);

/// Told the answer (or the failure) for one task.
pub(crate) type Waiter = Box<dyn FnOnce(Result<Arc<ResultRecord>, TaskError>) + Send>;

/// What the submitter sends, in order: jobs, and frees of objects (after every job
/// queued before them, so a job that reads an object reaches the pilot first).
// Jobs are nearly all of it: boxing them would cost an allocation per call.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Queued {
    Job(Submission),
    /// An object to free; told when the pilot took the free (a free by hand).
    Free(u128, Option<FreeDone>),
}

/// Told when the pilot took a free by hand.
pub(crate) type FreeDone = oneshot::Sender<Result<(), Error>>;

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
    id: std::sync::OnceLock<Result<JobId, Arc<Error>>>,
    set: tokio::sync::Notify,
}

impl JobCell {
    fn set(&self, id: Result<JobId, Arc<Error>>) {
        let _ = self.id.set(id);
        self.set.notify_waiters();
    }

    /// Waits for the id.
    pub(crate) async fn get(&self) -> Result<JobId, Arc<Error>> {
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
    Gone(FeedEnded),
}

/// A handle on the pilot. Cheap to clone; every clone submits to the same pilot.
#[derive(Clone)]
pub struct Pilot {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    pub(crate) link: Link,
    pub(crate) kind: String,
    pub(crate) queue: mpsc::UnboundedSender<Queued>,
    /// The nodes' stores this driver sees (objects by reference).
    pub(crate) stores: Arc<crate::objects::Stores>,
    /// Cores of the nodes that had joined when the driver started ([`Pilot::slots`]).
    pub(crate) slots: u32,
    /// Cores of the pilot once every node it expects had joined, when seen.
    full_slots: OnceLock<u32>,
    /// The submitter: it ends once every sender is gone (the driver's handles and its
    /// refs), having sent what they queued, frees of objects included.
    submitter: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
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
    /// Starts the background tasks on the current tokio runtime. With
    /// `wait_for_nodes`, first waits (a minute at most) for every node the pilot
    /// expects: an embedded pilot's agents are this machine's processes, which join
    /// within moments, so its [`Pilot::slots`] counts them all.
    pub(crate) async fn start(
        link: Link,
        kind: String,
        wait_for_nodes: bool,
    ) -> Result<Pilot, Error> {
        crate::context::set_driver(&link);
        let feed = link.follow().await?;
        let status = if wait_for_nodes {
            all_nodes(&link).await?
        } else {
            link.status().await?
        };
        let (events, event_rx) = mpsc::unbounded_channel();
        tokio::spawn(forward_results(feed, events.clone()));
        tokio::spawn(dispatch(event_rx));
        let (queue, queued) = mpsc::unbounded_channel();
        let submitter = tokio::spawn(submit_loop(link.clone(), queued, events));
        let stores = Arc::new(crate::objects::Stores::new(
            link.clone(),
            status.pilot_id.clone(),
        ));
        crate::objects::set_driver_stores(&stores);
        Ok(Pilot {
            shared: Arc::new(Shared {
                link,
                kind,
                queue,
                stores,
                submitter: std::sync::Mutex::new(Some(submitter)),
                slots: status.slots.max(1),
                full_slots: if all_joined(&status) {
                    OnceLock::from(status.slots)
                } else {
                    OnceLock::new()
                },
            }),
        })
    }

    /// The submitter's task, to wait for once the driver is done (see [`Shared`]).
    pub(crate) fn take_submitter(&self) -> Option<tokio::task::JoinHandle<()>> {
        self.shared
            .submitter
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }

    /// Options for the tasks submitted through the returned handle.
    pub fn with(&self, options: TaskOptions) -> crate::Submitter {
        crate::Submitter {
            pilot: self.clone(),
            options,
        }
    }

    /// Runs a command job (a program, or an MPI program on several nodes) with the
    /// default options: see [`crate::Command`] and [`crate::Submitter::command`].
    pub fn command(&self, command: crate::Command) -> crate::TaskHandle<crate::CommandOutput> {
        self.with(TaskOptions::new()).command(command)
    }

    /// Submits one call of `T` with the default options; see [`crate::Submitter::submit`].
    pub fn submit<T: crate::Task>(&self, input: T::Input) -> crate::TaskHandle<T::Output> {
        self.with(TaskOptions::default()).submit::<T>(input)
    }

    /// Submits one call of `T` whose output stays on its node as an object; see
    /// [`crate::Submitter::submit_ref`].
    pub fn submit_ref<T: crate::Task>(
        &self,
        input: T::Input,
    ) -> crate::TaskHandle<crate::Ref<T::Output>> {
        self.with(TaskOptions::default()).submit_ref::<T>(input)
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
    /// places work on each node. `pilot.status().await?.slots` then counts the slots
    /// of them all.
    pub async fn nodes(&self) -> Result<u32, Error> {
        Ok(all_nodes(&self.shared.link).await?.agents)
    }

    /// Slots (cores) of the nodes that had joined when this driver started: a
    /// snapshot, and **partial** if nodes were still joining then.
    ///
    /// A driver run alone starts an embedded pilot and waits for its agents, so
    /// there it counts them all. A driver given a pilot (`--pilot-dir`, `saker run
    /// --app`, `saker pilot --app`) starts as soon as the pilot does, while its
    /// agents may still be joining. For every node's slots, wait for them:
    /// `pilot.nodes().await?`, then `pilot.status().await?.slots`. `map` sizes its
    /// chunks for every node the pilot expects, not from this count.
    pub fn slots(&self) -> u32 {
        self.shared.slots
    }

    /// The slots `map` sizes its chunks for: all the pilot's once every node it
    /// expects has joined; until then [`expected_slots`] of what has. With no node
    /// yet, waits a little for one, then assumes one slot per expected node.
    pub(crate) async fn planning_slots(&self) -> u32 {
        if let Some(slots) = self.shared.full_slots.get() {
            return *slots;
        }
        let deadline = tokio::time::Instant::now() + FIRST_NODE_WAIT;
        loop {
            let Ok(status) = self.status().await else {
                // Its calls will fail the same way; any size does.
                return self.slots();
            };
            if all_joined(&status) {
                let _ = self.shared.full_slots.set(status.slots);
                return status.slots.max(1);
            }
            if let Some(slots) = expected_slots(&status) {
                return slots.max(1);
            }
            if tokio::time::Instant::now() >= deadline {
                return status.max_nodes.unwrap_or(1).max(1);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    pub(crate) fn send(&self, job: JobRequest, waiter: Waiter, id: Option<Arc<JobCell>>) {
        let submission = Submission { job, waiter, id };
        if let Err(mpsc::error::SendError(Queued::Job(refused))) =
            self.shared.queue.send(Queued::Job(submission))
        {
            let reason = "the driver's submitter stopped".to_owned();
            if let Some(id) = &refused.id {
                id.set(Err(Arc::new(Error::PilotGone {
                    reason: reason.clone(),
                })));
            }
            (refused.waiter)(Err(TaskError::PilotGone { reason }));
        }
    }

    /// The job of one call: `payload` for this application's worker kind.
    /// The job of one call: the options' spec, reading the objects `reads` (refs in
    /// its input) and writing `store` (its output kept as that object).
    pub(crate) fn job(
        &self,
        payload: Vec<u8>,
        options: &TaskOptions,
        reads: &[u128],
        store: Option<u128>,
    ) -> JobRequest {
        let mut spec = options.spec(FunctionSpec {
            kind: self.shared.kind.clone(),
            payload,
        });
        for object in reads {
            let item = object_item(ObjectId(*object));
            if !spec.reads.contains(&item) {
                spec.reads.push(item);
            }
        }
        if let Some(object) = store {
            spec.writes.push(object_item(ObjectId(object)));
        }
        JobRequest::single(spec)
    }
}

/// Every node the pilot expects has joined (and offers its cores).
fn all_joined(status: &StatusReport) -> bool {
    status
        .max_nodes
        .is_some_and(|max| max > 0 && status.agents >= max && status.slots > 0)
}

/// The slots the pilot will have, from a status taken while nodes may still be
/// joining: those of the nodes that joined, and for each node expected but not
/// there yet as many as the widest that joined has (in an allocation nodes are
/// alike; an embedded pilot's agents differ by one slot at most). `None` while no
/// node has joined: nothing tells how wide one is.
pub(crate) fn expected_slots(status: &StatusReport) -> Option<u32> {
    let widest = status.nodes.iter().map(|node| node.cores).max()?;
    let joined = status.agents.max(status.nodes.len() as u32);
    let missing = status.max_nodes.map_or(0, |max| max.saturating_sub(joined));
    Some(status.slots.saturating_add(missing.saturating_mul(widest)))
}

/// The pilot's status once every node it expects has joined, or after
/// [`ALL_NODES_WAIT`]; at once for a pilot that does not say how many it expects.
async fn all_nodes(link: &Link) -> Result<StatusReport, Error> {
    let deadline = tokio::time::Instant::now() + ALL_NODES_WAIT;
    loop {
        let status = link.status().await?;
        let all = status.max_nodes.is_none_or(|max| status.agents >= max);
        if all || tokio::time::Instant::now() >= deadline {
            return Ok(status);
        }
        tokio::time::sleep(POLL).await;
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
    mut queued: mpsc::UnboundedReceiver<Queued>,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut batch = Vec::new();
    while queued.recv_many(&mut batch, BATCH).await > 0 {
        let mut ids = Vec::with_capacity(batch.len());
        let mut frees = Vec::new();
        let (jobs, waiters): (Vec<JobRequest>, Vec<Waiter>) = batch
            .drain(..)
            .filter_map(|queued| match queued {
                Queued::Job(s) => Some(s),
                Queued::Free(id, done) => {
                    frees.push((id, done));
                    None
                }
            })
            .map(|s| {
                ids.push(s.id);
                (s.job, s.waiter)
            })
            .unzip();
        // Every free in the batch comes after the jobs in it that read its object.
        submit_batch(&link, jobs, waiters, ids, &events).await;
        if !frees.is_empty() {
            free_batch(&link, frees).await;
        }
    }
}

async fn free_batch(link: &Link, frees: Vec<(u128, Option<FreeDone>)>) {
    let objects = frees
        .iter()
        .map(|(id, _)| saker_core::ObjectId(*id))
        .collect();
    let freed = link.free_objects(objects).await.map_err(Arc::new);
    for (_, done) in frees {
        if let Some(done) = done {
            let _ = done.send(freed.clone().map_err(|error| match &*error {
                Error::Refused { message } => Error::Refused {
                    message: message.clone(),
                },
                other => Error::PilotGone {
                    reason: other.to_string(),
                },
            }));
        }
    }
}

async fn submit_batch(
    link: &Link,
    jobs: Vec<JobRequest>,
    waiters: Vec<Waiter>,
    ids: Vec<Option<Arc<JobCell>>>,
    events: &mpsc::UnboundedSender<Event>,
) {
    if jobs.is_empty() {
        return;
    }
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
            let failure = match &error {
                Error::PilotGone { reason } => TaskError::PilotGone {
                    reason: reason.clone(),
                },
                Error::Unanswered { .. } => TaskError::PilotGone {
                    reason: error.to_string(),
                },
                other => TaskError::Failed {
                    reason: other.to_string(),
                },
            };
            let error = Arc::new(error);
            for id in ids.iter().flatten() {
                id.set(Err(Arc::clone(&error)));
            }
            for waiter in waiters {
                waiter(Err(failure.clone()));
            }
            let _ = events.send(Event::Registered(Vec::new()));
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
            Event::Gone(ended) => {
                let reason = ended.to_string();
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
                RaisedKind::NotStored => TaskError::Failed { reason: message },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use saker_client::NodeLoad;

    fn status(max_nodes: Option<u32>, joined: &[u32]) -> StatusReport {
        StatusReport {
            agents: joined.len() as u32,
            slots: joined.iter().sum(),
            max_nodes,
            nodes: joined
                .iter()
                .map(|&cores| NodeLoad {
                    cores,
                    ..NodeLoad::default()
                })
                .collect(),
            ..StatusReport::default()
        }
    }

    #[test]
    fn a_partial_status_counts_the_nodes_still_to_join_as_wide_as_the_widest() {
        // 6 agents of 1 slot, 1 joined: 6, not 1.
        let partial = status(Some(6), &[1]);
        assert!(!all_joined(&partial));
        assert_eq!(expected_slots(&partial), Some(6));
        // 3 nodes of 4 cores in an allocation, 2 joined.
        assert_eq!(expected_slots(&status(Some(3), &[4, 4])), Some(12));
        // An embedded pilot's uneven shares (7 slots: 4 + 3): never fewer.
        assert_eq!(expected_slots(&status(Some(2), &[3])), Some(6));
        assert_eq!(expected_slots(&status(Some(2), &[4])), Some(8));
        // All joined: exactly theirs.
        let full = status(Some(2), &[4, 3]);
        assert!(all_joined(&full));
        assert_eq!(expected_slots(&full), Some(7));
        // No node yet: nothing tells how wide one is.
        assert_eq!(expected_slots(&status(Some(4), &[])), None);
        assert!(!all_joined(&status(Some(4), &[])));
        // A pilot that does not say how many it expects: what joined.
        assert_eq!(expected_slots(&status(None, &[2, 2])), Some(4));
        assert!(!all_joined(&status(None, &[2, 2])));
    }
}
