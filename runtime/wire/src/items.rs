//! Data items on the wire: what a task wrote, and the chunks a reader pulls from a
//! holder through the root (see `docs/data.md`).
//!
//! A transfer is pulled by the reader: it asks for a byte range ([`ItemRead`]), the
//! root passes the request to a node holding the item, and the holder answers with
//! the bytes ([`ItemData`]), which the root passes back down. The reader keeps a few
//! requests in flight, so the root holds at most that many chunks of a transfer.

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

// Archived alignment within frames: see the list in `messages.rs`.
const _: () = {
    use core::mem::align_of;
    const MAX: usize = crate::align::FRAME_ALIGNMENT;
    assert!(align_of::<ArchivedItemWritten>() <= MAX);
    assert!(align_of::<ArchivedItemsWritten>() <= MAX);
    assert!(align_of::<ArchivedItemRead>() <= MAX);
    assert!(align_of::<ArchivedItemData>() <= MAX);
};
