//! KIP-1101's metadata hash: what a consumer group stores in its
//! ConsumerGroupMetadata record (tagged field `MetadataHash`) instead of
//! the subscribed topics' metadata (the type-4 record Kafka 4.1+ no longer
//! writes). A group's assignment is recomputed when the hash of its
//! subscribed topics changes: a topic created, deleted or grown, or a
//! replica moved to a broker of another rack.
//!
//! The hash is Kafka's, bit for bit, so a group's stored hash means the
//! same to Kafka's tools as to Kafka: XXH3-64 (seed 0) over the byte stream
//! Kafka's hashing library (hash4j) builds — a byte as is, ints and longs
//! little-endian, a string as its UTF-16 code units (little-endian)
//! followed by its length in code units. Per topic: the magic byte 0, the
//! topic id's two halves, the name, the partition count, then for each
//! partition its index and its replicas' racks, sorted, each preceded by
//! its length. Per group: the topic hashes in topic-name order, 0 for none.
//! The unit tests hold vectors computed with hash4j 0.22 (Kafka 4.4's).
//!
//! Pure functions.

use uuid::Uuid;
use xxhash_rust::xxh3::xxh3_64;

/// Kafka's `TOPIC_HASH_MAGIC_BYTE`: the version of the topic hash.
const TOPIC_HASH_MAGIC: u8 = 0;

fn put_i32(b: &mut Vec<u8>, v: i32) {
    b.extend_from_slice(&v.to_le_bytes());
}

fn put_i64(b: &mut Vec<u8>, v: i64) {
    b.extend_from_slice(&v.to_le_bytes());
}

/// hash4j's `putString`: the UTF-16 code units, then their count.
fn put_string(b: &mut Vec<u8>, s: &str) {
    let mut units = 0i32;
    for u in s.encode_utf16() {
        b.extend_from_slice(&u.to_le_bytes());
        units += 1;
    }
    put_i32(b, units);
}

/// Java's `String.length()`: UTF-16 code units.
fn java_len(s: &str) -> i32 {
    i32::try_from(s.encode_utf16().count()).unwrap_or(i32::MAX)
}

/// The hash of one topic. `racks(p)`: the racks of partition `p`'s
/// replicas, in any order (brokers without a rack left out).
pub fn topic_hash(
    id: Uuid,
    name: &str,
    partitions: i32,
    racks: impl Fn(i32) -> Vec<String>,
) -> i64 {
    let mut b = Vec::with_capacity(64 + 2 * name.len() + 8 * partitions.max(0) as usize);
    b.push(TOPIC_HASH_MAGIC);
    let (msb, lsb) = id.as_u64_pair();
    put_i64(&mut b, msb as i64);
    put_i64(&mut b, lsb as i64);
    put_string(&mut b, name);
    put_i32(&mut b, partitions);
    for p in 0..partitions {
        put_i32(&mut b, p);
        let mut rs = racks(p);
        // Java's String order: by UTF-16 code units
        rs.sort_by(|x, y| x.encode_utf16().cmp(y.encode_utf16()));
        for r in &rs {
            put_i32(&mut b, java_len(r));
            put_string(&mut b, r);
        }
    }
    xxh3_64(&b) as i64
}

/// The hash of a group's subscribed topics: their hashes in topic-name
/// order (Kafka's topic names are ASCII, so byte order is Java's order);
/// 0 when there are none.
pub fn group_hash(topic_hashes_by_name: impl IntoIterator<Item = i64>) -> i64 {
    let mut b = Vec::new();
    for h in topic_hashes_by_name {
        put_i64(&mut b, h);
    }
    if b.is_empty() {
        0
    } else {
        xxh3_64(&b) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Computed with hash4j 0.22 (the jar Kafka 4.4 ships) through the calls
    // Kafka's `Utils.computeTopicHash` / `computeGroupHash` make.
    const T: i64 = 2119601186613528371;
    const ORDERS: i64 = 7360180019079289308;
    const NON_ASCII: i64 = 5836730374919511410;
    const GROUP_ORDERS_T: i64 = -1080693136493417065;

    fn orders_id() -> Uuid {
        Uuid::parse_str("5f2c6a3e-9b1d-4c7e-8a0f-1d2e3f405162").unwrap()
    }

    #[test]
    fn topic_hashes_are_kafkas() {
        assert_eq!(topic_hash(Uuid::from_u64_pair(1, 2), "t", 4, |_| vec![]), T);
        let racks = |p: i32| match p {
            0 => vec!["rack-b".to_string(), "rack-a".to_string()],
            1 => vec!["rack-a".to_string()],
            _ => vec![],
        };
        assert_eq!(topic_hash(orders_id(), "orders", 3, racks), ORDERS);
        assert_eq!(topic_hash(orders_id(), "ünï", 1, |_| vec![]), NON_ASCII);
    }

    #[test]
    fn the_group_hash_combines_topics_in_name_order() {
        assert_eq!(group_hash([ORDERS, T]), GROUP_ORDERS_T);
        assert_ne!(group_hash([T, ORDERS]), GROUP_ORDERS_T, "order matters");
        assert_eq!(group_hash([]), 0);
    }

    #[test]
    fn a_rack_change_changes_the_hash() {
        let id = orders_id();
        let before = topic_hash(id, "orders", 2, |_| vec!["a".into()]);
        let after = topic_hash(id, "orders", 2, |p| {
            vec![if p == 0 { "b" } else { "a" }.into()]
        });
        assert_ne!(before, after);
        // racks are sorted: the replicas' order does not matter
        let x = topic_hash(id, "orders", 1, |_| vec!["a".into(), "b".into()]);
        let y = topic_hash(id, "orders", 1, |_| vec!["b".into(), "a".into()]);
        assert_eq!(x, y);
    }
}
