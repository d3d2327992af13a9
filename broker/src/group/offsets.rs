//! Committed offsets and their records in `__consumer_offsets`, in Kafka's
//! own on-disk schema (offset-commit key v1, value v3), so tools that read
//! that topic understand it.
//!
//! Pure encoding/decoding and the in-memory table; writing the records to
//! the log belongs to the coordinator.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::txn_offsets::PendingTxnOffsets;

/// The name of the internal offsets topic.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

/// `(group, topic, partition)`.
pub type OffsetKey = (String, String, i32);

fn put_string(buf: &mut BytesMut, s: &str) {
    buf.put_i16(s.len() as i16);
    buf.put_slice(s.as_bytes());
}

fn get_string(buf: &mut Bytes) -> Option<String> {
    if buf.remaining() < 2 {
        return None;
    }
    let len = buf.get_i16();
    if len < 0 || buf.remaining() < len as usize {
        return None;
    }
    let s = buf.split_to(len as usize);
    String::from_utf8(s.to_vec()).ok()
}

/// Encodes the record key of an offset commit.
pub fn encode_key(group: &str, topic: &str, partition: i32) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(1);
    put_string(&mut buf, group);
    put_string(&mut buf, topic);
    buf.put_i32(partition);
    buf.freeze()
}

/// Encodes the record value of an offset commit.
pub fn encode_value(c: &CommittedOffset) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(3);
    buf.put_i64(c.offset);
    buf.put_i32(c.leader_epoch);
    put_string(&mut buf, &c.metadata);
    buf.put_i64(c.commit_timestamp);
    buf.freeze()
}

/// Decodes an offset-commit key; `None` for other record kinds (group
/// metadata keys, version 2) or garbage.
pub fn decode_key(mut key: Bytes) -> Option<OffsetKey> {
    if key.remaining() < 2 {
        return None;
    }
    let version = key.get_i16();
    if version != 0 && version != 1 {
        return None;
    }
    let group = get_string(&mut key)?;
    let topic = get_string(&mut key)?;
    if key.remaining() < 4 {
        return None;
    }
    Some((group, topic, key.get_i32()))
}

/// Decodes an offset-commit value (versions 1 and 3; older ones lack the
/// leader epoch).
pub fn decode_value(mut value: Bytes) -> Option<CommittedOffset> {
    if value.remaining() < 2 {
        return None;
    }
    let version = value.get_i16();
    if value.remaining() < 8 {
        return None;
    }
    let offset = value.get_i64();
    let leader_epoch = if version >= 3 {
        if value.remaining() < 4 {
            return None;
        }
        value.get_i32()
    } else {
        -1
    };
    let metadata = get_string(&mut value)?;
    if value.remaining() < 8 {
        return None;
    }
    let commit_timestamp = value.get_i64();
    Some(CommittedOffset {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
    })
}

/// The partition of `__consumer_offsets` that holds a group's offsets:
/// Java's `String.hashCode` of the group id, made non-negative, modulo the
/// partition count — as Kafka does, so the mapping is the familiar one.
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in group.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    (h & 0x7fff_ffff) % partitions.max(1)
}

/// The committed offsets of every group, keyed by group, then topic and
/// partition.
#[derive(Debug, Default, Clone)]
pub struct OffsetTable {
    groups: BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>,
    /// The latest group-metadata record of each group read with them
    /// ([`super::metadata`]), for the coordinator to restore the groups.
    snapshots: BTreeMap<String, super::metadata::GroupSnapshot>,
    /// Offsets of transactions without a marker yet.
    pending: PendingTxnOffsets<CommittedOffset>,
    /// The records of KIP-848 consumer groups read with them.
    consumer: super::consumer::records::Replay,
}

impl OffsetTable {
    pub fn put(&mut self, group: &str, topic: &str, partition: i32, c: CommittedOffset) {
        self.groups
            .entry(group.to_string())
            .or_default()
            .insert((topic.to_string(), partition), c);
    }
    /// A plain commit: the group's offset now, and no pending
    /// transactional offset written before it may replace it.
    pub fn commit(&mut self, group: &str, topic: &str, partition: i32, c: CommittedOffset) {
        self.pending
            .supersede(&(group.to_string(), topic.to_string(), partition));
        self.put(group, topic, partition, c);
    }
    /// The offsets of transactions without a marker yet.
    pub fn pending(&self) -> &PendingTxnOffsets<CommittedOffset> {
        &self.pending
    }
    /// Adds `offset` of `producer_id`'s open transaction.
    pub fn put_pending(&mut self, producer_id: i64, key: OffsetKey, offset: CommittedOffset) {
        self.pending.add(producer_id, key, offset);
    }
    /// `producer_id`'s transaction ended with a marker: on a commit its
    /// pending offsets become committed ones; on an abort they are
    /// dropped. Returns how many were pending.
    pub fn complete_txn(&mut self, producer_id: i64, committed: bool) -> usize {
        let offsets = self.pending.complete(producer_id);
        let n = offsets.len();
        if committed {
            for ((group, topic, partition), c) in offsets {
                self.put(&group, &topic, partition, c);
            }
        }
        n
    }
    /// Applies one record of a transactional batch of `producer_id`: an
    /// offset commit pending until the transaction's marker (other
    /// records, which Kafka never writes transactionally, are ignored).
    pub fn apply_txn_record(&mut self, producer_id: i64, key: Option<Bytes>, value: Option<Bytes>) {
        let Some(key) = key.and_then(decode_key) else {
            return;
        };
        if let Some(c) = value.and_then(decode_value) {
            self.pending.add(producer_id, key, c);
        }
    }
    pub fn remove(&mut self, group: &str, topic: &str, partition: i32) -> bool {
        let Some(g) = self.groups.get_mut(group) else {
            return false;
        };
        let removed = g.remove(&(topic.to_string(), partition)).is_some();
        if g.is_empty() {
            self.groups.remove(group);
        }
        removed
    }
    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<&CommittedOffset> {
        self.groups.get(group)?.get(&(topic.to_string(), partition))
    }
    pub fn group(&self, group: &str) -> impl Iterator<Item = (&(String, i32), &CommittedOffset)> {
        self.groups.get(group).into_iter().flat_map(|g| g.iter())
    }
    pub fn groups(&self) -> impl Iterator<Item = &String> {
        self.groups.keys()
    }
    pub fn has_group(&self, group: &str) -> bool {
        self.groups.contains_key(group) || self.pending.has_group(group)
    }
    /// The latest stored metadata of each group.
    pub fn snapshots(&self) -> &BTreeMap<String, super::metadata::GroupSnapshot> {
        &self.snapshots
    }
    /// Takes the stored group metadata out (the coordinator keeps groups
    /// elsewhere once restored).
    pub fn take_snapshots(&mut self) -> BTreeMap<String, super::metadata::GroupSnapshot> {
        std::mem::take(&mut self.snapshots)
    }
    /// Takes the consumer groups' records out (for the coordinator to
    /// rebuild the groups).
    pub fn take_consumer(&mut self) -> super::consumer::records::Replay {
        std::mem::take(&mut self.consumer)
    }
    /// The consumer groups' records read so far.
    pub fn consumer_mut(&mut self) -> &mut super::consumer::records::Replay {
        &mut self.consumer
    }
    /// Keeps `snapshot` as the stored metadata of `group`.
    pub fn put_snapshot(&mut self, group: &str, snapshot: super::metadata::GroupSnapshot) {
        self.snapshots.insert(group.to_string(), snapshot);
    }
    /// Applies one record of the offsets topic (a tombstone deletes): an
    /// offset commit or a group's metadata.
    pub fn apply_record(&mut self, key: Option<Bytes>, value: Option<Bytes>) {
        let Some(key) = key else { return };
        if super::consumer::records::is_consumer_key(&key) {
            self.consumer.apply(key, value);
            return;
        }
        if let Some(group) = super::metadata::decode_key(key.clone()) {
            match value.and_then(super::metadata::decode_value) {
                Some(snapshot) => {
                    self.snapshots.insert(group, snapshot);
                }
                None => {
                    self.snapshots.remove(&group);
                }
            }
            return;
        }
        let Some((group, topic, partition)) = decode_key(key) else {
            return;
        };
        match value.and_then(decode_value) {
            Some(c) => self.commit(&group, &topic, partition, c),
            None => {
                self.remove(&group, &topic, partition);
            }
        }
    }
    /// Adds everything `other` holds (read from another partition: no
    /// group is in both).
    pub fn merge(&mut self, mut other: OffsetTable) {
        for (group, offsets) in std::mem::take(&mut other.groups) {
            self.groups.entry(group).or_default().extend(offsets);
        }
        self.snapshots.append(&mut other.snapshots);
        self.consumer.merge(std::mem::take(&mut other.consumer));
        for (producer_id, key, c) in other.pending.entries() {
            self.pending.add(producer_id, key.clone(), c.clone());
        }
    }
    /// Offsets of `group` committed before `cutoff_ms`.
    pub fn expired(&self, group: &str, cutoff_ms: i64) -> Vec<(String, i32)> {
        self.group(group)
            .filter(|(_, c)| c.commit_timestamp < cutoff_ms)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_and_value_round_trip() {
        let key = encode_key("g", "orders", 3);
        assert_eq!(decode_key(key), Some(("g".into(), "orders".into(), 3)));
        let c = CommittedOffset {
            offset: 42,
            leader_epoch: 7,
            metadata: "meta".into(),
            commit_timestamp: 1234,
        };
        assert_eq!(decode_value(encode_value(&c)), Some(c));
        assert_eq!(
            decode_key(Bytes::from_static(&[0, 2, 0, 1, b'g'])),
            None,
            "group metadata key"
        );
        assert_eq!(
            decode_key(Bytes::from_static(&[0, 1, 0, 9])),
            None,
            "truncated"
        );
        assert_eq!(decode_value(Bytes::from_static(&[0, 3, 1])), None);
    }

    #[test]
    fn partition_mapping_matches_java_string_hash() {
        // "my-group".hashCode() == -1_906_497_762 in Java.
        assert_eq!(
            partition_for("my-group", 50),
            (-1_906_497_762i32 & 0x7fff_ffff) % 50
        );
        assert!((0..50).contains(&partition_for("\u{00ff}weird", 50)));
    }

    #[test]
    fn table_applies_records_and_tombstones() {
        let mut t = OffsetTable::default();
        let c = CommittedOffset {
            offset: 5,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp: 10,
        };
        t.apply_record(Some(encode_key("g", "t", 0)), Some(encode_value(&c)));
        assert_eq!(t.get("g", "t", 0), Some(&c));
        assert_eq!(t.expired("g", 11), vec![("t".to_string(), 0)]);
        assert!(t.expired("g", 10).is_empty());
        t.apply_record(Some(encode_key("g", "t", 0)), None);
        assert_eq!(t.get("g", "t", 0), None);
        assert!(!t.has_group("g"));
    }

    #[test]
    fn transactional_offsets_apply_on_commit_and_vanish_on_abort() {
        let c = |offset| CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp: 10,
        };
        let mut t = OffsetTable::default();
        t.apply_record(Some(encode_key("g", "t", 0)), Some(encode_value(&c(1))));
        t.apply_txn_record(7, Some(encode_key("g", "t", 0)), Some(encode_value(&c(5))));
        t.apply_txn_record(8, Some(encode_key("g", "t", 1)), Some(encode_value(&c(6))));
        t.apply_txn_record(9, Some(encode_key("g", "t", 2)), None);
        assert_eq!(t.get("g", "t", 0), Some(&c(1)), "pending until the marker");
        assert!(t.pending().is_pending("g", "t", 0));
        assert!(
            !t.pending().is_pending("g", "t", 2),
            "no value, nothing pending"
        );
        assert_eq!(t.complete_txn(7, true), 1);
        assert_eq!(t.get("g", "t", 0), Some(&c(5)));
        assert_eq!(t.complete_txn(8, false), 1);
        assert_eq!(t.get("g", "t", 1), None, "aborted");
        assert!(t.pending().is_empty());
        // a plain commit written after a pending one wins
        t.apply_txn_record(7, Some(encode_key("g", "t", 0)), Some(encode_value(&c(8))));
        t.apply_record(Some(encode_key("g", "t", 0)), Some(encode_value(&c(6))));
        assert_eq!(t.complete_txn(7, true), 0);
        assert_eq!(t.get("g", "t", 0), Some(&c(6)));
        // a group with only pending offsets exists
        t.apply_txn_record(
            3,
            Some(encode_key("only", "t", 0)),
            Some(encode_value(&c(1))),
        );
        assert!(t.has_group("only"));
    }

    #[test]
    fn table_keeps_the_latest_group_metadata() {
        use super::super::metadata::{self, GroupSnapshot};
        let snapshot = |generation| GroupSnapshot {
            protocol_type: "consumer".into(),
            generation,
            protocol: Some("range".into()),
            leader: None,
            timestamp_ms: 1,
            members: vec![],
        };
        let mut t = OffsetTable::default();
        for generation in [1, 2] {
            t.apply_record(
                Some(metadata::encode_key("g")),
                Some(metadata::encode_value(&snapshot(generation))),
            );
        }
        assert_eq!(t.snapshots()["g"].generation, 2);
        assert!(!t.has_group("g"), "metadata is not an offset");
        t.apply_record(Some(metadata::encode_key("g")), None);
        assert!(t.snapshots().is_empty());
    }
}
