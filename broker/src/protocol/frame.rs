//! Size-prefixed frames: every Kafka request and response is an `int32`
//! length followed by that many bytes.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

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

#[cfg(test)]
mod tests {
    use super::*;

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
