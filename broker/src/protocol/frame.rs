//! Size-prefixed frames: every Kafka request and response is an `int32`
//! length followed by that many bytes.

use bytes::{Bytes, BytesMut};
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

/// Reads one frame. A clean EOF before the first byte is [`FrameError::Closed`].
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<Bytes, FrameError> {
    let size = read_frame_size(reader, max).await?;
    read_frame_body(reader, size).await
}

/// Reads a frame's `int32` size prefix and checks it against `max`.
pub async fn read_frame_size<R: AsyncRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> Result<usize, FrameError> {
    let mut len_buf = [0u8; 4];
    let mut filled = 0;
    while filled < 4 {
        let n = reader.read(&mut len_buf[filled..]).await?;
        if n == 0 {
            return Err(if filled == 0 {
                FrameError::Closed
            } else {
                FrameError::Truncated
            });
        }
        filled += n;
    }
    let size = i32::from_be_bytes(len_buf);
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
    Ok(size)
}

/// Reads the `size` bytes of a frame's body (after [`read_frame_size`]).
pub async fn read_frame_body<R: AsyncRead + Unpin>(
    reader: &mut R,
    size: usize,
) -> Result<Bytes, FrameError> {
    // Read into spare capacity (no zeroing of large produce frames), never
    // past this frame: the next frame's bytes stay in the socket.
    let mut buf = BytesMut::with_capacity(size);
    let mut limited = (&mut *reader).take(size as u64);
    while buf.len() < size {
        if limited.read_buf(&mut buf).await? == 0 {
            return Err(FrameError::Truncated);
        }
    }
    Ok(buf.freeze())
}

/// Bytes reserved from the request budget at a time while a body arrives.
const RESERVE_CHUNK: usize = 64 * 1024;

/// Frames up to this size get their whole buffer at once. Reserving the
/// address space costs nothing until bytes arrive and are written into it
/// (the budget still counts only those); growing a ~1 MB produce request's
/// buffer chunk by chunk reallocated and copied it four times on its way
/// in, 2% of the broker's CPU under lz4 produce load.
const WHOLE_BUFFER_UP_TO: usize = 1 << 20;

/// [`read_frame_body`] that reserves the frame's bytes from `budget` as they
/// arrive, a chunk ahead of what was read, and grows the buffer with them
/// past [`WHOLE_BUFFER_UP_TO`]: a client that announces 100 MiB and sends
/// nothing holds nothing, and the bytes held across the broker never exceed
/// the budget. The permit comes back with the frame; dropping it releases
/// the bytes.
pub async fn read_frame_body_reserving<R: AsyncRead + Unpin>(
    reader: &mut R,
    size: usize,
    budget: &RequestBudget,
) -> Result<(Bytes, OwnedSemaphorePermit), FrameError> {
    let first = size.min(RESERVE_CHUNK);
    let mut permit = budget.reserve(first).await;
    let mut reserved = first;
    let mut buf = BytesMut::with_capacity(if size <= WHOLE_BUFFER_UP_TO {
        size
    } else {
        first
    });
    let mut limited = (&mut *reader).take(size as u64);
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

    #[tokio::test]
    async fn reserving_reads_hold_only_what_arrived_and_release_on_drop() {
        let budget = RequestBudget::new(256 * 1024, 0);
        let body: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let mut reader: &[u8] = &body;
        let (frame, permit) = read_frame_body_reserving(&mut reader, body.len(), &budget)
            .await
            .unwrap();
        assert_eq!(&frame[..], &body[..]);
        assert!(budget.in_use() >= body.len());
        drop(permit);
        assert_eq!(budget.in_use(), 0);
        // A body that stops early holds only a chunk ahead, then fails.
        let mut short: &[u8] = &body[..1000];
        let r = read_frame_body_reserving(&mut short, 100 << 20, &budget).await;
        assert!(matches!(r, Err(FrameError::Truncated)));
        assert_eq!(budget.in_use(), 0, "released on failure");
    }

    #[tokio::test]
    async fn frames_are_read_and_bad_ones_refused() {
        let mut ok: &[u8] = &[0, 0, 0, 3, 1, 2, 3];
        assert_eq!(&read_frame(&mut ok, 10).await.unwrap()[..], &[1, 2, 3]);
        let mut two: &[u8] = &[0, 0, 0, 1, 9, 0, 0, 0, 2, 8, 7];
        assert_eq!(&read_frame(&mut two, 10).await.unwrap()[..], &[9]);
        assert_eq!(
            &read_frame(&mut two, 10).await.unwrap()[..],
            &[8, 7],
            "no over-read"
        );
        let mut empty: &[u8] = &[];
        assert!(matches!(
            read_frame(&mut empty, 10).await,
            Err(FrameError::Closed)
        ));
        let mut torn: &[u8] = &[0, 0, 0, 3, 1];
        assert!(matches!(
            read_frame(&mut torn, 10).await,
            Err(FrameError::Truncated)
        ));
        let mut torn_len: &[u8] = &[0, 0];
        assert!(matches!(
            read_frame(&mut torn_len, 10).await,
            Err(FrameError::Truncated)
        ));
        let mut big: &[u8] = &[0, 0, 1, 0];
        assert!(matches!(
            read_frame(&mut big, 10).await,
            Err(FrameError::TooLarge { .. })
        ));
        let mut neg: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame(&mut neg, 10).await,
            Err(FrameError::Negative(-1))
        ));
    }
}
