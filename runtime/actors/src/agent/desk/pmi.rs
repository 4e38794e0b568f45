//! The desk's side of the PMI jobs this node serves: each part's service, and where
//! its fences go. A job of several members whose leader serves data connections
//! gathers its fences at that leader, the *hub* ([`crate::pmi::hub`]): the leader's
//! desk keeps the [`Gathering`] and who waits on it, the others send their keys over
//! a data connection ([`Fetcher::fence`]) and are answered on it. Any other job's
//! fences go up to the root, which gathers them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use saker_wire::messages::{AttemptId, FromAgent, PmiFence};
use tokio::sync::oneshot;

use super::{Desk, DeskRelay, lock};
use crate::board::{LaunchPlan, PartPlan, Wired};
use crate::pmi::group::{Group, Layout};
use crate::pmi::hub::{Gathered, Gathering};

/// Where a part's fences go.
#[derive(Debug)]
pub(super) enum Fences {
    /// Up the tree, to be gathered by the root.
    Root,
    /// Here: this node leads the job. The fence being gathered, and the members
    /// waiting on it on their streams.
    Hub {
        /// The script launch gathered (0: the job's own ranks).
        world: u32,
        gathering: Gathering,
        waiting: HashMap<u32, oneshot::Sender<PmiFence>>,
    },
    /// To the leader's agent, at this data address.
    Member(SocketAddr),
}

impl Desk {
    /// A script's `saker mpiexec` starts world `world` on `members` members: this
    /// node, its leader, gathers the world's fences from now on.
    pub(crate) fn open_world(&mut self, attempt: AttemptId, world: u32, members: u32) {
        let hub = Fences::Hub {
            world,
            gathering: Gathering::new(members),
            waiting: HashMap::new(),
        };
        self.fences.insert(attempt, hub);
    }

    /// Opens the PMI service of a part whose ranks this node serves: the job's ranks,
    /// or those of one `saker mpiexec` of its script (`launch`), replacing the last's.
    pub(super) fn open_pmi(&mut self, plan: &PartPlan, launch: Option<&LaunchPlan>) {
        let (attempt, gang, hpc) = (plan.assignment.attempt, &plan.gang, &plan.hpc);
        let hwloc_xml = crate::pmi::topology::file(&self.places.spill_dir);
        crate::pmi::openmpi::library(&self.places.spill_dir);
        let shared = crate::pmi::openmpi::shared_memory_dir(attempt.0);
        if let Err(error) = std::fs::create_dir_all(&shared) {
            tracing::warn!(%error, dir = %shared.display(), "no shared-memory directory for Open MPI ranks");
        }
        let (kvsname, ranks, ranks_per_node, world) = match launch {
            None => (format!("saker-{attempt}"), hpc.ranks, hpc.ranks_per_node, 0),
            Some(launch) => {
                let world = launch.ranks.world;
                let name = crate::gang::launch_kvsname(attempt, world);
                (name, launch.ranks.ranks, launch.ranks.ranks_per_node, world)
            }
        };
        let members = match launch {
            None => gang.nodes.len() as u32,
            Some(_) => ranks.div_ceil(ranks_per_node.max(1)),
        };
        let group = Group::new(Layout {
            kvsname,
            ranks,
            ranks_per_node,
            members,
            member: gang.member,
            hwloc_xml: hwloc_xml.map(|file| file.display().to_string()),
        });
        let gathered_here = matches!(
            self.fences.get(&attempt),
            Some(Fences::Hub { world: at, .. }) if *at == world
        );
        let fences = match (gang.hub.as_str(), gang.member) {
            ("", _) if launch.is_some() && members > 1 => {
                // The root gathers one world per job: a script's worlds gather at its
                // leader, over data connections.
                let reason = "a script job's ranks on several nodes need agents that \
                              serve data connections (their fences gather at the leader)"
                    .to_owned();
                let now = self.now();
                // Within the board's effects: its next ones carry this out.
                self.board.handle_part_failed(attempt, reason, now);
                return;
            }
            ("", _) => Fences::Root,
            (_, 0) if gathered_here => match self.fences.remove(&attempt) {
                Some(fences) => fences,
                None => return,
            },
            (_, 0) => Fences::Hub {
                world,
                gathering: Gathering::new(members),
                waiting: HashMap::new(),
            },
            (hub, _) => match hub.parse() {
                Ok(addr) => Fences::Member(addr),
                Err(_) => {
                    // The root says where its nodes serve data: never unreadable.
                    tracing::error!(%attempt, hub, "an unreadable PMI hub address: fences go up");
                    Fences::Root
                }
            },
        };
        self.fences.insert(attempt, fences);
        let up = Arc::new(DeskRelay {
            desk: self.me.clone(),
            uplink: self.uplink.clone(),
        });
        self.pmi
            .insert(attempt, crate::pmi::server::Server::new(attempt, group, up));
    }

    /// The part's PMI service and fences end with it.
    pub(super) fn close_pmi(&mut self, attempt: AttemptId) {
        // Members waiting on a fence here hear their stream close.
        self.fences.remove(&attempt);
        if self.pmi.remove(&attempt).is_some() {
            let shared = crate::pmi::openmpi::shared_memory_dir(attempt.0);
            let _ = std::fs::remove_dir_all(shared);
        }
    }

    /// The socket rank `rank` of `attempt` gets as its `PMI_FD`, or why it cannot.
    pub(super) fn pmi_socket(&self, attempt: AttemptId, rank: u32) -> Result<Arc<OwnedFd>, String> {
        let server = self
            .pmi
            .get(&attempt)
            .ok_or_else(|| "the part's PMI service is closed".to_owned())?;
        let socket = server
            .connect(rank)
            .map_err(|error| format!("cannot make rank {rank}'s PMI socket: {error}"))?;
        Ok(Arc::new(socket))
    }

    /// A new root hears this node: the fences its ranks wait in that the root
    /// gathers go to it (the one before may have died with them). Fences gathered at
    /// a hub never passed through a root.
    pub(crate) fn resend_pmi_fences(&self) {
        for (attempt, server) in &self.pmi {
            if !matches!(self.fences.get(attempt), Some(Fences::Root)) {
                continue;
            }
            if let Some(fence) = server.in_flight()
                && let Err(error) = self.uplink.send(&FromAgent::PmiFence(fence))
            {
                tracing::warn!(%attempt, %error, "cannot send a PMI fence again");
            }
        }
    }

    /// This node's ranks are all in a fence: their keys go where the job gathers.
    pub(super) fn send_fence(&mut self, fence: PmiFence) {
        let attempt = fence.attempt;
        match self.fences.get(&attempt) {
            None => {} // the part ended meanwhile
            Some(Fences::Root) => {
                if let Err(error) = self.uplink.send(&FromAgent::PmiFence(fence)) {
                    // The link is gone: the gang is stopped or replayed on its own.
                    tracing::warn!(%attempt, %error, "cannot send a PMI fence up");
                }
            }
            Some(Fences::Hub { .. }) => self.gather_fence(fence, None),
            Some(Fences::Member(hub)) => match &self.direct {
                Some((_, fetcher)) => fetcher.fence(*hub, fence),
                None => {
                    let reason = "this agent makes no data connections, so it cannot reach \
                                  the job's PMI hub"
                        .to_owned();
                    let now = self.now();
                    self.apply(now, |board| board.handle_part_failed(attempt, reason, now));
                }
            },
        }
    }

    /// A member's keys of a fence of a job this node leads (`answer`: a member's
    /// stream, waiting; `None`: this node's own). Once every member's are in, all of
    /// them go to every member, and to this node's ranks. A fence of a job not (or
    /// no longer) gathered here closes the member's stream, which sends it again.
    pub(crate) fn gather_fence(
        &mut self,
        fence: PmiFence,
        answer: Option<oneshot::Sender<PmiFence>>,
    ) {
        let (attempt, member) = (fence.attempt, fence.member);
        let Some(Fences::Hub {
            gathering, waiting, ..
        }) = self.fences.get_mut(&attempt)
        else {
            return;
        };
        match gathering.add(fence) {
            Ok(Gathered::Waiting) => {
                // Sent again: its latest stream is the one that waits.
                if let Some(answer) = answer {
                    waiting.insert(member, answer);
                }
            }
            Ok(Gathered::Again(last)) => {
                if let Some(answer) = answer {
                    let _ = answer.send(last);
                }
            }
            Ok(Gathered::All(all)) => {
                for member in waiting.drain().map(|(_, answer)| answer).chain(answer) {
                    // A member gone meanwhile: its part ends with the gang.
                    let _ = member.send(all.clone());
                }
                self.pmi_fenced(all);
            }
            Err(error) => {
                tracing::error!(%attempt, %error, "a PMI fence that does not fit its job");
                let now = self.now();
                let reason = error.to_string();
                self.apply(now, |board| board.handle_part_failed(attempt, reason, now));
            }
        }
    }

    /// A fence sent to the job's hub got no answer (the hub not reached yet, or not
    /// yet gathering): sent again while this node's ranks still wait in it.
    pub(crate) fn fence_unanswered(&mut self, fence: PmiFence, reason: &str) {
        let waits = self
            .pmi
            .get(&fence.attempt)
            .and_then(|server| server.in_flight())
            .is_some_and(|in_flight| in_flight.epoch == fence.epoch);
        if waits {
            tracing::debug!(attempt = %fence.attempt, reason, "a PMI fence sent to the hub again");
            self.send_fence(fence);
        }
    }

    /// Every member's keys of a fence this node's ranks wait in: they go on.
    pub(crate) fn pmi_fenced(&mut self, fence: PmiFence) {
        let Some(server) = self.pmi.get(&fence.attempt) else {
            return; // the part ended meanwhile
        };
        let now = self.now();
        match server.fenced(fence.epoch, fence.puts) {
            Ok(true) => self
                .board
                .handle_part_wired(fence.attempt, Wired::Fenced, now),
            Ok(false) => {}
            Err(reason) => {
                tracing::error!(attempt = %fence.attempt, %reason, "the gang's PMI fence went wrong");
                self.apply(now, |board| {
                    board.handle_part_failed(fence.attempt, reason, now)
                });
            }
        }
    }
}

impl crate::pmi::server::Up for DeskRelay {
    fn fence(&self, fence: PmiFence) {
        if let Some(desk) = self.desk.upgrade() {
            lock(&desk).send_fence(fence);
        }
    }

    fn fail(&self, attempt: AttemptId, reason: String) {
        let Some(desk) = self.desk.upgrade() else {
            return;
        };
        tracing::warn!(%attempt, %reason, "a gang's PMI service fails its part");
        let mut desk = lock(&desk);
        let now = desk.now();
        desk.apply(now, |board| board.handle_part_failed(attempt, reason, now));
    }

    fn wired(&self, attempt: AttemptId, wired: Wired) {
        let Some(desk) = self.desk.upgrade() else {
            return;
        };
        let mut desk = lock(&desk);
        let now = desk.now();
        desk.board.handle_part_wired(attempt, wired, now);
    }

    fn abort(&self, attempt: AttemptId, local: u32, exitcode: i32) {
        let Some(desk) = self.desk.upgrade() else {
            return;
        };
        let mut desk = lock(&desk);
        let now = desk.now();
        desk.apply(now, |board| {
            board.handle_rank_aborted(attempt, local, exitcode, now);
        });
    }
}
