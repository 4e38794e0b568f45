//! Data items on a node, as files: the scratch directory where tasks write and read
//! them (`SAKER_SCRATCH`), the partial files of items being fetched, and the bytes
//! this node serves to others. Which items are fetched, what is asked for and who
//! waits is the agent core's bookkeeping ([`crate::board`], `board/items.rs`); this is
//! the shell's side, which the core's effects and questions reach.
//!
//! Everything here runs under the agent's lock, on the agent's or a slot's thread; the
//! file I/O is a chunk at a time (1 MiB, mostly to and from the page cache). Items are
//! plain files: a fetched one is written beside its name, then renamed into place.
//!
//! With an object memory (`--object-memory`), objects (items named `obj-…`) live in a
//! shared-memory directory too: they are written there (fetched here, put by a client,
//! made by a worker) and moved to the scratch directory when memory runs short
//! (`agent/store.rs`). An object is looked for in memory first, then in the scratch:
//! a move copies it to the scratch before it leaves memory, so it is always in one.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use saker_wire::messages::{JobDef, NodeId};
use saker_wire::{ITEM_CHUNK, ItemData, ItemRead, ItemWritten};

use crate::board::{ItemError, ItemLanded};
use crate::transfer::Relays;

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

/// The file in a node's scratch directory that names its pilot and node: a client
/// that reads it there knows it sees that node's items and objects.
pub const NODE_MARK: &str = ".saker-node";

/// Writes [`NODE_MARK`] in the scratch directory of `dirs`: `{"pilot_id": ..., "node":
/// N}`, and `"objects": DIR` when objects are kept in memory there, whole or not at all.
pub fn write_node_mark(dirs: &ItemDirs, pilot_id: &str, node: u32) -> std::io::Result<()> {
    let mut text = format!(
        "{{\"pilot_id\": {}, \"node\": {node}",
        json_string(pilot_id)
    );
    if let Some(memory) = &dirs.memory {
        let memory = memory
            .to_str()
            .ok_or_else(|| std::io::Error::other("the object memory's path is not UTF-8"))?;
        text.push_str(&format!(", \"objects\": {}", json_string(memory)));
    }
    text.push('}');
    let dir = &dirs.scratch;
    let partial = dir.join(format!("{NODE_MARK}.{}", std::process::id()));
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, dir.join(NODE_MARK))
}

/// Where a node's items are: its scratch directory and, for objects, its object
/// memory. See the module doc.
#[derive(Debug, Clone)]
pub struct ItemDirs {
    pub scratch: PathBuf,
    /// The shared-memory directory objects are kept in first, if any.
    pub memory: Option<PathBuf>,
}

/// Whether `item` names an object (`obj-` and its id), which may live in memory.
pub fn is_object(item: &str) -> bool {
    item.starts_with("obj-")
}

impl ItemDirs {
    /// Where `item` is: in memory if it is an object there, else in the scratch.
    pub fn locate(&self, item: &str) -> PathBuf {
        if let Some(memory) = self.memory_path(item)
            && memory.is_file()
        {
            return memory;
        }
        self.scratch.join(item)
    }

    /// Where `item` would be in memory, if it is an object and there is a memory.
    pub fn memory_path(&self, item: &str) -> Option<PathBuf> {
        let memory = self.memory.as_ref().filter(|_| is_object(item))?;
        Some(memory.join(item))
    }

    /// Where a new copy of `item` is written: memory for an object, when there is one.
    fn home(&self, item: &str) -> &Path {
        match &self.memory {
            Some(memory) if is_object(item) => memory,
            _ => &self.scratch,
        }
    }
}

/// A node's item files. See the module doc.
#[derive(Debug)]
pub struct ItemFiles {
    node: NodeId,
    /// The scratch directory, and the object memory if any (see the module doc).
    dirs: ItemDirs,
    /// The scratch directories of all nodes are on one filesystem every node sees
    /// (`--shared-scratch`): an item is linked from its writer's, never copied.
    shared: bool,
    /// The partial file of each item being fetched, once its first bytes came.
    partial: HashMap<String, Arc<File>>,
    /// What of them other nodes may fetch from here meanwhile, if they fetch directly.
    relays: Option<Relays>,
}

impl ItemFiles {
    /// Items in `dir` (the agent makes it when it starts); `shared`: see the field.
    pub fn new(node: u32, dir: PathBuf, shared: bool) -> ItemFiles {
        ItemFiles {
            node: NodeId(node),
            dirs: ItemDirs {
                scratch: dir,
                memory: None,
            },
            shared,
            partial: HashMap::new(),
            relays: None,
        }
    }

    /// Items being fetched here are relayed to other readers as they land.
    pub fn with_relays(mut self, relays: Relays) -> ItemFiles {
        self.relays = Some(relays);
        self
    }

    /// Objects are kept in `memory` first (see the module doc).
    pub fn with_memory(mut self, memory: PathBuf) -> ItemFiles {
        self.dirs.memory = Some(memory);
        self
    }

    /// Where this node's items are.
    pub fn dirs(&self) -> &ItemDirs {
        &self.dirs
    }

    /// The scratch directory (`SAKER_SCRATCH`).
    pub fn scratch(&self) -> &Path {
        &self.dirs.scratch
    }

    /// Where `item` is (memory first for an object; see the module doc).
    fn path(&self, item: &str) -> PathBuf {
        self.dirs.locate(item)
    }

    /// Removes freed items (plain names only: nothing outside the scratch directory).
    /// One already gone is no error.
    pub fn remove(&self, items: &[String]) {
        for item in items {
            if !saker_wire::valid_item_name(item) {
                tracing::warn!(item, "not removing an item with an invalid name");
                continue;
            }
            let memory = self.dirs.memory_path(item);
            for path in memory.into_iter().chain([self.dirs.scratch.join(item)]) {
                match std::fs::remove_file(path) {
                    Ok(()) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => tracing::warn!(item, %error, "cannot remove a freed item"),
                }
            }
        }
    }

    /// Where `item` is written while it is fetched (in memory for an object, when
    /// there is one).
    pub fn part_path(&self, item: &str) -> PathBuf {
        self.dirs
            .home(item)
            .join(format!(".{item}.part-{}", self.node))
    }

    /// The first item `job` reads that this node does not have.
    pub fn missing<'a>(&self, job: &'a JobDef) -> Option<&'a str> {
        job.reads
            .iter()
            .map(String::as_str)
            .find(|item| !self.path(item).is_file())
    }

    /// The item `job` must fetch before it can start, if any: the first one it reads
    /// that is not here and cannot be linked here (the core's question,
    /// [`crate::board::Next::CheckItems`]).
    pub fn to_fetch(&self, job: &JobDef) -> Option<String> {
        self.missing(job)
            .filter(|item| !self.link_shared(item))
            .map(str::to_owned)
    }

    /// With a shared scratch, links `item` here from the node directory beside this
    /// one that has it (the writer's, on the shared filesystem). Returns whether it is
    /// here now. Nothing is copied and the root is not asked.
    pub fn link_shared(&self, item: &str) -> bool {
        let scratch = &self.dirs.scratch;
        let Some(parent) = scratch.parent().filter(|_| self.shared) else {
            return false;
        };
        let Ok(nodes) = std::fs::read_dir(parent) else {
            return false;
        };
        let here = scratch.join(item);
        for node in nodes.flatten() {
            let there = node.path().join(item);
            if node.path() != *scratch && there.is_file() {
                let linked = std::fs::hard_link(&there, &here)
                    .or_else(|_| std::os::unix::fs::symlink(&there, &here));
                return linked.is_ok() || here.is_file();
            }
        }
        false
    }

    /// A fetch of `item` begins (its first read goes out): its partial file is made
    /// afresh, so that bytes written by others (a direct read's task) land in it and a
    /// stale one left by a crash is gone. Nothing if the fetch has begun already; a
    /// failure shows at the first write.
    pub fn begin(&mut self, item: &str) {
        if self.partial.contains_key(item) {
            return;
        }
        let part = self.part_path(item);
        match create_part(&part) {
            Ok(file) => self.opened(item, file),
            Err(error) => tracing::debug!(%error, part = %part.display(), "no partial file yet"),
        }
    }

    fn opened(&mut self, item: &str, file: File) {
        let file = Arc::new(file);
        if let Some(relays) = &self.relays {
            relays.begin(item, file.clone());
        }
        self.partial.insert(item.to_owned(), file);
    }

    /// Bytes of an item fetched here landed in its partial file and are good: other
    /// readers may have them from here now.
    pub fn landed(&self, landed: &ItemLanded) {
        if let Some(relays) = &self.relays {
            relays.landed(&landed.item, landed.offset, landed.len, landed.total);
        }
    }

    /// Writes an answer's bytes in place, in the item's partial file (made at the
    /// first answer unless the fetch began with [`Self::begin`]).
    pub fn write(&mut self, data: &ItemData) -> Result<(), ItemError> {
        let item = &data.item;
        if !self.partial.contains_key(item) {
            let part = self.part_path(item);
            let file = create_part(&part).map_err(|source| ItemError::Open {
                item: item.clone(),
                path: part,
                source,
            })?;
            self.opened(item, file);
        }
        if let Some(file) = self.partial.get(item) {
            file.write_all_at(&data.data, data.offset)
                .map_err(|source| ItemError::Write {
                    item: item.clone(),
                    source,
                })?;
            self.landed(&ItemLanded {
                item: item.clone(),
                offset: data.offset,
                len: data.data.len() as u64,
                total: data.total,
            });
        }
        Ok(())
    }

    /// The size of `item` here, if it is here.
    pub fn size(&self, item: &str) -> Option<u64> {
        std::fs::metadata(self.path(item))
            .ok()
            .map(|meta| meta.len())
    }

    /// The whole `item` goes in place under its name (beside its partial file).
    pub fn keep(&mut self, item: &str) -> Result<(), ItemError> {
        drop(self.partial.remove(item));
        let place = self.dirs.home(item).join(item);
        let kept = std::fs::rename(self.part_path(item), place);
        // Readers relayed it so far read it whole from now on.
        self.end_relay(item);
        kept.map_err(|source| ItemError::Keep {
            item: item.to_owned(),
            source,
        })
    }

    fn end_relay(&self, item: &str) {
        if let Some(relays) = &self.relays {
            relays.end(item);
        }
    }

    /// Drops what was written of `item` (its fetch failed, or was stopped).
    pub fn discard(&mut self, item: &str) {
        drop(self.partial.remove(item));
        self.end_relay(item);
        let _ = std::fs::remove_file(self.part_path(item));
    }

    /// This node holds an item another asked for: the bytes it asked for.
    pub fn serve(&self, read: &ItemRead) -> ItemData {
        read_chunk(&self.dirs, read, ITEM_CHUNK)
    }

    /// What `job` (whose attempt exited 0) wrote: every item it was to write must be
    /// there, else that is the attempt's failure.
    pub fn written(&self, job: &JobDef) -> Result<Vec<ItemWritten>, ItemError> {
        let mut items = Vec::with_capacity(job.writes.len());
        for name in &job.writes {
            match std::fs::metadata(self.path(name)) {
                Ok(meta) if meta.is_file() => items.push(ItemWritten {
                    name: name.clone(),
                    bytes: meta.len(),
                }),
                _ => return Err(ItemError::NotWritten { item: name.clone() }),
            }
        }
        Ok(items)
    }
}

/// `text` as a JSON string.
fn json_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if u32::from(c) < 0x20 => quoted.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// A new, empty partial file at `path`, readable too (bytes landed are relayed).
fn create_part(path: &Path) -> std::io::Result<File> {
    create_parent(path)?;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

fn create_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(parent) => std::fs::create_dir_all(parent),
        None => Ok(()),
    }
}

/// The bytes of item `read.item` in `dirs` that `read` asks for, at most `most`; or
/// why there are none. Items in place are never written again: this needs no lock.
/// An object moved from memory to the scratch between looking and opening is read
/// from the scratch.
pub fn read_chunk(dirs: &ItemDirs, read: &ItemRead, most: u32) -> ItemData {
    let mut answer = ItemData {
        item: read.item.clone(),
        reader: read.reader,
        request: read.request,
        offset: read.offset,
        total: 0,
        data: Vec::new(),
        error: None,
    };
    let path = dirs.locate(&read.item);
    let read_chunk = || -> std::io::Result<(u64, Vec<u8>)> {
        let file = match File::open(&path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                File::open(dirs.scratch.join(&read.item))?
            }
            opened => opened?,
        };
        let total = file.metadata()?.len();
        let len = u64::from(read.len.min(most)).min(total.saturating_sub(read.offset));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// With an object memory, objects are looked for there first and fetched into
    /// it; other items stay in the scratch; a read of an object that moved to the
    /// scratch meanwhile is served from there; a freed object goes from both.
    #[test]
    fn objects_live_in_memory_first_and_are_found_once_moved() {
        let dir = tempfile::tempdir().unwrap();
        let (scratch, memory) = (dir.path().join("scratch"), dir.path().join("memory"));
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::create_dir_all(&memory).unwrap();
        let mut files = ItemFiles::new(0, scratch.clone(), false).with_memory(memory.clone());
        let object = format!("obj-{}", "ab".repeat(16));
        assert!(files.part_path(&object).starts_with(&memory));
        assert!(files.part_path("plain").starts_with(&scratch));
        let data = |item: &str, bytes: &[u8]| ItemData {
            item: item.into(),
            reader: NodeId(0),
            request: 1,
            offset: 0,
            total: bytes.len() as u64,
            data: bytes.to_vec(),
            error: None,
        };
        files.write(&data(&object, b"object bytes")).unwrap();
        files.keep(&object).unwrap();
        files.write(&data("plain", b"plain bytes")).unwrap();
        files.keep("plain").unwrap();
        assert!(memory.join(&object).is_file() && !scratch.join(&object).exists());
        assert!(scratch.join("plain").is_file() && !memory.join("plain").exists());
        assert_eq!(files.size(&object), Some(12));

        let read = ItemRead {
            item: object.clone(),
            reader: NodeId(1),
            request: 9,
            offset: 7,
            len: 100,
        };
        assert_eq!(files.serve(&read).data, b"bytes");
        // Moved to the scratch (copied there, then gone from memory).
        std::fs::copy(memory.join(&object), scratch.join(&object)).unwrap();
        std::fs::remove_file(memory.join(&object)).unwrap();
        let answer = files.serve(&read);
        assert_eq!(
            (answer.data.as_slice(), answer.error),
            (&b"bytes"[..], None)
        );
        assert_eq!(files.size(&object), Some(12));

        std::fs::write(memory.join(&object), b"object bytes").unwrap();
        files.remove(std::slice::from_ref(&object));
        assert!(!memory.join(&object).exists() && !scratch.join(&object).exists());
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
}
