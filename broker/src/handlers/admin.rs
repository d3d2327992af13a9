//! Topic administration: CreateTopics, DeleteTopics, CreatePartitions,
//! DeleteRecords, DescribeCluster. The decisions live in `topics` (and,
//! for DescribeCluster's authorized operations, in `super::metadata`);
//! this module translates requests and results.
//!
//! CreateTopics, DeleteTopics and CreatePartitions create and remove files,
//! map indexes, fsync and rewrite the metadata document: they run on
//! tokio's blocking pool (`*_off_runtime`), never on a runtime worker, so a
//! 3,000-partition CreateTopics does not stall other connections. Their
//! bodies stay synchronous.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteRecordsRequest, DeleteRecordsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse, DescribeClusterRequest, DescribeClusterResponse, TopicName,
};

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::error::{storage_error_code, TopicError};
use crate::security::acl::AclOperation;
use crate::topic_config;

/// Runs `f` on tokio's blocking pool; `Err` if it panicked.
async fn off_runtime<T: Send + 'static>(
    broker: &Arc<Broker>,
    f: impl FnOnce(&Broker) -> T + Send + 'static,
) -> Result<T, String> {
    let b = broker.clone();
    tokio::task::spawn_blocking(move || f(&b))
        .await
        .map_err(|e| format!("the request handler failed: {e}"))
}

/// [`create_topics`] off the runtime's worker threads.
pub async fn create_topics_off_runtime(
    broker: &Arc<Broker>,
    req: CreateTopicsRequest,
    version: i16,
    access: Access,
) -> CreateTopicsResponse {
    let names: Vec<TopicName> = req.topics.iter().map(|t| t.name.clone()).collect();
    match off_runtime(broker, move |b| create_topics(b, req, version, &access)).await {
        Ok(resp) => resp,
        Err(msg) => CreateTopicsResponse::default().with_topics(
            names
                .into_iter()
                .map(|n| {
                    CreatableTopicResult::default()
                        .with_name(n)
                        .with_error_code(ResponseError::UnknownServerError.code())
                        .with_error_message(Some(str_bytes(&msg)))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                })
                .collect(),
        ),
    }
}

/// [`delete_topics`] off the runtime's worker threads.
pub async fn delete_topics_off_runtime(
    broker: &Arc<Broker>,
    req: DeleteTopicsRequest,
    version: i16,
    access: Access,
) -> DeleteTopicsResponse {
    let targets: Vec<(Option<TopicName>, uuid::Uuid)> = if version >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.clone(), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.clone()), uuid::Uuid::nil()))
            .collect()
    };
    match off_runtime(broker, move |b| delete_topics(b, req, version, &access)).await {
        Ok(resp) => resp,
        Err(msg) => DeleteTopicsResponse::default().with_responses(
            targets
                .into_iter()
                .map(|(name, id)| {
                    DeletableTopicResult::default()
                        .with_name(name)
                        .with_topic_id(id)
                        .with_error_code(ResponseError::UnknownServerError.code())
                        .with_error_message(Some(str_bytes(&msg)))
                })
                .collect(),
        ),
    }
}

/// [`create_partitions`] off the runtime's worker threads.
pub async fn create_partitions_off_runtime(
    broker: &Arc<Broker>,
    req: CreatePartitionsRequest,
    access: Access,
) -> CreatePartitionsResponse {
    let names: Vec<TopicName> = req.topics.iter().map(|t| t.name.clone()).collect();
    match off_runtime(broker, move |b| create_partitions(b, req, &access)).await {
        Ok(resp) => resp,
        Err(msg) => CreatePartitionsResponse::default().with_results(
            names
                .into_iter()
                .map(|n| {
                    CreatePartitionsTopicResult::default()
                        .with_name(n)
                        .with_error_code(ResponseError::UnknownServerError.code())
                        .with_error_message(Some(str_bytes(&msg)))
                })
                .collect(),
        ),
    }
}

fn ids(replicas: &[BrokerId]) -> Vec<i32> {
    replicas.iter().map(|b| b.0).collect()
}

/// CreateTopics. Each topic needs CREATE on the cluster or on itself
/// (else TOPIC_AUTHORIZATION_FAILED), and its configs are returned only
/// with DESCRIBE_CONFIGS on it (else the config error says why), as in
/// Kafka.
pub fn create_topics(
    broker: &Broker,
    req: CreateTopicsRequest,
    version: i16,
    access: &Access,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    let mut seen = std::collections::HashSet::new();
    let cluster_create = access.allows_cluster(AclOperation::Create);
    for t in req.topics {
        let name = t.name.0.as_str().to_string();
        let result = CreatableTopicResult::default().with_name(t.name.clone());
        if !seen.insert(name.clone()) {
            results.push(
                result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(&format!(
                        "topic {name} appears twice in the request"
                    )))),
            );
            continue;
        }
        if !cluster_create && !access.allows_topic(AclOperation::Create, &name) {
            results.push(
                result
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                    .with_error_message(Some(str_bytes(&format!(
                        "no CREATE on the cluster or on topic {name}"
                    ))))
                    .with_num_partitions(-1)
                    .with_replication_factor(-1),
            );
            continue;
        }
        let mut configs = BTreeMap::new();
        let mut outcome: Result<(), TopicError> = Ok(());
        for c in &t.configs {
            match &c.value {
                Some(v) => {
                    configs.insert(c.name.as_str().to_string(), v.as_str().to_string());
                }
                None => {
                    outcome = Err(TopicError::new(
                        ResponseError::InvalidConfig,
                        format!("config {} has a null value", c.name.as_str()),
                    ))
                }
            }
        }
        // Explicit replicas (checked by the controller, with Kafka's
        // rules); with them the count and factor stay -1 and are theirs.
        let assignments: Vec<(i32, Vec<i32>)> = t
            .assignments
            .iter()
            .map(|a| (a.partition_index, ids(&a.broker_ids)))
            .collect();
        let default_partitions = broker.topics.broker_config().num_partitions;
        let default_rf = broker.topics.broker_config().default_replication_factor;
        let (partitions, rf) = match assignments.first() {
            Some((_, first)) => (
                i32::try_from(assignments.len()).unwrap_or(i32::MAX),
                i16::try_from(first.len()).unwrap_or(i16::MAX),
            ),
            None => (
                if t.num_partitions == -1 {
                    default_partitions
                } else {
                    t.num_partitions
                },
                if t.replication_factor == -1 {
                    default_rf
                } else {
                    t.replication_factor
                },
            ),
        };
        let outcome = outcome.and_then(|()| {
            if req.validate_only {
                // Defaults resolved here when the controller places the
                // replicas; with assignments the request goes as sent.
                let (p, r) = if assignments.is_empty() {
                    (partitions, rf)
                } else {
                    (t.num_partitions, t.replication_factor)
                };
                crate::controller::Controller::new(broker).validate_create(
                    &name,
                    p,
                    r,
                    &configs,
                    &assignments,
                )?;
                Ok(None)
            } else {
                crate::controller::Controller::new(broker)
                    .create_topic(
                        &name,
                        t.num_partitions,
                        t.replication_factor,
                        configs.clone(),
                        &assignments,
                    )
                    .map(Some)
            }
        });
        results.push(match outcome {
            Ok(created) => {
                let (id, count, factor) = match &created {
                    Some(t) => (t.id, t.partitions, t.replication_factor),
                    None => (uuid::Uuid::nil(), partitions, rf),
                };
                let mut r = result
                    .with_num_partitions(count)
                    .with_replication_factor(factor);
                if version >= 7 {
                    r = r.with_topic_id(id);
                }
                if version >= 5 && !access.allows_topic(AclOperation::DescribeConfigs, &name) {
                    r = r.with_topic_config_error_code(
                        ResponseError::TopicAuthorizationFailed.code(),
                    );
                } else if version >= 5 {
                    let effective =
                        topic_config::effective(&configs, &broker.topics.broker_config());
                    r = r.with_configs(Some(
                        effective
                            .into_iter()
                            .map(|(k, (v, source))| {
                                CreatableTopicConfigs::default()
                                    .with_name(str_bytes(k))
                                    .with_value(Some(str_bytes(&v)))
                                    .with_config_source(source as i8)
                            })
                            .collect(),
                    ));
                }
                r
            }
            Err(e) => result
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(&e.message)))
                .with_num_partitions(-1)
                .with_replication_factor(-1),
        });
    }
    CreateTopicsResponse::default().with_topics(results)
}

/// DeleteTopics. Each topic needs DELETE on it (else
/// TOPIC_AUTHORIZATION_FAILED); a topic named by id that may not be
/// described is an unknown id, as in Kafka.
pub fn delete_topics(
    broker: &Broker,
    req: DeleteTopicsRequest,
    version: i16,
    access: &Access,
) -> DeleteTopicsResponse {
    // v6 names topics by name or id; earlier versions by name only.
    let targets: Vec<(Option<String>, uuid::Uuid)> = if version >= 6 {
        req.topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().map(|n| n.0.as_str().to_string()),
                    t.topic_id,
                )
            })
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.0.as_str().to_string()), uuid::Uuid::nil()))
            .collect()
    };
    let responses = targets
        .into_iter()
        .map(|(name, id)| {
            let name = match name {
                Some(n) => Ok(n),
                None => broker
                    .topics
                    .get_by_id(id)
                    .map(|t| t.meta.name.clone())
                    .ok_or_else(|| {
                        TopicError::new(
                            ResponseError::UnknownTopicId,
                            format!("no topic has id {id}"),
                        )
                    }),
            };
            let by_id = !id.is_nil();
            let name = name.and_then(|n| {
                if by_id && !access.allows_topic(AclOperation::Describe, &n) {
                    return Err(TopicError::new(
                        ResponseError::UnknownTopicId,
                        format!("no topic has id {id}"),
                    ));
                }
                Ok(n)
            });
            let result = name.clone().and_then(|n| {
                if !access.allows_topic(AclOperation::Delete, &n) {
                    return Err(TopicError::new(
                        ResponseError::TopicAuthorizationFailed,
                        format!("no DELETE on topic {n}"),
                    ));
                }
                crate::controller::Controller::new(broker).delete_topic(&n)
            });
            let entry = DeletableTopicResult::default()
                .with_name(name.ok().map(|n| TopicName(str_bytes(&n))));
            match result {
                Ok(deleted_id) => entry.with_topic_id(deleted_id),
                Err(e) => entry
                    .with_topic_id(id)
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(&e.message))),
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

/// An assignment list that is present but empty while partitions are
/// added: Kafka's controller refuses it (INVALID_REPLICA_ASSIGNMENT) rather
/// than placing the partitions itself, which only an absent list asks for.
/// The checks Kafka makes before this one (unknown topic, a count that is
/// no increase) are the controller's and come first.
fn empty_assignment_list<T>(
    broker: &Broker,
    name: &str,
    count: i32,
    assignments: &Option<Vec<T>>,
) -> Option<TopicError> {
    if !matches!(assignments, Some(list) if list.is_empty()) {
        return None;
    }
    let have = broker.topics.get(name)?.partitions.len();
    let added = usize::try_from(count)
        .ok()?
        .checked_sub(have)
        .filter(|&n| n > 0)?;
    Some(TopicError::new(
        ResponseError::InvalidReplicaAssignment,
        format!("Attempted to add {added} additional partition(s), but only 0 assignment(s) were specified."),
    ))
}

/// CreatePartitions; each topic needs ALTER on it (else
/// TOPIC_AUTHORIZATION_FAILED).
pub fn create_partitions(
    broker: &Broker,
    req: CreatePartitionsRequest,
    access: &Access,
) -> CreatePartitionsResponse {
    let results = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.as_str().to_string();
            let assignments: Vec<Vec<i32>> = t
                .assignments
                .iter()
                .flatten()
                .map(|a| ids(&a.broker_ids))
                .collect();
            let denied = (!access.allows_topic(AclOperation::Alter, &name)).then(|| {
                TopicError::new(
                    ResponseError::TopicAuthorizationFailed,
                    format!("no ALTER on topic {name}"),
                )
            });
            let refused =
                denied.or_else(|| empty_assignment_list(broker, &name, t.count, &t.assignments));
            let outcome = match refused {
                Some(refused) => Err(refused),
                None => crate::controller::Controller::new(broker).create_partitions(
                    &name,
                    t.count,
                    &assignments,
                    req.validate_only,
                ),
            };
            let entry = CreatePartitionsTopicResult::default().with_name(t.name);
            match outcome {
                Ok(()) => entry,
                Err(e) => entry
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(&e.message))),
            }
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}

/// DeleteRecords; each topic needs DELETE on it (else
/// TOPIC_AUTHORIZATION_FAILED).
pub fn delete_records(
    broker: &Broker,
    req: DeleteRecordsRequest,
    access: &Access,
) -> DeleteRecordsResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let topic = broker.topics.get(t.name.0.as_str());
            let denied = !access.allows_topic(AclOperation::Delete, t.name.0.as_str());
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let entry = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index);
                    if denied {
                        return entry
                            .with_low_watermark(-1)
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    let Some(partition) =
                        topic.as_ref().and_then(|t| t.partition(p.partition_index))
                    else {
                        return entry
                            .with_low_watermark(-1)
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    };
                    let result = partition.with_log(|log| {
                        // -1 means "up to the high watermark".
                        let target = if p.offset == -1 {
                            log.high_watermark()
                        } else {
                            p.offset
                        };
                        if target > log.high_watermark() || target < 0 {
                            return Err(crate::storage::StorageError::OffsetOutOfRange {
                                requested: target,
                                log_start: log.log_start_offset(),
                                log_end: log.high_watermark(),
                            });
                        }
                        log.delete_records_before(target)
                    });
                    match result {
                        Ok(low) => entry.with_low_watermark(low),
                        Err(e) => entry
                            .with_low_watermark(-1)
                            .with_error_code(storage_error_code(&e).code()),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

/// DescribeCluster: the brokers, the controller, and the cluster's
/// authorized operations when asked ([`Access::cluster_authorized_operations`]);
/// Kafka needs no permission for the rest.
pub fn describe_cluster(
    broker: &Broker,
    req: DescribeClusterRequest,
    access: &Access,
    listener: &str,
) -> DescribeClusterResponse {
    let image = broker.image();
    let operations =
        access.cluster_authorized_operations(req.include_cluster_authorized_operations);
    DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(&image.cluster_id))
        .with_controller_id(BrokerId(image.controller_id))
        .with_endpoint_type(1)
        .with_brokers(
            super::metadata::brokers_on_listener(&image, listener)
                .map(|(b, host, port)| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(b.id))
                        .with_host(str_bytes(host))
                        .with_port(port)
                        .with_rack(b.rack.as_deref().map(str_bytes))
                })
                .collect(),
        )
        .with_cluster_authorized_operations(operations)
}
