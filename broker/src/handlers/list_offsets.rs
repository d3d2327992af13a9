//! Offsets of a partition's log: ListOffsets — earliest (-2, and -4
//! "earliest local"), latest (-1: the high watermark; for read_committed,
//! isolation level 1, the last stable offset, and a lookup by timestamp
//! finds nothing at or past it), max timestamp (-3)
//! and lookup by timestamp — and OffsetsForLeaderEpoch (KIP-101/KIP-320:
//! where a leader epoch ends in the leader's history, which clients use to
//! detect a truncated log). Both refuse a stale or future
//! `current_leader_epoch` as Fetch does.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
};

use super::access::Access;
use crate::broker::Broker;
use crate::error::storage_error_code;
use crate::security::acl::AclOperation;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

/// Answers ListOffsets; a topic without DESCRIBE is answered
/// TOPIC_AUTHORIZATION_FAILED (Kafka's rule).
pub fn handle(
    broker: &Broker,
    req: ListOffsetsRequest,
    version: i16,
    access: &Access,
) -> ListOffsetsResponse {
    let isolation_level = req.isolation_level;
    let denied = access.denied_topics(
        AclOperation::Describe,
        req.topics.iter().map(|t| t.name.0.as_str()),
    );
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let image = broker.image();
            let name = t.name.0.as_str().to_string();
            let topic_denied = denied.contains(&name);
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let base = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(-1);
                    if topic_denied {
                        return base
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    let led = super::led_partition(broker, &image, &name, p.partition_index)
                        .and_then(|(partition, epoch)| {
                            let requested = if version >= 4 {
                                p.current_leader_epoch
                            } else {
                                -1
                            };
                            super::fetch::check_leader_epoch(requested, epoch)
                                .map(|()| (partition, epoch))
                        });
                    let (partition, epoch) = match led {
                        Ok(found) => found,
                        Err(code) => return base.with_error_code(code.code()),
                    };
                    let base = base.with_leader_epoch(if version >= 4 { epoch } else { -1 });
                    let offsets = partition.offsets();
                    match p.timestamp {
                        // read_committed (isolation level 1): the last stable offset
                        LATEST if isolation_level == 1 => base.with_offset(offsets.last_stable),
                        LATEST => base.with_offset(offsets.high_watermark),
                        EARLIEST | EARLIEST_LOCAL => base.with_offset(offsets.log_start),
                        MAX_TIMESTAMP => match partition.with_log(|log| log.max_timestamp()) {
                            Some((ts, offset)) => base.with_timestamp(ts).with_offset(offset),
                            None => base,
                        },
                        ts if ts < 0 => base.with_error_code(ResponseError::InvalidRequest.code()),
                        // May read and decompress a batch from disk: off the worker.
                        ts => match crate::offload::blocking(|| {
                            partition.with_log(|log| log.offset_for_timestamp(ts))
                        }) {
                            // read_committed finds nothing at or past the LSO
                            Ok(Some((offset, _)))
                                if isolation_level == 1 && offset >= offsets.last_stable =>
                            {
                                base
                            }
                            Ok(Some((offset, found_ts))) => {
                                base.with_offset(offset).with_timestamp(found_ts)
                            }
                            Ok(None) => base,
                            Err(e) => base.with_error_code(storage_error_code(&e).code()),
                        },
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

/// OffsetsForLeaderEpoch: for each partition led here, the largest epoch
/// of its history not above the requested one and where that epoch ends
/// (the next epoch's start, or the log end for the current epoch);
/// `(-1, -1)` when the history holds no such epoch. A consumer needs
/// DESCRIBE on each topic, a request naming a replica CLUSTER_ACTION
/// (Kafka's rules).
pub fn offsets_for_leader_epoch(
    broker: &Broker,
    req: OffsetForLeaderEpochRequest,
    access: &Access,
) -> OffsetForLeaderEpochResponse {
    let image = broker.image();
    let replica_denied =
        req.replica_id.0 >= 0 && !access.allows_cluster(AclOperation::ClusterAction);
    let denied = access.denied_topics(
        AclOperation::Describe,
        req.topics.iter().map(|t| t.topic.0.as_str()),
    );
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.topic.0.as_str().to_string();
            let refusal = if replica_denied {
                Some(ResponseError::ClusterAuthorizationFailed)
            } else if denied.contains(&name) {
                Some(ResponseError::TopicAuthorizationFailed)
            } else {
                None
            };
            let partitions =
                t.partitions
                    .into_iter()
                    .map(|p| {
                        let base = EpochEndOffset::default()
                            .with_partition(p.partition)
                            .with_leader_epoch(-1)
                            .with_end_offset(-1);
                        if let Some(code) = refusal {
                            return base.with_error_code(code.code());
                        }
                        let led = super::led_partition(broker, &image, &name, p.partition)
                            .and_then(|(partition, epoch)| {
                                super::fetch::check_leader_epoch(p.current_leader_epoch, epoch)
                                    .map(|()| partition)
                            });
                        match led {
                            Err(code) => base.with_error_code(code.code()),
                            Ok(partition) => match partition.end_offset_for_epoch(p.leader_epoch) {
                                Some((epoch, end)) => {
                                    base.with_leader_epoch(epoch).with_end_offset(end)
                                }
                                None => base,
                            },
                        }
                    })
                    .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
