//! Words every transaction room uses: producer id and epoch sentinels, the
//! transaction version, topic-partitions, the internal topics' names and
//! which `__transaction_state` partition owns a transactional id.
//!
//! Bottom of `txn`: imports nothing, not even its siblings.

use std::fmt;

/// Kafka's "no producer id" (`RecordBatch.NO_PRODUCER_ID`).
pub const NO_PRODUCER_ID: i64 = -1;
/// Kafka's "no producer epoch" (`RecordBatch.NO_PRODUCER_EPOCH`).
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Kafka's "no sequence" (`RecordBatch.NO_SEQUENCE`), the base sequence of
/// a control batch.
pub const NO_SEQUENCE: i32 = -1;

/// The topic whose partitions hold the transaction coordinators' state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";
/// The group coordinators' topic; AddOffsetsToTxn adds one of its
/// partitions to a transaction.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Whether `epoch` leaves no room to fence: Kafka refuses to hand a client
/// `i16::MAX - 1` or more, so that the coordinator can always bump once
/// more to fence (and, with transaction version 2, once more to end).
pub fn is_epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// A producer id with its epoch, as requests and responses carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub epoch: i16,
}

impl ProducerIdAndEpoch {
    /// `-1`/`-1`: what a response carries when it names no producer.
    pub const NONE: ProducerIdAndEpoch = ProducerIdAndEpoch {
        producer_id: NO_PRODUCER_ID,
        epoch: NO_PRODUCER_EPOCH,
    };

    pub fn new(producer_id: i64, epoch: i16) -> Self {
        Self { producer_id, epoch }
    }
}

/// Kafka's `transaction.version` feature (KIP-890), as a coordinator and a
/// client use it.
///
/// - `V0`: the original protocol; `__transaction_state` values at v0.
/// - `V1`: flexible `__transaction_state` values (v1, tagged fields).
/// - `V2`: every EndTxn bumps the producer epoch (markers are written at
///   the bumped epoch, so a late write of the old epoch can never land in
///   the next transaction); the client learns the new epoch from EndTxn v5+.
///
/// Two versions meet in the coordinator: the cluster's finalized level
/// (which record version to write, and how the coordinator aborts on its
/// own, e.g. on timeout) and the client's (from the request version: EndTxn
/// v5+ means `V2`), which decides how that client's EndTxn is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum TransactionVersion {
    #[default]
    V0,
    V1,
    V2,
}

impl TransactionVersion {
    /// The feature level Kafka stores (`ClientTransactionVersion`, tag 2).
    pub fn feature_level(self) -> i16 {
        match self {
            TransactionVersion::V0 => 0,
            TransactionVersion::V1 => 1,
            TransactionVersion::V2 => 2,
        }
    }

    /// The version of a stored level; `None` for levels this broker does
    /// not know (Kafka refuses them too).
    pub fn from_feature_level(level: i16) -> Option<Self> {
        match level {
            0 => Some(TransactionVersion::V0),
            1 => Some(TransactionVersion::V1),
            2 => Some(TransactionVersion::V2),
            _ => None,
        }
    }

    /// Whether EndTxn bumps the producer epoch (KIP-890 part 2).
    pub fn supports_epoch_bump(self) -> bool {
        self >= TransactionVersion::V2
    }

    /// The `TransactionLogValue` version a coordinator at this (cluster)
    /// level writes: flexible v1 from `V1` on, v0 before.
    pub fn log_value_version(self) -> i16 {
        if self >= TransactionVersion::V1 {
            1
        } else {
            0
        }
    }

    /// The client's version as Kafka infers it from an EndTxn request:
    /// v5 and later carry the bumped producer id and epoch back, so only
    /// such a client can follow transaction version 2.
    pub fn of_end_txn_request(api_version: i16) -> Self {
        if api_version > 4 {
            TransactionVersion::V2
        } else {
            TransactionVersion::V0
        }
    }
}

/// A topic's partition. Ordered (topic, then partition) so that sets of
/// them, and the records made from them, come out the same every time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// The `__transaction_state` partition that owns `transactional_id`:
/// Kafka's `Utils.abs(transactionalId.hashCode) % partitions`, with Java's
/// `String.hashCode` over UTF-16 units. Note `Utils.abs`, not a bit mask:
/// a negative hash maps to its absolute value, and `i32::MIN` to 0, so
/// `abs(-1) = 1` where `-1 & 0x7fffffff` would be `i32::MAX`.
pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in transactional_id.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_for_is_kafkas_utils_abs_of_java_hash() {
        // "my-group".hashCode() == -1_906_497_762 in Java: abs, then modulo.
        assert_eq!(partition_for("my-group", 50), 1_906_497_762 % 50);
        assert_eq!(partition_for("my-group", 50), 12);
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE: abs gives 0.
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        // "a".hashCode() == 97.
        assert_eq!(partition_for("a", 50), 47);
        assert_eq!(partition_for("", 50), 0);
        assert_eq!(partition_for("x", 0), 0, "no partitions: no panic");
        // Non-BMP characters hash as two UTF-16 units, as in Java.
        let p = partition_for("\u{1F600}txn", 50);
        assert!((0..50).contains(&p));
    }

    #[test]
    fn exhaustion_leaves_room_for_one_fence() {
        assert!(!is_epoch_exhausted(0));
        assert!(!is_epoch_exhausted(i16::MAX - 2));
        assert!(is_epoch_exhausted(i16::MAX - 1));
        assert!(is_epoch_exhausted(i16::MAX));
    }

    #[test]
    fn transaction_versions() {
        for tv in [
            TransactionVersion::V0,
            TransactionVersion::V1,
            TransactionVersion::V2,
        ] {
            assert_eq!(
                TransactionVersion::from_feature_level(tv.feature_level()),
                Some(tv)
            );
        }
        assert_eq!(TransactionVersion::from_feature_level(3), None);
        assert_eq!(TransactionVersion::from_feature_level(-1), None);
        assert_eq!(TransactionVersion::V0.log_value_version(), 0);
        assert_eq!(TransactionVersion::V1.log_value_version(), 1);
        assert_eq!(TransactionVersion::V2.log_value_version(), 1);
        assert!(!TransactionVersion::V1.supports_epoch_bump());
        assert!(TransactionVersion::V2.supports_epoch_bump());
        assert_eq!(
            TransactionVersion::of_end_txn_request(4),
            TransactionVersion::V0
        );
        assert_eq!(
            TransactionVersion::of_end_txn_request(5),
            TransactionVersion::V2
        );
    }
}
