//! Where each read of an item goes: to a holder directly, or up through the root.
//! Pure bookkeeping: the agent's desk feeds it the board's reads and the root's
//! answers, and carries out what it says ([`Send`]).

use std::collections::HashMap;
use std::net::SocketAddr;

use saker_wire::messages::{FromAgent, NodeId};
use saker_wire::{ItemHolder, ItemHolders, ItemRead, ItemWhere};

/// A holder this node fetches from directly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub node: NodeId,
    pub addr: SocketAddr,
}

/// One read sent to a holder directly. `route` names the fetch it belongs to: an
/// answer for a fetch that has ended (or been dropped) is not counted on another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetch {
    pub read: ItemRead,
    pub holder: Holder,
    pub route: u64,
}

/// What the desk is to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Send {
    /// Send this up to the root.
    Up(FromAgent),
    /// Ask this holder directly.
    Fetch(Fetch),
}

/// See the module doc.
#[derive(Debug, Default)]
pub struct Routes {
    routes: HashMap<String, Route>,
    next_route: u64,
}

#[derive(Debug)]
struct Route {
    id: u64,
    way: Way,
    /// Bytes fetched from holders directly so far.
    direct: u64,
    /// Of those, from the upstream.
    relayed: u64,
}

#[derive(Debug)]
enum Way {
    /// The root was asked where the item is; these reads wait for its answer.
    Asking(Vec<ItemRead>),
    /// Each read goes to `upstream` while it serves (a node fetching the item too,
    /// relaying it), else to the next of these holders in turn.
    Direct {
        upstream: Option<Holder>,
        holders: Vec<Holder>,
        next: usize,
    },
    /// Every read goes up through the root.
    Tree,
}

impl Routes {
    /// A read the board wants sent. The first of an item asks the root where it is.
    pub fn read(&mut self, read: ItemRead, out: &mut Vec<Send>) {
        let Some(route) = self.routes.get_mut(&read.item) else {
            out.push(Send::Up(FromAgent::ItemWhere(ItemWhere {
                item: read.item.clone(),
                reader: read.reader,
            })));
            self.next_route += 1;
            let route = Route {
                id: self.next_route,
                way: Way::Asking(Vec::new()),
                direct: 0,
                relayed: 0,
            };
            let item = read.item.clone();
            self.routes.entry(item).or_insert(route).wait(read);
            return;
        };
        match &mut route.way {
            Way::Asking(waiting) => waiting.push(read),
            Way::Direct {
                upstream,
                holders,
                next,
            } => {
                let holder = match upstream {
                    Some(upstream) => *upstream,
                    None => {
                        *next += 1;
                        holders[(*next - 1) % holders.len()]
                    }
                };
                out.push(Send::Fetch(Fetch {
                    read,
                    holder,
                    route: route.id,
                }));
            }
            Way::Tree => out.push(Send::Up(FromAgent::ItemRead(read))),
        }
    }

    /// The root said where an item is: the reads waiting for that go their way. An
    /// address that does not parse is skipped; with no holder left, the tree it is.
    pub fn holders(&mut self, answer: ItemHolders, out: &mut Vec<Send>) {
        let Some(route) = self.routes.get_mut(&answer.item) else {
            return;
        };
        let Way::Asking(waiting) = &mut route.way else {
            return;
        };
        let waiting = std::mem::take(waiting);
        let parse = |holder: &ItemHolder| {
            let addr = holder.addr.parse().ok()?;
            Some(Holder {
                node: holder.node,
                addr,
            })
        };
        let holders: Vec<Holder> = answer.holders.iter().filter_map(parse).collect();
        let upstream = answer.upstream.as_ref().and_then(parse);
        route.way = if holders.is_empty() && upstream.is_none() {
            Way::Tree
        } else {
            Way::Direct {
                upstream,
                holders,
                next: 0,
            }
        };
        for read in waiting {
            self.read(read, out);
        }
    }

    /// A direct read failed at `holder` (unreachable, or it could not read the item;
    /// an upstream whose own fetch ended): that holder is not asked again for this
    /// item, and the read goes to the next one, or up through the root when none is
    /// left. Nothing for a fetch that ended.
    pub fn failed(&mut self, fetch: Fetch, out: &mut Vec<Send>) {
        let Some(route) = self
            .routes
            .get_mut(&fetch.read.item)
            .filter(|route| route.id == fetch.route)
        else {
            return;
        };
        if let Way::Direct {
            upstream, holders, ..
        } = &mut route.way
        {
            holders.retain(|holder| holder.node != fetch.holder.node);
            if upstream.is_some_and(|upstream| upstream.node == fetch.holder.node) {
                *upstream = None;
            }
            if holders.is_empty() && upstream.is_none() {
                route.way = Way::Tree;
            }
        }
        self.read(fetch.read, out);
    }

    /// A direct read came back with `len` bytes: whether its fetch still goes on (if
    /// not, the answer is dropped).
    pub fn fetched(&mut self, fetch: &Fetch, len: u64) -> bool {
        match self.routes.get_mut(&fetch.read.item) {
            Some(route) if route.id == fetch.route => {
                route.direct += len;
                if let Way::Direct {
                    upstream: Some(upstream),
                    ..
                } = &route.way
                    && upstream.node == fetch.holder.node
                {
                    route.relayed += len;
                }
                true
            }
            _ => false,
        }
    }

    /// The fetch of `item` ended (whole or failed): the bytes it had directly, and
    /// of those from its upstream.
    pub fn finish(&mut self, item: &str) -> (u64, u64) {
        self.routes
            .remove(item)
            .map_or((0, 0), |route| (route.direct, route.relayed))
    }

    /// Every fetch is dropped (the node lost its parent, or stops).
    pub fn clear(&mut self) {
        self.routes.clear();
    }
}

impl Route {
    fn wait(&mut self, read: ItemRead) {
        if let Way::Asking(waiting) = &mut self.way {
            waiting.push(read);
        }
    }
}
