//! Fuzz check `request_frame`: one request from the bytes of a frame to a
//! decoded request, as a connection of the broker handles it.
//!
//! Input: one request frame as the broker reads it after the 4-byte size
//! (`api key i16 | api version i16 | correlation id i32 | client id |
//! [tagged fields] | body`), which is exactly what `fuzz/seed/capture.py`
//! records from real clients; the frames of the transaction APIs, which
//! those clients do not send, are built by `tests/seeds.rs`
//! (`*-txn.bin`). The first four bytes choose the
//! `(api key, version)`: if they already name a pair the broker advertises
//! (`moldau_broker::protocol::versions::SUPPORTED`) that pair is used, else
//! they are read as a `u32` index into the list of every advertised pair
//! and rewritten to name it. So every advertised pair is reachable from any
//! input, and the header decoded below agrees with what
//! `protocol::connection` would have dispatched on.
//!
//! Exercises:
//! - `protocol::frame::FrameReader` on an in-memory reader, as a connection
//!   reads: twice, the frame with its size prefix and the next frame's
//!   start after it, and the raw input taken as a stream whose first four
//!   bytes are the size (negative, too large and torn frames);
//! - `RequestHeader::decode` with `api.request_header_version(v)` and
//!   `RequestKind::decode(api, body, v)`, as `handlers::handle` does.
//!
//! Asserts: no panic, abort or out-of-memory (scripts/fuzz.sh runs with
//! `-rss_limit_mb` / `-malloc_limit_mb`, so an allocation sized by a lying
//! count is a crash); decode errors are fine. The reader gives back
//! exactly the bytes that were framed, and the next frame's after them.

use std::future::Future;
use std::sync::LazyLock;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::Decodable;
use moldau_broker::config::BrokerConfig;
use moldau_broker::protocol::frame::{FrameError, FrameReader};
use moldau_broker::protocol::limits::RequestBudget;
use moldau_broker::protocol::versions::SUPPORTED;

/// Every `(api, version)` the broker advertises.
static PAIRS: LazyLock<Vec<(ApiKey, i16)>> = LazyLock::new(|| {
    SUPPORTED
        .iter()
        .flat_map(|&(api, min, max)| (min..=max).map(move |v| (api, v)))
        .collect()
});

/// The broker's default `socket.request.max.bytes`.
static MAX_FRAME: LazyLock<usize> =
    LazyLock::new(|| BrokerConfig::default().socket_request_max_bytes);

/// Drives a future whose I/O is in memory (never pending) to completion.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("an in-memory frame read keeps returning Pending");
}

/// Reads one frame from `reader` as a connection does (size, then body
/// under the request budget).
async fn read_frame(reader: &mut FrameReader<&[u8]>) -> Result<Bytes, FrameError> {
    let size = reader.read_size(*MAX_FRAME).await?;
    let budget = RequestBudget::new(*MAX_FRAME, *MAX_FRAME);
    Ok(reader.read_body(size, &budget).await?.0)
}

/// The advertised pair the first four bytes of `frame` choose (see above).
fn choose(frame: &[u8]) -> (ApiKey, i16) {
    let mut head = [0u8; 4];
    let n = frame.len().min(4);
    head[..n].copy_from_slice(&frame[..n]);
    let key = i16::from_be_bytes([head[0], head[1]]);
    let version = i16::from_be_bytes([head[2], head[3]]);
    if let Ok(api) = ApiKey::try_from(key) {
        if PAIRS.contains(&(api, version)) {
            return (api, version);
        }
    }
    PAIRS[u32::from_be_bytes(head) as usize % PAIRS.len()]
}

/// One input through the check (see the module doc).
pub fn run(data: &[u8]) {
    // The raw input as a stream: its first four bytes are a frame size.
    let _ = block_on(read_frame(&mut FrameReader::new(data)));

    let (api, version) = choose(data);
    let mut frame = data.to_vec();
    if frame.len() < 4 {
        frame.resize(4, 0);
    }
    frame[0..2].copy_from_slice(&(api as i16).to_be_bytes());
    frame[2..4].copy_from_slice(&version.to_be_bytes());

    // The frame as it arrives: size prefix, then the frame, then the next
    // frame's size (which the reader must keep for the next frame).
    if frame.len() > *MAX_FRAME {
        return;
    }
    let mut wire = Vec::with_capacity(frame.len() + 8);
    wire.extend_from_slice(&(frame.len() as i32).to_be_bytes());
    wire.extend_from_slice(&frame);
    wire.extend_from_slice(&[0, 0, 0, 1]);
    let mut reader = FrameReader::new(wire.as_slice());
    let read = block_on(read_frame(&mut reader)).expect("a whole frame reads");
    assert_eq!(&read[..], &frame[..], "the reader returns the framed bytes");
    let next = block_on(reader.read_size(*MAX_FRAME)).expect("the next frame's size reads");
    assert_eq!(next, 1, "the reader keeps what follows the frame's end");

    // Decode as handlers::handle does.
    let mut buf = read;
    let Ok(header) = RequestHeader::decode(&mut buf, api.request_header_version(version)) else {
        return;
    };
    assert_eq!(header.request_api_key, api as i16);
    assert_eq!(header.request_api_version, version);
    let _ = RequestKind::decode(api, &mut buf, version);
}
