//! The stores of a pilot's nodes as a driver sees them, and what a driver does with
//! them: put objects there, read them back, free them.
//!
//! A node's store is its scratch directory (the pilot's `stores` request names it)
//! and its object memory when it has one (named by the node's mark in its scratch,
//! `.saker-node`). The driver *sees* a store when it can read that mark, naming this
//! pilot and node, and write there: it runs on that node, or the directory is on a
//! filesystem both see (an embedded pilot's nodes are this machine's).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use saker_client::protocol::PutObjectRequest;
use saker_core::{NodeId, ObjectId};

use super::{ObjectError, Owner, Ref, new_id, write_in};
use crate::error::Error;
use crate::link::Link;
use crate::pilot::{Pilot, Queued};
use crate::task::Data;

/// Nodes join and leave: the list is asked again when older than this.
const FRESH_FOR: Duration = Duration::from_secs(2);
/// How long a driver waits for a first node of a pilot that has none (just started).
const FIRST_NODE_WAIT: Duration = Duration::from_secs(30);
/// The mark a node leaves in its scratch directory.
const MARK: &str = ".saker-node";

/// The driver's stores, for refs read outside a task.
static DRIVER: OnceLock<Arc<Stores>> = OnceLock::new();

pub(crate) fn set_driver_stores(stores: &Arc<Stores>) {
    let _ = DRIVER.set(Arc::clone(stores));
}

pub(crate) fn driver_stores() -> Option<&'static Arc<Stores>> {
    DRIVER.get()
}

/// A node's store this driver sees: the node and its directories, memory first.
type Seen = (u32, Vec<PathBuf>);

#[derive(Debug)]
pub(crate) struct Stores {
    link: Link,
    pilot_id: String,
    seen: tokio::sync::Mutex<(Option<Instant>, Vec<Seen>)>,
    /// Puts take the stores in turn, to spread objects over the nodes.
    next: AtomicUsize,
}

impl Stores {
    pub(crate) fn new(link: Link, pilot_id: String) -> Stores {
        Stores {
            link,
            pilot_id,
            seen: tokio::sync::Mutex::new((None, Vec::new())),
            next: AtomicUsize::new(0),
        }
    }

    /// The stores this driver sees, asked again when stale or `refresh`.
    pub(crate) async fn seen(&self, refresh: bool) -> Result<Vec<Seen>, Error> {
        let mut seen = self.seen.lock().await;
        let stale = seen.0.is_none_or(|asked| asked.elapsed() > FRESH_FOR);
        if refresh || stale {
            let deadline = Instant::now() + FIRST_NODE_WAIT;
            let mut report = self.link.stores().await?;
            let mut pause = Duration::from_millis(10);
            while report.stores.is_empty() && Instant::now() < deadline {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(250));
                report = self.link.stores().await?;
            }
            let visible = report
                .stores
                .iter()
                .filter_map(|store| {
                    let dirs = self.sees(store.node.0, &store.scratch)?;
                    Some((store.node.0, dirs))
                })
                .collect();
            *seen = (Some(Instant::now()), visible);
        }
        Ok(seen.1.clone())
    }

    pub(crate) async fn dirs_seen(&self, refresh: bool) -> Result<Vec<Vec<PathBuf>>, Error> {
        Ok(self
            .seen(refresh)
            .await?
            .into_iter()
            .map(|(_, dirs)| dirs)
            .collect())
    }

    /// The node's directories, memory first, if this driver sees its store.
    fn sees(&self, node: u32, scratch: &str) -> Option<Vec<PathBuf>> {
        let scratch = PathBuf::from(scratch);
        let mark = std::fs::read(scratch.join(MARK)).ok()?;
        let mark: serde_json::Value = serde_json::from_slice(&mark).ok()?;
        let ours = mark["pilot_id"].as_str() == Some(self.pilot_id.as_str())
            && mark["node"].as_u64() == Some(u64::from(node));
        if !ours || !writable(&scratch) {
            return None;
        }
        let memory = mark["objects"]
            .as_str()
            .map(PathBuf::from)
            .filter(|memory| memory.is_dir() && writable(memory));
        Some(memory.into_iter().chain([scratch]).collect())
    }
}

fn writable(dir: &std::path::Path) -> bool {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

impl Pilot {
    /// Stores `value` in the store of a node this driver sees (in turn, to spread
    /// them) and gives its [`Ref`]. Pass the ref to tasks instead of the value: it
    /// is not sent with each, tasks run where it is (or get it fetched there, node to
    /// node), and they read it in place. The object is freed when the last clone of
    /// the ref is dropped here, once no unfinished task reads it.
    pub async fn put<T: Data>(&self, value: &T) -> Result<Ref<T>, ObjectError> {
        let stores = &self.shared.stores;
        for refresh in [false, true] {
            let seen = stores.seen(refresh).await?;
            if seen.is_empty() {
                continue;
            }
            let (node, dirs) = &seen[stores.next.fetch_add(1, Ordering::Relaxed) % seen.len()];
            let id = new_id();
            let name = saker_client::spec::object_item(ObjectId(id));
            let (path, size) = write_in(dirs, &name, value)?;
            let put = PutObjectRequest {
                object: ObjectId(id),
                node: NodeId(*node),
                bytes: size,
            };
            match self.shared.link.put_object(put).await {
                Ok(()) => {
                    let owner = Owner::new(id, self.shared.queue.clone());
                    return Ok(Ref::new(id, size, Some(owner)));
                }
                Err(error) => {
                    let _ = std::fs::remove_file(&path);
                    // The node may have left since the list was asked: another one.
                    if refresh || !matches!(error, Error::Refused { .. }) {
                        return Err(error.into());
                    }
                }
            }
        }
        self.put_remote(value).await
    }

    /// A driver that sees no node's store: the object is archived into a file of
    /// this process's own, sent to a node's agent directly, then removed here.
    async fn put_remote<T: Data>(&self, value: &T) -> Result<Ref<T>, ObjectError> {
        let name = format!(".saker-put-{:032x}", new_id());
        let (path, _) = write_in(&[std::env::temp_dir()], &name, value)?;
        let put = self.shared.link.put_remote(&path).await;
        let _ = std::fs::remove_file(&path);
        let Some(put) = put? else {
            return Err(ObjectError::NoStore);
        };
        let owner = Owner::new(put.object.0, self.shared.queue.clone());
        Ok(Ref::new(put.object.0, put.bytes, Some(owner)))
    }

    /// The object `object` names (as [`Ref::get`]).
    pub async fn get<T: Data>(&self, object: &Ref<T>) -> Result<T, ObjectError> {
        object.get().await
    }

    /// Frees the object now: it is removed from the nodes that hold it once no task
    /// that reads it is left (a task submitted later that reads it fails). For refs
    /// made elsewhere, or sooner than the drop of the driver's last clone.
    pub async fn free<T>(&self, object: &Ref<T>) -> Result<(), Error> {
        if let Some(owner) = object.owner() {
            owner.disarm();
        }
        let (done, answer) = tokio::sync::oneshot::channel();
        // After the jobs queued before it, as a dropped ref's free.
        self.shared
            .queue
            .send(Queued::Free(object.id().0, Some(done)))
            .map_err(|_| Error::PilotGone {
                reason: "the driver's submitter stopped".to_owned(),
            })?;
        answer.await.unwrap_or_else(|_| {
            Err(Error::PilotGone {
                reason: "the driver's submitter stopped".to_owned(),
            })
        })
    }
}
