//! Metadata: brokers, cluster id, controller, and topics with their
//! partitions (auto-creating unknown topics when the broker and the
//! request allow it).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};

use super::str_bytes;
use crate::broker::Broker;
use crate::topics::Topic;

const NO_AUTHORIZED_OPERATIONS: i32 = i32::MIN;

fn topic_entry(broker: &Broker, topic: &Topic) -> MetadataResponseTopic {
    let node = BrokerId(broker.node_id);
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p.index)
                .with_leader_id(node)
                .with_leader_epoch(0)
                .with_replica_nodes(vec![node])
                .with_isr_nodes(vec![node])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&topic.meta.name))))
        .with_topic_id(topic.meta.id)
        .with_is_internal(topic.meta.name == crate::group::offsets::OFFSETS_TOPIC)
        .with_partitions(partitions)
        .with_topic_authorized_operations(NO_AUTHORIZED_OPERATIONS)
}

fn error_entry(name: Option<&str>, id: uuid::Uuid, code: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(code.code())
        .with_name(name.map(|n| TopicName(str_bytes(n))))
        .with_topic_id(id)
        .with_topic_authorized_operations(NO_AUTHORIZED_OPERATIONS)
}

/// Whether answering `req` may create a topic (a named topic is unknown
/// and auto-creation is allowed): such requests run on the blocking pool.
pub fn may_create_topics(broker: &Broker, req: &MetadataRequest, version: i16) -> bool {
    let allowed = (version < 4 || req.allow_auto_topic_creation)
        && broker.topics.broker_config().auto_create_topics_enable;
    allowed
        && req.topics.as_ref().is_some_and(|list| {
            list.iter().any(|t| {
                t.name
                    .as_ref()
                    .is_some_and(|n| broker.topics.get(n.0.as_str()).is_none())
            })
        })
}

pub fn handle(broker: &Broker, req: MetadataRequest, version: i16) -> MetadataResponse {
    // v0 and an empty list meant "all topics" before v1 made null mean that.
    let requested = match req.topics {
        None => None,
        Some(list) if list.is_empty() && version == 0 => None,
        Some(list) => Some(list),
    };
    let allow_auto_create = version < 4 || req.allow_auto_topic_creation;
    let topics = match requested {
        None => broker
            .topics
            .all()
            .iter()
            .map(|t| topic_entry(broker, t))
            .collect(),
        Some(list) => list
            .iter()
            .map(|wanted| match &wanted.name {
                Some(name) => {
                    let name = name.0.as_str();
                    if let Some(t) = broker.topics.get(name) {
                        return topic_entry(broker, &t);
                    }
                    if crate::metadata::validate_topic_name(name).is_err() {
                        return error_entry(
                            Some(name),
                            uuid::Uuid::nil(),
                            ResponseError::InvalidTopicException,
                        );
                    }
                    if !allow_auto_create {
                        return error_entry(
                            Some(name),
                            uuid::Uuid::nil(),
                            ResponseError::UnknownTopicOrPartition,
                        );
                    }
                    match broker.topics.auto_create(name) {
                        Ok(t) => topic_entry(broker, &t),
                        Err(e) => error_entry(Some(name), uuid::Uuid::nil(), e.code),
                    }
                }
                None => match broker.topics.get_by_id(wanted.topic_id) {
                    Some(t) => topic_entry(broker, &t),
                    None => error_entry(None, wanted.topic_id, ResponseError::UnknownTopicId),
                },
            })
            .collect(),
    };
    MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(broker.node_id))
            .with_host(str_bytes(&broker.advertised_host))
            .with_port(broker.advertised_port)])
        .with_cluster_id(Some(str_bytes(broker.cluster_id())))
        .with_controller_id(BrokerId(broker.node_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(NO_AUTHORIZED_OPERATIONS)
}
