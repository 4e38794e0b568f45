//! Reading frames out of big aligned chunks.
//!
//! The reader keeps one receive buffer, `buffer[start..end]` being bytes
//! received but not yet returned. Each read asks the source for as much as
//! fits (at least [`CHUNK_LEN`]), and complete frames are then split off
//! without further reads. A returned [`Frame`] shares the buffer; before the
//! next read the reader reuses the buffer if no frame holds it (the common
//! case: the caller handled the frame and dropped it), or else starts a fresh
//! one, copying over only the unfinished tail.
//!
//! Every frame, and the preamble, is a multiple of 8 bytes, and unreturned
//! bytes are always moved to offset 0 of a 16-aligned buffer, so every frame
//! header and payload starts 8-aligned.

use std::sync::Arc;

use rkyv::util::AlignedVec;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::{Frame, StreamError};
use saker_wire::{DEFAULT_MAX_PAYLOAD_LEN, FRAME_HEADER_LEN, FrameHeader, PREAMBLE_LEN};

/// Size of one read when frames are small.
const CHUNK_LEN: usize = 64 * 1024;

/// A buffer grown beyond this for one large frame is released afterwards
/// rather than kept for the lifetime of the stream.
const RETAINED_BUFFER_LIMIT: usize = 4 * CHUNK_LEN;

/// Reads the preamble and then frames from a stream.
#[derive(Debug)]
pub struct FrameReader<R = quinn::RecvStream> {
    source: R,
    buffer: Arc<AlignedVec>,
    /// First byte not yet returned to the caller.
    start: usize,
    /// One past the last byte received.
    end: usize,
    max_payload_len: u32,
    read_calls: u64,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Wraps a stream's receiving side, accepting payloads up to
    /// [`DEFAULT_MAX_PAYLOAD_LEN`] (64 MiB).
    pub fn new(source: R) -> Self {
        Self::with_max_payload_len(source, DEFAULT_MAX_PAYLOAD_LEN)
    }

    /// Wraps a stream's receiving side. A frame whose header announces a
    /// payload longer than `max_payload_len` bytes is refused
    /// ([`StreamError::Header`]) before any memory is allocated for it.
    pub fn with_max_payload_len(source: R, max_payload_len: u32) -> Self {
        FrameReader {
            source,
            buffer: Arc::new(AlignedVec::new()),
            start: 0,
            end: 0,
            max_payload_len,
            read_calls: 0,
        }
    }

    /// Reads and checks the peer's 8-byte preamble; call once, first.
    pub async fn read_preamble(&mut self) -> Result<(), StreamError> {
        while self.pending() < PREAMBLE_LEN {
            if !self.fill(PREAMBLE_LEN).await? {
                return Err(StreamError::MissingPreamble {
                    received: self.pending(),
                });
            }
        }
        let mut preamble = [0u8; PREAMBLE_LEN];
        preamble.copy_from_slice(&self.buffer[self.start..self.start + PREAMBLE_LEN]);
        saker_wire::check_preamble(&preamble).map_err(StreamError::Preamble)?;
        self.start += PREAMBLE_LEN;
        Ok(())
    }

    /// Returns the next frame, or `None` when the peer ended the stream
    /// cleanly between frames. An end inside a frame is
    /// [`StreamError::Truncated`]; an oversized or invalid header is
    /// [`StreamError::Header`].
    ///
    /// Cancel safety: not cancel safe; a cancelled call may leave a partial
    /// frame buffered, and the reader must then be dropped.
    pub async fn read_frame(&mut self) -> Result<Option<Frame>, StreamError> {
        loop {
            let pending = self.pending();
            let needed = if pending >= FRAME_HEADER_LEN {
                let header = self.parse_header()?;
                let total_len = FRAME_HEADER_LEN + header.padded_len();
                if pending >= total_len {
                    let frame = Frame {
                        buffer: self.buffer.clone(),
                        start: self.start,
                        payload_len: header.len as usize,
                        total_len,
                        route: header.route,
                    };
                    self.start += total_len;
                    return Ok(Some(frame));
                }
                total_len
            } else {
                FRAME_HEADER_LEN
            };
            if !self.fill(needed).await? {
                return if pending == 0 {
                    Ok(None)
                } else {
                    Err(StreamError::Truncated {
                        received: pending,
                        expected: needed,
                    })
                };
            }
        }
    }

    /// How many reads this reader has issued to its source (for statistics
    /// and for tests that check small frames are batched).
    pub fn read_calls(&self) -> u64 {
        self.read_calls
    }

    /// The largest payload accepted.
    pub fn max_payload_len(&self) -> u32 {
        self.max_payload_len
    }

    /// The wrapped stream (for quinn: `stop`, `id`).
    pub fn inner(&self) -> &R {
        &self.source
    }

    /// The wrapped stream, mutably. Reading from it directly desynchronises
    /// the reader.
    pub fn inner_mut(&mut self) -> &mut R {
        &mut self.source
    }

    fn pending(&self) -> usize {
        self.end - self.start
    }

    fn parse_header(&self) -> Result<FrameHeader, StreamError> {
        let mut header = [0u8; FRAME_HEADER_LEN];
        header.copy_from_slice(&self.buffer[self.start..self.start + FRAME_HEADER_LEN]);
        FrameHeader::parse(&header, self.max_payload_len).map_err(StreamError::Header)
    }

    /// Reads once into the buffer, making room for `needed` bytes from
    /// `start`. Returns false at end of stream. Callers only ask for more
    /// than is pending, so the read target is never empty.
    async fn fill(&mut self, needed: usize) -> Result<bool, StreamError> {
        debug_assert!(needed > self.pending());
        self.make_room(needed);
        // `make_room` leaves the buffer unshared, so this never clones.
        let buffer = Arc::make_mut(&mut self.buffer);
        let count = self
            .source
            .read(&mut buffer[self.end..])
            .await
            .map_err(StreamError::Read)?;
        self.read_calls += 1;
        self.end += count;
        Ok(count > 0)
    }

    /// Ensures the buffer is unshared, `start` is 0, and at least
    /// `max(needed, CHUNK_LEN)` bytes long.
    fn make_room(&mut self, needed: usize) {
        let pending = self.pending();
        let wanted = needed.max(CHUNK_LEN);
        if let Some(buffer) = Arc::get_mut(&mut self.buffer) {
            let oversized = buffer.len() > RETAINED_BUFFER_LIMIT && wanted <= RETAINED_BUFFER_LIMIT;
            if !oversized {
                if self.start > 0 {
                    buffer.copy_within(self.start..self.end, 0);
                    self.start = 0;
                    self.end = pending;
                }
                if buffer.len() < wanted {
                    buffer.resize(wanted, 0);
                }
                return;
            }
        }
        let mut fresh = AlignedVec::with_capacity(wanted);
        fresh.extend_from_slice(&self.buffer[self.start..self.end]);
        fresh.resize(wanted, 0);
        self.buffer = Arc::new(fresh);
        self.start = 0;
        self.end = pending;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::ReadBuf;

    use super::*;

    /// One frame as saker-wire encodes it: len, route, payload, zero padding.
    fn encode_frame(route: u32, payload: &[u8]) -> Vec<u8> {
        let mut bytes = AlignedVec::new();
        saker_wire::encode_raw_into(&mut bytes, route, payload).unwrap();
        bytes.into_vec()
    }

    /// A source that delivers its data in the given pieces, one per read.
    struct Pieces(VecDeque<Vec<u8>>);

    impl Pieces {
        fn of_size(data: &[u8], piece_len: usize) -> Pieces {
            Pieces(data.chunks(piece_len).map(<[u8]>::to_vec).collect())
        }
    }

    impl AsyncRead for Pieces {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _context: &mut Context<'_>,
            target: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(mut piece) = self.0.pop_front() {
                let count = piece.len().min(target.remaining());
                target.put_slice(&piece[..count]);
                if count < piece.len() {
                    self.0.push_front(piece.split_off(count));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    fn payload(index: usize) -> Vec<u8> {
        (0..index % 37).map(|byte| (byte + index) as u8).collect()
    }

    fn stream_of(count: usize) -> Vec<u8> {
        let mut bytes = saker_wire::encode_preamble().to_vec();
        for index in 0..count {
            bytes.extend(encode_frame(index as u32, &payload(index)));
        }
        bytes
    }

    #[tokio::test]
    async fn frames_survive_one_byte_reads_and_are_aligned() {
        let bytes = stream_of(50);
        let mut reader = FrameReader::with_max_payload_len(Pieces::of_size(&bytes, 1), 1024);
        reader.read_preamble().await.unwrap();
        for index in 0..50 {
            let frame = reader
                .read_frame()
                .await
                .unwrap()
                .expect("50 frames were sent");
            assert_eq!(frame.route(), index as u32);
            assert_eq!(frame.payload(), payload(index));
            assert_eq!(frame.payload().as_ptr().addr() % 8, 0);
            assert_eq!(frame.raw(), encode_frame(index as u32, &payload(index)));
        }
        assert!(reader.read_frame().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_burst_of_small_frames_costs_few_reads() {
        let bytes = stream_of(1000);
        let mut reader =
            FrameReader::with_max_payload_len(Pieces::of_size(&bytes, bytes.len()), 1024);
        reader.read_preamble().await.unwrap();
        let mut count = 0;
        while let Some(frame) = reader.read_frame().await.unwrap() {
            assert_eq!(frame.payload(), payload(count));
            count += 1;
        }
        assert_eq!(count, 1000);
        // One read per 64 KiB chunk plus the read that sees the end.
        let expected = bytes.len().div_ceil(CHUNK_LEN) as u64 + 1;
        assert!(
            reader.read_calls() <= expected,
            "{} reads for {} bytes",
            reader.read_calls(),
            bytes.len()
        );
    }

    #[tokio::test]
    async fn frames_held_by_the_caller_stay_intact_across_reads() {
        // Small frames around one larger than a chunk, delivered in odd pieces.
        let big: Vec<u8> = (0..3 * CHUNK_LEN + 5)
            .map(|byte| (byte % 251) as u8)
            .collect();
        let mut bytes = Vec::new();
        let mut expected = Vec::new();
        for index in 0..3000u32 {
            let body = if index == 1500 {
                big.clone()
            } else {
                payload(index as usize)
            };
            bytes.extend(encode_frame(index, &body));
            expected.push(body);
        }
        let mut reader =
            FrameReader::with_max_payload_len(Pieces::of_size(&bytes, 4099), 4 * CHUNK_LEN as u32);
        let mut held = Vec::new();
        while let Some(frame) = reader.read_frame().await.unwrap() {
            held.push(frame);
        }
        assert_eq!(held.len(), expected.len());
        for (index, (frame, body)) in held.iter().zip(&expected).enumerate() {
            assert_eq!(frame.route(), index as u32);
            assert_eq!(frame.payload(), &body[..]);
            assert_eq!(frame.payload().as_ptr().addr() % 8, 0);
        }
    }

    #[tokio::test]
    async fn an_oversized_header_is_refused_without_allocating() {
        let mut bytes = encode_frame(7, b"ok");
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        let mut reader =
            FrameReader::with_max_payload_len(Pieces::of_size(&bytes, bytes.len()), 1024);
        assert_eq!(reader.read_frame().await.unwrap().unwrap().payload(), b"ok");
        let error = reader.read_frame().await.unwrap_err();
        assert!(matches!(error, StreamError::Header(_)), "{error:?}");
        assert!(reader.buffer.len() <= CHUNK_LEN);
    }

    #[tokio::test]
    async fn an_end_inside_a_payload_is_truncation() {
        let mut bytes = encode_frame(1, &[9; 40]);
        bytes.truncate(30);
        let mut reader = FrameReader::with_max_payload_len(Pieces::of_size(&bytes, 7), 1024);
        let error = reader.read_frame().await.unwrap_err();
        assert!(
            matches!(
                error,
                StreamError::Truncated {
                    received: 30,
                    expected: 48
                }
            ),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn an_end_inside_a_header_is_truncation() {
        let mut bytes = encode_frame(1, b"12345678");
        bytes.extend_from_slice(&[1, 0, 0]);
        let mut reader =
            FrameReader::with_max_payload_len(Pieces::of_size(&bytes, bytes.len()), 1024);
        assert!(reader.read_frame().await.unwrap().is_some());
        let error = reader.read_frame().await.unwrap_err();
        assert!(
            matches!(
                error,
                StreamError::Truncated {
                    received: 3,
                    expected: 8
                }
            ),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn a_wrong_or_short_preamble_is_refused() {
        let mut reader = FrameReader::with_max_payload_len(Pieces::of_size(b"HTTP/1.1", 8), 1024);
        let error = reader.read_preamble().await.unwrap_err();
        assert!(matches!(error, StreamError::Preamble(_)), "{error:?}");

        let mut reader = FrameReader::with_max_payload_len(Pieces::of_size(b"SAK", 8), 1024);
        let error = reader.read_preamble().await.unwrap_err();
        assert!(
            matches!(error, StreamError::MissingPreamble { received: 3 }),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn an_empty_frame_is_a_frame_not_an_end() {
        let bytes = encode_frame(42, b"");
        let mut reader = FrameReader::with_max_payload_len(Pieces::of_size(&bytes, 8), 1024);
        let frame = reader
            .read_frame()
            .await
            .unwrap()
            .expect("one frame was sent");
        assert_eq!((frame.route(), frame.payload().len()), (42, 0));
        assert!(reader.read_frame().await.unwrap().is_none());
    }
}
