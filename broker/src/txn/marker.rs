//! Control records: the commit and abort markers that end a transaction on
//! each partition it wrote to, as Kafka lays them out.
//!
//! A control record lives alone in a control batch (attributes: the
//! transactional and control bits, no compression, create time; base
//! sequence -1; the transaction's producer id and epoch). Its key is
//! `int16 version` (0), `int16 type` ([`ControlRecordType`]); an end
//! marker's value is `int16 version` (0), `int32 coordinator epoch`.
//!
//! Reading follows Kafka's leniency where Kafka is lenient: a key or value
//! of a newer, non-negative version is read as version 0 (fields are only
//! ever appended) and extra bytes after the known fields are ignored; a
//! negative version or too few bytes is corruption. Control types other
//! than abort and commit (KRaft's) read as such, and a type id Kafka does
//! not know reads as [`ControlRecordType::Unknown`], which consumers skip.
//!
//! Building the batch around the record is storage's business; this module
//! only says what goes in it ([`MarkerBatch`]), so it needs nothing of
//! storage.

use super::vocab::NO_SEQUENCE;

/// The control key version written (Kafka's
/// `CURRENT_CONTROL_RECORD_KEY_VERSION`).
pub const CONTROL_KEY_VERSION: i16 = 0;
/// The end-marker value version written.
pub const END_TXN_MARKER_VERSION: i16 = 0;
/// A control key's size at version 0.
pub const CONTROL_KEY_SIZE: usize = 4;
/// An end marker value's size at version 0.
pub const END_TXN_MARKER_VALUE_SIZE: usize = 6;

/// Batch attribute bit: the batch belongs to a transaction.
pub const TRANSACTIONAL_FLAG: i16 = 0x10;
/// Batch attribute bit: the batch holds a control record.
pub const CONTROL_FLAG: i16 = 0x20;

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnResult {
    Abort,
    Commit,
}

impl TxnResult {
    /// EndTxn's `committed` flag as a result.
    pub fn from_committed(committed: bool) -> Self {
        if committed {
            TxnResult::Commit
        } else {
            TxnResult::Abort
        }
    }

    pub fn control_type(self) -> ControlRecordType {
        match self {
            TxnResult::Abort => ControlRecordType::Abort,
            TxnResult::Commit => ControlRecordType::Commit,
        }
    }
}

/// The type in a control record's key (Kafka's `ControlRecordType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlRecordType {
    Abort,
    Commit,
    LeaderChange,
    SnapshotHeader,
    SnapshotFooter,
    KraftVersion,
    KraftVoters,
    /// A type id this broker does not know; readers skip such records.
    Unknown(i16),
}

impl ControlRecordType {
    pub fn type_id(self) -> i16 {
        match self {
            ControlRecordType::Abort => 0,
            ControlRecordType::Commit => 1,
            ControlRecordType::LeaderChange => 2,
            ControlRecordType::SnapshotHeader => 3,
            ControlRecordType::SnapshotFooter => 4,
            ControlRecordType::KraftVersion => 5,
            ControlRecordType::KraftVoters => 6,
            ControlRecordType::Unknown(id) => id,
        }
    }

    pub fn from_type_id(id: i16) -> Self {
        match id {
            0 => ControlRecordType::Abort,
            1 => ControlRecordType::Commit,
            2 => ControlRecordType::LeaderChange,
            3 => ControlRecordType::SnapshotHeader,
            4 => ControlRecordType::SnapshotFooter,
            5 => ControlRecordType::KraftVersion,
            6 => ControlRecordType::KraftVoters,
            other => ControlRecordType::Unknown(other),
        }
    }

    /// The transaction result this type ends with, if it is an end marker.
    pub fn txn_result(self) -> Option<TxnResult> {
        match self {
            ControlRecordType::Abort => Some(TxnResult::Abort),
            ControlRecordType::Commit => Some(TxnResult::Commit),
            _ => None,
        }
    }
}

/// Why a control record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    #[error("control record {what} has {found} bytes, needs at least {needed}")]
    TooShort {
        what: &'static str,
        found: usize,
        needed: usize,
    },
    #[error("control record {what} has negative version {version}: corrupt")]
    NegativeVersion { what: &'static str, version: i16 },
    #[error("control record type {0:?} is not an end-of-transaction marker")]
    NotEndTxnMarker(ControlRecordType),
    #[error("control record has no {0}")]
    Missing(&'static str),
}

/// A control record's key for `kind`, at version 0.
pub fn encode_control_key(kind: ControlRecordType) -> [u8; CONTROL_KEY_SIZE] {
    let mut k = [0u8; CONTROL_KEY_SIZE];
    k[..2].copy_from_slice(&CONTROL_KEY_VERSION.to_be_bytes());
    k[2..].copy_from_slice(&kind.type_id().to_be_bytes());
    k
}

/// The type a control key names.
pub fn decode_control_key(key: &[u8]) -> Result<ControlRecordType, MarkerError> {
    let (version, rest) = versioned("key", key, CONTROL_KEY_SIZE)?;
    let _ = version; // newer versions read as version 0
    Ok(ControlRecordType::from_type_id(i16::from_be_bytes([
        rest[0], rest[1],
    ])))
}

/// The value of an end marker (`EndTransactionMarker`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndTxnMarker {
    pub result: TxnResult,
    /// The epoch of the coordinator that wrote it: a partition refuses a
    /// marker from an older coordinator than one it has already seen.
    pub coordinator_epoch: i32,
}

impl EndTxnMarker {
    pub fn new(result: TxnResult, coordinator_epoch: i32) -> Self {
        Self {
            result,
            coordinator_epoch,
        }
    }

    pub fn key(&self) -> [u8; CONTROL_KEY_SIZE] {
        encode_control_key(self.result.control_type())
    }

    pub fn value(&self) -> [u8; END_TXN_MARKER_VALUE_SIZE] {
        let mut v = [0u8; END_TXN_MARKER_VALUE_SIZE];
        v[..2].copy_from_slice(&END_TXN_MARKER_VERSION.to_be_bytes());
        v[2..].copy_from_slice(&self.coordinator_epoch.to_be_bytes());
        v
    }

    /// An end marker from a control record's key and value.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Self, MarkerError> {
        let kind = decode_control_key(key)?;
        let result = kind
            .txn_result()
            .ok_or(MarkerError::NotEndTxnMarker(kind))?;
        let value = value.ok_or(MarkerError::Missing("value"))?;
        let (_, rest) = versioned("value", value, END_TXN_MARKER_VALUE_SIZE)?;
        let coordinator_epoch = i32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]);
        Ok(Self {
            result,
            coordinator_epoch,
        })
    }
}

/// `bytes`' version and what follows it, refusing fewer than `min` bytes or
/// a negative version.
fn versioned<'a>(
    what: &'static str,
    bytes: &'a [u8],
    min: usize,
) -> Result<(i16, &'a [u8]), MarkerError> {
    if bytes.len() < min {
        return Err(MarkerError::TooShort {
            what,
            found: bytes.len(),
            needed: min,
        });
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    if version < 0 {
        return Err(MarkerError::NegativeVersion { what, version });
    }
    Ok((version, &bytes[2..]))
}

/// The attributes of a control batch: transactional and control, no
/// compression, create-time timestamps.
pub const fn control_batch_attributes() -> i16 {
    TRANSACTIONAL_FLAG | CONTROL_FLAG
}

/// Whether batch attributes mark a transactional batch.
pub fn is_transactional(attributes: i16) -> bool {
    attributes & TRANSACTIONAL_FLAG != 0
}

/// Whether batch attributes mark a control batch.
pub fn is_control(attributes: i16) -> bool {
    attributes & CONTROL_FLAG != 0
}

/// What a partition leader writes for one marker: a batch of one record,
/// everything storage needs to frame it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerBatch {
    pub attributes: i16,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub key: [u8; CONTROL_KEY_SIZE],
    pub value: [u8; END_TXN_MARKER_VALUE_SIZE],
}

impl MarkerBatch {
    /// The marker ending `producer_id`'s transaction at `producer_epoch`
    /// (the epoch WriteTxnMarkers carries: with transaction version 2, the
    /// one bumped by EndTxn).
    pub fn new(producer_id: i64, producer_epoch: i16, marker: EndTxnMarker) -> Self {
        Self {
            attributes: control_batch_attributes(),
            producer_id,
            producer_epoch,
            base_sequence: NO_SEQUENCE,
            key: marker.key(),
            value: marker.value(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_match_kafkas_bytes() {
        assert_eq!(encode_control_key(ControlRecordType::Abort), [0, 0, 0, 0]);
        assert_eq!(encode_control_key(ControlRecordType::Commit), [0, 0, 0, 1]);
        let m = EndTxnMarker::new(TxnResult::Commit, 0x0102_0304);
        assert_eq!(m.key(), [0x00, 0x00, 0x00, 0x01]);
        assert_eq!(m.value(), [0x00, 0x00, 0x01, 0x02, 0x03, 0x04]);
        let abort = EndTxnMarker::new(TxnResult::Abort, -1);
        assert_eq!(abort.value(), [0x00, 0x00, 0xff, 0xff, 0xff, 0xff]);
        for marker in [m, abort] {
            assert_eq!(
                EndTxnMarker::decode(&marker.key(), Some(&marker.value())),
                Ok(marker)
            );
        }
    }

    #[test]
    fn newer_versions_and_extra_bytes_read_as_version_zero() {
        let key = [0x00, 0x07, 0x00, 0x00, 0xaa];
        assert_eq!(decode_control_key(&key), Ok(ControlRecordType::Abort));
        let value = [0x00, 0x03, 0x00, 0x00, 0x00, 0x09, 0xbb, 0xcc];
        assert_eq!(
            EndTxnMarker::decode(&key, Some(&value)),
            Ok(EndTxnMarker::new(TxnResult::Abort, 9))
        );
    }

    #[test]
    fn refuses_corrupt_or_foreign_records() {
        assert_eq!(
            decode_control_key(&[0, 0, 0]),
            Err(MarkerError::TooShort {
                what: "key",
                found: 3,
                needed: 4
            })
        );
        assert_eq!(
            decode_control_key(&[0xff, 0xfe, 0, 1]),
            Err(MarkerError::NegativeVersion {
                what: "key",
                version: -2
            })
        );
        let leader_change = encode_control_key(ControlRecordType::LeaderChange);
        assert_eq!(
            EndTxnMarker::decode(&leader_change, Some(&[0, 0, 0, 0, 0, 0])),
            Err(MarkerError::NotEndTxnMarker(
                ControlRecordType::LeaderChange
            ))
        );
        let key = encode_control_key(ControlRecordType::Commit);
        assert_eq!(
            EndTxnMarker::decode(&key, None),
            Err(MarkerError::Missing("value"))
        );
        assert!(matches!(
            EndTxnMarker::decode(&key, Some(&[0, 0, 0, 0, 0])),
            Err(MarkerError::TooShort { .. })
        ));
        assert!(matches!(
            EndTxnMarker::decode(&key, Some(&[0x80, 0, 0, 0, 0, 0])),
            Err(MarkerError::NegativeVersion { .. })
        ));
        // Every prefix of a good record is refused, never a panic.
        let m = EndTxnMarker::new(TxnResult::Abort, 3);
        for n in 0..CONTROL_KEY_SIZE {
            assert!(EndTxnMarker::decode(&m.key()[..n], Some(&m.value())).is_err());
        }
        for n in 0..END_TXN_MARKER_VALUE_SIZE {
            assert!(EndTxnMarker::decode(&m.key(), Some(&m.value()[..n])).is_err());
        }
    }

    #[test]
    fn control_types_round_trip_and_unknown_ones_are_kept() {
        for id in -3..10 {
            let t = ControlRecordType::from_type_id(id);
            assert_eq!(t.type_id(), id);
            assert_eq!(decode_control_key(&encode_control_key(t)), Ok(t));
        }
        assert_eq!(
            ControlRecordType::from_type_id(42),
            ControlRecordType::Unknown(42)
        );
        assert_eq!(TxnResult::from_committed(true), TxnResult::Commit);
        assert_eq!(
            ControlRecordType::Commit.txn_result(),
            Some(TxnResult::Commit)
        );
        assert_eq!(ControlRecordType::KraftVoters.txn_result(), None);
    }

    #[test]
    fn control_batches_are_transactional_control_batches() {
        assert_eq!(control_batch_attributes(), 0x30);
        assert!(is_transactional(control_batch_attributes()));
        assert!(is_control(control_batch_attributes()));
        // Compression codec and timestamp type bits are clear.
        assert_eq!(control_batch_attributes() & 0x0f, 0);
        assert!(is_transactional(0x10) && !is_control(0x10));
        assert!(!is_transactional(0x03));
        let b = MarkerBatch::new(42, 7, EndTxnMarker::new(TxnResult::Commit, 5));
        assert_eq!(b.attributes, 0x30);
        assert_eq!(b.base_sequence, -1);
        assert_eq!((b.producer_id, b.producer_epoch), (42, 7));
        assert_eq!(b.key, [0, 0, 0, 1]);
        assert_eq!(b.value, [0, 0, 0, 0, 0, 5]);
    }
}
