//! Log compaction (`cleanup.policy=compact`): what survives a clean, the
//! offsets and batch fields it keeps, reads across the gaps it leaves,
//! recovery from a crash at every step of the swap, and a pass running
//! beside appends (its reading and writing happen without the log).

#[path = "storage_common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use bytes::Bytes;
use common::*;
use kafka_protocol::records::Compression;
use moldau_broker::storage::batch::{self, BatchBuilder, BatchHeader};
use moldau_broker::storage::cleaner::Throttle;
use moldau_broker::storage::{checkpoint, CompactionPlan, LogConfig, PartitionLog};

const NOW: i64 = 1_700_000_000_000;
const DAY: i64 = 24 * 3600 * 1000;

fn compact_config() -> LogConfig {
    LogConfig {
        compact: true,
        delete: false,
        ..config()
    }
}

/// One batch of `(key, value)` records (key "" = none, value `None` =
/// tombstone) with timestamps from `ts`, from producer `pid` (-1: none;
/// else in epoch 2) with base sequence `seq`.
fn keyed_with(
    recs: &[(&str, Option<&str>)],
    ts: i64,
    compression: Compression,
    pid: i64,
    seq: i32,
) -> Vec<u8> {
    BatchBuilder::new()
        .compression(compression)
        .producer(pid, 2, seq)
        .records(recs.iter().enumerate().map(|(i, (k, v))| {
            (
                (!k.is_empty()).then(|| Bytes::from(k.to_string())),
                v.map(|v| Bytes::from(v.to_string())),
                ts + i as i64,
            )
        }))
        .encode()
        .expect("encode")
}

fn keyed(recs: &[(&str, Option<&str>)], ts: i64) -> Vec<u8> {
    keyed_with(recs, ts, Compression::None, -1, -1)
}

/// A record as read back: `(offset, key, value, timestamp)`.
type Rec = (i64, String, Option<String>, i64);

fn text(b: &Option<Bytes>) -> Option<String> {
    b.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())
}

/// Every batch header and record of the log, in order, read through
/// `PartitionLog::read` as a consumer would (whole batches, across gaps).
fn read_all(log: &PartitionLog) -> (Vec<BatchHeader>, Vec<Rec>) {
    let end = log.log_end_offset();
    let (mut hs, mut recs) = (Vec::new(), Vec::new());
    let mut o = log.log_start_offset();
    while o < end {
        let bytes = slice_bytes(&log.read(o, 1 << 20, end).expect("read"));
        assert!(!bytes.is_empty(), "no batch at or after {o} (end {end})");
        let mut pos = 0;
        for h in headers(&bytes) {
            batch::validate_one(&bytes[pos..pos + h.total_size()]).expect("valid batch");
            pos += h.total_size();
            hs.push(h);
        }
        for set in decode(&bytes) {
            for r in set.records {
                recs.push((
                    r.offset,
                    text(&r.key).unwrap_or_default(),
                    text(&r.value),
                    r.timestamp,
                ));
            }
        }
        o = hs.last().expect("progress").last_offset() + 1;
    }
    (hs, recs)
}

/// Latest `(offset, value)` per key in `recs`.
fn latest(recs: &[Rec]) -> BTreeMap<String, (i64, Option<String>)> {
    recs.iter()
        .map(|(o, k, v, _)| (k.clone(), (*o, v.clone())))
        .collect()
}

fn append(log: &mut PartitionLog, b: Vec<u8>) -> (i64, i64) {
    let r = log.append(&b, 0, NOW).expect("append");
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    (r.base_offset, r.last_offset)
}

/// Appends 12 rounds over 8 keys (value `r<round>-<key>`), 4 records per
/// batch, until several segments exist; returns what was written.
fn fill_rounds(log: &mut PartitionLog, rounds: usize) -> Vec<Rec> {
    let mut written = Vec::new();
    for round in 0..rounds {
        for chunk in 0..2 {
            let keys: Vec<String> = (0..4).map(|i| format!("key{}", chunk * 4 + i)).collect();
            let vals: Vec<String> = keys.iter().map(|k| format!("r{round}-{k}")).collect();
            let recs: Vec<(&str, Option<&str>)> = keys
                .iter()
                .zip(&vals)
                .map(|(k, v)| (k.as_str(), Some(v.as_str())))
                .collect();
            let ts = NOW + round as i64 * 10;
            let (base, _) = append(log, keyed(&recs, ts));
            for (i, (k, v)) in keys.iter().zip(&vals).enumerate() {
                written.push((base + i as i64, k.clone(), Some(v.clone()), ts + i as i64));
            }
        }
    }
    written
}

fn active_log_bytes(dir: &Path) -> Vec<u8> {
    let last = files_with_suffix(dir, ".log").pop().expect("a segment");
    fs::read(dir.join(last)).expect("read")
}

#[test]
fn storage_compaction_keeps_exactly_the_last_value_per_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), compact_config(), NOW).expect("open");
    let written = fill_rounds(&mut log, 12);
    assert!(log.segment_count() >= 4, "{}", log.segment_count());
    let end = log.log_end_offset();
    let active_base = *log.segment_base_offsets().last().expect("active");
    let active_before = active_log_bytes(dir.path());

    let out = log.compact(NOW).expect("compact");
    assert!(out.ran);
    assert_eq!(out.dirty_ratio, 1.0);
    assert_eq!(out.cleaned_up_to, active_base);
    assert!(out.records_removed > 0 && out.bytes_after < out.bytes_before);
    assert_eq!(log.cleaned_up_to(), Some(active_base));
    // The log end and the active segment do not change.
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(active_log_bytes(dir.path()), active_before);

    let (_, recs) = read_all(&log);
    // Each kept record is exactly what was written at that offset.
    let by_offset: BTreeMap<i64, &Rec> = written.iter().map(|r| (r.0, r)).collect();
    for r in &recs {
        assert_eq!(by_offset[&r.0], r, "record at {} changed", r.0);
    }
    // Below the cleaned offset: each key once, with its last value there.
    let cleaned: Vec<&Rec> = recs.iter().filter(|r| r.0 < active_base).collect();
    let mut expect = BTreeMap::new();
    for w in written.iter().filter(|w| w.0 < active_base) {
        expect.insert(w.1.clone(), w.clone());
    }
    let got: BTreeMap<String, Rec> = cleaned
        .iter()
        .map(|r| (r.1.clone(), (*r).clone()))
        .collect();
    assert_eq!(got.len(), cleaned.len(), "a key appears twice: {cleaned:?}");
    assert_eq!(got, expect);
    // The active segment is whole: everything written there is still read.
    let active: Vec<&Rec> = recs.iter().filter(|r| r.0 >= active_base).collect();
    let written_active: Vec<&Rec> = written.iter().filter(|w| w.0 >= active_base).collect();
    assert_eq!(active, written_active);
    // What a consumer reading everything ends with: the last value per key.
    assert_eq!(latest(&recs), latest(&written));

    // Nothing new is dirty: a second call does not run.
    let again = log.compact(NOW).expect("compact");
    assert!(!again.ran);
    assert_eq!(again.dirty_ratio, 0.0);

    // The same after a clean reopen and after a crash (re-validation with gaps).
    log.close().expect("close");
    let log = PartitionLog::open(dir.path(), compact_config(), NOW).expect("reopen");
    assert_eq!(read_all(&log).1, recs);
    assert_eq!(log.cleaned_up_to(), Some(active_base));
    drop(log);
    for f in files_with_suffix(dir.path(), "index") {
        fs::remove_file(dir.path().join(f)).expect("rm index");
    }
    fs::remove_file(dir.path().join(checkpoint::RECOVERY_POINT_FILE)).ok();
    let log = PartitionLog::open(dir.path(), compact_config(), NOW).expect("recover");
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(read_all(&log).1, recs);
}

#[test]
fn storage_compaction_only_when_configured_dirty_and_old_enough() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        compact: false,
        ..compact_config()
    };
    let mut log = PartitionLog::open(dir.path(), cfg.clone(), NOW).expect("open");
    let written = fill_rounds(&mut log, 8);
    // Not a compacted log: nothing happens.
    assert!(!log.compact(NOW).expect("compact").ran);
    // min.compaction.lag.ms: segments newer than the lag are not cleanable.
    log.set_config(LogConfig {
        compact: true,
        min_compaction_lag_ms: 1_000,
        ..cfg.clone()
    });
    let out = log.compact(NOW + 500).expect("compact");
    assert_eq!((out.ran, out.segments_cleanable), (false, 0));
    // Not above the high watermark.
    log.set_config(LogConfig {
        compact: true,
        ..cfg.clone()
    });
    let bases = log.segment_base_offsets();
    log.set_high_watermark(bases[1]);
    let out = log.compact(NOW).expect("compact");
    assert_eq!(out.segments_cleanable, 1);
    assert_eq!(out.cleaned_up_to, bases[1]);
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    // A little more dirty data: the ratio decides.
    log.set_config(LogConfig {
        compact: true,
        min_cleanable_dirty_ratio: 0.99,
        ..cfg.clone()
    });
    let out = log.compact(NOW).expect("compact");
    assert!(
        !out.ran && out.dirty_ratio > 0.0 && out.dirty_ratio < 0.99,
        "{out:?}"
    );
    log.set_config(LogConfig {
        compact: true,
        min_cleanable_dirty_ratio: 0.0,
        ..cfg
    });
    let out = log.compact(NOW).expect("compact");
    assert!(out.ran);
    assert_eq!(latest(&read_all(&log).1), latest(&written));
}

#[test]
fn storage_compaction_max_compaction_lag_cleans_below_the_dirty_ratio() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        min_cleanable_dirty_ratio: 0.99,
        max_compaction_lag_ms: 5_000,
        ..compact_config()
    };
    let mut log = PartitionLog::open(dir.path(), cfg.clone(), NOW).expect("open");
    fill_rounds(&mut log, 8);
    // Nothing cleaned yet: the ratio is 1 and a pass runs.
    assert!(log.compact(NOW).expect("compact").ran);
    // A few rounds more: dirty, but well below the ratio.
    let mut written = read_all(&log).1;
    written.extend(fill_rounds(&mut log, 3));
    let out = log.compact(NOW + 1_000).expect("compact");
    assert!(
        !out.ran && out.dirty_ratio > 0.0 && out.dirty_ratio < 0.99,
        "{out:?}"
    );
    assert_eq!(out.compaction_delay_ms, 0);
    // min.compaction.lag.ms still protects records younger than it, even
    // past the max lag.
    log.set_config(LogConfig {
        min_compaction_lag_ms: 60_000,
        ..cfg.clone()
    });
    let out = log.compact(NOW + 10_000).expect("compact");
    assert_eq!((out.ran, out.segments_cleanable), (false, 0), "{out:?}");
    // Without it, the oldest dirty record is past the max lag: a pass runs
    // whatever the ratio.
    log.set_config(cfg.clone());
    let out = log.compact(NOW + 10_000).expect("compact");
    assert!(out.ran && out.records_removed > 0, "{out:?}");
    assert!(out.compaction_delay_ms > 0, "{out:?}");
    assert_eq!(latest(&read_all(&log).1), latest(&written));
    // Everything cleanable is clean now: no further pass.
    let out = log.compact(NOW + 20_000).expect("compact");
    assert!(!out.ran, "{out:?}");
    // The default (Long.MAX_VALUE) never forces a pass.
    fill_rounds(&mut log, 3);
    log.set_config(LogConfig {
        max_compaction_lag_ms: i64::MAX,
        ..cfg
    });
    let out = log.compact(NOW + 30 * DAY).expect("compact");
    assert!(!out.ran, "{out:?}");
}

#[test]
fn storage_compaction_max_compaction_lag_rolls_the_active_segment() {
    // As Kafka's LogConfig.maxSegmentMs: in a compacted log the active
    // segment rolls by age at min(segment.ms, max.compaction.lag.ms).
    let big = LogConfig {
        segment_bytes: 1 << 20,
        max_compaction_lag_ms: 5_000,
        ..compact_config()
    };
    for (cfg, rolls) in [
        (big.clone(), true),
        (
            LogConfig {
                compact: false,
                delete: true,
                ..big.clone()
            },
            false,
        ),
        (
            LogConfig {
                max_compaction_lag_ms: i64::MAX,
                ..big.clone()
            },
            false,
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = PartitionLog::open(dir.path(), cfg.clone(), NOW).expect("open");
        let b = keyed(&[("k", Some("v1"))], NOW);
        log.append(&b, 0, NOW).expect("append");
        let b = keyed(&[("k", Some("v2"))], NOW);
        log.append(&b, 0, NOW + 4_000).expect("append");
        assert_eq!(log.segment_base_offsets().len(), 1);
        let b = keyed(&[("k", Some("v3"))], NOW);
        log.append(&b, 0, NOW + 6_000).expect("append");
        let bases = log.segment_base_offsets();
        assert_eq!(bases.len(), if rolls { 2 } else { 1 }, "{cfg:?}");
        if rolls {
            // The rolled segment is cleanable, and past the max lag.
            log.set_high_watermark(log.log_end_offset());
            let out = log.compact(NOW + 6_000).expect("compact");
            assert!(out.ran && out.records_removed == 1, "{out:?}");
        }
    }
}

#[test]
fn storage_compaction_tombstones_kept_until_delete_retention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        delete_retention_ms: DAY,
        ..compact_config()
    };
    let mut log = PartitionLog::open(dir.path(), cfg, NOW).expect("open");
    append(
        &mut log,
        keyed(&[("gone", Some("v1")), ("kept", Some("k1"))], NOW),
    );
    append(&mut log, keyed(&[("gone", Some("v2"))], NOW));
    let (tomb, _) = append(&mut log, keyed(&[("gone", None)], NOW + 5));
    // Filler so that the tombstone's segment is not the active one.
    fill_rounds(&mut log, 6);
    let out = log.compact(NOW + 10).expect("compact");
    assert!(out.ran);
    assert_eq!(out.tombstones_removed, 0);
    let recs = read_all(&log).1;
    let gone: Vec<&Rec> = recs.iter().filter(|r| r.1 == "gone").collect();
    assert_eq!(gone, vec![&(tomb, "gone".to_string(), None, NOW + 5)]);
    assert!(recs.iter().any(|r| r.1 == "kept"));

    // Still there just before delete.retention.ms has passed (the clean
    // runs because a tombstone was kept, not because of dirty bytes).
    let out = log.compact(NOW + 5 + DAY).expect("compact");
    assert_eq!(out.tombstones_removed, 0);
    assert!(read_all(&log).1.iter().any(|r| r.1 == "gone"));
    // Then removed, with nothing dirty to trigger a clean (also after a
    // restart: the time it is due is checkpointed).
    log.close().expect("close");
    let cfg = LogConfig {
        delete_retention_ms: DAY,
        ..compact_config()
    };
    let mut log = PartitionLog::open(dir.path(), cfg, NOW).expect("reopen");
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    assert!(!log.compact(NOW + 5 + DAY).expect("compact").ran);
    let out = log.compact(NOW + 6 + DAY).expect("compact");
    assert!(out.ran);
    assert_eq!(out.tombstones_removed, 1);
    let recs = read_all(&log).1;
    assert!(recs.iter().all(|r| r.1 != "gone"), "{recs:?}");
    assert!(recs.iter().any(|r| r.1 == "kept"));
    assert!(!log.compact(NOW + 2 * DAY).expect("compact").ran);
}

#[test]
fn storage_compaction_reads_across_gaps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), compact_config(), NOW).expect("open");
    let written = fill_rounds(&mut log, 12);
    let before = log.segment_count();
    let end = log.log_end_offset();
    let out = log.compact(NOW).expect("compact");
    // Whole segments of superseded values disappear (not the first).
    assert!(out.segments_deleted > 0, "{out:?}");
    assert_eq!(log.segment_count(), before - out.segments_deleted);
    let (_, recs) = read_all(&log);
    let kept: Vec<i64> = recs.iter().map(|r| r.0).collect();
    // A fetch from any offset, kept or compacted away, returns whole
    // batches starting with the first kept record at or after it.
    for w in &written {
        let o = w.0;
        let bytes = slice_bytes(&log.read(o, 1, end).expect("read"));
        let next = kept
            .iter()
            .copied()
            .find(|&k| k >= o)
            .expect("active part is kept");
        let first = decode(&bytes)
            .into_iter()
            .flat_map(|s| s.records)
            .map(|r| r.offset)
            .find(|&x| x >= o)
            .expect("a record at or after the fetch offset");
        assert_eq!(first, next, "fetch at {o}");
        let h = &headers(&bytes)[0];
        assert!(h.last_offset() >= o);
    }
    // Timestamp lookups still land on kept records.
    let (o, _) = log.offset_for_timestamp(0).expect("lookup").expect("some");
    assert_eq!(o, kept[0]);
    assert_eq!(
        log.max_timestamp().map(|(_, o)| kept.contains(&o)),
        Some(true)
    );
}

#[test]
fn storage_compaction_compressed_batches_and_batch_fields() {
    for compression in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = PartitionLog::open(dir.path(), compact_config(), NOW).expect("open");
        // Producer 7: a batch whose first and last records get superseded.
        let first = keyed_with(
            &[
                ("a", Some("a1")),
                ("b", Some("b1")),
                ("c", Some("c1")),
                ("d", Some("d1")),
            ],
            NOW,
            compression,
            7,
            100,
        );
        let (b0, l0) = append(&mut log, first);
        // Producer 9: its only batch is wholly superseded later.
        let (b9, l9) = append(
            &mut log,
            keyed_with(&[("e", Some("e1"))], NOW, compression, 9, 5),
        );
        append(
            &mut log,
            keyed_with(
                &[
                    ("a", Some("a2")),
                    ("d", Some("d2")),
                    ("e", Some("e2")),
                    ("", Some("nokey")),
                ],
                NOW + 1,
                compression,
                -1,
                -1,
            ),
        );
        fill_rounds(&mut log, 6);
        let out = log.compact(NOW).expect("compact");
        assert!(out.ran);
        let (hs, recs) = read_all(&log);
        // The rewritten batch of producer 7: b and c kept at their offsets,
        // same codec and producer fields, sequences of the kept records and
        // the original last offset (so the producer's last sequence).
        let h = hs.iter().find(|h| h.producer_id == 7).expect("batch of 7");
        assert_eq!(h.compression(), compression as u8);
        assert_eq!((h.base_offset, h.last_offset()), (b0 + 1, l0));
        assert_eq!((h.producer_epoch, h.base_sequence), (2, 101));
        assert_eq!(h.records_count, 2);
        let got: Vec<(i64, String)> = recs
            .iter()
            .filter(|r| r.0 <= l0)
            .map(|r| (r.0, r.2.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            got,
            vec![(b0 + 1, "b1".to_string()), (b0 + 2, "c1".to_string())]
        );
        let ts: Vec<i64> = recs.iter().filter(|r| r.0 <= l0).map(|r| r.3).collect();
        assert_eq!(ts, vec![NOW + 1, NOW + 2]);
        // Producer 9 keeps a header-only batch (its state survives).
        let h9 = hs.iter().find(|h| h.producer_id == 9).expect("batch of 9");
        assert_eq!(
            (h9.base_offset, h9.last_offset(), h9.records_count),
            (b9, l9, 0)
        );
        assert_eq!((h9.producer_epoch, h9.base_sequence), (2, 5));
        // The keyless record is dropped; the others survive.
        assert!(recs.iter().all(|r| r.2.as_deref() != Some("nokey")));
        for v in ["a2", "d2", "e2"] {
            assert!(recs.iter().any(|r| r.2.as_deref() == Some(v)), "{v}");
        }
    }
}

#[test]
fn storage_compaction_log_append_time_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        log_append_time: true,
        ..compact_config()
    };
    let mut log = PartitionLog::open(dir.path(), cfg, NOW).expect("open");
    let b = keyed(&[("x", Some("x1")), ("y", Some("y1"))], 5);
    log.append(&b, 0, NOW + 100).expect("append");
    let b = keyed(&[("x", Some("x2"))], 5);
    log.append(&b, 0, NOW + 200).expect("append");
    fill_rounds(&mut log, 6);
    let end = log.log_end_offset();
    log.set_high_watermark(end);
    assert!(log.compact(NOW).expect("compact").ran);
    let (hs, recs) = read_all(&log);
    assert_eq!(recs[0].0, 1);
    assert_eq!(recs[0].2.as_deref(), Some("y1"));
    assert!(hs[0].is_log_append_time());
    assert_eq!(hs[0].max_timestamp, NOW + 100);
    assert_eq!(
        log.offset_for_timestamp(NOW + 50).expect("lookup"),
        Some((1, NOW + 100))
    );
}

#[test]
fn storage_compaction_compact_delete_applies_retention() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        retention_ms: 1_000,
        ..compact_config()
    };
    // compact only: retention does not delete.
    let mut log = PartitionLog::open(dir.path(), cfg.clone(), NOW).expect("open");
    fill_rounds(&mut log, 8);
    let end = log.log_end_offset();
    let out = log.enforce_retention(NOW + 10 * DAY).expect("retention");
    assert_eq!(out.segments_deleted, 0);
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(read_all(&log).1.len() as i64, end);
    // compact,delete: both apply.
    log.set_config(LogConfig {
        delete: true,
        ..cfg
    });
    assert!(log.compact(NOW).expect("compact").ran);
    let out = log.enforce_retention(NOW + 10 * DAY).expect("retention");
    assert!(out.segments_deleted > 0);
    assert_eq!(log.log_start_offset(), log.log_end_offset());
}

/// Files of one partition directory.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry"))
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = fs::read(e.path()).expect("read");
            (name, bytes)
        })
        .collect()
}

fn restore(dir: &Path, files: &BTreeMap<String, Vec<u8>>) {
    if dir.exists() {
        fs::remove_dir_all(dir).expect("clear");
    }
    fs::create_dir_all(dir).expect("mkdir");
    for (name, bytes) in files {
        let path = dir.join(name);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, bytes).expect("write");
    }
}

#[test]
fn storage_compaction_crash_at_every_step_of_the_swap() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let orig = tmp.path().join("orig");
    let mut log = PartitionLog::open(&orig, compact_config(), NOW).expect("open");
    let written = fill_rounds(&mut log, 12);
    // A tombstone whose older values are in earlier segments, then filler.
    append(&mut log, keyed(&[("key3", None)], NOW + 500));
    let mut written = written;
    written.push((log.log_end_offset() - 1, "key3".into(), None, NOW + 500));
    fill_rounds(&mut log, 3)
        .into_iter()
        .for_each(|w| written.push(w));
    let end = log.log_end_offset();
    drop(log); // crash, no clean shutdown
    let before = snapshot(&orig);

    // The finished result, to take the cleaned segment bytes from.
    let done_dir = tmp.path().join("done");
    restore(&done_dir, &before);
    let mut done = PartitionLog::open(&done_dir, compact_config(), NOW).expect("open");
    done.set_high_watermark(end);
    let out = done.compact(NOW).expect("compact");
    assert!(out.ran && out.segments_rewritten >= 2, "{out:?}");
    let cleaned_to = out.cleaned_up_to;
    let expected_after = read_all(&done).1;
    drop(done);
    let after = snapshot(&done_dir);
    let want = latest(&written);
    // Segments the clean changed, oldest first: (base name, new bytes or
    // None when the segment was removed).
    let changed: Vec<(String, Option<Vec<u8>>)> = before
        .iter()
        .filter(|(n, _)| n.ends_with(".log"))
        .filter(|(n, b)| after.get(*n) != Some(*b))
        .map(|(n, _)| (n.clone(), after.get(n).cloned()))
        .collect();
    assert!(changed.len() >= 2);

    let check = |state: &BTreeMap<String, Vec<u8>>, what: &str| {
        let dir = tmp.path().join("crash");
        restore(&dir, state);
        let log = PartitionLog::open(&dir, compact_config(), NOW).expect(what);
        assert_eq!(log.log_end_offset(), end, "{what}");
        let (_, recs) = read_all(&log);
        assert_eq!(latest(&recs), want, "{what}: latest values");
        let names = files_with_suffix(&dir, "");
        assert!(
            names
                .iter()
                .all(|n| !n.ends_with(".cleaned") && !n.ends_with(".swap")),
            "{what}: {names:?}"
        );
        assert!(
            !dir.join("cleaner-staging").exists(),
            "{what}: staging left"
        );
        assert!(
            !dir.join("cleaner-commit").exists(),
            "{what}: commit directory left"
        );
        recs
    };
    let checkpoint_file = |state: &mut BTreeMap<String, Vec<u8>>| {
        state.insert(
            checkpoint::CLEANER_OFFSET_FILE.to_string(),
            format!("moldau-checkpoint 1 {cleaned_to}\n").into_bytes(),
        );
    };
    let index_names = |log_name: &str| {
        let stem = log_name.trim_end_matches(".log").to_string();
        [format!("{stem}.index"), format!("{stem}.timeindex")]
    };

    // Copies and their indexes are prepared in `cleaner-staging/`
    // (without the partition's lock). This version then commits the whole
    // pass (staging renamed `cleaner-commit/`) and installs from there;
    // the previous one installed oldest first: copy → `<base>.log.swap`
    // (commit point), its indexes renamed over the segment's, `.swap` →
    // `.log`.
    let prepared_index = |name: &str| -> Vec<(String, Option<Vec<u8>>)> {
        index_names(name)
            .into_iter()
            .map(|idx| {
                let bytes = after.get(&idx).cloned();
                (idx, bytes)
            })
            .collect()
    };
    let stage = |s: &mut BTreeMap<String, Vec<u8>>, name: &str, bytes: Vec<u8>, indexes: bool| {
        s.insert(format!("cleaner-staging/{name}"), bytes);
        if indexes {
            for (idx, b) in prepared_index(name) {
                if let Some(b) = b {
                    s.insert(format!("cleaner-staging/{idx}"), b);
                }
            }
        }
    };
    let installed = |s: &mut BTreeMap<String, Vec<u8>>, name: &str, bytes: Vec<u8>| {
        s.insert(name.to_string(), bytes);
        for (idx, b) in prepared_index(name) {
            match b {
                Some(b) => s.insert(idx, b),
                None => s.remove(&idx),
            };
        }
    };
    // A. Crash while preparing: copies staged (the last torn, without its
    // indexes yet), no checkpoint.
    let mut s = before.clone();
    for (i, (name, new)) in changed.iter().enumerate() {
        let mut bytes = new.clone().unwrap_or_default();
        let last = i == changed.len() - 1;
        if last {
            bytes.truncate(bytes.len() / 2);
        }
        stage(&mut s, name, bytes, !last);
    }
    assert_eq!(
        check(&s, "staged").len(),
        written.len(),
        "nothing committed, nothing lost"
    );
    // B. Staged and the cleaner checkpoint written.
    checkpoint_file(&mut s);
    assert_eq!(check(&s, "staged, checkpoint written").len(), written.len());
    // D. This version: the copies and the cleaner checkpoint staged
    // together, committed (staging renamed `cleaner-commit/`), then a
    // crash with any subset of the installs' renames done (they are
    // fsynced once, after the last): here, for every j, segments before j
    // installed, j with only its indexes or only its log moved, the rest
    // still in the commit directory, the checkpoint moved or not. Every
    // state recovers to the cleaned log.
    let mut committed = before.clone();
    let mut in_dir = BTreeMap::new();
    checkpoint_file(&mut in_dir);
    for (name, bytes) in in_dir {
        committed.insert(format!("cleaner-commit/{name}"), bytes);
    }
    for (name, new) in &changed {
        let bytes = new.clone().unwrap_or_default();
        committed.insert(format!("cleaner-commit/{name}"), bytes);
        for (idx, b) in prepared_index(name) {
            if let Some(b) = b {
                committed.insert(format!("cleaner-commit/{idx}"), b);
            }
        }
    }
    assert_eq!(check(&committed, "committed"), expected_after);
    let move_index = |s: &mut BTreeMap<String, Vec<u8>>, name: &str| {
        for (idx, b) in prepared_index(name) {
            s.remove(&format!("cleaner-commit/{idx}"));
            match b {
                Some(b) => s.insert(idx, b),
                None => s.remove(&idx),
            };
        }
    };
    let move_log = |s: &mut BTreeMap<String, Vec<u8>>, name: &str| {
        let bytes = s.remove(&format!("cleaner-commit/{name}")).expect("copy");
        s.insert(name.to_string(), bytes);
    };
    for j in 0..changed.len() {
        let mut s = committed.clone();
        if j % 2 == 1 {
            let name = checkpoint::CLEANER_OFFSET_FILE;
            let bytes = s.remove(&format!("cleaner-commit/{name}")).expect("staged");
            s.insert(name.to_string(), bytes);
        }
        for (name, _) in &changed[..j] {
            move_index(&mut s, name);
            move_log(&mut s, name);
        }
        let name = &changed[j].0;
        let mut only_index = s.clone();
        move_index(&mut only_index, name);
        assert_eq!(
            check(&only_index, &format!("installing {j}: indexes moved")),
            expected_after
        );
        let mut only_log = s.clone();
        move_log(&mut only_log, name);
        assert_eq!(
            check(
                &only_log,
                &format!("installing {j}: log moved, indexes not")
            ),
            expected_after
        );
    }
    // C. The previous version: installed one by one, oldest first, with a
    // crash at every rename of segment j's installation.
    for j in 0..changed.len() {
        let mut s = before.clone();
        checkpoint_file(&mut s);
        for (i, (name, new)) in changed.iter().enumerate() {
            let bytes = new.clone().unwrap_or_default();
            if i < j {
                installed(&mut s, name, bytes);
            } else if i == j {
                s.insert(format!("{name}.swap"), bytes);
                for (idx, b) in prepared_index(name) {
                    if let Some(b) = b {
                        s.insert(format!("cleaner-staging/{idx}"), b);
                    }
                }
            } else {
                stage(&mut s, name, bytes, true);
            }
        }
        check(&s, &format!("installing {j}: committed"));
        // j's prepared indexes renamed over the segment's
        let name = &changed[j].0;
        for (idx, b) in prepared_index(name) {
            s.remove(&format!("cleaner-staging/{idx}"));
            match b {
                Some(b) => s.insert(idx, b),
                None => s.remove(&idx),
            };
        }
        check(&s, &format!("installing {j}: indexes in place"));
        let bytes = s.remove(&format!("{name}.swap")).expect("swap");
        s.insert(name.clone(), bytes);
        check(&s, &format!("installing {j}: done"));
    }

    // Copies left by an earlier version, which wrote them as `.cleaned`
    // beside the segments and removed the indexes on swap:
    // 1. Crash while writing the copies: some `.cleaned` (one torn), no checkpoint.
    let mut s = before.clone();
    for (i, (name, new)) in changed.iter().enumerate() {
        let mut bytes = new.clone().unwrap_or_default();
        if i == changed.len() - 1 {
            bytes.truncate(bytes.len() / 2);
        }
        s.insert(format!("{name}.cleaned"), bytes);
    }
    let recs = check(&s, "copies written");
    assert_eq!(recs.len(), written.len(), "nothing committed, nothing lost");
    // 2. Copies written and the cleaner checkpoint too.
    checkpoint_file(&mut s);
    assert_eq!(check(&s, "checkpoint written").len(), written.len());
    // 3. Committed one by one, oldest first: `.swap` for the first j,
    // `.cleaned` for the rest; with the swap of segment j half finished
    // (indexes removed, then also one renamed back) or fully finished.
    for j in 0..changed.len() {
        let mut s = before.clone();
        checkpoint_file(&mut s);
        for (i, (name, new)) in changed.iter().enumerate() {
            let bytes = new.clone().unwrap_or_default();
            if i < j {
                // Fully swapped earlier segments.
                s.insert(name.clone(), bytes);
                for idx in index_names(name) {
                    s.remove(&idx);
                }
            } else if i == j {
                s.insert(format!("{name}.swap"), bytes);
            } else {
                s.insert(format!("{name}.cleaned"), bytes);
            }
        }
        check(&s, &format!("committed up to {j}"));
        // Swap of j finishing: its indexes already removed.
        let name = &changed[j].0;
        for idx in index_names(name) {
            s.remove(&idx);
        }
        check(&s, &format!("finishing {j}"));
        // Swap of j done (log renamed), the rest not committed.
        let bytes = s.remove(&format!("{name}.swap")).expect("swap");
        s.insert(name.clone(), bytes);
        check(&s, &format!("finished {j}"));
    }
    // 4. All swapped (empty segments not yet removed): the final state.
    let mut s = before.clone();
    checkpoint_file(&mut s);
    for (name, new) in &changed {
        s.insert(name.clone(), new.clone().unwrap_or_default());
        for idx in index_names(name) {
            s.remove(&idx);
        }
    }
    assert_eq!(check(&s, "all swapped"), expected_after);

    // Strictness is kept where appends happen: a torn tail of the active
    // segment of the compacted log is still cut.
    let dir = tmp.path().join("torn");
    restore(&dir, &after);
    let last = files_with_suffix(&dir, ".log").pop().expect("active");
    let path = dir.join(&last);
    let len = fs::metadata(&path).expect("stat").len();
    let f = fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    f.set_len(len - 3).expect("truncate");
    drop(f);
    let log = PartitionLog::open(&dir, compact_config(), NOW).expect("recover");
    assert!(log.log_end_offset() < end);
    assert!(log
        .cleaned_up_to()
        .is_some_and(|c| c <= log.log_end_offset()));
}

#[test]
fn storage_compaction_keeps_batches_it_cannot_decode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), compact_config(), NOW).expect("open");
    // A batch with a valid header and CRC whose records are garbage.
    let mut bad = keyed(&[("a", Some("a1")), ("b", Some("b1"))], NOW);
    let header_len = 61;
    for (i, b) in bad.iter_mut().enumerate().skip(header_len) {
        *b = (i * 37) as u8;
    }
    let crc = batch::compute_crc(&bad);
    bad[17..21].copy_from_slice(&crc.to_be_bytes());
    batch::validate_one(&bad).expect("CRC valid");
    assert!(batch::decode_records(&bad).is_err());
    let hs = batch::validate_batches(&bad, 1 << 20).expect("structure and CRC are fine");
    assert!(batch::validate_records(&bad, &hs, true).is_err());
    let (b0, l0) = append(&mut log, bad.clone());
    append(
        &mut log,
        keyed(&[("a", Some("a2")), ("b", Some("b2"))], NOW),
    );
    fill_rounds(&mut log, 6);
    let out = log.compact(NOW).expect("compact");
    assert!(out.ran);
    // The undecodable batch is still there, byte for byte (but its offsets).
    let bytes = slice_bytes(&log.read(b0, 1, l0 + 1).expect("read"));
    assert_eq!(&bytes[header_len..], &bad[header_len..]);
    assert_eq!(headers(&bytes)[0].base_offset, b0);
}

/// A pass reads and writes without the log: between its plan and its
/// finish the log takes appends (rolling new segments) and serves reads,
/// and the finished log has the cleaned range plus every record appended
/// meanwhile, at its offset.
#[test]
fn storage_compaction_pass_runs_while_the_log_takes_appends() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(tmp.path(), compact_config(), NOW).expect("open");
    let mut written = fill_rounds(&mut log, 12);
    let segments_before = files_with_suffix(tmp.path(), ".log").len();

    let CompactionPlan::Pass(mut pass) = log.plan_compaction(NOW).expect("plan") else {
        panic!("a pass is due");
    };
    assert!(tmp.path().join("cleaner-staging").is_dir());
    // The log goes on: appends that roll new segments, and reads.
    let during = fill_rounds(&mut log, 6);
    assert!(files_with_suffix(tmp.path(), ".log").len() > segments_before);
    written.extend(during.iter().cloned());
    let (_, recs) = read_all(&log);
    assert_eq!(
        recs.len(),
        written.len(),
        "reads during the pass see everything"
    );

    pass.run(&Throttle::unlimited()).expect("run");
    // still nothing swapped: the live log is untouched until the finish
    assert_eq!(read_all(&log).1.len(), written.len());
    let out = log.finish_compaction(pass, Ok(())).expect("finish");
    assert!(
        out.ran && !out.abandoned && out.segments_rewritten > 0,
        "{out:?}"
    );
    assert!(out.records_removed > 0);
    assert!(!tmp.path().join("cleaner-staging").exists());

    let (_, recs) = read_all(&log);
    assert_eq!(latest(&recs), latest(&written), "latest value of every key");
    // every record appended during the pass is there, unchanged
    for rec in &during {
        assert!(
            recs.contains(rec),
            "{rec:?} appended during the pass is gone"
        );
    }
    // below the cleaned offset each key once
    let cleaned: Vec<&Rec> = recs.iter().filter(|r| r.0 < out.cleaned_up_to).collect();
    let keys: std::collections::BTreeSet<&String> = cleaned.iter().map(|r| &r.1).collect();
    assert_eq!(
        keys.len(),
        cleaned.len(),
        "a key twice below the cleaned offset"
    );

    // and it survives a clean restart as it is
    let end = log.log_end_offset();
    log.close().expect("close");
    let log = PartitionLog::open(tmp.path(), compact_config(), NOW).expect("reopen");
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(read_all(&log).1, recs);
}

/// With removal deferred (as the broker runs its logs), the finish of a
/// pass neither closes the files it replaced nor removes the segments it
/// emptied: both wait in `take_retired()` for the caller to drop after
/// releasing the partition's lock.
#[test]
fn storage_compaction_deferred_removal() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(tmp.path(), compact_config(), NOW).expect("open");
    log.defer_file_removal();
    let written = fill_rounds(&mut log, 12);
    let CompactionPlan::Pass(mut pass) = log.plan_compaction(NOW).expect("plan") else {
        panic!("a pass is due");
    };
    pass.run(&Throttle::unlimited()).expect("run");
    let out = log.finish_compaction(pass, Ok(())).expect("finish");
    assert!(out.segments_rewritten > 0, "{out:?}");
    assert!(!tmp.path().join("cleaner-commit").exists());
    let emptied = files_with_suffix(tmp.path(), ".log.deleted").len();
    assert_eq!(emptied, out.segments_deleted);
    let retired = log.take_retired();
    assert!(!retired.is_empty(), "the replaced files at least");
    drop(retired);
    assert!(files_with_suffix(tmp.path(), ".deleted").is_empty());
    assert_eq!(latest(&read_all(&log).1), latest(&written));
}

/// A pass whose segments changed while it ran (retention, truncation) is
/// not swapped in: the log keeps what it has, the staging directory goes,
/// and the next pass starts over.
#[test]
fn storage_compaction_pass_is_abandoned_when_the_log_changed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(tmp.path(), compact_config(), NOW).expect("open");
    fill_rounds(&mut log, 12);

    // the first segment goes (DeleteRecords past it, then retention)
    let CompactionPlan::Pass(mut pass) = log.plan_compaction(NOW).expect("plan") else {
        panic!("a pass is due");
    };
    pass.run(&Throttle::unlimited()).expect("run");
    let second = {
        let bases = files_with_suffix(tmp.path(), ".log");
        bases[1]
            .trim_end_matches(".log")
            .parse::<i64>()
            .expect("base")
    };
    log.delete_records_before(second).expect("delete records");
    log.enforce_retention(NOW).expect("retention");
    let before = read_all(&log).1;
    let out = log.finish_compaction(pass, Ok(())).expect("finish");
    assert!(out.abandoned && !out.ran, "{out:?}");
    assert_eq!(read_all(&log).1, before, "nothing swapped");
    assert!(!tmp.path().join("cleaner-staging").exists());
    // the next pass cleans
    let out = log.compact(NOW).expect("compact");
    assert!(out.ran && out.records_removed > 0, "{out:?}");

    // a follower's truncation to a new start under a running pass
    fill_rounds(&mut log, 12);
    let CompactionPlan::Pass(mut pass) = log.plan_compaction(NOW).expect("plan") else {
        panic!("a pass is due");
    };
    let end = log.log_end_offset();
    log.truncate_fully_and_start_at(end).expect("truncate");
    // the pass may fail reading (its segments are gone) or finish: either
    // way nothing is swapped
    let ran = pass.run(&Throttle::unlimited());
    match log.finish_compaction(pass, ran) {
        Ok(out) => assert!(out.abandoned, "{out:?}"),
        Err(e) => eprintln!("the pass failed as its segments went: {e}"),
    }
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (end, end));
    assert!(!tmp.path().join("cleaner-staging").exists());

    // a later plan supersedes an earlier one that never finished
    fill_rounds(&mut log, 12);
    let CompactionPlan::Pass(first) = log.plan_compaction(NOW).expect("plan") else {
        panic!("a pass is due");
    };
    let out = log.compact(NOW).expect("compact");
    assert!(out.ran);
    let stale = log.finish_compaction(first, Ok(())).expect("finish");
    assert!(stale.abandoned, "{stale:?}");
}
