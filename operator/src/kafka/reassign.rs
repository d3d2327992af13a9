//! Partition reassignment on the wire (KIP-455), as pure request builders and
//! response readers (the calls are in `admin`): AlterPartitionReassignments
//! (targets, or `None` to cancel), ListPartitionReassignments,
//! DescribeLogDirs (replica sizes on one broker) and ElectLeaders
//! (preferred); and what a partition's replicas are once its move is done
//! ([`target_replicas`], [`replication_factor`]): during a move Metadata
//! lists the target and the replicas being removed together, so a replica
//! count read from Metadata alone is not the replication factor.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    DescribeLogDirsRequest, DescribeLogDirsResponse, ElectLeadersRequest, ElectLeadersResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::metadata::TopicMetadata;
use super::KafkaError;

/// ELECTION_NOT_NEEDED: the preferred leader already leads.
pub const ELECTION_NOT_NEEDED: i16 = 84;
/// NO_REASSIGNMENT_IN_PROGRESS: cancelling a partition that is not moving.
pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;

/// One partition's reassignment request: the target replicas in order, or
/// `None` to cancel a running reassignment (the original replicas stay).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reassignment {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Target replicas, or None to cancel.
    pub replicas: Option<Vec<i32>>,
}

/// A reassignment the controller is running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OngoingReassignment {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Current replica set (original ∪ target).
    pub replicas: Vec<i32>,
    /// Replicas being added.
    pub adding: Vec<i32>,
    /// Replicas to drop once the targets are in sync.
    pub removing: Vec<i32>,
}

impl OngoingReassignment {
    /// The replicas the partition ends with: the current set without the
    /// ones being removed (the ones being added are part of the target).
    pub fn target(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|b| !self.removing.contains(b))
            .collect()
    }
}

/// The target replicas of `topic`-`partition` whose replica list (as
/// Metadata reports it) is `replicas`: the running reassignment's target
/// when it moves, else `replicas` themselves. Kafka's view: during a move
/// the replica list is target ∪ removing, and adding ⊆ target.
pub fn target_replicas(
    topic: &str,
    partition: i32,
    replicas: &[i32],
    ongoing: &[OngoingReassignment],
) -> Vec<i32> {
    match ongoing
        .iter()
        .find(|o| o.topic == topic && o.partition == partition)
    {
        Some(o) => o.target(),
        None => replicas.to_vec(),
    }
}

/// A topic's replication factor: the largest target replica count of its
/// partitions (see [`target_replicas`]), `fallback` when it has none. A
/// partition being moved counts with the replicas it ends with, not with
/// the transient set that includes the replicas being removed.
pub fn replication_factor<'a>(
    topic: &str,
    partitions: impl IntoIterator<Item = (i32, &'a [i32])>,
    ongoing: &[OngoingReassignment],
    fallback: i32,
) -> i32 {
    partitions
        .into_iter()
        .map(|(p, replicas)| target_replicas(topic, p, replicas, ongoing).len())
        .max()
        .map_or(fallback, |n| i32::try_from(n).unwrap_or(i32::MAX))
}

/// [`replication_factor`] of a topic as Metadata lists it.
pub fn topic_replication_factor(t: &TopicMetadata, ongoing: &[OngoingReassignment]) -> i32 {
    replication_factor(
        &t.name,
        t.partition_details
            .iter()
            .map(|p| (p.partition, p.replicas.as_slice())),
        ongoing,
        t.replication_factor,
    )
}

/// A partition whose request the broker refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionError {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Kafka error code.
    pub code: i16,
    /// The broker's message.
    pub message: Option<String>,
}

fn name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_string()))
}

/// The AlterPartitionReassignments request of `moves`, grouped by topic
/// (in order of first appearance).
pub fn alter_request(
    moves: &[Reassignment],
    timeout_ms: i32,
) -> AlterPartitionReassignmentsRequest {
    let mut topics: Vec<ReassignableTopic> = Vec::new();
    for m in moves {
        let p = ReassignablePartition::default()
            .with_partition_index(m.partition)
            .with_replicas(
                m.replicas
                    .as_ref()
                    .map(|r| r.iter().map(|b| BrokerId(*b)).collect()),
            );
        match topics.iter_mut().find(|t| t.name.0.as_str() == m.topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                ReassignableTopic::default()
                    .with_name(name(&m.topic))
                    .with_partitions(vec![p]),
            ),
        }
    }
    AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topics(topics)
}

/// The partitions an AlterPartitionReassignments response refused; a
/// top-level error is an `Err`. With `cancel`, NO_REASSIGNMENT_IN_PROGRESS
/// (the move already finished) is not a refusal.
pub fn alter_errors(
    resp: &AlterPartitionReassignmentsResponse,
    cancel: bool,
) -> Result<Vec<PartitionError>, KafkaError> {
    if resp.error_code != 0 {
        return Err(KafkaError::broker(
            "AlterPartitionReassignments",
            resp.error_code,
            resp.error_message.as_ref().map(|m| m.to_string()),
        ));
    }
    Ok(resp
        .responses
        .iter()
        .flat_map(|t| {
            t.partitions.iter().filter_map(|p| {
                let ignorable = cancel && p.error_code == NO_REASSIGNMENT_IN_PROGRESS;
                (p.error_code != 0 && !ignorable).then(|| PartitionError {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    code: p.error_code,
                    message: p.error_message.as_ref().map(|m| m.to_string()),
                })
            })
        })
        .collect())
}

/// The ListPartitionReassignments request for every partition.
pub fn list_request(timeout_ms: i32) -> ListPartitionReassignmentsRequest {
    ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topics(None)
}

/// The running reassignments of a ListPartitionReassignments response,
/// sorted by topic and partition.
pub fn ongoing(
    resp: &ListPartitionReassignmentsResponse,
) -> Result<Vec<OngoingReassignment>, KafkaError> {
    if resp.error_code != 0 {
        return Err(KafkaError::broker(
            "ListPartitionReassignments",
            resp.error_code,
            resp.error_message.as_ref().map(|m| m.to_string()),
        ));
    }
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<i32>>();
    let mut out: Vec<OngoingReassignment> = resp
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| OngoingReassignment {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                replicas: ids(&p.replicas),
                adding: ids(&p.adding_replicas),
                removing: ids(&p.removing_replicas),
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(out)
}

/// The DescribeLogDirs request for every partition.
pub fn log_dirs_request() -> DescribeLogDirsRequest {
    DescribeLogDirsRequest::default().with_topics(None)
}

/// Size of each replica on the answering broker, by (topic, partition);
/// future replicas (a move between log directories) are left out, and a
/// replica in several directories counts its largest.
pub fn replica_sizes(
    resp: &DescribeLogDirsResponse,
) -> Result<BTreeMap<(String, i32), u64>, KafkaError> {
    if resp.error_code != 0 {
        return Err(KafkaError::broker("DescribeLogDirs", resp.error_code, None));
    }
    let mut out: BTreeMap<(String, i32), u64> = BTreeMap::new();
    for dir in resp.results.iter().filter(|d| d.error_code == 0) {
        for t in &dir.topics {
            for p in t.partitions.iter().filter(|p| !p.is_future_key) {
                let size = u64::try_from(p.partition_size).unwrap_or(0);
                let e = out
                    .entry((t.name.0.to_string(), p.partition_index))
                    .or_default();
                *e = (*e).max(size);
            }
        }
    }
    Ok(out)
}

/// The ElectLeaders request electing the preferred leader of `partitions`.
pub fn elect_preferred_request(
    partitions: &[(String, i32)],
    timeout_ms: i32,
) -> ElectLeadersRequest {
    let mut topics: Vec<TopicPartitions> = Vec::new();
    for (topic, p) in partitions {
        match topics.iter_mut().find(|t| t.topic.0.as_str() == topic) {
            Some(t) => t.partitions.push(*p),
            None => topics.push(
                TopicPartitions::default()
                    .with_topic(name(topic))
                    .with_partitions(vec![*p]),
            ),
        }
    }
    ElectLeadersRequest::default()
        .with_election_type(0)
        .with_topic_partitions(Some(topics))
        .with_timeout_ms(timeout_ms)
}

/// The partitions an ElectLeaders response could not elect for (the
/// preferred leader already leading is no error).
pub fn elect_errors(resp: &ElectLeadersResponse) -> Result<Vec<PartitionError>, KafkaError> {
    if resp.error_code != 0 {
        return Err(KafkaError::broker("ElectLeaders", resp.error_code, None));
    }
    Ok(resp
        .replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result
                .iter()
                .filter(|p| p.error_code != 0 && p.error_code != ELECTION_NOT_NEEDED)
                .map(|p| PartitionError {
                    topic: t.topic.0.to_string(),
                    partition: p.partition_id,
                    code: p.error_code,
                    message: p.error_message.as_ref().map(|m| m.to_string()),
                })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::wire::encode_request;
    use bytes::BytesMut;
    use kafka_protocol::messages::alter_partition_reassignments_response::{
        ReassignablePartitionResponse, ReassignableTopicResponse,
    };
    use kafka_protocol::messages::describe_log_dirs_response::{
        DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
    };
    use kafka_protocol::messages::list_partition_reassignments_response::{
        OngoingPartitionReassignment, OngoingTopicReassignment,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, Message};

    fn round_trip<
        R: kafka_protocol::protocol::Request + Decodable + PartialEq + std::fmt::Debug,
    >(
        req: &R,
        version: i16,
    ) {
        let frame = encode_request(req, version, 3, "t").unwrap();
        let mut body = frame.slice(4..);
        let header =
            kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
        assert_eq!(header.request_api_key, R::KEY);
        assert_eq!(header.request_api_version, version);
        assert_eq!(&R::decode(&mut body, version).unwrap(), req);
    }

    fn moves() -> Vec<Reassignment> {
        vec![
            Reassignment {
                topic: "a".into(),
                partition: 0,
                replicas: Some(vec![1, 2]),
            },
            Reassignment {
                topic: "b".into(),
                partition: 3,
                replicas: None,
            },
            Reassignment {
                topic: "a".into(),
                partition: 1,
                replicas: Some(vec![2, 0]),
            },
        ]
    }

    #[test]
    fn a_moving_partition_counts_its_target_replicas() {
        // RF 3 moving {0,1,2} -> {1,2,3}: Metadata lists 4 replicas while
        // broker 3 catches up and broker 0 waits to be removed.
        let moving = OngoingReassignment {
            topic: "t".into(),
            partition: 0,
            replicas: vec![1, 2, 3, 0],
            adding: vec![3],
            removing: vec![0],
        };
        assert_eq!(moving.target(), vec![1, 2, 3]);
        let ongoing = [moving];
        assert_eq!(
            target_replicas("t", 0, &[1, 2, 3, 0], &ongoing),
            vec![1, 2, 3]
        );
        assert_eq!(target_replicas("t", 1, &[0, 1, 2], &ongoing), vec![0, 1, 2]);
        assert_eq!(target_replicas("u", 0, &[5], &ongoing), vec![5]);
        let parts: Vec<(i32, Vec<i32>)> = vec![(0, vec![1, 2, 3, 0]), (1, vec![0, 1, 2])];
        let rf = |ongoing: &[OngoingReassignment]| {
            replication_factor(
                "t",
                parts.iter().map(|(p, r)| (*p, r.as_slice())),
                ongoing,
                0,
            )
        };
        assert_eq!(rf(&ongoing), 3);
        // without the move's view, the transient set would say 4
        assert_eq!(rf(&[]), 4);
        assert_eq!(replication_factor("t", [], &ongoing, 2), 2);
        // a move that raises the factor counts its target: 2 -> 3
        let growing = OngoingReassignment {
            topic: "g".into(),
            partition: 0,
            replicas: vec![0, 1, 2],
            adding: vec![2],
            removing: vec![],
        };
        assert_eq!(
            replication_factor("g", [(0, &[0, 1, 2][..])], &[growing], 0),
            3
        );
    }

    #[test]
    fn alter_request_groups_by_topic_and_cancels_with_null() {
        let req = alter_request(&moves(), 5000);
        assert_eq!(req.timeout_ms, 5000);
        assert_eq!(req.topics.len(), 2);
        assert_eq!(req.topics[0].name.0.as_str(), "a");
        let a: Vec<(i32, Option<Vec<i32>>)> = req.topics[0]
            .partitions
            .iter()
            .map(|p| {
                (
                    p.partition_index,
                    p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
                )
            })
            .collect();
        assert_eq!(a, vec![(0, Some(vec![1, 2])), (1, Some(vec![2, 0]))]);
        assert_eq!(req.topics[1].partitions[0].replicas, None, "cancel is null");
        for v in AlterPartitionReassignmentsRequest::VERSIONS.min
            ..=AlterPartitionReassignmentsRequest::VERSIONS.max
        {
            round_trip(&req, v);
        }
    }

    #[test]
    fn list_log_dirs_and_elect_requests_encode() {
        round_trip(&list_request(1000), 0);
        for v in 1..=4 {
            round_trip(&log_dirs_request(), v);
        }
        let elect =
            elect_preferred_request(&[("a".into(), 0), ("a".into(), 2), ("b".into(), 1)], 10);
        assert_eq!(elect.election_type, 0);
        assert_eq!(elect.topic_partitions.as_ref().unwrap().len(), 2);
        assert_eq!(
            elect.topic_partitions.as_ref().unwrap()[0].partitions,
            vec![0, 2]
        );
        for v in 1..=2 {
            round_trip(&elect, v);
        }
    }

    #[test]
    fn alter_errors_are_per_partition_and_cancel_of_a_finished_move_is_fine() {
        let resp = AlterPartitionReassignmentsResponse::default().with_responses(vec![
            ReassignableTopicResponse::default()
                .with_name(name("a"))
                .with_partitions(vec![
                    ReassignablePartitionResponse::default().with_partition_index(0),
                    ReassignablePartitionResponse::default()
                        .with_partition_index(1)
                        .with_error_code(NO_REASSIGNMENT_IN_PROGRESS),
                    ReassignablePartitionResponse::default()
                        .with_partition_index(2)
                        .with_error_code(39)
                        .with_error_message(Some(StrBytes::from_static_str("bad"))),
                ]),
        ]);
        let errs = alter_errors(&resp, false).unwrap();
        assert_eq!(errs.len(), 2);
        let errs = alter_errors(&resp, true).unwrap();
        assert_eq!(errs.len(), 1);
        assert_eq!((errs[0].partition, errs[0].code), (2, 39));
        assert_eq!(errs[0].message.as_deref(), Some("bad"));
        let top = AlterPartitionReassignmentsResponse::default().with_error_code(41);
        assert_eq!(alter_errors(&top, false).unwrap_err().code(), Some(41));
    }

    #[test]
    fn ongoing_reassignments_and_sizes_are_read() {
        let resp = ListPartitionReassignmentsResponse::default().with_topics(vec![
            OngoingTopicReassignment::default()
                .with_name(name("b"))
                .with_partitions(vec![OngoingPartitionReassignment::default()
                    .with_partition_index(0)
                    .with_replicas(vec![BrokerId(0), BrokerId(1), BrokerId(2)])
                    .with_adding_replicas(vec![BrokerId(2)])
                    .with_removing_replicas(vec![BrokerId(0)])]),
            OngoingTopicReassignment::default()
                .with_name(name("a"))
                .with_partitions(vec![
                    OngoingPartitionReassignment::default().with_partition_index(4)
                ]),
        ]);
        // the response survives the wire at v0
        let mut buf = BytesMut::new();
        resp.encode(&mut buf, 0).unwrap();
        let back = ListPartitionReassignmentsResponse::decode(&mut buf.freeze(), 0).unwrap();
        let got = ongoing(&back).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].topic.as_str(), got[0].partition), ("a", 4));
        assert_eq!(got[1].adding, vec![2]);
        assert_eq!(got[1].removing, vec![0]);
        assert_eq!(got[1].replicas, vec![0, 1, 2]);

        let dirs = DescribeLogDirsResponse::default().with_results(vec![
            DescribeLogDirsResult::default().with_topics(vec![DescribeLogDirsTopic::default()
                .with_name(name("a"))
                .with_partitions(vec![
                    DescribeLogDirsPartition::default()
                        .with_partition_index(0)
                        .with_partition_size(100),
                    DescribeLogDirsPartition::default()
                        .with_partition_index(1)
                        .with_partition_size(7)
                        .with_is_future_key(true),
                ])]),
            DescribeLogDirsResult::default().with_error_code(57),
        ]);
        let sizes = replica_sizes(&dirs).unwrap();
        assert_eq!(sizes.len(), 1);
        assert_eq!(sizes[&("a".to_string(), 0)], 100);
    }
}
