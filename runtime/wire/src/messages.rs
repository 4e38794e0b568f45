//! The message schema of the agent tree.
//!
//! Two enums, named by direction: [`ToAgent`] flows down from the root, [`FromAgent`]
//! flows up. Interior agents relay frames for their subtree by the frame header's
//! route field alone (see [`crate::frame`]), so most relayed payloads are never decoded.
//!
//! Tasks travel as compact [`Assignment`]s (task, attempt, job, array index); what to
//! run travels once per job and agent as a [`JobDef`]. A batch of a thousand array
//! tasks is therefore ~24 KB, not a thousand copies of an argv.
//!
//! The schema speaks the core's vocabulary: ids ([`TaskId`], [`AttemptId`], [`JobId`],
//! [`NodeId`]), [`Resources`] and [`Placement`] are `saker-core`'s own types, archived
//! as they are. What a task runs is an open [`Payload`] and what it returns an open
//! [`ResultBody`]: a command line and its captured output, or a function payload for
//! a persistent worker and the bytes it answered with (see `docs/workers.md`).

use std::sync::Arc;

use rkyv::{Archive, Deserialize, Serialize};
pub use saker_core::{
    ArchivedAttemptId, ArchivedJobId, ArchivedNodeId, ArchivedObjectId, ArchivedPlacement,
    ArchivedResources, ArchivedTaskId, AttemptId, JobId, LauncherKind, MpiKind, NodeId, ObjectId,
    Placement, ResourceKind, Resources, TaskId,
};

/// Bumped on any change to the schema or framing. Checked in the stream preamble
/// before any rkyv payload is read, so a mismatched peer gets a clear error.
/// 4: core ids and resource vectors, open payloads and result bodies, placements.
/// 5: function payloads and results, `Outcome::Raised`.
/// 6: HPC jobs: `JobDef::hpc`, gang parts in dispatches, launch relays, part results.
/// 7: `Link::Child` and `Link::Superseded` (one live agent per node).
/// 8: placed actors: `ActorSpawn`/`ActorCall`/`ActorStop` down, `ActorReply` and
/// `ActorEvent` up, `Hello::hosts_actors`.
/// 9: node resources: `Hello::custom` (named resources), `Welcome::capacity`,
/// `Outcome::OutOfMemory`; data items: `JobDef::reads`/`writes`, `ItemsWritten`,
/// `ItemRead` and `ItemData` both ways.
/// 10: `TaskResult::received_unix_us`.
/// 11: `Outcome::WorkerFailed`.
/// 12: `Hello::held` (adoption).
/// 13: `Held::gang` (gang parts adopted), `Hello::actors` (placed actors adopted).
/// 14: `Hello::scratch` (clients on the node put objects there).
/// 15: items fetched node to node: `Hello::data_addr`, `ItemWhere`/`ItemHolders`,
/// `ItemCopied`.
/// 16: `ToAgent::ItemsFreed` (objects freed by their owner).
/// 17: `TaskResult::fetch_us`.
/// 18: `FromAgent::StoreUsage` (object memory).
/// 19: `FromAgent::DropCopy`/`ToAgent::CopyDrop` (fetched copies dropped, asked).
/// 20: `ItemHolders::upstream` (copies relayed while they are fetched).
/// 21: `FromAgent::ObjectPut`/`ToAgent::ObjectStored` (clients put objects on a
/// node's data connection).
/// 22: `MpiKind::Pmi`, `FromAgent::PmiFence`/`ToAgent::PmiFenced` (ranks started by
/// their agents wire up through them).
/// 23: `ResultBody::Part::pmi` (when a part's ranks wired up), `ProcessEnd::ended_unix_us` and `aborted`.
/// 24: `GangPart::hub` (a PMI job's fences gather at its leader, over data
/// connections: `FromAgent::PmiFence` up a stream, `ToAgent::PmiFenced` back).
/// 25: `LauncherKind::Script`; `GangLaunch::ranks` (a script's `saker mpiexec`: ranks
/// on a member, served PMI) and `GangLaunchEnded::stdout`/`stderr` (theirs).
pub const PROTOCOL_VERSION: u32 = 25;

/// Most bytes of one function payload, and of one function's output: both travel
/// inline through the tree, the journal and client lines.
pub const MAX_FUNCTION_BYTES: usize = 16 << 20;

/// Payload or output bytes past which a sender starts a new frame (a single larger
/// item travels alone), keeping frames well under the frame limit.
pub const FRAME_DATA_BUDGET: usize = 8 << 20;

/// Route value for a frame addressed to whichever agent reads it (the link peer).
pub const ROUTE_PEER: u32 = u32::MAX;

/// Route value of a hop-local [`Link`] frame: it concerns the link it travels on and is
/// never relayed.
pub const ROUTE_LINK: u32 = u32::MAX - 1;

/// Position value of the root in [`Link::Hello`]; agent `n` is at `n + 1`.
pub const POSITION_ROOT: u32 = 0;

/// Hop-local messages between the two ends of one link (route [`ROUTE_LINK`]).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub enum Link {
    /// The accepting end's first frame: who it is, so a child dialing an address from
    /// the pilot directory can tell a live ancestor from a stale file whose port was
    /// reused, and which root it serves, so agents of a crashed root never attach to
    /// the tree of the resumed one.
    Hello { position: u32, session: u64 },
    /// Sent by either end after a quiet interval; any frame proves the peer alive.
    Heartbeat,
    /// From a parent that has just reattached to the tree: the root declared this
    /// whole subtree lost meanwhile, so every agent below registers again.
    Rejoin,
    /// The dialing end's first frame: the node it is, so its parent knows which node
    /// each child link leads to directly.
    Child { node: u32 },
    /// From a parent to a child link: a newer agent has linked as the same node, so
    /// this one is a stale copy (say, started twice by hand) and must stop rather
    /// than look for another parent; frames for the node go to the newer one.
    Superseded { node: u32 },
}

/// Messages from the root (or a relaying ancestor) to an agent.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub enum ToAgent {
    /// Answer to [`Hello`]: the agent is registered and may start asking for work.
    Welcome(Welcome),
    /// The root refuses this agent (duplicate node id, bad version); the link closes.
    Refused { reason: String },
    /// Tasks for this agent's executors, with any job definitions it has not seen.
    Dispatch(Dispatch),
    /// Stop these attempts (task cancelled, or a speculative copy lost the race). For
    /// a gang attempt: stop this node's part.
    Cancel { attempts: Vec<AttemptId> },
    /// Give these attempts back if they wait in the local queue (not started): the
    /// node is reserved for a gang. Each one given back ends `Cancelled`; one that
    /// started already runs on.
    Return { attempts: Vec<AttemptId> },
    /// Run `command` (a shell command line an MPI launcher gave its remote-shell
    /// agent, e.g. an `orted` daemon) in this node's part of gang `attempt`.
    GangLaunch(GangLaunch),
    /// To a gang's leader: the command it asked a member to run ended with `code`.
    GangLaunchEnded(GangLaunchEnded),
    /// Start an actor on this node (a new life of it, if it ran before).
    ActorSpawn(ActorSpawn),
    /// A message for an actor of this node, to be answered with an
    /// [`FromAgent::ActorReply`] unless it is a cast.
    ActorCall(ActorCall),
    /// Stop this life of an actor (its `on_stop` runs); answered with an
    /// [`FromAgent::ActorEvent`].
    ActorStop { actor: u64, life: u32 },
    /// The answer to a call this node made ([`FromAgent::ActorCall`]); `call` is the
    /// node's own number for it.
    ActorAnswer(ActorReply),
    /// Finish or kill running work and exit.
    Shutdown { reason: String, kill_running: bool },
    /// The results of this node's reports up to `through` ([`Report::seq`]) are in
    /// the root's journal: the agent may forget them. Until then it keeps them, to
    /// hand to the next root should this one die first.
    Durable { through: u64 },
    /// The root does not (or no longer) count this agent as live, e.g. it was declared
    /// lost in a race with its reattachment: stop the old work and say Hello again.
    Rejoin,
    /// To a node holding a data item: another node asks for some of its bytes.
    ItemRead(crate::items::ItemRead),
    /// To a node that asked for a data item's bytes: the answer.
    ItemData(crate::items::ItemData),
    /// To a node that asked where a data item is: its holders it may fetch from
    /// directly (none: it fetches through the root).
    ItemHolders(crate::items::ItemHolders),
    /// On a data connection only: the answer to an [`ObjectPut`](crate::items::ObjectPut).
    ObjectStored(crate::items::ObjectStored),
    /// To a holder: these items are freed, their files go (plain item names only).
    ItemsFreed { items: Vec<String> },
    /// To a node that asked to drop a copy ([`FromAgent::DropCopy`]): may it?
    CopyDrop(crate::items::CopyDrop),
    /// To every member of a PMI gang: each member's keys of one fence, all of them
    /// in (`member` unused).
    PmiFenced(PmiFence),
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct Welcome {
    pub node: NodeId,
    /// Pilot identity, so an agent started for another pilot cannot be mixed in.
    pub pilot_id: String,
    /// What the node offers as the root numbers resources: the hello's capacity plus
    /// its named resources ([`Hello::custom`]) in the root's custom kinds, which
    /// job definitions use. Names the root could not number are left out.
    pub capacity: Resources,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct Dispatch {
    /// Shared, so that the root serializes the definition it keeps without cloning it
    /// first, and the agent keeps the one it receives as it is.
    pub jobs: Vec<Arc<JobDef>>,
    pub tasks: Vec<Assignment>,
    /// Finished jobs whose definitions this node may drop: none of their tasks will be
    /// sent again, and a job sent again would come with its definition. Without this
    /// an agent would keep every job it ever ran (a task file of a million lines is a
    /// million single-task jobs).
    pub forget: Vec<JobId>,
    /// Set when `tasks` is one gang attempt: this node's part in it.
    pub gang: Option<GangPart>,
    /// The results of this node's reports up to here are durable, as
    /// [`ToAgent::Durable`] says (0: no news). Carried by the next dispatch, so that a
    /// busy node's acknowledgements cost no frame of their own.
    pub durable: u64,
}

/// One node's part in a gang attempt (an HPC job's run on several nodes at once).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct GangPart {
    /// This node's position among the members; 0 is the group's leader.
    pub member: u32,
    /// The members' nodes, leader first.
    pub nodes: Vec<NodeId>,
    /// The members' host names, leader first (the agents' own names, which may repeat
    /// when several agents share a machine).
    pub hosts: Vec<String>,
    /// A TCP port for the job's rendezvous (`MASTER_PORT`), distinct among the
    /// pilot's running gangs.
    pub port: u16,
    /// Where a PMI job's fences gather: the leader's data address (`host:port`),
    /// which each other member sends its keys to and hears every member's from. Empty:
    /// through the root (a job of one member, or a leader that serves no data).
    pub hub: String,
}

/// How an HPC job's ranks are laid out and started.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Hpc {
    /// Ranks in all (at most `ranks_per_node` on each node, filled in node order).
    pub ranks: u32,
    pub ranks_per_node: u32,
    pub cores_per_rank: u32,
    pub mpi: MpiKind,
    pub launcher: LauncherKind,
}

/// A command an MPI launcher on a gang's leader wants run on a member.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct GangLaunch {
    pub attempt: AttemptId,
    /// Which member runs it (going up); ignored going down.
    pub member: u32,
    /// The leader's number for this launch, echoed in [`GangLaunchEnded`].
    pub launch: u32,
    /// A `/bin/sh -c` command line.
    pub command: String,
    /// None: one command (an MPI launcher's daemon). Some: the command as ranks of a
    /// script job's `saker mpiexec`, each served PMI by the member's agent.
    pub ranks: Option<LaunchRanks>,
}

/// The ranks a script job's `saker mpiexec` starts: a PMI world of its own (`world`,
/// counted per attempt), laid out as an HPC job's ranks are (node after node,
/// `ranks_per_node` on each), over the first members of the gang.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct LaunchRanks {
    pub world: u32,
    pub ranks: u32,
    pub ranks_per_node: u32,
    /// The directory and environment of `saker mpiexec`, which its ranks get (on top
    /// of the job's and the PMI variables), as an MPI launcher passes its own on.
    pub cwd: String,
    pub env: Vec<EnvVar>,
}

/// How a [`GangLaunch`] ended: its exit code, or 128 + the signal that killed it, or
/// 255 if it could not run.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct GangLaunchEnded {
    pub attempt: AttemptId,
    pub launch: u32,
    pub code: i32,
    /// A launch of ranks: their output, rank after rank (the first bytes of each, up
    /// to the job's inline limit, and where the rest is on the member). Empty for a
    /// daemon.
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// One member's keys for a fence of a PMI gang (its ranks' puts since the last one),
/// or, going down, every member's.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PmiFence {
    pub attempt: AttemptId,
    /// The member that sends it (going up).
    pub member: u32,
    /// Which of the gang's fences, from 0.
    pub epoch: u32,
    /// `(key, value)` pairs, each key put by one rank.
    pub puts: Vec<(String, String)>,
}

/// Everything an agent needs to run any task of one submitted job.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct JobDef {
    pub job: JobId,
    /// What each task runs.
    pub payload: Payload,
    /// What each task occupies on its node (on each node, for a gang).
    pub resources: Resources,
    /// One node per task, or a gang of nodes.
    pub placement: Placement,
    /// Set for an HPC job: its ranks and how they start.
    pub hpc: Option<Hpc>,
    /// 0 means no limit.
    pub time_limit_ms: u64,
    /// Bytes of stdout and of stderr kept inline in the result; the rest is spilled.
    pub inline_output_bytes: u32,
    pub is_array: bool,
    /// Data items each task reads: fetched into the node's scratch before it starts.
    pub reads: Vec<String>,
    /// Data items each task writes in the node's scratch (the root learns where).
    pub writes: Vec<String>,
}

/// What a task runs.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub enum Payload {
    Command(Command),
    Function(Function),
}

impl Payload {
    /// Bytes this payload adds to a frame beyond its fixed part (for frame budgets).
    pub fn data_len(&self) -> usize {
        match self {
            Payload::Command(_) => 0,
            Payload::Function(function) => function.data.len(),
        }
    }
}

/// A call for a persistent worker of `kind`: `data` is opaque to Saker.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct Function {
    pub kind: String,
    pub data: Vec<u8>,
}

/// What stands for an array task's index in its command line and environment: the
/// root, the CLI and the agents replace it alike.
pub const INDEX_PLACEHOLDER: &str = "{index}";

/// Replaces every [`INDEX_PLACEHOLDER`] in `arg` with `index`; borrows when there is
/// nothing to replace (all but one or two arguments, typically).
pub fn expand_index(arg: &str, index: u32) -> std::borrow::Cow<'_, str> {
    if arg.contains(INDEX_PLACEHOLDER) {
        std::borrow::Cow::Owned(arg.replace(INDEX_PLACEHOLDER, &index.to_string()))
    } else {
        std::borrow::Cow::Borrowed(arg)
    }
}

/// A command line, run as a process of its own.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct Command {
    /// Program and arguments. For array jobs `{index}` in an argument is replaced by
    /// the array index on the agent.
    pub argv: Vec<String>,
    /// Overrides on top of the agent's inherited environment.
    pub env: Vec<EnvVar>,
    pub cwd: Option<String>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct EnvVar {
    pub key: String,
    pub value: String,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Assignment {
    pub task: TaskId,
    pub attempt: AttemptId,
    pub job: JobId,
    pub index: u32,
}

/// Messages from an agent to the root, relayed unchanged by interior agents.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub enum FromAgent {
    Hello(Hello),
    /// Results and starts since the last report, plus new credit (pull-based dispatch:
    /// results piggy-back on the request for more work).
    Report(Report),
    /// The agent is leaving on purpose (shutdown, fatal local error).
    Goodbye {
        node: NodeId,
        reason: String,
    },
    /// An interior agent lost the link to a child: every node of that subtree is gone.
    NodesLost {
        nodes: Vec<NodeId>,
        reason: String,
    },
    /// A gang's leader asks for a command to run on a member (relayed by the root).
    GangLaunch(GangLaunch),
    /// A member's launched command ended (relayed by the root to the leader).
    GangLaunchEnded(GangLaunchEnded),
    /// The answer to an [`ActorCall`].
    ActorReply(ActorReply),
    /// A call (or, with `call` 0, a cast) from code on this node to an actor anywhere,
    /// routed by the root; `call` is this node's number for it, `life` unused.
    ActorCall(ActorCall),
    /// An actor of this node started, failed to start, stopped or panicked.
    ActorEvent(ActorEvent),
    /// Data items an attempt wrote here (before the report with its result).
    ItemsWritten(crate::items::ItemsWritten),
    /// This node needs bytes of a data item (the root passes it to a holder).
    ItemRead(crate::items::ItemRead),
    /// A holder's answer to an [`ItemRead`](crate::items::ItemRead), for the root to pass on.
    ItemData(crate::items::ItemData),
    /// This node is to fetch a data item: which nodes hold it, and where to dial them?
    ItemWhere(crate::items::ItemWhere),
    /// This node fetched a whole data item: it holds a copy now.
    ItemCopied(crate::items::ItemCopied),
    /// What this node's object memory holds now.
    StoreUsage(crate::items::StoreUsage),
    /// This node is short of object memory: may it drop its copy of an item?
    DropCopy(crate::items::DropCopy),
    /// On a data connection only: a client puts an object in the node's store.
    ObjectPut(crate::items::ObjectPut),
    /// A member of a PMI gang: its ranks entered a fence with these new keys.
    PmiFence(PmiFence),
}

/// One life of a placed actor: what to start and with which arguments. The type is
/// named by the application's own `NAME` and checked by `fingerprint` (of its
/// argument, message and reply types), so two builds that disagree on a type fail at
/// the spawn with a clear error, never read each other's bytes as the wrong type.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct ActorSpawn {
    /// The pilot-wide actor id.
    pub actor: u64,
    /// Which life of it: 0 first, one more per restart. Calls and events name it,
    /// so nothing of a previous life is taken for the current one.
    pub life: u32,
    pub name: String,
    pub fingerprint: u64,
    /// The spawn arguments, archived by the application.
    pub args: Vec<u8>,
}

/// One message for an actor.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct ActorCall {
    pub actor: u64,
    pub life: u32,
    /// The root's number for the call, echoed in the reply; 0 for a cast (no reply).
    pub call: u64,
    pub data: Vec<u8>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct ActorReply {
    pub call: u64,
    pub answer: ActorAnswer,
}

/// What a call came to on the actor's node.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub enum ActorAnswer {
    /// The reply, archived by the application.
    Reply(Vec<u8>),
    Failed {
        fault: ActorFault,
        message: String,
    },
}

/// Why an actor could not answer, or start.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub enum ActorFault {
    /// No such actor (never spawned, or stopped).
    Unknown,
    /// Its node was lost while the call was in flight (or before it started).
    Lost,
    /// The handler (or `on_start`) panicked; the actor's life ended.
    Panicked,
    /// The node's program registers no actor type of that name, or a different type
    /// under it (another build of the application).
    TypeMismatch,
    /// The message, reply or arguments did not validate as their type.
    InvalidData,
    /// The node's agent cannot host actors (it is not the application's binary).
    NoHost,
    /// The actor was stopped before it answered.
    Stopped,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct ActorEvent {
    pub actor: u64,
    pub life: u32,
    pub status: ActorStatus,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub enum ActorStatus {
    /// `on_start` returned: calls are being answered.
    Started,
    /// This life never started (`fault` says why) or ended abnormally.
    Failed { fault: ActorFault, message: String },
    /// Stopped as asked (`on_stop` ran).
    Stopped,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct Hello {
    pub node: NodeId,
    pub hostname: String,
    /// What this agent offers in cores, GPUs and memory; its cores equal the sum of
    /// its executors' slots. Custom kinds are zero here: the agent names them in
    /// `custom`, and the root's [`Welcome`] says how it numbers them.
    pub capacity: Resources,
    /// Named resources of the site's own this node offers (`--node-resource licence=4`).
    pub custom: Vec<NamedAmount>,
    pub executors: u32,
    pub pid: u32,
    pub pilot_id: String,
    /// Whether this agent's program hosts actors (it is the application's binary).
    pub hosts_actors: bool,
    /// Attempts this agent still holds from an earlier root: running, or ended with
    /// a result not reported yet (it follows this hello). The root adopts each it can
    /// and cancels the rest (docs/runtime-semantics.md, "Adoption").
    pub held: Vec<Held>,
    /// Lives of placed actors this agent still hosts from an earlier root: the root
    /// adopts each it restored from its journal and stops the rest.
    pub actors: Vec<HeldActor>,
    /// The node's scratch directory, absolute: its data items and objects are files
    /// there. A client that sees the directory (on the node, or through a shared
    /// filesystem) puts objects in it and reads them from it directly.
    pub scratch: String,
    /// Where other agents dial this one to fetch its items directly (QUIC, the
    /// pilot's CA, the transport's data ALPN); empty: nowhere.
    pub data_addr: String,
}

/// A life of a placed actor an agent hosts when it says hello ([`Hello::actors`]).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct HeldActor {
    pub actor: u64,
    pub life: u32,
}

/// An attempt an agent holds when it says hello ([`Hello::held`]).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Held {
    pub attempt: AttemptId,
    pub task: TaskId,
    /// When it started (unix µs); 0: it had not started.
    pub started_unix_us: u64,
    /// It ended: its result waits in the agent's next report.
    pub ended: bool,
    /// This node's part of a gang attempt: the root adopts the attempt once every
    /// member listed its part.
    pub gang: Option<GangPart>,
}

/// An amount of a named resource.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct NamedAmount {
    pub name: String,
    pub amount: u32,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct Report {
    pub node: NodeId,
    /// This report's number in its agent's life, from 1 (see [`ToAgent::Durable`]).
    pub seq: u64,
    /// Additional resources' worth of work the agent asks for (incremental, like
    /// flow-control window updates, so in-flight dispatches never race with it).
    pub credit: Resources,
    pub started: Vec<Started>,
    pub results: Vec<TaskResult>,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Started {
    pub task: TaskId,
    pub attempt: AttemptId,
    pub executor: u32,
    pub at_unix_us: u64,
}

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct TaskResult {
    pub task: TaskId,
    pub attempt: AttemptId,
    pub executor: u32,
    pub outcome: Outcome,
    /// When the agent received the attempt's dispatch (unix µs, its clock; 0 when
    /// unknown): with the root's dispatch time and the start, where the time went.
    pub received_unix_us: u64,
    pub start_unix_us: u64,
    pub end_unix_us: u64,
    /// How long the attempt waited on its node for the data items it reads to be
    /// fetched (µs; 0: none fetched).
    pub fetch_us: u64,
    pub body: ResultBody,
}

/// What an attempt returned besides how it ended. Open, like [`Payload`].
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub enum ResultBody {
    /// A command's captured output.
    Command { stdout: Output, stderr: Output },
    /// A worker's answer to a call (its return value, or its exception when it
    /// raised), `None` when no answer came.
    Function { output: Option<Vec<u8>> },
    /// One node's part of a gang attempt: the output of its first process (rank 0's
    /// on the leader, or the MPI launcher's) and how each of its processes ended.
    Part {
        stdout: Output,
        stderr: Output,
        ends: Vec<ProcessEnd>,
        /// When this node's ranks wired up, for a part whose ranks it served PMI.
        pmi: Option<PmiTimes>,
    },
}

/// When one node's ranks, served PMI by their agent, wired up (µs since the Unix
/// epoch on the agent's clock; 0: never).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[rkyv(derive(Debug))]
pub struct PmiTimes {
    /// The last of its ranks said PMI `init`.
    pub inited_unix_us: u64,
    /// Its ranks' first fence (barrier) over the whole group completed.
    pub fenced_unix_us: u64,
}

/// How one process of a gang part ended.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub struct ProcessEnd {
    /// Its rank, for ranks Saker started; for an MPI job, 0 is the launcher and
    /// 1, 2, ... the daemons a member ran.
    pub rank: u32,
    pub outcome: Outcome,
    /// When it ended (µs since the Unix epoch, the agent's clock): of a gang's
    /// failures, the earliest decides its outcome.
    pub ended_unix_us: u64,
    /// It called `PMI_Abort` (its outcome is the exit it asked for): often what a
    /// rank does when a peer failed, so any other failure decides before it.
    pub aborted: bool,
}

impl ResultBody {
    /// No output (an attempt that never ran its program).
    pub fn empty_command() -> ResultBody {
        ResultBody::Command {
            stdout: Output::default(),
            stderr: Output::default(),
        }
    }

    /// Bytes this body adds to a frame beyond its fixed part (for frame budgets).
    pub fn data_len(&self) -> usize {
        match self {
            ResultBody::Command { stdout, stderr } => stdout.inline.len() + stderr.inline.len(),
            ResultBody::Function { output } => output.as_ref().map_or(0, Vec::len),
            ResultBody::Part { stdout, stderr, .. } => stdout.inline.len() + stderr.inline.len(),
        }
    }
}

/// How an attempt ended, as seen by the agent.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[rkyv(derive(Debug))]
pub enum Outcome {
    Exited {
        code: i32,
    },
    Signaled {
        signal: i32,
    },
    TimedOut,
    /// Killed by the kernel at the memory limit its agent set (the task's `memory`):
    /// the task's own failure, like a time limit.
    OutOfMemory {
        limit_mib: u32,
    },
    /// The program could not be started (not found, not executable, bad cwd).
    SpawnFailed {
        reason: String,
    },
    /// Infrastructure failure on the agent (executor crashed); the root may replay.
    Lost {
        reason: String,
    },
    Cancelled,
    /// A function task's worker answered that the call raised: the task's own failure.
    /// `message` is the worker's one line about it; the exception is in the body.
    Raised {
        message: String,
    },
    /// A function task's persistent worker could not be started, or ended before it
    /// was ready (its Python lacks the `saker` package, its command is wrong): the
    /// task's own failure, like `SpawnFailed`, but one that says the worker's
    /// environment, not the call, is at fault.
    WorkerFailed {
        reason: String,
    },
}

/// Captured output of one stream of one attempt.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[rkyv(derive(Debug))]
pub struct Output {
    /// The first `inline_output_bytes` bytes.
    pub inline: Vec<u8>,
    pub total_bytes: u64,
    /// Where the whole stream was written when it exceeded the inline limit.
    pub spill_path: Option<String>,
}

// Frames put payloads on 8-byte boundaries only (see `crate::frame`), and rkyv aligns
// archived values by their absolute position in the send buffer, where a payload may
// start at 8 mod 16. Both are sound only while no archived type needs more than 8.
// Add every new archived type here.
const _: () = {
    use core::mem::align_of;
    const MAX: usize = crate::align::FRAME_ALIGNMENT;
    assert!(align_of::<ArchivedToAgent>() <= MAX);
    assert!(align_of::<ArchivedLink>() <= MAX);
    assert!(align_of::<ArchivedWelcome>() <= MAX);
    assert!(align_of::<ArchivedDispatch>() <= MAX);
    assert!(align_of::<ArchivedJobDef>() <= MAX);
    assert!(align_of::<ArchivedPayload>() <= MAX);
    assert!(align_of::<ArchivedCommand>() <= MAX);
    assert!(align_of::<ArchivedFunction>() <= MAX);
    assert!(align_of::<ArchivedResources>() <= MAX);
    assert!(align_of::<ArchivedPlacement>() <= MAX);
    assert!(align_of::<ArchivedTaskId>() <= MAX);
    assert!(align_of::<ArchivedAttemptId>() <= MAX);
    assert!(align_of::<ArchivedJobId>() <= MAX);
    assert!(align_of::<ArchivedNodeId>() <= MAX);
    assert!(align_of::<ArchivedEnvVar>() <= MAX);
    assert!(align_of::<ArchivedAssignment>() <= MAX);
    assert!(align_of::<ArchivedFromAgent>() <= MAX);
    assert!(align_of::<ArchivedHello>() <= MAX);
    assert!(align_of::<ArchivedReport>() <= MAX);
    assert!(align_of::<ArchivedStarted>() <= MAX);
    assert!(align_of::<ArchivedTaskResult>() <= MAX);
    assert!(align_of::<ArchivedResultBody>() <= MAX);
    assert!(align_of::<ArchivedOutcome>() <= MAX);
    assert!(align_of::<ArchivedOutput>() <= MAX);
    assert!(align_of::<ArchivedGangPart>() <= MAX);
    assert!(align_of::<ArchivedHpc>() <= MAX);
    assert!(align_of::<saker_core::ArchivedMpiKind>() <= MAX);
    assert!(align_of::<saker_core::ArchivedLauncherKind>() <= MAX);
    assert!(align_of::<ArchivedGangLaunch>() <= MAX);
    assert!(align_of::<ArchivedGangLaunchEnded>() <= MAX);
    assert!(align_of::<ArchivedLaunchRanks>() <= MAX);
    assert!(align_of::<ArchivedPmiFence>() <= MAX);
    assert!(align_of::<ArchivedPmiTimes>() <= MAX);
    assert!(align_of::<ArchivedProcessEnd>() <= MAX);
    assert!(align_of::<ArchivedActorSpawn>() <= MAX);
    assert!(align_of::<ArchivedActorCall>() <= MAX);
    assert!(align_of::<ArchivedActorReply>() <= MAX);
    assert!(align_of::<ArchivedActorAnswer>() <= MAX);
    assert!(align_of::<ArchivedActorFault>() <= MAX);
    assert!(align_of::<ArchivedActorEvent>() <= MAX);
    assert!(align_of::<ArchivedActorStatus>() <= MAX);
};
