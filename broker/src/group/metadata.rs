//! Group metadata records in `__consumer_offsets`, in Kafka's own schema
//! (group-metadata key version 2, value version 3): a group's generation,
//! protocol, leader and members with their subscriptions and assignments,
//! written when a generation is settled (and when the group empties). A
//! coordinator that takes a group over — after a failover, a partition
//! move, or a restart — restores it from the latest record, so its members
//! go on heartbeating in the same generation instead of rejoining and
//! re-reading from their last commit.
//!
//! Pure encoding/decoding; writing and restoring belong to the coordinator.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Key version of a group-metadata record (offset commits use 0 and 1).
const KEY_VERSION: i16 = 2;
/// Value version written (Kafka's v3: with static member ids).
const VALUE_VERSION: i16 = 3;

/// One member of a stored group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSnapshot {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the chosen protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A stored group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSnapshot {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub timestamp_ms: i64,
    pub members: Vec<MemberSnapshot>,
}

fn put_string(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

fn put_nullable_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(buf, s),
        None => buf.put_i16(-1),
    }
}

fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    buf.put_i32(b.len() as i32);
    buf.put_slice(b);
}

fn get_nullable_string(buf: &mut Bytes) -> Option<Option<String>> {
    if buf.remaining() < 2 {
        return None;
    }
    let len = buf.get_i16();
    if len == -1 {
        return Some(None);
    }
    if len < 0 || buf.remaining() < len as usize {
        return None;
    }
    String::from_utf8(buf.split_to(len as usize).to_vec())
        .ok()
        .map(Some)
}

fn get_string(buf: &mut Bytes) -> Option<String> {
    get_nullable_string(buf).flatten()
}

fn get_bytes(buf: &mut Bytes) -> Option<Bytes> {
    if buf.remaining() < 4 {
        return None;
    }
    let len = buf.get_i32();
    if len == -1 {
        return Some(Bytes::new());
    }
    if len < 0 || buf.remaining() < len as usize {
        return None;
    }
    Some(buf.split_to(len as usize))
}

fn get_i32(buf: &mut Bytes) -> Option<i32> {
    (buf.remaining() >= 4).then(|| buf.get_i32())
}

/// Encodes the record key of a group's metadata.
pub fn encode_key(group: &str) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(KEY_VERSION);
    put_string(&mut buf, group);
    buf.freeze()
}

/// Decodes a group-metadata key: the group id; `None` for other record
/// kinds (offset commits) or garbage.
pub fn decode_key(mut key: Bytes) -> Option<String> {
    if key.remaining() < 2 || key.get_i16() != KEY_VERSION {
        return None;
    }
    let group = get_string(&mut key)?;
    key.is_empty().then_some(group)
}

/// Encodes the record value of a group's metadata.
pub fn encode_value(g: &GroupSnapshot) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(VALUE_VERSION);
    put_string(&mut buf, &g.protocol_type);
    buf.put_i32(g.generation);
    put_nullable_string(&mut buf, g.protocol.as_deref());
    put_nullable_string(&mut buf, g.leader.as_deref());
    buf.put_i64(g.timestamp_ms);
    buf.put_i32(g.members.len() as i32);
    for m in &g.members {
        put_string(&mut buf, &m.member_id);
        put_nullable_string(&mut buf, m.group_instance_id.as_deref());
        put_string(&mut buf, &m.client_id);
        put_string(&mut buf, &m.client_host);
        buf.put_i32(m.rebalance_timeout_ms);
        buf.put_i32(m.session_timeout_ms);
        put_bytes(&mut buf, &m.subscription);
        put_bytes(&mut buf, &m.assignment);
    }
    buf.freeze()
}

/// Decodes a group-metadata value of versions 0 to 3 (the older ones lack
/// the timestamp, the rebalance timeout or the instance id); `None` for
/// garbage or a newer version.
pub fn decode_value(mut v: Bytes) -> Option<GroupSnapshot> {
    if v.remaining() < 2 {
        return None;
    }
    let version = v.get_i16();
    if !(0..=VALUE_VERSION).contains(&version) {
        return None;
    }
    let protocol_type = get_string(&mut v)?;
    let generation = get_i32(&mut v)?;
    let protocol = get_nullable_string(&mut v)?;
    let leader = get_nullable_string(&mut v)?;
    let timestamp_ms = if version >= 2 {
        if v.remaining() < 8 {
            return None;
        }
        v.get_i64()
    } else {
        -1
    };
    let count = get_i32(&mut v)?;
    let mut members = Vec::new();
    for _ in 0..count.max(0) {
        let member_id = get_string(&mut v)?;
        let group_instance_id = if version >= 3 {
            get_nullable_string(&mut v)?
        } else {
            None
        };
        let client_id = get_string(&mut v)?;
        let client_host = get_string(&mut v)?;
        let rebalance_timeout_ms = if version >= 1 { get_i32(&mut v)? } else { -1 };
        let session_timeout_ms = get_i32(&mut v)?;
        let rebalance_timeout_ms = if version >= 1 {
            rebalance_timeout_ms
        } else {
            session_timeout_ms
        };
        let subscription = get_bytes(&mut v)?;
        let assignment = get_bytes(&mut v)?;
        members.push(MemberSnapshot {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            subscription,
            assignment,
        });
    }
    Some(GroupSnapshot {
        protocol_type,
        generation,
        protocol,
        leader,
        timestamp_ms,
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> GroupSnapshot {
        GroupSnapshot {
            protocol_type: "consumer".into(),
            generation: 7,
            protocol: Some("range".into()),
            leader: Some("m-1".into()),
            timestamp_ms: 1234,
            members: vec![
                MemberSnapshot {
                    member_id: "m-1".into(),
                    group_instance_id: None,
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout_ms: 300_000,
                    session_timeout_ms: 45_000,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(b"asg"),
                },
                MemberSnapshot {
                    member_id: "m-2".into(),
                    group_instance_id: Some("static-2".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.2".into(),
                    rebalance_timeout_ms: 60_000,
                    session_timeout_ms: 10_000,
                    subscription: Bytes::new(),
                    assignment: Bytes::new(),
                },
            ],
        }
    }

    #[test]
    fn key_and_value_round_trip() {
        assert_eq!(decode_key(encode_key("g")), Some("g".into()));
        let s = snapshot();
        assert_eq!(decode_value(encode_value(&s)), Some(s));
        let empty = GroupSnapshot {
            protocol: None,
            leader: None,
            members: vec![],
            ..snapshot()
        };
        assert_eq!(decode_value(encode_value(&empty)), Some(empty));
    }

    #[test]
    fn offset_keys_and_garbage_are_not_group_keys() {
        assert_eq!(
            decode_key(crate::group::offsets::encode_key("g", "t", 0)),
            None
        );
        assert_eq!(decode_key(Bytes::from_static(&[0, 2, 0, 5, b'g'])), None);
        assert_eq!(decode_key(Bytes::from_static(&[0, 2, 0, 1, b'g', 9])), None);
        assert_eq!(decode_value(Bytes::from_static(&[0, 4])), None, "newer");
        let whole = encode_value(&snapshot());
        for cut in 0..whole.len() {
            assert_eq!(decode_value(whole.slice(..cut)), None, "cut at {cut}");
        }
    }

    #[test]
    fn an_older_version_decodes_with_defaults() {
        // version 1: no timestamp, no instance ids
        let mut buf = BytesMut::new();
        buf.put_i16(1);
        put_string(&mut buf, "consumer");
        buf.put_i32(3);
        put_nullable_string(&mut buf, Some("range"));
        put_nullable_string(&mut buf, Some("m"));
        buf.put_i32(1);
        put_string(&mut buf, "m");
        put_string(&mut buf, "c");
        put_string(&mut buf, "/h");
        buf.put_i32(20_000);
        buf.put_i32(10_000);
        put_bytes(&mut buf, b"s");
        put_bytes(&mut buf, b"a");
        let g = decode_value(buf.freeze()).unwrap();
        assert_eq!((g.generation, g.timestamp_ms), (3, -1));
        assert_eq!(g.members[0].rebalance_timeout_ms, 20_000);
        assert_eq!(g.members[0].group_instance_id, None);
    }
}
