//! One follower fetcher per leader broker: a task with one Kafka
//! connection to that broker's listener, sending Fetch requests with this
//! broker's replica id for every partition it follows there (the leader
//! serves them on the consumers' read path, zero-copy included), and
//! applying the answers: batches appended byte-for-byte, the leader's high
//! watermark taken, a diverged log truncated where the leader's history
//! says (`diverging_epoch`, KIP-595's in-fetch form of KIP-101/279), a log
//! behind the leader's start restarted there. A partition the leader
//! refuses (not leader, stale epoch) waits `replica.fetch.backoff.ms`
//! while the next image arrives; a broken connection is opened again.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use super::manager::FetchSettings;
use crate::partition::{FetchPosition, Partition};

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

/// A running fetcher; dropping it stops the task.
#[derive(Debug)]
pub struct Fetcher {
    set: watch::Sender<FetchSet>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fetcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fetcher {
    pub fn start(
        node: i32,
        leader: i32,
        settings: FetchSettings,
        bind: Option<IpAddr>,
        incarnation: Option<uuid::Uuid>,
        set: FetchSet,
    ) -> Self {
        let (tx, rx) = watch::channel(set);
        let task = tokio::spawn(run(node, leader, settings, bind, incarnation, rx));
        Self { set: tx, task }
    }

    /// Replaces the partitions (and address) fetched.
    pub fn update(&self, set: FetchSet) {
        self.set.send_replace(set);
    }
}

async fn run(
    node: i32,
    leader: i32,
    settings: FetchSettings,
    bind: Option<IpAddr>,
    incarnation: Option<uuid::Uuid>,
    mut set_rx: watch::Receiver<FetchSet>,
) {
    loop {
        let set = set_rx.borrow_and_update().clone();
        if set.partitions.is_empty() {
            if set_rx.changed().await.is_err() {
                return;
            }
            continue;
        }
        let opened = async {
            let mut conn = Connection::open(&set.address, bind).await?;
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
        if let Err(e) = fetch_loop(node, &settings, &mut conn, set, &mut set_rx).await {
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
) -> std::io::Result<()> {
    // refused partitions, by identity (the address of their shared state)
    let mut delayed: HashMap<usize, Instant> = HashMap::new();
    loop {
        if set_rx.has_changed().unwrap_or(false) {
            let next = set_rx.borrow_and_update().clone();
            if next.address != set.address || next.partitions.is_empty() {
                return Ok(());
            }
            set = next;
        }
        let now = Instant::now();
        delayed.retain(|_, until| *until > now);
        // throttled partitions sit out while the follower quota is spent
        let quota_spent =
            !set.throttled.is_empty() && settings.follower_quota.exceeded(crate::topics::now_ms());
        let wanted: Vec<(Arc<Partition>, FetchPosition)> = set
            .partitions
            .iter()
            .filter(|p| !delayed.contains_key(&(Arc::as_ptr(p) as usize)))
            .filter(|p| !(quota_spent && set.throttled.contains(&(p.topic.clone(), p.index))))
            .map(|p| (p.clone(), p.fetch_position()))
            .filter(|(_, pos)| pos.leader >= 0 && !pos.leading)
            .collect();
        if wanted.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let request = fetch_request(node, settings, &wanted);
        let wait = Duration::from_millis(settings.wait_ms.max(0) as u64) + Duration::from_secs(10);
        let response = tokio::time::timeout(wait, conn.fetch(request))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "no fetch response")
            })??;
        if response.error_code != 0 {
            tracing::warn!(code = response.error_code, "the leader refused the fetch");
            tokio::time::sleep(settings.backoff).await;
            continue;
        }
        if !set.throttled.is_empty() {
            let bytes = throttled_bytes(&response, &set.throttled);
            settings
                .follower_quota
                .record(bytes, crate::topics::now_ms());
        }
        let refused = tokio::task::spawn_blocking(move || apply_response(&wanted, response))
            .await
            .map_err(std::io::Error::other)?;
        for p in refused {
            delayed.insert(Arc::as_ptr(&p) as usize, Instant::now() + settings.backoff);
        }
    }
}

fn fetch_request(
    node: i32,
    settings: &FetchSettings,
    wanted: &[(Arc<Partition>, FetchPosition)],
) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for (p, pos) in wanted {
        let partition = FetchPartition::default()
            .with_partition(p.index)
            .with_current_leader_epoch(pos.leader_epoch)
            .with_fetch_offset(pos.log_end)
            .with_last_fetched_epoch(pos.last_epoch)
            .with_log_start_offset(pos.log_start)
            .with_partition_max_bytes(settings.partition_max_bytes);
        // the set lists a topic's partitions together (the manager walks
        // topics in order)
        match topics.last_mut().filter(|t| t.topic.0.as_str() == p.topic) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(p.topic.clone())))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    FetchRequest::default()
        .with_replica_id(BrokerId(node))
        .with_max_wait_ms(settings.wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(settings.max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(topics)
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
fn apply_response(
    wanted: &[(Arc<Partition>, FetchPosition)],
    response: FetchResponse,
) -> Vec<Arc<Partition>> {
    let by_name: HashMap<(&str, i32), &(Arc<Partition>, FetchPosition)> = wanted
        .iter()
        .map(|w| ((w.0.topic.as_str(), w.0.index), w))
        .collect();
    let mut refused = Vec::new();
    for t in &response.responses {
        for d in &t.partitions {
            let Some((p, pos)) = by_name.get(&(t.topic.0.as_str(), d.partition_index)) else {
                continue;
            };
            if let Err(e) = apply_partition(p, pos, d) {
                tracing::debug!(topic = %p.topic, partition = p.index, error = %e, "replica fetch of a partition refused");
                refused.push(p.clone());
            }
        }
    }
    refused
}

fn apply_partition(
    p: &Partition,
    pos: &FetchPosition,
    d: &PartitionData,
) -> Result<(), crate::topics::TopicError> {
    use crate::topics::TopicError;
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
                pos.leader_epoch,
                d.high_watermark,
                d.log_start_offset,
            )
        }
        Some(ResponseError::OffsetOutOfRange) => {
            // Behind the leader's start: start over there. Ahead of the
            // leader's end (it lost records it never committed): back to
            // its high watermark, which every in-sync replica has.
            let to = if pos.log_end < d.log_start_offset {
                d.log_start_offset
            } else {
                d.high_watermark.max(0)
            };
            p.truncate_to(to)
        }
        Some(code) => Err(TopicError::new(code, "refused by the leader")),
    }
}

/// One Kafka connection to a leader.
struct Connection {
    stream: TcpStream,
    correlation_id: i32,
    client_id: StrBytes,
}

impl Connection {
    async fn open(address: &str, bind: Option<IpAddr>) -> std::io::Result<Self> {
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
        Ok(Self {
            stream,
            correlation_id: 0,
            client_id: StrBytes::from_static_str("moldau-replica-fetcher"),
        })
    }

    /// Proves this is broker `node` registered as `incarnation` (SASL
    /// `MOLDAU-BROKER`), so the leader honours its replica id.
    async fn authenticate(&mut self, node: i32, incarnation: uuid::Uuid) -> std::io::Result<()> {
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
    async fn call<Req: Encodable, Resp: Decodable>(
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
