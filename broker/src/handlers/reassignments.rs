//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455),
//! the APIs `kafka-reassign-partitions` and every Admin client use to move
//! replicas. The wire shapes live here; the decisions are the
//! controller's ([`crate::controller::reassignment`]), reached through the
//! [`Controller`] facade; the running reassignments are read from the
//! metadata image.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::controller::{Controller, ReassignRequest};
use crate::security::acl::AclOperation;

fn ids(v: &[i32]) -> Vec<BrokerId> {
    v.iter().copied().map(BrokerId).collect()
}

/// AlterPartitionReassignments (blocking: the controller is asked and the
/// change awaited). v0 may change a partition's replication factor; v1
/// only when `allow_replication_factor_change` (KIP-860, default true).
///
/// It needs ALTER on the cluster: without it the request and each of its
/// partitions are answered CLUSTER_AUTHORIZATION_FAILED, as Kafka does.
pub fn alter(
    broker: &Broker,
    req: AlterPartitionReassignmentsRequest,
    version: i16,
    access: &Access,
) -> AlterPartitionReassignmentsResponse {
    let allow_rf_change = version < 1 || req.allow_replication_factor_change;
    let requests: Vec<ReassignRequest> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| ReassignRequest {
                topic: t.name.to_string(),
                partition: p.partition_index,
                target: p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect()),
            })
        })
        .collect();
    let mut resp = AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow_rf_change)
        .with_error_message(None);
    let asked = if access.allows_cluster(AclOperation::Alter) {
        Controller::new(broker).alter_reassignments(&requests, allow_rf_change)
    } else {
        Err(crate::error::TopicError::new(
            ResponseError::ClusterAuthorizationFailed,
            "no ALTER on the cluster",
        ))
    };
    let results = match asked {
        Ok(results) => results,
        Err(e) => {
            // the controller could not be asked: the whole request fails
            // (retriable NOT_CONTROLLER, as Kafka answers)
            resp.error_code = e.code.code();
            resp.error_message = Some(str_bytes(&e.message));
            requests.iter().map(|_| Err(e.clone())).collect()
        }
    };
    let mut results = results.into_iter();
    resp.responses = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut out = ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_message(None);
                    match results.next() {
                        Some(Ok(())) => {}
                        Some(Err(e)) => {
                            out.error_code = e.code.code();
                            out.error_message = Some(str_bytes(&e.message));
                        }
                        None => out.error_code = ResponseError::UnknownServerError.code(),
                    }
                    out
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    resp
}

/// ListPartitionReassignments: the running reassignments of the named
/// partitions (all, when no topics are given), from the image. It needs
/// DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED).
pub fn list(
    broker: &Broker,
    req: ListPartitionReassignmentsRequest,
    access: &Access,
) -> ListPartitionReassignmentsResponse {
    if !access.allows_cluster(AclOperation::Describe) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("no DESCRIBE on the cluster")));
    }
    let image = broker.image();
    let wanted = |topic: &str, index: i32| match &req.topics {
        None => true,
        Some(ts) => ts
            .iter()
            .any(|t| t.name.as_str() == topic && t.partition_indexes.contains(&index)),
    };
    let topics = image
        .topics()
        .filter_map(|t| {
            let partitions: Vec<OngoingPartitionReassignment> = t
                .partitions
                .iter()
                .filter(|p| !p.adding_replicas.is_empty() || !p.removing_replicas.is_empty())
                .filter(|p| wanted(&t.name, p.index))
                .map(|p| {
                    OngoingPartitionReassignment::default()
                        .with_partition_index(p.index)
                        .with_replicas(ids(&p.replicas))
                        .with_adding_replicas(ids(&p.adding_replicas))
                        .with_removing_replicas(ids(&p.removing_replicas))
                })
                .collect();
            (!partitions.is_empty()).then(|| {
                OngoingTopicReassignment::default()
                    .with_name(str_bytes(&t.name).into())
                    .with_partitions(partitions)
            })
        })
        .collect();
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
