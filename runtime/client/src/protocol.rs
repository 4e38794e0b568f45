//! The messages of the client protocol (see `docs/protocol.md` for the byte-level
//! description a non-Rust client follows).
//!
//! Every message is one JSON object on one line. Apart from the `id`, an object has
//! exactly one key, which names the message (`"submit"`, `"ok"`, `"result"`…); its
//! value is the body. Request bodies are parsed strictly (unknown fields are refused,
//! so a field a newer client relies on is never silently ignored by an older pilot);
//! response bodies leniently (unknown fields are ignored, so a newer pilot can add
//! fields).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::actors::{ActorCallRequest, ActorSpawnRequest, ActorStopRequest};
use super::update::JobUpdate;
use crate::results::{JobId, TaskId};
use crate::spec::{JobLines, JobRequest};

/// Version of the client protocol, exchanged in the hello. Bumped on any incompatible
/// change; compatible additions (new optional fields, new requests) keep it.
/// 2: function tasks (`function` specs, `output` in results), `results` with
/// `new_only`. A client of version 2 meets a version-1 pilot with a clear
/// `protocol_mismatch` at its hello instead of a refused field later.
/// 3: `submit` with `wait`, answered once its tasks ended (with their results).
pub const PROTOCOL_VERSION: u32 = 3;

/// Every version this server speaks: older clients keep working unchanged.
pub const PROTOCOLS: [u32; 3] = [1, 2, 3];

/// Most tasks a `submit` with `wait: "results"` may hold: its answer carries them all
/// in one line. More are waited for with `counts`, or followed with `results`.
pub const MAX_WAITED_RESULTS: u64 = 1_000;

/// Correlates a response with its request; chosen by the client, echoed by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(formatter)
    }
}

/// First message of a connection, client to server: `{"hello": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    /// Free text naming the client program, for logs (`"saker 0.1.0"`, `"parsl …"`).
    #[serde(default)]
    pub client: String,
}

/// The server's answer to an accepted hello: `{"ok": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    pub protocol: u32,
    pub pilot_id: String,
    /// Free text naming the server program (`"saker 0.1.0"`).
    #[serde(default)]
    pub server: String,
}

/// A request after the hello, with its body. The message key is the variant name in
/// snake case (`{"id": 1, "submit": {...}}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Submit(SubmitRequest),
    Status(StatusRequest),
    Wait(WaitRequest),
    Cancel(CancelRequest),
    Results(ResultsRequest),
    Shutdown(ShutdownRequest),
    ActorSpawn(ActorSpawnRequest),
    ActorCall(ActorCallRequest),
    ActorStop(ActorStopRequest),
    Update(UpdateRequest),
    Result(ResultRequest),
    SubmitLines(Box<JobLines>),
    Provisioning(ProvisioningRequest),
    Stores(StoresRequest),
    PutObject(PutObjectRequest),
    FreeObjects(FreeObjectsRequest),
    ObjectHolders(ObjectHoldersRequest),
}

impl Request {
    /// The message key of this request.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Submit(_) => "submit",
            Request::Status(_) => "status",
            Request::Wait(_) => "wait",
            Request::Cancel(_) => "cancel",
            Request::Results(_) => "results",
            Request::Shutdown(_) => "shutdown",
            Request::ActorSpawn(_) => "actor_spawn",
            Request::ActorCall(_) => "actor_call",
            Request::ActorStop(_) => "actor_stop",
            Request::Update(_) => "update",
            Request::Result(_) => "result",
            Request::SubmitLines(_) => "submit_lines",
            Request::Provisioning(_) => "provisioning",
            Request::Stores(_) => "stores",
            Request::PutObject(_) => "put_object",
            Request::FreeObjects(_) => "free_objects",
            Request::ObjectHolders(_) => "object_holders",
        }
    }
}

/// `submit`: a batch of jobs, accepted all together or not at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub jobs: Vec<JobRequest>,
    /// Answer once every task has ended, instead of once the submission is durable:
    /// one request, one answer, where a submit and a wait (or a results stream) take
    /// two of each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<SubmitWait>,
}

/// What a `submit` with `wait` answers with, once every task of it has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmitWait {
    /// How many tasks succeeded, failed and were cancelled (`ended`).
    Counts,
    /// The same, with every task's result (`results`, in the order they ended); for
    /// submissions of at most [`MAX_WAITED_RESULTS`] tasks.
    Results,
}

/// `status`: a snapshot of the pilot; with `jobs`, also these jobs' tasks by state
/// (`job_counts` in the answer, in the order asked). A pilot older than this field
/// refuses it as `malformed`, so a client can tell it asked one that cannot answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Vec<JobId>>,
}

/// `wait`: until every task of `jobs` (all jobs submitted so far when absent) is
/// terminal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitRequest {
    #[serde(default)]
    pub jobs: Option<Vec<JobId>>,
}

/// `cancel`: every task of these jobs that is not yet terminal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    pub jobs: Vec<JobId>,
}

/// `update`: give these jobs' tasks that have not started a new priority, not-before
/// time or time limit (see [`JobUpdate`] for absent and `null` fields). All jobs are
/// updated, or none: an unknown or ended job refuses the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    pub jobs: Vec<JobId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::update::present"
    )]
    pub not_before: Option<Option<crate::results::Timestamp>>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::update::present_limit"
    )]
    pub time_limit: Option<Option<std::time::Duration>>,
}

impl UpdateRequest {
    pub fn new(jobs: Vec<JobId>, update: JobUpdate) -> UpdateRequest {
        UpdateRequest {
            jobs,
            priority: update.priority,
            not_before: update.not_before,
            time_limit: update.time_limit,
        }
    }

    /// What it changes.
    pub fn update(&self) -> JobUpdate {
        JobUpdate {
            priority: self.priority,
            not_before: self.not_before,
            time_limit: self.time_limit,
        }
    }
}

/// `ok` body of `update`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpdateReport {
    /// Jobs updated: all those asked for.
    pub updated: u64,
}

/// `results`: accepted results with journal sequence number `>= from`, in sequence
/// order; with `follow`, new results keep coming as they are accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultsRequest {
    #[serde(default)]
    pub from: u64,
    #[serde(default)]
    pub follow: bool,
    /// Only results accepted after this request (`from` is ignored): a client that
    /// follows the results of its own submissions sends this before submitting.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_only: bool,
}

/// `result`: the result of one task, by its id; `ok` body: the record, as `results`
/// streams it. A task with no result (yet) is `no_result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultRequest {
    pub task: u64,
}

/// `shutdown`: stop the pilot. Queued tasks are not started; running ones finish
/// (or are killed with `kill_running`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownRequest {
    #[serde(default)]
    pub kill_running: bool,
}

/// `provisioning`: an elastic pilot stops (`pause`) or resumes asking for
/// allocations. `ok` body: `{"paused": bool}`. A pilot that is not elastic answers
/// `unavailable`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvisioningRequest {
    pub pause: bool,
}

/// `stores`: where each live node keeps its data items and objects. `ok` body:
/// [`StoresReport`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoresRequest {}

/// `ok` body of `stores`, nodes in id order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoresReport {
    pub stores: Vec<NodeStore>,
}

/// One live node's store: its scratch directory, on the host it runs on. A client
/// that sees the directory (it holds the node's mark, `.saker-node`, naming this
/// pilot and node) may put objects there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStore {
    pub node: saker_core::NodeId,
    pub host: String,
    pub scratch: String,
    /// Where the node's agent serves its items and objects on data connections
    /// (`host:port`, QUIC, the pilot's CA; a client dials it with its client
    /// certificate), or empty if it serves none. A client that sees no store reads and
    /// puts objects there (`docs/data.md`).
    #[serde(default)]
    pub data: String,
}

/// `object_holders`: the live nodes holding `object`, best first, for a client
/// that reads it from them over data connections. `ok` body: [`ObjectHoldersReport`];
/// no node: an empty list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectHoldersRequest {
    pub object: saker_core::ObjectId,
}

/// `ok` body of `object_holders`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectHoldersReport {
    pub holders: Vec<NodeStore>,
}

/// `put_object`: the client wrote `object` (`bytes` long) as the file
/// [`object_item`](crate::spec::object_item) names in the scratch directory of
/// `node`, renamed into place whole. The pilot records that `node` holds it, as a data
/// item of that name, so that tasks that read it run there or fetch it. Answered
/// (`ok`: `{}`) once durable; `unknown_node` when `node` is not live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutObjectRequest {
    pub object: saker_core::ObjectId,
    pub node: saker_core::NodeId,
    pub bytes: u64,
}

/// `free_objects`: the client is done with these objects (its handles on them are
/// gone). Each is removed from every node that holds it once no unfinished job reads
/// it; a job submitted later that reads one fails as it would for any item no node
/// holds. Ids the pilot does not know (or freed already) are ignored. Answered (`ok`:
/// `{}`) once durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FreeObjectsRequest {
    pub objects: Vec<saker_core::ObjectId>,
}

/// `ok` body of `submit`: one entry per submitted job, in request order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitReply {
    pub jobs: Vec<SubmittedJob>,
    /// With `wait`: how the tasks ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<WaitReport>,
    /// With `wait: "results"`: every task's result, in the order they ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub results: Option<Vec<std::sync::Arc<crate::results::ResultRecord>>>,
}

impl SubmitReply {
    /// The answer to a `submit` without `wait`: its jobs, durable.
    pub fn acknowledged(jobs: Vec<SubmittedJob>) -> SubmitReply {
        SubmitReply {
            jobs,
            ended: None,
            results: None,
        }
    }
}

/// Tasks `first_task .. first_task + count` belong to `job`; with an array, task
/// `first_task + k` runs array index `ArraySpec::index_at(k)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmittedJob {
    pub job: JobId,
    pub first_task: TaskId,
    pub count: u64,
}

/// `ok` body of `submit_lines`: jobs `first_job .. first_job + count`, one task each,
/// tasks `first_task .. first_task + count`, in the order of the commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmittedLines {
    pub first_job: JobId,
    pub first_task: TaskId,
    pub count: u64,
}

impl SubmittedLines {
    /// The jobs, one per command, in order.
    pub fn jobs(&self) -> impl Iterator<Item = SubmittedJob> + use<> {
        let (job, task) = (self.first_job.0, self.first_task.0);
        (0..self.count).map(move |k| SubmittedJob {
            job: JobId(job + k as u32),
            first_task: TaskId(task + k),
            count: 1,
        })
    }
}

/// `ok` body of `status`: a snapshot of the pilot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatusReport {
    pub pilot_id: String,
    /// Tasks waiting for a slot (including retries waiting to run again, and tasks
    /// whose jobs wait for other jobs).
    pub queued: u64,
    /// Of `queued`, tasks whose jobs wait for other jobs to end (`after`).
    pub waiting: u64,
    pub running: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Results received for tasks that already had an accepted result (speculation,
    /// replays): counted, not accepted.
    pub duplicates: u64,
    /// Attempts that failed or were lost and were retried or replayed.
    pub retries: u64,
    pub replays: u64,
    /// Speculative copies started for stragglers.
    pub speculated: u64,
    /// Connected agents (nodes).
    pub agents: u32,
    /// Cores offered by all agents.
    pub slots: u32,
    /// Cores running tasks now.
    pub busy_slots: u32,
    /// Tasks finished per second, averaged over the last few seconds.
    pub rate: f64,
    /// Tasks finished per second over the last minute.
    pub rate_minute: f64,
    /// Percentiles of where accepted results' time went, stage by stage (see
    /// [`StageSummary`]); stages without samples are left out.
    pub stages: Vec<StageSummary>,
    pub jobs: u64,
    /// The batch allocation the pilot runs in; absent on a single machine.
    pub allocation: Option<AllocationStatus>,
    /// An elastic pilot's batch allocations not yet ended (empty otherwise), and
    /// whether it has stopped asking for more (`saker alloc pause`).
    pub allocations: Vec<ElasticAllocation>,
    pub provisioning_paused: bool,
    /// Decision rounds an elastic pilot has made (one each `--provision-interval`).
    pub provisioning_rounds: u64,
    /// Load per node (agent), ordered by node id.
    pub nodes: Vec<NodeLoad>,
    /// Queued tasks that cannot finish before the pilot's walltime deadline (they
    /// wait for a continuation).
    pub beyond_deadline: u64,
    /// The pilot stopped because of its walltime deadline.
    pub walltime_reached: bool,
    /// Per job, tasks that have not run (filled once the walltime is reached).
    pub unstarted: Vec<UnstartedJob>,
    /// HPC jobs (several nodes at once): running, waiting, and the nodes held for the
    /// first that waits.
    pub hpc: HpcStatus,
    /// Placed actors with a node now (starting, running or stopping).
    pub actors: u64,
    /// The most nodes this pilot can have (its local agents, or its allocation's
    /// nodes), when known.
    pub max_nodes: Option<u32>,
    /// Periodic jobs going on (`every`).
    pub periodic: u64,
    /// Data items the pilot knows a holder of.
    pub items: u64,
    /// Bytes of data items copied from their holders to readers elsewhere.
    pub data_moved_bytes: u64,
    /// Of those, the bytes passed on by the root (the rest went node to node).
    pub data_root_bytes: u64,
    /// Of those node to node, the bytes relayed by nodes fetching the item
    /// themselves (readers of one item at once form a pipeline).
    #[serde(default)]
    pub data_relayed_bytes: u64,
    /// Bytes of the data items the live nodes hold (each copy counted).
    pub data_held_bytes: u64,
    /// Jobs submitted to make lost data items again (docs/data.md).
    pub data_recomputes: u64,
    /// Bytes of objects the live nodes keep in memory (`--object-memory`), and the
    /// most they keep there, added up.
    #[serde(default)]
    pub data_memory_bytes: u64,
    #[serde(default)]
    pub data_memory_bound: u64,
    /// Objects the live nodes moved from memory to their scratch, and their bytes.
    #[serde(default)]
    pub data_spills: u64,
    #[serde(default)]
    pub data_spilled_bytes: u64,
    /// Fetched copies the live nodes dropped from memory (other nodes hold those
    /// items), and their bytes.
    #[serde(default)]
    pub data_drops: u64,
    #[serde(default)]
    pub data_dropped_bytes: u64,
    /// The jobs a `status` with `jobs` asked for, in its order; absent otherwise.
    /// (Not `jobs`: that is the number of jobs submitted.)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_counts: Option<Vec<JobTaskCounts>>,
    /// The journal's disk is full: submissions and updates are refused, no new attempt
    /// starts, and results of the running ones are held until there is space.
    pub disk_full: bool,
    /// The root answering: where it runs, since when, and whether it took over from
    /// an earlier root (a standby). Standbys waiting are listed in the pilot
    /// directory (`standby/`), not here: a root does not know them all.
    pub root: Option<RootStatus>,
    /// What this root adopted from the nodes of the root before it (a standby that
    /// took over, or a resumed root); absent for a pilot's first root.
    pub adoption: Option<AdoptionStatus>,
    /// While no agent is connected: for how many seconds none has been (since the
    /// last one left, or since the root started). Absent while one is.
    pub agentless_seconds: Option<u64>,
}

/// The root process of a pilot, in a [`StatusReport`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RootStatus {
    pub host: String,
    pub pid: u32,
    /// When this root started (took over, for a standby).
    pub started: Option<crate::results::Timestamp>,
    /// This root is a standby that took over from a root that died.
    pub took_over: bool,
}

/// What a root of a later term took over from the nodes of the root before it, in a
/// [`StatusReport`] (docs/runtime-semantics.md, "Adoption").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdoptionStatus {
    /// Attempts that were running on their nodes and ran on, adopted.
    pub adopted: u64,
    /// Attempts that ended while no root heard them; their results were taken.
    pub ended_away: u64,
    /// Attempts a node held that could not be adopted, stopped there (their tasks
    /// were finished, unknown, or running elsewhere).
    pub refused: u64,
    /// Nodes of the previous root that had not come back when dispatch resumed:
    /// their work runs again elsewhere.
    pub missing_nodes: u64,
    /// How long dispatch waited for the previous root's nodes, in milliseconds.
    pub waited_ms: u64,
    /// Results the previous root had accepted whose acknowledgement had not reached
    /// their agents: sent again, recognised and dropped (neither run nor counted
    /// twice).
    pub delivered: u64,
}

/// One job's tasks by state, as the scheduler sees them now, in a [`StatusReport`].
/// Every task is in exactly one of the states: they add up to `count`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobTaskCounts {
    pub job: JobId,
    /// Tasks in the job.
    pub count: u64,
    /// Waiting for a slot (or for the jobs they depend on, a `not_before` time, the
    /// walltime deadline's continuation).
    pub queued: u64,
    /// Waiting for a retry's backoff to pass.
    pub delayed: u64,
    /// Dispatched to an agent that has not reported them started: they may wait in
    /// its queue for a free executor.
    pub assigned: u64,
    /// Reported started by their agent.
    pub running: u64,
    /// Ended. The scheduler counts a result as soon as it has it; it reaches `wait`,
    /// `results` and `result` once durable in the journal, a moment later.
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
}

impl JobTaskCounts {
    pub fn new(job: JobId, counts: &saker_core::JobCounts) -> JobTaskCounts {
        JobTaskCounts {
            job,
            count: counts.count.into(),
            queued: counts.queued.into(),
            delayed: counts.delayed.into(),
            assigned: counts.assigned.into(),
            running: counts.running.into(),
            succeeded: counts.succeeded.into(),
            failed: counts.failed.into(),
            cancelled: counts.cancelled.into(),
        }
    }
}

/// HPC jobs in a [`StatusReport`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HpcStatus {
    /// HPC jobs running (each on all its nodes).
    pub running: u64,
    /// HPC jobs queued, waiting to start whole.
    pub waiting: u64,
    /// The job the nodes below are held for, if one waits for them.
    pub reserved_for: Option<JobId>,
    /// Host names of the held nodes.
    pub reserved_nodes: Vec<String>,
    /// Seconds until they are expected free, from time limits; absent when unknown.
    pub reserved_seconds: Option<f64>,
}

/// Tasks of one job that did not run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UnstartedJob {
    pub job: JobId,
    pub tasks: u64,
}

/// The Slurm allocation of a pilot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocationStatus {
    pub job_id: String,
    /// The allocation's node list in Slurm's compact form (`n[1-3]`).
    pub node_list: String,
    pub nodes: u32,
    /// When Slurm ends the allocation, if known.
    pub end_time: Option<crate::results::Timestamp>,
    /// Seconds left until `end_time`.
    pub seconds_left: Option<u64>,
}

/// One batch allocation of an elastic pilot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ElasticAllocation {
    /// The pilot's number for it.
    pub allocation: u64,
    /// Slurm's job id, once submitted.
    pub job_id: Option<u32>,
    /// `submitting`, `pending`, `running`, `draining` (close to its end: no new work,
    /// released once idle) or `ending`.
    pub state: String,
    /// Slurm's own state word, as last read (`PENDING`, `RUNNING`, …).
    pub slurm_state: String,
    pub nodes: u32,
    /// Its agents are nodes `first_node .. first_node + nodes`.
    pub first_node: u32,
    /// Until Slurm ends it, once known.
    pub seconds_left: Option<u64>,
    /// Why the pilot asked for it (or is ending it).
    pub reason: String,
    /// The decision round that asked for it (rounds count from 1; 0: adopted after a
    /// restart).
    pub round: u64,
}

/// Percentiles of one stage over every accepted result (hdrhistogram, 1 % precision).
/// Stages: `wait` (submitted → started), `run` (started → ended), `wireup` (started →
/// every rank's first PMI fence, MPI jobs through PMI), `deliver` (ended → accepted
/// by the root), `total` (submitted → accepted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StageSummary {
    pub stage: String,
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// One node's share of the work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeLoad {
    pub node: saker_core::NodeId,
    pub hostname: String,
    pub cores: u32,
    /// Cores busy with tasks (dispatched to the node and not yet finished).
    pub busy: u32,
    /// GPUs it offers.
    #[serde(skip_serializing_if = "is_zero")]
    pub gpus: u32,
    /// Memory it offers, in MiB.
    #[serde(skip_serializing_if = "is_zero")]
    pub memory_mib: u32,
    /// Named resources it offers.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub resources: std::collections::BTreeMap<String, u32>,
    /// Bytes of data items it fetched whole from other nodes (directly or through the
    /// root) since it joined.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub fetched_bytes: u64,
    /// Bytes of the data items it holds (written there, put there, or fetched).
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub held_bytes: u64,
    /// Bytes of objects it keeps in memory, and the most it keeps there
    /// (`--object-memory`; 0: objects are files in its scratch).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub memory_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub memory_bound: u64,
    /// Bytes of objects it moved from memory to its scratch since it started.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub spilled_bytes: u64,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// `ok` body of `wait`: terminal counts over the tasks waited for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WaitReport {
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// `ok` body of `cancel`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CancelReport {
    /// Tasks that were not yet terminal and are now cancelled.
    pub cancelled: u64,
}

/// `end` body closing a `results` stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamEnd {
    /// The sequence number to pass as `from` to continue where this stream stopped.
    pub next: u64,
    /// Results in the range asked for that a journal compaction dropped under the
    /// pilot's `--keep-results` (absent: none).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub compacted: u64,
}

fn is_zero_u64(count: &u64) -> bool {
    *count == 0
}

/// The `error` body: what went wrong with one request (or with the connection, when
/// the id is `null`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct RequestError {
    pub kind: ErrorKind,
    /// Human text; match on `kind`, not on this.
    pub message: String,
}

impl RequestError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        RequestError {
            kind,
            message: message.into(),
        }
    }
}

/// Machine-readable error category (`"kind"` in JSON, snake case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The line is not JSON, not an object of the expected shape, has no integer `id`,
    /// or its body does not match the request. The connection continues.
    Malformed,
    /// A well-formed message whose key is not a known request. The connection
    /// continues.
    UnknownRequest,
    /// The first message was not a `hello`. The connection closes.
    ExpectedHello,
    /// The hello asked for a protocol version the server does not speak. The
    /// connection closes.
    ProtocolMismatch,
    /// A line exceeded the server's maximum line length. The connection closes.
    LineTooLong,
    /// A submitted spec failed validation; the message names the job. Nothing of
    /// the batch was submitted.
    InvalidSpec,
    /// A job id the pilot does not know.
    UnknownJob,
    /// A job that has ended (every task terminal) or was cancelled: an update has
    /// nothing left to change.
    JobEnded,
    /// The pilot is shutting down and no longer takes this request.
    ShuttingDown,
    /// The pilot could not take the request (overloaded, or it went away).
    Unavailable,
    /// A bug in the pilot.
    Internal,
    /// The disk under the pilot directory is full: the journal cannot record the
    /// request, so it was not taken (nothing of it was queued). Try again once there
    /// is space; `status` says `disk_full` meanwhile.
    DiskFull,
    /// An actor id the pilot does not know, or an actor that has ended.
    UnknownActor,
    /// A node that is not live (`put_object`).
    UnknownNode,
    /// The actor's node was lost while the call was in flight (or while no node
    /// could run it).
    ActorLost,
    /// The actor's handler, or its `on_start`, panicked.
    ActorPanicked,
    /// The node's program has no actor type of that name, or another type under it.
    ActorTypeMismatch,
    /// A message, reply or spawn argument did not validate as its type.
    ActorInvalidData,
    /// No node of the pilot can host actors (its agents are not the application).
    NoActorHost,
    /// The actor was stopped before it answered.
    ActorStopped,
    /// The task has no result: unknown, or not finished yet.
    NoResult,
    /// The task finished, but its result was dropped by a journal compaction under
    /// the pilot's `--keep-results`.
    Compacted,
    /// A kind this client does not know (sent by a newer server).
    #[serde(other)]
    Unknown,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Malformed => "malformed",
            ErrorKind::UnknownRequest => "unknown_request",
            ErrorKind::ExpectedHello => "expected_hello",
            ErrorKind::ProtocolMismatch => "protocol_mismatch",
            ErrorKind::LineTooLong => "line_too_long",
            ErrorKind::InvalidSpec => "invalid_spec",
            ErrorKind::UnknownJob => "unknown_job",
            ErrorKind::JobEnded => "job_ended",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Internal => "internal",
            ErrorKind::DiskFull => "disk_full",
            ErrorKind::UnknownActor => "unknown_actor",
            ErrorKind::UnknownNode => "unknown_node",
            ErrorKind::ActorLost => "actor_lost",
            ErrorKind::ActorPanicked => "actor_panicked",
            ErrorKind::ActorTypeMismatch => "actor_type_mismatch",
            ErrorKind::ActorInvalidData => "actor_invalid_data",
            ErrorKind::NoActorHost => "no_actor_host",
            ErrorKind::NoResult => "no_result",
            ErrorKind::Compacted => "compacted",
            ErrorKind::ActorStopped => "actor_stopped",
            ErrorKind::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}
