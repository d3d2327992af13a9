//! One follower fetcher per leader broker: a task with one Kafka
//! connection to that broker's inter-broker listener (over TLS when it is
//! SSL or SASL_SSL, see [`Connection::open_as`]), sending Fetch requests with this
//! broker's replica id for every partition it follows there (the leader
//! serves them on the consumers' read path, zero-copy included), and
//! applying the answers: batches appended byte-for-byte, the leader's high
//! watermark taken, a diverged log truncated where the leader's history
//! says (`diverging_epoch`, KIP-595's in-fetch form of KIP-101/279), a log
//! behind the leader's start restarted there. A partition the leader
//! refuses (not leader, stale epoch) waits `replica.fetch.backoff.ms`
//! while the next image arrives; a broken connection is opened again.
//! Fetches go through a fetch session ([`super::session`]): after the
//! first, each names only the partitions whose fetch state moved.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::sync::watch;
use tokio::time::Instant;

use super::session::{Asked, FollowerSession, Plan};
use super::settings::FetchSettings;
use crate::partition::{FetchPosition, Partition};
use crate::security::tls::TlsState;

/// The Fetch version followers speak: the newest this broker serves, which
/// carries `last_fetched_epoch` and `diverging_epoch`.
const FETCH_VERSION: i16 = 12;
/// The largest response a follower accepts (a batch may exceed the
/// requested bytes, as KIP-74 allows).
const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// What a fetcher fetches: the leader's address and the partitions, and
/// which of them are throttled now (`(topic, partition)`: listed in
/// `follower.replication.throttled.replicas` for this broker, outside the
/// ISR).
#[derive(Debug, Clone)]
pub struct FetchSet {
    pub address: String,
    pub partitions: Vec<Arc<Partition>>,
    pub throttled: BTreeSet<(String, i32)>,
}

/// A followed partition as the fetch session's key: told apart by topic
/// name and index, as the leader's session holds it (a topic deleted and
/// created again under its name is the same entry there), compared
/// without copying the name.
#[derive(Clone)]
struct Followed(Arc<Partition>);

impl Followed {
    fn name(&self) -> (&str, i32) {
        (self.0.topic.as_str(), self.0.index)
    }
}

impl PartialEq for Followed {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Followed {}

impl std::hash::Hash for Followed {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name().hash(state)
    }
}

impl PartialOrd for Followed {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Followed {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name().cmp(&other.name())
    }
}

/// A running fetcher; dropping it stops the task.
#[derive(Debug)]
pub struct Fetcher {
    set: watch::Sender<FetchSet>,
    /// `None` once retired: the task ends by itself.
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Fetcher {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl Fetcher {
    pub fn start(
        node: i32,
        leader: i32,
        settings: FetchSettings,
        bind: Option<IpAddr>,
        tls: Option<Arc<TlsState>>,
        incarnation: Option<uuid::Uuid>,
        set: FetchSet,
    ) -> Self {
        let (tx, rx) = watch::channel(set);
        let task = tokio::spawn(run(node, leader, settings, bind, tls, incarnation, rx));
        Self {
            set: tx,
            task: Some(task),
        }
    }

    /// Replaces the partitions (and address) fetched.
    pub fn update(&self, set: FetchSet) {
        self.set.send_replace(set);
    }

    /// Stops fetching once the fetch in flight is answered (its records
    /// are not applied), closing the fetch session on the leader instead of
    /// leaving it to the leader's eviction: for a leader this broker no
    /// longer follows anything on. Dropping a fetcher stops it at once.
    pub fn retire(mut self) {
        // the task sees the channel closed when `self.set` drops
        self.task = None;
    }
}

async fn run(
    node: i32,
    leader: i32,
    settings: FetchSettings,
    bind: Option<IpAddr>,
    tls: Option<Arc<TlsState>>,
    incarnation: Option<uuid::Uuid>,
    mut set_rx: watch::Receiver<FetchSet>,
) {
    let mut session = FollowerSession::<Followed>::default();
    // until retired (the sending side dropped)
    while set_rx.has_changed().is_ok() {
        let set = set_rx.borrow_and_update().clone();
        if set.partitions.is_empty() {
            if set_rx.changed().await.is_err() {
                return;
            }
            continue;
        }
        let opened = async {
            let mut conn = Connection::open(&set.address, bind, tls.as_deref()).await?;
            if let Some(incarnation) = incarnation {
                conn.authenticate(node, incarnation).await?;
            }
            Ok::<_, std::io::Error>(conn)
        };
        let mut conn = match opened.await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(leader, address = %set.address, error = %e, "cannot reach the leader");
                tokio::time::sleep(settings.backoff).await;
                continue;
            }
        };
        tracing::info!(leader, address = %set.address, partitions = set.partitions.len(), "fetching from the leader");
        let ended = fetch_loop(node, &settings, &mut conn, set, &mut set_rx, &mut session).await;
        // a new connection starts a new session (and closes this one)
        session.abandon();
        if let Err(e) = ended {
            tracing::warn!(leader, error = %e, "replica fetch failed; connecting again");
            tokio::time::sleep(settings.backoff).await;
        }
    }
}

/// Fetches over one connection until it breaks or the leader's address
/// changes (`Ok`).
async fn fetch_loop(
    node: i32,
    settings: &FetchSettings,
    conn: &mut Connection,
    mut set: FetchSet,
    set_rx: &mut watch::Receiver<FetchSet>,
    session: &mut FollowerSession<Followed>,
) -> std::io::Result<()> {
    // refused partitions, by identity (the address of their shared state)
    let mut delayed: HashMap<usize, Instant> = HashMap::new();
    loop {
        match set_rx.has_changed() {
            // retired
            Err(_) => return close_session(node, conn, session).await,
            Ok(true) => {
                let next = set_rx.borrow_and_update().clone();
                if next.address != set.address {
                    return Ok(());
                }
                if next.partitions.is_empty() {
                    return close_session(node, conn, session).await;
                }
                set = next;
            }
            Ok(false) => {}
        }
        let now = Instant::now();
        delayed.retain(|_, until| *until > now);
        // throttled partitions sit out while the follower quota is spent
        let quota_spent =
            !set.throttled.is_empty() && settings.follower_quota.exceeded(crate::clock::now_ms());
        let wanted: Vec<(Followed, Asked)> = set
            .partitions
            .iter()
            .filter(|p| !delayed.contains_key(&(Arc::as_ptr(p) as usize)))
            .filter(|p| !(quota_spent && set.throttled.contains(&(p.topic.clone(), p.index))))
            .filter_map(|p| {
                let pos = p.fetch_position();
                (pos.leader >= 0 && !pos.leading)
                    .then(|| (Followed(p.clone()), asked(settings, &pos)))
            })
            .collect();
        if wanted.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let plan = session.plan(&wanted);
        let request = fetch_request(node, settings, &wanted, &plan);
        let wait = Duration::from_millis(settings.wait_ms.max(0) as u64) + Duration::from_secs(10);
        let response = tokio::time::timeout(wait, conn.fetch(request))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "no fetch response")
            })??;
        session.answered(response.error_code, response.session_id);
        if set_rx.has_changed().is_err() {
            // retired while the fetch was out: its partitions may have new
            // roles already
            return close_session(node, conn, session).await;
        }
        if response.error_code != 0 {
            if matches!(
                ResponseError::try_from_code(response.error_code),
                Some(
                    ResponseError::FetchSessionIdNotFound | ResponseError::InvalidFetchSessionEpoch
                )
            ) {
                // evicted or out of step: the next fetch is full
                tracing::debug!(
                    code = response.error_code,
                    "the leader refused the fetch session"
                );
                continue;
            }
            tracing::warn!(code = response.error_code, "the leader refused the fetch");
            tokio::time::sleep(settings.backoff).await;
            continue;
        }
        if !set.throttled.is_empty() {
            let bytes = throttled_bytes(&response, &set.throttled);
            settings
                .follower_quota
                .record(bytes, crate::clock::now_ms());
        }
        let refused = tokio::task::spawn_blocking(move || apply_response(&wanted, response))
            .await
            .map_err(std::io::Error::other)?;
        for p in refused {
            delayed.insert(Arc::as_ptr(&p) as usize, Instant::now() + settings.backoff);
        }
    }
}

/// Closes the fetch session on the leader, if one is open (a fetch of no
/// partitions on the session with the final epoch, KIP-227); a leader that
/// does not answer within 2 s keeps it until it evicts it.
async fn close_session(
    node: i32,
    conn: &mut Connection,
    session: &mut FollowerSession<Followed>,
) -> std::io::Result<()> {
    let id = session.id();
    session.closed();
    if id == crate::fetch_session::NO_SESSION {
        return Ok(());
    }
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(node))
        .with_max_wait_ms(0)
        .with_session_id(id)
        .with_session_epoch(crate::fetch_session::FINAL_EPOCH);
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.fetch(request)).await;
    Ok(())
}

/// What a fetch asks of a partition at `pos`.
fn asked(settings: &FetchSettings, pos: &FetchPosition) -> Asked {
    Asked {
        fetch_offset: pos.log_end,
        log_start: pos.log_start,
        leader_epoch: pos.leader_epoch,
        last_fetched_epoch: pos.last_epoch,
        max_bytes: settings.partition_max_bytes,
    }
}

/// The Fetch request of `plan`: the partitions it names, in the order
/// wanted (a topic's partitions together: the manager walks topics in
/// order), and those it forgets.
fn fetch_request(
    node: i32,
    settings: &FetchSettings,
    wanted: &[(Followed, Asked)],
    plan: &Plan<Followed>,
) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for &i in &plan.named {
        let (Followed(p), a) = &wanted[i];
        let (topic, index) = (&p.topic, p.index);
        let partition = FetchPartition::default()
            .with_partition(index)
            .with_current_leader_epoch(a.leader_epoch)
            .with_fetch_offset(a.fetch_offset)
            .with_last_fetched_epoch(a.last_fetched_epoch)
            .with_log_start_offset(a.log_start)
            .with_partition_max_bytes(a.max_bytes);
        match topics.last_mut().filter(|t| t.topic.0.as_str() == topic) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
    for Followed(p) in &plan.forgotten {
        by_topic.entry(&p.topic).or_default().push(p.index);
    }
    let forgotten: Vec<ForgottenTopic> = by_topic
        .into_iter()
        .map(|(topic, partitions)| {
            ForgottenTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(partitions)
        })
        .collect();
    FetchRequest::default()
        .with_replica_id(BrokerId(node))
        .with_max_wait_ms(settings.wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(settings.max_bytes)
        .with_isolation_level(0)
        .with_session_id(plan.session_id)
        .with_session_epoch(plan.epoch)
        .with_topics(topics)
        .with_forgotten_topics_data(forgotten)
}

/// Bytes of records a response carries for throttled partitions.
fn throttled_bytes(response: &FetchResponse, throttled: &BTreeSet<(String, i32)>) -> u64 {
    response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |d| (t.topic.0.as_str(), d)))
        .filter(|(topic, d)| throttled.contains(&(topic.to_string(), d.partition_index)))
        .map(|(_, d)| d.records.as_ref().map_or(0, |r| r.len() as u64))
        .sum()
}

/// Applies a fetch response (blocking file work: run off the runtime's
/// workers). Returns the partitions to leave alone for a backoff.
fn apply_response(wanted: &[(Followed, Asked)], response: FetchResponse) -> Vec<Arc<Partition>> {
    // this broker's own partitions: a fast hash, no need to resist floods
    let by_name: HashMap<(&str, i32), &(Followed, Asked), foldhash::fast::RandomState> =
        wanted.iter().map(|w| (w.0.name(), w)).collect();
    let mut refused = Vec::new();
    for t in &response.responses {
        for d in &t.partitions {
            let Some((Followed(p), asked)) = by_name.get(&(t.topic.0.as_str(), d.partition_index))
            else {
                continue;
            };
            if let Err(e) = apply_partition(p, asked, d) {
                tracing::debug!(topic = %p.topic, partition = p.index, error = %e, "replica fetch of a partition refused");
                refused.push(p.clone());
            }
        }
    }
    refused
}

/// Applies one partition's answer to the fetch that `asked` of it.
fn apply_partition(
    p: &Partition,
    asked: &Asked,
    d: &PartitionData,
) -> Result<(), crate::error::TopicError> {
    use crate::error::TopicError;
    let code = ResponseError::try_from_code(d.error_code);
    match code {
        None => {
            let diverged = d.diverging_epoch.epoch >= 0 || d.diverging_epoch.end_offset >= 0;
            if diverged {
                return p.truncate_diverged(d.diverging_epoch.epoch, d.diverging_epoch.end_offset);
            }
            let records = d.records.as_deref().unwrap_or(&[]);
            p.append_from_leader(
                records,
                asked.leader_epoch,
                d.high_watermark,
                d.log_start_offset,
            )
        }
        Some(ResponseError::OffsetOutOfRange) => {
            // Behind the leader's start: start over there. Ahead of the
            // leader's end (it lost records it never committed): back to
            // its high watermark, which every in-sync replica has.
            let to = if asked.fetch_offset < d.log_start_offset {
                d.log_start_offset
            } else {
                d.high_watermark.max(0)
            };
            p.truncate_to(to)
        }
        Some(code) => Err(TopicError::new(code, "refused by the leader")),
    }
}

/// A byte stream to another broker: plain TCP, or TLS over it.
trait BrokerStream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> BrokerStream for S {}

/// One Kafka connection to another broker, as this broker: the
/// followers' fetches and the transaction coordinator's markers
/// ([`super::markers`]) go over it.
pub struct Connection {
    stream: Box<dyn BrokerStream>,
    correlation_id: i32,
    client_id: StrBytes,
}

impl Connection {
    async fn open(
        address: &str,
        bind: Option<IpAddr>,
        tls: Option<&TlsState>,
    ) -> std::io::Result<Self> {
        Self::open_as(address, bind, tls, "moldau-replica-fetcher").await
    }

    /// A connection to `address` leaving from `bind` (if given), whose
    /// requests carry `client_id`; over TLS when the listener is a TLS
    /// one (`tls`), verifying the other broker with the listener's
    /// truststore and showing this broker's certificate.
    pub async fn open_as(
        address: &str,
        bind: Option<IpAddr>,
        tls: Option<&TlsState>,
        client_id: &'static str,
    ) -> std::io::Result<Self> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(address).await?.collect();
        let target = bind
            .and_then(|ip| addrs.iter().find(|a| a.is_ipv4() == ip.is_ipv4()))
            .or_else(|| addrs.first())
            .copied()
            .ok_or_else(|| std::io::Error::other(format!("{address} resolves to nothing")))?;
        let socket = if target.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(ip) = bind.filter(|ip| ip.is_ipv4() == target.is_ipv4()) {
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        let stream = tokio::time::timeout(Duration::from_secs(5), socket.connect(target))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        stream.set_nodelay(true)?;
        let stream: Box<dyn BrokerStream> = match tls {
            None => Box::new(stream),
            Some(tls) => {
                let config = tls.client_config().ok_or_else(|| {
                    std::io::Error::other(format!(
                        "cannot verify the TLS listener of {address}: no ssl.truststore is configured"
                    ))
                })?;
                let host = address
                    .rsplit_once(':')
                    .map_or(address, |(host, _)| host)
                    .trim_matches(['[', ']']);
                let name = ServerName::try_from(host.to_string()).map_err(|e| {
                    std::io::Error::other(format!("{host} is not a TLS server name: {e}"))
                })?;
                let connector = tokio_rustls::TlsConnector::from(config);
                // fetch responses are large: rustls reads 4 KiB at a time,
                // from this buffer rather than the socket
                let stream = tokio::io::BufReader::with_capacity(
                    crate::protocol::connection::TLS_READ_BUFFER_BYTES,
                    stream,
                );
                let stream =
                    tokio::time::timeout(Duration::from_secs(5), connector.connect(name, stream))
                        .await
                        .map_err(|_| {
                            std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                "TLS handshake timed out",
                            )
                        })??;
                Box::new(stream)
            }
        };
        Ok(Self {
            stream,
            correlation_id: 0,
            client_id: StrBytes::from_static_str(client_id),
        })
    }

    /// Proves this is broker `node` registered as `incarnation` (SASL
    /// `MOLDAU-BROKER`), so the leader honours its replica id.
    pub async fn authenticate(
        &mut self,
        node: i32,
        incarnation: uuid::Uuid,
    ) -> std::io::Result<()> {
        use crate::handlers::sasl;
        let shake: SaslHandshakeResponse = self
            .call(
                ApiKey::SaslHandshake,
                1,
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_static_str(sasl::MECHANISM)),
            )
            .await?;
        if shake.error_code != 0 {
            return Err(std::io::Error::other(format!(
                "the leader refused the SASL handshake (error {})",
                shake.error_code
            )));
        }
        let auth: SaslAuthenticateResponse = self
            .call(
                ApiKey::SaslAuthenticate,
                2,
                &SaslAuthenticateRequest::default()
                    .with_auth_bytes(Bytes::from(sasl::token(node, incarnation))),
            )
            .await?;
        if auth.error_code != 0 {
            return Err(std::io::Error::other(format!(
                "the leader refused this broker's authentication (error {}): {}",
                auth.error_code,
                auth.error_message.as_deref().unwrap_or("")
            )));
        }
        Ok(())
    }

    async fn fetch(&mut self, request: FetchRequest) -> std::io::Result<FetchResponse> {
        self.call(ApiKey::Fetch, FETCH_VERSION, &request).await
    }

    /// Sends one request and reads its response.
    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> std::io::Result<Resp> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::with_capacity(256);
        buf.put_i32(0);
        header
            .encode(&mut buf, api.request_header_version(version))
            .map_err(std::io::Error::other)?;
        request
            .encode(&mut buf, version)
            .map_err(std::io::Error::other)?;
        let size = i32::try_from(buf.len() - 4).map_err(std::io::Error::other)?;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&buf).await?;
        // a TLS session holds written bytes until flushed
        self.stream.flush().await?;
        let size = self.stream.read_i32().await?;
        let size = usize::try_from(size)
            .ok()
            .filter(|s| *s <= MAX_RESPONSE_BYTES)
            .ok_or_else(|| std::io::Error::other(format!("bad response size {size}")))?;
        let mut body = vec![0u8; size];
        self.stream.read_exact(&mut body).await?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, api.response_header_version(version))
            .map_err(std::io::Error::other)?;
        if header.correlation_id != self.correlation_id {
            return Err(std::io::Error::other("response to another request"));
        }
        Resp::decode(&mut body, version).map_err(std::io::Error::other)
    }
}
