//! The records of `__transaction_state`, byte for byte as Kafka writes them,
//! so a partition written by Kafka loads here and one written here loads in
//! Kafka.
//!
//! A record's key is an `int16` version (0, which is also the
//! transaction-log coordinator record type) followed by
//! `TransactionLogKey` v0: the transactional id as a classic string
//! (`int16` length, UTF-8). Its value is an `int16` version followed by
//! `TransactionLogValue` at that version; a null value is the tombstone
//! that expires a transactional id.
//!
//! `TransactionLogValue` fields, in wire order:
//!
//! | field | type | versions |
//! | --- | --- | --- |
//! | ProducerId | int64 | 0+ |
//! | ProducerEpoch | int16 | 0+ |
//! | TransactionTimeoutMs | int32 | 0+ |
//! | TransactionStatus | int8 | 0+ |
//! | TransactionPartitions | nullable `[]{Topic string, PartitionIds []int32}` | 0+ |
//! | TransactionLastUpdateTimestampMs | int64 | 0+ |
//! | TransactionStartTimestampMs | int64 | 0+ |
//! | PreviousProducerId | int64, tag 0, default -1 | tagged 1+ |
//! | NextProducerId | int64, tag 1, default -1 | tagged 1+ |
//! | ClientTransactionVersion | int16, tag 2, default 0 | tagged 1+ |
//! | NextProducerEpoch | int16, tag 3, default -1 | tagged 1+ |
//!
//! v0 is a classic struct (`int32` array lengths, -1 for null; `int16`
//! string lengths). v1 is flexible (KIP-482): compact arrays and strings
//! (`uvarint` length + 1, 0 for null) and a tagged-field section closing
//! every struct, the top-level one and each partitions entry. A tagged
//! field is written only when it differs from its default, in ascending
//! tag order. Tags 0–2 came with KIP-890 (transaction version 2); tag 3 is
//! KIP-939's, which this coordinator carries but never sets. Tags this code
//! does not know are kept, raw, and written back in tag order, so a record
//! from a newer Kafka survives a decode/encode round trip.
//!
//! Which version is written follows the cluster's transaction version
//! ([`TransactionVersion::log_value_version`](super::vocab::TransactionVersion::log_value_version)):
//! v0 cannot carry tagged fields, so encoding at v0 drops them, as Kafka
//! does (it only sets them from v1 on).
//!
//! Two layout choices that Kafka leaves to its hash maps: partitions are
//! written grouped by topic in sorted order (Kafka's order follows a
//! `HashMap`, so no byte-exact claim can be made across implementations for
//! several topics; readers do not care), and a value in state Empty carries
//! a null partition array, as Kafka writes it.
//!
//! Decoding trusts nothing: every length is checked against the bytes
//! present before anything is allocated from it, a known tagged field must
//! have its type's size, and bytes left over after the value are refused.

use super::vocab::TopicPartition;

/// The key and value version of transaction-log records (Kafka's
/// `CoordinatorRecordType.TRANSACTION_LOG`, and `TransactionLogKey` v0).
pub const KEY_VERSION: i16 = 0;
/// Highest `TransactionLogValue` version understood.
pub const MAX_VALUE_VERSION: i16 = 1;

const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;
const TAG_NEXT_PRODUCER_EPOCH: u32 = 3;

/// Why a record could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("record ends early: needed {needed} more bytes at byte {at}")]
    Truncated { at: usize, needed: usize },
    #[error("unknown transaction log key version {0}")]
    UnknownKeyVersion(i16),
    #[error("unknown transaction log value version {0}")]
    UnknownValueVersion(i16),
    #[error("a non-nullable string or array is null at byte {0}")]
    UnexpectedNull(usize),
    #[error("negative length {len} at byte {at}")]
    NegativeLength { at: usize, len: i64 },
    #[error("malformed unsigned varint at byte {0}")]
    BadVarint(usize),
    #[error("string at byte {0} is not UTF-8")]
    InvalidUtf8(usize),
    #[error("tagged field {tag} has {size} bytes, its type has {expected}")]
    TaggedFieldSize {
        tag: u32,
        size: usize,
        expected: usize,
    },
    #[error("{0} bytes left over after the record")]
    TrailingBytes(usize),
}

/// Why a record could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("string of {0} bytes is longer than an int16 length allows")]
    StringTooLong(usize),
}

/// A tagged field this code does not interpret, kept to be written back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTaggedField {
    pub tag: u32,
    pub data: Vec<u8>,
}

/// One `TransactionPartitions` entry: a topic and its partition ids.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicPartitions {
    pub topic: String,
    pub partition_ids: Vec<i32>,
    pub unknown_tags: Vec<RawTaggedField>,
}

/// `TransactionLogValue`, field for field (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: i64,
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub next_producer_epoch: i16,
    pub timeout_ms: i32,
    /// The state's id (`TxnState::id` in [`super::state`]); kept raw so the
    /// record layer does not judge states.
    pub status: i8,
    /// `None` is the null array Kafka writes for state Empty.
    pub partitions: Option<Vec<TopicPartitions>>,
    pub last_update_ms: i64,
    pub start_ms: i64,
    pub client_transaction_version: i16,
    pub unknown_tags: Vec<RawTaggedField>,
}

impl Default for TxnLogValue {
    fn default() -> Self {
        Self {
            producer_id: -1,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: -1,
            next_producer_epoch: -1,
            timeout_ms: 0,
            status: 0,
            partitions: None,
            last_update_ms: -1,
            start_ms: -1,
            client_transaction_version: 0,
            unknown_tags: Vec::new(),
        }
    }
}

/// One decoded record of `__transaction_state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnLogEntry {
    /// The transactional id's latest metadata.
    Value {
        transactional_id: String,
        value: TxnLogValue,
    },
    /// The transactional id expired: forget it.
    Tombstone { transactional_id: String },
}

/// The key of `transactional_id`'s records.
pub fn encode_key(transactional_id: &str) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(4 + transactional_id.len());
    out.extend_from_slice(&KEY_VERSION.to_be_bytes());
    put_classic_string(&mut out, transactional_id)?;
    Ok(out)
}

/// The transactional id a key names.
pub fn decode_key(key: &[u8]) -> Result<String, DecodeError> {
    let mut r = Reader::new(key);
    let version = r.i16()?;
    if version != KEY_VERSION {
        return Err(DecodeError::UnknownKeyVersion(version));
    }
    let id = r.classic_string()?;
    r.finish()?;
    Ok(id)
}

/// A tombstone for an expired transactional id: its key, and a null value.
pub fn tombstone(transactional_id: &str) -> Result<(Vec<u8>, Option<Vec<u8>>), EncodeError> {
    Ok((encode_key(transactional_id)?, None))
}

/// A whole record: `value` `None` is a tombstone.
pub fn decode_record(key: &[u8], value: Option<&[u8]>) -> Result<TxnLogEntry, DecodeError> {
    let transactional_id = decode_key(key)?;
    Ok(match value {
        None => TxnLogEntry::Tombstone { transactional_id },
        Some(bytes) => TxnLogEntry::Value {
            transactional_id,
            value: TxnLogValue::decode(bytes)?,
        },
    })
}

impl TxnLogValue {
    /// The value's bytes at `version` (0 or 1; anything above 1 is written
    /// as 1, the highest known). v0 drops the tagged fields.
    pub fn encode(&self, version: i16) -> Result<Vec<u8>, EncodeError> {
        let flexible = version >= 1;
        let version: i16 = if flexible { 1 } else { 0 };
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&version.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.timeout_ms.to_be_bytes());
        out.push(self.status as u8);
        match &self.partitions {
            None if flexible => put_uvarint(&mut out, 0),
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(entries) => {
                put_array_len(&mut out, entries.len(), flexible);
                for e in entries {
                    if flexible {
                        put_compact_string(&mut out, &e.topic);
                    } else {
                        put_classic_string(&mut out, &e.topic)?;
                    }
                    put_array_len(&mut out, e.partition_ids.len(), flexible);
                    for p in &e.partition_ids {
                        out.extend_from_slice(&p.to_be_bytes());
                    }
                    if flexible {
                        put_tagged_fields(&mut out, Vec::new(), &e.unknown_tags);
                    }
                }
            }
        }
        out.extend_from_slice(&self.last_update_ms.to_be_bytes());
        out.extend_from_slice(&self.start_ms.to_be_bytes());
        if flexible {
            // (tag, differs from its default, bytes), in tag order.
            let fields = [
                (
                    TAG_PREVIOUS_PRODUCER_ID,
                    self.previous_producer_id != -1,
                    self.previous_producer_id.to_be_bytes().to_vec(),
                ),
                (
                    TAG_NEXT_PRODUCER_ID,
                    self.next_producer_id != -1,
                    self.next_producer_id.to_be_bytes().to_vec(),
                ),
                (
                    TAG_CLIENT_TRANSACTION_VERSION,
                    self.client_transaction_version != 0,
                    self.client_transaction_version.to_be_bytes().to_vec(),
                ),
                (
                    TAG_NEXT_PRODUCER_EPOCH,
                    self.next_producer_epoch != -1,
                    self.next_producer_epoch.to_be_bytes().to_vec(),
                ),
            ];
            let known = fields
                .into_iter()
                .filter(|(_, set, _)| *set)
                .map(|(tag, _, data)| (tag, data))
                .collect();
            put_tagged_fields(&mut out, known, &self.unknown_tags);
        }
        Ok(out)
    }

    /// A value's bytes (version prefix included).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let version = r.i16()?;
        if !(0..=MAX_VALUE_VERSION).contains(&version) {
            return Err(DecodeError::UnknownValueVersion(version));
        }
        let flexible = version >= 1;
        let mut v = TxnLogValue {
            producer_id: r.i64()?,
            producer_epoch: r.i16()?,
            timeout_ms: r.i32()?,
            status: r.i8()?,
            ..TxnLogValue::default()
        };
        // Smallest entry: a one-byte topic length (or two), an array length
        // and, when flexible, an empty tagged section.
        let min_entry = if flexible { 3 } else { 6 };
        v.partitions = match r.array_len(flexible, min_entry)? {
            None => None,
            Some(n) => {
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let topic = if flexible {
                        r.compact_string()?
                    } else {
                        r.classic_string()?
                    };
                    let ids = r
                        .array_len(flexible, 4)?
                        .ok_or(DecodeError::UnexpectedNull(r.pos))?;
                    let mut partition_ids = Vec::with_capacity(ids);
                    for _ in 0..ids {
                        partition_ids.push(r.i32()?);
                    }
                    let mut unknown_tags = Vec::new();
                    if flexible {
                        r.tagged_fields(|tag, data| {
                            unknown_tags.push(RawTaggedField {
                                tag,
                                data: data.to_vec(),
                            });
                            Ok(())
                        })?;
                    }
                    entries.push(TopicPartitions {
                        topic,
                        partition_ids,
                        unknown_tags,
                    });
                }
                Some(entries)
            }
        };
        v.last_update_ms = r.i64()?;
        v.start_ms = r.i64()?;
        if flexible {
            let mut unknown = Vec::new();
            r.tagged_fields(|tag, data| {
                match tag {
                    TAG_PREVIOUS_PRODUCER_ID => v.previous_producer_id = tagged_i64(tag, data)?,
                    TAG_NEXT_PRODUCER_ID => v.next_producer_id = tagged_i64(tag, data)?,
                    TAG_CLIENT_TRANSACTION_VERSION => {
                        v.client_transaction_version = tagged_i16(tag, data)?
                    }
                    TAG_NEXT_PRODUCER_EPOCH => v.next_producer_epoch = tagged_i16(tag, data)?,
                    _ => unknown.push(RawTaggedField {
                        tag,
                        data: data.to_vec(),
                    }),
                }
                Ok(())
            })?;
            v.unknown_tags = unknown;
        }
        r.finish()?;
        Ok(v)
    }

    /// The partitions as a flat list (none for a null array).
    pub fn topic_partitions(&self) -> Vec<TopicPartition> {
        self.partitions
            .iter()
            .flatten()
            .flat_map(|e| {
                e.partition_ids
                    .iter()
                    .map(|p| TopicPartition::new(e.topic.clone(), *p))
            })
            .collect()
    }

    /// `TransactionPartitions` entries for `partitions`, grouped by topic
    /// in their (sorted) order.
    pub fn group_partitions<'a>(
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
    ) -> Vec<TopicPartitions> {
        let mut out: Vec<TopicPartitions> = Vec::new();
        for tp in partitions {
            match out.last_mut() {
                Some(last) if last.topic == tp.topic => last.partition_ids.push(tp.partition),
                _ => out.push(TopicPartitions {
                    topic: tp.topic.clone(),
                    partition_ids: vec![tp.partition],
                    unknown_tags: Vec::new(),
                }),
            }
        }
        out
    }
}

fn tagged_i64(tag: u32, data: &[u8]) -> Result<i64, DecodeError> {
    let b: [u8; 8] = data.try_into().map_err(|_| DecodeError::TaggedFieldSize {
        tag,
        size: data.len(),
        expected: 8,
    })?;
    Ok(i64::from_be_bytes(b))
}

fn tagged_i16(tag: u32, data: &[u8]) -> Result<i16, DecodeError> {
    let b: [u8; 2] = data.try_into().map_err(|_| DecodeError::TaggedFieldSize {
        tag,
        size: data.len(),
        expected: 2,
    })?;
    Ok(i16::from_be_bytes(b))
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_array_len(out: &mut Vec<u8>, len: usize, flexible: bool) {
    if flexible {
        put_uvarint(out, u32::try_from(len).unwrap_or(u32::MAX - 1) + 1);
    } else {
        out.extend_from_slice(&i32::try_from(len).unwrap_or(i32::MAX).to_be_bytes());
    }
}

fn put_classic_string(out: &mut Vec<u8>, s: &str) -> Result<(), EncodeError> {
    let len = i16::try_from(s.len()).map_err(|_| EncodeError::StringTooLong(s.len()))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_compact_string(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, u32::try_from(s.len()).unwrap_or(u32::MAX - 1) + 1);
    out.extend_from_slice(s.as_bytes());
}

/// A tagged-field section: `known` (ascending tags) merged with `unknown`
/// in ascending tag order, as Kafka's writer interleaves them.
fn put_tagged_fields(out: &mut Vec<u8>, known: Vec<(u32, Vec<u8>)>, unknown: &[RawTaggedField]) {
    let mut all: Vec<(u32, &[u8])> = known.iter().map(|(t, d)| (*t, d.as_slice())).collect();
    all.extend(unknown.iter().map(|f| (f.tag, f.data.as_slice())));
    all.sort_by_key(|(t, _)| *t);
    put_uvarint(out, all.len() as u32);
    for (tag, data) in all {
        put_uvarint(out, tag);
        put_uvarint(out, data.len() as u32);
        out.extend_from_slice(data);
    }
}

/// A cursor over untrusted bytes: every read checks what is left.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated {
                at: self.pos,
                needed: n - self.remaining(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// Kafka's unsigned varint: at most five bytes, fitting 32 bits.
    fn uvarint(&mut self) -> Result<u32, DecodeError> {
        let start = self.pos;
        let mut v: u32 = 0;
        for i in 0..5 {
            let b = self.take(1)?[0];
            if i == 4 && b > 0x0f {
                return Err(DecodeError::BadVarint(start));
            }
            v |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::BadVarint(start))
    }

    /// A length that must fit in what is left, `elem` bytes an element at
    /// least, so a hostile count cannot size an allocation.
    fn bounded(&self, at: usize, len: usize, elem: usize) -> Result<usize, DecodeError> {
        let needed = len.saturating_mul(elem.max(1));
        if needed > self.remaining() {
            return Err(DecodeError::Truncated {
                at,
                needed: needed - self.remaining(),
            });
        }
        Ok(len)
    }

    /// An array's element count: `None` for null.
    fn array_len(&mut self, flexible: bool, elem: usize) -> Result<Option<usize>, DecodeError> {
        let at = self.pos;
        let len: i64 = if flexible {
            i64::from(self.uvarint()?) - 1
        } else {
            i64::from(self.i32()?)
        };
        match len {
            -1 => Ok(None),
            n if n < 0 => Err(DecodeError::NegativeLength { at, len: n }),
            n => self.bounded(at, n as usize, elem).map(Some),
        }
    }

    fn utf8(&mut self, at: usize, len: usize) -> Result<String, DecodeError> {
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::InvalidUtf8(at))
    }

    fn classic_string(&mut self) -> Result<String, DecodeError> {
        let at = self.pos;
        match self.i16()? {
            -1 => Err(DecodeError::UnexpectedNull(at)),
            n if n < 0 => Err(DecodeError::NegativeLength {
                at,
                len: i64::from(n),
            }),
            n => self.utf8(at, n as usize),
        }
    }

    fn compact_string(&mut self) -> Result<String, DecodeError> {
        let at = self.pos;
        match self.uvarint()? {
            0 => Err(DecodeError::UnexpectedNull(at)),
            n => self.utf8(at, n as usize - 1),
        }
    }

    /// A tagged-field section, each field handed to `f` with its bytes.
    fn tagged_fields(
        &mut self,
        mut f: impl FnMut(u32, &[u8]) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        let at = self.pos;
        // Each field is at least two bytes (tag, size).
        let claimed = self.uvarint()? as usize;
        let count = self.bounded(at, claimed, 2)?;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            let data = self.take(size)?;
            f(tag, data)?;
        }
        Ok(())
    }

    fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepare_commit() -> TxnLogValue {
        TxnLogValue {
            producer_id: 1000,
            previous_producer_id: 999,
            next_producer_id: -1,
            producer_epoch: 5,
            next_producer_epoch: -1,
            timeout_ms: 60_000,
            status: 2, // PrepareCommit
            partitions: Some(vec![TopicPartitions {
                topic: "t".into(),
                partition_ids: vec![0, 1],
                unknown_tags: Vec::new(),
            }]),
            last_update_ms: 1_700_000_000_123,
            start_ms: 1_700_000_000_000,
            client_transaction_version: 2,
            unknown_tags: Vec::new(),
        }
    }

    #[test]
    fn key_is_version_zero_then_a_classic_string() {
        let key = encode_key("txn").unwrap();
        assert_eq!(key, vec![0x00, 0x00, 0x00, 0x03, b't', b'x', b'n']);
        assert_eq!(decode_key(&key).unwrap(), "txn");
        assert_eq!(
            decode_key(&[0x00, 0x01, 0x00, 0x00]),
            Err(DecodeError::UnknownKeyVersion(1))
        );
        assert_eq!(
            encode_key(&"x".repeat(40_000)),
            Err(EncodeError::StringTooLong(40_000))
        );
    }

    #[test]
    fn flexible_value_matches_kafkas_layout() {
        let expected: Vec<u8> = [
            &[0x00, 0x01][..],                   // version 1
            &1000i64.to_be_bytes(),              // ProducerId
            &[0x00, 0x05],                       // ProducerEpoch
            &60_000i32.to_be_bytes(),            // TransactionTimeoutMs
            &[0x02],                             // TransactionStatus
            &[0x02],                             // compact array: 1 entry
            &[0x02, b't'],                       //   Topic "t"
            &[0x03],                             //   compact array: 2 ids
            &[0, 0, 0, 0, 0, 0, 0, 1],           //   0, 1
            &[0x00],                             //   entry's tagged fields: none
            &1_700_000_000_123i64.to_be_bytes(), // LastUpdateTimestamp
            &1_700_000_000_000i64.to_be_bytes(), // StartTimestamp
            &[0x02],                             // two tagged fields
            &[0x00, 0x08],                       //   tag 0, 8 bytes
            &999i64.to_be_bytes(),               //   PreviousProducerId
            &[0x02, 0x02, 0x00, 0x02],           //   tag 2: ClientTransactionVersion 2
        ]
        .concat();
        let v = prepare_commit();
        assert_eq!(v.encode(1).unwrap(), expected);
        assert_eq!(TxnLogValue::decode(&expected).unwrap(), v);
    }

    #[test]
    fn classic_value_matches_kafkas_layout_and_drops_tags() {
        let expected: Vec<u8> = [
            &[0x00, 0x00][..],                   // version 0
            &1000i64.to_be_bytes(),              // ProducerId
            &[0x00, 0x05],                       // ProducerEpoch
            &60_000i32.to_be_bytes(),            // TransactionTimeoutMs
            &[0x02],                             // TransactionStatus
            &[0, 0, 0, 1],                       // array: 1 entry
            &[0x00, 0x01, b't'],                 //   Topic "t"
            &[0, 0, 0, 2],                       //   array: 2 ids
            &[0, 0, 0, 0, 0, 0, 0, 1],           //   0, 1
            &1_700_000_000_123i64.to_be_bytes(), // LastUpdateTimestamp
            &1_700_000_000_000i64.to_be_bytes(), // StartTimestamp
        ]
        .concat();
        assert_eq!(prepare_commit().encode(0).unwrap(), expected);
        let back = TxnLogValue::decode(&expected).unwrap();
        assert_eq!(back.previous_producer_id, -1, "v0 carries no tags");
        assert_eq!(back.client_transaction_version, 0);
        assert_eq!(back.topic_partitions().len(), 2);
    }

    #[test]
    fn empty_state_writes_a_null_array() {
        let v = TxnLogValue {
            producer_id: 7,
            producer_epoch: 0,
            timeout_ms: 1000,
            status: 0,
            partitions: None,
            last_update_ms: 5,
            start_ms: -1,
            ..TxnLogValue::default()
        };
        let flex = v.encode(1).unwrap();
        assert_eq!(flex[17], 0x00, "compact null array");
        assert_eq!(flex.len(), 2 + 8 + 2 + 4 + 1 + 1 + 8 + 8 + 1);
        assert_eq!(*flex.last().unwrap(), 0x00, "no tagged fields at defaults");
        assert_eq!(TxnLogValue::decode(&flex).unwrap(), v);
        let classic = v.encode(0).unwrap();
        assert_eq!(&classic[17..21], &[0xff, 0xff, 0xff, 0xff], "null array");
        assert_eq!(TxnLogValue::decode(&classic).unwrap(), v);
    }

    #[test]
    fn every_known_tag_and_unknown_tags_round_trip_in_tag_order() {
        let mut v = prepare_commit();
        v.next_producer_id = 2000;
        v.next_producer_epoch = 3;
        v.unknown_tags = vec![
            RawTaggedField {
                tag: 9,
                data: vec![1, 2, 3],
            },
            RawTaggedField {
                tag: 4,
                data: vec![0x7f, 0xff],
            },
        ];
        v.partitions.as_mut().unwrap()[0].unknown_tags = vec![RawTaggedField {
            tag: 0,
            data: vec![],
        }];
        let bytes = v.encode(1).unwrap();
        let back = TxnLogValue::decode(&bytes).unwrap();
        // Unknown tags come back in tag order, after the known ones.
        let mut sorted = v.clone();
        sorted.unknown_tags.sort_by_key(|f| f.tag);
        assert_eq!(back, sorted);
        assert_eq!(back.encode(1).unwrap(), bytes, "stable re-encoding");
        // The section lists tags 0, 1, 2, 3, 4, 9 in that order.
        let tail = &bytes[bytes.len() - (1 + 10 + 10 + 4 + 4 + 4 + 5)..];
        assert_eq!(tail[0], 6);
        assert_eq!(tail[1], 0);
        assert_eq!(tail[11], 1);
        assert_eq!(tail[21], 2);
        assert_eq!(tail[25], 3);
        assert_eq!(tail[29], 4);
        assert_eq!(tail[33], 9);
    }

    #[test]
    fn records_and_tombstones() {
        let (key, value) = tombstone("gone").unwrap();
        assert_eq!(value, None);
        assert_eq!(
            decode_record(&key, None).unwrap(),
            TxnLogEntry::Tombstone {
                transactional_id: "gone".into()
            }
        );
        let v = prepare_commit();
        let bytes = v.encode(1).unwrap();
        assert_eq!(
            decode_record(&encode_key("t1").unwrap(), Some(&bytes)).unwrap(),
            TxnLogEntry::Value {
                transactional_id: "t1".into(),
                value: v
            }
        );
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        let good = prepare_commit().encode(1).unwrap();
        let mut v2 = good.clone();
        v2[1] = 2;
        assert_eq!(
            TxnLogValue::decode(&v2),
            Err(DecodeError::UnknownValueVersion(2))
        );
        let mut neg = good.clone();
        neg[0] = 0xff;
        assert!(matches!(
            TxnLogValue::decode(&neg),
            Err(DecodeError::UnknownValueVersion(_))
        ));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(
            TxnLogValue::decode(&trailing),
            Err(DecodeError::TrailingBytes(1))
        );
        // Tag 0 declared with 2 bytes instead of 8.
        let mut v = prepare_commit();
        v.previous_producer_id = -1;
        v.client_transaction_version = 0;
        let mut short_tag = v.encode(1).unwrap();
        short_tag.pop();
        short_tag.extend_from_slice(&[0x01, 0x00, 0x02, 0x00, 0x01]);
        assert_eq!(
            TxnLogValue::decode(&short_tag),
            Err(DecodeError::TaggedFieldSize {
                tag: 0,
                size: 2,
                expected: 8
            })
        );
        // A topic that is not UTF-8.
        let mut bad_utf8 = good.clone();
        bad_utf8[19] = 0xff;
        assert_eq!(
            TxnLogValue::decode(&bad_utf8),
            Err(DecodeError::InvalidUtf8(18))
        );
    }

    #[test]
    fn hostile_counts_fail_before_allocating() {
        // A classic value claiming i32::MAX partition entries in 4 bytes.
        let mut v = Vec::new();
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&1i64.to_be_bytes());
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(&1i32.to_be_bytes());
        v.push(1);
        v.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            TxnLogValue::decode(&v),
            Err(DecodeError::Truncated { .. })
        ));
        // A flexible value claiming 2^32-2 entries, and one with a six-byte varint.
        let mut f = v[..17].to_vec();
        f[1] = 1;
        let mut huge = f.clone();
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(
            TxnLogValue::decode(&huge),
            Err(DecodeError::Truncated { .. })
        ));
        let mut long_varint = f.clone();
        long_varint.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert_eq!(
            TxnLogValue::decode(&long_varint),
            Err(DecodeError::BadVarint(17))
        );
        // Negative classic lengths.
        let mut neg = v.clone();
        neg.truncate(17);
        neg.extend_from_slice(&(-5i32).to_be_bytes());
        assert!(matches!(
            TxnLogValue::decode(&neg),
            Err(DecodeError::NegativeLength { .. })
        ));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut v = prepare_commit();
        v.next_producer_id = 4;
        for version in [0, 1] {
            let bytes = v.encode(version).unwrap();
            for n in 0..bytes.len() {
                assert!(
                    TxnLogValue::decode(&bytes[..n]).is_err(),
                    "v{version} cut at {n} decoded"
                );
            }
        }
        let key = encode_key("abc").unwrap();
        for n in 0..key.len() {
            assert!(decode_key(&key[..n]).is_err());
        }
    }

    #[test]
    fn random_corruption_never_panics() {
        // xorshift: deterministic, no dependency.
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut v = prepare_commit();
        v.unknown_tags.push(RawTaggedField {
            tag: 7,
            data: vec![1; 5],
        });
        let seeds = [
            v.encode(0).unwrap(),
            v.encode(1).unwrap(),
            encode_key("some-transactional-id").unwrap(),
        ];
        for _ in 0..20_000 {
            let mut b = seeds[(next() % 3) as usize].clone();
            for _ in 0..=(next() % 4) {
                let i = (next() as usize) % b.len();
                b[i] = next() as u8;
            }
            if next() % 4 == 0 {
                b.truncate((next() as usize) % (b.len() + 1));
            }
            if let Ok(decoded) = TxnLogValue::decode(&b) {
                // Whatever decodes re-encodes without panicking.
                let _ = decoded.encode(1);
            }
            let _ = decode_key(&b);
            let _ = decode_record(&b, Some(&b));
        }
    }

    #[test]
    fn grouping_partitions_by_topic() {
        let tps = [
            TopicPartition::new("a", 0),
            TopicPartition::new("a", 2),
            TopicPartition::new("b", 1),
        ];
        let grouped = TxnLogValue::group_partitions(&tps);
        assert_eq!(grouped.len(), 2);
        assert_eq!(grouped[0].partition_ids, vec![0, 2]);
        assert_eq!(grouped[1].topic, "b");
        let v = TxnLogValue {
            partitions: Some(grouped),
            ..TxnLogValue::default()
        };
        assert_eq!(v.topic_partitions(), tps.to_vec());
    }
}
