//! The dialer's side of a data connection to an agent (QUIC, ALPN
//! [`DATA_ALPN`](saker_transport::DATA_ALPN), the pilot's CA): the reads an agent
//! fetching an item makes of its holders, and a client's reads and puts of objects in
//! the stores of nodes it does not see ([`Remote`]). The holder's side is the agent's
//! (`saker_actors::transfer::serve`). See `docs/data.md`.
//!
//! One exchange per stream. A read: the dialer sends an [`ItemRead`] frame and ends
//! its side; the holder answers with an [`ItemData`] frame without its bytes, their
//! length (8 bytes, little-endian), then the bytes raw. A put: an [`ObjectPut`] frame,
//! the object's bytes raw, the side ended; the node answers with an [`ObjectStored`]
//! frame once the object's file is whole in its store. A PMI fence (agents only): a
//! member's [`PmiFence`] frame, the side ended; the job's leader answers with every
//! member's keys once all are in ([`fence`]).

mod remote;

use saker_wire::frame::{FRAME_HEADER_LEN, FrameHeader, Message};
use saker_wire::messages::{FromAgent, PmiFence, ToAgent};
use saker_wire::{AlignedVec, ItemData, ItemRead, ObjectPut, ObjectStored, WireError};
use tokio::io::{AsyncRead, AsyncReadExt};

pub use remote::{Put, Remote, RemoteError};

/// Most bytes one read is answered with.
pub const MOST_PER_READ: u32 = 16 << 20;

/// Largest answer header a dialer reads (an item name, a few numbers, a reason).
const MOST_ANSWER_HEADER: u32 = 64 << 10;

/// Why an exchange on a data connection failed.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("the data connection failed")]
    Connection(#[source] quinn::ConnectionError),
    #[error("cannot send on the data connection")]
    Write(#[source] quinn::WriteError),
    #[error("the data stream was closed")]
    Closed(#[source] quinn::ClosedStream),
    #[error("cannot read from the data connection")]
    Read(#[source] quinn::ReadExactError),
    #[error("a bad frame on the data connection")]
    Wire(#[source] WireError),
    #[error("the peer broke the data protocol: {0}")]
    Protocol(&'static str),
    #[error("the holder cannot give it: {0}")]
    Holder(String),
    #[error("cannot read what is to be sent")]
    Source(#[source] std::io::Error),
}

/// One read on a new stream of `connection`: the answer, its bytes in `data`.
pub async fn read_item(
    connection: &quinn::Connection,
    read: &ItemRead,
) -> Result<ItemData, DataError> {
    let (mut send, mut recv) = connection.open_bi().await.map_err(DataError::Connection)?;
    let request =
        saker_wire::encode(0, &FromAgent::ItemRead(read.clone())).map_err(DataError::Wire)?;
    send.write_all(&request).await.map_err(DataError::Write)?;
    send.finish().map_err(DataError::Closed)?;
    let ToAgent::ItemData(mut answer) =
        read_message::<ToAgent>(&mut recv, MOST_ANSWER_HEADER).await?
    else {
        return Err(DataError::Protocol("the answer is no item data"));
    };
    if answer.item != read.item || answer.offset != read.offset {
        return Err(DataError::Protocol("the answer is for another read"));
    }
    if let Some(reason) = answer.error.take() {
        return Err(DataError::Holder(reason));
    }
    let mut len = [0; 8];
    recv.read_exact(&mut len).await.map_err(DataError::Read)?;
    let len = u64::from_le_bytes(len);
    let most = u64::from(read.len.min(MOST_PER_READ));
    if len > most || read.offset.saturating_add(len) > answer.total {
        return Err(DataError::Protocol(
            "the answer has more bytes than asked for",
        ));
    }
    let mut data = vec![0; len as usize];
    recv.read_exact(&mut data).await.map_err(DataError::Read)?;
    answer.data = data;
    Ok(answer)
}

/// Puts the object `item` (`obj-` and its id) in the store of the node at the other
/// end of `connection`: every byte of `source`, streamed. Returns how many bytes the
/// node stored, once its file is whole there.
pub async fn put_object(
    connection: &quinn::Connection,
    item: &str,
    mut source: impl AsyncRead + Unpin,
) -> Result<u64, DataError> {
    let (mut send, mut recv) = connection.open_bi().await.map_err(DataError::Connection)?;
    let put = FromAgent::ObjectPut(ObjectPut {
        item: item.to_owned(),
    });
    let request = saker_wire::encode(0, &put).map_err(DataError::Wire)?;
    send.write_all(&request).await.map_err(DataError::Write)?;
    let mut sent = 0u64;
    loop {
        let mut buffer = bytes::BytesMut::with_capacity(1 << 20);
        let n = source
            .read_buf(&mut buffer)
            .await
            .map_err(DataError::Source)?;
        if n == 0 {
            break;
        }
        sent += n as u64;
        send.write_chunk(buffer.freeze())
            .await
            .map_err(DataError::Write)?;
    }
    send.finish().map_err(DataError::Closed)?;
    let ToAgent::ObjectStored(stored) =
        read_message::<ToAgent>(&mut recv, MOST_ANSWER_HEADER).await?
    else {
        return Err(DataError::Protocol("the answer is not about a put"));
    };
    let ObjectStored {
        item: said,
        bytes,
        error,
    } = stored;
    if let Some(reason) = error {
        return Err(DataError::Holder(reason));
    }
    if said != item || bytes != sent {
        return Err(DataError::Protocol("the node stored something else"));
    }
    Ok(bytes)
}

/// Most bytes of a PMI fence's frame, either way (every member's keys, going down).
pub const MOST_FENCE: u32 = 64 << 20;

/// A member's keys of a PMI job's fence sent to the job's hub (its leader's agent)
/// on a new stream of `connection`; the answer, every member's keys, comes once all
/// are in (the stream waits as long as the fence does).
pub async fn fence(
    connection: &quinn::Connection,
    fence: &PmiFence,
) -> Result<PmiFence, DataError> {
    let (mut send, mut recv) = connection.open_bi().await.map_err(DataError::Connection)?;
    let request =
        saker_wire::encode(0, &FromAgent::PmiFence(fence.clone())).map_err(DataError::Wire)?;
    send.write_all(&request).await.map_err(DataError::Write)?;
    send.finish().map_err(DataError::Closed)?;
    let ToAgent::PmiFenced(all) = read_message::<ToAgent>(&mut recv, MOST_FENCE).await? else {
        return Err(DataError::Protocol("the answer is no fence"));
    };
    if all.attempt != fence.attempt || all.epoch != fence.epoch {
        return Err(DataError::Protocol("the answer is for another fence"));
    }
    Ok(all)
}

/// Reads one frame of `M` from `recv`, its payload at most `most` bytes.
pub async fn read_message<M: Message>(
    recv: &mut quinn::RecvStream,
    most: u32,
) -> Result<M, DataError> {
    let mut header = [0; FRAME_HEADER_LEN];
    recv.read_exact(&mut header)
        .await
        .map_err(DataError::Read)?;
    let header = FrameHeader::parse(&header, most).map_err(DataError::Wire)?;
    let mut payload: AlignedVec = AlignedVec::with_capacity(header.padded_len());
    payload.resize(header.padded_len(), 0);
    recv.read_exact(&mut payload)
        .await
        .map_err(DataError::Read)?;
    saker_wire::frame::decode::<M>(&payload[..header.len as usize]).map_err(DataError::Wire)
}
