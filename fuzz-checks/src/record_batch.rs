//! Fuzz check `record_batch`: a produce payload through the broker's record
//! batch validation, decompression and record-level readers.
//!
//! Input: the `records` bytes of one partition of a Produce request, i.e. a
//! sequence of v2 record batches (seeds: batches real clients produced, with
//! every codec: none, gzip, snappy, lz4, zstd).
//!
//! Exercises (`moldau_broker::storage::batch`):
//! - `validate_batches(data, 1 MiB)`, the produce path's check;
//! - the input split batch by batch and each checked with `validate_one`,
//!   as log recovery does; for every batch that validates, rebased at
//!   offset 0 as the broker stores it (`set_base_offset_and_epoch`):
//!   `decode_records` (decompression included), `validate_records`
//!   (record-level produce checks, keys required as on a compacted topic), `find_record_at_or_after` and
//!   `first_record_at_or_after` (ListOffsets by timestamp) at a few
//!   timestamps and offsets.
//!
//! All of this twice: on the input as is, and on a copy whose batch CRCs
//! are recomputed (so that mutations get past the CRC check).
//!
//! Asserts: no panic, abort or out-of-memory (scripts/fuzz.sh runs with
//! `-rss_limit_mb` / `-malloc_limit_mb`, so an allocation sized by a lying
//! record count or a decompression bomb is a crash); errors are fine. When
//! `validate_batches` accepts the payload, its headers are those of the
//! batch-by-batch split and they cover the input exactly. When the fast
//! walk over uncompressed records (`first_record_at_or_after`) finds a
//! record and the decoder accepts the batch, the decoder has a record with
//! that same offset and timestamp.

use crate::common;

use moldau_broker::storage::batch::{
    decode_records, find_record_at_or_after, first_record_at_or_after, read_offset_and_length,
    set_base_offset_and_epoch, validate_batches, validate_one, validate_records, BatchHeader,
    LOG_OVERHEAD,
};

/// `max.message.bytes` for the produce check (the broker's default is 1 MiB + 12).
const MAX_BATCH_BYTES: usize = 1 << 20;

/// Whole batches of `data` that pass `validate_one`, up to the first that does not.
fn split(data: &[u8]) -> Vec<(&[u8], BatchHeader)> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while let Some((_, len)) = read_offset_and_length(&data[pos..]) {
        let Ok(len) = usize::try_from(len) else { break };
        let Some(end) = pos.checked_add(LOG_OVERHEAD + len) else {
            break;
        };
        let Some(batch) = data.get(pos..end) else {
            break;
        };
        let Ok(header) = validate_one(batch) else {
            break;
        };
        out.push((batch, header));
        pos = end;
    }
    out
}

fn readers(batch: &[u8], header: &BatchHeader) {
    // Stored batches carry the broker's offsets, not the client's.
    let mut stored = batch.to_vec();
    set_base_offset_and_epoch(&mut stored, 0, 0);
    let decoded = decode_records(&stored);
    if let Ok(h) = BatchHeader::parse(&stored) {
        let _ = validate_records(&stored, &[h], true);
    }
    let last_delta = header.last_offset_delta;
    for ts in [i64::MIN, header.base_timestamp, header.max_timestamp] {
        for min in [0, last_delta / 2, last_delta] {
            let _ = find_record_at_or_after(&stored, ts, i64::from(min));
            if let Some((delta, found_ts)) = first_record_at_or_after(&stored, ts, min) {
                assert!(delta >= min && found_ts >= ts);
                if let Ok(records) = &decoded {
                    assert!(
                        records
                            .iter()
                            .any(|r| r.offset == i64::from(delta) && r.timestamp == found_ts),
                        "fast walk found ({delta}, {found_ts}), the decoder has no such record"
                    );
                }
            }
        }
    }
}

fn check(data: &[u8]) {
    let produce = validate_batches(data, MAX_BATCH_BYTES);
    let batches = split(data);
    if let Ok(headers) = &produce {
        let split_headers: Vec<BatchHeader> = batches.iter().map(|(_, h)| *h).collect();
        assert_eq!(
            headers, &split_headers,
            "produce check and batch split agree"
        );
        let covered: usize = headers.iter().map(BatchHeader::total_size).sum();
        assert_eq!(covered, data.len(), "validated batches cover the payload");
        // the produce path: record-level checks, with and without keys required
        let _ = validate_records(data, headers, true);
        let _ = validate_records(data, headers, false);
    }
    for (batch, header) in &batches {
        readers(batch, header);
    }
}

/// One input through the check (see the module doc).
pub fn run(data: &[u8]) {
    check(data);
    // Again with every CRC made right, so mutations reach the decoders
    // behind the CRC check.
    let mut fixed = data.to_vec();
    common::fix_crcs(&mut fixed);
    if fixed != data {
        check(&fixed);
    }
}
