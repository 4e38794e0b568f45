//! The local agents' supervisor: the root started them, so it keeps them running. An
//! agent that ends while the pilot runs (killed, crashed, out of memory) is started
//! again after a backoff, and its node is used again; its work was replayed when its
//! link went. A node whose agent of an earlier root still lives (a resumed pilot,
//! [`saker_actors::node_lock`]) is left to that agent, which joins this root with
//! what it runs, and gets one of ours only once that one ends.
//!
//! Tuning constants, not guarantees: [`POLL`], [`FIRST_BACKOFF`], [`MAX_BACKOFF`],
//! [`MAX_RESTARTS`], [`STEADY`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::process::Child;
use tokio::sync::watch;

/// How often the supervisor looks at its agents.
pub const POLL: Duration = Duration::from_millis(250);
/// The wait before the first restart of a node's agent; it doubles with each next.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Restarts of one node's agent before the supervisor gives that node up.
pub const MAX_RESTARTS: u32 = 5;
/// An agent that lived this long before it ended starts its node's count afresh.
pub const STEADY: Duration = Duration::from_secs(600);

/// Starts node `node`'s agent process.
pub(crate) type Start = Box<dyn Fn(u32) -> std::io::Result<Child> + Send>;

#[derive(Debug)]
enum Run {
    /// Our process, started then.
    Ours(Child, Instant),
    /// An earlier root's agent holds the node: ours starts once it is gone.
    Theirs,
    /// Started by someone else (an allocation's `srun` step): theirs once it holds its
    /// node's lock; ours starts if it does not by then.
    /// `stamp`: what this allocation's agent writes into the lock it takes.
    Expected(Instant, Arc<str>),
    /// The node's lock cannot be asked about (a filesystem without such locks): not
    /// supervised.
    Unknown,
    /// Ours ended; the next starts then.
    Waiting(Instant),
    /// Ended too often.
    GivenUp,
}

#[derive(Debug)]
struct Node {
    node: u32,
    run: Run,
    restarts: u32,
}

/// The supervisor's handle: stops it, and gives back the processes that run.
#[derive(Debug)]
pub(super) struct Supervisor {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<Child>>,
    pids: Arc<Mutex<Vec<u32>>>,
    /// Nodes not given up: while some are, agents may still run.
    alive: Arc<Mutex<usize>>,
}

impl Supervisor {
    /// Supervises `nodes`: `ours` already started, the rest held by earlier agents.
    /// `stopping` is set once the pilot stops: from then on nothing is restarted.
    pub(super) fn start(
        start: Start,
        dir: PathBuf,
        ours: Vec<(u32, Child)>,
        theirs: Vec<u32>,
        stopping: Arc<AtomicBool>,
    ) -> Supervisor {
        Supervisor::supervise(start, dir, ours, theirs, Vec::new(), stopping)
    }

    /// Supervises `expected` nodes whose agents another process starts (an
    /// allocation's `srun` step): a node whose agent has not taken its lock within
    /// `grace`, or whose agent ends, gets one of ours.
    /// An agent killed before this supervisor saw its lock held is known by the
    /// `stamp` it left in the lock file (its allocation's job id): replaced at once.
    pub(crate) fn start_expecting(
        start: Start,
        dir: PathBuf,
        expected: Vec<u32>,
        grace: Duration,
        stamp: &str,
        stopping: Arc<AtomicBool>,
    ) -> Supervisor {
        let until = Instant::now() + grace;
        let stamp: Arc<str> = stamp.into();
        let expected = expected
            .into_iter()
            .map(|node| (node, until, Arc::clone(&stamp)))
            .collect();
        Supervisor::supervise(start, dir, Vec::new(), Vec::new(), expected, stopping)
    }

    fn supervise(
        start: Start,
        dir: PathBuf,
        ours: Vec<(u32, Child)>,
        theirs: Vec<u32>,
        expected: Vec<(u32, Instant, Arc<str>)>,
        stopping: Arc<AtomicBool>,
    ) -> Supervisor {
        let now = Instant::now();
        let mut nodes: Vec<Node> = ours
            .into_iter()
            .map(|(node, child)| Node {
                node,
                run: Run::Ours(child, now),
                restarts: 0,
            })
            .chain(theirs.into_iter().map(|node| Node {
                node,
                run: Run::Theirs,
                restarts: 0,
            }))
            .chain(expected.into_iter().map(|(node, until, stamp)| Node {
                node,
                run: Run::Expected(until, stamp),
                restarts: 0,
            }))
            .collect();
        nodes.sort_by_key(|node| node.node);
        let (stop, stopped) = watch::channel(false);
        let pids = Arc::new(Mutex::new(Vec::new()));
        let alive = Arc::new(Mutex::new(nodes.len()));
        let task = tokio::spawn(supervise(
            start,
            dir,
            nodes,
            stopped,
            stopping,
            Arc::clone(&pids),
            Arc::clone(&alive),
        ));
        Supervisor {
            stop,
            task,
            pids,
            alive,
        }
    }

    pub(super) fn pids(&self) -> Vec<u32> {
        self.pids
            .lock()
            .map(|pids| pids.clone())
            .unwrap_or_default()
    }

    /// Whether some node still has, or will have, an agent.
    pub(super) fn any_running(&self) -> bool {
        self.alive.lock().map_or(true, |alive| *alive > 0)
    }

    /// Stops supervising: the processes that run, to wait for.
    pub(super) async fn stop(self) -> Vec<Child> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

async fn supervise(
    start: Start,
    dir: PathBuf,
    mut nodes: Vec<Node>,
    mut stopped: watch::Receiver<bool>,
    stopping: Arc<AtomicBool>,
    pids: Arc<Mutex<Vec<u32>>>,
    alive: Arc<Mutex<usize>>,
) -> Vec<Child> {
    loop {
        publish(&mut nodes, &pids, &alive);
        tokio::select! {
            _ = stopped.changed() => break,
            () = tokio::time::sleep(POLL) => {}
        }
        tick(
            &mut nodes,
            &start,
            &dir,
            Instant::now(),
            stopping.load(Ordering::Relaxed),
        );
    }
    nodes
        .into_iter()
        .filter_map(|node| match node.run {
            Run::Ours(child, _) => Some(child),
            _ => None,
        })
        .collect()
}

/// One look at every node at `now`; none once the pilot is `stopping` (an agent that
/// ends then is not replaced).
fn tick(nodes: &mut [Node], start: &Start, dir: &std::path::Path, now: Instant, stopping: bool) {
    if stopping {
        return;
    }
    for node in nodes {
        look_after(node, start, dir, now);
    }
}

/// One look at `node`: a process that ended is followed by another after its backoff;
/// an earlier root's agent that ended is followed at once.
fn look_after(node: &mut Node, start: &Start, dir: &std::path::Path, now: Instant) {
    let due = match &mut node.run {
        Run::Ours(child, since) => match child.try_wait() {
            Ok(Some(status)) => {
                if now.duration_since(*since) >= STEADY {
                    node.restarts = 0;
                }
                node.restarts += 1;
                if node.restarts > MAX_RESTARTS {
                    tracing::error!(node = node.node, %status,
                        "the agent ended again; no more restarts for this node");
                    node.run = Run::GivenUp;
                    return;
                }
                let backoff = backoff(node.restarts);
                tracing::warn!(node = node.node, %status, ?backoff,
                    "the agent ended; starting another");
                node.run = Run::Waiting(now + backoff);
                return;
            }
            _ => return,
        },
        Run::Theirs => match saker_actors::node_lock::held(dir, node.node) {
            Ok(held) => !held,
            Err(error) => {
                tracing::warn!(node = node.node, %error,
                    "cannot ask whether this node's agent lives; it is not supervised");
                node.run = Run::Unknown;
                return;
            }
        },
        Run::Expected(until, stamp) => match saker_actors::node_lock::held(dir, node.node) {
            Ok(true) => {
                node.run = Run::Theirs;
                return;
            }
            // Taken by this allocation's agent, which has ended since.
            Ok(false) => {
                now >= *until
                    || (!stamp.is_empty()
                        && saker_actors::node_lock::stamp_of(dir, node.node)
                            .is_ok_and(|last| last == **stamp))
            }
            Err(error) => {
                tracing::warn!(node = node.node, %error,
                    "cannot ask whether this node's agent lives; it is not supervised");
                node.run = Run::Unknown;
                return;
            }
        },
        Run::Waiting(at) => now >= *at,
        Run::GivenUp | Run::Unknown => return,
    };
    if !due {
        return;
    }
    match start(node.node) {
        Ok(child) => node.run = Run::Ours(child, now),
        Err(error) => {
            node.restarts += 1;
            tracing::error!(node = node.node, %error, "cannot start an agent");
            node.run = if node.restarts > MAX_RESTARTS {
                Run::GivenUp
            } else {
                Run::Waiting(now + backoff(node.restarts))
            };
        }
    }
}

/// The wait before restart number `restarts` (from 1).
fn backoff(restarts: u32) -> Duration {
    let doubled = FIRST_BACKOFF.saturating_mul(1 << restarts.saturating_sub(1).min(16));
    doubled.min(MAX_BACKOFF)
}

fn publish(nodes: &mut [Node], pids: &Mutex<Vec<u32>>, alive: &Mutex<usize>) {
    if let Ok(mut pids) = pids.lock() {
        *pids = nodes
            .iter()
            .filter_map(|node| match &node.run {
                Run::Ours(child, _) => child.id(),
                _ => None,
            })
            .collect();
    }
    if let Ok(mut alive) = alive.lock() {
        *alive = nodes
            .iter()
            .filter(|node| !matches!(node.run, Run::GivenUp))
            .count();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_bound() {
        assert_eq!(backoff(1), FIRST_BACKOFF);
        assert_eq!(backoff(2), FIRST_BACKOFF * 2);
        assert_eq!(backoff(3), FIRST_BACKOFF * 4);
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    fn sleeper(_node: u32) -> std::io::Result<Child> {
        tokio::process::Command::new("sleep")
            .arg("30")
            .kill_on_drop(true)
            .spawn()
    }

    #[tokio::test]
    async fn an_agent_that_ends_is_started_again_and_none_once_the_pilot_stops() {
        let dir = tempfile::tempdir().unwrap();
        let first = sleeper(0).unwrap();
        let first_pid = first.id().unwrap();
        let stopping = Arc::new(AtomicBool::new(false));
        let supervisor = Supervisor::start(
            Box::new(sleeper),
            dir.path().to_path_buf(),
            vec![(0, first)],
            Vec::new(),
            Arc::clone(&stopping),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while supervisor.pids() != [first_pid] {
            assert!(Instant::now() < deadline, "the first is listed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(first_pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let second = loop {
            let pids = supervisor.pids();
            if let [pid] = pids.as_slice()
                && *pid != first_pid
            {
                break *pid;
            }
            assert!(Instant::now() < deadline, "another starts: {pids:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(supervisor.any_running());
        let left = supervisor.stop().await;
        assert_eq!(
            left.len(),
            1,
            "the one running is handed back to be waited for"
        );
        assert_eq!(left[0].id(), Some(second));
    }

    /// A start that runs [`sleeper`]s, and the nodes it was asked for.
    fn counting_sleepers() -> (Start, Arc<Mutex<Vec<u32>>>) {
        let starts = Arc::new(Mutex::new(Vec::new()));
        let counted = Arc::clone(&starts);
        let start: Start = Box::new(move |node| {
            counted.lock().unwrap().push(node);
            sleeper(node)
        });
        (start, starts)
    }

    /// A node whose process ended, as the supervisor keeps it.
    async fn ended(node: u32) -> Node {
        let mut child = tokio::process::Command::new("true").spawn().unwrap();
        child.wait().await.unwrap();
        Node {
            node,
            run: Run::Ours(child, Instant::now()),
            restarts: 0,
        }
    }

    #[tokio::test]
    async fn an_ended_agent_waits_its_backoff_and_none_starts_once_the_pilot_stops() {
        let dir = tempfile::tempdir().unwrap();
        let (start, starts) = counting_sleepers();
        let now = Instant::now();
        let mut nodes = vec![ended(0).await];
        tick(&mut nodes, &start, dir.path(), now, false);
        assert!(matches!(nodes[0].run, Run::Waiting(at) if at == now + FIRST_BACKOFF));
        tick(
            &mut nodes,
            &start,
            dir.path(),
            now + FIRST_BACKOFF / 2,
            false,
        );
        assert!(starts.lock().unwrap().is_empty(), "not before its backoff");
        tick(&mut nodes, &start, dir.path(), now + FIRST_BACKOFF, false);
        assert_eq!(*starts.lock().unwrap(), [0]);
        assert!(matches!(nodes[0].run, Run::Ours(..)));

        // The pilot stops: an agent that ends now is not replaced, whenever looked at.
        let mut nodes = vec![ended(1).await];
        tick(&mut nodes, &start, dir.path(), now, true);
        tick(&mut nodes, &start, dir.path(), now + MAX_BACKOFF * 2, true);
        assert!(matches!(nodes[0].run, Run::Ours(..)), "left as it ended");
        assert_eq!(*starts.lock().unwrap(), [0], "nothing more started");
    }

    #[tokio::test]
    async fn an_agent_another_step_starts_is_watched_and_replaced_only_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let (start, starts) = counting_sleepers();
        let now = Instant::now();
        let grace = Duration::from_secs(60);
        let mut nodes: Vec<Node> = [0, 1, 2]
            .map(|node| Node {
                node,
                run: Run::Expected(now + grace, "81".into()),
                restarts: 0,
            })
            .into();
        // Node 2's agent took its lock and was killed before any look: its stamp
        // says so, and it is replaced at once. (A stamp of another allocation, left
        // in the pilot directory before, does not count.)
        let mut gone = saker_actors::node_lock::take(dir.path(), 2)
            .unwrap()
            .unwrap();
        gone.stamp("81").unwrap();
        drop(gone);
        let mut older = saker_actors::node_lock::take(dir.path(), 0)
            .unwrap()
            .unwrap();
        older.stamp("80").unwrap();
        drop(older);
        // Node 1's agent has started and holds its lock; node 0's has not.
        let lock = saker_actors::node_lock::take(dir.path(), 1)
            .unwrap()
            .unwrap();
        tick(&mut nodes, &start, dir.path(), now, false);
        assert!(
            matches!(nodes[0].run, Run::Expected(..)),
            "within its grace"
        );
        assert!(matches!(nodes[1].run, Run::Theirs));
        assert_eq!(*starts.lock().unwrap(), [2]);
        // The grace is over for node 0: ours; node 1's agent dies: ours at once.
        drop(lock);
        // A child spawned while the lock was open holds a copy of it until its exec
        // closes it, after the spawn returned: on a starved CPU that is later.
        let deadline = Instant::now() + Duration::from_secs(10);
        while saker_actors::node_lock::held(dir.path(), 1).unwrap() {
            assert!(Instant::now() < deadline, "the lock is let go");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tick(&mut nodes, &start, dir.path(), now + grace, false);
        assert_eq!(*starts.lock().unwrap(), [2, 0, 1]);
        assert!(nodes.iter().all(|node| matches!(node.run, Run::Ours(..))));
    }
}
