//! Data items fetched node to node: an agent that is to fetch an item asks the root
//! where it is, then dials its holders' agents directly over QUIC (the pilot's CA, an
//! agent certificate each way, ALPN [`DATA_ALPN`]) and asks each read of the board's
//! there, one stream per read. The root sees no byte; what cannot be had that way
//! (no holder reachable, none serving directly) falls back to the root, as before.
//!
//! The protocol of a stream is `saker_client::data`'s, whose dialer side agents use
//! too. A holder serves only plain item names in its scratch directory, reads at most
//! [`MOST_PER_READ`] per read, and reads the file off the runtime's threads. A client
//! (the pilot's client certificate: a driver on no node of the pilot) may read items
//! and put objects ([`ObjectPut`]) on a data connection, never open a link. Agents
//! also send the fences of the PMI jobs they serve to each job's leader on them
//! (`agent::desk::pmi`, [`crate::pmi::hub`]): one stream per fence, answered once
//! every member's keys are in.
//!
//! Which read goes where is [`Routes`]' bookkeeping, driven by the agent's desk; this
//! module's shell side is [`Fetcher`] (the reader's connections, one per holder,
//! made on first use) and [`serve`] (the holder's side of a data connection).
//!
//! [`DATA_ALPN`]: saker_transport::DATA_ALPN

mod relays;
mod routes;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::ActorRef;
use saker_client::data::{DataError, MOST_FENCE, read_item, read_message};
use saker_transport::credentials::Role;
use saker_transport::quic;
use saker_wire::messages::{FromAgent, PmiFence, ToAgent};
use saker_wire::{ItemData, ItemRead, ObjectPut, ObjectStored};
use tokio::sync::mpsc;

pub use relays::{Relayed, Relays};
pub use routes::{Fetch, Holder, Routes, Send};

use crate::agent::AgentMsg;
use crate::board::ItemLanded;

pub use saker_client::data::MOST_PER_READ;

/// Largest request frame a holder reads (an item name and a few numbers).
const MOST_REQUEST: u32 = 4 << 10;

/// Why a put's stream was stopped (its bytes are not wanted).
const PUT_REFUSED: quinn::VarInt = quinn::VarInt::from_u32(1);

/// After failing to reach a holder, how long reads for it fail at once rather than
/// dial again (each dial may take a handshake timeout).
const UNREACHABLE_FOR: Duration = Duration::from_secs(5);

/// How long a dial to a holder may take. A dead holder answers nothing (QUIC waits out
/// its idle timeout, 10 s): its readers go to the next holder, or through the root,
/// sooner. A handshake is milliseconds; one a starved machine makes slower costs a
/// read through the root, never a failure.
const DIAL_WITHIN: Duration = Duration::from_secs(2);

/// Liveness of data connections: a holder that dies mid-transfer sends nothing more,
/// and its readers go elsewhere after this much silence rather than the link's 10 s.
/// (The holder's side offers the link's; QUIC takes the smaller.)
pub const DATA_TIMEOUTS: quic::LinkTimeouts = quic::LinkTimeouts {
    keep_alive_interval: Duration::from_secs(1),
    max_idle_timeout: Duration::from_secs(4),
};

/// Why a direct read failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("cannot reach the holder")]
    Connect(#[source] quic::ConnectError),
    #[error("the holder was unreachable a moment ago")]
    Unreachable,
    #[error("the holder did not answer within {DIAL_WITHIN:?}")]
    DialTimeout,
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("the write's thread failed")]
    WriteThread,
    #[error("cannot write what came")]
    Local(#[source] std::io::Error),
}

/// What an agent needs to fetch directly: its endpoint and the config of its data
/// connections ([`quic::data_client_config`]).
#[derive(Debug, Clone)]
pub struct Direct {
    pub endpoint: quinn::Endpoint,
    pub config: quinn::ClientConfig,
    /// Where other agents reach this one's endpoint (said in its hello).
    pub addr: SocketAddr,
    /// What this node relays of the items it is fetching (shared with [`serve`]).
    pub relays: Relays,
}

/// The reader's side: carries out [`Fetch`]es on tasks of their own and tells the
/// agent how each ended ([`AgentMsg::Fetched`]); and sends PMI fences to their job's
/// hub ([`Fetcher::fence`]), over the same connections.
#[derive(Debug, Clone)]
pub struct Fetcher {
    queue: mpsc::UnboundedSender<(Fetch, PathBuf)>,
    fences: mpsc::UnboundedSender<(SocketAddr, PmiFence)>,
}

/// How long a member waits before it sends a fence its hub did not answer again
/// (the hub's part not open yet, or its agent not reached).
const FENCE_AGAIN_AFTER: Duration = Duration::from_millis(50);

/// How a direct read ended: its bytes written in the item's partial file, or why
/// not.
#[derive(Debug)]
pub struct Fetched {
    pub fetch: Fetch,
    pub answer: Result<ItemLanded, TransferError>,
}

impl Fetcher {
    /// Starts the fetcher (inside a tokio runtime): each fetch runs on a task of its
    /// own, over one connection per holder.
    pub fn start(direct: Direct, agent: ActorRef<AgentMsg>) -> Fetcher {
        let (queue, mut fetches) = mpsc::unbounded_channel::<(Fetch, PathBuf)>();
        let pool = Arc::new(Pool {
            direct,
            holders: Mutex::new(HashMap::new()),
        });
        let (fences, mut to_fence) = mpsc::unbounded_channel::<(SocketAddr, PmiFence)>();
        let (fence_pool, fence_agent) = (pool.clone(), agent.clone());
        tokio::spawn(async move {
            while let Some((fetch, part)) = fetches.recv().await {
                let pool = pool.clone();
                let agent = agent.clone();
                tokio::spawn(async move {
                    let answer = pool.fetch_into(&fetch, part).await;
                    // Fails only if the agent has stopped: nobody waits then.
                    let _ =
                        agent.send_message(AgentMsg::Fetched(Box::new(Fetched { fetch, answer })));
                });
            }
        });
        tokio::spawn(async move {
            while let Some((hub, fence)) = to_fence.recv().await {
                let pool = fence_pool.clone();
                let agent = fence_agent.clone();
                tokio::spawn(async move {
                    let answer = match pool.fence(hub, &fence).await {
                        Ok(all) => Ok(all),
                        Err(error) => {
                            tokio::time::sleep(FENCE_AGAIN_AFTER).await;
                            Err((fence, crate::error_chain(&error)))
                        }
                    };
                    let _ = agent.send_message(AgentMsg::HubFenced(answer));
                });
            }
        });
        Fetcher { queue, fences }
    }

    /// Sends this member's keys of a PMI fence to the job's `hub`; the agent hears
    /// every member's ([`AgentMsg::HubFenced`]), or that the hub did not answer.
    pub fn fence(&self, hub: SocketAddr, fence: PmiFence) {
        // The receiving task lives as long as the runtime.
        let _ = self.fences.send((hub, fence));
    }

    /// Sends `fetch` on its way: its bytes go to `part`, the item's partial file.
    pub fn send(&self, fetch: Fetch, part: PathBuf) {
        // The receiving task lives as long as the runtime.
        let _ = self.queue.send((fetch, part));
    }
}

/// The reader's connections, one per holder address.
#[derive(Debug)]
struct Pool {
    direct: Direct,
    holders: Mutex<HashMap<SocketAddr, Arc<tokio::sync::Mutex<Dialed>>>>,
}

#[derive(Debug, Default)]
enum Dialed {
    #[default]
    Never,
    Live(quinn::Connection),
    Failed(Instant),
}

impl Pool {
    /// The connection to `addr`: the live one, or a new one. Dials one at a time per
    /// holder; a holder that could not be reached is not dialed again for a while.
    async fn connection(&self, addr: SocketAddr) -> Result<quinn::Connection, TransferError> {
        let slot = {
            let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
            holders.entry(addr).or_default().clone()
        };
        let mut dialed = slot.lock().await;
        match &*dialed {
            Dialed::Live(connection) if connection.close_reason().is_none() => {
                return Ok(connection.clone());
            }
            Dialed::Failed(at) if at.elapsed() < UNREACHABLE_FOR => {
                return Err(TransferError::Unreachable);
            }
            _ => {}
        }
        let dialing = quic::connect_with(
            &self.direct.endpoint,
            self.direct.config.clone(),
            addr,
            Role::Agent,
        );
        match tokio::time::timeout(DIAL_WITHIN, dialing).await {
            Ok(Ok(connection)) => {
                *dialed = Dialed::Live(connection.clone());
                Ok(connection)
            }
            Ok(Err(error)) => {
                *dialed = Dialed::Failed(Instant::now());
                Err(TransferError::Connect(error))
            }
            Err(_) => {
                *dialed = Dialed::Failed(Instant::now());
                Err(TransferError::DialTimeout)
            }
        }
    }

    async fn fence(&self, hub: SocketAddr, fence: &PmiFence) -> Result<PmiFence, TransferError> {
        let connection = self.connection(hub).await?;
        Ok(saker_client::data::fence(&connection, fence).await?)
    }

    async fn fetch(&self, fetch: &Fetch) -> Result<ItemData, TransferError> {
        let connection = self.connection(fetch.holder.addr).await?;
        Ok(read_item(&connection, &fetch.read).await?)
    }

    /// [`Self::fetch`], the bytes written at their offset in `part` (which exists:
    /// the desk made it when the fetch began), off the runtime's threads.
    async fn fetch_into(&self, fetch: &Fetch, part: PathBuf) -> Result<ItemLanded, TransferError> {
        let data = self.fetch(fetch).await?;
        let landed = ItemLanded {
            item: data.item,
            offset: data.offset,
            len: data.data.len() as u64,
            total: data.total,
        };
        let bytes = data.data;
        let offset = landed.offset;
        let write = tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::FileExt;
            let file = std::fs::OpenOptions::new().write(true).open(&part)?;
            file.write_all_at(&bytes, offset)
        });
        match write.await {
            Ok(Ok(())) => Ok(landed),
            Ok(Err(error)) => Err(TransferError::Local(error)),
            Err(_) => Err(TransferError::WriteThread),
        }
    }
}

/// What a node serves to agents that fetch from it directly: the items in its
/// directories, and what it relays of those it is fetching itself.
#[derive(Debug, Clone)]
pub struct Served {
    pub dirs: crate::items::ItemDirs,
    pub relays: Relays,
    /// The agent, which gathers the fences of PMI jobs it leads (none: no fences
    /// are taken here).
    pub agent: Option<ActorRef<AgentMsg>>,
}

/// The holder's side of a data connection another agent (or a client) opened:
/// answers each stream, a read with the bytes of the item it asks for, from `served`,
/// and a put by storing the object; until the connection ends. An item this node is
/// fetching itself is relayed as its bytes land.
pub async fn serve(connection: quinn::Connection, served: Served) {
    let remote = connection.remote_address();
    // Only agents take part in PMI fences; a client may read and put.
    let agent = quic::peer_role(&connection) == Some(Role::Agent);
    while let Ok((send, recv)) = connection.accept_bi().await {
        let served = served.clone();
        tokio::spawn(async move {
            if let Err(error) = serve_stream(send, recv, served, agent).await {
                tracing::debug!(%remote, error = %crate::error_chain(&error), "a data stream failed");
            }
        });
    }
}

async fn serve_stream(
    send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    served: Served,
    agent: bool,
) -> Result<(), DataError> {
    // A fence carries a member's keys: more than a read's few names.
    let most = if agent { MOST_FENCE } else { MOST_REQUEST };
    match read_message::<FromAgent>(&mut recv, most).await? {
        FromAgent::ItemRead(read) => serve_read(send, read, served).await,
        FromAgent::ObjectPut(put) => serve_put(send, recv, put, &served.dirs).await,
        FromAgent::PmiFence(fence) if agent => serve_fence(send, fence, served.agent).await,
        _ => Err(DataError::Protocol(
            "the request is neither a read, a put nor an agent's fence",
        )),
    }
}

/// A member's keys of a PMI fence, for the job this node leads: answered with every
/// member's once all are in. Closed unanswered if no fence of that job gathers here
/// (the member sends it again).
async fn serve_fence(
    mut send: quinn::SendStream,
    fence: PmiFence,
    agent: Option<ActorRef<AgentMsg>>,
) -> Result<(), DataError> {
    let agent = agent.ok_or(DataError::Protocol("this node gathers no fences"))?;
    let (answer, all) = tokio::sync::oneshot::channel();
    agent
        .send_message(AgentMsg::HubFence(fence, answer))
        .map_err(|_| DataError::Protocol("the agent has stopped"))?;
    let all = all
        .await
        .map_err(|_| DataError::Protocol("no fence of that job gathers here"))?;
    let frame = saker_wire::encode(0, &ToAgent::PmiFenced(all)).map_err(DataError::Wire)?;
    send.write_all(&frame).await.map_err(DataError::Write)?;
    send.finish().map_err(DataError::Closed)
}

async fn serve_read(
    mut send: quinn::SendStream,
    read: ItemRead,
    served: Served,
) -> Result<(), DataError> {
    let Served { dirs, relays, .. } = served;
    let mut answer = if saker_wire::valid_item_name(&read.item) {
        let gone = async {
            let _ = send.stopped().await;
        };
        let Some(relayed) = relays.wait(&read, MOST_PER_READ, gone).await else {
            // The reader went away while its bytes were still coming here.
            return Ok(());
        };
        let chunk = tokio::task::spawn_blocking(move || match relayed {
            Relayed::NotHere => crate::items::read_chunk(&dirs, &read, MOST_PER_READ),
            Relayed::Ready { file, total, len } => relayed_chunk(&file, &read, total, len),
        });
        chunk
            .await
            .map_err(|_| DataError::Protocol("the read's thread failed"))?
    } else {
        ItemData {
            error: Some("no such item name".into()),
            item: read.item,
            reader: read.reader,
            request: read.request,
            offset: read.offset,
            total: 0,
            data: Vec::new(),
        }
    };
    let data = std::mem::take(&mut answer.data);
    // Earlier bytes first: a reader's reads in flight then land one after another, in
    // order, not all at once at the end of its window, and one relaying the item
    // passes each on that much sooner.
    let _ = send.set_priority(priority_of(answer.offset));
    let header = saker_wire::encode(0, &ToAgent::ItemData(answer)).map_err(DataError::Wire)?;
    send.write_all(&header).await.map_err(DataError::Write)?;
    send.write_all(&(data.len() as u64).to_le_bytes())
        .await
        .map_err(DataError::Write)?;
    send.write_chunk(bytes::Bytes::from(data))
        .await
        .map_err(DataError::Write)?;
    send.finish().map_err(DataError::Closed)?;
    Ok(())
}

/// A client's put: the object's bytes into this node's scratch, renamed into place
/// whole; answered with how many bytes were stored, or why none were.
async fn serve_put(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    put: ObjectPut,
    dirs: &crate::items::ItemDirs,
) -> Result<(), DataError> {
    let stored = match store_object(&mut recv, &put.item, dirs).await {
        Ok(bytes) => ObjectStored {
            item: put.item,
            bytes,
            error: None,
        },
        Err(reason) => {
            let _ = recv.stop(PUT_REFUSED);
            ObjectStored {
                item: put.item,
                bytes: 0,
                error: Some(reason),
            }
        }
    };
    let answer = saker_wire::encode(0, &ToAgent::ObjectStored(stored)).map_err(DataError::Wire)?;
    send.write_all(&answer).await.map_err(DataError::Write)?;
    send.finish().map_err(DataError::Closed)?;
    Ok(())
}

/// Bytes written to a put's file at a time (off the runtime's threads).
const PUT_BATCH: usize = 4 << 20;

/// Writes the stream's bytes as the object `item` in the scratch: a file of its own
/// under a partial name, renamed into place once whole. Its size, or why not.
async fn store_object(
    recv: &mut quinn::RecvStream,
    item: &str,
    dirs: &crate::items::ItemDirs,
) -> Result<u64, String> {
    if !crate::items::is_object(item) || !saker_wire::valid_item_name(item) {
        return Err(format!("{item:?} names no object"));
    }
    if dirs.locate(item).exists() {
        return Err(format!("this node holds {item} already"));
    }
    let part = dirs.scratch.join(format!(".{item}.put"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&part)
        .map_err(|error| format!("cannot make its file in the scratch: {error}"))?;
    let file = std::sync::Arc::new(file);
    let written = receive_into(recv, &file).await;
    let whole = written.and_then(|bytes| {
        std::fs::rename(&part, dirs.scratch.join(item))
            .map(|()| bytes)
            .map_err(|error| format!("cannot put its file in place: {error}"))
    });
    if whole.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    whole
}

/// The stream's bytes to the end, written in order into `file`.
async fn receive_into(
    recv: &mut quinn::RecvStream,
    file: &std::sync::Arc<std::fs::File>,
) -> Result<u64, String> {
    let mut offset = 0u64;
    let mut batch: Vec<bytes::Bytes> = Vec::new();
    let mut batched = 0;
    loop {
        let chunk = recv
            .read_chunk(usize::MAX, true)
            .await
            .map_err(|error| format!("the put's stream failed: {error}"))?;
        let end = chunk.is_none();
        if let Some(chunk) = chunk {
            batched += chunk.bytes.len();
            batch.push(chunk.bytes);
        }
        if batched >= PUT_BATCH || (end && batched > 0) {
            let file = file.clone();
            let at = offset;
            let chunks = std::mem::take(&mut batch);
            let wrote = tokio::task::spawn_blocking(move || {
                use std::os::unix::fs::FileExt;
                let mut at = at;
                for chunk in chunks {
                    file.write_all_at(&chunk, at)?;
                    at += chunk.len() as u64;
                }
                std::io::Result::Ok(())
            });
            match wrote.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(format!("cannot write its file: {error}")),
                Err(_) => return Err("the write's thread failed".into()),
            }
            offset += batched as u64;
            batched = 0;
        }
        if end {
            return Ok(offset);
        }
    }
}

/// The send priority of the answer at `offset`: the lower the offset, the higher.
fn priority_of(offset: u64) -> i32 {
    let chunk = offset / u64::from(saker_wire::ITEM_CHUNK);
    i32::try_from(chunk).map_or(i32::MIN, |chunk| -chunk)
}

/// `len` bytes at `read`'s offset of the partial file of an item of `total` bytes
/// (they have landed).
fn relayed_chunk(file: &std::fs::File, read: &ItemRead, total: u64, len: u64) -> ItemData {
    use std::os::unix::fs::FileExt;
    let mut data = vec![0; len as usize];
    let error = file
        .read_exact_at(&mut data, read.offset)
        .err()
        .map(|error| format!("cannot read it on its holder: {error}"));
    ItemData {
        item: read.item.clone(),
        reader: read.reader,
        request: read.request,
        offset: read.offset,
        total,
        data: if error.is_some() { Vec::new() } else { data },
        error,
    }
}
