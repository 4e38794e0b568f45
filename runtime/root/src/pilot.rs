//! Starting and stopping a pilot's root process: pilot directory and credentials,
//! journal, the QUIC endpoint agents link to, the client socket, and (locally) the
//! agent processes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorRef};
use saker_actors::liveness::Liveness;
use saker_actors::node::{Position, address_file, publish_address, reachable};
use saker_journal::{JournalWriter, SyncMode, WriterOptions};
use saker_transport::credentials::{Credentials, Role};
use saker_transport::pilot_dir::PilotDir;
use saker_transport::quic;
use saker_wire::messages::{Link, POSITION_ROOT};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::actor::{Root, RootArgs, RootMsg};
use crate::client::ClientRequest;
use crate::error::PilotError;
use crate::local::{AgentCommand, AgentProcesses, Shape, spawn_agents};
use crate::notice::{Notice, Notices};
use crate::offer::{self, NodeOptions};
use crate::records::Record;
use crate::slurm::{Allocation, srun_agents};
use crate::standbys::{StandbyOptions, StartedStandbys};
use saker_actors::resources::{Declared, NodeResources, SystemProbe, discover};
use saker_client::ClientEndpoint;
use saker_client::results::Timestamp;

mod open;
mod serve;

use open::Opened;
use serve::{ClientServer, accept_agents, start_client_server};

type Result<T, E = PilotError> = std::result::Result<T, E>;

/// Name of the journal directory inside the pilot directory.
pub const JOURNAL_DIR: &str = "journal";

/// How long a stopping pilot lets client connections deliver their last answers.
const CLIENT_FLUSH: Duration = Duration::from_secs(1);

/// How the agents of a pilot are started.
#[derive(Debug, Clone)]
pub enum Agents {
    /// Child processes on this machine.
    Local(Shape),
    /// One agent per node of the current Slurm allocation, by one `srun` step.
    Slurm {
        allocation: Allocation,
        fanout: u32,
        slots_per_node: Option<u32>,
    },
}

impl Agents {
    /// Slurm mode inside an allocation (unless `local`), else local processes of
    /// `shape`.
    pub fn detect(
        local: bool,
        shape: crate::local::ShapeRequest,
        slots_per_node: Option<u32>,
    ) -> Result<Agents, crate::local::ShapeError> {
        if !local && let Some(allocation) = Allocation::from_process_env() {
            return Ok(Agents::Slurm {
                allocation,
                fanout: shape.fanout.max(1),
                slots_per_node,
            });
        }
        Ok(Agents::Local(Shape::new(shape)?))
    }

    /// What `status` reports about the allocation.
    fn allocation_status(&self) -> Option<saker_client::AllocationStatus> {
        let Agents::Slurm { allocation, .. } = self else {
            return None;
        };
        Some(saker_client::AllocationStatus {
            job_id: allocation.job_id.clone(),
            node_list: allocation.node_list.clone(),
            nodes: allocation.nodes,
            end_time: allocation.end_unix_us.map(Timestamp::from_unix_micros),
            seconds_left: None,
        })
    }

    /// The most agents (nodes) the pilot will have.
    fn max_nodes(&self) -> u32 {
        match self {
            Agents::Local(shape) => shape.slots_per_agent.len() as u32,
            Agents::Slurm { allocation, .. } => allocation.nodes,
        }
    }

    /// What each local agent gets of this machine (none in an allocation, where every
    /// agent finds its own node).
    fn local_shares(&self, nodes: &NodeOptions) -> Vec<Declared> {
        match self {
            Agents::Local(shape) => {
                offer::local_shares(&shape.slots_per_agent, &nodes.declared, &SystemProbe)
            }
            Agents::Slurm { .. } => Vec::new(),
        }
    }

    /// The widest node the pilot will have, as far as it can tell before they join:
    /// its local agents' shares, or what this host (the allocation's batch host)
    /// finds, cores unknown (0) unless given per node.
    fn expected_node(&self, nodes: &NodeOptions, shares: &[Declared]) -> Option<NodeResources> {
        match self {
            Agents::Local(shape) => offer::widest(
                shape
                    .slots_per_agent
                    .iter()
                    .zip(shares)
                    .map(|(&slots, share)| discover(slots, share, &SystemProbe)),
            ),
            Agents::Slurm { slots_per_node, .. } => {
                let cores = slots_per_node.or_else(|| {
                    std::env::var("SLURM_CPUS_ON_NODE")
                        .ok()?
                        .trim()
                        .parse()
                        .ok()
                });
                Some(discover(cores.unwrap_or(0), &nodes.declared, &SystemProbe))
            }
        }
    }

    fn in_slurm(&self) -> bool {
        matches!(self, Agents::Slurm { .. })
    }
}

#[derive(Debug, Clone)]
pub struct PilotOptions {
    pub dir: PathBuf,
    pub agents: Agents,
    /// The program that runs an agent (`saker agent` for the CLI).
    pub agent_command: AgentCommand,
    pub sync: bool,
    /// Continue the pilot whose journal is in `dir` instead of starting a new one.
    pub resume: bool,
    /// A standby root: wait until the running root of `dir` is gone (its lock,
    /// [`crate::lock`]), then resume its pilot, adopting the agents that look for a
    /// new root, starting none. Implies `resume`.
    pub take_over: bool,
    /// Start no attempt that cannot finish by this time (unix µs), stop at it.
    pub deadline_unix_us: Option<u64>,
    /// Heartbeats on the agent links.
    pub liveness: Liveness,
    /// Scheduling policy (speculative copies of stragglers).
    pub core: saker_core::CoreConfig,
    /// What the nodes offer beyond cores, as declared (the rest is found).
    pub nodes: NodeOptions,
    /// Segment size and compaction of the journal.
    pub journal: JournalOptions,
    /// Grow and shrink through batch allocations of their own (an elastic pilot; its
    /// `agents` are then none).
    pub elastic: Option<ElasticOptions>,
    /// Standby roots, ready to take over if this root dies ([`crate::standbys`]).
    pub standbys: Option<StandbyOptions>,
    /// Where what a person should see goes (the root prints nothing).
    pub notices: Notices,
}

impl PilotOptions {
    /// Every agent is told it may be adopted, with what it runs, by a later root of
    /// this pilot once this one is gone: a standby that takes over, or a root resumed
    /// within the agent's reattach window.
    /// (Local agents get the flag last, `local.rs`.)
    fn let_later_roots_adopt_agents(&mut self) {
        if !matches!(self.agents, Agents::Local(_)) {
            let flag = crate::standbys::ANY_ROOT_FLAG;
            self.agent_command.args.push(flag.into());
        }
    }
}

/// An elastic pilot's settings (`saker pilot --elastic`).
#[derive(Debug, Clone)]
pub struct ElasticOptions {
    pub provision: saker_core::provision::ProvisionConfig,
    /// Between provisioning rounds.
    pub round: Duration,
    pub partition: Option<String>,
    pub account: Option<String>,
    /// Each allocation's time limit.
    pub time_limit_minutes: Option<u32>,
    /// Children per agent within an allocation.
    pub fanout: u32,
    /// How long an allocation's agents look for a restarted root.
    pub reattach_for: String,
}

/// How the pilot keeps its journal (docs/journal.md, "Compaction").
#[derive(Debug, Clone, Copy)]
pub struct JournalOptions {
    /// Bytes after which the writer starts a new segment.
    pub segment_bytes: u64,
    /// When the root compacts the journal, and which results it keeps.
    pub compaction: crate::actor::CompactionPolicy,
}

impl Default for JournalOptions {
    fn default() -> Self {
        JournalOptions {
            segment_bytes: 64 * 1024 * 1024,
            compaction: Default::default(),
        }
    }
}

/// `command` with the flags declaring what every node offers (agents on nodes of
/// their own: a Slurm allocation's, an elastic pilot's).
fn offering(command: &AgentCommand, nodes: &NodeOptions) -> AgentCommand {
    let mut command = command.clone();
    command.args.extend(
        offer::agent_arguments(&nodes.declared, nodes)
            .into_iter()
            .map(Into::into),
    );
    command
}

/// What the root needs to ask for an elastic pilot's allocations.
fn elastic_config(
    elastic: &ElasticOptions,
    command: &AgentCommand,
    dir: &Path,
    pilot_id: &str,
    options: &PilotOptions,
) -> crate::actor::ElasticConfig {
    let command = offering(command, &options.nodes);
    // Unique to the pilot and kept across restarts: a resumed root finds its own
    // jobs by this name (and cancels strays), so it must not match another pilot's.
    let pilot: String = pilot_id.chars().take(12).collect();
    crate::actor::ElasticConfig {
        provision: elastic.provision,
        round: elastic.round,
        script: crate::slurm::elastic_script(
            &command,
            dir,
            elastic.fanout,
            &options.liveness,
            &elastic.reattach_for,
        ),
        job_name: format!("saker-{pilot}"),
        partition: elastic.partition.clone(),
        account: elastic.account.clone(),
        time_limit_minutes: elastic.time_limit_minutes,
        working_directory: Some(dir.to_path_buf()),
        output: Some(dir.join("logs").join("allocation-%j.out")),
    }
}

/// The pilot's deadline (unix µs): the earlier of the allocation's end and `budget`
/// from now, minus `margin`.
pub fn deadline(
    agents: &Agents,
    margin: Duration,
    budget: Option<Duration>,
) -> Result<Option<u64>> {
    let now = Timestamp::now().unix_micros();
    let allocation_end = match agents {
        Agents::Slurm { allocation, .. } => allocation.end_unix_us,
        Agents::Local(_) => None,
    };
    let end = [allocation_end, budget.map(|b| now + b.as_micros() as u64)]
        .into_iter()
        .flatten()
        .min();
    let Some(end) = end else {
        return Ok(None);
    };
    let deadline = end.saturating_sub(margin.as_micros() as u64);
    if deadline <= now {
        return Err(PilotError::NoTime {
            left: Duration::from_micros(end.saturating_sub(now)),
            margin,
        });
    }
    Ok(Some(deadline))
}

/// A running pilot: the root actor plus everything it needs.
#[derive(Debug)]
pub struct Pilot {
    pub root: ActorRef<RootMsg>,
    root_done: JoinHandle<()>,
    pub dir: PilotDir,
    endpoint: quinn::Endpoint,
    client_server: ClientServer,
    agents: Option<AgentProcesses>,
    /// The standby roots this root started, stopped before its lock goes.
    standbys: StartedStandbys,
    shutdown: Arc<tokio::sync::Notify>,
    /// Set once the pilot stops: its local agents are not started again.
    stopping: Arc<AtomicBool>,
    /// This root's hold on the directory, released when the process ends.
    _lock: crate::lock::RootLock,
}

impl Pilot {
    /// Starts a pilot, step by step: its directory (created, or resumed and its
    /// journal read back, or taken over by a standby), the journal writer, the root
    /// actor, the agents' QUIC endpoint, the client socket, the agents, the standbys.
    pub async fn start(mut options: PilotOptions) -> Result<Pilot> {
        saker_transport::crypto::install_crypto_provider()?;
        options.let_later_roots_adopt_agents();
        let Opened {
            dir,
            lock,
            history,
            positions,
        } = open::directory(&options).await?;
        let credentials =
            Credentials::load(&dir, Role::Root).map_err(PilotError::LoadCredentials)?;
        let pilot_id = dir.pilot_id().to_string();
        let journal = open_journal(&options, &pilot_id)?;
        let shares = options.agents.local_shares(&options.nodes);
        let history = (history, positions);
        let root = spawn_root(&options, &dir, &pilot_id, journal, history, &shares).await?;
        let (bind, advertise) = addresses(&options).await?;
        let endpoint = listen_for_agents(&options, &dir, &credentials, &root, bind, advertise)?;
        let client_server = start_client_server(
            &dir,
            &credentials,
            &pilot_id,
            bind,
            advertise,
            root.actor.clone(),
        )
        .await?;
        let agents = start_agents(&options, &dir, &shares, Arc::clone(&root.stopping))?;
        let standbys = match &options.standbys {
            Some(standbys) => crate::standbys::spawn(standbys, options.take_over, dir.path())?,
            None => StartedStandbys::default(),
        };
        Ok(Pilot {
            root: root.actor,
            root_done: root.done,
            dir,
            endpoint,
            client_server,
            agents: Some(agents),
            standbys,
            shutdown: root.shutdown,
            stopping: root.stopping,
            _lock: lock,
        })
    }

    /// Sends a request to the root as a client would.
    pub fn request(&self, request: ClientRequest) -> Result<()> {
        self.root
            .send_message(RootMsg::Client(request))
            .map_err(|_| PilotError::RootStopped)
    }

    /// Resolves once a shutdown has been requested (by a client or [`Self::request_shutdown`]).
    pub fn stopped(&self) -> impl Future<Output = ()> + use<> {
        let shutdown = self.shutdown.clone();
        async move { shutdown.notified().await }
    }

    /// Asks the root to shut down without waiting for it.
    pub fn request_shutdown(&self) {
        let (reply, _) = oneshot::channel();
        let _ = self.request(ClientRequest::Shutdown {
            kill_running: true,
            reply,
        });
    }

    pub fn agent_pids(&self) -> Vec<u32> {
        self.agents
            .as_ref()
            .map(AgentProcesses::pids)
            .unwrap_or_default()
    }

    /// False once every agent process (or the agents' `srun` step) has exited: no
    /// work can run any more. A pilot started with no agents counts as running.
    pub fn agents_running(&mut self) -> bool {
        match &mut self.agents {
            Some(agents) if !agents.is_empty() => agents.any_running(),
            _ => true,
        }
    }

    /// Asks every agent to stop, waits for them, stops the root and closes the
    /// journal.
    pub async fn shutdown(mut self) -> Result<()> {
        let (reply, answer) = oneshot::channel();
        if self
            .request(ClientRequest::Shutdown {
                kill_running: true,
                reply,
            })
            .is_ok()
        {
            let _ = answer.await;
        }
        self.wait_stopped().await
    }

    /// After a shutdown was requested: stops the standbys, waits for agents, then
    /// stops the root.
    pub async fn wait_stopped(&mut self) -> Result<()> {
        // A root that stops on purpose takes its standbys with it, before its lock goes.
        self.standbys.stop(self.dir.path()).await;
        self.stopping.store(true, Ordering::Relaxed);
        if let Some(agents) = self.agents.take() {
            agents.wait(Duration::from_secs(10)).await;
        }
        let _ = ClientEndpoint::remove(&self.dir);
        let _ = std::fs::remove_file(self.dir.file_path(saker_client::CLIENT_SOCKET_FILE_NAME));
        self.root.stop(None);
        (&mut self.root_done).await.ok();
        // With the root stopped, closing its request channel makes the server deliver
        // the answers already given (the acknowledgement of this very shutdown) and
        // closes each connection. An idle client must not hold the pilot up for long.
        self.client_server.root_gone.take();
        let server = &mut self.client_server.server;
        if tokio::time::timeout(CLIENT_FLUSH, &mut *server)
            .await
            .is_err()
        {
            server.abort();
        }
        self.endpoint.close(0u32.into(), b"pilot stopped");
        // Before the lock goes: a standby that gets it finds the pilot ended.
        if let Err(error) = crate::lock::mark_stopped(self.dir.path()) {
            tracing::warn!(%error, "cannot mark the pilot stopped; a standby may take it over");
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// The root actor, running, and how to hear that it stopped or was asked to.
#[derive(Debug)]
struct StartedRoot {
    actor: ActorRef<RootMsg>,
    done: JoinHandle<()>,
    shutdown: Arc<tokio::sync::Notify>,
    stopping: Arc<AtomicBool>,
}

/// The journal writer of a starting root, its first record (`PilotStarted`) written.
fn open_journal(options: &PilotOptions, pilot_id: &str) -> Result<JournalWriter<Record>> {
    let journal = JournalWriter::<Record>::open(
        &options.dir.join(JOURNAL_DIR),
        WriterOptions {
            sync: if options.sync {
                SyncMode::Fsync
            } else {
                SyncMode::None
            },
            max_segment_bytes: options.journal.segment_bytes,
            ..WriterOptions::default()
        },
    )
    .map_err(PilotError::OpenJournal)?;
    journal
        .append_blocking(vec![Record::PilotStarted {
            pilot_id: pilot_id.to_owned(),
            saker_version: env!("CARGO_PKG_VERSION").to_string(),
            started_unix_us: Timestamp::now().unix_micros(),
        }])
        .map_err(PilotError::OpenJournal)?;
    Ok(journal)
}

/// Spawns the root actor, which restores `history` (the journal's records and where
/// each is) before it takes a message; a resumed pilot's notice says what it found.
async fn spawn_root(
    options: &PilotOptions,
    dir: &PilotDir,
    pilot_id: &str,
    journal: JournalWriter<Record>,
    (history, positions): (Vec<Record>, Vec<saker_journal::Position>),
    shares: &[Declared],
) -> Result<StartedRoot> {
    let expected_node = options.agents.expected_node(&options.nodes, shares);
    if let Some(node) = &expected_node {
        tracing::info!(?node, "the widest node expected");
    }
    let shutdown = Arc::new(tokio::sync::Notify::new());
    let stopping = Arc::new(AtomicBool::new(false));
    let (restored_tx, restored_rx) = oneshot::channel();
    let (actor, done) = Actor::spawn(
        None,
        Root,
        RootArgs {
            pilot_id: pilot_id.to_owned(),
            journal,
            core: options.core,
            shutdown: shutdown.clone(),
            stopping: Arc::clone(&stopping),
            allocation: options.agents.allocation_status(),
            max_nodes: Some(match &options.elastic {
                Some(elastic) => elastic.provision.max_nodes,
                None => options.agents.max_nodes(),
            }),
            expected_node,
            restore: history,
            restore_positions: positions,
            restored: Some(restored_tx),
            deadline_unix_us: options.deadline_unix_us,
            compaction: options.journal.compaction,
            process: Some(saker_client::RootStatus {
                host: crate::lock::this_host(),
                pid: std::process::id(),
                started: Some(Timestamp::now()),
                took_over: options.take_over,
            }),
            elastic: options.elastic.as_ref().map(|elastic| {
                elastic_config(
                    elastic,
                    &options.agent_command,
                    dir.path(),
                    pilot_id,
                    options,
                )
            }),
        },
    )
    .await
    .map_err(PilotError::StartRoot)?;
    if let Ok(summary) = restored_rx.await
        && options.resume
    {
        tracing::info!(?summary, "resumed from the journal");
        options.notices.tell(Notice::Resumed {
            jobs: summary.jobs,
            tasks: summary.tasks,
            finished: summary.finished,
            journal: options.dir.join(JOURNAL_DIR),
        });
    }
    Ok(StartedRoot {
        actor,
        done: tokio::spawn(async move {
            let _ = done.await;
        }),
        shutdown,
        stopping,
    })
}

/// Where the root listens, and the address it advertises: on one machine everything
/// stays on loopback; across nodes, every interface, and the address this host's
/// name resolves to.
async fn addresses(options: &PilotOptions) -> Result<(IpAddr, Option<IpAddr>)> {
    if !options.agents.in_slurm() && options.elastic.is_none() {
        return Ok((IpAddr::V4(Ipv4Addr::LOCALHOST), None));
    }
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string());
    let ip = saker_node::address::host_address(&host).await?;
    Ok((IpAddr::V4(Ipv4Addr::UNSPECIFIED), Some(ip)))
}

/// The QUIC endpoint agents link to, accepting them into `root`, its address
/// published in the pilot directory for them.
fn listen_for_agents(
    options: &PilotOptions,
    dir: &PilotDir,
    credentials: &Credentials,
    root: &StartedRoot,
    bind: IpAddr,
    advertise: Option<IpAddr>,
) -> Result<quinn::Endpoint> {
    let timeouts = options.liveness.quic_timeouts();
    let endpoint = quic::bind_endpoint(
        SocketAddr::new(bind, 0),
        Some(quic::server_config(credentials, &timeouts)?),
        quic::client_config(credentials, &timeouts)?,
    )?;
    // A fresh session per root process: agents of a crashed root never attach to
    // the tree of the resumed one (each resumed root starts its own agents).
    let hello = Link::Hello {
        position: POSITION_ROOT,
        session: session_id(),
    };
    tokio::spawn(accept_agents(
        endpoint.clone(),
        root.actor.clone(),
        hello,
        options.liveness,
    ));
    let root_file = address_file(dir.path(), Position::Root);
    let local = endpoint.local_addr().map_err(PilotError::LocalAddress)?;
    publish_address(&root_file, reachable(local, advertise)).map_err(|source| {
        PilotError::PublishAddress {
            path: root_file.clone(),
            source,
        }
    })?;
    Ok(endpoint)
}

/// The agents: local processes, one `srun` step in an allocation, none for an elastic
/// pilot (they come with its allocations, whose logs go to `DIR/logs`). A standby
/// that took over starts none but for a node whose agent is gone: it adopts the
/// agents of the root it replaces, and supervises them as that root did.
fn start_agents(
    options: &PilotOptions,
    dir: &PilotDir,
    shares: &[Declared],
    stopping: Arc<AtomicBool>,
) -> Result<AgentProcesses> {
    if options.elastic.is_some() {
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).map_err(PilotError::StartAgents)?;
    }
    let command = &options.agent_command;
    match &options.agents {
        Agents::Local(shape) => {
            let resources: Vec<Vec<String>> = shares
                .iter()
                .map(|share| offer::agent_arguments(share, &options.nodes))
                .collect();
            let liveness = &options.liveness;
            // A resumed root, or a standby that took over: live agents are adopted.
            let adopting = options.resume || options.take_over;
            spawn_agents(
                command,
                dir.path(),
                shape,
                &resources,
                liveness,
                adopting,
                stopping,
            )
            .map_err(PilotError::StartAgents)
        }
        Agents::Slurm {
            allocation,
            fanout,
            slots_per_node,
        } => {
            let command = offering(command, &options.nodes);
            let step = if options.take_over {
                None
            } else {
                let step = srun_agents(
                    &command,
                    dir.path(),
                    allocation,
                    *fanout,
                    *slots_per_node,
                    &options.liveness,
                )
                .map_err(PilotError::StartSrun)?;
                Some(step)
            };
            // A node whose agent dies while the node lives gets another, in a step of
            // its own; without the node list's order that cannot be placed.
            match saker_slurm::hostlist::expand(&allocation.node_list) {
                Ok(hosts) if hosts.len() == allocation.nodes as usize => {
                    let start = crate::slurm::agent_restarter(
                        &command,
                        dir.path(),
                        hosts,
                        *fanout,
                        *slots_per_node,
                        &options.liveness,
                    );
                    Ok(AgentProcesses::supervised_step(
                        step,
                        start,
                        dir.path(),
                        allocation.nodes,
                        stopping,
                    ))
                }
                other => {
                    tracing::warn!(?other, node_list = %allocation.node_list,
                        "the allocation's nodes are not known in order: agents that die are not started again");
                    Ok(AgentProcesses::from_children(step.into_iter().collect()))
                }
            }
        }
    }
}

/// A random id for this root process's tree.
fn session_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(Timestamp::now().unix_micros().into());
    hasher.finish()
}
