//! The PMI service of one node's part: each local rank's socket served on a thread of
//! its own, over the part's [`Group`]. The rank holds the other end as its
//! `PMI_FD`; what the group decides for other members goes through [`Up`].
//!
//! Lock order: a reader takes the group's lock, writes the replies, lets go, and only
//! then calls [`Up`] (which may take the agent's desk). The desk may hold its own
//! lock while it calls into a server, never the other way round.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use saker_wire::messages::{AttemptId, PmiFence};

use super::group::{Action, Group};
use super::{Reply, Requests};
use crate::board::Wired;

/// A reply a rank does not read within this long ends its group: a rank that stops
/// reading its own answers is broken. (Replies are small; a socket buffer holds many.)
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a part's PMI service sends what is not its own.
pub trait Up: Send + Sync {
    /// Every rank here is in a fence: this member's keys go to the others.
    fn fence(&self, fence: PmiFence);
    /// The part cannot go on: a rank broke the protocol, or the gang's state did.
    fn fail(&self, attempt: AttemptId, reason: String);
    /// Local rank `local` called `PMI_Abort`: the part ends with `exitcode`.
    fn abort(&self, attempt: AttemptId, local: u32, exitcode: i32);
    /// The part's ranks reached a moment of their wire-up.
    fn wired(&self, attempt: AttemptId, wired: Wired);
}

/// See the module doc. Dropping it closes every rank's socket.
pub struct Server {
    attempt: AttemptId,
    shared: Arc<Mutex<Shared>>,
    up: Arc<dyn Up>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

struct Shared {
    group: Group,
    /// This end of each connected rank's socket, for replies.
    writers: HashMap<u32, UnixStream>,
    /// The part ended: no reader serves any more.
    closed: bool,
    /// The fence that went up and is not answered yet: sent again to a next root.
    in_flight: Option<PmiFence>,
    /// Ranks that speak PMI-2, with the `thrid` of their request in progress.
    v2: HashMap<u32, Option<String>>,
}

impl Server {
    pub fn new(attempt: AttemptId, group: Group, up: Arc<dyn Up>) -> Server {
        let shared = Shared {
            group,
            writers: HashMap::new(),
            closed: false,
            in_flight: None,
            v2: HashMap::new(),
        };
        Server {
            attempt,
            shared: Arc::new(Mutex::new(shared)),
            up,
        }
    }

    /// A socket for rank `rank`: the returned end is to be the rank's `PMI_FD`; this
    /// end is served from now on.
    pub fn connect(&self, rank: u32) -> std::io::Result<OwnedFd> {
        let (ours, theirs) = UnixStream::pair()?;
        let writer = ours.try_clone()?;
        writer.set_write_timeout(Some(WRITE_TIMEOUT))?;
        lock(&self.shared).writers.insert(rank, writer);
        let reader = Reader {
            attempt: self.attempt,
            rank,
            shared: Arc::clone(&self.shared),
            up: Arc::clone(&self.up),
        };
        std::thread::Builder::new()
            .name(format!("pmi-{}-r{rank}", self.attempt))
            .spawn(move || reader.serve(ours))?;
        Ok(OwnedFd::from(theirs))
    }

    /// The answer to this member's fence `epoch`: every member's keys; whether it was
    /// the part's first fence. An error is why the part cannot go on. The caller
    /// carries out both itself: it may hold what [`Up`] takes.
    pub fn fenced(&self, epoch: u32, puts: Vec<(String, String)>) -> Result<bool, String> {
        let mut shared = lock(&self.shared);
        let actions = shared
            .group
            .fenced(epoch, puts)
            .map_err(|error| error.to_string())?;
        shared.in_flight = None;
        let first = shared.group.epoch() == 1;
        shared.carry_out(actions)?;
        Ok(first)
    }

    /// The fence this part's ranks wait in, if its answer has not come: a root that
    /// took over never heard it.
    pub fn in_flight(&self) -> Option<PmiFence> {
        lock(&self.shared).in_flight.clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut shared = lock(&self.shared);
        shared.closed = true;
        // Each reader sees its socket end and stops.
        for (_, writer) in shared.writers.drain() {
            let _ = writer.shutdown(std::net::Shutdown::Both);
        }
    }
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Writes the replies; returns what must go up (a fence, an abort), or why the
    /// part fails.
    fn carry_out(&mut self, actions: Vec<Action>) -> Result<Option<Action>, String> {
        let mut up = None;
        for action in actions {
            match action {
                Action::Reply { rank, reply } => self.write(rank, &reply)?,
                Action::Abort { .. } | Action::Fence { .. } => up = Some(action),
            }
        }
        Ok(up)
    }

    fn write(&mut self, rank: u32, reply: &Reply) -> Result<(), String> {
        let Some(writer) = self.writers.get_mut(&rank) else {
            return Ok(()); // its socket is gone: so is the rank
        };
        let text = match self.v2.get(&rank) {
            Some(thrid) => super::v2::render(reply, thrid.as_deref()),
            None => reply.to_line(),
        };
        match writer.write_all(text.as_bytes()) {
            Ok(()) => Ok(()),
            // A rank that ended with a request unanswered: its exit tells.
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            Err(error) => Err(format!("cannot answer rank {rank}'s PMI request: {error}")),
        }
    }
}

/// One rank's side: reads its requests until its socket ends.
struct Reader {
    attempt: AttemptId,
    rank: u32,
    shared: Arc<Mutex<Shared>>,
    up: Arc<dyn Up>,
}

impl Reader {
    fn serve(self, mut socket: UnixStream) {
        let mut requests = Requests::default();
        let mut buffer = [0u8; 4096];
        loop {
            let read = match socket.read(&mut buffer) {
                Ok(0) => return,
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return, // the rank is gone; its exit tells why
            };
            let parsed = match requests.push(&buffer[..read]) {
                Ok(parsed) => parsed,
                Err(error) => {
                    let reason = format!("rank {} broke the PMI protocol: {error}", self.rank);
                    return self.up.fail(self.attempt, reason);
                }
            };
            let thrids = requests.thrids().to_vec();
            for (request, thrid) in parsed.into_iter().zip(thrids) {
                let v2 = requests.is_v2().then_some(thrid);
                match self.handle(request, v2) {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(reason) => return self.up.fail(self.attempt, reason),
                }
            }
        }
    }

    /// One request (`v2`: its `thrid`, for a PMI-2 rank): the replies are written
    /// under the group's lock, what goes up is told after it. False once the part
    /// ended; an error is why it must.
    fn handle(&self, request: super::Request, v2: Option<Option<String>>) -> Result<bool, String> {
        let mut shared = lock(&self.shared);
        if shared.closed {
            return Ok(false);
        }
        if let Some(thrid) = v2 {
            shared.v2.insert(self.rank, thrid);
        }
        let (epoch, initialized) = (shared.group.epoch(), shared.group.all_initialized());
        let actions = shared.group.request(self.rank, request);
        let up = shared.carry_out(actions)?;
        // Moments of the wire-up, each once (a lone member fences here).
        let group = &shared.group;
        let wired = match epoch {
            _ if !initialized && group.all_initialized() => Some(Wired::Initialized),
            0 if group.epoch() == 1 => Some(Wired::Fenced),
            _ => None,
        };
        let (first_local, member) = (group.layout().local_ranks().start, group.layout().member);
        let fence = match up {
            Some(Action::Fence { epoch, puts }) => {
                let fence = PmiFence {
                    attempt: self.attempt,
                    member,
                    epoch,
                    puts,
                };
                shared.in_flight = Some(fence.clone());
                Some(fence)
            }
            Some(Action::Abort {
                rank,
                exitcode,
                message,
            }) => {
                drop(shared);
                // The message is on the rank's stderr too.
                tracing::info!(attempt = %self.attempt, rank, exitcode, ?message,
                    "a rank called PMI_Abort: its group ends");
                self.up.abort(self.attempt, rank - first_local, exitcode);
                return Ok(true);
            }
            _ => None,
        };
        drop(shared);
        if let Some(wired) = wired {
            self.up.wired(self.attempt, wired);
        }
        if let Some(fence) = fence {
            self.up.fence(fence);
        }
        Ok(true)
    }
}
