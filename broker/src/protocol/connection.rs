//! One client connection: read a frame, check the API and version, hand it
//! to the handlers, write the reply — in order, one request at a time, as
//! the Kafka protocol requires responses in request order.
//!
//! Malformed frames, unknown APIs and unsupported versions close the
//! connection (logged once per connection); ApiVersions with a version we
//! do not know gets the KIP-511 answer instead.
//!
//! Limits (see [`super::limits`]): a connection idle for
//! `connections.max.idle.ms` between requests is closed; once a request's
//! first byte arrives, all of it must arrive within
//! `socket.request.read.timeout.ms`; its bytes are reserved from the
//! broker's `queued.max.request.bytes` budget as they arrive (before the
//! buffer grows), and released when the response is written.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::TcpStream;

use super::fetch_encode::Piece;
use super::frame::{read_frame_body_reserving, read_frame_size, FrameError};
use super::versions::supported_range;
use crate::broker::Broker;
use crate::handlers::{self, Reply};
use crate::metrics::ApiLabel;

static BAD_CONNECTION_LOG: LogRate = LogRate::new(1_000);

/// Lets a log line through at most once per interval, across threads, and
/// counts the ones held back in between.
pub(crate) struct LogRate {
    every_ms: u64,
    last_ms: AtomicU64,
    held_back: AtomicU64,
}

impl LogRate {
    pub(crate) const fn new(every_ms: u64) -> Self {
        Self {
            every_ms,
            last_ms: AtomicU64::new(0),
            held_back: AtomicU64::new(0),
        }
    }

    /// `Some(lines held back since the last one)` when this line may go out.
    pub(crate) fn admit(&self) -> Option<u64> {
        let now = crate::topics::now_ms().max(0) as u64;
        let last = self.last_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= self.every_ms
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.held_back.swap(0, Ordering::Relaxed));
        }
        self.held_back.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// Serves one connection until the peer closes it or sends something we
/// must refuse.
pub async fn serve(broker: Arc<Broker>, mut stream: TcpStream, peer: std::net::SocketAddr) {
    let _ = stream.set_nodelay(true);
    broker.metrics.connections.inc();
    if let Err(reason) = serve_inner(&broker, &mut stream, peer).await {
        if !reason.is_empty() {
            broker.metrics.closed_bad_connections.inc();
            // At most one line a second: a flood of bad connections must
            // not become a flood of log lines (the metric counts them all).
            if let Some(suppressed) = BAD_CONNECTION_LOG.admit() {
                tracing::warn!(%peer, %reason, suppressed, "closing connection");
            }
        }
    }
    broker.metrics.connections.dec();
}

async fn serve_inner(
    broker: &Arc<Broker>,
    stream: &mut TcpStream,
    peer: std::net::SocketAddr,
) -> Result<(), String> {
    let max = broker.socket_request_max_bytes();
    let config = broker.topics.broker_config();
    let idle = Duration::from_millis(config.connections_max_idle_ms.max(1) as u64);
    let read_timeout = Duration::from_millis(config.socket_request_read_timeout_ms.max(1) as u64);
    let mut ctx = crate::protocol::principal::ConnectionContext::new(peer);
    loop {
        // Idle until the next request's first byte (peek takes nothing).
        match tokio::time::timeout(idle, stream.peek(&mut [0u8; 1])).await {
            Err(_) => {
                broker.metrics.connections_closed_idle.inc();
                tracing::debug!(%peer, "closing idle connection");
                return Ok(());
            }
            Ok(Ok(0)) => return Ok(()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
            Ok(Err(e)) => return Err(e.to_string()),
        }
        let size = match tokio::time::timeout(read_timeout, read_frame_size(stream, max)).await {
            Err(_) => {
                broker.metrics.requests_read_timed_out.inc();
                return Err("request size not received in time".into());
            }
            Ok(r) => frame_result(r)?,
        };
        let Some(size) = size else { return Ok(()) };
        let body = read_frame_body_reserving(stream, size, &broker.request_budget);
        let (frame, reserved) = match tokio::time::timeout(read_timeout, body).await {
            Err(_) => {
                broker.metrics.requests_read_timed_out.inc();
                return Err(format!("request of {size} bytes not received in time"));
            }
            Ok(r) => match frame_result(r)? {
                Some(read) => read,
                None => return Ok(()),
            },
        };
        if frame.len() < 8 {
            return Err(format!(
                "request of {} bytes is too short for a header",
                frame.len()
            ));
        }
        let api_key = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let api = ApiKey::try_from(api_key).map_err(|_| format!("unknown API key {api_key}"))?;
        let Some((min, max_version)) = supported_range(api) else {
            return Err(format!("API {api:?} is not implemented"));
        };
        if version < min || version > max_version {
            if api == ApiKey::ApiVersions && version > max_version {
                let reply = handlers::unsupported_version_response(correlation_id);
                write_pieces(stream, &[Piece::Bytes(reply)])
                    .await
                    .map_err(|e| e.to_string())?;
                continue;
            }
            return Err(format!(
                "{api:?} v{version} is not supported (we do {min}..={max_version})"
            ));
        }
        let label = ApiLabel {
            api: format!("{api:?}"),
        };
        let started = Instant::now();
        let reply = handlers::handle(broker, api, version, frame, &mut ctx)
            .await
            .map_err(|e| e.to_string())?;
        broker
            .metrics
            .request_seconds
            .get_or_create(&label)
            .observe(started.elapsed().as_secs_f64());
        broker.metrics.requests.get_or_create(&label).inc();
        if let Reply::Pieces(pieces) = reply {
            if let Err(e) = write_pieces(stream, &pieces).await {
                // The peer went away: nothing to log beyond debug.
                tracing::debug!(error = %e, "writing response failed");
                return Ok(());
            }
        }
        drop(reserved);
        if ctx.throttle_ms > 0 {
            // KIP-219: the client was told its throttle time in the
            // response; the broker reads nothing more from it until that
            // time has passed, so a client ignoring the field gains nothing.
            tokio::time::sleep(Duration::from_millis(ctx.throttle_ms as u64)).await;
        }
    }
}

/// A frame read's outcome: the value, `None` when the peer closed or reset
/// the connection, or why to close it.
fn frame_result<T>(r: Result<T, FrameError>) -> Result<Option<T>, String> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(FrameError::Closed) => Ok(None),
        Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Sets `TCP_CORK`: while set, the kernel sends only full segments, so a
/// response header written from a buffer and the log bytes that follow via
/// `sendfile` leave in the same packets instead of a tiny one first.
fn set_cork(stream: &TcpStream, on: bool) {
    let value: libc::c_int = on.into();
    // SAFETY: the descriptor is a valid TCP socket owned by `stream`, and the
    // option value points at a live c_int of the size passed.
    let _ = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CORK,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Writes buffers normally and file regions with `sendfile(2)`.
pub async fn write_pieces(stream: &mut TcpStream, pieces: &[Piece]) -> std::io::Result<()> {
    let corked = pieces.len() > 1;
    if corked {
        set_cork(stream, true);
    }
    let result = write_all_pieces(stream, pieces).await;
    if corked {
        set_cork(stream, false);
    }
    result
}

async fn write_all_pieces(stream: &mut TcpStream, pieces: &[Piece]) -> std::io::Result<()> {
    for piece in pieces {
        match piece {
            Piece::Bytes(b) => stream.write_all(b).await?,
            Piece::File(slice) => {
                let mut offset = slice.position as libc::off_t;
                let end = slice.position + slice.len;
                while (offset as u64) < end {
                    let count = (end - offset as u64).min(1 << 30) as usize;
                    let in_fd = slice.file.as_raw_fd();
                    stream.writable().await?;
                    let sent = stream.try_io(Interest::WRITABLE, || {
                        let out_fd = stream.as_raw_fd();
                        // SAFETY: both descriptors are open for the duration of
                        // the call (the file is held by `slice`, the socket by
                        // `stream`), and `offset` is a valid pointer.
                        let n = unsafe { libc::sendfile(out_fd, in_fd, &mut offset, count) };
                        if n < 0 {
                            Err(std::io::Error::last_os_error())
                        } else {
                            Ok(n)
                        }
                    });
                    match sent {
                        Ok(0) => {
                            return Err(std::io::Error::new(
                                std::io::ErrorKind::UnexpectedEof,
                                "segment file shorter than the slice",
                            ))
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::LogRate;

    #[test]
    fn log_rate_lets_one_line_through_per_interval_and_counts_the_rest() {
        let rate = LogRate::new(60_000);
        assert_eq!(rate.admit(), Some(0));
        assert_eq!(rate.admit(), None);
        assert_eq!(rate.admit(), None);
        let fast = LogRate::new(0);
        assert_eq!(fast.admit(), Some(0));
    }
}
