//! Items freed by their owner: a client done with its objects (`free_objects`, sent
//! when its last handle on one goes). The free is journaled; each item is removed
//! from the nodes that hold it at once, or when the last unfinished job reading it
//! ends, and forgotten: a job that reads it later fails as it would for any item no
//! node holds, and it is never made again.

use saker_wire::messages::ToAgent;

use super::ItemTable;
use crate::actor::ctx::Ctx;
use crate::actor::journal::AfterJournal;
use crate::actor::nodes::Nodes;
use crate::client::Reply;
use crate::records::Record;

impl ItemTable {
    /// A client is done with `items`: journaled (answered once durable); each is removed
    /// now, or once no unfinished job reads it. Items unknown, or freed already, are
    /// ignored.
    pub(in crate::actor) fn free(
        &mut self,
        ctx: &mut Ctx,
        nodes: &Nodes,
        items: Vec<String>,
        reply: Reply<()>,
    ) {
        let items: Vec<String> = items
            .into_iter()
            .filter(|item| self.items.contains_key(item) && !self.freeing.contains(item))
            .collect();
        if items.is_empty() {
            let _ = reply.send(Ok(()));
            return;
        }
        let record = Record::ItemsFreed {
            items: items.clone(),
            unix_us: ctx.timestamp().unix_micros(),
        };
        ctx.append(vec![record], AfterJournal::Put { reply });
        for item in items {
            if self.readers.contains_key(&item) {
                self.freeing.insert(item);
            } else {
                self.remove_item(ctx, Some(nodes), &item);
            }
        }
    }

    /// The last unfinished job reading `item` ended: a freed item goes now.
    pub(super) fn unread(&mut self, ctx: &mut Ctx, nodes: &Nodes, item: &str) {
        if self.freeing.remove(item) {
            self.remove_item(ctx, Some(nodes), item);
        }
    }

    /// A resumed root's freed items: forgotten, unless a job not ended reads one (it
    /// goes when that job ends). Their files on nodes that come back stay until the
    /// pilot stops.
    pub(super) fn resume_freed(&mut self, ctx: &mut Ctx, items: Vec<String>) {
        for item in items {
            if self.readers.contains_key(&item) {
                self.freeing.insert(item);
            } else {
                self.remove_item(ctx, None, &item);
            }
        }
    }

    /// Forgets `item`, telling its live holders (when `nodes` are known) to remove it.
    fn remove_item(&mut self, ctx: &mut Ctx, nodes: Option<&Nodes>, item: &str) {
        self.dropped.retain(|(name, _)| name != item);
        self.fetching.freed(item);
        let Some(entry) = self.items.remove(item) else {
            return;
        };
        if let Some(nodes) = nodes {
            let message = ToAgent::ItemsFreed {
                items: vec![item.to_owned()],
            };
            for holder in entry.holders {
                if nodes.contains(holder) {
                    nodes.send(ctx, holder, &message);
                }
            }
        }
        self.recomputes.forget(item);
    }
}
