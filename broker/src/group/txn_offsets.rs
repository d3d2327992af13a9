//! Offsets committed inside a transaction (TxnOffsetCommit, what a
//! producer's `sendOffsetsToTransaction` sends; KIP-98, KIP-447): written
//! to `__consumer_offsets` at once, in a transactional batch of the
//! producer, but pending until the transaction's marker reaches that
//! partition — a COMMIT makes them the group's committed offsets, an ABORT
//! drops them. Until then an OffsetFetch that requires stable offsets
//! (read_committed consumers, KIP-447) gets UNSTABLE_OFFSET_COMMIT for
//! them.
//!
//! A plain OffsetCommit of the same partition written after a pending one
//! supersedes it: the later record in the log wins, as in Kafka, whose
//! coordinator compares the records' log offsets when the marker comes.
//! Here the superseded pending offset is dropped when the plain commit is
//! applied, which ends in the same committed offset and lets an
//! OffsetFetch see the plain commit as stable at once.
//!
//! Pure state; the coordinator (`super`) applies it in log order, live
//! and when it loads an offsets partition.

use std::collections::BTreeMap;

/// `(group, topic, partition)`, as `offsets::Key`.
type Key = (String, String, i32);

/// The pending transactional offsets of one offsets partition (or of a
/// whole standalone broker while it loads), by producer id; `V` is the
/// committed offset (generic so this module needs nothing of `offsets`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingTxnOffsets<V> {
    by_producer: BTreeMap<i64, BTreeMap<Key, V>>,
}

impl<V> Default for PendingTxnOffsets<V> {
    fn default() -> Self {
        Self {
            by_producer: BTreeMap::new(),
        }
    }
}

impl<V> PendingTxnOffsets<V> {
    /// `producer_id`'s transaction wrote `offset` for `key` (a later one
    /// of the same transaction replaces an earlier one).
    pub fn add(&mut self, producer_id: i64, key: Key, offset: V) {
        self.by_producer
            .entry(producer_id)
            .or_default()
            .insert(key, offset);
    }

    /// A plain commit of `key` was written after every pending one: none
    /// of them may replace it when its transaction commits.
    pub fn supersede(&mut self, key: &Key) {
        self.by_producer.retain(|_, offsets| {
            offsets.remove(key);
            !offsets.is_empty()
        });
    }

    /// `producer_id`'s transaction ended here: its pending offsets, in key
    /// order, for the caller to apply on a COMMIT (and forget on an ABORT).
    pub fn complete(&mut self, producer_id: i64) -> Vec<(Key, V)> {
        self.by_producer
            .remove(&producer_id)
            .map(|offsets| offsets.into_iter().collect())
            .unwrap_or_default()
    }

    /// Whether an open transaction holds an offset of this partition for
    /// `group`.
    pub fn is_pending(&self, group: &str, topic: &str, partition: i32) -> bool {
        self.by_producer.values().any(|offsets| {
            offsets
                .keys()
                .any(|(g, t, p)| g == group && t == topic && *p == partition)
        })
    }

    /// Whether any open transaction holds an offset for `group`.
    pub fn has_group(&self, group: &str) -> bool {
        self.by_producer
            .values()
            .any(|offsets| offsets.keys().any(|(g, _, _)| g == group))
    }

    /// Every pending offset as `(producer id, key, offset)`.
    pub fn entries(&self) -> impl Iterator<Item = (i64, &Key, &V)> {
        self.by_producer
            .iter()
            .flat_map(|(pid, offsets)| offsets.iter().map(move |(k, c)| (*pid, k, c)))
    }

    /// How many producers have pending offsets.
    pub fn producers(&self) -> usize {
        self.by_producer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_producer.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::offsets::CommittedOffset;
    use super::*;

    fn key(group: &str, topic: &str, partition: i32) -> Key {
        (group.to_string(), topic.to_string(), partition)
    }

    fn at(offset: i64) -> CommittedOffset {
        CommittedOffset {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp: 1,
        }
    }

    #[test]
    fn a_transactions_offsets_stay_pending_until_it_completes() {
        let mut p = PendingTxnOffsets::<CommittedOffset>::default();
        p.add(7, key("g", "t", 0), at(5));
        p.add(7, key("g", "t", 0), at(9));
        p.add(7, key("g", "t", 1), at(3));
        p.add(8, key("h", "t", 0), at(1));
        assert!(p.is_pending("g", "t", 0));
        assert!(!p.is_pending("g", "t", 2));
        assert!(p.has_group("h"));
        assert_eq!(p.producers(), 2);
        assert_eq!(
            p.complete(7),
            vec![(key("g", "t", 0), at(9)), (key("g", "t", 1), at(3))],
            "the transaction's last offset per partition"
        );
        assert!(!p.is_pending("g", "t", 0));
        assert!(!p.has_group("g"));
        assert!(
            p.complete(7).is_empty(),
            "a marker sent again finds nothing"
        );
        assert_eq!(p.complete(8), vec![(key("h", "t", 0), at(1))]);
        assert!(p.is_empty());
    }

    #[test]
    fn a_later_plain_commit_supersedes_a_pending_offset() {
        let mut p = PendingTxnOffsets::<CommittedOffset>::default();
        p.add(7, key("g", "t", 0), at(5));
        p.add(7, key("g", "t", 1), at(6));
        p.add(8, key("g", "t", 0), at(4));
        p.supersede(&key("g", "t", 0));
        assert!(!p.is_pending("g", "t", 0));
        assert_eq!(p.complete(7), vec![(key("g", "t", 1), at(6))]);
        assert_eq!(p.producers(), 0, "producer 8 had nothing else pending");
    }
}
