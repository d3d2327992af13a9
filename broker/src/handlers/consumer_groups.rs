//! The KIP-848 consumer group APIs on the wire: ConsumerGroupHeartbeat
//! (v0-1) and ConsumerGroupDescribe (v0-1). Requests are checked here as
//! Kafka checks them (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, the group and
//! topic ACLs); decisions live in `group::consumer`.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response::{
    self as describe, DescribedGroup,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as WireAssignment, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::group::consumer::assignor::Assignment;
use crate::group::consumer::machine::{JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH};
use crate::group::consumer::{ConsumerGroup, Heartbeat, TopicMeta, Topics};
use crate::security::acl::{AclOperation, ResourceType, AUTHORIZED_OPERATIONS_OMITTED};

/// The cluster's non-internal topics, as consumer groups see them (with
/// their replicas' racks in the KIP-1101 hash, so that a replica moving to
/// another rack rebalances the groups subscribed to it, as on Kafka).
pub(crate) fn topics_view(broker: &Broker) -> Topics {
    let image = broker.image();
    image
        .topics()
        .filter(|t| !t.internal)
        .map(|t| {
            let partitions = i32::try_from(t.partitions.len()).unwrap_or(i32::MAX);
            let racks = |p: i32| -> Vec<String> {
                usize::try_from(p)
                    .ok()
                    .and_then(|i| t.partitions.get(i))
                    .filter(|part| part.index == p)
                    .map(|part| {
                        part.replicas
                            .iter()
                            .filter_map(|b| image.broker(*b).and_then(|b| b.rack.clone()))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            (
                t.name.clone(),
                TopicMeta::new(&t.name, t.id, partitions, racks),
            )
        })
        .collect()
}

/// Kafka's request validation, as `(code, message)` on failure.
fn validate(
    req: &ConsumerGroupHeartbeatRequest,
    version: i16,
    assignors: &[String],
) -> Result<(), (ResponseError, String)> {
    let invalid = |m: &str| Err((ResponseError::InvalidRequest, m.to_string()));
    if req.group_id.0.is_empty() {
        return invalid("GroupId can't be empty.");
    }
    if req.instance_id.as_ref().is_some_and(|s| s.is_empty()) {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack_id.as_ref().is_some_and(|s| s.is_empty()) {
        return invalid("RackId can't be empty.");
    }
    let epoch = req.member_epoch;
    if version >= 1 && req.member_id.is_empty() {
        // the client names itself from v1 (KIP-1082)
        return invalid("MemberId can't be empty.");
    }
    if epoch > 0 || epoch == LEAVE_EPOCH {
        if req.member_id.is_empty() {
            return invalid("MemberId can't be empty.");
        }
    } else if epoch == JOIN_EPOCH {
        if req.rebalance_timeout_ms == -1 {
            return invalid("RebalanceTimeoutMs must be provided in first request.");
        }
        if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
            return invalid("TopicPartitions must be empty when (re-)joining.");
        }
        let names = req
            .subscribed_topic_names
            .as_ref()
            .is_some_and(|n| !n.is_empty());
        if !names && req.subscribed_topic_regex.is_none() {
            return invalid(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            );
        }
    } else if epoch == STATIC_LEAVE_EPOCH {
        if req.member_id.is_empty() {
            return invalid("MemberId can't be empty.");
        }
        if req.instance_id.is_none() {
            return invalid("InstanceId can't be null.");
        }
    } else {
        return invalid("MemberEpoch is invalid.");
    }
    if let Some(a) = &req.server_assignor {
        if !assignors.iter().any(|n| n == a.as_str()) {
            return Err((
                ResponseError::UnsupportedAssignor,
                format!(
                    "ServerAssignor {} is not supported. Supported assignors: {}.",
                    a.as_str(),
                    assignors.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

fn error(code: ResponseError, message: Option<String>) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(code.code())
        .with_error_message(message.map(|m| str_bytes(&m)))
}

/// ConsumerGroupHeartbeat: READ on the group, DESCRIBE on each subscribed
/// topic name (Kafka's rules). Blocking: a change of the group is written
/// to its offsets partition before the answer.
pub fn heartbeat(
    broker: &Broker,
    req: ConsumerGroupHeartbeatRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
    access: &Access,
) -> ConsumerGroupHeartbeatResponse {
    let group_id = req.group_id.0.as_str().to_string();
    if !access.allows_group(AclOperation::Read, &group_id) {
        return error(ResponseError::GroupAuthorizationFailed, None);
    }
    if let Some(names) = &req.subscribed_topic_names {
        if names
            .iter()
            .any(|n| !access.allows_topic(AclOperation::Describe, n.0.as_str()))
        {
            return error(ResponseError::TopicAuthorizationFailed, None);
        }
    }
    let settings = &broker.groups.settings().consumer;
    if let Err((code, message)) = validate(&req, version, &settings.assignors) {
        return error(code, Some(message));
    }
    if let Err(code) = broker.groups.coordinates(&group_id) {
        return error(code, None);
    }
    // v0: the coordinator names a joining member
    let member_id = if req.member_id.is_empty() {
        uuid::Uuid::new_v4().simple().to_string()
    } else {
        req.member_id.as_str().to_string()
    };
    let owned: Option<Assignment> = req.topic_partitions.as_ref().map(|tps| {
        let mut a = Assignment::new();
        for tp in tps {
            a.entry(tp.topic_id)
                .or_default()
                .extend(tp.partitions.iter().copied());
        }
        a.retain(|_, ps| !ps.is_empty());
        a
    });
    let hb = Heartbeat {
        member_id,
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|s| s.as_str().to_string()),
        rack_id: req.rack_id.as_ref().map(|s| s.as_str().to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: req
            .subscribed_topic_names
            .as_ref()
            .map(|n| n.iter().map(|t| t.0.as_str().to_string()).collect()),
        subscribed_topic_regex: req
            .subscribed_topic_regex
            .as_ref()
            .map(|s| s.as_str().to_string()),
        server_assignor: req.server_assignor.as_ref().map(|s| s.as_str().to_string()),
        owned,
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
    };
    let view = topics_view(broker);
    match broker
        .groups
        .consumer_heartbeat(&broker.topics, &view, &group_id, hb)
    {
        Err(code) => error(code, None),
        Ok(answer) => ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(str_bytes(&answer.member_id)))
            .with_member_epoch(answer.member_epoch)
            .with_heartbeat_interval_ms(answer.heartbeat_interval_ms)
            .with_assignment(answer.assignment.map(|a| {
                WireAssignment::default().with_topic_partitions(
                    a.into_iter()
                        .map(|(t, ps)| {
                            TopicPartitions::default()
                                .with_topic_id(t)
                                .with_partitions(ps.into_iter().collect())
                        })
                        .collect(),
                )
            })),
    }
}

fn described_partitions(
    a: &Assignment,
    names: &BTreeMap<uuid::Uuid, String>,
) -> describe::Assignment {
    describe::Assignment::default().with_topic_partitions(
        a.iter()
            .map(|(t, ps)| {
                describe::TopicPartitions::default()
                    .with_topic_id(*t)
                    .with_topic_name(TopicName(str_bytes(
                        names.get(t).map(String::as_str).unwrap_or(""),
                    )))
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}

fn described(g: &ConsumerGroup, broker: &Broker) -> DescribedGroup {
    let names: BTreeMap<uuid::Uuid, String> = topics_view(broker)
        .into_iter()
        .map(|(n, t)| (t.id, n))
        .collect();
    let settings = &broker.groups.settings().consumer;
    DescribedGroup::default()
        .with_group_state(str_bytes(crate::group::consumer::machine::state_name(g)))
        .with_group_epoch(g.epoch)
        .with_assignment_epoch(g.assignment_epoch)
        .with_assignor_name(str_bytes(&g.assignor(settings)))
        .with_members(
            g.members
                .values()
                .map(|m| {
                    describe::Member::default()
                        .with_member_id(str_bytes(&m.id))
                        .with_instance_id(m.instance_id.as_deref().map(str_bytes))
                        .with_rack_id(m.rack_id.as_deref().map(str_bytes))
                        .with_member_epoch(m.current.epoch)
                        .with_client_id(str_bytes(&m.client_id))
                        .with_client_host(str_bytes(&m.client_host))
                        .with_subscribed_topic_names(
                            m.subscribed_names
                                .iter()
                                .map(|n| TopicName(str_bytes(n)))
                                .collect(),
                        )
                        .with_subscribed_topic_regex(m.regex.as_deref().map(str_bytes))
                        .with_assignment(described_partitions(&m.current.assigned, &names))
                        .with_target_assignment(described_partitions(
                            &g.target.get(&m.id).cloned().unwrap_or_default(),
                            &names,
                        ))
                        // (v1) 0: a member of the classic protocol,
                        // 1: of the consumer protocol
                        .with_member_type(if m.classic.is_some() { 0 } else { 1 })
                })
                .collect(),
        )
}

/// ConsumerGroupDescribe: DESCRIBE on each group (else
/// GROUP_AUTHORIZATION_FAILED); a group that is not a consumer group is
/// GROUP_ID_NOT_FOUND, as in Kafka (the admin client then asks
/// DescribeGroups).
pub fn describe(
    broker: &Broker,
    req: ConsumerGroupDescribeRequest,
    access: &Access,
) -> ConsumerGroupDescribeResponse {
    let asked = req.include_authorized_operations;
    let groups = req
        .group_ids
        .into_iter()
        .map(|id| {
            let fail = |code: ResponseError, message: Option<String>| {
                DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_error_code(code.code())
                    .with_error_message(message.map(|m| str_bytes(&m)))
                    .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
            };
            if !access.allows_group(AclOperation::Describe, &id) {
                return fail(ResponseError::GroupAuthorizationFailed, None);
            }
            if let Err(code) = broker.groups.coordinates(id.0.as_str()) {
                return fail(code, None);
            }
            match broker.groups.consumer_group(id.0.as_str()) {
                Some(g) => described(&g, broker)
                    .with_group_id(id.clone())
                    .with_authorized_operations(access.authorized_operations(
                        asked,
                        ResourceType::Group,
                        id.0.as_str(),
                    )),
                None if broker.groups.describe(id.0.as_str()).is_some() => fail(
                    ResponseError::GroupIdNotFound,
                    Some(format!("Group {} is not a consumer group.", id.0.as_str())),
                ),
                None => fail(
                    ResponseError::GroupIdNotFound,
                    Some(format!("Group {} not found.", id.0.as_str())),
                ),
            }
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as Owned;
    use kafka_protocol::messages::GroupId;

    fn join() -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(str_bytes("g")))
            .with_member_id(str_bytes("m"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![TopicName(str_bytes("t"))]))
            .with_topic_partitions(Some(vec![]))
    }

    #[test]
    fn requests_are_validated_as_kafka_validates_them() {
        let assignors = vec!["uniform".to_string(), "range".to_string()];
        let code =
            |r: &ConsumerGroupHeartbeatRequest, v| validate(r, v, &assignors).map_err(|e| e.0);
        assert_eq!(code(&join(), 1), Ok(()));
        assert_eq!(
            code(&join().with_member_id(str_bytes("")), 1),
            Err(ResponseError::InvalidRequest)
        );
        assert_eq!(code(&join().with_member_id(str_bytes("")), 0), Ok(()));
        assert_eq!(
            code(&join().with_rebalance_timeout_ms(-1), 1),
            Err(ResponseError::InvalidRequest)
        );
        assert_eq!(
            code(
                &join().with_topic_partitions(Some(vec![Owned::default()])),
                1
            ),
            Err(ResponseError::InvalidRequest)
        );
        assert_eq!(
            code(&join().with_subscribed_topic_names(None), 1),
            Err(ResponseError::InvalidRequest)
        );
        assert_eq!(
            code(
                &join()
                    .with_subscribed_topic_names(None)
                    .with_subscribed_topic_regex(Some(str_bytes("t.*"))),
                1
            ),
            Ok(())
        );
        assert_eq!(
            code(&join().with_member_epoch(-3), 1),
            Err(ResponseError::InvalidRequest)
        );
        assert_eq!(
            code(&join().with_member_epoch(-2), 1),
            Err(ResponseError::InvalidRequest),
            "a static leave names its instance"
        );
        assert_eq!(
            code(&join().with_server_assignor(Some(str_bytes("sticky"))), 1),
            Err(ResponseError::UnsupportedAssignor)
        );
        assert_eq!(
            code(&join().with_server_assignor(Some(str_bytes("range"))), 1),
            Ok(())
        );
    }
}
