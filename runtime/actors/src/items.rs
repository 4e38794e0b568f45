//! Data items on a node: the scratch directory where tasks write and read them
//! (`SAKER_SCRATCH`), the items this node fetches from holders before a reader can
//! start, and the items its attempts wrote.
//!
//! An attempt whose job reads an item this node lacks is *staged*: it leaves the local
//! queue (keeping its credit, not a slot) while the item is pulled, chunk by chunk,
//! from a node that holds it through the root ([`saker_wire::ItemRead`],
//! [`saker_wire::ItemData`]), a few chunks in flight. Once the item is whole (written
//! beside its name, then renamed into place) the staged attempts go back to the head of
//! the queue. An item no node can give fails them as their own failure, with the
//! reason. Items are plain files.
//!
//! Everything here runs under the board's lock, on the agent's or a slot's thread; the
//! file I/O is a chunk at a time (1 MiB, mostly to and from the page cache).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use saker_wire::messages::{AttemptId, JobDef, NodeId};

use crate::queued::Queued;
use saker_wire::{ITEM_CHUNK, ItemData, ItemRead, ItemWritten, ItemsWritten};

/// Creates a node's scratch directory, and any missing parent (`saker-PILOT`), with
/// mode 0700: data items are the user's, and the directory usually sits in a `/tmp`
/// every user of the node can list. An existing directory must be the user's and not
/// writable by others (someone else may have planted items in it); one readable by
/// others (left by an older saker) is tightened to 0700.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let metadata = std::fs::symlink_metadata(dir)?;
    let mode = metadata.permissions().mode() & 0o7777;
    let ours = metadata.uid() == rustix::process::getuid().as_raw();
    if !metadata.is_dir() || !ours || mode & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of this user that only it can write (mode {mode:04o})",
            dir.display()
        )));
    }
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Chunks of one item a reader keeps requested at once.
const IN_FLIGHT: u32 = 4;

/// See the module doc.
#[derive(Debug)]
pub struct Items {
    node: NodeId,
    dir: PathBuf,
    /// The scratch directories of all nodes are on one filesystem every node sees
    /// (`--shared-scratch`): an item is linked from its writer's, never copied.
    shared: bool,
    fetches: HashMap<String, Fetch>,
    next_request: u64,
    /// Requests for the agent to send up.
    pub(crate) outbox: Vec<ItemRead>,
    /// What attempts wrote, to report before their results.
    pub(crate) written: Vec<ItemsWritten>,
}

#[derive(Debug)]
struct Fetch {
    file: Option<File>,
    /// The item's size, once the first answer said it.
    total: Option<u64>,
    /// The next byte to ask for.
    next_offset: u64,
    in_flight: u32,
    received: u64,
    /// Attempts waiting for the item.
    waiting: Vec<Queued>,
}

/// What an answer did to a fetch.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// More to come (or an answer for no fetch in progress).
    Pending,
    /// The item is whole: these attempts may start.
    Done(Vec<Queued>),
    /// The item cannot be had: these attempts fail with the reason.
    Failed(Vec<Queued>, String),
}

impl Items {
    /// Items in `dir` (the agent makes it when it starts); `shared`: see the field.
    pub fn new(node: u32, dir: PathBuf, shared: bool) -> Items {
        Items {
            node: NodeId(node),
            dir,
            shared,
            fetches: HashMap::new(),
            next_request: 1,
            outbox: Vec::new(),
            written: Vec::new(),
        }
    }

    /// The scratch directory (`SAKER_SCRATCH`).
    pub fn scratch(&self) -> &Path {
        &self.dir
    }

    fn path(&self, item: &str) -> PathBuf {
        self.dir.join(item)
    }

    /// The first item `job` reads that this node does not have.
    pub fn missing<'a>(&self, job: &'a JobDef) -> Option<&'a str> {
        job.reads
            .iter()
            .map(String::as_str)
            .find(|item| !self.path(item).is_file())
    }

    /// With a shared scratch, links `item` here from the node directory beside this
    /// one that has it (the writer's, on the shared filesystem). Returns whether it is
    /// here now. Nothing is copied and the root is not asked.
    pub fn link_shared(&self, item: &str) -> bool {
        let Some(parent) = self.dir.parent().filter(|_| self.shared) else {
            return false;
        };
        let Ok(nodes) = std::fs::read_dir(parent) else {
            return false;
        };
        let here = self.path(item);
        for node in nodes.flatten() {
            let there = node.path().join(item);
            if node.path() != self.dir && there.is_file() {
                let linked = std::fs::hard_link(&there, &here)
                    .or_else(|_| std::os::unix::fs::symlink(&there, &here));
                return linked.is_ok() || here.is_file();
            }
        }
        false
    }

    /// `assignment` waits for `item`, which is fetched if it is not being already.
    pub fn stage(&mut self, item: &str, assignment: Queued) {
        if let Some(fetch) = self.fetches.get_mut(item) {
            fetch.waiting.push(assignment);
            return;
        }
        let mut fetch = Fetch {
            file: None,
            total: None,
            next_offset: 0,
            in_flight: 0,
            received: 0,
            waiting: vec![assignment],
        };
        // One chunk first: its answer tells the size.
        self.request(item, &mut fetch, 1);
        self.fetches.insert(item.to_owned(), fetch);
    }

    /// Takes a staged attempt back (cancelled, or given back), if it is staged.
    pub fn unstage(&mut self, attempt: AttemptId) -> Option<Queued> {
        for fetch in self.fetches.values_mut() {
            if let Some(at) = fetch.waiting.iter().position(|a| a.attempt == attempt) {
                return Some(fetch.waiting.remove(at));
            }
        }
        None
    }

    /// Drops every fetch and what waits for it (the root replays those attempts).
    pub fn stop_all(&mut self) {
        for item in self.fetches.keys() {
            let _ = std::fs::remove_file(self.part_path(item));
        }
        self.fetches.clear();
        self.outbox.clear();
    }

    fn part_path(&self, item: &str) -> PathBuf {
        self.dir.join(format!(".{item}.part-{}", self.node))
    }

    /// Queues requests for `fetch` of `item` until `window` are in flight or all of it
    /// is asked for.
    fn request(&mut self, item: &str, fetch: &mut Fetch, window: u32) {
        while fetch.in_flight < window {
            if fetch.total.is_some_and(|total| fetch.next_offset >= total) {
                return;
            }
            let len = match fetch.total {
                Some(total) => (total - fetch.next_offset).min(u64::from(ITEM_CHUNK)) as u32,
                None => ITEM_CHUNK,
            };
            self.outbox.push(ItemRead {
                item: item.to_owned(),
                reader: self.node,
                request: self.next_request,
                offset: fetch.next_offset,
                len,
            });
            self.next_request += 1;
            fetch.next_offset += u64::from(len);
            fetch.in_flight += 1;
        }
    }

    /// An answer to one of this node's requests.
    pub fn receive(&mut self, data: ItemData) -> Received {
        let Some(mut fetch) = self.fetches.remove(&data.item) else {
            return Received::Pending;
        };
        fetch.in_flight = fetch.in_flight.saturating_sub(1);
        if let Err(reason) = self.write(&data, &mut fetch) {
            let _ = std::fs::remove_file(self.part_path(&data.item));
            return Received::Failed(fetch.waiting, reason);
        }
        if fetch.total.is_some_and(|total| fetch.received >= total) {
            let (part, whole) = (self.part_path(&data.item), self.path(&data.item));
            drop(fetch.file.take());
            return match std::fs::rename(&part, &whole) {
                Ok(()) => Received::Done(fetch.waiting),
                Err(error) => Received::Failed(
                    fetch.waiting,
                    format!("data item {:?}: could not keep it: {error}", data.item),
                ),
            };
        }
        self.request(&data.item, &mut fetch, IN_FLIGHT);
        self.fetches.insert(data.item, fetch);
        Received::Pending
    }

    /// Writes an answer's bytes in place.
    fn write(&self, data: &ItemData, fetch: &mut Fetch) -> Result<(), String> {
        let item = &data.item;
        if let Some(error) = &data.error {
            return Err(format!("data item {item:?}: {error}"));
        }
        if fetch.total.is_some_and(|total| total != data.total)
            || data.offset.saturating_add(data.data.len() as u64) > data.total
        {
            return Err(format!("data item {item:?}: its holder's answers disagree"));
        }
        fetch.total = Some(data.total);
        if fetch.file.is_none() {
            let part = self.part_path(item);
            let opened = std::fs::create_dir_all(&self.dir).and_then(|()| File::create(&part));
            fetch.file = Some(opened.map_err(|error| {
                format!(
                    "data item {item:?}: cannot write {}: {error}",
                    part.display()
                )
            })?);
        }
        if let Some(file) = &fetch.file {
            file.write_all_at(&data.data, data.offset)
                .map_err(|error| format!("data item {item:?}: cannot write it here: {error}"))?;
        }
        fetch.received += data.data.len() as u64;
        if data.data.is_empty() && data.total > 0 {
            return Err(format!("data item {item:?}: its holder sent no bytes"));
        }
        Ok(())
    }

    /// This node holds an item another asked for: the bytes it asked for.
    pub fn serve(&self, read: &ItemRead) -> ItemData {
        let mut answer = ItemData {
            item: read.item.clone(),
            reader: read.reader,
            request: read.request,
            offset: read.offset,
            total: 0,
            data: Vec::new(),
            error: None,
        };
        let path = self.path(&read.item);
        let read_chunk = || -> std::io::Result<(u64, Vec<u8>)> {
            let file = File::open(&path)?;
            let total = file.metadata()?.len();
            let len = u64::from(read.len.min(ITEM_CHUNK)).min(total.saturating_sub(read.offset));
            let mut data = vec![0; len as usize];
            file.read_exact_at(&mut data, read.offset)?;
            Ok((total, data))
        };
        match read_chunk() {
            Ok((total, data)) => (answer.total, answer.data) = (total, data),
            Err(error) => answer.error = Some(format!("cannot read it on its holder: {error}")),
        }
        answer
    }

    /// Attempt `attempt` of `job` exited 0: the items it was to write must be there.
    /// Noted for the report; an item missing is the attempt's failure, said in `Err`.
    pub fn note_written(&mut self, job: &JobDef, attempt: AttemptId) -> Result<(), String> {
        if job.writes.is_empty() {
            return Ok(());
        }
        let mut items = Vec::with_capacity(job.writes.len());
        for name in &job.writes {
            match std::fs::metadata(self.path(name)) {
                Ok(meta) if meta.is_file() => items.push(ItemWritten {
                    name: name.clone(),
                    bytes: meta.len(),
                }),
                _ => {
                    return Err(format!(
                        "it exited 0 without writing data item {name:?} (a file in $SAKER_SCRATCH)"
                    ));
                }
            }
        }
        self.written.push(ItemsWritten {
            node: self.node,
            attempt,
            items,
        });
        Ok(())
    }

    /// Whether requests or written items wait to be sent up.
    pub fn has_news(&self) -> bool {
        !self.outbox.is_empty() || !self.written.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use saker_wire::messages::{Command, JobId, Payload, Placement, Resources, TaskId};

    use super::*;

    fn job(reads: &[&str], writes: &[&str]) -> JobDef {
        JobDef {
            job: JobId(1),
            payload: Payload::Command(Command {
                argv: vec!["true".into()],
                env: Vec::new(),
                cwd: None,
            }),
            resources: Resources::cores(1),
            placement: Placement::Single,
            hpc: None,
            time_limit_ms: 0,
            inline_output_bytes: 0,
            is_array: false,
            reads: reads.iter().map(|s| s.to_string()).collect(),
            writes: writes.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn assignment(attempt: u64) -> Queued {
        let assignment = saker_wire::messages::Assignment {
            task: TaskId(attempt),
            attempt: AttemptId(attempt),
            job: JobId(1),
            index: 0,
        };
        Queued::new(assignment, 0)
    }

    /// Scratch directories are created private; a leftover readable by others is
    /// tightened, one writable by others refused.
    #[test]
    fn scratch_directories_are_private_to_the_user() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o7777;
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("saker-pilot").join("node-0");
        create_private_dir(&scratch).unwrap();
        assert_eq!(mode(&scratch), 0o700);
        assert_eq!(mode(scratch.parent().unwrap()), 0o700);

        let set = |mode| std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(mode));
        set(0o755).unwrap();
        create_private_dir(&scratch).unwrap();
        assert_eq!(mode(&scratch), 0o700);
        set(0o777).unwrap();
        assert!(create_private_dir(&scratch).is_err());
        assert_eq!(mode(&scratch), 0o777, "refused, not repaired");
    }

    /// A writer's item, pulled by another node in chunks through answers as a holder
    /// gives them, arrives whole; an item nobody has fails what waits for it.
    #[test]
    fn an_item_is_pulled_in_chunks_from_its_holder_and_kept_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut holder = Items::new(1, dir.path().join("node-1"), false);
        let mut reader = Items::new(2, dir.path().join("node-2"), false);
        let content: Vec<u8> = (0..(ITEM_CHUNK as usize * 5 / 2))
            .map(|i| i as u8)
            .collect();
        std::fs::create_dir_all(holder.scratch()).unwrap();
        std::fs::write(holder.scratch().join("w1"), &content).unwrap();
        holder
            .note_written(&job(&[], &["w1"]), AttemptId(7))
            .unwrap();
        assert_eq!(holder.written[0].items[0].bytes, content.len() as u64);
        assert!(
            holder
                .note_written(&job(&[], &["nope"]), AttemptId(8))
                .is_err()
        );

        let reading = job(&["w1"], &[]);
        assert_eq!(reader.missing(&reading), Some("w1"));
        reader.stage("w1", assignment(1));
        reader.stage("w1", assignment(2));
        assert_eq!(reader.unstage(AttemptId(2)), Some(assignment(2)));
        let mut answers = 0;
        let done = loop {
            let requests = std::mem::take(&mut reader.outbox);
            assert!(
                !requests.is_empty(),
                "a fetch in progress always asks for more"
            );
            let mut outcome = Received::Pending;
            for request in requests {
                answers += 1;
                outcome = reader.receive(holder.serve(&request));
            }
            if outcome != Received::Pending {
                break outcome;
            }
        };
        assert_eq!(done, Received::Done(vec![assignment(1)]));
        assert_eq!(answers, 3, "2.5 chunks");
        assert_eq!(std::fs::read(reader.scratch().join("w1")).unwrap(), content);
        assert_eq!(reader.missing(&reading), None);

        reader.stage("gone", assignment(3));
        let request = reader.outbox.pop().unwrap();
        let answer = holder.serve(&request);
        assert!(answer.error.is_some());
        match reader.receive(answer) {
            Received::Failed(waiting, reason) => {
                assert_eq!(waiting, vec![assignment(3)]);
                assert!(reason.contains("data item \"gone\""), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
