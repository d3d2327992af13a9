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

use super::str_bytes;
use crate::broker::Broker;
use crate::group::state::JoinRequest;
use crate::group::{CommitItem, FetchedOffset, FetchedOffsets};

fn opt_str(s: &Option<StrBytes>) -> Option<String> {
    s.as_ref().map(|v| v.as_str().to_string())
}

pub fn find_coordinator(
    broker: &Broker,
    req: FindCoordinatorRequest,
    version: i16,
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
            // a group: the leader of its __consumer_offsets partition
            0 => {
                let index = crate::group::offsets::partition_for(key.as_str(), offsets_partitions);
                image
                    .partition(crate::group::offsets::OFFSETS_TOPIC, index)
                    .map(|p| p.leader)
                    .and_then(|leader| image.broker(leader))
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
                    .ok_or(ResponseError::CoordinatorNotAvailable)
            }
            _ => Err(ResponseError::InvalidRequest),
        };
        match node {
            Ok(b) => c
                .with_node_id(BrokerId(b.id))
                .with_host(str_bytes(&b.host))
                .with_port(b.port),
            Err(code) => c
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(code.code())
                .with_error_message(Some(str_bytes(if code == ResponseError::InvalidRequest {
                    "unknown coordinator key type"
                } else {
                    "the coordinator is not available"
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

pub async fn join_group(
    broker: &Broker,
    req: JoinGroupRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
) -> JoinGroupResponse {
    let join = JoinRequest {
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
    };
    if let Err(code) = broker.groups.coordinates(req.group_id.0.as_str()) {
        return JoinGroupResponse::default()
            .with_error_code(code.code())
            .with_member_id(req.member_id)
            .with_generation_id(-1);
    }
    let mut r = broker.groups.join(req.group_id.0.as_str(), join).await;
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

pub async fn sync_group(broker: &Broker, req: SyncGroupRequest) -> SyncGroupResponse {
    if let Err(code) = broker.groups.coordinates(req.group_id.0.as_str()) {
        return SyncGroupResponse::default().with_error_code(code.code());
    }
    let assignments = req
        .assignments
        .iter()
        .map(|a| (a.member_id.as_str().to_string(), a.assignment.clone()))
        .collect();
    let instance = opt_str(&req.group_instance_id);
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

pub fn heartbeat(broker: &Broker, req: HeartbeatRequest) -> HeartbeatResponse {
    if let Err(code) = broker.groups.coordinates(req.group_id.0.as_str()) {
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

pub fn leave_group(broker: &Broker, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
    if let Err(code) = broker.groups.coordinates(req.group_id.0.as_str()) {
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
    match broker.groups.leave(req.group_id.0.as_str(), &members) {
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

pub fn offset_commit(broker: &Broker, req: OffsetCommitRequest) -> OffsetCommitResponse {
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
    let codes = match broker.groups.coordinates(req.group_id.0.as_str()) {
        Err(code) => vec![code.code(); items.len()],
        Ok(()) => broker.groups.commit(
            &broker.topics,
            &|topic, partition| broker.image().partition(topic, partition).is_some(),
            req.group_id.0.as_str(),
            req.member_id.as_str(),
            instance.as_deref(),
            req.generation_id_or_member_epoch,
            &items,
        ),
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

/// TxnOffsetCommit (versions 0-4): offsets a transaction commits for a
/// group (a producer's `sendOffsetsToTransaction`), pending until the
/// transaction ends (see `group::txn_offsets`). The group's members are
/// checked as for OffsetCommit when the request names one (v3+, KIP-447).
/// The transaction must have added the group's offsets partition
/// (AddOffsetsToTxn): see [`super::transactions::verify_offsets_added`].
pub fn txn_offset_commit(broker: &Broker, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse {
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
    let checked = broker.groups.coordinates(group).and_then(|()| {
        super::transactions::verify_offsets_added(
            broker,
            req.transactional_id.0.as_str(),
            producer,
            group,
        )
    });
    let codes = match checked {
        Err(code) => vec![code.code(); items.len()],
        Ok(()) => broker.groups.commit_transactional(
            &broker.topics,
            &|topic, partition| broker.image().partition(topic, partition).is_some(),
            group,
            producer,
            req.member_id.as_str(),
            instance.as_deref(),
            req.generation_id,
            &items,
        ),
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

fn fetch_group(
    broker: &Broker,
    group: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
) -> FetchedOffsets {
    broker.groups.fetch_offsets(group, wanted)
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

pub fn offset_fetch(broker: &Broker, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    // the field exists from v7; older requests decode it as false
    let require_stable = req.require_stable;
    if version >= 8 {
        let groups = req
            .groups
            .into_iter()
            .map(|g| {
                if let Err(code) = broker.groups.coordinates(g.group_id.0.as_str()) {
                    return OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(code.code());
                }
                let wanted = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.as_str().to_string(), t.partition_indexes))
                        .collect()
                });
                let topics = fetch_group(broker, g.group_id.0.as_str(), wanted)
                    .into_iter()
                    .map(|(topic, parts)| {
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(str_bytes(&topic)))
                            .with_partitions(
                                parts
                                    .into_iter()
                                    .map(|f| {
                                        let p = f.partition;
                                        let (offset, epoch, meta, code) =
                                            committed_fields(f, require_stable);
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
    if let Err(code) = broker.groups.coordinates(req.group_id.0.as_str()) {
        return OffsetFetchResponse::default().with_error_code(code.code());
    }
    let wanted = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.as_str().to_string(), t.partition_indexes))
            .collect()
    });
    let topics = fetch_group(broker, req.group_id.0.as_str(), wanted)
        .into_iter()
        .map(|(topic, parts)| {
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(str_bytes(&topic)))
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|f| {
                            let p = f.partition;
                            let (offset, epoch, meta, code) = committed_fields(f, require_stable);
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

pub fn offset_delete(broker: &Broker, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let wanted: Vec<(String, Vec<i32>)> = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.as_str().to_string(),
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    if let Err(code) = broker.groups.coordinates(req.group_id.0.as_str()) {
        return OffsetDeleteResponse::default().with_error_code(code.code());
    }
    match broker
        .groups
        .delete_offsets(&broker.topics, req.group_id.0.as_str(), &wanted)
    {
        Err(e) => OffsetDeleteResponse::default().with_error_code(e.code()),
        Ok(result) => OffsetDeleteResponse::default().with_topics(
            result
                .into_iter()
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

pub fn describe_groups(broker: &Broker, req: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let groups = req
        .groups
        .into_iter()
        .map(|id: GroupId| {
            let base = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(i32::MIN);
            if let Err(code) = broker.groups.coordinates(id.0.as_str()) {
                return base.with_error_code(code.code());
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

pub fn list_groups(broker: &Broker, req: ListGroupsRequest) -> ListGroupsResponse {
    let filter: Vec<String> = req
        .states_filter
        .iter()
        .map(|s| s.as_str().to_lowercase())
        .collect();
    // v5 (KIP-848): a filter on the group type; every group here is a
    // classic one
    let classic_wanted = req.types_filter.is_empty()
        || req
            .types_filter
            .iter()
            .any(|t| t.as_str().eq_ignore_ascii_case("classic"));
    let groups = broker
        .groups
        .list()
        .into_iter()
        .filter(|_| classic_wanted)
        .filter(|(_, _, state)| filter.is_empty() || filter.contains(&state.to_lowercase()))
        .map(|(id, protocol_type, state)| {
            ListedGroup::default()
                .with_group_id(GroupId(str_bytes(&id)))
                .with_protocol_type(str_bytes(&protocol_type))
                .with_group_state(str_bytes(state))
                .with_group_type(str_bytes("classic"))
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

pub fn delete_groups(broker: &Broker, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let results = req
        .groups_names
        .into_iter()
        .map(|id| {
            let code = match broker
                .groups
                .coordinates(id.0.as_str())
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
