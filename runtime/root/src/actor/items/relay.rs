//! Pipelined fetches: which nodes are fetching each item now, and which of them
//! relays it to which. A node fetching an item serves each chunk of it once the chunk
//! has landed (`saker_actors::transfer::Relays`), so the root names the latest
//! fetcher that relays to nobody yet as the *upstream* of the next reader: readers
//! that ask at once form a chain from the first holder, each link carrying the item
//! once, instead of the holder sending it once per reader.
//!
//! Not journaled: a fetch in progress is the agents' own; a root that takes over
//! names no upstream for the fetches it did not see begin.

use std::collections::HashMap;

use saker_core::NodeId;

/// Readers one fetching node relays an item to: 1 makes a chain, where each node
/// sends the item on once (its upload is no more loaded than by one fetch).
const RELAY_TO: u32 = 1;

/// See the module doc.
#[derive(Debug, Default)]
pub(super) struct Fetching {
    /// By item, the nodes fetching it, in the order they began.
    items: HashMap<String, Vec<Fetcher>>,
}

#[derive(Debug, Clone, Copy)]
struct Fetcher {
    node: NodeId,
    /// The node it was told to fetch from while that one fetches too.
    upstream: Option<NodeId>,
    /// Readers it was named upstream of.
    feeds: u32,
}

impl Fetching {
    /// `reader` begins fetching `item`: the fetching node it is to fetch from, if
    /// any. `relays` says which nodes can relay (live, serving other nodes directly);
    /// a reader that cannot is no upstream of later ones either.
    pub(super) fn begin(
        &mut self,
        item: &str,
        reader: NodeId,
        relays: impl Fn(NodeId) -> bool,
    ) -> Option<NodeId> {
        let fetchers = self.items.entry(item.to_owned()).or_default();
        // Asked again: its earlier fetch has ended.
        fetchers.retain(|fetcher| fetcher.node != reader);
        let upstream_of = |node: NodeId| {
            fetchers
                .iter()
                .find(|fetcher| fetcher.node == node)
                .and_then(|fetcher| fetcher.upstream)
        };
        // The reader must not be upstream of its upstream, however far (its earlier
        // fetch may still be named there).
        let feeds_reader = |mut node: NodeId| {
            for _ in 0..fetchers.len() {
                if node == reader {
                    return true;
                }
                match upstream_of(node) {
                    Some(next) => node = next,
                    None => return false,
                }
            }
            true
        };
        let upstream = fetchers
            .iter()
            .rev()
            .find(|fetcher| {
                fetcher.feeds < RELAY_TO && relays(fetcher.node) && !feeds_reader(fetcher.node)
            })
            .map(|fetcher| fetcher.node);
        if let Some(node) = upstream
            && let Some(fetcher) = fetchers.iter_mut().find(|fetcher| fetcher.node == node)
        {
            fetcher.feeds += 1;
        }
        if relays(reader) {
            fetchers.push(Fetcher {
                node: reader,
                upstream,
                feeds: 0,
            });
        }
        if fetchers.is_empty() {
            self.items.remove(item);
        }
        upstream
    }

    /// `node` has the whole `item` now (it holds a copy): it fetches it no more.
    pub(super) fn copied(&mut self, item: &str, node: NodeId) {
        if let Some(fetchers) = self.items.get_mut(item) {
            fetchers.retain(|fetcher| fetcher.node != node);
            if fetchers.is_empty() {
                self.items.remove(item);
            }
        }
    }

    /// `node` is lost: it fetches nothing.
    pub(super) fn lost(&mut self, node: NodeId) {
        self.items.retain(|_, fetchers| {
            fetchers.retain(|fetcher| fetcher.node != node);
            !fetchers.is_empty()
        });
    }

    /// `item` is freed: nothing of it is fetched any more.
    pub(super) fn freed(&mut self, item: &str) {
        self.items.remove(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readers that ask at once form a chain, each fed by the one before; a copy made
    /// whole relays no more; a node that cannot relay is passed over and feeds
    /// nobody; a reader asking again is never fed by those it fed.
    #[test]
    fn readers_of_one_item_form_a_chain() {
        let mut fetching = Fetching::default();
        let all = |_| true;
        let n = NodeId;
        assert_eq!(
            fetching.begin("a", n(1), all),
            None,
            "the first: from holders"
        );
        assert_eq!(fetching.begin("a", n(2), all), Some(n(1)));
        assert_eq!(fetching.begin("a", n(3), all), Some(n(2)));
        assert_eq!(fetching.begin("b", n(4), all), None, "another item");
        fetching.copied("a", n(3));
        assert_eq!(fetching.begin("a", n(4), all), None, "1 and 2 feed already");
        let not_5 = |node| node != n(5);
        assert_eq!(fetching.begin("a", n(5), not_5), Some(n(4)));
        assert_eq!(fetching.begin("a", n(6), all), None, "5 relays nothing");

        // Node 1 asks again (its fetch failed): 6 feeds nobody.
        assert_eq!(fetching.begin("a", n(1), all), Some(n(6)));
        assert_eq!(fetching.begin("a", n(2), all), Some(n(1)));
        // Node 6 asks again: 2 feeds nobody, but 6 feeds 2 through 1.
        assert_eq!(fetching.begin("a", n(6), all), None);

        fetching.lost(n(2));
        fetching.freed("b");
        assert!(!fetching.items.contains_key("b"));
        assert!(
            fetching.items["a"]
                .iter()
                .all(|fetcher| fetcher.node != n(2))
        );
    }
}
