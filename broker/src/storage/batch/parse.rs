//! Parsing a record batch (format v2, "magic 2"): its byte layout (field
//! positions, bounds-checked readers, zig-zag varints), the fixed header
//! ([`BatchHeader`]), its CRC-32C, and reading the records of a whole
//! batch (timestamp lookups; decoding, with decompression, through
//! `kafka_protocol`'s `RecordBatchDecoder`).
//!
//! This module owns the layout every other part of `storage::batch`
//! reads and writes by; it imports nothing of them. Every function here
//! accepts untrusted bytes (produce payloads, possibly corrupt log files)
//! and must not panic: all reads go through bounds-checked helpers.
//!
//! Layout of a v2 batch (big endian):
//! baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 |
//! crc u32 | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 |
//! maxTimestamp i64 | producerId i64 | producerEpoch i16 | baseSequence i32 |
//! recordsCount i32 | records...
//! The CRC-32C covers everything from `attributes` to the end of the batch.

use bytes::Bytes;
use kafka_protocol::records::{Record, RecordBatchDecoder};

use crate::storage::{compression, Result, StorageError};

/// Bytes before the records of a v2 batch.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes of `baseOffset` + `batchLength`: the part not counted in `batchLength`.
pub const LOG_OVERHEAD: usize = 12;
/// Smallest valid `batchLength` (a header without records).
pub const MIN_BATCH_LENGTH: i32 = (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32;
/// The only record batch format this broker stores.
pub const MAGIC_V2: i8 = 2;

// Field positions inside a batch.
pub(super) const BASE_OFFSET_POS: usize = 0;
pub(super) const LENGTH_POS: usize = 8;
pub(super) const LEADER_EPOCH_POS: usize = 12;
/// Position of the magic byte (the same in message formats v0, v1 and v2).
pub const MAGIC_POS: usize = 16;
pub(super) const CRC_POS: usize = 17;
/// Start of the region covered by the CRC (`attributes`).
pub const CRC_START: usize = 21;
pub(super) const ATTRIBUTES_POS: usize = 21;
pub(super) const LAST_OFFSET_DELTA_POS: usize = 23;
pub(super) const BASE_TIMESTAMP_POS: usize = 27;
pub(super) const MAX_TIMESTAMP_POS: usize = 35;
pub(super) const PRODUCER_ID_POS: usize = 43;
pub(super) const PRODUCER_EPOCH_POS: usize = 51;
pub(super) const BASE_SEQUENCE_POS: usize = 53;
pub(super) const RECORDS_COUNT_POS: usize = 57;

/// Attribute bit marking LogAppendTime timestamps.
pub(super) const TIMESTAMP_TYPE_BIT: i16 = 0x08;
/// KIP-534's attributes bit 6: the batch's base timestamp holds its delete
/// horizon (set by the cleaner on transaction markers it may later drop).
pub(super) const DELETE_HORIZON_BIT: i16 = 0x40;

pub(super) fn corrupt(msg: impl Into<String>) -> StorageError {
    StorageError::CorruptBatch(msg.into())
}

pub(super) fn read_array<const N: usize>(buf: &[u8], pos: usize) -> Option<[u8; N]> {
    let end = pos.checked_add(N)?;
    buf.get(pos..end)?.try_into().ok()
}

pub(super) fn read_i64(buf: &[u8], pos: usize) -> Option<i64> {
    read_array::<8>(buf, pos).map(i64::from_be_bytes)
}
pub(super) fn read_i32(buf: &[u8], pos: usize) -> Option<i32> {
    read_array::<4>(buf, pos).map(i32::from_be_bytes)
}
pub(super) fn read_u32(buf: &[u8], pos: usize) -> Option<u32> {
    read_array::<4>(buf, pos).map(u32::from_be_bytes)
}
pub(super) fn read_i16(buf: &[u8], pos: usize) -> Option<i16> {
    read_array::<2>(buf, pos).map(i16::from_be_bytes)
}

/// Reads `baseOffset` and `batchLength` from the first [`LOG_OVERHEAD`]
/// bytes of `buf`; `None` if `buf` is shorter.
pub fn read_offset_and_length(buf: &[u8]) -> Option<(i64, i32)> {
    Some((read_i64(buf, BASE_OFFSET_POS)?, read_i32(buf, LENGTH_POS)?))
}

/// The parsed fixed header of one v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the header at the start of `buf` (which must hold at least
    /// `BATCH_HEADER_LEN` bytes). Checks only the structure, not the CRC:
    /// the magic must be 2 (else [`StorageError::UnsupportedMagic`]) and
    /// `batchLength` at least a header's worth (else `CorruptBatch`).
    pub fn parse(buf: &[u8]) -> Result<Self> {
        if let Some(&magic) = buf.get(MAGIC_POS) {
            let magic = magic as i8;
            if magic != MAGIC_V2 {
                return Err(StorageError::UnsupportedMagic(magic));
            }
        }
        let header = buf.get(..BATCH_HEADER_LEN).ok_or_else(|| {
            corrupt(format!(
                "{} bytes is too short for a batch header",
                buf.len()
            ))
        })?;
        let field = || corrupt("truncated batch header");
        let h = BatchHeader {
            base_offset: read_i64(header, BASE_OFFSET_POS).ok_or_else(field)?,
            batch_length: read_i32(header, LENGTH_POS).ok_or_else(field)?,
            partition_leader_epoch: read_i32(header, LEADER_EPOCH_POS).ok_or_else(field)?,
            magic: MAGIC_V2,
            crc: read_u32(header, CRC_POS).ok_or_else(field)?,
            attributes: read_i16(header, ATTRIBUTES_POS).ok_or_else(field)?,
            last_offset_delta: read_i32(header, LAST_OFFSET_DELTA_POS).ok_or_else(field)?,
            base_timestamp: read_i64(header, BASE_TIMESTAMP_POS).ok_or_else(field)?,
            max_timestamp: read_i64(header, MAX_TIMESTAMP_POS).ok_or_else(field)?,
            producer_id: read_i64(header, PRODUCER_ID_POS).ok_or_else(field)?,
            producer_epoch: read_i16(header, PRODUCER_EPOCH_POS).ok_or_else(field)?,
            base_sequence: read_i32(header, BASE_SEQUENCE_POS).ok_or_else(field)?,
            records_count: read_i32(header, RECORDS_COUNT_POS).ok_or_else(field)?,
        };
        if h.batch_length < MIN_BATCH_LENGTH {
            return Err(corrupt(format!(
                "batchLength {} is below the minimum {MIN_BATCH_LENGTH}",
                h.batch_length
            )));
        }
        Ok(h)
    }
    /// Whole size of the batch on disk and on the wire.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + usize::try_from(self.batch_length).unwrap_or(0)
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(self.last_offset_delta as i64)
    }
    /// Compression codec id (attributes bits 0-2): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression(&self) -> u8 {
        (self.attributes & 0x07) as u8
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }
    /// The delete horizon the cleaner set (KIP-534), if any: after it the
    /// batch may be removed.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_BIT != 0).then_some(self.base_timestamp)
    }
}

/// Whether the first batch of `buf` says its records are compressed
/// (attributes bits 0–2), read without any other check: a hint for where
/// to do the checks, never a verdict on the bytes.
pub fn first_batch_is_compressed(buf: &[u8]) -> bool {
    read_i16(buf, ATTRIBUTES_POS).is_some_and(|a| a & 0x07 != 0)
}

/// CRC-32C of a whole batch as stored in its `crc` field (from `attributes` on).
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(batch.get(CRC_START..).unwrap_or(&[]))
}

/// The most bytes of a varlong.
pub(super) const MAX_VARLONG_BYTES: usize = 10;

/// Reads a zig-zag varint (Kafka's `varint`/`varlong`) at `*pos`.
#[inline]
pub(super) fn read_varlong(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut at = *pos;
    let mut value: u64 = 0;
    for i in 0..MAX_VARLONG_BYTES {
        let byte = *buf.get(at)?;
        at += 1;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *pos = at;
            return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    None
}

/// A varint that must fit in an `i32` (Kafka's `varint`).
#[inline]
pub(super) fn read_varint32(buf: &[u8], pos: &mut usize) -> Option<i32> {
    i32::try_from(read_varlong(buf, pos)?).ok()
}

/// For an uncompressed CreateTime batch, finds the first record whose
/// timestamp is `>= timestamp` and whose offset delta is `>= min_offset_delta`,
/// and returns its `(offsetDelta, timestamp)`.
/// `None` when no record qualifies, the batch is compressed or uses
/// LogAppendTime, or the records cannot be parsed: callers then fall back
/// to batch granularity.
pub fn first_record_at_or_after(
    batch: &[u8],
    timestamp: i64,
    min_offset_delta: i32,
) -> Option<(i32, i64)> {
    let header = BatchHeader::parse(batch).ok()?;
    if header.compression() != 0 || header.is_log_append_time() {
        return None;
    }
    let end = header.total_size().min(batch.len());
    let records = batch.get(BATCH_HEADER_LEN..end)?;
    let mut pos = 0usize;
    for _ in 0..header.records_count.max(0) {
        let length = usize::try_from(read_varlong(records, &mut pos)?).ok()?;
        let start = pos;
        pos = pos.checked_add(length)?;
        let record = records.get(start..pos)?;
        let mut p = 1usize; // skip the record attributes byte
        let ts_delta = read_varlong(record, &mut p)?;
        let offset_delta = i32::try_from(read_varlong(record, &mut p)?).ok()?;
        let ts = header.base_timestamp.checked_add(ts_delta)?;
        if ts >= timestamp && offset_delta >= min_offset_delta {
            return Some((offset_delta, ts));
        }
    }
    None
}

/// Decodes the records of the one whole batch held by `batch` (any codec:
/// gzip, snappy, lz4 and zstd are decompressed, bounded by
/// [`compression::MAX_DECOMPRESSED_BATCH_BYTES`]). The decoder checks the
/// CRC again; anything it rejects is `CorruptBatch`. Safe on any bytes,
/// including batches an older version stored without record validation:
/// counts that lie fail (the patched `kafka_protocol` never allocates from
/// them), they do not abort.
pub fn decode_records(batch: &[u8]) -> Result<Vec<Record>> {
    let header = BatchHeader::parse(batch)?;
    let whole = batch
        .get(..header.total_size())
        .ok_or_else(|| corrupt("batch runs past the end of the buffer"))?;
    let set = RecordBatchDecoder::decode_with_custom_compression(
        &mut Bytes::copy_from_slice(whole),
        Some(compression::decompress),
    )
    .map_err(|e| corrupt(format!("cannot decode the records: {e}")))?;
    Ok(set.records)
}

/// The COMMIT or ABORT marker a control batch's bytes hold (`None`:
/// another control type, or unreadable): what the partition's replay and
/// the cleaner read from a transaction's end.
pub fn end_txn_marker(batch: &[u8]) -> Option<crate::txn::marker::EndTxnMarker> {
    let records = decode_records(batch).ok()?;
    let r = records.first()?;
    crate::txn::marker::EndTxnMarker::decode(r.key.as_deref()?, r.value.as_deref()).ok()
}

/// The timestamp a record really carries: the batch max timestamp for
/// LogAppendTime batches, else its own (CreateTime) timestamp.
pub fn record_timestamp(header: &BatchHeader, record: &Record) -> i64 {
    if header.is_log_append_time() {
        header.max_timestamp
    } else {
        record.timestamp
    }
}

/// `(offset, timestamp)` of the first record of the whole batch `batch`
/// whose offset is `>= min_offset` and whose timestamp is `>= timestamp`;
/// `Ok(None)` when no record qualifies. Exact for every codec and for
/// LogAppendTime (all records then carry the batch max timestamp).
/// `CorruptBatch` when the records cannot be decoded.
pub fn find_record_at_or_after(
    batch: &[u8],
    timestamp: i64,
    min_offset: i64,
) -> Result<Option<(i64, i64)>> {
    let header = BatchHeader::parse(batch)?;
    if header.is_log_append_time() {
        let qualifies = header.max_timestamp >= timestamp && header.last_offset() >= min_offset;
        return Ok(qualifies.then(|| (header.base_offset.max(min_offset), header.max_timestamp)));
    }
    if header.compression() == 0 {
        let min_delta =
            i32::try_from(min_offset.saturating_sub(header.base_offset).max(0)).unwrap_or(i32::MAX);
        if let Some((delta, ts)) = first_record_at_or_after(batch, timestamp, min_delta) {
            return Ok(Some((
                header.base_offset.saturating_add(i64::from(delta)),
                ts,
            )));
        }
        // Nothing found by the fast walk: the decoder below tells "no
        // record qualifies" from "records do not parse".
    }
    Ok(decode_records(batch)?
        .iter()
        .map(|r| (r.offset, record_timestamp(&header, r)))
        .find(|&(o, ts)| o >= min_offset && ts >= timestamp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::batch::build::{set_base_offset_and_epoch, set_log_append_time};
    use crate::storage::batch::validate::patched;
    use crate::storage::test_batches::{keyed as encode, CODECS};
    use kafka_protocol::records::Compression;

    #[test]
    fn parse_matches_kafka_protocol() {
        let b = encode(5, 1_000, Compression::None);
        let h = BatchHeader::parse(&b).expect("parse");
        assert_eq!(h.total_size(), b.len());
        assert_eq!(h.magic, 2);
        assert_eq!(h.records_count, 5);
        assert_eq!(h.last_offset_delta, 4);
        assert_eq!(h.base_timestamp, 1_000);
        assert_eq!(h.max_timestamp, 1_004);
        assert_eq!(h.crc, compute_crc(&b));
        let info =
            RecordBatchDecoder::decode_batch_info(&mut Bytes::from(b.clone())).expect("decode");
        assert_eq!(info.len(), 1);
        assert_eq!(info[0].record_count, h.records_count);
        assert_eq!(info[0].min_timestamp, h.base_timestamp);
        assert_eq!(info[0].producer_id, h.producer_id);
        assert_eq!(info[0].partition_leader_epoch, h.partition_leader_epoch);
    }

    #[test]
    fn record_level_timestamp_search() {
        let b = encode(5, 1_000, Compression::None);
        assert_eq!(first_record_at_or_after(&b, 0, 0), Some((0, 1_000)));
        assert_eq!(first_record_at_or_after(&b, 1_003, 0), Some((3, 1_003)));
        assert_eq!(first_record_at_or_after(&b, 1_001, 2), Some((2, 1_002)));
        assert_eq!(first_record_at_or_after(&b, 1_005, 0), None);
    }

    #[test]
    fn record_search_is_exact_for_every_codec() {
        for c in CODECS {
            let mut b = encode(5, 1_000, c);
            set_base_offset_and_epoch(&mut b, 100, 0);
            assert_eq!(
                find_record_at_or_after(&b, 1_003, 0).expect("decodes"),
                Some((103, 1_003)),
                "{c:?}"
            );
            assert_eq!(
                find_record_at_or_after(&b, 0, 102).expect("decodes"),
                Some((102, 1_002))
            );
            assert_eq!(
                find_record_at_or_after(&b, 1_005, 0).expect("decodes"),
                None
            );
            set_log_append_time(&mut b, 7_000);
            assert_eq!(
                find_record_at_or_after(&b, 1_000, 102).expect("decodes"),
                Some((102, 7_000))
            );
            assert_eq!(
                find_record_at_or_after(&b, 7_001, 0).expect("decodes"),
                None
            );
        }
        let mut bad = encode(3, 1, Compression::Gzip);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(find_record_at_or_after(&bad, 0, 0).is_err());
    }

    #[test]
    fn stored_batches_with_lying_counts_decode_to_errors() {
        // What an older version may have stored: must not abort the reader.
        let huge = patched(encode(1, 1, Compression::None), RECORDS_COUNT_POS, i32::MAX);
        assert!(decode_records(&huge).is_err());
        assert!(find_record_at_or_after(&huge, 5, 0).is_err());
        let huge = patched(encode(1, 1, Compression::Gzip), RECORDS_COUNT_POS, i32::MAX);
        assert!(decode_records(&huge).is_err());
    }

    #[test]
    fn the_first_batchs_codec_is_read_from_its_attributes_alone() {
        let plain = encode(3, 0, Compression::None);
        let lz4 = encode(3, 0, Compression::Lz4);
        assert!(!first_batch_is_compressed(&plain));
        assert!(first_batch_is_compressed(&lz4));
        // too short for the attributes: not compressed, and no panic
        assert!(!first_batch_is_compressed(&lz4[..ATTRIBUTES_POS + 1]));
        assert!(!first_batch_is_compressed(&[]));
    }
}
