//! Metadata: brokers, cluster id, controller, and topics with their
//! partitions, leaders, epochs, replicas and ISRs, all from the metadata
//! image (auto-creating unknown topics through the controller when the
//! broker and the request allow it).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};

use super::str_bytes;
use crate::broker::Broker;
use crate::image::{MetadataImage, TopicImage};

const NO_AUTHORIZED_OPERATIONS: i32 = i32::MIN;

fn topic_entry(topic: &TopicImage) -> MetadataResponseTopic {
    let ids = |nodes: &[i32]| nodes.iter().map(|n| BrokerId(*n)).collect::<Vec<_>>();
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            let code = if p.leader < 0 {
                ResponseError::LeaderNotAvailable.code()
            } else {
                0
            };
            MetadataResponsePartition::default()
                .with_error_code(code)
                .with_partition_index(p.index)
                .with_leader_id(BrokerId(p.leader))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(ids(&p.replicas))
                .with_isr_nodes(ids(&p.isr))
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&topic.name))))
        .with_topic_id(topic.id)
        .with_is_internal(topic.internal)
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
                    .is_some_and(|n| broker.image().topic(n.0.as_str()).is_none())
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
    let mut image = broker.image();
    let topics = match requested {
        None => image.topics().map(|t| topic_entry(t)).collect(),
        Some(list) => list
            .iter()
            .map(|wanted| match &wanted.name {
                Some(name) => {
                    let name = name.0.as_str();
                    if let Some(t) = image.topic(name) {
                        return topic_entry(t);
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
                    match crate::controller::Controller::new(broker).auto_create(name) {
                        Ok(_) => {
                            image = broker.image();
                            match image.topic(name) {
                                Some(t) => topic_entry(t),
                                None => error_entry(
                                    Some(name),
                                    uuid::Uuid::nil(),
                                    ResponseError::LeaderNotAvailable,
                                ),
                            }
                        }
                        Err(e) => error_entry(Some(name), uuid::Uuid::nil(), e.code),
                    }
                }
                None => match image.topic_by_id(wanted.topic_id) {
                    Some(t) => topic_entry(t),
                    None => error_entry(None, wanted.topic_id, ResponseError::UnknownTopicId),
                },
            })
            .collect(),
    };
    let image: &MetadataImage = &image;
    MetadataResponse::default()
        .with_brokers(
            image
                .brokers
                .iter()
                .map(|b| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(b.id))
                        .with_host(str_bytes(&b.host))
                        .with_port(b.port)
                        .with_rack(b.rack.as_deref().map(str_bytes))
                })
                .collect(),
        )
        .with_cluster_id(Some(str_bytes(&image.cluster_id)))
        .with_controller_id(BrokerId(image.controller_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(NO_AUTHORIZED_OPERATIONS)
}
