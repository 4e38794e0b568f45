//! Items this node is fetching, as far as their bytes have landed: what it relays to
//! other readers meanwhile. The root names a node still fetching an item as the
//! *upstream* of a later reader of it ([`saker_wire::ItemHolders::upstream`]), so
//! that many readers of one item form a pipeline: each chunk crosses each link once,
//! and the first holder sends the item once, not once per reader.
//!
//! The item files ([`crate::items::ItemFiles`]) say when a fetch begins (its partial
//! file, open for reading too), what of it landed (written, and found good by the
//! board), and when it ends (kept whole, or discarded). A read for a range that has
//! not landed waits for it; one for an item no longer fetched here is served from
//! the whole file, or fails when there is none (the reader then goes to another
//! holder).

use std::collections::HashMap;
use std::fs::File;
use std::sync::{Arc, Mutex};

use saker_wire::ItemRead;
use tokio::sync::watch;

/// See the module doc. Cheap to clone: the agent's files and its data connections
/// share one.
#[derive(Debug, Clone)]
pub struct Relays {
    items: Arc<Mutex<HashMap<String, Relay>>>,
    /// Bumped at every change, for the reads waiting.
    changed: Arc<watch::Sender<u64>>,
}

#[derive(Debug)]
struct Relay {
    file: Arc<File>,
    /// The item's size, once the first bytes landed.
    total: Option<u64>,
    /// What landed: disjoint ranges `[start, end)`, in order, merged.
    landed: Vec<(u64, u64)>,
}

/// Where a read of a relayed item stands.
#[derive(Debug)]
pub enum Relayed {
    /// The item is not being fetched here: serve it from its whole file, if any.
    NotHere,
    /// These bytes have landed in the partial file: `len` of them at the read's
    /// offset, of an item of `total`.
    Ready {
        file: Arc<File>,
        total: u64,
        len: u64,
    },
}

impl Default for Relays {
    fn default() -> Self {
        Relays {
            items: Arc::default(),
            changed: Arc::new(watch::Sender::new(0)),
        }
    }
}

impl Relays {
    fn items(&self) -> std::sync::MutexGuard<'_, HashMap<String, Relay>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A fetch of `item` begins, into `file` (readable): nothing of it has landed.
    pub fn begin(&self, item: &str, file: Arc<File>) {
        let relay = Relay {
            file,
            total: None,
            landed: Vec::new(),
        };
        self.items().insert(item.to_owned(), relay);
        self.bump();
    }

    /// `len` bytes of `item` at `offset` (of `total`) are written in its partial
    /// file and good.
    pub fn landed(&self, item: &str, offset: u64, len: u64, total: u64) {
        {
            let mut items = self.items();
            let Some(relay) = items.get_mut(item) else {
                return;
            };
            relay.total = Some(total);
            add(&mut relay.landed, offset, offset.saturating_add(len));
        }
        self.bump();
    }

    /// The fetch of `item` ended: kept whole (its file in place) or discarded.
    pub fn end(&self, item: &str) {
        if self.items().remove(item).is_some() {
            self.bump();
        }
    }

    /// Where `read` (at most `most` bytes) stands, or `None` while its bytes have not
    /// landed yet.
    fn look(&self, read: &ItemRead, most: u32) -> Option<Relayed> {
        let items = self.items();
        let Some(relay) = items.get(&read.item) else {
            return Some(Relayed::NotHere);
        };
        let total = relay.total?;
        let len = u64::from(read.len.min(most)).min(total.saturating_sub(read.offset));
        let end = read.offset + len;
        let covered = len == 0
            || relay
                .landed
                .iter()
                .any(|&(start, stop)| start <= read.offset && end <= stop);
        covered.then(|| Relayed::Ready {
            file: relay.file.clone(),
            total,
            len,
        })
    }

    /// Where `read` stands once its bytes have landed (or its item is not fetched
    /// here, or no longer); `None` if `gone` ends first (the reader went away).
    pub async fn wait(
        &self,
        read: &ItemRead,
        most: u32,
        gone: impl std::future::Future<Output = ()>,
    ) -> Option<Relayed> {
        let mut changes = self.changed.subscribe();
        tokio::pin!(gone);
        loop {
            changes.borrow_and_update();
            if let Some(relayed) = self.look(read, most) {
                return Some(relayed);
            }
            tokio::select! {
                changed = changes.changed() => {
                    // The sender lives as long as `self`.
                    if changed.is_err() {
                        return Some(Relayed::NotHere);
                    }
                }
                () = &mut gone => return None,
            }
        }
    }
}

/// Adds `[start, end)` to the disjoint, ordered, merged `ranges`.
fn add(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    if start >= end {
        return;
    }
    let (mut start, mut end) = (start, end);
    // The ranges that touch or overlap the new one merge into it.
    let first = ranges.partition_point(|&(_, stop)| stop < start);
    let mut last = first;
    while last < ranges.len() && ranges[last].0 <= end {
        start = start.min(ranges[last].0);
        end = end.max(ranges[last].1);
        last += 1;
    }
    ranges.splice(first..last, [(start, end)]);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use saker_wire::messages::NodeId;

    use super::*;

    fn read(offset: u64, len: u32) -> ItemRead {
        ItemRead {
            item: "a".into(),
            reader: NodeId(1),
            request: 1,
            offset,
            len,
        }
    }

    #[test]
    fn landed_ranges_merge() {
        let mut ranges = Vec::new();
        add(&mut ranges, 10, 20);
        add(&mut ranges, 30, 40);
        assert_eq!(ranges, [(10, 20), (30, 40)]);
        add(&mut ranges, 0, 5);
        add(&mut ranges, 20, 30);
        assert_eq!(ranges, [(0, 5), (10, 40)]);
        add(&mut ranges, 5, 10);
        add(&mut ranges, 12, 18);
        add(&mut ranges, 7, 7);
        assert_eq!(ranges, [(0, 40)]);
    }

    /// A read waits until its bytes have landed (its end clipped to the item's
    /// size); one for an item not fetched here, or no longer, is not relayed; one
    /// whose reader went away stops waiting.
    #[tokio::test(start_paused = true)]
    async fn reads_wait_for_their_bytes_to_land() {
        let relays = Relays::default();
        let file = Arc::new(tempfile::tempfile().unwrap());
        assert!(matches!(
            relays.wait(&read(0, 10), 10, std::future::pending()).await,
            Some(Relayed::NotHere)
        ));
        relays.begin("a", file);
        let waiting = {
            let relays = relays.clone();
            tokio::spawn(
                async move { relays.wait(&read(10, 10), 10, std::future::pending()).await },
            )
        };
        relays.landed("a", 0, 10, 25);
        relays.landed("a", 20, 5, 25);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished(), "bytes 10..20 have not landed");
        relays.landed("a", 10, 10, 25);
        let Some(Relayed::Ready { total, len, .. }) = waiting.await.unwrap() else {
            panic!("not ready");
        };
        assert_eq!((total, len), (25, 10));
        // The tail: asked for more than there is.
        let tail = relays.wait(&read(20, 10), 10, std::future::pending()).await;
        assert!(matches!(tail, Some(Relayed::Ready { len: 5, .. })));

        let gone = relays.wait(&read(40, 10), 10, async {}).await;
        assert!(gone.is_some(), "past the end: nothing to wait for");
        relays.begin("b", Arc::new(tempfile::tempfile().unwrap()));
        let mut b = read(0, 10);
        b.item = "b".into();
        assert!(relays.wait(&b, 10, async {}).await.is_none(), "reader gone");
        let waiting = {
            let relays = relays.clone();
            tokio::spawn(async move { relays.wait(&b, 10, std::future::pending()).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        relays.end("b");
        assert!(matches!(waiting.await.unwrap(), Some(Relayed::NotHere)));
    }
}
