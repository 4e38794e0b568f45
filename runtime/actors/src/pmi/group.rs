//! One node's part of a PMI gang, as bookkeeping: the key-value space its ranks see,
//! their barriers, and what goes to the other members. Pure: requests and fence
//! answers in, replies and fences out; the shell ([`super::server`]) owns the sockets.
//!
//! A rank's `put` is seen at once by the ranks of its own node and by every other
//! rank after the next barrier (PMI-1 promises no more). A barrier completes when
//! every rank of the node is in it; with other members, the node's keys put since
//! the last barrier go up as one [`Action::Fence`], and its ranks are let out when
//! the fence's answer, every member's keys, comes back ([`Group::fenced`]).

use std::collections::{BTreeSet, HashMap};

use super::{MAXES, Reply, Request};

/// Where one node's part sits in its gang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The name ranks are told for their key-value space.
    pub kvsname: String,
    /// Ranks in all.
    pub ranks: u32,
    /// Ranks on each node, filled in node order (the last may have fewer).
    pub ranks_per_node: u32,
    /// Members of the gang, and this node's position among them.
    pub members: u32,
    pub member: u32,
    /// This node's hwloc topology file, if it has one (`PMI_hwloc_xmlfile`).
    pub hwloc_xml: Option<String>,
}

impl Layout {
    /// The ranks this node runs.
    pub fn local_ranks(&self) -> std::ops::Range<u32> {
        let first = self
            .member
            .saturating_mul(self.ranks_per_node)
            .min(self.ranks);
        first..(first.saturating_add(self.ranks_per_node)).min(self.ranks)
    }

    /// `PMI_process_mapping`: which ranks share a node, in MPICH's block notation
    /// (`(vector,(first node,nodes,ranks each),...)`). MPICH's ranks use it to
    /// choose shared memory between ranks of one node.
    pub fn process_mapping(&self) -> String {
        let per = self.ranks_per_node.max(1);
        let (full, rest) = (self.ranks / per, self.ranks % per);
        let mut blocks = Vec::new();
        if full > 0 {
            blocks.push(format!("(0,{full},{per})"));
        }
        if rest > 0 {
            blocks.push(format!("({full},1,{rest})"));
        }
        format!("(vector,{})", blocks.join(","))
    }
}

/// What the shell is to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write `reply` to rank `rank`.
    Reply { rank: u32, reply: Reply },
    /// Every rank here is in barrier `epoch`: these are the node's new keys, for the
    /// other members. The ranks wait for [`Group::fenced`].
    Fence {
        epoch: u32,
        puts: Vec<(String, String)>,
    },
    /// Rank `rank` called `PMI_Abort` (it exits next, and its exit ends the group).
    Abort {
        rank: u32,
        exitcode: i32,
        message: Option<String>,
    },
}

/// A fence answer that does not fit: the gang's state went wrong (a root that
/// answered twice, or a fence of another epoch). The part fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a fence answer for epoch {got} while {state}")]
pub struct FenceError {
    pub got: u32,
    pub state: String,
}

/// See the module doc.
#[derive(Debug)]
pub struct Group {
    layout: Layout,
    local: std::ops::Range<u32>,
    mapping: String,
    kvs: HashMap<String, String>,
    /// Keys put here since the last fence, in order.
    puts: Vec<(String, String)>,
    /// Local ranks in the current barrier.
    waiting: BTreeSet<u32>,
    epoch: u32,
    /// A fence went up and its answer has not come.
    fencing: bool,
    /// Local ranks that said `init`, for the wire-up time.
    initialized: BTreeSet<u32>,
    /// PMI-2 node attributes, and the ranks waiting for one to be put.
    node_attrs: HashMap<String, String>,
    awaiting: Vec<(String, u32)>,
}

impl Group {
    pub fn new(layout: Layout) -> Group {
        Group {
            local: layout.local_ranks(),
            mapping: layout.process_mapping(),
            layout,
            kvs: HashMap::new(),
            puts: Vec::new(),
            waiting: BTreeSet::new(),
            epoch: 0,
            fencing: false,
            initialized: BTreeSet::new(),
            node_attrs: HashMap::new(),
            awaiting: Vec::new(),
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Whether every local rank has said `init`.
    pub fn all_initialized(&self) -> bool {
        self.initialized.len() == self.local.len()
    }

    /// Fences completed so far.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// What to do for `request` from local rank `rank`.
    pub fn request(&mut self, rank: u32, request: Request) -> Vec<Action> {
        let reply = match request {
            Request::Init { version, .. } => {
                self.initialized.insert(rank);
                // PMI-2 (2.0) to a client that asks for it, else the simple protocol
                // (1.1): a client that cannot speak the answer says so itself.
                match version {
                    2 => Reply::Init {
                        version: 2,
                        subversion: 0,
                    },
                    _ => Reply::Init {
                        version: 1,
                        subversion: 1,
                    },
                }
            }
            Request::FullInit => Reply::FullInit {
                rank,
                size: self.layout.ranks,
                appnum: 0,
            },
            Request::GetJobAttr { key } => Reply::JobAttr(match key.as_str() {
                "PMI_process_mapping" => Some(self.mapping.clone()),
                "universeSize" => Some(self.layout.ranks.to_string()),
                "PMI_hwloc_xmlfile" => self.layout.hwloc_xml.clone(),
                _ => None,
            }),
            Request::PutNodeAttr { key, value } => return self.put_node_attr(rank, key, value),
            Request::GetNodeAttr { key, wait } => match self.node_attrs.get(&key) {
                Some(value) => Reply::NodeAttr(Some(value.clone())),
                None if wait => {
                    self.awaiting.push((key, rank));
                    return Vec::new();
                }
                None => Reply::NodeAttr(None),
            },
            Request::GetMaxes => Reply::Maxes(MAXES),
            Request::GetUniverseSize => Reply::UniverseSize(self.layout.ranks),
            Request::GetAppnum => Reply::Appnum(0),
            Request::GetMyKvsname => Reply::MyKvsname(self.layout.kvsname.clone()),
            Request::Put { key, value } => {
                self.kvs.insert(key.clone(), value.clone());
                self.puts.push((key, value));
                Reply::PutResult
            }
            Request::Get { key } => Reply::GetResult(self.get(&key)),
            Request::BarrierIn => return self.barrier_in(rank),
            Request::Finalize => Reply::FinalizeAck,
            Request::Abort { exitcode, message } => {
                return vec![Action::Abort {
                    rank,
                    exitcode,
                    message,
                }];
            }
            Request::Unsupported { cmd, reply } => Reply::Refused {
                reply,
                msg: format!("{cmd} is not served by Saker"),
            },
        };
        vec![Action::Reply { rank, reply }]
    }

    /// A node attribute put: seen at once by this node's ranks, those waiting for it
    /// answered.
    fn put_node_attr(&mut self, rank: u32, key: String, value: String) -> Vec<Action> {
        let mut actions = vec![Action::Reply {
            rank,
            reply: Reply::NodeAttrPut,
        }];
        self.awaiting.retain(|(waited, waiting)| {
            let answered = *waited == key;
            if answered {
                actions.push(Action::Reply {
                    rank: *waiting,
                    reply: Reply::NodeAttr(Some(value.clone())),
                });
            }
            !answered
        });
        self.node_attrs.insert(key, value);
        actions
    }

    fn get(&self, key: &str) -> Option<String> {
        match key {
            "PMI_process_mapping" => Some(self.mapping.clone()),
            _ => self.kvs.get(key).cloned(),
        }
    }

    fn barrier_in(&mut self, rank: u32) -> Vec<Action> {
        self.waiting.insert(rank);
        if self.waiting.len() < self.local.len() || self.fencing {
            return Vec::new();
        }
        if self.layout.members <= 1 {
            return self.let_out();
        }
        self.fencing = true;
        vec![Action::Fence {
            epoch: self.epoch,
            puts: std::mem::take(&mut self.puts),
        }]
    }

    /// The answer to fence `epoch`: every member's keys. The ranks waiting in it go.
    pub fn fenced(
        &mut self,
        epoch: u32,
        puts: Vec<(String, String)>,
    ) -> Result<Vec<Action>, FenceError> {
        if !self.fencing || epoch != self.epoch {
            let state = match self.fencing {
                true => format!("fence {} is in flight", self.epoch),
                false => format!("no fence is in flight (next {})", self.epoch),
            };
            return Err(FenceError { got: epoch, state });
        }
        self.kvs.extend(puts);
        self.fencing = false;
        Ok(self.let_out())
    }

    fn let_out(&mut self) -> Vec<Action> {
        self.epoch += 1;
        self.puts.clear();
        std::mem::take(&mut self.waiting)
            .into_iter()
            .map(|rank| Action::Reply {
                rank,
                reply: Reply::BarrierOut,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
