//! One client connection: read a frame, check the API and version, hand it
//! to the handlers, write the reply — in order, one request at a time, as
//! the Kafka protocol requires responses in request order.
//!
//! Reading runs in a task of its own, ahead of handling, by up to
//! [`READ_AHEAD_REQUESTS`]
//! requests, behind requests whose preparation runs in the background:
//! while produce request N's compressed batches are checked on the
//! blocking pool ([`handlers::prepare`]), the next requests are read,
//! decoded and prepared, each one's checks in parallel with the others'
//! and with the appends before — so a client with several requests in
//! flight (librdkafka and the Java client send up to 5) keeps more than
//! one core busy on one connection, where checking and appending one
//! request after the other would keep one. Behind any other request the
//! next is read once it is answered, as before. Frames are read through
//! a small buffer ([`FrameReader`]): a small request comes in one read,
//! size and body together. Nothing is
//! appended, answered or changed out of order: the read-ahead only does
//! work that changes no state, and the handler redoes a produce check
//! whose partition's rules changed since.
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
//!
//! On a TLS listener (SSL, SASL_SSL) the connection starts with the TLS
//! handshake (`security::tls` owns the configuration); on SSL a client
//! certificate's subject, mapped by `ssl.principal.mapping.rules`, is the
//! principal. Responses then go through the TLS session: log bytes are
//! read from the segment into memory and encrypted ([`Copying`]) instead
//! of going zero-copy with `sendfile` ([`Sendfile`]).
//!
//! A connection knows the listener it arrived on (its
//! [`ConnectionContext::listener`]): that listener's security applies, and
//! answers that name brokers give their endpoints of that listener.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio_util::task::AbortOnDropHandle;

use super::fetch_encode::Piece;
use super::frame::{FrameError, FrameReader};
use super::versions::supported_range;
use crate::broker::Broker;
use crate::handlers::{self, Reply};
use crate::metrics::ApiLabel;
use crate::protocol::principal::{ConnectionContext, Principal};
use crate::security::listener::ClientListener;
use crate::security::tls::TlsState;

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
        let now = crate::clock::now_ms().max(0) as u64;
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
/// must refuse; `tls`: the listener's TLS (SSL, SASL_SSL), whose
/// handshake comes first.
pub async fn serve(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: std::net::SocketAddr,
    listener: Arc<ClientListener>,
    tls: Option<Arc<TlsState>>,
) {
    let _ = stream.set_nodelay(true);
    broker.metrics.connections.inc();
    let ctx = ConnectionContext::on_listener(peer, listener);
    let outcome = match tls {
        None => {
            let (reading, writing) = stream.into_split();
            serve_inner(&broker, reading, Sendfile(writing), ctx).await
        }
        Some(tls) => serve_tls(&broker, stream, ctx, &tls).await,
    };
    if let Err(reason) = outcome {
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

/// The TLS handshake (bounded by `socket.request.read.timeout.ms`, so a
/// client stalling in it holds its connection slot no longer than one
/// stalling in a request), the principal of a client certificate, then
/// the connection as any other.
/// The read buffer under a TLS session (see [`serve_tls`]).
pub const TLS_READ_BUFFER_BYTES: usize = 64 * 1024;

async fn serve_tls(
    broker: &Arc<Broker>,
    stream: TcpStream,
    mut ctx: ConnectionContext,
    tls: &TlsState,
) -> Result<(), String> {
    let peer = ctx.peer;
    // the configuration of this moment: a rotation after it applies to
    // the next connections
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
    let deadline = Duration::from_millis(
        broker
            .topics
            .broker_config()
            .socket_request_read_timeout_ms
            .max(1) as u64,
    );
    // rustls reads the socket 4 KiB at a time; a buffer under it turns a
    // 1 MB produce request's 256 reads into 16 (the bytes are copied once
    // more, which costs far less than the system calls).
    let buffered = tokio::io::BufReader::with_capacity(TLS_READ_BUFFER_BYTES, stream);
    let stream = match tokio::time::timeout(deadline, acceptor.accept(buffered)).await {
        Err(_) => return Err("TLS handshake not completed in time".into()),
        // closed before or during the handshake without a word (a TCP
        // health check, a client giving up): as quiet as a plaintext
        // connection closed before its first request
        Ok(Err(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            return Ok(())
        }
        Ok(Err(e)) => return Err(format!("TLS handshake failed: {e}")),
        Ok(Ok(stream)) => stream,
    };
    // On SSL the client certificate is the principal (Kafka's default
    // principal builder); on SASL_SSL the SASL user is, as in Kafka.
    if !ctx.requires_sasl {
        let certificate = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first());
        if let Some(certificate) = certificate {
            let dn = crate::security::tls::subject_dn(certificate)?;
            let name =
                tls.settings().principal_mapper.map(&dn).ok_or_else(|| {
                    format!("no ssl.principal.mapping.rules rule applies to {dn}")
                })?;
            ctx.principal = Principal::User(name.into());
            tracing::debug!(%peer, subject = %dn, principal = %ctx.principal.kafka_name(), "TLS client authenticated");
        }
    }
    let (reading, writing) = tokio::io::split(stream);
    serve_inner(broker, reading, Copying(writing), ctx).await
}

async fn serve_inner<R, W>(
    broker: &Arc<Broker>,
    reading: R,
    mut writing: W,
    mut ctx: ConnectionContext,
) -> Result<(), String>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: PieceWriter,
{
    let activity = Arc::new(Activity::new());
    // The reader reserves a slot before it reads: at most this many
    // requests wait, read and being prepared, while another is handled.
    let (ahead, mut next) = tokio::sync::mpsc::channel::<Ahead>(READ_AHEAD_REQUESTS);
    // Reading is a task of its own rather than a branch of a `select!` in
    // this one: each request, the reader wakes the handler (a request
    // read) and the handler the reader (a request answered). Within one
    // task each is a wake-up of the task from inside its own poll, which
    // tokio schedules as a yield and follows by waking another worker
    // thread to steal it: two needless thread wake-ups per request (2.4
    // context switches per request at a fixed rate). Between two tasks,
    // the woken one waits in the waking worker's LIFO slot and runs next
    // on the same thread: 1.0 (`tests/connection_wakeups.rs`). The
    // handle aborts the reader when the connection ends, however it ends
    // (an error, a shutdown dropping this future).
    let _reader = AbortOnDropHandle::new(tokio::spawn({
        let broker = broker.clone();
        let activity = activity.clone();
        async move {
            let mut reading = FrameReader::new(reading);
            read_ahead(&broker, &mut reading, &ahead, &activity).await;
        }
    }));
    // `None`: the reader task is gone without its last message (it cannot
    // panic on request content; only a shutdown aborts it).
    while let Some(item) = next.recv().await {
        let _busy = activity.busy();
        let (decoded, reserved) = match item {
            // Its last message says how the connection ends; everything
            // read before it has been answered.
            Ahead::End(outcome) => return outcome,
            Ahead::UnsupportedApiVersions { correlation_id } => {
                let reply = handlers::unsupported_version_response(correlation_id);
                writing
                    .write_pieces(&[Piece::Bytes(reply)])
                    .await
                    .map_err(|e| e.to_string())?;
                continue;
            }
            Ahead::Request { decoded, reserved } => (decoded, reserved),
        };
        let label = ApiLabel {
            api: format!("{:?}", decoded.api()),
        };
        let started = Instant::now();
        let reply = handlers::handle(broker, *decoded, &mut ctx)
            .await
            .map_err(|e| e.to_string())?;
        broker
            .metrics
            .request_seconds
            .get_or_create(&label)
            .observe(started.elapsed().as_secs_f64());
        broker.metrics.requests.get_or_create(&label).inc();
        let closing = ctx.close_after_reply.take();
        if let Some(delay) = closing {
            // a failed authentication: answered late, then closed
            tokio::time::sleep(delay).await;
        }
        if let Reply::Pieces(pieces) = reply {
            if let Err(e) = writing.write_pieces(&pieces).await {
                // The peer went away: nothing to log beyond debug.
                tracing::debug!(error = %e, "writing response failed");
                return Ok(());
            }
        }
        drop(reserved);
        if closing.is_some() {
            return Ok(());
        }
        if ctx.throttle_ms > 0 {
            // KIP-219: the client was told its throttle time in the
            // response; the broker handles nothing more from it until
            // that time has passed, and reads nothing more but what it
            // had already started to read, so a client ignoring the
            // field gains nothing.
            let throttle = Duration::from_millis(ctx.throttle_ms as u64);
            activity.mute_for(throttle);
            tokio::time::sleep(throttle).await;
        }
    }
    Ok(())
}

/// How many requests of a connection may be read before their turn: a
/// producer's default `max.in.flight.requests.per.connection` is 5, so
/// this lets the checks of up to three of them run in parallel with the
/// append of a fourth. Their bytes count against the broker's request
/// budget like any other.
const READ_AHEAD_REQUESTS: usize = 3;

/// What the reading side hands the handling side, in the order read.
enum Ahead {
    /// A decoded request, prepared ([`handlers::prepare`]), and its bytes'
    /// reservation from the request budget, released once answered.
    Request {
        decoded: Box<handlers::Decoded>,
        reserved: tokio::sync::OwnedSemaphorePermit,
    },
    /// ApiVersions in a version we do not know: the KIP-511 answer.
    UnsupportedApiVersions { correlation_id: i32 },
    /// Reading stopped: the peer closed (`Ok`) or sent something to
    /// refuse (`Err`, why). Everything read before is answered first.
    End(Result<(), String>),
}

/// Whether the connection is doing anything, for the idle timeout: it is
/// not idle while a request is handled or its throttle time runs, only
/// from the last answer (or the start) on.
struct Activity {
    started: Instant,
    /// Requests being handled (0 or 1).
    handling: std::sync::atomic::AtomicUsize,
    /// When the last one ended, in ms since `started`.
    last_ended_ms: AtomicU64,
    /// Until when nothing more is read (KIP-219), in ms since `started`.
    muted_until_ms: AtomicU64,
    /// Requests handled so far, and a signal each time one is.
    handled: AtomicU64,
    handled_one: tokio::sync::Notify,
}

impl Activity {
    fn new() -> Self {
        Activity {
            started: Instant::now(),
            handling: std::sync::atomic::AtomicUsize::new(0),
            last_ended_ms: AtomicU64::new(0),
            muted_until_ms: AtomicU64::new(0),
            handled: AtomicU64::new(0),
            handled_one: tokio::sync::Notify::new(),
        }
    }

    /// Waits until `count` requests have been handled.
    async fn handled(&self, count: u64) {
        loop {
            let signal = self.handled_one.notified();
            tokio::pin!(signal);
            signal.as_mut().enable();
            if self.handled.load(Ordering::Acquire) >= count {
                return;
            }
            signal.await;
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Reads nothing more for `throttle` from now.
    fn mute_for(&self, throttle: Duration) {
        let until = self.now_ms().saturating_add(throttle.as_millis() as u64);
        self.muted_until_ms.fetch_max(until, Ordering::Relaxed);
    }

    /// How long reading must still wait, if it must.
    fn muted_for(&self) -> Option<Duration> {
        let until = self.muted_until_ms.load(Ordering::Relaxed);
        let now = self.now_ms();
        (until > now).then(|| Duration::from_millis(until - now))
    }

    /// Marks a request as being handled until the guard is dropped.
    fn busy(&self) -> Handling<'_> {
        self.handling.fetch_add(1, Ordering::Relaxed);
        Handling(self)
    }

    /// How long the connection has been idle, or `None` while it is busy.
    fn idle_for(&self) -> Option<Duration> {
        if self.handling.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.last_ended_ms.load(Ordering::Relaxed));
        Some(self.started.elapsed().saturating_sub(since))
    }
}

/// A request being handled (see [`Activity::busy`]).
struct Handling<'a>(&'a Activity);

impl Drop for Handling<'_> {
    fn drop(&mut self) {
        let a = self.0;
        a.last_ended_ms.store(a.now_ms(), Ordering::Relaxed);
        a.handling.fetch_sub(1, Ordering::Relaxed);
        a.handled.fetch_add(1, Ordering::Release);
        a.handled_one.notify_waiters();
    }
}

/// Reads requests ahead of the one being handled, until the peer closes,
/// goes idle, or sends something to refuse; each is checked (API,
/// version, header), decoded and its preparation started before it is
/// handed on.
async fn read_ahead<R: AsyncRead + Unpin>(
    broker: &Arc<Broker>,
    stream: &mut FrameReader<R>,
    ahead: &tokio::sync::mpsc::Sender<Ahead>,
    activity: &Activity,
) {
    let max = broker.socket_request_max_bytes();
    let config = broker.topics.broker_config();
    let idle = Duration::from_millis(config.connections_max_idle_ms.max(1) as u64);
    let read_timeout = Duration::from_millis(config.socket_request_read_timeout_ms.max(1) as u64);
    let mut sent = 0u64;
    let mut overlaps = false;
    loop {
        // Reading on while the last request is handled pays only when
        // there is work to overlap (its checks on the blocking pool);
        // otherwise reading early only splits a request into more reads
        // of what has arrived so far: 100 B uncompressed records went from
        // 1.3–1.4 to 0.8–1.1 GB/s on one connection reading ahead always.
        if !overlaps {
            activity.handled(sent).await;
        }
        let Ok(slot) = ahead.reserve().await else {
            return;
        };
        while let Some(muted) = activity.muted_for() {
            tokio::time::sleep(muted).await;
        }
        let item = match read_one(broker, stream, activity, max, idle, read_timeout).await {
            Ok(item) => item,
            Err(outcome) => Ahead::End(outcome),
        };
        let ended = matches!(item, Ahead::End(_));
        overlaps = matches!(&item, Ahead::Request { decoded, .. } if decoded.is_being_prepared());
        slot.send(item);
        sent += 1;
        if ended {
            return;
        }
    }
}

/// Reads, checks and decodes the next request and starts its
/// preparation; `Err` ends the
/// connection (`Ok(())` quietly: closed by the peer or idle).
async fn read_one<R: AsyncRead + Unpin>(
    broker: &Arc<Broker>,
    stream: &mut FrameReader<R>,
    activity: &Activity,
    max: usize,
    idle: Duration,
    read_timeout: Duration,
) -> Result<Ahead, Result<(), String>> {
    // Idle until the next request's first byte; the time counts only while
    // nothing is being handled.
    loop {
        let wait = activity
            .idle_for()
            .map_or(idle, |was| idle.saturating_sub(was));
        match tokio::time::timeout(wait, stream.wait_for_frame()).await {
            Err(_) if activity.idle_for().is_some_and(|was| was >= idle) => {
                broker.metrics.connections_closed_idle.inc();
                tracing::debug!("closing idle connection");
                return Err(Ok(()));
            }
            Err(_) => continue,
            Ok(Ok(false)) => return Err(Ok(())),
            Ok(Ok(true)) => break,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return Err(Ok(())),
            // a TLS peer that closed TCP without close_notify between two
            // requests (librdkafka does): gone, as a plaintext one at EOF
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(Ok(())),
            Ok(Err(e)) => return Err(Err(e.to_string())),
        }
    }
    let size = match tokio::time::timeout(read_timeout, stream.read_size(max)).await {
        Err(_) => {
            broker.metrics.requests_read_timed_out.inc();
            return Err(Err("request size not received in time".into()));
        }
        Ok(r) => frame_result(r).map_err(Err)?,
    };
    let Some(size) = size else {
        return Err(Ok(()));
    };
    let body = stream.read_body(size, &broker.request_budget);
    let (frame, reserved) = match tokio::time::timeout(read_timeout, body).await {
        Err(_) => {
            broker.metrics.requests_read_timed_out.inc();
            return Err(Err(format!("request of {size} bytes not received in time")));
        }
        Ok(r) => match frame_result(r).map_err(Err)? {
            Some(read) => read,
            None => return Err(Ok(())),
        },
    };
    if frame.len() < 8 {
        return Err(Err(format!(
            "request of {} bytes is too short for a header",
            frame.len()
        )));
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api = ApiKey::try_from(api_key).map_err(|_| Err(format!("unknown API key {api_key}")))?;
    let Some((min, max_version)) = supported_range(api) else {
        return Err(Err(format!("API {api:?} is not implemented")));
    };
    if version < min || version > max_version {
        if api == ApiKey::ApiVersions && version > max_version {
            return Ok(Ahead::UnsupportedApiVersions { correlation_id });
        }
        return Err(Err(format!(
            "{api:?} v{version} is not supported (we do {min}..={max_version})"
        )));
    }
    let mut decoded = handlers::decode(api, version, frame).map_err(|e| Err(e.to_string()))?;
    handlers::prepare(broker, &mut decoded);
    Ok(Ahead::Request {
        decoded: Box::new(decoded),
        reserved,
    })
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

/// How a connection writes a response's pieces.
trait PieceWriter: Send {
    fn write_pieces(
        &mut self,
        pieces: &[Piece],
    ) -> impl std::future::Future<Output = std::io::Result<()>> + Send;
}

/// A plaintext connection: file regions go zero-copy (`sendfile`).
struct Sendfile(tokio::net::tcp::OwnedWriteHalf);

impl PieceWriter for Sendfile {
    fn write_pieces(
        &mut self,
        pieces: &[Piece],
    ) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
        write_pieces(&mut self.0, pieces)
    }
}

/// A TLS connection: the bytes must pass through the TLS session to be
/// encrypted, so file regions are read into memory first (no zero-copy;
/// kTLS, which would allow `sendfile` again, is not used).
struct Copying<W>(W);

impl<W: AsyncWrite + Unpin + Send> PieceWriter for Copying<W> {
    fn write_pieces(
        &mut self,
        pieces: &[Piece],
    ) -> impl std::future::Future<Output = std::io::Result<()>> + Send {
        write_copying(&mut self.0, pieces)
    }
}

/// How much of a response is gathered before it goes into the TLS
/// session: small pieces (headers, partition entries) share records
/// instead of one TLS record each, and a large file region is read and
/// sent in chunks rather than held whole.
const COPY_CHUNK: usize = 64 * 1024;

/// Writes `pieces` through `stream`, reading file regions with `pread`.
/// The read runs on this thread as `sendfile` does on the plaintext path:
/// fetches are served from the page cache in the common case, and a miss
/// blocks the same way either way.
async fn write_copying<W: AsyncWrite + Unpin>(
    stream: &mut W,
    pieces: &[Piece],
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf: Vec<u8> = Vec::with_capacity(COPY_CHUNK);
    for piece in pieces {
        match piece {
            Piece::Bytes(b) => {
                if buf.len() + b.len() > COPY_CHUNK && !buf.is_empty() {
                    stream.write_all(&buf).await?;
                    buf.clear();
                }
                if b.len() >= COPY_CHUNK {
                    stream.write_all(b).await?;
                } else {
                    buf.extend_from_slice(b);
                }
            }
            Piece::File(slice) => {
                let mut position = slice.position;
                let end = slice.position + slice.len;
                while position < end {
                    if buf.len() >= COPY_CHUNK {
                        stream.write_all(&buf).await?;
                        buf.clear();
                    }
                    let start = buf.len();
                    let want = (COPY_CHUNK - start).min((end - position) as usize);
                    buf.resize(start + want, 0);
                    let n = slice.file.read_at(&mut buf[start..], position)?;
                    buf.truncate(start + n);
                    if n == 0 {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "segment file shorter than the slice",
                        ));
                    }
                    position += n as u64;
                }
            }
        }
    }
    if !buf.is_empty() {
        stream.write_all(&buf).await?;
    }
    stream.flush().await
}

/// Writes buffers normally and file regions with `sendfile(2)`.
async fn write_pieces(
    stream: &mut tokio::net::tcp::OwnedWriteHalf,
    pieces: &[Piece],
) -> std::io::Result<()> {
    let corked = pieces.len() > 1;
    if corked {
        set_cork(stream.as_ref(), true);
    }
    let result = write_all_pieces(stream, pieces).await;
    if corked {
        set_cork(stream.as_ref(), false);
    }
    result
}

async fn write_all_pieces(
    stream: &mut tokio::net::tcp::OwnedWriteHalf,
    pieces: &[Piece],
) -> std::io::Result<()> {
    for piece in pieces {
        match piece {
            Piece::Bytes(b) => stream.write_all(b).await?,
            Piece::File(slice) => {
                let mut offset = slice.position as libc::off_t;
                let end = slice.position + slice.len;
                while (offset as u64) < end {
                    let count = (end - offset as u64).min(1 << 30) as usize;
                    let in_fd = slice.file.as_raw_fd();
                    let socket: &TcpStream = stream.as_ref();
                    socket.writable().await?;
                    let sent = socket.try_io(Interest::WRITABLE, || {
                        let out_fd = socket.as_raw_fd();
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
    use super::{Activity, LogRate};
    use std::time::Duration;

    #[test]
    fn a_connection_is_not_idle_while_it_handles_a_request() {
        let activity = Activity::new();
        assert!(activity.idle_for().is_some());
        let handling = activity.busy();
        assert_eq!(activity.idle_for(), None);
        std::thread::sleep(Duration::from_millis(30));
        drop(handling);
        // idle counts from the end of the request, not from the start
        let idle = activity.idle_for().expect("idle once answered");
        assert!(idle < Duration::from_millis(25), "{idle:?}");
    }

    #[test]
    fn a_throttled_connection_reads_nothing_until_its_time_is_over() {
        let activity = Activity::new();
        assert_eq!(activity.muted_for(), None);
        activity.mute_for(Duration::from_secs(60));
        let left = activity.muted_for().expect("muted");
        assert!(left > Duration::from_secs(59), "{left:?}");
        // a shorter throttle later does not shorten the mute
        activity.mute_for(Duration::from_millis(1));
        assert!(activity.muted_for().expect("still muted") > Duration::from_secs(59));
        let brief = Activity::new();
        brief.mute_for(Duration::from_millis(5));
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(brief.muted_for(), None);
    }

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
