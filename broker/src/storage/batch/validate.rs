//! Validating record batches: the structure and CRC-32C of every batch
//! of a produce payload or a log segment ([`validate_one`],
//! [`validate_batches`]), and, as Kafka's `LogValidator` does for batches
//! from clients, every record inside them ([`validate_records`],
//! [`validate_records_bounded`]: counts, lengths, offset deltas, keys of
//! compacted topics, timestamp bounds), compressed records streamed
//! through a bounded decompressor.
//!
//! This module owns the verdicts on untrusted bytes; it reads them by the
//! layout of `batch::parse` and never writes a batch. Nothing here
//! panics on any input.

use crate::storage::batch::parse::{
    compute_crc, corrupt, read_offset_and_length, read_varint32, read_varlong, BatchHeader,
    BATCH_HEADER_LEN, LOG_OVERHEAD, MAGIC_POS, MAGIC_V2, MAX_VARLONG_BYTES, MIN_BATCH_LENGTH,
};
use crate::storage::{compression, Result, StorageError};

/// Validates one whole batch held exactly by `batch` (structure, magic,
/// CRC-32C, counts) and returns its header. Used by produce validation and
/// by log recovery.
pub fn validate_one(batch: &[u8]) -> Result<BatchHeader> {
    let header = BatchHeader::parse(batch)?;
    if header.total_size() != batch.len() {
        return Err(corrupt(format!(
            "batchLength {} does not match the {} bytes given",
            header.batch_length,
            batch.len()
        )));
    }
    let crc = compute_crc(batch);
    if crc != header.crc {
        return Err(corrupt(format!(
            "CRC-32C mismatch: stored {:#010x}, computed {crc:#010x}",
            header.crc
        )));
    }
    if header.records_count < 0 {
        return Err(corrupt(format!(
            "negative records count {}",
            header.records_count
        )));
    }
    if header.last_offset_delta < 0 {
        return Err(corrupt(format!(
            "negative lastOffsetDelta {}",
            header.last_offset_delta
        )));
    }
    Ok(header)
}

/// Validates a produce payload: a non-empty sequence of whole v2 batches with
/// consistent lengths, magic 2, a good CRC-32C, a sane `lastOffsetDelta` and
/// record count, and each batch no larger than `max_batch_bytes`.
/// Returns the parsed headers in order.
pub fn validate_batches(buf: &[u8], max_batch_bytes: usize) -> Result<Vec<BatchHeader>> {
    if buf.is_empty() {
        return Err(corrupt("empty record set"));
    }
    let mut headers = Vec::new();
    let mut pos = 0usize;
    while pos < buf.len() {
        let rest = buf.get(pos..).unwrap_or(&[]);
        let (_, length) = read_offset_and_length(rest).ok_or_else(|| {
            corrupt(format!(
                "{} trailing bytes are not a whole batch",
                rest.len()
            ))
        })?;
        if let Some(&magic) = rest.get(MAGIC_POS) {
            if magic as i8 != MAGIC_V2 {
                return Err(StorageError::UnsupportedMagic(magic as i8));
            }
        }
        if length < MIN_BATCH_LENGTH {
            return Err(corrupt(format!(
                "batchLength {length} is below the minimum {MIN_BATCH_LENGTH}"
            )));
        }
        // `length` is positive and at most i32::MAX: this cannot overflow.
        let size = LOG_OVERHEAD + length as usize;
        if size > rest.len() {
            return Err(corrupt(format!(
                "batch of {size} bytes runs past the end of the {} remaining bytes",
                rest.len()
            )));
        }
        if size > max_batch_bytes {
            return Err(StorageError::MessageTooLarge {
                size,
                max: max_batch_bytes,
            });
        }
        let batch = rest.get(..size).unwrap_or(&[]);
        headers.push(validate_one(batch)?);
        pos += size;
    }
    Ok(headers)
}

/// Checks the records of every batch of a produce payload whose structure
/// and CRCs [`validate_batches`] already accepted (`headers` is its output),
/// as Kafka's `LogValidator` does for batches from clients, so nothing
/// inconsistent is ever stored:
///
/// - `recordsCount` is positive and equals `lastOffsetDelta + 1`;
/// - exactly `recordsCount` records are present, no byte left over;
/// - each record's length covers exactly its fields (attributes, timestamp
///   delta, offset delta, key, value, headers with their own lengths);
/// - offset deltas run 0, 1, 2, … (the broker stores batches as sent, so
///   the offsets it assigns must be the ones inside);
/// - compressed records decompress, to at most
///   [`compression::MAX_DECOMPRESSED_BATCH_BYTES`] (else `MessageTooLarge`);
/// - with `require_keys` (compacted topics) every record has a key; the
///   keyless ones are all named in one [`StorageError::RecordErrors`] by
///   their index in `buf` (KIP-467), the rest of the structure still
///   checked.
///
/// Control batches (transaction markers) are exempt from the key rule.
/// Record structure errors are [`StorageError::InvalidRecord`], as Kafka's
/// `InvalidRecordException` (`INVALID_RECORD`); undecompressable payloads
/// are `CorruptBatch` (`CORRUPT_MESSAGE`). Memory stays bounded by the
/// largest single record and a 64 KiB read buffer: compressed payloads
/// are streamed.
pub fn validate_records(buf: &[u8], headers: &[BatchHeader], require_keys: bool) -> Result<()> {
    validate_records_bounded(buf, headers, require_keys, None)
}

/// Kafka's `message.timestamp.before.max.ms` / `message.timestamp.after.max.ms`
/// on a CreateTime topic: a record timestamp more than `before_max_ms`
/// before `now_ms`, or more than `after_max_ms` after it, is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampBounds {
    pub now_ms: i64,
    pub before_max_ms: i64,
    pub after_max_ms: i64,
}

impl TimestampBounds {
    /// Kafka's `LogValidator.validateTimestamp` message for an out-of-range
    /// timestamp, or `None` when `timestamp` is accepted (`-1`, no
    /// timestamp, always is).
    fn check(&self, timestamp: i64, offset: i64) -> Option<String> {
        if timestamp == -1 {
            return None;
        }
        let diff = self.now_ms.saturating_sub(timestamp);
        (diff > self.before_max_ms || diff.saturating_neg() > self.after_max_ms).then(|| {
            format!(
                "Timestamp {timestamp} of message with offset {offset} is out of range. The timestamp should be within [{}, {}]",
                self.now_ms.saturating_sub(self.before_max_ms),
                self.now_ms.saturating_add(self.after_max_ms)
            )
        })
    }
}

/// [`validate_records`], also checking every record's CreateTime
/// timestamp against `bounds` (when given) as Kafka's `LogValidator`
/// does: the records out of range are [`StorageError::TimestampErrors`]
/// (`INVALID_TIMESTAMP` with one entry per record, KIP-467), which win
/// over keyless records in a compacted topic, as in Kafka.
pub fn validate_records_bounded(
    buf: &[u8],
    headers: &[BatchHeader],
    require_keys: bool,
    bounds: Option<TimestampBounds>,
) -> Result<()> {
    let mut pos = 0usize;
    let mut keyless = Vec::new();
    let mut out_of_range = Vec::new();
    let mut first_index = 0i32;
    for header in headers {
        let size = header.total_size();
        let batch = pos
            .checked_add(size)
            .and_then(|end| buf.get(pos..end))
            .ok_or_else(|| corrupt("batch runs past the end of the record set"))?;
        let require_key = require_keys && !header.is_control();
        let rules = Rules {
            require_key,
            bounds: bounds.filter(|_| !header.is_control() && !header.is_log_append_time()),
            base_offset: header.base_offset,
            base_timestamp: header.base_timestamp,
            first_index,
        };
        validate_batch_records(batch, header, &rules, &mut keyless, &mut out_of_range)?;
        pos += size;
        first_index = first_index.saturating_add(header.records_count);
    }
    if !out_of_range.is_empty() {
        return Err(StorageError::TimestampErrors {
            errors: out_of_range,
        });
    }
    if keyless.is_empty() {
        return Ok(());
    }
    Err(StorageError::RecordErrors {
        errors: keyless
            .into_iter()
            .map(|i| {
                (
                    i,
                    "a compacted topic cannot accept a record without a key".to_string(),
                )
            })
            .collect(),
    })
}

fn invalid(msg: impl Into<String>) -> StorageError {
    StorageError::InvalidRecord(msg.into())
}

/// What [`validate_batch_records`] checks beyond structure.
struct Rules {
    require_key: bool,
    bounds: Option<TimestampBounds>,
    base_offset: i64,
    base_timestamp: i64,
    /// Index of the batch's first record in the whole record set.
    first_index: i32,
}

/// Checks one batch's records; the indexes (from `first_index`) of
/// keyless records go to `keyless` when keys are required, those of
/// records out of the timestamp bounds to `out_of_range`.
fn validate_batch_records(
    batch: &[u8],
    header: &BatchHeader,
    rules: &Rules,
    keyless: &mut Vec<i32>,
    out_of_range: &mut Vec<(i32, String)>,
) -> Result<()> {
    let count = header.records_count;
    if count <= 0 {
        return Err(invalid(format!("invalid record count {count}")));
    }
    if i64::from(header.last_offset_delta) + 1 != i64::from(count) {
        return Err(invalid(format!(
            "lastOffsetDelta {} does not match the record count {count}",
            header.last_offset_delta
        )));
    }
    let payload = batch
        .get(BATCH_HEADER_LEN..)
        .ok_or_else(|| corrupt("short batch"))?;
    let codec = compression::codec_of(header.compression()).map_err(|e| corrupt(e.to_string()))?;
    let mut walk = Walk {
        count,
        next: 0,
        rules,
        keyless,
        out_of_range,
    };
    if header.compression() == 0 {
        return walk.in_place(payload);
    }
    let reader = compression::decoder(payload, codec, compression::MAX_DECOMPRESSED_BATCH_BYTES)
        .map_err(decompress_error)?;
    STREAM_BUFFER.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buffer) => walk.streamed(&mut StreamRecords::new(reader, &mut buffer)),
        // Not reached (a walk checks no other batch inside it); a buffer
        // of its own keeps it correct if it ever is.
        Err(_) => walk.streamed(&mut StreamRecords::new(
            reader,
            &mut vec![0; STREAM_BUFFER_BYTES],
        )),
    })
}

fn decompress_error(e: compression::DecompressError) -> StorageError {
    match e {
        compression::DecompressError::TooLarge { limit } => StorageError::MessageTooLarge {
            size: limit.saturating_add(1),
            max: limit,
        },
        other => corrupt(other.to_string()),
    }
}

/// One batch's records, checked in order: the next one expected and
/// where the findings go.
///
/// The records are checked where they lie — in the batch itself, or in
/// the decompressor's read buffer — by one loop over a byte slice
/// ([`Walk::whole_records`]); a record cut by the end of the read buffer
/// is moved to its start and the next bytes read after it, and only one
/// longer than [`STREAM_CARRY_BYTES`] is copied out and checked on its
/// own. Going through a
/// reader for each record's length and body cost about as much as
/// decompressing did (`cargo bench -p moldau-broker --bench hot_paths --
/// validate_records`).
struct Walk<'r> {
    count: i32,
    /// The offset delta the next record must have (= records checked).
    next: i32,
    rules: &'r Rules,
    keyless: &'r mut Vec<i32>,
    out_of_range: &'r mut Vec<(i32, String)>,
}

impl Walk<'_> {
    fn done(&self) -> bool {
        self.next == self.count
    }

    /// Checks the records that lie wholly at the start of `buf`, up to the
    /// last one declared; returns the bytes they take. Stops before a
    /// record whose length prefix or body runs past `buf`.
    fn whole_records(&mut self, buf: &[u8]) -> Result<usize> {
        let mut pos = 0;
        while !self.done() {
            let mut at = pos;
            let Some(len) = read_varlong(buf, &mut at) else {
                if buf.len() - pos >= MAX_VARLONG_BYTES {
                    return Err(invalid("bad record length"));
                }
                break;
            };
            let len = record_length(len)?;
            let Some(body) = buf.get(at..).and_then(|rest| rest.get(..len)) else {
                break;
            };
            self.record(body)?;
            pos = at + len;
        }
        Ok(pos)
    }

    /// Checks one record body and applies the rules to it.
    fn record(&mut self, body: &[u8]) -> Result<()> {
        let expected = self.next;
        let (key_is_null, timestamp_delta) = check_record(body, expected)?;
        let rules = self.rules;
        let index = rules.first_index.saturating_add(expected);
        if rules.require_key && key_is_null {
            self.keyless.push(index);
        }
        if let Some(bounds) = &rules.bounds {
            let timestamp = rules.base_timestamp.saturating_add(timestamp_delta);
            let offset = rules.base_offset.saturating_add(i64::from(expected));
            if let Some(message) = bounds.check(timestamp, offset) {
                self.out_of_range.push((index, message));
            }
        }
        self.next += 1;
        Ok(())
    }

    /// The records of an uncompressed batch, `payload` being all of them.
    fn in_place(&mut self, payload: &[u8]) -> Result<()> {
        let used = self.whole_records(payload)?;
        let rest = &payload[used..];
        if self.done() {
            return if rest.is_empty() {
                Ok(())
            } else {
                Err(self.bytes_left())
            };
        }
        if rest.is_empty() {
            return Err(self.fewer_records());
        }
        let mut at = 0;
        let Some(len) = read_varlong(rest, &mut at) else {
            return Err(invalid("truncated record length"));
        };
        Err(runs_past(len, rest.len() - at))
    }

    /// The records of a compressed batch, as `source` decompresses them.
    fn streamed<R: std::io::Read>(&mut self, source: &mut StreamRecords<R>) -> Result<()> {
        while !self.done() {
            let used = self.whole_records(source.fill()?)?;
            source.consume(used);
            if self.done() || source.read_more()? {
                continue;
            }
            // The next record is longer than the buffer holds, or the
            // stream ends inside it: read it on its own.
            let len = source.next_length()?.ok_or_else(|| self.fewer_records())?;
            let body = source.body(record_length(len)?)?;
            self.record(body)?;
        }
        if source.next_length()?.is_some() {
            return Err(self.bytes_left());
        }
        Ok(())
    }

    fn fewer_records(&self) -> StorageError {
        invalid(format!(
            "record count {} declared, only {} present",
            self.count, self.next
        ))
    }

    fn bytes_left(&self) -> StorageError {
        invalid(format!(
            "bytes left after the {} declared records",
            self.count
        ))
    }
}

fn record_length(len: i64) -> Result<usize> {
    usize::try_from(len).map_err(|_| invalid(format!("negative record length {len}")))
}

fn runs_past(len: i64, left: usize) -> StorageError {
    invalid(format!(
        "record of {len} bytes runs past the {left} bytes left"
    ))
}

/// Bytes asked of the decompressor at a time: the block size of
/// librdkafka's and the Java client's lz4 frames, so that liblz4 decodes
/// each block straight into the buffer (given less room than a block, it
/// decodes into a buffer of its own and copies out).
const STREAM_READ_BYTES: usize = 64 * 1024;
/// The most bytes of an incomplete record kept at the start of the buffer
/// while the next bytes are read after them; a longer record is copied
/// out ([`StreamRecords::body`]).
const STREAM_CARRY_BYTES: usize = 64 * 1024;
/// Records are checked in this buffer, in place, when they lie wholly
/// in it.
const STREAM_BUFFER_BYTES: usize = STREAM_CARRY_BYTES + STREAM_READ_BYTES;

thread_local! {
    /// Each thread's read buffer for compressed batches, allocated and
    /// zeroed once: a buffer per batch cost more than decompressing for
    /// batches of the Java client's default 16 KiB (`cargo bench -p
    /// moldau-broker --bench hot_paths -- 64x150x100B_lz4_as_sent`).
    static STREAM_BUFFER: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(vec![0; STREAM_BUFFER_BYTES]);
}

/// A decompressing reader's output, buffered: checked in place by
/// [`Walk::whole_records`], record by record across the buffer's end.
struct StreamRecords<'b, R> {
    reader: R,
    buffer: &'b mut [u8],
    /// The unread bytes of `buffer`.
    start: usize,
    end: usize,
    /// Bytes of the buffer handed out by the last `body` call, consumed
    /// at the next call.
    lent: usize,
    /// A record that straddles the buffer's end, copied out.
    body: Vec<u8>,
}

impl<'b, R: std::io::Read> StreamRecords<'b, R> {
    fn new(reader: R, buffer: &'b mut [u8]) -> Self {
        Self {
            reader,
            buffer,
            start: 0,
            end: 0,
            lent: 0,
            body: Vec::new(),
        }
    }
    fn settle(&mut self) {
        self.start += std::mem::take(&mut self.lent);
    }
    fn consume(&mut self, bytes: usize) {
        self.settle();
        self.start = (self.start + bytes).min(self.end);
    }
    /// Reads from the decompressor into `into`.
    fn read_into(reader: &mut R, into: &mut [u8]) -> Result<usize> {
        loop {
            match reader.read(into) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(decompress_error(compression::classify(e))),
            }
        }
    }
    /// The buffered bytes, refilled from the decompressor when empty.
    fn fill(&mut self) -> Result<&[u8]> {
        self.settle();
        if self.start == self.end {
            self.start = 0;
            self.end = Self::read_into(&mut self.reader, &mut self.buffer[..STREAM_READ_BYTES])?;
        }
        Ok(&self.buffer[self.start..self.end])
    }
    /// Moves the buffered bytes (the start of a record) to the buffer's
    /// start and reads more after them; `false` when they are more than
    /// [`STREAM_CARRY_BYTES`] or the stream has ended.
    fn read_more(&mut self) -> Result<bool> {
        self.settle();
        let kept = self.end - self.start;
        if kept > STREAM_CARRY_BYTES {
            return Ok(false);
        }
        self.buffer.copy_within(self.start..self.end, 0);
        self.start = 0;
        self.end = kept;
        let read = Self::read_into(
            &mut self.reader,
            &mut self.buffer[kept..kept + STREAM_READ_BYTES],
        )?;
        self.end += read;
        Ok(read > 0)
    }
    fn read_byte(&mut self) -> Result<Option<u8>> {
        let Some(&byte) = self.fill()?.first() else {
            return Ok(None);
        };
        self.start += 1;
        Ok(Some(byte))
    }

    /// The next record's length prefix, byte by byte; `None` at a clean
    /// end.
    fn next_length(&mut self) -> Result<Option<i64>> {
        let mut raw = [0u8; MAX_VARLONG_BYTES];
        for i in 0..raw.len() {
            let Some(byte) = self.read_byte()? else {
                if i == 0 {
                    return Ok(None);
                }
                return Err(invalid("truncated record length"));
            };
            raw[i] = byte;
            if byte & 0x80 == 0 {
                let mut pos = 0;
                return read_varlong(&raw[..=i], &mut pos)
                    .map(Some)
                    .ok_or_else(|| invalid("bad record length"));
            }
        }
        Err(invalid("record length varint longer than 10 bytes"))
    }

    /// The next `len` bytes (a record body): in place when buffered, else
    /// copied out as they arrive (at most `len` allocated, and only for
    /// bytes that really come).
    fn body(&mut self, len: usize) -> Result<&[u8]> {
        use std::io::Read;
        let buffered = self.fill()?.len();
        if buffered >= len {
            self.lent = len;
            return Ok(&self.buffer[self.start..self.start + len]);
        }
        self.body.clear();
        self.body
            .extend_from_slice(&self.buffer[self.start..self.end]);
        self.start = self.end;
        let more = (&mut self.reader)
            .take((len - buffered) as u64)
            .read_to_end(&mut self.body)
            .map_err(|e| decompress_error(compression::classify(e)))?;
        if buffered + more != len {
            return Err(runs_past(len as i64, buffered + more));
        }
        Ok(&self.body)
    }
}

/// Skips a length-prefixed field (`-1` = null when `nullable`); returns
/// whether it was null.
fn skip_field(body: &[u8], pos: &mut usize, nullable: bool, what: &str) -> Result<bool> {
    let len = read_varint32(body, pos).ok_or_else(|| invalid(format!("bad {what} length")))?;
    if len == -1 && nullable {
        return Ok(true);
    }
    let len = usize::try_from(len).map_err(|_| invalid(format!("negative {what} length {len}")))?;
    let end = pos
        .checked_add(len)
        .filter(|&end| end <= body.len())
        .ok_or_else(|| invalid(format!("{what} of {len} bytes runs past its record")))?;
    *pos = end;
    Ok(false)
}

/// Checks one record body (what follows its length prefix); whether its
/// key is null, and its timestamp delta. A valid record is read once by
/// [`scan_record`]; only an invalid one is read again, by
/// [`explain_record`], for the message naming what is wrong.
#[inline]
fn check_record(body: &[u8], expected_delta: i32) -> Result<(bool, i64)> {
    match scan_record(body, expected_delta) {
        Some(found) => Ok(found),
        None => explain_record(body, expected_delta),
    }
}

/// [`explain_record`]'s checks without their messages: `None` exactly
/// when it finds an error.
#[inline]
fn scan_record(body: &[u8], expected_delta: i32) -> Option<(bool, i64)> {
    /// A length-prefixed field; whether it was null.
    #[inline]
    fn skip(body: &[u8], pos: &mut usize, nullable: bool) -> Option<bool> {
        let len = read_varint32(body, pos)?;
        if len == -1 && nullable {
            return Some(true);
        }
        let len = usize::try_from(len).ok()?;
        *pos = pos.checked_add(len).filter(|&end| end <= body.len())?;
        Some(false)
    }
    if body.is_empty() {
        return None;
    }
    let mut pos = 1usize; // attributes
    let timestamp_delta = read_varlong(body, &mut pos)?;
    if read_varint32(body, &mut pos)? != expected_delta {
        return None;
    }
    let key_is_null = skip(body, &mut pos, true)?;
    skip(body, &mut pos, true)?;
    let headers = read_varint32(body, &mut pos)?;
    for _ in 0..headers {
        skip(body, &mut pos, false)?;
        skip(body, &mut pos, true)?;
    }
    (headers >= 0 && pos == body.len()).then_some((key_is_null, timestamp_delta))
}

/// [`check_record`] for a record [`scan_record`] refused: which field is
/// wrong, and how.
#[cold]
fn explain_record(body: &[u8], expected_delta: i32) -> Result<(bool, i64)> {
    let mut pos = 1usize; // attributes
    if body.is_empty() {
        return Err(invalid("empty record"));
    }
    let timestamp_delta =
        read_varlong(body, &mut pos).ok_or_else(|| invalid("bad timestamp delta"))?;
    let delta = read_varint32(body, &mut pos).ok_or_else(|| invalid("bad offset delta"))?;
    if delta != expected_delta {
        return Err(invalid(format!(
            "record offset delta {delta} where {expected_delta} was expected"
        )));
    }
    let key_is_null = skip_field(body, &mut pos, true, "key")?;
    skip_field(body, &mut pos, true, "value")?;
    let headers = read_varint32(body, &mut pos).ok_or_else(|| invalid("bad header count"))?;
    if headers < 0 {
        return Err(invalid(format!("negative header count {headers}")));
    }
    for _ in 0..headers {
        skip_field(body, &mut pos, false, "header key")?;
        skip_field(body, &mut pos, true, "header value")?;
    }
    if pos != body.len() {
        return Err(invalid(format!(
            "record length {} does not match its {pos} bytes of fields",
            body.len()
        )));
    }
    Ok((key_is_null, timestamp_delta))
}

/// Overwrites an `i32` field of a batch and recomputes the CRC (for tests
/// of what validation makes of inconsistent fields).
#[cfg(test)]
pub(super) fn patched(mut b: Vec<u8>, pos: usize, value: i32) -> Vec<u8> {
    use crate::storage::batch::parse::CRC_POS;
    b[pos..pos + 4].copy_from_slice(&value.to_be_bytes());
    let crc = compute_crc(&b);
    b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::batch::build::{
        set_base_offset_and_epoch, set_log_append_time, BatchBuilder,
    };
    use crate::storage::batch::parse::{
        decode_records, find_record_at_or_after, first_record_at_or_after, ATTRIBUTES_POS, CRC_POS,
        LAST_OFFSET_DELTA_POS, LENGTH_POS, RECORDS_COUNT_POS,
    };
    use crate::storage::test_batches::{keyed as encode, keyed_sized as encode_sized, CODECS};
    use bytes::Bytes;
    use kafka_protocol::records::Compression;

    #[test]
    fn validate_accepts_several_batches() {
        let mut buf = encode(3, 1, Compression::None);
        buf.extend(encode(2, 5, Compression::None));
        let hs = validate_batches(&buf, 1 << 20).expect("valid");
        assert_eq!(hs.len(), 2);
        assert_eq!(hs[1].records_count, 2);
    }

    #[test]
    fn validate_rejects_bad_input() {
        let good = encode(3, 1, Compression::None);
        // Empty and short payloads.
        assert!(matches!(
            validate_batches(&[], 1 << 20),
            Err(StorageError::CorruptBatch(_))
        ));
        for cut in 1..good.len() {
            let r = validate_batches(&good[..cut], 1 << 20);
            assert!(
                matches!(r, Err(StorageError::CorruptBatch(_))),
                "cut {cut}: {r:?}"
            );
        }
        // Trailing garbage after a whole batch.
        let mut trailing = good.clone();
        trailing.extend_from_slice(&[0, 1, 2]);
        assert!(matches!(
            validate_batches(&trailing, 1 << 20),
            Err(StorageError::CorruptBatch(_))
        ));
        // Wrong magic.
        for magic in [0u8, 1, 3, 0xff] {
            let mut b = good.clone();
            b[MAGIC_POS] = magic;
            assert!(matches!(
                validate_batches(&b, 1 << 20),
                Err(StorageError::UnsupportedMagic(m)) if m == magic as i8
            ));
        }
        // batchLength too small, negative, or past the buffer.
        for len in [
            0i32,
            -1,
            i32::MIN,
            10,
            MIN_BATCH_LENGTH - 1,
            i32::MAX,
            good.len() as i32,
        ] {
            let mut b = good.clone();
            b[8..12].copy_from_slice(&len.to_be_bytes());
            assert!(
                matches!(
                    validate_batches(&b, 1 << 20),
                    Err(StorageError::CorruptBatch(_))
                ),
                "len {len}"
            );
        }
        // Every single-bit flip in the CRC-covered region or the CRC itself.
        for i in CRC_POS..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x01;
            assert!(
                matches!(
                    validate_batches(&b, 1 << 20),
                    Err(StorageError::CorruptBatch(_))
                ),
                "byte {i}"
            );
        }
        // Too large.
        assert!(matches!(
            validate_batches(&good, good.len() - 1),
            Err(StorageError::MessageTooLarge { size, .. }) if size == good.len()
        ));
        assert!(validate_batches(&good, good.len()).is_ok());
        // Negative counts with a recomputed (valid) CRC.
        let mut b = good.clone();
        b[RECORDS_COUNT_POS..RECORDS_COUNT_POS + 4].copy_from_slice(&(-1i32).to_be_bytes());
        let crc = compute_crc(&b);
        b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_batches(&b, 1 << 20),
            Err(StorageError::CorruptBatch(_))
        ));
        let mut b = good.clone();
        b[LAST_OFFSET_DELTA_POS..LAST_OFFSET_DELTA_POS + 4].copy_from_slice(&(-5i32).to_be_bytes());
        let crc = compute_crc(&b);
        b[CRC_POS..CRC_POS + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_batches(&b, 1 << 20),
            Err(StorageError::CorruptBatch(_))
        ));
    }

    #[test]
    fn validate_never_panics_on_garbage() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let good = encode(2, 7, Compression::None);
        for _ in 0..5000 {
            let mut b = if next() % 2 == 0 {
                good.clone()
            } else {
                (0..(next() % 200) as usize).map(|_| next() as u8).collect()
            };
            let flips = next() % 4;
            for _ in 0..flips {
                if !b.is_empty() {
                    let i = (next() as usize) % b.len();
                    b[i] = next() as u8;
                }
            }
            let _ = validate_batches(&b, 1 << 20);
            let _ = BatchHeader::parse(&b);
            let _ = first_record_at_or_after(&b, 8, 0);
            let _ = find_record_at_or_after(&b, 8, 0);
            if let Ok(h) = validate_batches(&b, 1 << 20) {
                let _ = validate_records(&b, &h, true);
            }
            let _ = decode_records(&b);
            set_base_offset_and_epoch(&mut b, 1, 2);
            set_log_append_time(&mut b, 3);
        }
        set_base_offset_and_epoch(&mut [], 1, 2);
        set_log_append_time(&mut [0u8; 3], 3);
    }

    #[test]
    fn timestamp_bounds_name_each_record_out_of_range() {
        // Two batches (none, zstd) of 3 records at ts, ts+1, ts+2.
        let now = 1_000_000;
        let mut buf = encode(3, now - 100, Compression::None);
        buf.extend_from_slice(&encode(3, now + 50, Compression::Zstd));
        let hs = validate_batches(&buf, 1 << 20).unwrap();
        let bounds = |before, after| {
            Some(TimestampBounds {
                now_ms: now,
                before_max_ms: before,
                after_max_ms: after,
            })
        };
        assert!(validate_records_bounded(&buf, &hs, false, None).is_ok());
        assert!(validate_records_bounded(&buf, &hs, false, bounds(100, 52)).is_ok());
        // before 99: record 0 (now-100) is out; after 50: records 4, 5 are out.
        match validate_records_bounded(&buf, &hs, false, bounds(99, 50)) {
            Err(StorageError::TimestampErrors { errors }) => {
                let idx: Vec<i32> = errors.iter().map(|(i, _)| *i).collect();
                assert_eq!(idx, vec![0, 4, 5]);
                assert_eq!(
                    errors[0].1,
                    format!("Timestamp {} of message with offset 0 is out of range. The timestamp should be within [{}, {}]", now - 100, now - 99, now + 50)
                );
                assert!(errors[1]
                    .1
                    .starts_with(&format!("Timestamp {} of message with offset 1 ", now + 51)));
            }
            other => panic!("{other:?}"),
        }
        // Timestamp errors win over keyless records (INVALID_TIMESTAMP, as Kafka).
        let r = validate_records_bounded(&buf, &hs, true, bounds(0, 0));
        assert!(
            matches!(r, Err(StorageError::TimestampErrors { ref errors }) if errors.len() == 6),
            "{r:?}"
        );
        // Unbounded (Long.MAX_VALUE) never overflows.
        let far = encode(1, i64::MIN / 2, Compression::None);
        let fh = validate_batches(&far, 1 << 20).unwrap();
        assert!(validate_records_bounded(&far, &fh, false, bounds(i64::MAX, i64::MAX)).is_ok());
        assert!(validate_records_bounded(&far, &fh, false, bounds(i64::MAX / 4, 0)).is_err());
        // A LogAppendTime batch is not checked against CreateTime bounds.
        let mut lat = encode(2, 5, Compression::None);
        set_log_append_time(&mut lat, now);
        let lh = validate_batches(&lat, 1 << 20).unwrap();
        assert!(validate_records_bounded(&lat, &lh, false, bounds(0, 0)).is_ok());
    }

    #[test]
    fn keys_required_for_compaction() {
        let good = encode(3, 1, Compression::Lz4);
        let mut two = good.clone();
        two.extend(encode(2, 5, Compression::None));
        assert!(validate_records(&two, &validate_batches(&two, 1 << 20).unwrap(), true).is_ok());
        let keyless = BatchBuilder::new()
            .compression(Compression::Gzip)
            .record(None, Some(Bytes::from_static(b"v")), 1)
            .encode()
            .expect("encode");
        two.extend_from_slice(&keyless);
        let hs = validate_batches(&two, 1 << 20).unwrap();
        // the keyless record is the sixth of the record set (3 + 2 before it)
        match validate_records(&two, &hs, true) {
            Err(StorageError::RecordErrors { errors }) => {
                assert_eq!(errors.iter().map(|e| e.0).collect::<Vec<_>>(), vec![5])
            }
            other => panic!("{other:?}"),
        }
        assert!(
            validate_records(&two, &hs, false).is_ok(),
            "keyless records are fine outside compacted topics"
        );
    }

    fn check(b: &[u8], require_keys: bool) -> Result<()> {
        let hs = validate_batches(b, 1 << 20)?;
        validate_records(b, &hs, require_keys)
    }

    #[test]
    fn consistent_batches_of_every_codec_pass_record_validation() {
        for c in CODECS {
            let mut two = encode(7, 1_000, c);
            two.extend(encode(1, 2_000, c));
            check(&two, true).unwrap_or_else(|e| panic!("{c:?}: {e}"));
        }
    }

    /// `batch` (uncompressed) with its records lz4-compressed, the last
    /// `cut` bytes of the records left out first.
    fn lz4_with_records_cut(batch: &[u8], cut: usize) -> Vec<u8> {
        use std::io::Write;
        let records = &batch[BATCH_HEADER_LEN..batch.len() - cut];
        let mut encoder = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        encoder.write_all(records).unwrap();
        let (compressed, done) = encoder.finish();
        done.unwrap();
        let mut b = batch[..BATCH_HEADER_LEN].to_vec();
        b.extend(compressed);
        b[ATTRIBUTES_POS + 1] |= 3;
        let len = (b.len() - LOG_OVERHEAD) as i32;
        patched(b, LENGTH_POS, len)
    }

    #[test]
    fn compressed_records_are_walked_across_the_stream_buffer() {
        // Values of 10..3010 bytes (4.5 MB in all), records straddling the
        // read buffer many times over, keys required.
        for c in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            check(&encode(3_000, 1, c), true).unwrap_or_else(|e| panic!("{c:?}: {e}"));
        }
        // Records longer than the buffer, each read as it arrives; records
        // just within and just past what is carried over to the next read.
        let sizes = [
            200_000,
            5,
            STREAM_BUFFER_BYTES + 1,
            1,
            STREAM_BUFFER_BYTES - 40,
            STREAM_CARRY_BYTES - 30,
            STREAM_CARRY_BYTES - 30,
            STREAM_CARRY_BYTES + 1,
            STREAM_READ_BYTES - 20,
            3,
        ];
        let plain = encode_sized(sizes.into_iter(), 1, Compression::None);
        let whole = lz4_with_records_cut(&plain, 0);
        check(&whole, true).expect("the recompressed batch is valid");
        // The last record cut short by one byte, and by most of itself:
        // both are invalid records, whether the short record sits in the
        // buffer or runs past it.
        for cut in [1, STREAM_BUFFER_BYTES - 100] {
            assert!(
                matches!(
                    check(&lz4_with_records_cut(&plain, cut), false),
                    Err(StorageError::InvalidRecord(_))
                ),
                "cut {cut}"
            );
        }
        let small = encode(50, 1, Compression::None);
        assert!(matches!(
            check(&lz4_with_records_cut(&small, 3), false),
            Err(StorageError::InvalidRecord(_))
        ));
    }

    /// The record check reads a record once, without messages, and again
    /// with them only when it is invalid: both readings must agree on
    /// every body, valid or not.
    #[test]
    fn the_quick_and_the_explaining_record_checks_agree() {
        let batch = encode(40, 1_000, Compression::None);
        let mut pos = BATCH_HEADER_LEN;
        let mut bodies = Vec::new();
        while pos < batch.len() {
            let len = read_varlong(&batch, &mut pos).unwrap() as usize;
            bodies.push(batch[pos..pos + len].to_vec());
            pos += len;
        }
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut valid, mut invalid) = (0, 0);
        for round in 0..20_000 {
            let delta = round % bodies.len();
            let mut body = bodies[delta].clone();
            // Unchanged, one to three bytes replaced, or cut short.
            match next() % 4 {
                0 => {}
                1 | 2 => {
                    for _ in 0..=next() % 3 {
                        let at = next() as usize % body.len().min(24);
                        body[at] = next() as u8;
                    }
                }
                _ => body.truncate(next() as usize % body.len()),
            }
            let expected = if next() % 8 == 0 {
                delta as i32 + 1
            } else {
                delta as i32
            };
            let quick = scan_record(&body, expected);
            let explained = explain_record(&body, expected);
            match (&quick, &explained) {
                (Some(q), Ok(e)) => {
                    assert_eq!(q, e, "{body:?}");
                    valid += 1;
                }
                (None, Err(StorageError::InvalidRecord(_))) => invalid += 1,
                _ => panic!("{body:?} (delta {expected}): {quick:?} vs {explained:?}"),
            }
        }
        assert!(
            valid > 1_000 && invalid > 1_000,
            "{valid} valid, {invalid} invalid"
        );
    }

    #[test]
    fn lying_record_counts_are_invalid_records() {
        for c in [Compression::None, Compression::Zstd] {
            let good = encode(1, 1, c);
            // recordsCount 2^31-1 with one record (the poisoned batch that
            // used to be stored, then crash ListOffsets and the cleaner).
            let huge = patched(good.clone(), RECORDS_COUNT_POS, i32::MAX);
            assert!(matches!(
                check(&huge, false),
                Err(StorageError::InvalidRecord(_))
            ));
            let huge = patched(huge, LAST_OFFSET_DELTA_POS, i32::MAX - 1);
            assert!(matches!(
                check(&huge, false),
                Err(StorageError::InvalidRecord(_))
            ));
            // a batch of 3 that declares 2 (and a matching lastOffsetDelta)
            let three = encode(3, 1, c);
            let fewer = patched(
                patched(three, RECORDS_COUNT_POS, 2),
                LAST_OFFSET_DELTA_POS,
                1,
            );
            assert!(
                matches!(check(&fewer, false), Err(StorageError::InvalidRecord(_))),
                "{c:?}"
            );
            for count in [0, -1] {
                let b = patched(good.clone(), RECORDS_COUNT_POS, count);
                assert!(check(&b, false).is_err(), "count {count}");
            }
        }
    }

    #[test]
    fn inconsistent_record_fields_are_invalid_records() {
        // One uncompressed record: [len][attr][tsDelta][offDelta][keyLen]...
        let good = encode(1, 1, Compression::None);
        assert!(check(&good, false).is_ok());
        let rec = BATCH_HEADER_LEN;
        let mut offset_delta = good.clone();
        offset_delta[rec + 3] = 2; // zig-zag 1: the first record says delta 1
        let offset_delta = patched(offset_delta, LENGTH_POS, (good.len() - LOG_OVERHEAD) as i32);
        assert!(matches!(
            check(&offset_delta, false),
            Err(StorageError::InvalidRecord(_))
        ));
        // A header count that claims 2^31-1 headers.
        let mut lying_headers = good.clone();
        let last = lying_headers.len() - 1; // headers count 0 is the last byte
        lying_headers[last] = 0xfe;
        lying_headers.extend_from_slice(&[0xff, 0xff, 0xff, 0x0f]);
        lying_headers[rec] += 4; // the record length covers the longer varint
        let len = (lying_headers.len() - LOG_OVERHEAD) as i32;
        let lying_headers = patched(lying_headers, LENGTH_POS, len);
        assert!(matches!(
            check(&lying_headers, false),
            Err(StorageError::InvalidRecord(_))
        ));
        // Trailing garbage inside the batch after the declared records.
        let mut trailing = good.clone();
        trailing.extend_from_slice(&[0x02, 0x00]);
        let len = (trailing.len() - LOG_OVERHEAD) as i32;
        let trailing = patched(trailing, LENGTH_POS, len);
        assert!(matches!(
            check(&trailing, false),
            Err(StorageError::InvalidRecord(_))
        ));
    }

    #[test]
    fn a_compression_bomb_is_refused_not_inflated() {
        // One record whose value is 80 MiB of zeros: zstd makes it a few KiB.
        let buf = BatchBuilder::new()
            .compression(Compression::Zstd)
            .record(
                Some(Bytes::from_static(b"k")),
                Some(Bytes::from(vec![0u8; 80 << 20])),
                1,
            )
            .encode()
            .expect("encode");
        assert!(
            buf.len() < 1 << 20,
            "the bomb is small: {} bytes",
            buf.len()
        );
        assert!(matches!(
            check(&buf, false),
            Err(StorageError::MessageTooLarge { .. })
        ));
        assert!(
            decode_records(&buf).is_err(),
            "decoding a stored bomb fails too"
        );
    }
}
