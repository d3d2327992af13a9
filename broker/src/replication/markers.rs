//! The transaction coordinator's channel to partition leaders (Kafka's
//! `TransactionMarkerChannelManager`): a prepared transaction's markers
//! go out as WriteTxnMarkers (API 27, v1) to the leader of each of its
//! partitions, one request per leader, over the same kind of connection
//! the follower fetchers use ([`super::fetcher::Connection`]: leaving from
//! the listener's address, authenticated as this broker in cluster mode).
//!
//! A partition is done when its leader answers NONE for it, or when the
//! image no longer has it (its topic was deleted: nothing left to mark).
//! Everything else (no leader, a broken connection, NOT_LEADER_OR_FOLLOWER,
//! a timeout, …) leaves it for the coordinator's next try, so markers are
//! retried until acknowledged or the partition is gone. A refusal that no
//! retry can fix (a newer coordinator's epoch, a fenced producer epoch) is
//! logged; the partition stays owed, as a deposed coordinator's shard is
//! dropped at its next metadata image anyway.
//!
//! The same connections carry the other inter-broker call of
//! transactions: a partition leader's question to a transaction
//! coordinator whether a partition is in a transaction
//! (its `VerifyChannel` side; KIP-890's verification, which the group
//! coordinator asks before it takes a transactional offset commit).
//!
//! Owns its connections (one per broker, opened on demand, dropped on any
//! error); knows nothing of the coordinator's state. Calls block: the
//! coordinator runs them on the blocking pool.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ProducerId, TopicName,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use parking_lot::Mutex;

use super::fetcher::Connection;
use crate::image::MetadataImage;
use crate::security::tls::TlsState;
use crate::txn::marker::TxnResult;
use crate::txn::state::MarkerPlan;
use crate::txn::vocab::TopicPartition;
use crate::txn_coordinator::{MarkerSender, VerifyChannel};

/// The WriteTxnMarkers version sent for a transaction of version 2
/// (KIP-1228: the marker carries its transaction version, so the leader
/// holds it to the strict epoch rule).
pub const WRITE_TXN_MARKERS_VERSION: i16 = 2;
/// The version sent for older transactions: v1, which every Kafka 4 broker
/// and every earlier Moldau speaks, so a cluster that has not turned
/// transaction version 2 on can be upgraded one broker at a time.
pub const WRITE_TXN_MARKERS_LEGACY_VERSION: i16 = 1;

/// The WriteTxnMarkers version that carries `plan`'s markers.
pub fn write_txn_markers_version(plan: &MarkerPlan) -> i16 {
    if plan.transaction_version.supports_epoch_bump() {
        WRITE_TXN_MARKERS_VERSION
    } else {
        WRITE_TXN_MARKERS_LEGACY_VERSION
    }
}
/// The AddPartitionsToTxn version of a verification (the first with
/// verify-only transactions is 4; Kafka 4 brokers send 5).
pub const VERIFY_PARTITIONS_VERSION: i16 = 5;
/// How long one leader gets to answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a partition's marker goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The partition is gone: its marker is done.
    Gone,
    /// No leader now: try again later.
    NoLeader,
    /// To this broker (node id, `host:port`).
    Leader(i32, String),
}

/// A plan's partitions by destination: the ones gone, and per leader
/// (node id, address) the ones to send there.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Routed {
    pub gone: Vec<TopicPartition>,
    pub waiting: Vec<TopicPartition>,
    pub by_leader: BTreeMap<(i32, String), Vec<TopicPartition>>,
}

/// Splits `partitions` by where their markers go.
pub fn route(partitions: &[TopicPartition], lookup: impl Fn(&TopicPartition) -> Route) -> Routed {
    let mut routed = Routed::default();
    for tp in partitions {
        match lookup(tp) {
            Route::Gone => routed.gone.push(tp.clone()),
            Route::NoLeader => routed.waiting.push(tp.clone()),
            Route::Leader(node, address) => routed
                .by_leader
                .entry((node, address))
                .or_default()
                .push(tp.clone()),
        }
    }
    routed
}

/// Where `tp`'s marker goes in `image`.
pub fn route_in(image: &MetadataImage, tp: &TopicPartition) -> Route {
    let Some(p) = image.partition(&tp.topic, tp.partition) else {
        return Route::Gone;
    };
    match image.broker(p.leader) {
        Some(b) if p.leader >= 0 => Route::Leader(p.leader, format!("{}:{}", b.host, b.port)),
        _ => Route::NoLeader,
    }
}

/// The request that writes `plan`'s markers on `partitions`.
pub fn request(
    plan: &MarkerPlan,
    coordinator_epoch: i32,
    partitions: &[TopicPartition],
) -> WriteTxnMarkersRequest {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        topics.entry(&tp.topic).or_default().push(tp.partition);
    }
    let marker = WritableTxnMarker::default()
        .with_producer_id(ProducerId(plan.producer_id))
        .with_producer_epoch(plan.producer_epoch)
        .with_transaction_result(plan.result == TxnResult::Commit)
        .with_coordinator_epoch(coordinator_epoch)
        .with_transaction_version(
            i8::try_from(plan.transaction_version.feature_level()).unwrap_or(i8::MAX),
        )
        .with_topics(
            topics
                .into_iter()
                .map(|(name, partitions)| {
                    WritableTxnMarkerTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name.to_string())))
                        .with_partition_indexes(partitions)
                })
                .collect(),
        );
    WriteTxnMarkersRequest::default().with_markers(vec![marker])
}

/// The partitions a response acknowledges for `producer_id`, and the
/// refusals (partition, error) among the rest.
pub fn acknowledged(
    response: &WriteTxnMarkersResponse,
    producer_id: i64,
) -> (Vec<TopicPartition>, Vec<(TopicPartition, ResponseError)>) {
    let mut done = Vec::new();
    let mut refused = Vec::new();
    for marker in response
        .markers
        .iter()
        .filter(|m| m.producer_id.0 == producer_id)
    {
        for topic in &marker.topics {
            for p in &topic.partitions {
                let tp = TopicPartition::new(topic.name.0.as_str(), p.partition_index);
                match ResponseError::try_from_code(p.error_code) {
                    None => done.push(tp),
                    Some(e) => refused.push((tp, e)),
                }
            }
        }
    }
    (done, refused)
}

/// This broker's identity on its connections: the address they leave
/// from, and (cluster mode) the incarnation it authenticates with.
pub type Identity = Arc<dyn Fn() -> (Option<IpAddr>, Option<uuid::Uuid>) + Send + Sync>;
/// The TLS connections to other brokers use (a TLS inter-broker
/// listener), if any.
pub type TlsSource = Arc<dyn Fn() -> Option<Arc<TlsState>> + Send + Sync>;
/// The current metadata image.
pub type ImageSource = Arc<dyn Fn() -> Arc<MetadataImage> + Send + Sync>;

/// Answers a WriteTxnMarkers request in this process (the partitions
/// this broker leads): the handler's work, without a connection.
pub type LocalWriter = Arc<dyn Fn(WriteTxnMarkersRequest) -> WriteTxnMarkersResponse + Send + Sync>;

/// The channel: a connection per leader, and where to look leaders up.
/// Markers for partitions this broker leads are written in process
/// (`local`): a standalone broker has no broker identity to authenticate
/// its own connections with, and in a cluster it saves the round trip.
pub struct MarkerChannel {
    node: i32,
    runtime: tokio::runtime::Handle,
    image: ImageSource,
    identity: Identity,
    tls: TlsSource,
    local: LocalWriter,
    connections: Mutex<HashMap<(i32, String), Connection>>,
}

impl std::fmt::Debug for MarkerChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MarkerChannel")
            .field("node", &self.node)
            .finish()
    }
}

impl MarkerChannel {
    pub fn new(
        node: i32,
        runtime: tokio::runtime::Handle,
        image: ImageSource,
        identity: Identity,
        tls: TlsSource,
        local: LocalWriter,
    ) -> Self {
        Self {
            node,
            runtime,
            image,
            identity,
            tls,
            local,
            connections: Mutex::new(HashMap::new()),
        }
    }

    /// Sends one WriteTxnMarkers request to a leader, at `version`.
    fn send(
        &self,
        leader: &(i32, String),
        request: WriteTxnMarkersRequest,
        version: i16,
    ) -> std::io::Result<WriteTxnMarkersResponse> {
        self.call(leader, ApiKey::WriteTxnMarkers, version, request)
    }

    /// Sends one request to a broker (a pooled connection or a new one);
    /// a failed connection is dropped.
    fn call<Req: Encodable + Send + 'static, Resp: Decodable + Send + 'static>(
        &self,
        leader: &(i32, String),
        api: ApiKey,
        version: i16,
        request: Req,
    ) -> std::io::Result<Resp> {
        let pooled = self.connections.lock().remove(leader);
        let (bind, incarnation) = (self.identity)();
        let tls = (self.tls)();
        let node = self.node;
        let address = leader.1.clone();
        let exchange = async move {
            let mut conn = match pooled {
                Some(c) => c,
                None => {
                    let mut c = Connection::open_as(
                        &address,
                        bind,
                        tls.as_deref(),
                        "moldau-txn-coordinator",
                    )
                    .await?;
                    if let Some(incarnation) = incarnation {
                        c.authenticate(node, incarnation).await?;
                    }
                    c
                }
            };
            let response: Resp = conn.call(api, version, &request).await?;
            Ok::<_, std::io::Error>((conn, response))
        };
        let (conn, response) = self.runtime.block_on(async {
            tokio::time::timeout(CALL_TIMEOUT, exchange)
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time")
                })?
        })?;
        self.connections.lock().insert(leader.clone(), conn);
        Ok(response)
    }
}

/// A partition leader's question to a transaction coordinator (KIP-890),
/// as AddPartitionsToTxn v5 with verify-only transactions.
impl VerifyChannel for MarkerChannel {
    fn verify(
        &self,
        coordinator: &(i32, String),
        request: AddPartitionsToTxnRequest,
    ) -> std::io::Result<AddPartitionsToTxnResponse> {
        self.call(
            coordinator,
            ApiKey::AddPartitionsToTxn,
            VERIFY_PARTITIONS_VERSION,
            request,
        )
    }
}

impl MarkerSender for MarkerChannel {
    fn write_markers(
        &self,
        transactional_id: &str,
        coordinator_epoch: i32,
        plan: &MarkerPlan,
    ) -> Vec<TopicPartition> {
        let image = (self.image)();
        let routed = route(&plan.partitions, |tp| route_in(&image, tp));
        let mut done = routed.gone;
        if !routed.waiting.is_empty() {
            tracing::debug!(
                transactional_id,
                partitions = routed.waiting.len(),
                "markers wait for partition leaders"
            );
        }
        for (leader, partitions) in routed.by_leader {
            let req = request(plan, coordinator_epoch, &partitions);
            let answer = if leader.0 == self.node {
                Ok((self.local)(req))
            } else {
                self.send(&leader, req, write_txn_markers_version(plan))
            };
            match answer {
                Ok(response) => {
                    let (acked, refused) = acknowledged(&response, plan.producer_id);
                    done.extend(acked);
                    for (tp, error) in refused {
                        tracing::warn!(transactional_id, partition = %tp, leader = leader.0, error = ?error, "a leader refused a transaction marker; retried");
                    }
                }
                Err(e) => {
                    tracing::warn!(transactional_id, leader = leader.0, address = %leader.1, error = %e, "sending transaction markers failed; retried");
                }
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::write_txn_markers_response::{
        WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::*;
    use crate::txn::vocab::TransactionVersion;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    fn plan(partitions: Vec<TopicPartition>) -> MarkerPlan {
        MarkerPlan {
            result: TxnResult::Commit,
            producer_id: 42,
            producer_epoch: 3,
            transaction_version: TransactionVersion::V0,
            partitions,
        }
    }

    #[test]
    fn partitions_are_grouped_by_leader_and_gone_ones_are_done() {
        let parts = vec![
            tp("a", 0),
            tp("a", 1),
            tp("b", 0),
            tp("gone", 0),
            tp("c", 0),
        ];
        let routed = route(&parts, |tp| match (tp.topic.as_str(), tp.partition) {
            ("gone", _) => Route::Gone,
            ("c", _) => Route::NoLeader,
            ("a", 1) => Route::Leader(2, "h2:9092".into()),
            _ => Route::Leader(1, "h1:9092".into()),
        });
        assert_eq!(routed.gone, vec![tp("gone", 0)]);
        assert_eq!(routed.waiting, vec![tp("c", 0)]);
        assert_eq!(
            routed.by_leader[&(1, "h1:9092".to_string())],
            vec![tp("a", 0), tp("b", 0)]
        );
        assert_eq!(
            routed.by_leader[&(2, "h2:9092".to_string())],
            vec![tp("a", 1)]
        );
    }

    #[test]
    fn the_request_carries_the_plan_and_the_coordinator_epoch() {
        let p = plan(vec![tp("a", 0), tp("a", 2), tp("b", 1)]);
        let req = request(&p, 7, &p.partitions);
        let mut buf = bytes::BytesMut::new();
        req.encode(&mut buf, WRITE_TXN_MARKERS_VERSION).unwrap();
        let back =
            WriteTxnMarkersRequest::decode(&mut buf.freeze(), WRITE_TXN_MARKERS_VERSION).unwrap();
        assert_eq!(back.markers.len(), 1);
        let m = &back.markers[0];
        assert_eq!(m.producer_id.0, 42);
        assert_eq!(m.producer_epoch, 3);
        assert!(m.transaction_result, "commit");
        assert_eq!(m.coordinator_epoch, 7);
        assert_eq!(m.topics.len(), 2);
        assert_eq!(m.topics[0].name.0.as_str(), "a");
        assert_eq!(m.topics[0].partition_indexes, vec![0, 2]);
        let abort = MarkerPlan {
            result: TxnResult::Abort,
            ..p
        };
        assert!(!request(&abort, 7, &abort.partitions).markers[0].transaction_result);
    }

    #[test]
    fn a_version_2_transaction_s_markers_say_so_and_older_ones_stay_v1() {
        let old = plan(vec![tp("a", 0)]);
        let v2 = MarkerPlan {
            transaction_version: TransactionVersion::V2,
            ..old.clone()
        };
        assert_eq!(
            write_txn_markers_version(&old),
            WRITE_TXN_MARKERS_LEGACY_VERSION
        );
        assert_eq!(write_txn_markers_version(&v2), 2);
        let mut buf = bytes::BytesMut::new();
        request(&v2, 7, &v2.partitions).encode(&mut buf, 2).unwrap();
        let back = WriteTxnMarkersRequest::decode(&mut buf.freeze(), 2).unwrap();
        assert_eq!(back.markers[0].transaction_version, 2);
        // below v2 the field is not on the wire and reads as 0
        let mut buf = bytes::BytesMut::new();
        request(&v2, 7, &v2.partitions).encode(&mut buf, 1).unwrap();
        let back = WriteTxnMarkersRequest::decode(&mut buf.freeze(), 1).unwrap();
        assert_eq!(back.markers[0].transaction_version, 0);
    }

    #[test]
    fn only_partitions_answered_none_are_acknowledged() {
        let partition = |i, code| {
            WritableTxnMarkerPartitionResult::default()
                .with_partition_index(i)
                .with_error_code(code)
        };
        let response = WriteTxnMarkersResponse::default().with_markers(vec![
            WritableTxnMarkerResult::default()
                .with_producer_id(ProducerId(42))
                .with_topics(vec![WritableTxnMarkerTopicResult::default()
                    .with_name(TopicName(StrBytes::from_static_str("a")))
                    .with_partitions(vec![
                        partition(0, 0),
                        partition(1, ResponseError::NotLeaderOrFollower.code()),
                    ])]),
            WritableTxnMarkerResult::default()
                .with_producer_id(ProducerId(99))
                .with_topics(vec![WritableTxnMarkerTopicResult::default()
                    .with_name(TopicName(StrBytes::from_static_str("x")))
                    .with_partitions(vec![partition(0, 0)])]),
        ]);
        let (done, refused) = acknowledged(&response, 42);
        assert_eq!(done, vec![tp("a", 0)]);
        assert_eq!(
            refused,
            vec![(tp("a", 1), ResponseError::NotLeaderOrFollower)]
        );
    }
}
