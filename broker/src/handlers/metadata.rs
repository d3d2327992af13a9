//! Metadata: brokers, cluster id, controller, and topics with their
//! partitions, leaders, epochs, replicas and ISRs, all from the metadata
//! image (auto-creating unknown topics through the controller when the
//! broker and the request allow it).
//!
//! With an authorizer (Kafka's rules): a topic is listed only with
//! DESCRIBE on it — one asked for by name gets TOPIC_AUTHORIZATION_FAILED
//! instead, as an unknown one would if the client may not know it exists —
//! and auto-creating needs CREATE on the cluster or on the topic. The
//! `authorized_operations` fields come from [`Access`].
//!
//! Brokers are shown with their endpoint of the listener the request
//! came on (Kafka's rule): a broker without that listener is left out,
//! and a partition whose leader lacks it has no leader in the answer and
//! LISTENER_NOT_FOUND (LEADER_NOT_AVAILABLE before v6, which has no such
//! code), as Kafka's metadata cache answers; replica and ISR lists stay
//! whole, as Kafka leaves them from v1 on.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::image::{MetadataImage, TopicImage};
use crate::security::acl::{AclOperation, ResourceType, AUTHORIZED_OPERATIONS_OMITTED};

/// Which `authorized_operations` a Metadata request asks for, by version:
/// `(cluster, topics)`. The cluster's exist in v8 to v10 only, the
/// topics' from v8.
fn asked_operations(req: &MetadataRequest, version: i16) -> (bool, bool) {
    (
        (8..=10).contains(&version) && req.include_cluster_authorized_operations,
        version >= 8 && req.include_topic_authorized_operations,
    )
}

/// The leader id and error code a partition led by `leader` gets in an
/// answer on `listener` (see the module doc).
fn leader_on_listener(
    image: &MetadataImage,
    leader: i32,
    listener: &str,
    version: i16,
) -> (i32, i16) {
    if leader < 0 {
        return (leader, ResponseError::LeaderNotAvailable.code());
    }
    match image.brokers.iter().find(|b| b.id == leader) {
        Some(b) if b.endpoint(listener).is_none() => {
            let error = if version >= 6 {
                ResponseError::ListenerNotFound
            } else {
                ResponseError::LeaderNotAvailable
            };
            (-1, error.code())
        }
        _ => (leader, 0),
    }
}

/// The brokers of `image` as a request on `listener` shows them.
pub fn brokers_on_listener<'a>(
    image: &'a MetadataImage,
    listener: &'a str,
) -> impl Iterator<Item = (&'a crate::image::BrokerImage, &'a str, i32)> + 'a {
    image
        .brokers
        .iter()
        .filter_map(move |b| b.endpoint(listener).map(|(host, port)| (b, host, port)))
}

fn topic_entry(
    image: &MetadataImage,
    topic: &TopicImage,
    listener: &str,
    version: i16,
) -> MetadataResponseTopic {
    let ids = |nodes: &[i32]| nodes.iter().map(|n| BrokerId(*n)).collect::<Vec<_>>();
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            let (leader, code) = leader_on_listener(image, p.leader, listener, version);
            MetadataResponsePartition::default()
                .with_error_code(code)
                .with_partition_index(p.index)
                .with_leader_id(BrokerId(leader))
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
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn error_entry(name: Option<&str>, id: uuid::Uuid, code: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(code.code())
        .with_name(name.map(|n| TopicName(str_bytes(n))))
        .with_topic_id(id)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
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

pub fn handle(
    broker: &Broker,
    req: MetadataRequest,
    version: i16,
    access: &Access,
    listener: &str,
) -> MetadataResponse {
    let (cluster_ops_asked, topic_ops_asked) = asked_operations(&req, version);
    // v0 and an empty list meant "all topics" before v1 made null mean that.
    let requested = match req.topics {
        None => None,
        Some(list) if list.is_empty() && version == 0 => None,
        Some(list) => Some(list),
    };
    let allow_auto_create = version < 4 || req.allow_auto_topic_creation;
    let mut image = broker.image();
    let may_describe = |name: &str| access.allows_topic(AclOperation::Describe, name);
    let topics = match requested {
        None => image
            .topics()
            .filter(|t| may_describe(&t.name))
            .map(|t| topic_entry(&image, t, listener, version))
            .collect(),
        Some(list) => list
            .iter()
            .map(|wanted| match &wanted.name {
                Some(name) => {
                    let name = name.0.as_str();
                    if !may_describe(name) {
                        return error_entry(
                            Some(name),
                            uuid::Uuid::nil(),
                            ResponseError::TopicAuthorizationFailed,
                        );
                    }
                    if let Some(t) = image.topic(name) {
                        return topic_entry(&image, t, listener, version);
                    }
                    if crate::metadata::validate_topic_name(name).is_err() {
                        return error_entry(
                            Some(name),
                            uuid::Uuid::nil(),
                            ResponseError::InvalidTopicException,
                        );
                    }
                    if !allow_auto_create
                        || !broker.topics.broker_config().auto_create_topics_enable
                    {
                        return error_entry(
                            Some(name),
                            uuid::Uuid::nil(),
                            ResponseError::UnknownTopicOrPartition,
                        );
                    }
                    if !access.allows_cluster(AclOperation::Create)
                        && !access.allows_topic(AclOperation::Create, name)
                    {
                        return error_entry(
                            Some(name),
                            uuid::Uuid::nil(),
                            ResponseError::TopicAuthorizationFailed,
                        );
                    }
                    match crate::controller::Controller::new(broker).auto_create(name) {
                        Ok(_) => {
                            image = broker.image();
                            match image.topic(name) {
                                Some(t) => topic_entry(&image, t, listener, version),
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
                    Some(t) if may_describe(&t.name) => topic_entry(&image, t, listener, version),
                    // Kafka names no topic it will not describe
                    Some(_) => error_entry(
                        None,
                        wanted.topic_id,
                        ResponseError::TopicAuthorizationFailed,
                    ),
                    None => error_entry(None, wanted.topic_id, ResponseError::UnknownTopicId),
                },
            })
            .collect(),
    };
    let topics = with_topic_operations(topics, topic_ops_asked, access);
    let image: &MetadataImage = &image;
    MetadataResponse::default()
        .with_brokers(
            brokers_on_listener(image, listener)
                .map(|(b, host, port)| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(b.id))
                        .with_host(str_bytes(host))
                        .with_port(port)
                        .with_rack(b.rack.as_deref().map(str_bytes))
                })
                .collect(),
        )
        .with_cluster_id(Some(str_bytes(&image.cluster_id)))
        .with_controller_id(BrokerId(image.controller_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(access.cluster_authorized_operations(cluster_ops_asked))
}

/// Sets each named topic's `authorized_operations` (Kafka sets them on
/// every topic it answers by name, errors included; a topic asked for by
/// an unknown id keeps the default).
fn with_topic_operations(
    topics: Vec<MetadataResponseTopic>,
    asked: bool,
    access: &Access,
) -> Vec<MetadataResponseTopic> {
    topics
        .into_iter()
        .map(|t| match &t.name {
            Some(name) => {
                let ops = access.authorized_operations(asked, ResourceType::Topic, &name.0);
                t.with_topic_authorized_operations(ops)
            }
            None => t,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::acl::operations_to_bits;

    #[test]
    fn a_leader_without_the_request_s_listener_is_listener_not_found() {
        use crate::image::{BrokerImage, ListenerEndpoint};
        let broker = |id: i32, listeners: &[&str]| BrokerImage {
            id,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: None,
            endpoints: listeners
                .iter()
                .enumerate()
                .map(|(i, name)| ListenerEndpoint {
                    name: name.to_string(),
                    host: "127.0.0.1".into(),
                    port: 9092 + i as i32,
                    security_protocol: "PLAINTEXT".into(),
                })
                .collect(),
            incarnation: None,
        };
        let image = MetadataImage::new(
            "c",
            0,
            vec![
                broker(0, &["INTERNAL", "EXTERNAL"]),
                broker(1, &["INTERNAL"]),
                BrokerImage {
                    endpoints: vec![],
                    ..broker(2, &[])
                },
            ],
            [],
        );
        assert_eq!(leader_on_listener(&image, 0, "EXTERNAL", 12), (0, 0));
        assert_eq!(
            leader_on_listener(&image, 1, "EXTERNAL", 12),
            (-1, ResponseError::ListenerNotFound.code())
        );
        assert_eq!(
            leader_on_listener(&image, 1, "EXTERNAL", 5),
            (-1, ResponseError::LeaderNotAvailable.code()),
            "before v6 there is no LISTENER_NOT_FOUND"
        );
        assert_eq!(
            leader_on_listener(&image, -1, "EXTERNAL", 12),
            (-1, ResponseError::LeaderNotAvailable.code())
        );
        assert_eq!(
            leader_on_listener(&image, 2, "EXTERNAL", 12),
            (2, 0),
            "an older broker without named endpoints answers on any listener"
        );
        let shown: Vec<_> = brokers_on_listener(&image, "EXTERNAL")
            .map(|(b, _, port)| (b.id, port))
            .collect();
        assert_eq!(shown, [(0, 9093), (2, 9092)]);
    }

    #[test]
    fn metadata_asks_for_cluster_operations_in_v8_to_v10_only() {
        let req = MetadataRequest::default()
            .with_include_cluster_authorized_operations(true)
            .with_include_topic_authorized_operations(true);
        assert_eq!(asked_operations(&req, 7), (false, false));
        assert_eq!(asked_operations(&req, 8), (true, true));
        assert_eq!(asked_operations(&req, 10), (true, true));
        assert_eq!(asked_operations(&req, 11), (false, true));
        assert_eq!(
            asked_operations(&MetadataRequest::default(), 12),
            (false, false)
        );
    }

    #[test]
    fn named_topics_get_operations_unknown_ids_keep_the_default() {
        let topics = vec![
            error_entry(
                Some("t"),
                uuid::Uuid::nil(),
                ResponseError::UnknownTopicOrPartition,
            ),
            error_entry(
                None,
                uuid::Uuid::from_u128(7),
                ResponseError::UnknownTopicId,
            ),
        ];
        let none = Access::unrestricted();
        let out = with_topic_operations(topics.clone(), true, &none);
        assert_eq!(
            out[0].topic_authorized_operations,
            operations_to_bits(ResourceType::Topic.supported_operations())
        );
        assert_eq!(out[1].topic_authorized_operations, i32::MIN);
        let out = with_topic_operations(topics, false, &none);
        assert!(out
            .iter()
            .all(|t| t.topic_authorized_operations == i32::MIN));
    }
}
