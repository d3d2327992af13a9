//! Fuzz check `group_codecs`: the consumer-group bytes the broker parses,
//! from clients (JoinGroup protocol metadata) and from disk (the records of
//! `__consumer_offsets`).
//!
//! Input: a mode byte, then the bytes of that mode:
//! - `0` subscription: the protocol metadata of a JoinGroup member
//!   (`ConsumerProtocolSubscription`: version i16, topics, user data, ...),
//!   given to `group::subscribed_topics` (used by OffsetDelete);
//! - `1` record: one offset-commit record, `key length u16 | key | value`,
//!   given to `group::offsets::decode_key` / `decode_value` and applied to
//!   an `OffsetTable` as a loaded record (a consumer group record, key
//!   version 3 to 8, is replayed and its group rebuilt);
//! - `2` log: bytes of a `__consumer_offsets` segment given to
//!   `group::apply_offsets_batches`, the batch walk of
//!   `GroupCoordinator::load` (headers, bounded record decoding, non-control
//!   records applied to an `OffsetTable`), on the input and on a copy with
//!   the batch CRCs fixed.
//!
//! Asserts: no panic, abort or out-of-memory; garbage is ignored. For a
//! subscription that the `kafka-protocol` codec decodes (read as v0, whose
//! fields start every later version), `subscribed_topics` yields the same
//! topics. A key or
//! value that decodes re-encodes (`encode_key` / `encode_value`) to bytes
//! that decode to the same thing, and a record whose key and value decode
//! leaves exactly that committed offset in the table.

use crate::common;

use bytes::Bytes;
use kafka_protocol::messages::ConsumerProtocolSubscription;
use kafka_protocol::protocol::Decodable;
use moldau_broker::group::offsets::{
    decode_key, decode_value, encode_key, encode_value, OffsetTable,
};
use moldau_broker::group::{apply_offsets_batches, subscribed_topics};

fn subscription(meta: &[u8]) {
    let topics = subscribed_topics(meta);
    // Oracle: the topics as the `kafka-protocol` codec reads them. Every
    // version starts with the v0 fields (later ones append), so a v0 decode
    // reads the same topic list. Only when the claimed topic count fits in
    // the bytes (a topic takes at least 2): the codec is not what is under
    // test, and with a lying count it would allocate for it.
    if meta.len() < 6 || i16::from_be_bytes([meta[0], meta[1]]) < 0 {
        return;
    }
    let count = i32::from_be_bytes([meta[2], meta[3], meta[4], meta[5]]);
    if usize::try_from(count).is_ok_and(|n| n > (meta.len() - 6) / 2) {
        return;
    }
    let mut body = Bytes::copy_from_slice(&meta[2..]);
    if let Ok(sub) = ConsumerProtocolSubscription::decode(&mut body, 0) {
        let expected: Vec<String> = sub.topics.iter().map(|t| t.to_string()).collect();
        assert_eq!(topics, expected, "subscribed_topics agrees with the codec");
    }
}

fn record(data: &[u8]) {
    let mut input = common::Input::new(data);
    let key_len = usize::from(input.u16());
    let key = Bytes::copy_from_slice(input.bytes(key_len));
    let value = Bytes::copy_from_slice(input.rest);

    let decoded_key = decode_key(key.clone());
    if let Some((g, t, p)) = &decoded_key {
        assert_eq!(
            decode_key(encode_key(g, t, *p)).as_ref(),
            Some(&(g.clone(), t.clone(), *p))
        );
    }
    let decoded_value = decode_value(value.clone());
    if let Some(c) = &decoded_value {
        assert_eq!(decode_value(encode_value(c)).as_ref(), Some(c));
    }
    let mut table = OffsetTable::default();
    table.apply_record(Some(key.clone()), Some(value.clone()));
    // a KIP-848 consumer group record (key versions 3-8) is replayed into
    // a group; rebuilding it must not panic either
    let _ = table.take_consumer().into_groups();
    table.apply_record(Some(key.clone()), Some(value));
    table.apply_record(Some(key), None);
    let _ = table.take_consumer().into_groups();
    if let (Some((g, t, p)), Some(c)) = (&decoded_key, &decoded_value) {
        let mut table = OffsetTable::default();
        table.apply_record(Some(encode_key(g, t, *p)), Some(encode_value(c)));
        assert_eq!(table.get(g, t, *p), Some(c));
        assert_eq!(
            table.expired(g, i64::MAX).len(),
            usize::from(c.commit_timestamp < i64::MAX)
        );
    }
}

/// The batch walk of `GroupCoordinator::load` over one read of the log
/// (the very function the coordinator calls).
fn load(bytes: &[u8]) {
    let mut table = OffsetTable::default();
    let _ = apply_offsets_batches(bytes, 0, &mut table, 0);
    let groups: Vec<String> = table.groups().cloned().collect();
    for g in groups {
        let _ = table.expired(&g, 0);
        assert!(table.has_group(&g));
        assert!(table.group(&g).next().is_some());
    }
}

/// One input through the check (see the module doc).
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => subscription(rest),
        1 => record(rest),
        _ => {
            load(rest);
            let mut fixed = rest.to_vec();
            common::fix_crcs(&mut fixed);
            if fixed != rest {
                load(&fixed);
            }
        }
    }
}
