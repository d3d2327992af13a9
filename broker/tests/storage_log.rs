//! Append, read, roll, retention, timestamps and checkpoints of `PartitionLog`.

#[path = "storage_common/mod.rs"]
mod common;

use common::*;
use moldau_broker::storage::batch::{self, BatchHeader};
use moldau_broker::storage::{LogConfig, PartitionLog, StorageError};

const NOW: i64 = 1_700_000_000_000;

/// Appends `count` batches of 1..=4 records (timestamps increasing by 10
/// per batch) and returns the `(base, last)` offsets of each.
fn fill(log: &mut PartitionLog, count: usize, ts0: i64) -> Vec<(i64, i64)> {
    (0..count)
        .map(|i| {
            let b = batch(1 + i % 4, ts0 + 10 * i as i64);
            let r = log.append(&b, 3, NOW).expect("append");
            (r.base_offset, r.last_offset)
        })
        .collect()
}

#[test]
fn storage_append_read_round_trip_across_segments() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("open");
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
    let ranges = fill(&mut log, 60, NOW - 1000);
    // Offsets are contiguous.
    let mut expect = 0;
    for &(b, l) in &ranges {
        assert_eq!(b, expect);
        expect = l + 1;
    }
    let end = log.log_end_offset();
    assert_eq!(end, expect);
    assert!(
        log.segment_count() >= 4,
        "segments: {}",
        log.segment_count()
    );
    assert!(files_with_suffix(dir.path(), ".log").len() >= 4);

    for offset in 0..end {
        let (b, l) = *ranges
            .iter()
            .find(|(b, l)| *b <= offset && offset <= *l)
            .expect("range");
        // KIP-74: max_bytes 1 still returns exactly the batch holding `offset`.
        let s = log.read(offset, 1, end).expect("read");
        let hs = headers(&slice_bytes(&s));
        assert_eq!(hs.len(), 1, "offset {offset}");
        assert_eq!((hs[0].base_offset, hs[0].last_offset()), (b, l));
        assert_eq!(hs[0].partition_leader_epoch, 3);
        assert!(batch::validate_one(&slice_bytes(&s)).is_ok());
        // Large reads: whole, contiguous batches from one segment, starting at `offset`'s batch.
        let s = log.read(offset, 1 << 20, end).expect("read");
        let bytes = slice_bytes(&s);
        let hs = headers(&bytes);
        assert_eq!(hs[0].base_offset, b);
        for w in hs.windows(2) {
            assert_eq!(w[1].base_offset, w[0].last_offset() + 1);
        }
        let sets = decode(&bytes);
        assert_eq!(sets[0].records[0].offset, b);
        // max_offset (the high watermark) is an exclusive bound on base offsets.
        let hw = (offset + 5).min(end);
        let s = log.read(offset, 1 << 20, hw).expect("read");
        let hs = headers(&slice_bytes(&s));
        assert!(!hs.is_empty());
        assert!(
            hs.iter().all(|h| h.base_offset < hw),
            "offset {offset} hw {hw}"
        );
        // ~max_bytes: never more than max_bytes unless a single batch.
        let s = log.read(offset, 200, end).expect("read");
        let hs = headers(&slice_bytes(&s));
        assert!(s.len <= 200 || hs.len() == 1);
    }
    // At the high watermark: empty; at the end: empty; outside: out of range.
    assert!(log.read(10, 100, 10).expect("read").is_empty());
    assert!(log.read(end, 100, end).expect("read").is_empty());
    assert!(matches!(
        log.read(end + 1, 100, end + 1),
        Err(StorageError::OffsetOutOfRange { requested, .. }) if requested == end + 1
    ));
    assert!(matches!(
        log.read(-1, 100, end),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    // A read of the last batch of a segment never spans into the next one.
    let bases = log.segment_base_offsets();
    let s = log.read(bases[1] - 1, 1 << 20, end).expect("read");
    let hs = headers(&slice_bytes(&s));
    assert_eq!(hs.last().expect("batch").last_offset(), bases[1] - 1);
}

#[test]
fn storage_append_many_batches_in_one_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), LogConfig::default(), NOW).expect("open");
    let mut payload = batch(3, NOW);
    payload.extend(batch(2, NOW + 1));
    payload.extend(batch(5, NOW + 2));
    batch::validate_batches(&payload, 1 << 20).expect("valid");
    let r = log.append(&payload, 0, NOW).expect("append");
    assert_eq!(
        (
            r.base_offset,
            r.last_offset,
            r.log_append_time,
            r.log_start_offset
        ),
        (0, 9, -1, 0)
    );
    let hs = headers(&slice_bytes(&log.read(0, 1 << 20, 10).expect("read")));
    assert_eq!(
        hs.iter()
            .map(|h| (h.base_offset, h.last_offset()))
            .collect::<Vec<_>>(),
        vec![(0, 2), (3, 4), (5, 9)]
    );
    // Malformed payloads are refused without writing anything.
    let size = log.size_bytes();
    assert!(matches!(
        log.append(&[], 0, NOW),
        Err(StorageError::CorruptBatch(_))
    ));
    let mut torn = batch(2, NOW);
    torn.truncate(torn.len() - 1);
    assert!(matches!(
        log.append(&torn, 0, NOW),
        Err(StorageError::CorruptBatch(_))
    ));
    let mut v1 = batch(2, NOW);
    v1[16] = 1;
    assert!(matches!(
        log.append(&v1, 0, NOW),
        Err(StorageError::UnsupportedMagic(1))
    ));
    assert_eq!(log.size_bytes(), size);
    assert_eq!(log.log_end_offset(), 10);
}

#[test]
fn storage_roll_by_segment_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("open");
    let one = batch(2, NOW).len() as u64;
    let per_segment = 1024 / one;
    for _ in 0..per_segment {
        log.append(&batch(2, NOW), 0, NOW).expect("append");
    }
    assert_eq!(log.segment_count(), 1, "fits exactly");
    log.append(&batch(2, NOW), 0, NOW).expect("append");
    assert_eq!(
        log.segment_count(),
        2,
        "rolled before exceeding segment.bytes"
    );
    assert_eq!(log.segment_base_offsets()[1], 2 * per_segment as i64);
    // No segment ever exceeds segment.bytes.
    for name in files_with_suffix(dir.path(), ".log") {
        assert!(
            std::fs::metadata(dir.path().join(name))
                .expect("meta")
                .len()
                <= 1024
        );
    }
    // A batch larger than segment.bytes goes alone into a fresh segment.
    log.append(
        &batch_with(2, NOW, kafka_protocol::records::Compression::None, 2000),
        0,
        NOW,
    )
    .expect("append");
    assert_eq!(log.segment_count(), 3);
    log.append(&batch(1, NOW), 0, NOW).expect("append");
    assert_eq!(log.segment_count(), 4);
    // Sealed segments have trimmed indexes.
    let idx = files_with_suffix(dir.path(), ".index");
    let first = std::fs::metadata(dir.path().join(&idx[0]))
        .expect("meta")
        .len();
    assert!(
        first < 4096 && first / 8 * 8 == first,
        "trimmed index is {first} bytes"
    );
    let last = std::fs::metadata(dir.path().join(idx.last().expect("idx")))
        .expect("meta")
        .len();
    assert_eq!(last, 4096, "active index preallocated");
}

#[test]
fn storage_roll_by_segment_ms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        segment_ms: 1000,
        ..config()
    };
    let mut log = PartitionLog::open(dir.path(), cfg, NOW).expect("open");
    log.append(&batch(1, NOW), 0, NOW).expect("append");
    log.append(&batch(1, NOW), 0, NOW + 1000).expect("append");
    assert_eq!(log.segment_count(), 1, "not older than segment.ms yet");
    log.append(&batch(1, NOW), 0, NOW + 1001).expect("append");
    assert_eq!(log.segment_count(), 2, "age counts from the first batch");
    // The retention pass also rolls an aged active segment, but not an empty one.
    log.enforce_retention(NOW + 1500).expect("retention");
    assert_eq!(log.segment_count(), 2);
    log.enforce_retention(NOW + 2002).expect("retention");
    assert_eq!(log.segment_count(), 3);
    log.enforce_retention(NOW + 9000).expect("retention");
    assert_eq!(log.segment_count(), 3, "empty active segment is not rolled");
    assert_eq!(log.log_end_offset(), 3);
}

#[test]
fn storage_roll_by_segment_ms_minus_a_per_segment_jitter() {
    // segment.ms 10 s, jitter up to 8 s: each segment rolls at the age
    // 10 s - its own jitter, which lies in [0, 8 s) and stays the same for
    // that segment; across segments the jitters differ.
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        segment_ms: 10_000,
        segment_jitter_ms: 8_000,
        ..config()
    };
    let mut log = PartitionLog::open(dir.path(), cfg.clone(), NOW).expect("open");
    let mut jitters = std::collections::BTreeSet::new();
    let mut t = NOW;
    for _ in 0..20 {
        let base = log.log_end_offset();
        let jitter = log.roll_jitter_ms(base);
        assert!((0..8_000).contains(&jitter), "{jitter}");
        assert_eq!(log.roll_jitter_ms(base), jitter, "fixed per segment");
        jitters.insert(jitter);
        let before = log.segment_count();
        log.append(&batch(1, t), 0, t).expect("first batch");
        let first = t;
        // Not yet: at exactly segment.ms - jitter.
        t = first + 10_000 - jitter;
        log.append(&batch(1, t), 0, t).expect("append");
        assert_eq!(log.segment_count(), before, "rolled too early");
        // One ms later it rolls.
        t += 1;
        log.append(&batch(1, t), 0, t).expect("append");
        assert_eq!(
            log.segment_count(),
            before + 1,
            "not rolled at segment.ms - jitter"
        );
        assert_eq!(
            log.segment_base_offsets().last(),
            Some(&(log.log_end_offset() - 1))
        );
        // Start the next round on a fresh segment whose first batch is now.
        t += 1;
        log.enforce_retention(t + 20_000).expect("retention");
        t += 20_001;
    }
    assert!(jitters.len() > 10, "jitters barely vary: {jitters:?}");

    // Without jitter (the default), the age is segment.ms exactly.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = PartitionLog::open(dir.path(), config(), NOW).expect("open");
    assert_eq!(log.roll_jitter_ms(0), 0);
    // Jitter is bounded by segment.ms, as Kafka's min(jitter, segment.ms).
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        segment_ms: 5,
        segment_jitter_ms: 1_000_000,
        ..config()
    };
    let log = PartitionLog::open(dir.path(), cfg, NOW).expect("open");
    assert!((0..5).all(|b| (0..5).contains(&log.roll_jitter_ms(b))));
}

#[test]
fn storage_retention_by_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        retention_ms: 10_000,
        ..config()
    };
    let mut log = PartitionLog::open(dir.path(), cfg, NOW).expect("open");
    // Old records (timestamps an hour back), then recent ones.
    for i in 0..20 {
        log.append(&batch(2, NOW - 3_600_000 + i), 0, NOW)
            .expect("append");
    }
    let old_end = log.log_end_offset();
    let hold = log.read(0, 1 << 20, old_end).expect("read before deletion");
    let held = slice_bytes(&hold);
    log.append(&batch(2, NOW), 0, NOW).expect("append"); // rolls? maybe not
    let segs_before = log.segment_count();
    assert!(segs_before >= 3);
    let out = log.enforce_retention(NOW + 1).expect("retention");
    assert!(out.segments_deleted >= 2, "{out:?}");
    assert!(out.bytes_deleted > 0);
    assert_eq!(out.log_start_offset, log.log_start_offset());
    assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
    assert!(log.log_start_offset() > 0);
    // The recent batch's segment is kept.
    assert_eq!(log.log_end_offset(), old_end + 2);
    assert!(matches!(
        log.read(0, 100, old_end),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    // A reader holding a slice of a deleted segment keeps reading it.
    assert_eq!(slice_bytes(&hold), held);
    assert!(files_with_suffix(dir.path(), ".deleted").is_empty());
    // Everything expired: the active segment is rolled and deleted as well.
    let out = log.enforce_retention(NOW + 3_600_000).expect("retention");
    assert!(out.segments_deleted >= 1);
    assert_eq!(log.log_start_offset(), log.log_end_offset());
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.size_bytes(), 0);
    assert!(log
        .read(log.log_end_offset(), 100, i64::MAX)
        .expect("read")
        .is_empty());
    // The log start offset was checkpointed: it survives a crash.
    let start = log.log_start_offset();
    drop(log);
    let log = PartitionLog::open(dir.path(), config(), NOW).expect("reopen");
    assert_eq!(log.log_start_offset(), start);
    assert_eq!(log.log_end_offset(), start);
}

#[test]
fn storage_retention_by_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("open");
    fill(&mut log, 60, NOW);
    let total = log.size_bytes();
    let mut cfg = config();
    cfg.retention_bytes = 2048;
    log.set_config(cfg);
    let out = log.enforce_retention(NOW).expect("retention");
    assert!(out.segments_deleted > 0);
    assert_eq!(out.bytes_deleted, total - log.size_bytes());
    assert!(log.size_bytes() <= 2048 + 1024, "size {}", log.size_bytes());
    // One more segment deleted would go below retention.bytes.
    assert!(log.size_bytes() > 2048 || log.segment_count() == 1);
    assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
    let start = log.log_start_offset();
    let s = log.read(start, 1, i64::MAX).expect("read");
    assert_eq!(headers(&slice_bytes(&s))[0].base_offset, start);
    // Retention never deletes the active segment.
    cfg = config();
    cfg.retention_bytes = 0;
    log.set_config(cfg);
    log.enforce_retention(NOW).expect("retention");
    assert_eq!(log.segment_count(), 1);
    assert!(log.size_bytes() > 0);
}

/// With removal deferred (as the broker runs its logs), retention renames
/// the deleted segments `.deleted` and leaves their removal to whoever
/// drops `take_retired()` — the broker does so after releasing the
/// partition's lock, so that freeing large files never stalls appends.
#[test]
fn storage_retention_deferred_removal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("open");
    log.defer_file_removal();
    fill(&mut log, 60, NOW);
    let mut cfg = config();
    cfg.retention_bytes = 2048;
    log.set_config(cfg);
    let out = log.enforce_retention(NOW).expect("retention");
    assert!(out.segments_deleted > 0);
    let deleted = |suffix: &str| {
        std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(suffix))
            .count()
    };
    // each deleted segment's files, renamed, still there
    assert_eq!(deleted(".log.deleted"), out.segments_deleted);
    let retired = log.take_retired();
    assert!(!retired.is_empty());
    assert!(log.take_retired().is_empty(), "taken once");
    drop(retired);
    assert_eq!(deleted(".deleted"), 0, "removed once dropped");
}

#[test]
fn storage_delete_records_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("open");
    let ranges = fill(&mut log, 40, NOW);
    let end = log.log_end_offset();
    let bases = log.segment_base_offsets();
    // Inside a batch of the second segment.
    let target = bases[1] + 1;
    assert_eq!(log.delete_records_before(target).expect("delete"), target);
    assert_eq!(log.log_start_offset(), target);
    assert_eq!(
        log.segment_base_offsets()[0],
        bases[1],
        "first segment deleted"
    );
    assert!(matches!(
        log.read(target - 1, 100, end),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    // Reading at the log start gives the whole batch containing it.
    let (b, _) = *ranges
        .iter()
        .find(|(b, l)| *b <= target && target <= *l)
        .expect("range");
    let hs = headers(&slice_bytes(&log.read(target, 1, end).expect("read")));
    assert_eq!(hs[0].base_offset, b);
    // Lower than the log start: nothing changes; past the end: out of range.
    assert_eq!(log.delete_records_before(0).expect("noop"), target);
    assert!(matches!(
        log.delete_records_before(end + 1),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
    // Survives a crash.
    drop(log);
    let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("reopen");
    assert_eq!(log.log_start_offset(), target);
    // Up to the end: everything goes, appends continue at the end.
    assert_eq!(log.delete_records_before(end).expect("delete"), end);
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.size_bytes(), 0);
    let r = log.append(&batch(2, NOW), 0, NOW).expect("append");
    assert_eq!(r.base_offset, end);
    assert_eq!(r.log_start_offset, end);
}

#[test]
fn storage_offset_for_timestamp_and_max_timestamp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("open");
    assert_eq!(log.max_timestamp(), None);
    assert_eq!(log.offset_for_timestamp(0).expect("lookup"), None);
    // Batch i has records with timestamps 1000*i + 0..n.
    let mut ranges = Vec::new();
    for i in 0..40i64 {
        let n = 1 + (i % 3) as usize;
        let r = log.append(&batch(n, 1000 * i), 0, NOW).expect("append");
        ranges.push((r.base_offset, r.last_offset, 1000 * i));
    }
    assert!(log.segment_count() > 2);
    for &(b, l, ts) in &ranges {
        let max = ts + (l - b);
        // The record's own timestamp, not the batch max.
        assert_eq!(log.offset_for_timestamp(ts).expect("lookup"), Some((b, ts)));
        assert_eq!(
            log.offset_for_timestamp(ts - 500).expect("lookup"),
            Some((b, ts))
        );
        // Record-level precision inside an uncompressed batch.
        assert_eq!(
            log.offset_for_timestamp(max).expect("lookup"),
            Some((l, max))
        );
    }
    assert_eq!(log.offset_for_timestamp(0).expect("lookup"), Some((0, 0)));
    assert_eq!(log.offset_for_timestamp(39_000 + 3).expect("lookup"), None);
    let &(_, last, ts) = ranges.last().expect("last");
    assert_eq!(
        log.max_timestamp(),
        Some((ts + (last - ranges[39].0), last))
    );
    // Timestamps below the log start are not returned.
    log.delete_records_before(ranges[20].0 + 1).expect("delete");
    assert_eq!(
        log.offset_for_timestamp(0).expect("lookup"),
        Some((ranges[20].0 + 1, 20_001))
    );
    // Same answers after a clean reopen (time index read back from disk).
    log.close().expect("close");
    let log = PartitionLog::open(dir.path(), config(), NOW).expect("reopen");
    for &(b, l, ts) in &ranges[21..] {
        assert_eq!(log.offset_for_timestamp(ts).expect("lookup"), Some((b, ts)));
        assert_eq!(
            log.offset_for_timestamp(ts + (l - b)).expect("lookup"),
            Some((l, ts + (l - b)))
        );
    }
    assert_eq!(
        log.max_timestamp(),
        Some((ts + (last - ranges[39].0), last))
    );
}

#[test]
fn storage_offset_for_timestamp_with_compressed_batches() {
    use kafka_protocol::records::Compression;
    for compression in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("open");
        let b = batch_with(4, 100, compression, 50);
        log.append(&b, 0, NOW).expect("append");
        let b = batch_with(4, 200, compression, 50);
        log.append(&b, 0, NOW).expect("append");
        // Exact to the record, with the record's own timestamp.
        assert_eq!(
            log.offset_for_timestamp(202).expect("lookup"),
            Some((6, 202)),
            "{compression:?}"
        );
        assert_eq!(
            log.offset_for_timestamp(150).expect("lookup"),
            Some((4, 200))
        );
        assert_eq!(
            log.offset_for_timestamp(103).expect("lookup"),
            Some((3, 103))
        );
        assert_eq!(
            log.offset_for_timestamp(101).expect("lookup"),
            Some((1, 101))
        );
        assert_eq!(log.offset_for_timestamp(204).expect("lookup"), None);
        assert_eq!(log.max_timestamp(), Some((203, 7)));
        // Records below the log start are skipped inside a compressed batch.
        log.delete_records_before(2).expect("delete");
        assert_eq!(log.offset_for_timestamp(0).expect("lookup"), Some((2, 102)));
        let sets = decode(&slice_bytes(&log.read(2, 1 << 20, 8).expect("read")));
        assert_eq!(sets.len(), 2);
        assert_eq!(sets[1].records[3].offset, 7);
    }
}

#[test]
fn storage_max_timestamp_is_the_first_record_with_it() {
    use kafka_protocol::records::Compression;
    for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("open");
        // Offsets 0..5 with timestamps out of order; the max (900) first at
        // offset 2 and again at 4; a later batch never exceeds it.
        let b = batch_with_timestamps(&[500, 100, 900, 300, 900, 200], compression);
        log.append(&b, 0, NOW).expect("append");
        let b = batch_with_timestamps(&[800, 900, 850], compression);
        log.append(&b, 0, NOW).expect("append");
        assert_eq!(log.max_timestamp(), Some((900, 2)), "{compression:?}");
        // Lookups in offset order: the first record at or after the time.
        assert_eq!(
            log.offset_for_timestamp(150).expect("lookup"),
            Some((0, 500))
        );
        assert_eq!(
            log.offset_for_timestamp(600).expect("lookup"),
            Some((2, 900))
        );
        assert_eq!(
            log.offset_for_timestamp(850).expect("lookup"),
            Some((2, 900))
        );
        log.delete_records_before(3).expect("delete");
        assert_eq!(log.max_timestamp(), Some((900, 4)));
        assert_eq!(
            log.offset_for_timestamp(850).expect("lookup"),
            Some((4, 900))
        );
        log.delete_records_before(5).expect("delete");
        assert_eq!(
            log.offset_for_timestamp(250).expect("lookup"),
            Some((6, 800))
        );
        // Same after a clean reopen (max timestamp from the time index).
        log.close().expect("close");
        let log = PartitionLog::open(dir.path(), config(), NOW).expect("reopen");
        assert_eq!(log.max_timestamp(), Some((900, 7)));
    }
}

#[test]
fn storage_log_append_time_rewrites_and_crc_valid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        log_append_time: true,
        ..config()
    };
    let mut log = PartitionLog::open(dir.path(), cfg, NOW).expect("open");
    let b = batch(3, 5);
    let r = log.append(&b, 9, NOW + 42).expect("append");
    assert_eq!(r.log_append_time, NOW + 42);
    assert_eq!(
        b,
        batch(3, 5),
        "the stamped header is a copy: the request's buffer is left as sent"
    );
    let bytes = slice_bytes(&log.read(0, 1 << 20, 3).expect("read"));
    let h = batch::validate_one(&bytes).expect("CRC recomputed and valid");
    assert!(h.is_log_append_time());
    assert_eq!(h.max_timestamp, NOW + 42);
    assert_eq!(
        h.base_timestamp, 5,
        "only attributes and max timestamp change"
    );
    assert_eq!(h.partition_leader_epoch, 9);
    let sets = decode(&bytes);
    // (Clients take LogAppendTime record timestamps from maxTimestamp; this
    // decoder only reports the type.)
    assert_eq!(sets[0].records.len(), 3);
    assert!(sets[0]
        .records
        .iter()
        .all(|r| r.timestamp_type == kafka_protocol::records::TimestampType::LogAppend));
    // Every record carries the batch's LogAppendTime: the first one has it.
    assert_eq!(log.max_timestamp(), Some((NOW + 42, 0)));
    assert_eq!(
        log.offset_for_timestamp(NOW).expect("lookup"),
        Some((0, NOW + 42))
    );
    assert_eq!(log.offset_for_timestamp(NOW + 43).expect("lookup"), None);
    let b = batch_with(3, 5, kafka_protocol::records::Compression::Lz4, 20);
    log.append(&b, 9, NOW + 50).expect("append");
    assert_eq!(
        log.offset_for_timestamp(NOW + 43).expect("lookup"),
        Some((3, NOW + 50))
    );
    assert_eq!(log.max_timestamp(), Some((NOW + 50, 3)));
    log.delete_records_before(4).expect("delete");
    assert_eq!(
        log.offset_for_timestamp(0).expect("lookup"),
        Some((4, NOW + 50))
    );
    assert_eq!(log.max_timestamp(), Some((NOW + 50, 4)));
    // Recovery accepts the rewritten batches.
    drop(log);
    let log = PartitionLog::open(dir.path(), config(), NOW).expect("reopen");
    assert_eq!(log.log_end_offset(), 6);
}

#[test]
fn storage_clean_close_then_reopen_keeps_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("open");
    let ranges = fill(&mut log, 50, NOW);
    log.delete_records_before(3).expect("delete");
    log.set_high_watermark(ranges[40].1 + 1);
    let end = log.log_end_offset();
    let segs = log.segment_base_offsets();
    let all = {
        let mut v = Vec::new();
        let mut o = 3;
        while o < end {
            let s = log.read(o, 1 << 20, end).expect("read");
            let hs = headers(&slice_bytes(&s));
            o = hs.last().expect("batch").last_offset() + 1;
            v.extend(slice_bytes(&s));
        }
        v
    };
    log.close().expect("close");
    assert!(dir.path().join(".clean-shutdown").exists());
    // Active segment indexes were trimmed on close.
    let idx = files_with_suffix(dir.path(), ".index");
    let len = std::fs::metadata(dir.path().join(idx.last().expect("idx")))
        .expect("meta")
        .len();
    assert!(len < 4096);

    let mut log = PartitionLog::open(dir.path(), config(), NOW).expect("reopen");
    assert!(
        !dir.path().join(".clean-shutdown").exists(),
        "marker consumed by open"
    );
    assert_eq!(log.log_start_offset(), 3);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.high_watermark(), 3, "not the log's to keep: its start");
    assert_eq!(log.recovery_point(), end);
    assert_eq!(log.segment_base_offsets(), segs);
    let mut again = Vec::new();
    let mut o = 3;
    while o < end {
        let s = log.read(o, 1 << 20, end).expect("read");
        let hs = headers(&slice_bytes(&s));
        o = hs.last().expect("batch").last_offset() + 1;
        again.extend(slice_bytes(&s));
    }
    assert_eq!(again, all);
    let r = log.append(&batch(1, NOW), 0, NOW).expect("append");
    assert_eq!(r.base_offset, end);
    log.close().expect("close");
}

#[test]
fn storage_flush_policy_advances_recovery_point() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        flush_messages: 5,
        ..config()
    };
    let mut log = PartitionLog::open(dir.path(), cfg, NOW).expect("open");
    log.append(&batch(3, NOW), 0, NOW).expect("append");
    log.maybe_flush(NOW).expect("flush");
    assert_eq!(log.recovery_point(), 0);
    log.append(&batch(3, NOW), 0, NOW).expect("append");
    log.maybe_flush(NOW).expect("flush");
    assert_eq!(log.recovery_point(), 6);
    let mut cfg = config();
    cfg.flush_ms = 100;
    log.set_config(cfg);
    log.append(&batch(1, NOW), 0, NOW + 10).expect("append");
    log.maybe_flush(NOW + 100).expect("flush");
    assert_eq!(log.recovery_point(), 6);
    log.maybe_flush(NOW + 110).expect("flush");
    assert_eq!(log.recovery_point(), 7);
    // The log keeps its high watermark in memory: the broker checkpoints
    // it in the data directory's file (storage::high_watermarks), and a
    // flush does not write it.
    log.set_high_watermark(100);
    assert_eq!(log.high_watermark(), 7, "clamped to the log end");
    log.set_high_watermark(6);
    log.flush().expect("flush");
    drop(log);
    let log = PartitionLog::open(dir.path(), config(), NOW).expect("reopen");
    assert_eq!(log.high_watermark(), 0, "none checkpointed: the log start");
    assert_eq!(log.log_end_offset(), 7);
    assert!(!dir.path().join("high-watermark.checkpoint").exists());
}

#[test]
fn storage_delete_removes_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("topic-0");
    let mut log = PartitionLog::open(&dir, config(), NOW).expect("open");
    fill(&mut log, 10, NOW);
    log.delete().expect("delete");
    assert!(!dir.exists());
}

#[test]
fn storage_validate_batches_on_real_batches() {
    let mut b = batch(3, NOW);
    b.extend(batch(1, NOW));
    let hs = batch::validate_batches(&b, 1 << 20).expect("valid");
    assert_eq!(hs.len(), 2);
    assert!(matches!(
        batch::validate_batches(&b, 50),
        Err(StorageError::MessageTooLarge { .. })
    ));
    let one = batch(1, NOW);
    let h = BatchHeader::parse(&one).expect("parse");
    assert_eq!(h.records_count, 1);
}
