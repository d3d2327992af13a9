//! WriteTxnMarkers (API key 27, versions 1 and 2, as Kafka 4 brokers send
//! it; v2 says when the transaction is of version 2, whose markers must
//! carry an epoch above the data's, see `ProducerStates::check_marker`): a
//! transaction coordinator asks the leaders of the partitions a
//! transaction wrote to to end it there with a COMMIT or ABORT marker
//! (issue 37, the partition side; the coordinator that sends it is
//! `txn`'s and the coordinator handlers' business).
//!
//! Each marker is written by [`crate::partition::Partition::write_txn_marker`]
//! and answered once the in-sync replicas hold it (as an acks=all produce,
//! Kafka's `requiredAcks = -1`), within [`MARKER_TIMEOUT`]. Per partition
//! errors are Kafka's: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER,
//! INVALID_PRODUCER_EPOCH (an epoch older than the producer's),
//! TRANSACTION_COORDINATOR_FENCED (a coordinator epoch older than the last
//! marker's), REQUEST_TIMED_OUT.
//!
//! A marker on a `__consumer_offsets` partition also ends the
//! transaction's pending offset commits there, once replicated (the group
//! coordinator's `complete_transaction`): committed offsets appear, or
//! aborted ones vanish. A marker that is not acknowledged in time leaves
//! them pending; the coordinator sends it again.
//!
//! It needs Kafka's ClusterAction on the cluster ([`may_write_markers`]):
//! a connection authenticated as a registered broker (`sasl`'s
//! `MOLDAU-BROKER`, as replica fetches do) has it; a client has it only
//! through the authorizer (`authorizer.class.name`: a super user, or an
//! ALLOW of CLUSTER_ACTION on the cluster), which is how Kafka's
//! `kafka-transactions.sh abort` ends a hanging transaction. Without an
//! authorizer Kafka lets any client write markers; Moldau does not (a
//! stray marker ends a live transaction), so there clients get
//! CLUSTER_AUTHORIZATION_FAILED for every partition. A standalone broker
//! has no broker identity to authenticate with, so there its own
//! coordinator writes markers by calling the partition directly.

use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use crate::broker::Broker;
use crate::group::offsets::OFFSETS_TOPIC;
use crate::partition::AckState;
use crate::txn::marker::TxnResult;

/// How long a marker may wait for the in-sync replicas (Kafka's default
/// `request.timeout.ms` for the coordinator's marker requests).
pub const MARKER_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether `ctx` may write transaction markers: a broker of the cluster,
/// or a client the authorizer grants CLUSTER_ACTION on the cluster (see
/// the module doc).
pub fn may_write_markers(
    broker: &Broker,
    ctx: &crate::protocol::principal::ConnectionContext,
) -> bool {
    use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};
    ctx.broker().is_some()
        || broker.authorizer().is_some_and(|a| {
            a.authorize(
                &ctx.principal.kafka_name(),
                &ctx.peer.ip().to_string(),
                AclOperation::ClusterAction,
                ResourceType::Cluster,
                CLUSTER_NAME,
            )
        })
}

/// Answers a WriteTxnMarkers request; `from_broker` says whether the
/// connection may write markers ([`may_write_markers`]). Blocking: waits
/// for replication.
pub fn handle(
    broker: &Broker,
    req: WriteTxnMarkersRequest,
    from_broker: bool,
) -> WriteTxnMarkersResponse {
    let image = broker.image();
    let mut results = Vec::with_capacity(req.markers.len());
    // (marker index, topic index, partition index, partition, offset,
    // epoch, and for an offsets partition the transaction it ends) to wait for
    let mut pending = Vec::new();
    for (mi, marker) in req.markers.iter().enumerate() {
        let producer_id = marker.producer_id.0;
        let result = TxnResult::from_committed(marker.transaction_result);
        let mut topics = Vec::with_capacity(marker.topics.len());
        for (ti, topic) in marker.topics.iter().enumerate() {
            let name = topic.name.0.as_str();
            let mut partitions = Vec::with_capacity(topic.partition_indexes.len());
            for (pi, &index) in topic.partition_indexes.iter().enumerate() {
                let code = if !from_broker {
                    ResponseError::ClusterAuthorizationFailed.code()
                } else {
                    match super::led_partition(broker, &image, name, index) {
                        Err(code) => code.code(),
                        Ok((partition, epoch)) => match partition.write_txn_marker(
                            producer_id,
                            marker.producer_epoch,
                            marker.coordinator_epoch,
                            result,
                            marker.transaction_version >= 2,
                        ) {
                            Ok(offset) => {
                                let ends = (name == OFFSETS_TOPIC).then_some((producer_id, result));
                                pending.push((mi, ti, pi, partition, offset, epoch, ends));
                                0
                            }
                            Err(e) => {
                                tracing::debug!(topic = name, partition = index, producer_id, error = %e.message, "refused a transaction marker");
                                e.code.code()
                            }
                        },
                    }
                };
                partitions.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(index)
                        .with_error_code(code),
                );
            }
            topics.push(
                WritableTxnMarkerTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            );
        }
        results.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics),
        );
    }
    let deadline = std::time::Instant::now() + MARKER_TIMEOUT;
    for (mi, ti, pi, partition, offset, epoch, ends) in pending {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let code = match partition.wait_replicated(offset + 1, epoch, left) {
            AckState::Done => {
                if let Some((producer_id, result)) = ends {
                    broker
                        .groups
                        .complete_transaction(partition.index, producer_id, result);
                }
                continue;
            }
            AckState::Failed(code) => code,
            AckState::Waiting => ResponseError::RequestTimedOut,
        };
        results[mi].topics[ti].partitions[pi].error_code = code.code();
    }
    WriteTxnMarkersResponse::default().with_markers(results)
}
