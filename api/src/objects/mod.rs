//! Objects by reference: [`Ref<T>`], a typed handle on a value kept in the store of
//! one of the pilot's nodes, that tasks take as input instead of the value.
//!
//! A driver puts a value ([`crate::Pilot::put`]): it is archived once (rkyv) and
//! written whole in the store of a node this process sees (the node's object memory
//! if it has one, else its scratch directory), and the pilot records that the node
//! holds it, as the data item `obj-<id>`. A task whose input holds the ref reads that
//! item: it runs where the object is, or its node fetches it from a holder, node to
//! node, before the task starts. The task reads it in place ([`Ref::map`]: the file
//! mapped, the archive validated once) or as a value ([`Ref::get`]).
//!
//! [`crate::Submitter::submit_ref`] leaves a task's output on its node and answers
//! its ref. The refs a driver made free their objects when the last clone is
//! dropped ([`crate::Pilot::free`] for sooner); the pilot keeps an object while an
//! unfinished job reads it.
//!
//! An object's file is a 16-byte header and the archive:
//!
//! ```text
//! b"SKO1"  u32 0  u64 fingerprint of T  archive of T (rkyv, 16-aligned)
//! ```

mod mapped;
mod stores;

use std::cell::RefCell;
use std::io::Write;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rkyv::rancor::{self, Fallible};
use rkyv::with::{ArchiveWith, DeserializeWith, SerializeWith, Skip};
use rkyv::{Archive, Place};
use saker_core::ObjectId;

use crate::error::Error;
use crate::task::{Data, type_fingerprint, type_shape};

pub use mapped::Mapped;
pub(crate) use stores::{Stores, set_driver_stores};

const MAGIC: &[u8; 4] = b"SKO1";
/// Bytes before the archive: the magic, 4 reserved, the fingerprint.
const HEADER: usize = 16;

/// Why an object could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error(
        "no store of the pilot's nodes is visible from here: an embedded pilot's driver writes \
         objects in the store of a node this process runs on (or one on a filesystem both see); \
         run the driver on a node of the pilot, or attach it with --pilot-dir"
    )]
    NoStore,
    #[error(
        "object {id} is in no store visible from here (it is on a node whose store this process \
         does not see, or it was freed)"
    )]
    NotHere { id: ObjectId },
    #[error(
        "object {id} holds another type than {expected}: it was put by another version of the \
         program or by another kind of client"
    )]
    TypeMismatch {
        id: ObjectId,
        expected: &'static str,
    },
    #[error("object {id} in {path} does not validate: {message}")]
    Invalid {
        id: ObjectId,
        path: PathBuf,
        message: String,
    },
    #[error("cannot {what} the object file {path}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not archive the object: {message}")]
    Archive { message: String },
    /// A driver that sees no node's store could not put or read the object on a node
    /// directly.
    #[error(transparent)]
    Remote(Box<saker_client::data::RemoteError>),
    #[error(transparent)]
    Pilot(#[from] Error),
}

impl From<saker_client::data::RemoteError> for ObjectError {
    fn from(error: saker_client::data::RemoteError) -> ObjectError {
        ObjectError::Remote(Box::new(error))
    }
}

/// A typed reference to an object in the pilot's stores. [`Data`] itself: put it in
/// a task's input (alone or inside any structure) and the task runs where the object
/// is, or gets it fetched there first. Cheap to clone.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Ref<T> {
    /// Recorded when archived, so a submission knows which objects its input reads.
    #[rkyv(with = Recorded)]
    id: u128,
    size: u64,
    fingerprint: u64,
    /// Set on the driver's refs: the object is freed when the last one goes.
    #[rkyv(with = Skip)]
    owner: Option<Arc<Owner>>,
    #[rkyv(with = Skip)]
    _value: PhantomData<fn() -> T>,
}

impl<T> Clone for Ref<T> {
    fn clone(&self) -> Self {
        Ref {
            id: self.id,
            size: self.size,
            fingerprint: self.fingerprint,
            owner: self.owner.clone(),
            _value: PhantomData,
        }
    }
}

impl<T> PartialEq for Ref<T> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl<T> Eq for Ref<T> {}

impl<T> std::fmt::Debug for Ref<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ref")
            .field("id", &self.id())
            .field("size", &self.size)
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

impl<T> Ref<T> {
    /// The object's id (its data item is `obj-` and these 32 hex digits).
    pub fn id(&self) -> ObjectId {
        ObjectId(self.id)
    }

    /// The size of the object's file in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The data item the object is stored as.
    pub fn item(&self) -> String {
        saker_client::spec::object_item(self.id())
    }
}

impl<T: Data> Ref<T> {
    pub(crate) fn new(id: u128, size: u64, owner: Option<Arc<Owner>>) -> Ref<T> {
        Ref {
            id,
            size,
            fingerprint: fingerprint::<T>(),
            owner,
            _value: PhantomData,
        }
    }

    /// The object, read in place: its file mapped and its archive validated once;
    /// `*mapped` is the archived value (`T::Archived`), with no copy of its bytes.
    /// In a task, from the task's node (the pilot fetched it there); in the driver,
    /// from the stores of the nodes it sees.
    pub async fn map(&self) -> Result<Mapped<T>, ObjectError> {
        if self.fingerprint != fingerprint::<T>() {
            return Err(self.mismatch());
        }
        let name = self.item();
        if let Some(dirs) = node_dirs() {
            match open_in(&dirs, &name, self)? {
                Some(mapped) => return Ok(mapped),
                None if stores::driver_stores().is_none() => {
                    return Err(ObjectError::NotHere { id: self.id() });
                }
                None => {}
            }
        }
        let stores = stores::driver_stores().ok_or(ObjectError::NotHere { id: self.id() })?;
        for refresh in [false, true] {
            for dirs in stores.dirs_seen(refresh).await? {
                if let Some(mapped) = open_in(&dirs, &name, self)? {
                    return Ok(mapped);
                }
            }
        }
        self.map_remote().await
    }

    /// Read from its holders directly into a file of this process's own, mapped, the
    /// file gone once mapped (a driver that sees none of its holders' stores).
    async fn map_remote(&self) -> Result<Mapped<T>, ObjectError> {
        let Some(link) = crate::context::driver() else {
            return Err(ObjectError::NotHere { id: self.id() });
        };
        let path = std::env::temp_dir().join(format!(".saker-get-{:032x}", new_id()));
        let fetched = link.get_remote(self.id(), &path).await;
        let mapped = match fetched {
            Ok(true) => Mapped::open(&path, self.id(), self.fingerprint),
            Ok(false) => Err(ObjectError::NotHere { id: self.id() }),
            Err(error) => Err(error),
        };
        let _ = std::fs::remove_file(&path);
        match mapped {
            Err(ObjectError::TypeMismatch { .. }) => Err(self.mismatch()),
            other => other,
        }
    }

    /// The object as a value (read in place, then deserialized).
    pub async fn get(&self) -> Result<T, ObjectError> {
        self.map().await?.deserialize()
    }

    fn mismatch(&self) -> ObjectError {
        ObjectError::TypeMismatch {
            id: self.id(),
            expected: std::any::type_name::<T>(),
        }
    }
}

/// The identity of an object's type: its name and archived shape.
pub(crate) fn fingerprint<T: Data>() -> u64 {
    type_fingerprint(&[b"object"], &[type_shape::<T>()])
}

/// The first of `dirs` that holds `name`, mapped; `None` if none does. A node moves
/// objects from its memory to its scratch (copied before they leave), so one not
/// found in the first place is looked for in the next.
fn open_in<T: Data>(
    dirs: &[PathBuf],
    name: &str,
    object: &Ref<T>,
) -> Result<Option<Mapped<T>>, ObjectError> {
    for dir in dirs {
        match Mapped::open(&dir.join(name), object.id(), object.fingerprint) {
            Err(ObjectError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(ObjectError::TypeMismatch { .. }) => return Err(object.mismatch()),
            other => return other.map(Some),
        }
    }
    Ok(None)
}

/// Where this process's node keeps objects, when it runs on one (a task's worker):
/// its object memory (`SAKER_OBJECTS`) if it has one, then its scratch
/// (`SAKER_SCRATCH`).
pub(crate) fn node_dirs() -> Option<Vec<PathBuf>> {
    let dirs: Vec<PathBuf> = ["SAKER_OBJECTS", "SAKER_SCRATCH"]
        .into_iter()
        .filter_map(std::env::var_os)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .collect();
    (!dirs.is_empty()).then_some(dirs)
}

/// A fresh object id: 128 random bits.
pub(crate) fn new_id() -> u128 {
    rand::random()
}

/// Writes `value` as the object `name` in the first of `dirs` it fits in (an object
/// memory that is full is passed over for the scratch): archived straight into a file
/// under a temporary name, renamed into place whole, so a reader finds the whole
/// file or none. Its path and size.
pub(crate) fn write_in<T: Data>(
    dirs: &[PathBuf],
    name: &str,
    value: &T,
) -> Result<(PathBuf, u64), ObjectError> {
    let mut failed = None;
    for dir in dirs {
        let path = dir.join(name);
        match write_file(&path, value) {
            Ok(size) => return Ok((path, size)),
            Err(error) => failed = Some(error),
        }
    }
    Err(failed.unwrap_or(ObjectError::NoStore))
}

fn write_file<T: Data>(path: &Path, value: &T) -> Result<u64, ObjectError> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temporary = path.with_file_name(format!(
        ".{name}.{}.{:08x}.tmp",
        std::process::id(),
        rand::random::<u32>()
    ));
    let mut header = [0u8; HEADER];
    header[..4].copy_from_slice(MAGIC);
    header[8..].copy_from_slice(&fingerprint::<T>().to_le_bytes());
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        file.write_all(&header)?;
        // Large slices (a Vec of numbers) pass the buffer and go to the file whole.
        let writer =
            rkyv::ser::writer::IoWriter::new(std::io::BufWriter::with_capacity(1 << 20, file));
        let writer = rkyv::api::high::to_bytes_in::<_, rancor::Error>(value, writer)
            .map_err(std::io::Error::other)?;
        let archived = rkyv::ser::Positional::pos(&writer);
        writer.into_inner().flush()?;
        std::fs::rename(&temporary, path)?;
        Ok((HEADER + archived) as u64)
    })();
    written.map_err(|source| {
        let _ = std::fs::remove_file(&temporary);
        ObjectError::Io {
            what: "write",
            path: path.to_owned(),
            source,
        }
    })
}

/// Keeps a task's output on this node as the object `id` (`submit_ref`): its ref.
pub(crate) fn store_output<T: Data>(value: &T, id: u128) -> Result<Ref<T>, ObjectError> {
    let dirs = node_dirs().ok_or(ObjectError::NoStore)?;
    let name = saker_client::spec::object_item(ObjectId(id));
    let (_, size) = write_in(&dirs, &name, value)?;
    Ok(Ref::new(id, size, None))
}

/// Who frees an object the driver made: told when the last of its refs goes.
pub(crate) struct Owner {
    id: u128,
    freed: AtomicBool,
    frees: tokio::sync::mpsc::UnboundedSender<crate::pilot::Queued>,
}

impl Owner {
    pub(crate) fn new(
        id: u128,
        frees: tokio::sync::mpsc::UnboundedSender<crate::pilot::Queued>,
    ) -> Arc<Owner> {
        Arc::new(Owner {
            id,
            freed: AtomicBool::new(false),
            frees,
        })
    }

    /// Freed by hand: nothing more to do when the refs go.
    pub(crate) fn disarm(&self) {
        self.freed.store(true, Ordering::Relaxed);
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        // Through the submitter's queue: after every job submitted before, so a job
        // that reads the object is known to the pilot before the object is freed.
        if !self.freed.load(Ordering::Relaxed) {
            let _ = self.frees.send(crate::pilot::Queued::Free(self.id, None));
        }
    }
}

impl<T> Ref<T> {
    pub(crate) fn owner(&self) -> Option<&Arc<Owner>> {
        self.owner.as_ref()
    }

    pub(crate) fn set_owner(&mut self, owner: Arc<Owner>) {
        self.owner = Some(owner);
    }
}

thread_local! {
    /// The ids of the refs archived while a submission encodes its inputs.
    static RECORDING: RefCell<Option<Vec<u128>>> = const { RefCell::new(None) };
}

/// Runs `encode`, and gives the ids of the refs it archived.
pub(crate) fn recording<R>(encode: impl FnOnce() -> R) -> (R, Vec<u128>) {
    let outer = RECORDING.with(|cell| cell.replace(Some(Vec::new())));
    let result = encode();
    let ids = RECORDING
        .with(|cell| cell.replace(outer))
        .unwrap_or_default();
    (result, ids)
}

/// The ids of refs: archived as a `u128`, noted on the way.
struct Recorded;

impl ArchiveWith<u128> for Recorded {
    type Archived = rkyv::Archived<u128>;
    type Resolver = rkyv::Resolver<u128>;

    fn resolve_with(field: &u128, resolver: Self::Resolver, out: Place<Self::Archived>) {
        field.resolve(resolver, out);
    }
}

impl<S: Fallible + ?Sized> SerializeWith<u128, S> for Recorded {
    fn serialize_with(field: &u128, serializer: &mut S) -> Result<Self::Resolver, S::Error> {
        RECORDING.with(|cell| {
            if let Some(ids) = cell.borrow_mut().as_mut() {
                ids.push(*field);
            }
        });
        rkyv::Serialize::serialize(field, serializer)
    }
}

impl<D: Fallible + ?Sized> DeserializeWith<rkyv::Archived<u128>, u128, D> for Recorded {
    fn deserialize_with(field: &rkyv::Archived<u128>, _: &mut D) -> Result<u128, D::Error> {
        Ok(field.to_native())
    }
}

#[cfg(test)]
mod tests;
