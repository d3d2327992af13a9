//! DescribeQuorum (KIP-595/KIP-853, `kafka-metadata-quorum describe`):
//! Moldau has no Raft quorum, so this answers with the truthful view of
//! what stands in its place.
//!
//! - Cluster mode: the controller is the broker holding the controller
//!   Lease (or the `dir` election), and this broker asks it (gRPC
//!   `DescribeQuorum`, as a Kafka broker forwards the request to its
//!   controller): the leader is the controller's node id, the leader epoch
//!   its controller epoch, the high watermark the metadata offset of its
//!   term; the only voter is the controller; the observers are the other
//!   registered brokers, each with the metadata offset its last heartbeat
//!   reported applied, the time of that heartbeat (LastFetchTimestamp) and
//!   of the last one at which it had all the metadata
//!   (LastCaughtUpTimestamp), -1 when the controller has not heard it in
//!   this term. When the controller cannot be asked, the answer is this
//!   broker's own view (the controller it follows, the epoch and offset it
//!   has applied, the brokers of its image with -1 where it cannot know).
//! - Standalone mode: the broker is its own controller: leader and only
//!   voter, epoch 1, the high watermark the number of metadata images it
//!   has published since it started.
//!
//! Metadata offsets restart with every controller term (they compare only
//! with their epoch), as a KRaft log's do not. The request must name
//! Kafka's `__cluster_metadata` partition 0 (else
//! UNKNOWN_TOPIC_OR_PARTITION, as Kafka). It changes nothing.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};
use kafka_protocol::protocol::StrBytes;

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::security::acl::AclOperation;

/// Kafka's metadata log partition, the one DescribeQuorum asks about.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

/// One broker as the quorum view knows it; times in ms since the epoch,
/// -1 when unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub node_id: i32,
    pub log_end_offset: i64,
    pub last_fetch_ms: i64,
    pub last_caught_up_ms: i64,
}

/// What DescribeQuorum reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumView {
    /// The controller's node id (-1: none known).
    pub leader_id: i32,
    pub leader_epoch: i64,
    pub high_watermark: i64,
    /// The answering clock's time, for the leader's own timestamps.
    pub now_ms: i64,
    /// Every registered broker, the controller included.
    pub members: Vec<Member>,
    /// The controller's listeners (name, host, port): every endpoint it
    /// advertises; empty when it is not known.
    pub leader_listeners: Vec<(String, String, u16)>,
}

/// Whether the request asks about `__cluster_metadata` partition 0 only
/// (Kafka's `hasValidTopicPartition`).
pub fn asks_for_metadata_partition(request: &DescribeQuorumRequest) -> bool {
    matches!(request.topics.as_slice(), [t]
        if t.topic_name.as_str() == METADATA_TOPIC
            && matches!(t.partitions.as_slice(), [p] if p.partition_index == 0))
}

/// The response to `request` (of `version`) from `view`.
pub fn response(
    view: &QuorumView,
    request: &DescribeQuorumRequest,
    version: i16,
) -> DescribeQuorumResponse {
    if !asks_for_metadata_partition(request) {
        // Kafka's getPartitionLevelErrorResponse: every asked partition
        // with the error
        let code = ResponseError::UnknownTopicOrPartition.code();
        let topics = request
            .topics
            .iter()
            .map(|t| {
                TopicData::default()
                    .with_topic_name(t.topic_name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                PartitionData::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect();
        return DescribeQuorumResponse::default().with_topics(topics);
    }
    let state = |m: &Member| {
        ReplicaState::default()
            .with_replica_id(BrokerId(m.node_id))
            .with_log_end_offset(m.log_end_offset)
            .with_last_fetch_timestamp(m.last_fetch_ms)
            .with_last_caught_up_timestamp(m.last_caught_up_ms)
    };
    let leader = Member {
        node_id: view.leader_id,
        // the leader has all it wrote, now
        log_end_offset: view.high_watermark,
        last_fetch_ms: view.now_ms,
        last_caught_up_ms: view.now_ms,
    };
    let voters: Vec<ReplicaState> = if view.leader_id >= 0 {
        vec![state(&leader)]
    } else {
        vec![]
    };
    let mut observers: Vec<&Member> = view
        .members
        .iter()
        .filter(|m| m.node_id != view.leader_id)
        .collect();
    observers.sort_by_key(|m| m.node_id);
    let partition = PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(BrokerId(view.leader_id))
        .with_leader_epoch(i32::try_from(view.leader_epoch).unwrap_or(i32::MAX))
        .with_high_watermark(view.high_watermark)
        .with_current_voters(voters)
        .with_observers(observers.into_iter().map(state).collect());
    // Nodes came with v2 (KIP-853): an older response cannot carry them
    let nodes = (view.leader_id >= 0 && version >= 2)
        .then(|| {
            let listeners = view
                .leader_listeners
                .iter()
                .map(|(name, host, port)| {
                    Listener::default()
                        .with_name(str_bytes(name))
                        .with_host(str_bytes(host))
                        .with_port(*port)
                })
                .collect();
            Node::default()
                .with_node_id(BrokerId(view.leader_id))
                .with_listeners(listeners)
        })
        .into_iter()
        .collect();
    DescribeQuorumResponse::default()
        .with_topics(vec![TopicData::default()
            .with_topic_name(kafka_protocol::messages::TopicName(
                StrBytes::from_static_str(METADATA_TOPIC),
            ))
            .with_partitions(vec![partition])])
        .with_nodes(nodes)
}

/// The view this broker can give now (cluster mode: asks the controller,
/// blocking; call it off the runtime).
pub fn view(broker: &Broker) -> QuorumView {
    let image = broker.image();
    let now_ms = crate::clock::now_ms();
    let listeners_of = |id: i32| {
        image
            .brokers
            .iter()
            .find(|b| b.id == id)
            .map(|b| {
                let port = |p: i32| u16::try_from(p).unwrap_or(0);
                if b.endpoints.is_empty() {
                    // registered by an older broker: its one address,
                    // named as this broker names its inter-broker listener
                    let name = &broker.topics.static_broker_config().listeners.inter_broker;
                    return vec![(name.clone(), b.host.clone(), port(b.port))];
                }
                b.endpoints
                    .iter()
                    .map(|e| (e.name.clone(), e.host.clone(), port(e.port)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let Some(link) = broker.controller_link() else {
        // standalone: this broker is its own controller
        return QuorumView {
            leader_id: broker.node_id,
            leader_epoch: 1,
            high_watermark: broker.images_published(),
            now_ms,
            members: vec![],
            leader_listeners: listeners_of(broker.node_id),
        };
    };
    match link.describe_quorum() {
        Ok(r) => QuorumView {
            leader_id: r.controller_id,
            leader_epoch: r.controller_epoch,
            high_watermark: r.metadata_offset,
            now_ms: r.now_ms,
            members: r
                .members
                .iter()
                .map(|m| Member {
                    node_id: m.node_id,
                    log_end_offset: m.metadata_offset,
                    last_fetch_ms: m.last_heartbeat_ms,
                    last_caught_up_ms: m.last_caught_up_ms,
                })
                .collect(),
            leader_listeners: listeners_of(r.controller_id),
        },
        Err(e) => {
            tracing::debug!(error = %e.message, "DescribeQuorum from this broker's own view");
            let (epoch, offset) = link.applied();
            QuorumView {
                leader_id: image.controller_id,
                leader_epoch: epoch,
                high_watermark: offset,
                now_ms,
                members: image
                    .brokers
                    .iter()
                    .map(|b| Member {
                        node_id: b.id,
                        log_end_offset: if b.id == broker.node_id { offset } else { -1 },
                        last_fetch_ms: -1,
                        last_caught_up_ms: -1,
                    })
                    .collect(),
                leader_listeners: listeners_of(image.controller_id),
            }
        }
    }
}

/// DescribeQuorum; it needs DESCRIBE on the cluster (else
/// CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
pub fn describe_quorum(
    broker: &Broker,
    request: DescribeQuorumRequest,
    version: i16,
    access: &Access,
) -> DescribeQuorumResponse {
    if !access.allows_cluster(AclOperation::Describe) {
        return DescribeQuorumResponse::default()
            .with_error_code(
                kafka_protocol::error::ResponseError::ClusterAuthorizationFailed.code(),
            )
            .with_error_message(Some(super::str_bytes("no DESCRIBE on the cluster")));
    }
    if !asks_for_metadata_partition(&request) {
        return response(&QuorumView::unknown(), &request, version);
    }
    response(&view(broker), &request, version)
}

impl QuorumView {
    fn unknown() -> Self {
        Self {
            leader_id: -1,
            leader_epoch: -1,
            high_watermark: -1,
            now_ms: -1,
            members: vec![],
            leader_listeners: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_quorum_request::{
        PartitionData as AskedPartition, TopicData as AskedTopic,
    };
    use kafka_protocol::messages::TopicName;

    fn ask(topic: &str, partitions: &[i32]) -> DescribeQuorumRequest {
        DescribeQuorumRequest::default().with_topics(vec![AskedTopic::default()
            .with_topic_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(
                partitions
                    .iter()
                    .map(|p| AskedPartition::default().with_partition_index(*p))
                    .collect(),
            )])
    }

    fn member(node_id: i32, leo: i64, at: i64) -> Member {
        Member {
            node_id,
            log_end_offset: leo,
            last_fetch_ms: at,
            last_caught_up_ms: at,
        }
    }

    #[test]
    fn the_controller_is_the_only_voter_and_the_others_observe() {
        let view = QuorumView {
            leader_id: 1,
            leader_epoch: 7,
            high_watermark: 42,
            now_ms: 1000,
            members: vec![member(2, 40, 900), member(1, 42, 950), member(0, -1, -1)],
            leader_listeners: vec![("PLAINTEXT".into(), "127.0.0.1".into(), 9092)],
        };
        let r = response(&view, &ask(METADATA_TOPIC, &[0]), 2);
        assert_eq!(r.error_code, 0);
        let p = &r.topics[0].partitions[0];
        assert_eq!(r.topics[0].topic_name.as_str(), METADATA_TOPIC);
        assert_eq!(
            (p.leader_id.0, p.leader_epoch, p.high_watermark),
            (1, 7, 42)
        );
        assert_eq!(p.current_voters.len(), 1);
        let v = &p.current_voters[0];
        assert_eq!(
            (v.replica_id.0, v.log_end_offset, v.last_fetch_timestamp),
            (1, 42, 1000)
        );
        let observers: Vec<_> = p
            .observers
            .iter()
            .map(|o| (o.replica_id.0, o.log_end_offset, o.last_fetch_timestamp))
            .collect();
        assert_eq!(observers, vec![(0, -1, -1), (2, 40, 900)]);
        assert_eq!(r.nodes.len(), 1);
        assert_eq!(r.nodes[0].listeners[0].port, 9092);
        let v1 = response(&view, &ask(METADATA_TOPIC, &[0]), 1);
        assert!(v1.nodes.is_empty(), "Nodes are v2+");
    }

    #[test]
    fn no_known_controller_means_no_voter() {
        let view = QuorumView {
            members: vec![member(3, 5, 10)],
            ..QuorumView::unknown()
        };
        let r = response(&view, &ask(METADATA_TOPIC, &[0]), 2);
        let p = &r.topics[0].partitions[0];
        assert_eq!(p.leader_id.0, -1);
        assert!(p.current_voters.is_empty() && r.nodes.is_empty());
        assert_eq!(p.observers.len(), 1);
    }

    #[test]
    fn other_partitions_are_unknown() {
        for req in [
            ask("some-topic", &[0]),
            ask(METADATA_TOPIC, &[1]),
            ask(METADATA_TOPIC, &[0, 1]),
            DescribeQuorumRequest::default(),
        ] {
            assert!(!asks_for_metadata_partition(&req));
            let r = response(&QuorumView::unknown(), &req, 2);
            for t in &r.topics {
                for p in &t.partitions {
                    assert_eq!(p.error_code, ResponseError::UnknownTopicOrPartition.code());
                }
            }
        }
    }
}
