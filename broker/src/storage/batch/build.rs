//! Building record batches: the few in-place rewrites the broker is
//! allowed to make to a batch it stores (base offset and leader epoch,
//! LogAppendTime, the cleaner's header-only copies and re-encoded
//! payloads), and v2 batches encoded from records ([`BatchBuilder`],
//! [`encode_records`]) through `kafka_protocol`'s `RecordBatchEncoder`.
//!
//! `BatchBuilder` is the one builder of batches for the broker's tests,
//! benches and fuzz checks (and any tool that needs a well-formed batch):
//! it keeps what the encoder needs for one batch (offsets from 0,
//! `offset - sequence` constant) so callers never repeat it.
//!
//! This module writes by the layout of `batch::parse` and imports nothing
//! else of `storage::batch`. The rewrites accept untrusted bytes and never
//! panic; a buffer too short for a field is left alone.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::storage::batch::parse::{
    compute_crc, corrupt, read_array, read_i16, BatchHeader, ATTRIBUTES_POS, BASE_OFFSET_POS,
    BASE_TIMESTAMP_POS, BATCH_HEADER_LEN, CRC_POS, CRC_START, LAST_OFFSET_DELTA_POS,
    LEADER_EPOCH_POS, LENGTH_POS, LOG_OVERHEAD, MAX_TIMESTAMP_POS, MIN_BATCH_LENGTH,
    RECORDS_COUNT_POS, TIMESTAMP_TYPE_BIT,
};
use crate::storage::Result;

fn write_bytes(buf: &mut [u8], pos: usize, bytes: &[u8]) {
    if let Some(end) = pos.checked_add(bytes.len()) {
        if let Some(dst) = buf.get_mut(pos..end) {
            dst.copy_from_slice(bytes);
        }
    }
}

/// Rewrites `baseOffset` and `partitionLeaderEpoch` of the batch at the start
/// of `batch` (neither is covered by the CRC). Does nothing to a buffer too
/// short to hold them.
pub fn set_base_offset_and_epoch(batch: &mut [u8], base_offset: i64, leader_epoch: i32) {
    write_bytes(batch, BASE_OFFSET_POS, &base_offset.to_be_bytes());
    write_bytes(batch, LEADER_EPOCH_POS, &leader_epoch.to_be_bytes());
}

/// The header a leader writes for `batch` (which the producer sent): its
/// first [`BATCH_HEADER_LEN`] bytes with `baseOffset` and
/// `partitionLeaderEpoch` set and, with `log_append_time`, the batch
/// marked LogAppendTime with that max timestamp and its CRC recomputed over
/// the new header and the unchanged records. The records after the header
/// are written as they are, so the batch is never copied to be stamped.
/// `None` for a buffer shorter than a batch header.
pub fn stamped_header(
    batch: &[u8],
    base_offset: i64,
    leader_epoch: i32,
    log_append_time: Option<i64>,
) -> Option<[u8; BATCH_HEADER_LEN]> {
    let mut header: [u8; BATCH_HEADER_LEN] = read_array(batch, 0)?;
    set_base_offset_and_epoch(&mut header, base_offset, leader_epoch);
    if let Some(timestamp) = log_append_time {
        mark_log_append_time(&mut header, timestamp)?;
        let records = batch.get(BATCH_HEADER_LEN..).unwrap_or(&[]);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&header[CRC_START..]), records);
        write_bytes(&mut header, CRC_POS, &crc.to_be_bytes());
    }
    Some(header)
}

/// Marks the batch as LogAppendTime with `timestamp` as its max timestamp and
/// recomputes the CRC (attributes and maxTimestamp are covered by it). Does
/// nothing to a buffer shorter than a batch header.
pub fn set_log_append_time(batch: &mut [u8], timestamp: i64) {
    if batch.len() < BATCH_HEADER_LEN || mark_log_append_time(batch, timestamp).is_none() {
        return;
    }
    let crc = compute_crc(batch);
    write_bytes(batch, CRC_POS, &crc.to_be_bytes());
}

/// Sets the LogAppendTime attribute bit and `maxTimestamp` in a batch
/// header, leaving the CRC to the caller (it covers both).
fn mark_log_append_time(header: &mut [u8], timestamp: i64) -> Option<()> {
    let attributes = read_i16(header, ATTRIBUTES_POS)?;
    write_bytes(
        header,
        ATTRIBUTES_POS,
        &(attributes | TIMESTAMP_TYPE_BIT).to_be_bytes(),
    );
    write_bytes(header, MAX_TIMESTAMP_POS, &timestamp.to_be_bytes());
    Some(())
}

/// Sets `lastOffsetDelta` and recomputes the CRC (the cleaner keeps a
/// rewritten batch ending at its original last offset, as Kafka does, so
/// the producer's last sequence and the segment's end do not move). Does
/// nothing to a buffer shorter than a batch header.
pub fn set_last_offset_delta(batch: &mut [u8], delta: i32) {
    if batch.len() < BATCH_HEADER_LEN {
        return;
    }
    write_bytes(batch, LAST_OFFSET_DELTA_POS, &delta.to_be_bytes());
    let crc = compute_crc(batch);
    write_bytes(batch, CRC_POS, &crc.to_be_bytes());
}

/// A copy of the batch at the start of `batch` marked with KIP-534's
/// delete horizon `horizon_ms` (attributes bit 6 set, the base timestamp
/// replaced by the horizon, the CRC rewritten), as Kafka's cleaner marks a
/// transaction marker whose transaction's records are all gone.
pub fn with_delete_horizon(batch: &[u8], horizon_ms: i64) -> Result<Vec<u8>> {
    let header = BatchHeader::parse(batch)?;
    let mut out = batch
        .get(..header.total_size())
        .ok_or_else(|| corrupt("short batch"))?
        .to_vec();
    write_bytes(
        &mut out,
        ATTRIBUTES_POS,
        &(header.attributes | super::parse::DELETE_HORIZON_BIT).to_be_bytes(),
    );
    write_bytes(&mut out, BASE_TIMESTAMP_POS, &horizon_ms.to_be_bytes());
    let crc = compute_crc(&out);
    write_bytes(&mut out, CRC_POS, &crc.to_be_bytes());
    Ok(out)
}

/// A header-only copy (no records, no compression) of the batch at the
/// start of `batch`, keeping its offsets, timestamps, producer id, epoch,
/// sequence and transactional/control/timestamp-type flags: what the
/// cleaner leaves of a producer's last batch when all its records go, so
/// that the producer's state survives (as Kafka does).
pub fn empty_copy(batch: &[u8]) -> Result<Vec<u8>> {
    let header = BatchHeader::parse(batch)?;
    let mut out = batch
        .get(..BATCH_HEADER_LEN)
        .ok_or_else(|| corrupt("short batch header"))?
        .to_vec();
    write_bytes(&mut out, LENGTH_POS, &MIN_BATCH_LENGTH.to_be_bytes());
    write_bytes(
        &mut out,
        ATTRIBUTES_POS,
        &(header.attributes & !0x07).to_be_bytes(),
    );
    write_bytes(&mut out, RECORDS_COUNT_POS, &0i32.to_be_bytes());
    let crc = compute_crc(&out);
    write_bytes(&mut out, CRC_POS, &crc.to_be_bytes());
    Ok(out)
}

/// The batch at the start of `batch` with its records replaced by
/// `payload` (the same records, encoded with codec `codec_id`): header
/// fields kept (offsets, timestamps, producer id, epoch, sequence,
/// transactional/control/timestamp-type flags), `batchLength`, the codec
/// bits of `attributes` and the CRC rewritten.
pub fn with_payload(batch: &[u8], payload: &[u8], codec_id: u8) -> Result<Vec<u8>> {
    let header = BatchHeader::parse(batch)?;
    let length = i32::try_from(BATCH_HEADER_LEN - LOG_OVERHEAD + payload.len())
        .map_err(|_| corrupt("re-encoded batch is too large"))?;
    let mut out = Vec::with_capacity(BATCH_HEADER_LEN + payload.len());
    out.extend_from_slice(
        batch
            .get(..BATCH_HEADER_LEN)
            .ok_or_else(|| corrupt("short batch header"))?,
    );
    out.extend_from_slice(payload);
    write_bytes(&mut out, LENGTH_POS, &length.to_be_bytes());
    let attributes = (header.attributes & !0x07) | i16::from(codec_id & 0x07);
    write_bytes(&mut out, ATTRIBUTES_POS, &attributes.to_be_bytes());
    let crc = compute_crc(&out);
    write_bytes(&mut out, CRC_POS, &crc.to_be_bytes());
    Ok(out)
}

/// The v2 record batches of exactly `records`, compressed with
/// `compression` (by `kafka_protocol`'s encoder and its codecs). The
/// encoder keeps records in one batch while they share producer id and
/// epoch, flags and partition leader epoch and `offset - sequence` stays
/// constant, and starts a new batch where they do not; [`BatchBuilder`]
/// keeps all of that for one batch. An encoder error (a codec it was
/// built without; more than `i32::MAX` records or bytes) is
/// `CorruptBatch`.
pub fn encode_records(records: &[Record], compression: Compression) -> Result<Vec<u8>> {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .map_err(|e| corrupt(format!("cannot encode the records: {e}")))?;
    Ok(buf.to_vec())
}

/// One v2 record batch, put together record by record: what the broker's
/// tests, benches and fuzz checks build instead of filling in
/// `kafka_protocol` records themselves.
///
/// ```
/// use bytes::Bytes;
/// use kafka_protocol::records::Compression;
/// use moldau_broker::storage::batch::{validate_one, BatchBuilder};
///
/// let batch = BatchBuilder::new()
///     .compression(Compression::Lz4)
///     .producer(7, 0, 42)
///     .record(Some(Bytes::from("k0")), Some(Bytes::from("v0")), 1_000)
///     .record(None, Some(Bytes::from("v1")), 1_001)
///     .encode()
///     .unwrap();
/// let header = validate_one(&batch).unwrap();
/// assert_eq!((header.records_count, header.base_sequence), (2, 42));
/// ```
///
/// Records get offset deltas 0, 1, 2, … in the order added, CreateTime
/// timestamps as given and no headers; the batch has base offset 0 and
/// partition leader epoch -1, as a producer sends it (a leader stamps
/// both). Without [`BatchBuilder::producer`] it is a plain batch (producer
/// id, epoch and base sequence -1), with it an idempotent one whose
/// records carry sequences from the base sequence on. Uncompressed unless
/// [`BatchBuilder::compression`] says otherwise. A builder without records
/// encodes to no bytes.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    compression: Compression,
    /// `(producer id, producer epoch, base sequence)`.
    producer: Option<(i64, i16, i32)>,
    /// `(key, value, timestamp)` of each record, in offset order.
    records: Vec<(Option<Bytes>, Option<Bytes>, i64)>,
    /// The transactional attribute bit (a producer's transaction).
    transactional: bool,
    /// The control attribute bit (a transaction marker).
    control: bool,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchBuilder {
    /// A plain, uncompressed batch without records yet.
    pub fn new() -> Self {
        Self {
            compression: Compression::None,
            producer: None,
            records: Vec::new(),
            transactional: false,
            control: false,
        }
    }

    /// Sets the transactional attribute bit: the batch belongs to its
    /// producer's open transaction (meaningful with
    /// [`BatchBuilder::producer`]).
    pub fn transactional(mut self) -> Self {
        self.transactional = true;
        self
    }

    /// A control batch (transactional and control bits) holding `marker`'s
    /// one control record, as a partition leader writes it to end a
    /// transaction: its producer id and epoch, base sequence -1.
    pub fn marker(marker: &crate::txn::marker::MarkerBatch, timestamp: i64) -> Self {
        let mut b = Self::new()
            .producer(
                marker.producer_id,
                marker.producer_epoch,
                marker.base_sequence,
            )
            .record(
                Some(Bytes::copy_from_slice(&marker.key)),
                Some(Bytes::copy_from_slice(&marker.value)),
                timestamp,
            );
        b.transactional = crate::txn::marker::is_transactional(marker.attributes);
        b.control = crate::txn::marker::is_control(marker.attributes);
        b
    }

    /// Compresses the records with `compression`.
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Makes it a batch of idempotent producer `producer_id` in
    /// `producer_epoch`, its first record at sequence `base_sequence`. A
    /// negative `producer_id` (Kafka's `NO_PRODUCER_ID`, -1) leaves the
    /// batch plain, whatever the epoch and sequence.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer = (producer_id >= 0).then_some((producer_id, producer_epoch, base_sequence));
        self
    }

    /// Adds a record (`None` key: keyless; `None` value: a tombstone) with
    /// CreateTime `timestamp`.
    pub fn record(mut self, key: Option<Bytes>, value: Option<Bytes>, timestamp: i64) -> Self {
        self.records.push((key, value, timestamp));
        self
    }

    /// Adds `(key, value, timestamp)` records, as [`BatchBuilder::record`]
    /// does each.
    pub fn records(
        mut self,
        records: impl IntoIterator<Item = (Option<Bytes>, Option<Bytes>, i64)>,
    ) -> Self {
        self.records.extend(records);
        self
    }

    /// The records as the encoder gets them (to compare with what a
    /// decoder reads back).
    pub fn to_records(&self) -> Vec<Record> {
        let (producer_id, producer_epoch, base_sequence) = self.producer.unwrap_or((-1, -1, -1));
        self.records
            .iter()
            .enumerate()
            .map(|(i, (key, value, timestamp))| Record {
                transactional: self.transactional,
                control: self.control,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id,
                producer_epoch,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // `offset - sequence` constant keeps the records in one
                // batch; a plain batch's base sequence is -1.
                sequence: base_sequence.wrapping_add(i as i32),
                timestamp: *timestamp,
                key: key.clone(),
                value: value.clone(),
                headers: Default::default(),
            })
            .collect()
    }

    /// The batch's bytes (see [`encode_records`] for the errors).
    pub fn encode(&self) -> Result<Vec<u8>> {
        encode_records(&self.to_records(), self.compression)
    }

    /// The batch's bytes with the records compressed by `compressor`
    /// instead of the encoder's own codec (e.g. lz4 framed as a
    /// particular client frames it); the attributes still name
    /// [`BatchBuilder::compression`]'s codec.
    pub fn encode_with(
        &self,
        compressor: impl Fn(&mut BytesMut, &mut BytesMut, Compression) -> anyhow::Result<()>,
    ) -> Result<Vec<u8>> {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode_with_custom_compression(
            &mut buf,
            &self.to_records(),
            &RecordEncodeOptions {
                version: 2,
                compression: self.compression,
            },
            Some(compressor),
        )
        .map_err(|e| corrupt(format!("cannot encode the records: {e}")))?;
        Ok(buf.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::batch::parse::decode_records;
    use crate::storage::batch::validate::validate_one;
    use crate::storage::test_batches::keyed as encode;
    use kafka_protocol::records::RecordBatchDecoder;

    #[test]
    fn a_stamped_header_before_the_unchanged_records_is_the_rewritten_batch() {
        for append_time in [None, Some(1_234_567)] {
            let sent = encode(5, 100, Compression::None);
            let header = stamped_header(&sent, 4_000, 9, append_time).expect("a whole batch");
            let written = [&header[..], &sent[BATCH_HEADER_LEN..]].concat();
            let mut rewritten = sent.clone();
            set_base_offset_and_epoch(&mut rewritten, 4_000, 9);
            if let Some(t) = append_time {
                set_log_append_time(&mut rewritten, t);
            }
            assert_eq!(written, rewritten, "append time {append_time:?}");
            let h = validate_one(&written).expect("CRC valid");
            assert_eq!((h.base_offset, h.partition_leader_epoch), (4_000, 9));
            assert_eq!(h.is_log_append_time(), append_time.is_some());
        }
        assert!(stamped_header(&[0u8; BATCH_HEADER_LEN - 1], 1, 1, None).is_none());
    }
    #[test]
    fn rewrites_keep_crc_valid() {
        let mut b = encode(4, 100, Compression::None);
        set_base_offset_and_epoch(&mut b, 12345, 7);
        let h = validate_one(&b).expect("offset and epoch are outside the CRC");
        assert_eq!((h.base_offset, h.partition_leader_epoch), (12345, 7));
        set_log_append_time(&mut b, 999_999);
        let h = validate_one(&b).expect("CRC recomputed");
        assert!(h.is_log_append_time());
        assert_eq!(h.max_timestamp, 999_999);
        assert_eq!(h.base_timestamp, 100);
        let sets = RecordBatchDecoder::decode_all(&mut Bytes::from(b)).expect("decodes");
        assert_eq!(sets[0].records.len(), 4);
        assert_eq!(sets[0].records[0].timestamp_type, TimestampType::LogAppend);
    }

    #[test]
    fn with_payload_rewrites_length_codec_and_crc_only() {
        let b = encode(4, 77, Compression::None);
        let h = validate_one(&b).unwrap();
        let payload = b[BATCH_HEADER_LEN..].to_vec();
        let same = with_payload(&b, &payload, 0).unwrap();
        assert_eq!(same, b);
        let packed = crate::storage::recompress::compress(&payload, Compression::Gzip, 6).unwrap();
        let g = with_payload(&b, &packed, 1).unwrap();
        let gh = validate_one(&g).unwrap();
        assert_eq!(gh.compression(), 1);
        assert_eq!(gh.total_size(), BATCH_HEADER_LEN + packed.len());
        assert_eq!(
            (gh.base_timestamp, gh.max_timestamp, gh.records_count),
            (h.base_timestamp, h.max_timestamp, h.records_count)
        );
        assert_eq!(decode_records(&g).unwrap(), decode_records(&b).unwrap());
    }

    #[test]
    fn a_builder_makes_one_batch_of_its_records() {
        for compression in [Compression::None, Compression::Zstd] {
            let b = BatchBuilder::new()
                .compression(compression)
                .records((0..5).map(|i| {
                    let key = (i % 2 == 0).then(|| Bytes::from(format!("k{i}")));
                    (key, Some(Bytes::from(vec![b'v'; i])), 100 + i as i64)
                }))
                .record(Some(Bytes::from_static(b"t")), None, 99)
                .encode()
                .unwrap();
            let h = validate_one(&b).expect("one whole, valid batch");
            assert_eq!((h.records_count, h.last_offset_delta), (6, 5));
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (-1, -1, -1)
            );
            assert_eq!((h.base_timestamp, h.max_timestamp), (99, 104));
            assert_eq!(h.partition_leader_epoch, -1);
            let records = decode_records(&b).unwrap();
            assert_eq!(records[5].value, None, "a tombstone");
            assert_eq!(records[1].key, None, "keyless");
            assert_eq!(records[4].timestamp, 104);
        }
        let idempotent = BatchBuilder::new()
            .producer(9, 3, 40)
            .record(None, Some(Bytes::from_static(b"a")), 1)
            .record(None, Some(Bytes::from_static(b"b")), 2)
            .encode()
            .unwrap();
        let h = validate_one(&idempotent).unwrap();
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (9, 3, 40)
        );
        assert_eq!(h.records_count, 2);
        let plain = BatchBuilder::new()
            .producer(-1, 5, 7)
            .record(None, None, 1)
            .encode()
            .unwrap();
        let h = validate_one(&plain).unwrap();
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence),
            (-1, -1, -1)
        );
        assert!(BatchBuilder::new().encode().unwrap().is_empty());
    }
}
