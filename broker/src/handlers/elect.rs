//! ElectLeaders (`kafka-leader-election`): preferred or unclean leader
//! elections, decided and applied by the controller
//! ([`crate::controller::elect`] has the rules). This module translates the
//! request and the per-partition outcomes.
//!
//! v0 has no election type on the wire (it is preferred); v1+ carry a
//! top-level error code. A request the controller refuses as a whole (an
//! unknown election type, the controller unreachable) gets that error at
//! the top level and on every partition it names, so v0 clients see it
//! too. Forwarding to the controller blocks: the dispatcher runs this on
//! the blocking pool.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::controller::elect::{ElectionType, PartitionOutcome};
use crate::error::TopicError;
use crate::security::acl::AclOperation;

/// Topic → partitions a request names (`None`: every partition).
type Targets = BTreeMap<String, BTreeSet<i32>>;

fn targets_of(req: &ElectLeadersRequest) -> Option<Targets> {
    let topics = req.topic_partitions.as_ref()?;
    let mut targets = Targets::new();
    for t in topics {
        targets
            .entry(t.topic.0.as_str().to_string())
            .or_default()
            .extend(t.partitions.iter().copied());
    }
    Some(targets)
}

/// ElectLeaders; it needs ALTER on the cluster (else the request and each
/// partition named are answered CLUSTER_AUTHORIZATION_FAILED).
pub fn elect_leaders(
    broker: &Broker,
    req: ElectLeadersRequest,
    access: &Access,
) -> ElectLeadersResponse {
    let targets = targets_of(&req);
    let outcome = match ElectionType::from_code(i32::from(req.election_type)) {
        _ if !access.allows_cluster(AclOperation::Alter) => Err(TopicError::new(
            ResponseError::ClusterAuthorizationFailed,
            "no ALTER on the cluster",
        )),
        Some(kind) => {
            crate::controller::Controller::new(broker).elect_leaders(kind, targets.clone())
        }
        None => Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!("unknown election type {}", req.election_type),
        )),
    };
    match outcome {
        Ok(outcomes) => ElectLeadersResponse::default()
            .with_replica_election_results(by_topic(outcomes.into_iter().map(result_of))),
        Err(e) => refused(targets, &e),
    }
}

fn result_of(o: PartitionOutcome) -> (String, PartitionResult) {
    let r = PartitionResult::default().with_partition_id(o.index);
    let r = match o.error {
        Some((code, message)) => r
            .with_error_code(code.code())
            .with_error_message(Some(str_bytes(&message))),
        None => r,
    };
    (o.topic, r)
}

/// Groups partition results by topic, keeping their order.
fn by_topic(
    results: impl Iterator<Item = (String, PartitionResult)>,
) -> Vec<ReplicaElectionResult> {
    let mut out: Vec<ReplicaElectionResult> = Vec::new();
    for (topic, r) in results {
        match out.last_mut().filter(|t| t.topic.0.as_str() == topic) {
            Some(t) => t.partition_result.push(r),
            None => out.push(
                ReplicaElectionResult::default()
                    .with_topic(TopicName(str_bytes(&topic)))
                    .with_partition_result(vec![r]),
            ),
        }
    }
    out
}

/// The whole request refused with `e`.
fn refused(targets: Option<Targets>, e: &TopicError) -> ElectLeadersResponse {
    let named = targets
        .unwrap_or_default()
        .into_iter()
        .flat_map(|(topic, ps)| {
            ps.into_iter().map(move |index| {
                result_of(PartitionOutcome {
                    topic: topic.clone(),
                    index,
                    error: Some((e.code, e.message.clone())),
                })
            })
        });
    ElectLeadersResponse::default()
        .with_error_code(e.code.code())
        .with_replica_election_results(by_topic(named))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;

    fn request(kind: i8, topics: Option<&[(&str, &[i32])]>) -> ElectLeadersRequest {
        ElectLeadersRequest::default()
            .with_election_type(kind)
            .with_topic_partitions(topics.map(|ts| {
                ts.iter()
                    .map(|(t, ps)| {
                        TopicPartitions::default()
                            .with_topic(TopicName(str_bytes(t)))
                            .with_partitions(ps.to_vec())
                    })
                    .collect()
            }))
    }

    #[test]
    fn named_partitions_are_merged_per_topic_and_null_means_all() {
        let t = targets_of(&request(
            0,
            Some(&[("a", &[1, 0]), ("b", &[]), ("a", &[1, 2])]),
        ))
        .expect("named");
        assert_eq!(t["a"], BTreeSet::from([0, 1, 2]));
        assert!(t["b"].is_empty());
        assert_eq!(targets_of(&request(0, None)), None);
    }

    #[test]
    fn a_refused_request_carries_its_error_on_every_named_partition() {
        let e = TopicError::new(ResponseError::NotController, "no controller");
        let r = refused(
            targets_of(&request(0, Some(&[("a", &[0, 1]), ("b", &[3])]))),
            &e,
        );
        assert_eq!(r.error_code, ResponseError::NotController.code());
        let got: Vec<(String, i32, i16)> = r
            .replica_election_results
            .iter()
            .flat_map(|t| {
                t.partition_result
                    .iter()
                    .map(move |p| (t.topic.0.to_string(), p.partition_id, p.error_code))
            })
            .collect();
        let code = ResponseError::NotController.code();
        assert_eq!(
            got,
            vec![
                ("a".into(), 0, code),
                ("a".into(), 1, code),
                ("b".into(), 3, code)
            ]
        );
        assert!(refused(None, &e).replica_election_results.is_empty());
    }
}
