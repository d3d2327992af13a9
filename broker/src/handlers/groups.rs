//! The group APIs on the wire: FindCoordinator, JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete,
//! DescribeGroups, ListGroups, DeleteGroups. Decisions live in `group`.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::group::state::{JoinRequest, JoinResult};
use crate::group::{CommitItem, FetchedOffset, FetchedOffsets};
use crate::security::acl::{AclOperation, ResourceType, AUTHORIZED_OPERATIONS_OMITTED};

fn opt_str(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|v| v.as_str().to_string())
}

/// FindCoordinator; each key needs DESCRIBE on its group or transactional
/// id (else GROUP_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED). The
/// coordinator is given with its endpoint of `listener` (the request's);
/// one without that listener is not available to this client, as in
/// Kafka.
pub fn find_coordinator(
    broker: &Broker,
    req: FindCoordinatorRequest,
    version: i16,
    access: &Access,
    listener: &str,
) -> FindCoordinatorResponse {
    if req.key_type == 0 && broker.controller_link().is_some() {
        // Cluster mode: the offsets topic is created, through the
        // controller, by the first FindCoordinator (as Kafka does).
        if let Err(e) = crate::controller::Controller::new(broker).ensure_offsets_topic() {
            tracing::warn!(error = %e, "cannot create __consumer_offsets yet");
        }
    }
    if req.key_type == 1 {
        // __transaction_state likewise, by the first transactional lookup
        // (standalone too: this broker then loads every partition).
        if let Err(e) = crate::controller::Controller::new(broker).ensure_transaction_topic() {
            tracing::warn!(error = %e, "cannot create __transaction_state yet");
        }
    }
    let image = broker.image();
    let offsets_partitions = image
        .topic(crate::group::offsets::OFFSETS_TOPIC)
        .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX))
        .unwrap_or(broker.groups.settings().offsets_partitions);
    let coordinator = |key: StrBytes| {
        let c = Coordinator::default().with_key(key.clone());
        let node = match req.key_type {
            // DESCRIBE on the group or transactional id, as Kafka asks
            0 if !access.allows_group(AclOperation::Describe, &key) => {
                Err(ResponseError::GroupAuthorizationFailed)
            }
            1 if !access.allows_transactional_id(AclOperation::Describe, &key) => {
                Err(ResponseError::TransactionalIdAuthorizationFailed)
            }
            // a group: the leader of its __consumer_offsets partition
            0 => {
                let index = crate::group::offsets::partition_for(key.as_str(), offsets_partitions);
                image
                    .partition(crate::group::offsets::OFFSETS_TOPIC, index)
                    .map(|p| p.leader)
                    .and_then(|leader| image.broker(leader))
                    .and_then(|b| Some((b.id, b.endpoint(listener)?)))
                    .ok_or(ResponseError::CoordinatorNotAvailable)
            }
            // a transactional id: the leader of its __transaction_state
            // partition
            1 => {
                let index = broker.txns.partition_of(key.as_str());
                image
                    .partition(crate::txn::vocab::TRANSACTION_STATE_TOPIC, index)
                    .map(|p| p.leader)
                    .and_then(|leader| image.broker(leader))
                    .and_then(|b| Some((b.id, b.endpoint(listener)?)))
                    .ok_or(ResponseError::CoordinatorNotAvailable)
            }
            _ => Err(ResponseError::InvalidRequest),
        };
        match node {
            Ok((id, (host, port))) => c
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(host))
                .with_port(port),
            Err(code) => c
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(code.code())
                .with_error_message(Some(str_bytes(match code {
                    ResponseError::InvalidRequest => "unknown coordinator key type",
                    ResponseError::GroupAuthorizationFailed => "no DESCRIBE on the group",
                    ResponseError::TransactionalIdAuthorizationFailed => {
                        "no DESCRIBE on the transactional id"
                    }
                    _ => "the coordinator is not available",
                }))),
        }
    };
    if version >= 4 {
        return FindCoordinatorResponse::default()
            .with_coordinators(req.coordinator_keys.into_iter().map(coordinator).collect());
    }
    let c = coordinator(req.key);
    FindCoordinatorResponse::default()
        .with_error_code(c.error_code)
        .with_error_message(c.error_message)
        .with_node_id(c.node_id)
        .with_host(c.host)
        .with_port(c.port)
}

/// The JoinGroup request as the coordinator takes it.
fn join_request(
    req: &JoinGroupRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
) -> JoinRequest {
    JoinRequest {
        member_id: req.member_id.as_str().to_string(),
        group_instance_id: opt_str(&req.group_instance_id),
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
        session_timeout_ms: req.session_timeout_ms,
        // v0 had no rebalance timeout: it was the session timeout.
        rebalance_timeout_ms: if version == 0 {
            req.session_timeout_ms
        } else {
            req.rebalance_timeout_ms
        },
        protocol_type: req.protocol_type.as_str().to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.as_str().to_string(), p.metadata.clone()))
            .collect(),
        require_known_member_id: version >= 4,
    }
}

/// JoinGroup of a classic member for a consumer group (blocking: the
/// join is written); `Err` gives the request back when the group is no
/// consumer group (any more), for [`join_group`].
pub fn join_consumer_group(
    broker: &Broker,
    req: JoinGroupRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
    access: &Access,
) -> Result<JoinGroupResponse, Box<JoinGroupRequest>> {
    let refused = access
        .allows_group(AclOperation::Read, &req.group_id)
        .then_some(())
        .ok_or(ResponseError::GroupAuthorizationFailed)
        .and_then(|()| broker.groups.coordinates(req.group_id.0.as_str()));
    if refused.is_err() {
        return Err(Box::new(req));
    }
    let join = join_request(&req, version, client_id, client_host);
    let view = super::consumer_groups::topics_view(broker);
    match broker
        .groups
        .classic_join_consumer(&broker.topics, &view, req.group_id.0.as_str(), join)
    {
        Some(r) => Ok(join_response(r, version)),
        None => Err(Box::new(req)),
    }
}

pub async fn join_group(
    broker: &Broker,
    req: JoinGroupRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
    access: &Access,
) -> JoinGroupResponse {
    if !access.allows_group(AclOperation::Read, &req.group_id) {
        return JoinGroupResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code())
            .with_member_id(req.member_id)
            .with_generation_id(-1);
    }
    let join = join_request(&req, version, client_id, client_host);
    if let Err(code) = broker.groups.coordinates(req.group_id.0.as_str()) {
        return JoinGroupResponse::default()
            .with_error_code(code.code())
            .with_member_id(req.member_id)
            .with_generation_id(-1);
    }
    let r = broker.groups.join(req.group_id.0.as_str(), join).await;
    join_response(r, version)
}

fn join_response(mut r: JoinResult, version: i16) -> JoinGroupResponse {
    // Before v9 a leader cannot be told to skip the assignment: it gets no
    // members, and the group's stored assignment is what SyncGroup returns.
    if r.skip_assignment && version < 9 {
        r.members.clear();
        r.skip_assignment = false;
    }
    JoinGroupResponse::default()
        .with_error_code(r.error)
        .with_generation_id(r.generation_id)
        .with_protocol_type(r.protocol_type.as_deref().map(str_bytes))
        .with_protocol_name(Some(str_bytes(r.protocol_name.as_deref().unwrap_or(""))))
        .with_leader(str_bytes(&r.leader))
        .with_skip_assignment(r.skip_assignment)
        .with_member_id(str_bytes(&r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(&m.member_id))
                        .with_group_instance_id(m.group_instance_id.as_deref().map(str_bytes))
                        .with_metadata(m.metadata)
                })
                .collect(),
        )
}

pub async fn sync_group(
    broker: &Broker,
    req: SyncGroupRequest,
    access: &Access,
) -> SyncGroupResponse {
    if let Err(code) = group_read(access, &req.group_id)
        .and_then(|()| broker.groups.coordinates(req.group_id.0.as_str()))
    {
        return SyncGroupResponse::default().with_error_code(code.code());
    }
    let assignments = req
        .assignments
        .iter()
        .map(|a| (a.member_id.as_str().to_string(), a.assignment.clone()))
        .collect();
    let instance = opt_str(&req.group_instance_id);
    if broker.groups.is_consumer_group(req.group_id.0.as_str()) {
        // a classic member of a consumer group
        let answer = broker.groups.classic_sync_consumer(
            &super::consumer_groups::topics_view(broker),
            req.group_id.0.as_str(),
            req.member_id.as_str(),
            instance.as_deref(),
            req.generation_id,
            req.protocol_type.as_ref().map(|s| s.as_str()),
            req.protocol_name.as_ref().map(|s| s.as_str()),
        );
        if let Some(r) = answer {
            return SyncGroupResponse::default()
                .with_error_code(r.error)
                .with_protocol_type(r.protocol_type.as_deref().map(str_bytes))
                .with_protocol_name(r.protocol_name.as_deref().map(str_bytes))
                .with_assignment(r.assignment);
        }
    }
    let r = broker
        .groups
        .sync(
            req.group_id.0.as_str(),
            req.member_id.as_str(),
            instance.as_deref(),
            req.generation_id,
            req.protocol_type.as_ref().map(|s| s.as_str()),
            req.protocol_name.as_ref().map(|s| s.as_str()),
            assignments,
        )
        .await;
    SyncGroupResponse::default()
        .with_error_code(r.error)
        .with_protocol_type(r.protocol_type.as_deref().map(str_bytes))
        .with_protocol_name(r.protocol_name.as_deref().map(str_bytes))
        .with_assignment(r.assignment)
}

pub fn heartbeat(broker: &Broker, req: HeartbeatRequest, access: &Access) -> HeartbeatResponse {
    if let Err(code) = group_read(access, &req.group_id)
        .and_then(|()| broker.groups.coordinates(req.group_id.0.as_str()))
    {
        return HeartbeatResponse::default().with_error_code(code.code());
    }
    let instance = opt_str(&req.group_instance_id);
    let code = broker.groups.heartbeat(
        req.group_id.0.as_str(),
        req.member_id.as_str(),
        instance.as_deref(),
        req.generation_id,
    );
    HeartbeatResponse::default().with_error_code(code)
}

pub fn leave_group(
    broker: &Broker,
    req: LeaveGroupRequest,
    version: i16,
    access: &Access,
) -> LeaveGroupResponse {
    if let Err(code) = group_read(access, &req.group_id)
        .and_then(|()| broker.groups.coordinates(req.group_id.0.as_str()))
    {
        return LeaveGroupResponse::default().with_error_code(code.code());
    }
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| {
                (
                    m.member_id.as_str().to_string(),
                    opt_str(&m.group_instance_id),
                )
            })
            .collect()
    } else {
        vec![(req.member_id.as_str().to_string(), None)]
    };
    let consumer = broker
        .groups
        .is_consumer_group(req.group_id.0.as_str())
        .then(|| {
            let view = super::consumer_groups::topics_view(broker);
            broker.groups.classic_leave_consumer(
                &broker.topics,
                &view,
                req.group_id.0.as_str(),
                &members,
            )
        })
        .flatten();
    let left = match consumer {
        Some(r) => r,
        None => broker.groups.leave(req.group_id.0.as_str(), &members),
    };
    match left {
        Err(e) => LeaveGroupResponse::default().with_error_code(e.code()),
        Ok(codes) if version < 3 => {
            LeaveGroupResponse::default().with_error_code(codes.first().copied().unwrap_or(0))
        }
        Ok(codes) => LeaveGroupResponse::default().with_members(
            members
                .into_iter()
                .zip(codes)
                .map(|((id, instance), code)| {
                    MemberResponse::default()
                        .with_member_id(str_bytes(&id))
                        .with_group_instance_id(instance.as_deref().map(str_bytes))
                        .with_error_code(code)
                })
                .collect(),
        ),
    }
}

/// OffsetCommit; it needs READ on the group (else every partition
/// GROUP_AUTHORIZATION_FAILED) and on each topic (else its partitions
/// TOPIC_AUTHORIZATION_FAILED), as in Kafka.
pub fn offset_commit(
    broker: &Broker,
    req: OffsetCommitRequest,
    version: i16,
    access: &Access,
) -> OffsetCommitResponse {
    let items: Vec<CommitItem> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| CommitItem {
                topic: t.name.0.as_str().to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: opt_str(&p.committed_metadata),
            })
        })
        .collect();
    let instance = opt_str(&req.group_instance_id);
    let anonymous = req.generation_id_or_member_epoch < 0 && req.member_id.is_empty();
    let checked = group_read(access, &req.group_id)
        .and_then(|()| broker.groups.coordinates(req.group_id.0.as_str()))
        .and_then(|()| {
            // as Kafka: a member of a consumer group commits with v9+
            // (the version that carries its member epoch), unless it
            // speaks the classic protocol
            if version < 9
                && !anonymous
                && broker
                    .groups
                    .commit_requires_v9(req.group_id.0.as_str(), req.member_id.as_str())
            {
                Err(ResponseError::UnsupportedVersion)
            } else {
                Ok(())
            }
        });
    let codes = match checked {
        Err(code) => vec![code.code(); items.len()],
        Ok(()) => commit_readable(access, &items, |items| {
            broker.groups.commit(
                &broker.topics,
                &|topic, partition| broker.image().partition(topic, partition).is_some(),
                req.group_id.0.as_str(),
                req.member_id.as_str(),
                instance.as_deref(),
                req.generation_id_or_member_epoch,
                items,
            )
        }),
    };
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().unwrap_or(0))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// TxnOffsetCommit (versions 0-5): offsets a transaction commits for a
/// group (a producer's `sendOffsetsToTransaction`), pending until the
/// transaction ends (see `group::txn_offsets`). The group's members are
/// checked as for OffsetCommit when the request names one (v3+, KIP-447).
/// The transaction must have added the group's offsets partition
/// (AddOffsetsToTxn), or from v5 (transaction version 2) the commit adds
/// it: see [`super::transactions::verify_offsets_added`]. It needs WRITE
/// on the transactional id, READ on the group and on each topic (Kafka's
/// rules and errors).
pub fn txn_offset_commit(
    broker: &Broker,
    req: TxnOffsetCommitRequest,
    version: i16,
    access: &Access,
) -> TxnOffsetCommitResponse {
    let items: Vec<CommitItem> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| CommitItem {
                topic: t.name.0.as_str().to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: opt_str(&p.committed_metadata),
            })
        })
        .collect();
    let group = req.group_id.0.as_str();
    let producer = (req.producer_id.0, req.producer_epoch);
    let instance = opt_str(&req.group_instance_id);
    let checked = if access.allows_transactional_id(AclOperation::Write, &req.transactional_id) {
        Ok(())
    } else {
        Err(ResponseError::TransactionalIdAuthorizationFailed)
    };
    let checked = checked.and_then(|()| group_read(access, &req.group_id));
    let checked = checked
        .and_then(|()| broker.groups.coordinates(group))
        .and_then(|()| {
            super::transactions::verify_offsets_added(
                broker,
                req.transactional_id.0.as_str(),
                producer,
                group,
                version,
            )
        });
    let codes = match checked {
        Err(code) => vec![code.code(); items.len()],
        Ok(()) => commit_readable(access, &items, |items| {
            broker.groups.commit_transactional(
                &broker.topics,
                &|topic, partition| broker.image().partition(topic, partition).is_some(),
                group,
                producer,
                req.member_id.as_str(),
                instance.as_deref(),
                req.generation_id,
                items,
            )
        }),
    };
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().unwrap_or(0))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// READ on `group`, as the group APIs need it.
fn group_read(access: &Access, group: &str) -> Result<(), ResponseError> {
    if access.allows_group(AclOperation::Read, group) {
        Ok(())
    } else {
        Err(ResponseError::GroupAuthorizationFailed)
    }
}

/// The codes of commit `items`, in their order: `commit` runs on those of
/// topics the client may READ, the others are TOPIC_AUTHORIZATION_FAILED.
fn commit_readable(
    access: &Access,
    items: &[CommitItem],
    commit: impl FnOnce(&[CommitItem]) -> Vec<i16>,
) -> Vec<i16> {
    let denied = access.denied_topics(AclOperation::Read, items.iter().map(|i| i.topic.as_str()));
    if denied.is_empty() {
        return commit(items);
    }
    let allowed: Vec<CommitItem> = items
        .iter()
        .filter(|i| !denied.contains(&i.topic))
        .cloned()
        .collect();
    let mut codes = commit(&allowed).into_iter();
    items
        .iter()
        .map(|i| {
            if denied.contains(&i.topic) {
                ResponseError::TopicAuthorizationFailed.code()
            } else {
                codes.next().unwrap_or(0)
            }
        })
        .collect()
}

/// The committed offsets of `group` the client may see, and the topics
/// asked for by name it may not DESCRIBE (answered
/// TOPIC_AUTHORIZATION_FAILED per partition); such topics are left out
/// of an "all topics" answer, as Kafka does.
fn fetch_group(
    broker: &Broker,
    access: &Access,
    group: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
) -> (FetchedOffsets, Vec<(String, Vec<i32>)>) {
    let may_describe = |topic: &str| access.allows_topic(AclOperation::Describe, topic);
    match wanted {
        None => {
            let mut fetched = broker.groups.fetch_offsets(group, None);
            fetched.retain(|(topic, _)| may_describe(topic));
            (fetched, Vec::new())
        }
        Some(wanted) => {
            let (visible, denied): (Vec<_>, Vec<_>) = wanted
                .into_iter()
                .partition(|(topic, _)| may_describe(topic));
            (broker.groups.fetch_offsets(group, Some(visible)), denied)
        }
    }
}

/// Offset, leader epoch, metadata and error code of a fetched offset:
/// Kafka's "nothing committed" values, and UNSTABLE_OFFSET_COMMIT, when
/// `require_stable` and an open transaction holds an offset for it
/// (KIP-447: a read_committed consumer waits for the transaction to end).
fn committed_fields(f: FetchedOffset, require_stable: bool) -> (i64, i32, Option<StrBytes>, i16) {
    if require_stable && f.pending_transaction {
        return (
            -1,
            -1,
            Some(str_bytes("")),
            ResponseError::UnstableOffsetCommit.code(),
        );
    }
    match f.committed {
        Some(c) => (c.offset, c.leader_epoch, Some(str_bytes(&c.metadata)), 0),
        None => (-1, -1, Some(str_bytes("")), 0),
    }
}

/// One partition of an OffsetFetch answer: (partition, offset, leader
/// epoch, metadata, error code).
type OffsetRow = (i32, i64, i32, Option<StrBytes>, i16);

/// The rows of an OffsetFetch answer by topic: what [`fetch_group`] found
/// and the partitions of `denied` topics, TOPIC_AUTHORIZATION_FAILED.
fn offset_rows(
    fetched: FetchedOffsets,
    denied: Vec<(String, Vec<i32>)>,
    require_stable: bool,
) -> Vec<(String, Vec<OffsetRow>)> {
    let found = fetched.into_iter().map(|(topic, parts)| {
        let rows = parts
            .into_iter()
            .map(|f| {
                let p = f.partition;
                let (offset, epoch, meta, code) = committed_fields(f, require_stable);
                (p, offset, epoch, meta, code)
            })
            .collect();
        (topic, rows)
    });
    let refused = denied.into_iter().map(|(topic, partitions)| {
        let code = ResponseError::TopicAuthorizationFailed.code();
        let rows = partitions
            .into_iter()
            .map(|p| (p, -1, -1, Some(str_bytes("")), code))
            .collect();
        (topic, rows)
    });
    found.chain(refused).collect()
}

/// OffsetFetch; each group needs DESCRIBE on it (else
/// GROUP_AUTHORIZATION_FAILED) and each topic DESCRIBE ([`fetch_group`]).
pub fn offset_fetch(
    broker: &Broker,
    req: OffsetFetchRequest,
    version: i16,
    access: &Access,
) -> OffsetFetchResponse {
    // the field exists from v7; older requests decode it as false
    let require_stable = req.require_stable;
    let group_described = |group: &str| {
        if access.allows_group(AclOperation::Describe, group) {
            broker.groups.coordinates(group)
        } else {
            Err(ResponseError::GroupAuthorizationFailed)
        }
    };
    if version >= 8 {
        let groups = req
            .groups
            .into_iter()
            .map(|g| {
                // v9: a consumer group member's epoch is checked
                let checked = group_described(g.group_id.0.as_str()).and_then(|()| {
                    broker.groups.check_consumer_fetch(
                        g.group_id.0.as_str(),
                        g.member_id.as_ref().map(|m| m.as_str()),
                        g.member_epoch,
                    )
                });
                if let Err(code) = checked {
                    return OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(code.code());
                }
                let wanted = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.as_str().to_string(), t.partition_indexes))
                        .collect()
                });
                let (fetched, denied) = fetch_group(broker, access, g.group_id.0.as_str(), wanted);
                let topics = offset_rows(fetched, denied, require_stable)
                    .into_iter()
                    .map(|(topic, rows)| {
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(str_bytes(&topic)))
                            .with_partitions(
                                rows.into_iter()
                                    .map(|(p, offset, epoch, meta, code)| {
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(offset)
                                            .with_committed_leader_epoch(epoch)
                                            .with_metadata(meta)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id)
                    .with_topics(topics)
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    if let Err(code) = group_described(req.group_id.0.as_str()) {
        return OffsetFetchResponse::default().with_error_code(code.code());
    }
    let wanted = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.as_str().to_string(), t.partition_indexes))
            .collect()
    });
    let (fetched, denied) = fetch_group(broker, access, req.group_id.0.as_str(), wanted);
    let topics = offset_rows(fetched, denied, require_stable)
        .into_iter()
        .map(|(topic, rows)| {
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(str_bytes(&topic)))
                .with_partitions(
                    rows.into_iter()
                        .map(|(p, offset, epoch, meta, code)| {
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(meta)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

/// OffsetDelete; it needs DELETE on the group (else
/// GROUP_AUTHORIZATION_FAILED) and READ on each topic (else its
/// partitions TOPIC_AUTHORIZATION_FAILED), as in Kafka.
pub fn offset_delete(
    broker: &Broker,
    req: OffsetDeleteRequest,
    access: &Access,
) -> OffsetDeleteResponse {
    let (wanted, denied): (Vec<(String, Vec<i32>)>, Vec<_>) = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.as_str().to_string(),
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .partition(|(topic, _)| access.allows_topic(AclOperation::Read, topic));
    if !access.allows_group(AclOperation::Delete, &req.group_id) {
        return OffsetDeleteResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    if let Err(code) = broker.groups.coordinates(req.group_id.0.as_str()) {
        return OffsetDeleteResponse::default().with_error_code(code.code());
    }
    let refused = denied.into_iter().map(|(topic, partitions)| {
        let code = ResponseError::TopicAuthorizationFailed.code();
        (
            topic,
            partitions
                .into_iter()
                .map(|p| (p, code))
                .collect::<Vec<_>>(),
        )
    });
    match broker
        .groups
        .delete_offsets(&broker.topics, req.group_id.0.as_str(), &wanted)
    {
        Err(e) => OffsetDeleteResponse::default().with_error_code(e.code()),
        Ok(result) => OffsetDeleteResponse::default().with_topics(
            result
                .into_iter()
                .chain(refused)
                .map(|(topic, parts)| {
                    OffsetDeleteResponseTopic::default()
                        .with_name(TopicName(str_bytes(&topic)))
                        .with_partitions(
                            parts
                                .into_iter()
                                .map(|(p, code)| {
                                    OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_error_code(code)
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}

/// DescribeGroups. Each group needs DESCRIBE on it (else
/// GROUP_AUTHORIZATION_FAILED). A group described without error carries
/// its authorized operations when asked (v3+, [`Access`]), as Kafka's
/// does, the `Dead` answer for an unknown group included.
pub fn describe_groups(
    broker: &Broker,
    req: DescribeGroupsRequest,
    access: &Access,
) -> DescribeGroupsResponse {
    let asked = req.include_authorized_operations;
    let groups = req
        .groups
        .into_iter()
        .map(|id: GroupId| {
            let base = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
            if !access.allows_group(AclOperation::Describe, &id) {
                return base.with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            if let Err(code) = broker.groups.coordinates(id.0.as_str()) {
                return base.with_error_code(code.code());
            }
            let base = base.with_authorized_operations(access.authorized_operations(
                asked,
                ResourceType::Group,
                id.0.as_str(),
            ));
            if broker.groups.is_consumer_group(id.0.as_str()) {
                // as Kafka before DescribeGroups v6: a consumer group is
                // not a classic one, so this API sees none
                return base.with_group_state(str_bytes("Dead"));
            }
            match broker.groups.describe(id.0.as_str()) {
                None => base.with_group_state(str_bytes("Dead")),
                Some(d) => base
                    .with_group_state(str_bytes(d.state))
                    .with_protocol_type(str_bytes(&d.protocol_type))
                    .with_protocol_data(str_bytes(&d.protocol))
                    .with_members(
                        d.members
                            .iter()
                            .map(|m| {
                                let metadata = m
                                    .protocols
                                    .iter()
                                    .find(|(n, _)| *n == d.protocol)
                                    .map(|(_, b)| b.clone())
                                    .unwrap_or_default();
                                DescribedGroupMember::default()
                                    .with_member_id(str_bytes(&m.id))
                                    .with_group_instance_id(
                                        m.group_instance_id.as_deref().map(str_bytes),
                                    )
                                    .with_client_id(str_bytes(&m.client_id))
                                    .with_client_host(str_bytes(&m.client_host))
                                    .with_member_metadata(metadata)
                                    .with_member_assignment(m.assignment.clone())
                            })
                            .collect(),
                    ),
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

/// ListGroups: every group with DESCRIBE on the cluster, else those the
/// client may DESCRIBE (Kafka's rule).
pub fn list_groups(broker: &Broker, req: ListGroupsRequest, access: &Access) -> ListGroupsResponse {
    let all_visible = access.allows_cluster(AclOperation::Describe);
    let filter: Vec<String> = req
        .states_filter
        .iter()
        .map(|s| s.as_str().to_lowercase())
        .collect();
    // v5 (KIP-848): a filter on the group type, `classic` or `consumer`
    let types: Vec<String> = req
        .types_filter
        .iter()
        .map(|t| t.as_str().to_lowercase())
        .collect();
    let groups = broker
        .groups
        .list()
        .into_iter()
        .filter(|(_, _, _, kind)| types.is_empty() || types.iter().any(|t| t == kind))
        .filter(|(id, _, _, _)| all_visible || access.allows_group(AclOperation::Describe, id))
        .filter(|(_, _, state, _)| filter.is_empty() || filter.contains(&state.to_lowercase()))
        .map(|(id, protocol_type, state, kind)| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(&id)))
                .with_protocol_type(str_bytes(&protocol_type))
                .with_group_state(str_bytes(state))
                .with_group_type(str_bytes(kind))
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

/// DeleteGroups; each group needs DELETE on it (else
/// GROUP_AUTHORIZATION_FAILED).
pub fn delete_groups(
    broker: &Broker,
    req: DeleteGroupsRequest,
    access: &Access,
) -> DeleteGroupsResponse {
    let results = req
        .groups_names
        .into_iter()
        .map(|id| {
            let allowed = if access.allows_group(AclOperation::Delete, &id) {
                Ok(())
            } else {
                Err(ResponseError::GroupAuthorizationFailed)
            };
            let code = match allowed
                .and_then(|()| broker.groups.coordinates(id.0.as_str()))
                .and_then(|()| broker.groups.delete_group(&broker.topics, id.0.as_str()))
            {
                Ok(()) => 0,
                Err(e) => e.code(),
            };
            DeletableGroupResult::default()
                .with_group_id(id)
                .with_error_code(code)
        })
        .collect();
    DeleteGroupsResponse::default().with_results(results)
}
