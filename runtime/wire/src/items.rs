//! Data items on the wire: what a task wrote, and the chunks a reader pulls from a
//! holder through the root (see `docs/data.md`).
//!
//! A transfer is pulled by the reader: it asks for a byte range ([`ItemRead`]), the
//! root passes the request to a node holding the item, and the holder answers with
//! the bytes ([`ItemData`]), which the root passes back down. The reader keeps a few
//! requests in flight, so the root holds at most that many chunks of a transfer.
//!
//! Node to node: a reader first asks where the item is ([`ItemWhere`]); the root
//! answers with the live holders that serve items directly ([`ItemHolders`]), and the
//! reader sends its [`ItemRead`]s to them over a QUIC connection of its own (one
//! stream per request: the request as a frame, the answer as an [`ItemData`] frame
//! without its bytes, then the bytes raw). The root sees no byte. A reader that
//! cannot reach a holder that way falls back to the root. Once it has the whole item
//! it says so ([`ItemCopied`]): its node holds a copy from then on.
//!
//! A client on no node of the pilot (a login node) uses the same data connections
//! with its client certificate: it reads objects as a reader does, and puts one in a
//! node's store ([`ObjectPut`], then the bytes raw; answered by [`ObjectStored`]).

use rkyv::{Archive, Deserialize, Serialize};

use saker_core::{AttemptId, NodeId};

/// Bytes one [`ItemRead`] asks for at most.
pub const ITEM_CHUNK: u32 = 1 << 20;

/// An item an attempt wrote, and its size.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ItemWritten {
    pub name: String,
    pub bytes: u64,
}

/// Items attempt `attempt` wrote on `node` (sent before the report with its result).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ItemsWritten {
    pub node: NodeId,
    pub attempt: AttemptId,
    pub items: Vec<ItemWritten>,
}

/// `reader` asks for `len` bytes of `item` from `offset`; `request` is its own number
/// for the answer.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ItemRead {
    pub item: String,
    pub reader: NodeId,
    pub request: u64,
    pub offset: u64,
    pub len: u32,
}

/// The answer to an [`ItemRead`]: the bytes from `offset`, and the item's whole size;
/// or why there are none (no node holds it, the holder could not read it).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ItemData {
    pub item: String,
    pub reader: NodeId,
    pub request: u64,
    pub offset: u64,
    pub total: u64,
    pub data: Vec<u8>,
    pub error: Option<String>,
}

/// A client puts an object in this node's store: `item` (`obj-` and its id), its
/// bytes following the request on the stream, raw, to the stream's end.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ObjectPut {
    pub item: String,
}

/// The answer to an [`ObjectPut`]: the object is whole in the node's store (its file
/// renamed into place), or why not.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ObjectStored {
    pub item: String,
    pub bytes: u64,
    pub error: Option<String>,
}

/// Whether `name` may name a data item: a plain file name (letters, digits, `_`, `-`,
/// `.`; at most 128 characters; not starting with `.`, which agents keep for partial
/// files). Checked at submission and by a holder asked for bytes directly.
pub fn valid_item_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// `reader` is to fetch `item`: where is it?
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ItemWhere {
    pub item: String,
    pub reader: NodeId,
}

/// A live node holding an item, and the address it serves items on directly.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ItemHolder {
    pub node: NodeId,
    pub addr: String,
}

/// The answer to an [`ItemWhere`]: the holders the reader may fetch from directly,
/// best first. None: it fetches through the root.
///
/// `upstream`, if any, is a node fetching the item itself: it relays each chunk once
/// it has it, so the reader fetches everything from it while it serves (many readers
/// of one item form a pipeline, each sending it on once), and from `holders` after.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ItemHolders {
    pub item: String,
    pub holders: Vec<ItemHolder>,
    pub upstream: Option<ItemHolder>,
}

/// `node` fetched the whole `item` (`bytes` long), `direct` of those bytes straight
/// from its holders, the rest through the root; `relayed` of the direct ones from its
/// upstream (a node that was fetching the item too when named).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ItemCopied {
    pub node: NodeId,
    pub item: String,
    pub bytes: u64,
    pub direct: u64,
    pub relayed: u64,
}

/// `node` is short of object memory: may it drop its copy of `item` (a copy it
/// fetched)? The root answers with [`CopyDrop`].
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct DropCopy {
    pub node: NodeId,
    pub item: String,
}

/// The answer to a [`DropCopy`]: `allowed` when another live node holds the item
/// (the asker is no longer one of its holders from then on); else the asker keeps
/// its copy, as the one the pilot counts on.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct CopyDrop {
    pub item: String,
    pub allowed: bool,
}

/// What a node's object memory holds (`--object-memory`), said when it changes.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct StoreUsage {
    pub node: NodeId,
    /// Objects the store counts, in memory or moved to the scratch.
    pub objects: u64,
    /// Bytes of objects in memory now, and the most it keeps there.
    pub memory_bytes: u64,
    pub memory_bound: u64,
    /// Bytes of the objects it moved to the scratch that are still there.
    pub disk_bytes: u64,
    /// Objects moved to the scratch since the agent started, and their bytes.
    pub spills: u64,
    pub spilled_bytes: u64,
    /// Moves that could not be written (a full disk): those objects stayed.
    pub spill_failures: u64,
    /// Fetched copies dropped since the agent started (the root let them go: other
    /// nodes hold the items), and their bytes.
    pub drops: u64,
    pub dropped_bytes: u64,
}

// Archived alignment within frames: see the list in `messages.rs`.
const _: () = {
    use core::mem::align_of;
    const MAX: usize = crate::align::FRAME_ALIGNMENT;
    assert!(align_of::<ArchivedItemWritten>() <= MAX);
    assert!(align_of::<ArchivedItemsWritten>() <= MAX);
    assert!(align_of::<ArchivedItemRead>() <= MAX);
    assert!(align_of::<ArchivedItemData>() <= MAX);
    assert!(align_of::<ArchivedItemWhere>() <= MAX);
    assert!(align_of::<ArchivedStoreUsage>() <= MAX);
    assert!(align_of::<ArchivedItemHolder>() <= MAX);
    assert!(align_of::<ArchivedItemHolders>() <= MAX);
    assert!(align_of::<ArchivedItemCopied>() <= MAX);
};
