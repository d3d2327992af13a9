//! Size-prefixed frames: every Kafka request and response is an `int32`
//! length followed by that many bytes.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::OwnedSemaphorePermit;

use super::limits::RequestBudget;

/// Why a connection must be closed while reading a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error("frame of {size} bytes is larger than socket.request.max.bytes ({max})")]
    TooLarge { size: i64, max: usize },
    #[error("negative frame size {0}")]
    Negative(i32),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Bytes a connection reads at a time while no frame is being read
/// whole: one read usually brings a small request entire, its size and
/// its body, where reading the size and then the body took two reads, and
/// waiting for the first byte without taking it (a `peek`) a third.
/// Larger frames are read on into a buffer of their own
/// ([`read_frame_body_reserving`]), so a connection never holds more than
/// this beyond the frames it has taken.
pub const READ_BUFFER_BYTES: usize = 4096;

/// Reads a connection's size-prefixed frames through a small buffer
/// ([`READ_BUFFER_BYTES`]). What it read past a frame's end (the start of
/// the next one) stays buffered for the next call; with nothing buffered
/// it holds no memory, so an idle connection costs nothing here.
pub struct FrameReader<R> {
    reader: R,
    /// Read and not yet taken, never more than [`READ_BUFFER_BYTES`].
    buf: BytesMut,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(reader: R) -> Self {
        FrameReader {
            reader,
            buf: BytesMut::new(),
        }
    }

    /// Waits for the next frame's first byte: `Ok(true)` once one is
    /// here (buffered, or read now), `Ok(false)` when the peer closed the
    /// connection between two frames. Cancel-safe: dropped while it waits
    /// (an idle timeout), it has read nothing.
    pub async fn wait_for_frame(&mut self) -> std::io::Result<bool> {
        if !self.buf.is_empty() {
            return Ok(true);
        }
        Ok(self.fill().await? > 0)
    }

    /// The next frame's `int32` size prefix, checked against `max`. A
    /// clean EOF before its first byte is [`FrameError::Closed`].
    pub async fn read_size(&mut self, max: usize) -> Result<usize, FrameError> {
        while self.buf.len() < 4 {
            if self.fill().await? == 0 {
                return Err(if self.buf.is_empty() {
                    FrameError::Closed
                } else {
                    FrameError::Truncated
                });
            }
        }
        let size = i32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        if size < 0 {
            return Err(FrameError::Negative(size));
        }
        let size = size as usize;
        if size > max {
            return Err(FrameError::TooLarge {
                size: size as i64,
                max,
            });
        }
        self.buf.advance(4);
        Ok(size)
    }

    /// The `size` bytes of the frame whose size [`Self::read_size`] just
    /// gave, reserved from `budget` (the permit comes back with them):
    /// taken from the buffer when it holds them all, else what it holds
    /// and the rest read into the frame's own buffer.
    pub async fn read_body(
        &mut self,
        size: usize,
        budget: &RequestBudget,
    ) -> Result<(Bytes, OwnedSemaphorePermit), FrameError> {
        if self.buf.len() >= size {
            let permit = budget.reserve(size).await;
            let frame = self.buf.split_to(size).freeze();
            if self.buf.is_empty() {
                // The frame keeps the allocation alive as long as it needs
                // it; the connection lets go of it.
                self.buf = BytesMut::new();
            }
            return Ok((frame, permit));
        }
        // Everything buffered belongs to this frame (a read never goes
        // past [`READ_BUFFER_BYTES`], and the frame is longer).
        let start = std::mem::take(&mut self.buf);
        read_frame_body_reserving(&mut self.reader, &start, size, budget).await
    }

    /// One read into the buffer's free room. Its callers call it only
    /// with room left (an empty buffer, or a size prefix not yet whole):
    /// with none, a read of 0 bytes would look like the peer's EOF.
    async fn fill(&mut self) -> std::io::Result<usize> {
        let room = READ_BUFFER_BYTES - self.buf.len();
        debug_assert!(room > 0, "fill called with a full buffer");
        self.buf.reserve(room);
        let mut limited = (&mut self.reader).take(room as u64);
        limited.read_buf(&mut self.buf).await
    }
}

/// Bytes reserved from the request budget at a time while a body arrives.
const RESERVE_CHUNK: usize = 64 * 1024;

/// Frames up to this size get their whole buffer at once. Reserving the
/// address space costs nothing until bytes arrive and are written into it
/// (the budget still counts only those); growing a ~1 MB produce request's
/// buffer chunk by chunk reallocated and copied it four times on its way
/// in, 2% of the broker's CPU under lz4 produce load.
const WHOLE_BUFFER_UP_TO: usize = 1 << 20;

/// Reads the rest of a frame of `size` bytes whose first bytes, `start`
/// (fewer than `size`), were read already, reserving the frame's bytes
/// from `budget` as they arrive, a chunk ahead of what was read, and
/// growing the buffer with them past [`WHOLE_BUFFER_UP_TO`]: a client that
/// announces 100 MiB and sends nothing holds nothing, and the bytes held
/// across the broker never exceed the budget. Never reads past the frame.
/// The permit comes back with the frame; dropping it releases the bytes.
async fn read_frame_body_reserving<R: AsyncRead + Unpin>(
    reader: &mut R,
    start: &[u8],
    size: usize,
    budget: &RequestBudget,
) -> Result<(Bytes, OwnedSemaphorePermit), FrameError> {
    debug_assert!(start.len() < size.max(1));
    let first = size.min(RESERVE_CHUNK).max(start.len());
    let mut permit = budget.reserve(first).await;
    let mut reserved = first;
    let mut buf = BytesMut::with_capacity(if size <= WHOLE_BUFFER_UP_TO {
        size
    } else {
        first
    });
    buf.extend_from_slice(start);
    let mut limited = (&mut *reader).take((size - start.len()) as u64);
    while buf.len() < size {
        if buf.len() == reserved {
            let more = (size - reserved).min(RESERVE_CHUNK);
            permit.merge(budget.reserve(more).await);
            reserved += more;
            buf.reserve(more);
        }
        // Read no further than what is reserved.
        let room = reserved - buf.len();
        let mut window = (&mut limited).take(room as u64);
        if window.read_buf(&mut buf).await? == 0 {
            return Err(FrameError::Truncated);
        }
    }
    Ok((buf.freeze(), permit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    /// An in-memory stream that hands out at most `step` bytes per read,
    /// as a socket does when a frame arrives in pieces.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = self.step.min(self.data.len()).min(out.remaining());
            out.put_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Poll::Ready(Ok(()))
        }
    }

    fn framed(bodies: &[&[u8]]) -> Vec<u8> {
        let mut wire = Vec::new();
        for b in bodies {
            wire.extend_from_slice(&(b.len() as i32).to_be_bytes());
            wire.extend_from_slice(b);
        }
        wire
    }

    /// Every frame of `wire`, read as the broker does, `step` bytes a read.
    async fn read_all(wire: &[u8], step: usize) -> Result<Vec<Bytes>, FrameError> {
        let budget = RequestBudget::new(1 << 20, 0);
        let mut r = FrameReader::new(Trickle { data: wire, step });
        let mut frames = Vec::new();
        while r.wait_for_frame().await? {
            let size = r.read_size(1 << 20).await?;
            frames.push(r.read_body(size, &budget).await?.0);
        }
        assert_eq!(budget.in_use(), 0, "every permit dropped with its frame");
        Ok(frames)
    }

    #[tokio::test]
    async fn frames_small_and_large_come_back_whole_and_in_order_however_they_arrive() {
        let large: Vec<u8> = (0..3 * READ_BUFFER_BYTES as u32 + 7)
            .map(|i| i as u8)
            .collect();
        let exact = vec![9u8; READ_BUFFER_BYTES - 4];
        let bodies: Vec<&[u8]> = vec![b"a", b"", &large, b"bc", &exact, b"def", &large];
        let wire = framed(&bodies);
        for step in [1, 3, 4, 5, 100, READ_BUFFER_BYTES, usize::MAX] {
            let frames = read_all(&wire, step).await.unwrap();
            let got: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
            assert_eq!(got, bodies, "{step} bytes a read");
        }
    }

    #[tokio::test]
    async fn one_read_brings_a_small_frame_and_the_start_of_the_next() {
        let wire = framed(&[b"first", b"second"]);
        let budget = RequestBudget::new(1 << 20, 0);
        let mut r = FrameReader::new(wire.as_slice());
        assert!(r.wait_for_frame().await.unwrap());
        assert_eq!(r.buf.len(), wire.len(), "all of it in one read");
        let size = r.read_size(100).await.unwrap();
        let (first, _permit) = r.read_body(size, &budget).await.unwrap();
        assert_eq!(&first[..], b"first");
        let size = r.read_size(100).await.unwrap();
        let (second, _permit) = r.read_body(size, &budget).await.unwrap();
        assert_eq!(&second[..], b"second");
        assert_eq!(r.buf.capacity(), 0, "nothing held once all is taken");
        assert!(!r.wait_for_frame().await.unwrap(), "then a clean close");
    }

    #[tokio::test]
    async fn a_large_frame_reads_no_further_than_its_end() {
        let large = vec![7u8; 10 * READ_BUFFER_BYTES];
        let mut wire = framed(&[&large]);
        wire.extend_from_slice(&[0, 0, 0, 1]);
        let budget = RequestBudget::new(1 << 20, 0);
        let mut stream = wire.as_slice();
        let mut r = FrameReader::new(&mut stream);
        let size = r.read_size(1 << 20).await.unwrap();
        let (frame, _permit) = r.read_body(size, &budget).await.unwrap();
        assert_eq!(frame.len(), large.len());
        assert!(r.buf.is_empty());
        drop(r);
        assert_eq!(stream, &[0, 0, 0, 1], "the next frame's bytes stay unread");
    }

    #[tokio::test]
    async fn reserving_reads_hold_only_what_arrived_and_release_on_drop() {
        let budget = RequestBudget::new(256 * 1024, 0);
        let body: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let mut reader: &[u8] = &body[100..];
        let (frame, permit) =
            read_frame_body_reserving(&mut reader, &body[..100], body.len(), &budget)
                .await
                .unwrap();
        assert_eq!(&frame[..], &body[..]);
        assert!(budget.in_use() >= body.len());
        drop(permit);
        assert_eq!(budget.in_use(), 0);
        // A body that stops early holds only a chunk ahead, then fails.
        let mut short: &[u8] = &body[..1000];
        let r = read_frame_body_reserving(&mut short, &[], 100 << 20, &budget).await;
        assert!(matches!(r, Err(FrameError::Truncated)));
        assert_eq!(budget.in_use(), 0, "released on failure");
    }

    #[tokio::test]
    async fn bad_and_torn_frames_are_refused() {
        let budget = RequestBudget::new(1 << 20, 0);
        async fn size_of(wire: &[u8]) -> Result<usize, FrameError> {
            FrameReader::new(wire).read_size(10).await
        }
        assert!(matches!(size_of(&[]).await, Err(FrameError::Closed)));
        assert!(matches!(size_of(&[0, 0]).await, Err(FrameError::Truncated)));
        assert!(matches!(
            size_of(&[0, 0, 1, 0]).await,
            Err(FrameError::TooLarge { size: 256, max: 10 })
        ));
        assert!(matches!(
            size_of(&[0xff, 0xff, 0xff, 0xff]).await,
            Err(FrameError::Negative(-1))
        ));
        for step in [1, 2, 100] {
            let torn: &[u8] = &[0, 0, 0, 3, 1];
            let mut r = FrameReader::new(Trickle { data: torn, step });
            let size = r.read_size(10).await.unwrap();
            assert!(matches!(
                r.read_body(size, &budget).await,
                Err(FrameError::Truncated)
            ));
        }
        assert_eq!(budget.in_use(), 0);
    }
}
