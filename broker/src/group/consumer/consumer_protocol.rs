//! The classic consumer's embedded protocol (protocol type "consumer"):
//! the `ConsumerProtocolSubscription` a member joins with and the
//! `ConsumerProtocolAssignment` it is synced with, as the consumer group
//! sees them — topic names turned into topic ids and back. Used where a
//! classic member meets a consumer group: the online conversions and the
//! classic members of a consumer group ([`super::conversion`]).
//!
//! Pure decoding and encoding (the messages are `kafka_protocol`'s, each
//! prefixed by its int16 version as Kafka's `ConsumerProtocol` writes it;
//! a version above the highest known is read as that one, as Kafka does).

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use kafka_protocol::messages::{ConsumerProtocolSubscription, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::assignor::Assignment;
use super::machine::Topics;

/// The highest version of both messages known here.
const MAX_VERSION: i16 = 3;

/// A member's subscription, decoded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    pub topics: Vec<String>,
    /// The partitions it owns (v1+), by topic name.
    pub owned: Vec<(String, Vec<i32>)>,
    /// Its rack (v3+).
    pub rack_id: Option<String>,
}

/// The version a subscription or an assignment starts with.
pub fn version(bytes: &[u8]) -> Option<i16> {
    (bytes.len() >= 2).then(|| i16::from_be_bytes([bytes[0], bytes[1]]))
}

/// Decodes a `ConsumerProtocolSubscription`; `None` when malformed.
pub fn decode_subscription(bytes: &Bytes) -> Option<Subscription> {
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return None;
    }
    let v = buf.get_i16();
    if v < 0 {
        return None;
    }
    let s = ConsumerProtocolSubscription::decode(&mut buf, v.min(MAX_VERSION)).ok()?;
    Some(Subscription {
        topics: s.topics.iter().map(|t| t.to_string()).collect(),
        owned: s
            .owned_partitions
            .iter()
            .map(|tp| (tp.topic.0.to_string(), tp.partitions.clone()))
            .collect(),
        rack_id: s.rack_id.map(|r| r.to_string()),
    })
}

/// Decodes a `ConsumerProtocolAssignment` into its partitions by topic
/// name; `None` when malformed (an empty one included, as in Kafka).
pub fn decode_assignment(bytes: &Bytes) -> Option<Vec<(String, Vec<i32>)>> {
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return None;
    }
    let v = buf.get_i16();
    if v < 0 {
        return None;
    }
    let a = ConsumerProtocolAssignment::decode(&mut buf, v.min(MAX_VERSION)).ok()?;
    Some(
        a.assigned_partitions
            .iter()
            .map(|tp| (tp.topic.0.to_string(), tp.partitions.clone()))
            .collect(),
    )
}

/// Encodes `a` (by topic id) as a `ConsumerProtocolAssignment` of
/// `version` (clamped to the known ones), naming the topics by `topics`
/// (a topic unknown there is left out).
pub fn encode_assignment(a: &Assignment, topics: &Topics, version: i16) -> Bytes {
    let version = version.clamp(0, MAX_VERSION);
    let assigned = to_names(a, topics)
        .into_iter()
        .map(|(name, partitions)| {
            AssignedTopic::default()
                .with_topic(TopicName(StrBytes::from_string(name)))
                .with_partitions(partitions)
        })
        .collect();
    let msg = ConsumerProtocolAssignment::default().with_assigned_partitions(assigned);
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&version.to_be_bytes());
    msg.encode(&mut buf, version)
        .expect("an assignment always encodes");
    buf.freeze()
}

/// Partitions by topic name to partitions by topic id (a topic unknown in
/// `topics` is left out).
pub fn to_ids(parts: &[(String, Vec<i32>)], topics: &Topics) -> Assignment {
    let mut out = Assignment::new();
    for (name, ps) in parts {
        if let Some(t) = topics.get(name) {
            out.entry(t.id).or_default().extend(ps.iter().copied());
        }
    }
    out
}

/// Partitions by topic id to partitions by topic name, sorted by name.
pub fn to_names(a: &Assignment, topics: &Topics) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = topics
        .iter()
        .filter_map(|(name, t)| {
            a.get(&t.id)
                .map(|ps| (name.clone(), ps.iter().copied().collect()))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedTopic;
    use uuid::Uuid;

    /// A subscription as the Java client writes it (version `v`).
    pub(crate) fn subscription(v: i16, topics: &[&str], owned: &[(&str, &[i32])]) -> Bytes {
        let msg = ConsumerProtocolSubscription::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| StrBytes::from_string(t.to_string()))
                    .collect(),
            )
            .with_owned_partitions(
                owned
                    .iter()
                    .map(|(t, ps)| {
                        OwnedTopic::default()
                            .with_topic(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partitions(ps.to_vec())
                    })
                    .collect(),
            )
            .with_rack_id((v >= 3).then(|| StrBytes::from_static_str("rack-a")));
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&v.to_be_bytes());
        msg.encode(&mut buf, v).unwrap();
        buf.freeze()
    }

    #[test]
    fn subscriptions_and_assignments_round_trip_by_topic_id() {
        let s = decode_subscription(&subscription(3, &["a", "b"], &[("a", &[0, 2])])).unwrap();
        assert_eq!(s.topics, vec!["a", "b"]);
        assert_eq!(s.owned, vec![("a".to_string(), vec![0, 2])]);
        assert_eq!(s.rack_id.as_deref(), Some("rack-a"));
        // v0 has no owned partitions, no rack
        let s0 = decode_subscription(&subscription(0, &["a"], &[])).unwrap();
        assert_eq!((s0.owned.len(), s0.rack_id), (0, None));
        assert!(decode_subscription(&Bytes::from_static(&[0, 1, 0])).is_none());
        assert!(
            decode_assignment(&Bytes::new()).is_none(),
            "an empty assignment is malformed, as in Kafka"
        );

        let mut topics = Topics::new();
        topics.insert(
            "a".into(),
            super::super::TopicMeta::new("a", Uuid::from_u128(1), 3, |_| vec![]),
        );
        let a = to_ids(
            &[("a".into(), vec![1, 0]), ("gone".into(), vec![0])],
            &topics,
        );
        assert_eq!(a.len(), 1, "unknown topics are left out");
        let bytes = encode_assignment(&a, &topics, 1);
        assert_eq!(version(&bytes), Some(1));
        assert_eq!(
            decode_assignment(&bytes).unwrap(),
            vec![("a".to_string(), vec![0, 1])]
        );
        assert_eq!(
            version(&encode_assignment(&a, &topics, 7)),
            Some(3),
            "clamped to the highest known"
        );
    }
}
