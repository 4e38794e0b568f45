//! Writing framed bytes.

use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::StreamError;

/// Writes the preamble and already-framed bytes to a stream.
#[derive(Debug)]
pub struct FrameWriter<W = quinn::SendStream> {
    sink: W,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// Wraps a stream's sending side.
    pub fn new(sink: W) -> Self {
        FrameWriter { sink }
    }

    /// Writes the 8-byte protocol preamble; call once, first.
    pub async fn write_preamble(&mut self) -> Result<(), StreamError> {
        self.write_frames(&saker_wire::encode_preamble()).await
    }

    /// Writes `frames`: bytes framed by saker-wire (one or many whole frames,
    /// or frames taken from [`Frame::raw`](super::Frame::raw)), then flushes.
    ///
    /// The bytes are not re-validated here; the receiving [`FrameReader`](super::FrameReader)
    /// validates every header. Debug builds assert the length is a multiple of 8,
    /// which every sequence of whole frames is.
    pub async fn write_frames(&mut self, frames: &[u8]) -> Result<(), StreamError> {
        debug_assert!(
            frames.len().is_multiple_of(8),
            "frames are padded to 8 bytes"
        );
        self.sink
            .write_all(frames)
            .await
            .map_err(StreamError::Write)?;
        self.sink.flush().await.map_err(StreamError::Write)
    }

    /// Ends the stream cleanly (for quinn, `finish`; for TLS, close-notify);
    /// the peer's reader then sees `Ok(None)` after the last frame.
    pub async fn finish(&mut self) -> Result<(), StreamError> {
        self.sink.shutdown().await.map_err(StreamError::Write)
    }

    /// The wrapped stream.
    pub fn inner(&self) -> &W {
        &self.sink
    }

    /// The wrapped stream, mutably (for quinn: priorities, `reset`, `stopped`).
    pub fn inner_mut(&mut self) -> &mut W {
        &mut self.sink
    }

    /// Unwraps the stream.
    pub fn into_inner(self) -> W {
        self.sink
    }
}
