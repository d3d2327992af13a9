//! Recovery of `PartitionLog` after unclean stops: torn and corrupt tails,
//! corrupt or missing indexes, leftovers of interrupted operations.

#[path = "storage_common/mod.rs"]
mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::*;
use moldau_broker::storage::batch;
use moldau_broker::storage::{LogConfig, PartitionLog, StorageError};

const NOW: i64 = 1_700_000_000_000;

/// `(base, last, first timestamp)` of each appended batch.
type Ranges = Vec<(i64, i64, i64)>;

fn build(dir: &Path, batches: usize, flush_after: Option<usize>) -> Ranges {
    let mut log = PartitionLog::open(dir, config(), NOW).expect("open");
    let mut ranges = Vec::new();
    for i in 0..batches {
        let ts = 1_000 * i as i64;
        let b = batch(1 + i % 3, ts);
        let r = log.append(&b, 1, NOW).expect("append");
        ranges.push((r.base_offset, r.last_offset, ts));
        if Some(i) == flush_after {
            log.flush().expect("flush");
        }
    }
    assert!(log.segment_count() >= 3);
    drop(log); // crash: no close, no clean-shutdown marker
    ranges
}

fn last_log_file(dir: &Path) -> std::path::PathBuf {
    dir.join(files_with_suffix(dir, ".log").pop().expect("a segment"))
}

/// Checks that the log holds exactly the batches of `ranges` (whole,
/// valid, in order) and nothing else.
fn assert_holds_exactly(log: &PartitionLog, ranges: &[(i64, i64, i64)]) {
    let end = ranges.last().map_or(0, |r| r.1 + 1);
    assert_eq!(log.log_end_offset(), end);
    let mut seen = Vec::new();
    let mut o = log.log_start_offset();
    while o < end {
        let s = log.read(o, 1 << 20, end).expect("read");
        let bytes = slice_bytes(&s);
        let mut pos = 0;
        for h in headers(&bytes) {
            batch::validate_one(&bytes[pos..pos + h.total_size()]).expect("served bytes are valid");
            pos += h.total_size();
            seen.push((h.base_offset, h.last_offset(), h.base_timestamp));
        }
        o = seen.last().expect("progress").1 + 1;
    }
    assert_eq!(seen, ranges);
    assert!(log.read(end, 100, i64::MAX).expect("read").is_empty());
}

fn truncate_file(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open")
        .set_len(len)
        .expect("truncate");
}

fn xor_byte(path: &Path, pos: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, pos).expect("read");
    b[0] ^= 0xff;
    f.write_all_at(&b, pos).expect("write");
}

/// Opens the damaged copy, checks it kept exactly `expect`, and that appends
/// continue right after it.
fn check_recovered(work: &Path, expect: &[(i64, i64, i64)]) {
    let mut log = PartitionLog::open(work, config(), NOW).expect("recover");
    assert_holds_exactly(&log, expect);
    let end = log.log_end_offset();
    let r = log
        .append(&batch(2, 99_999), 1, NOW)
        .expect("append after recovery");
    assert_eq!(r.base_offset, end);
    assert_eq!(log.log_end_offset(), end + 2);
    drop(log);
    // And the result is itself recoverable.
    let log = PartitionLog::open(work, config(), NOW).expect("reopen");
    assert_eq!(log.log_end_offset(), end + 2);
}

#[test]
fn storage_recovery_truncates_torn_last_batch_at_every_byte() {
    // Some(27): the recovery point lies in the last segment, whose part
    // before it is then trusted and only what follows re-validated.
    for flush_after in [None, Some(5), Some(27)] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (orig, work) = (tmp.path().join("orig"), tmp.path().join("work"));
        let ranges = build(&orig, 30, flush_after);
        let file = last_log_file(&orig);
        let name = file.file_name().expect("name").to_owned();
        let size = fs::metadata(&file).expect("meta").len();
        let last_size = {
            let log = PartitionLog::open(&orig, config(), NOW).expect("open");
            let (b, _, _) = *ranges.last().expect("last");
            let s = log.read(b, 1, i64::MAX).expect("read");
            assert_eq!(s.position + s.len, size);
            s.len
        };
        // `PartitionLog::open` above recovered `orig` itself; rebuild a fresh crash image.
        let _ = fs::remove_dir_all(&orig);
        let ranges2 = build(&orig, 30, flush_after);
        assert_eq!(ranges, ranges2);
        let keep = &ranges[..ranges.len() - 1];
        for cut in size - last_size..size {
            copy_dir(&orig, &work);
            truncate_file(&work.join(&name), cut);
            check_recovered(&work, keep);
        }
        // Every byte of the final batch flipped, except the leader epoch (not
        // covered by anything, by the format's design).
        for i in 0..last_size {
            if (12..16).contains(&i) {
                continue;
            }
            copy_dir(&orig, &work);
            xor_byte(&work.join(&name), size - last_size + i);
            let log = PartitionLog::open(&work, config(), NOW).expect("recover");
            assert_holds_exactly(&log, keep);
        }
        // Zeros after the last batch (a file extended by the crash).
        copy_dir(&orig, &work);
        truncate_file(&work.join(&name), size + 4096);
        check_recovered(&work, &ranges);
    }
}

#[test]
fn storage_recovery_corrupt_middle_batch_drops_the_rest() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (orig, work) = (tmp.path().join("orig"), tmp.path().join("work"));
    let ranges = build(&orig, 30, None);
    let first = orig.join(files_with_suffix(&orig, ".log")[0].clone());
    let first_name = first.file_name().expect("name").to_owned();
    // Positions of the batches of the first segment.
    let bytes = fs::read(&first).expect("read");
    let hs = headers(&bytes);
    assert!(hs.len() >= 3);
    let third_pos: u64 = hs[..2].iter().map(|h| h.total_size() as u64).sum();
    // A CRC-covered byte of the third batch of the first segment: the log
    // keeps the first two batches only and later segments are dropped.
    copy_dir(&orig, &work);
    xor_byte(&work.join(&first_name), third_pos + 40);
    check_recovered(&work, &ranges[..2]);
    assert_eq!(
        files_with_suffix(&work, ".log").len(),
        1,
        "{:?}",
        files_with_suffix(&work, "")
    );
    // The CRC field itself.
    copy_dir(&orig, &work);
    xor_byte(&work.join(&first_name), third_pos + 18);
    check_recovered(&work, &ranges[..2]);
    // A torn first batch leaves an empty log that continues at offset 0.
    copy_dir(&orig, &work);
    truncate_file(&work.join(&first_name), 30);
    check_recovered(&work, &[]);
}

#[test]
fn storage_recovery_after_flush_keeps_everything() {
    // After a flush, segments wholly below the recovery point are trusted
    // (their indexes are still checked); the active one is re-validated.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (orig, work) = (tmp.path().join("orig"), tmp.path().join("work"));
    let ranges = build(&orig, 30, Some(29));
    copy_dir(&orig, &work);
    let log = PartitionLog::open(&work, config(), NOW).expect("open");
    assert_holds_exactly(&log, &ranges);
    assert_eq!(log.recovery_point(), log.log_end_offset());
}

/// Byte images of every index file in `dir`.
fn index_images(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut names = files_with_suffix(dir, ".index");
    names.extend(files_with_suffix(dir, ".timeindex"));
    names.sort();
    names
        .into_iter()
        .map(|n| (n.clone(), fs::read(dir.join(&n)).expect("read")))
        .collect()
}

fn check_lookups(log: &PartitionLog, ranges: &Ranges) {
    let end = log.log_end_offset();
    for &(b, l, ts) in ranges {
        for o in b..=l {
            let hs = headers(&slice_bytes(&log.read(o, 1, end).expect("read")));
            assert_eq!(
                (hs[0].base_offset, hs[0].last_offset()),
                (b, l),
                "offset {o}"
            );
        }
        let max = ts + (l - b);
        assert_eq!(log.offset_for_timestamp(ts).expect("lookup"), Some((b, ts)));
        assert_eq!(
            log.offset_for_timestamp(max).expect("lookup"),
            Some((l, max))
        );
    }
    let &(b, l, ts) = ranges.last().expect("last");
    assert_eq!(log.max_timestamp(), Some((ts + (l - b), l)));
}

#[test]
fn storage_recovery_rebuilds_corrupt_or_missing_indexes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (orig, work) = (tmp.path().join("orig"), tmp.path().join("work"));
    let mut log = PartitionLog::open(&orig, config(), NOW).expect("open");
    let mut ranges = Vec::new();
    for i in 0..60 {
        let ts = 1_000 * i as i64;
        let r = log.append(&batch(1 + i % 3, ts), 1, NOW).expect("append");
        ranges.push((r.base_offset, r.last_offset, ts));
    }
    log.close().expect("clean close");
    let images = index_images(&orig);
    let indexes = files_with_suffix(&orig, ".index");
    let timeindexes = files_with_suffix(&orig, ".timeindex");
    assert!(indexes.len() >= 4);
    // Every sealed index has entries (the test is meaningless otherwise).
    for (n, img) in &images {
        assert!(!img.is_empty(), "{n} is empty");
    }

    type Damage = fn(&Path);
    let damages: Vec<(&str, Damage)> = vec![
        ("garbage", |p| {
            let len = fs::metadata(p).expect("meta").len() as usize;
            let junk: Vec<u8> = (0..len).map(|i| (i * 7919 % 251) as u8 | 1).collect();
            fs::write(p, junk).expect("write");
        }),
        ("truncated mid-entry", |p| {
            let len = fs::metadata(p).expect("meta").len();
            truncate_file(p, len - 3);
        }),
        ("emptied", |p| truncate_file(p, 0)),
        ("deleted", |p| fs::remove_file(p).expect("rm")),
        ("grown with garbage", |p| {
            let mut b = fs::read(p).expect("read");
            b.extend_from_slice(&[0xab; 24]);
            fs::write(p, b).expect("write");
        }),
        ("entries swapped", |p| {
            let mut b = fs::read(p).expect("read");
            let w = if p.extension().is_some_and(|e| e == "index") {
                8
            } else {
                12
            };
            if b.len() >= 2 * w {
                let (x, y) = b.split_at_mut(w);
                x.swap_with_slice(&mut y[..w]);
            } else {
                b.iter_mut().for_each(|x| *x = 0xff);
            }
            fs::write(p, b).expect("write");
        }),
        ("pointing past the log", |p| {
            let mut b = fs::read(p).expect("read");
            let w = if p.extension().is_some_and(|e| e == "index") {
                8
            } else {
                12
            };
            let n = b.len();
            // Last entry's position (offset index) or offset (time index) → huge.
            b[n - 4..].copy_from_slice(&0x7fff_fff0u32.to_be_bytes());
            let _ = w;
            fs::write(p, b).expect("write");
        }),
        ("entry shifted off its batch", |p| {
            let mut b = fs::read(p).expect("read");
            let n = b.len();
            if p.extension().is_some_and(|e| e == "index") {
                let pos = u32::from_be_bytes(b[n - 4..].try_into().expect("4 bytes"));
                b[n - 4..].copy_from_slice(&(pos + 1).to_be_bytes());
            } else {
                b[n - 12..n - 4].copy_from_slice(&(-5i64).to_be_bytes());
            }
            fs::write(p, b).expect("write");
        }),
    ];
    let targets: Vec<&String> = [
        indexes.first(),
        indexes.last(),
        timeindexes.first(),
        timeindexes.last(),
    ]
    .into_iter()
    .flatten()
    .collect();
    for target in targets {
        for (what, damage) in &damages {
            copy_dir(&orig, &work);
            damage(&work.join(target));
            let log = PartitionLog::open(&work, config(), NOW)
                .unwrap_or_else(|e| panic!("{target} {what}: {e}"));
            check_lookups(&log, &ranges);
            log.close().expect("close");
            assert_eq!(
                index_images(&work),
                images,
                "{target} {what}: rebuilt index differs"
            );
        }
        // Same damage after an unclean stop.
        copy_dir(&orig, &work);
        fs::remove_file(work.join(".clean-shutdown")).expect("rm marker");
        damages[0].1(&work.join(target));
        let log = PartitionLog::open(&work, config(), NOW).expect("open");
        check_lookups(&log, &ranges);
        log.close().expect("close");
        assert_eq!(
            index_images(&work),
            images,
            "{target}: rebuilt after unclean stop"
        );
    }
    // A truncated but well-formed prefix is accepted and lookups stay right.
    copy_dir(&orig, &work);
    truncate_file(&work.join(&indexes[0]), 8);
    let log = PartitionLog::open(&work, config(), NOW).expect("open");
    check_lookups(&log, &ranges);
}

#[test]
fn storage_recovery_cleans_leftovers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let mut log = PartitionLog::open(dir, config(), NOW).expect("open");
    for i in 0..30 {
        log.append(&batch(2, i), 0, NOW).expect("append");
    }
    let bases = log.segment_base_offsets();
    log.flush().expect("flush");
    drop(log);
    fs::write(dir.join("00000000000000000000.log.deleted"), b"old").expect("write");
    fs::write(dir.join("log-start-offset.checkpoint.tmp"), b"torn").expect("write");
    fs::write(dir.join("00000000000000099999.index"), b"orphan").expect("write");
    // A deletion interrupted after checkpointing the new log start.
    fs::write(
        dir.join("log-start-offset.checkpoint"),
        format!("moldau-checkpoint 1 {}\n", bases[2]),
    )
    .expect("write");
    let log = PartitionLog::open(dir, config(), NOW).expect("open");
    assert_eq!(log.log_start_offset(), bases[2]);
    assert_eq!(log.segment_base_offsets()[0], bases[2]);
    assert!(files_with_suffix(dir, ".deleted").is_empty());
    assert!(files_with_suffix(dir, ".tmp").is_empty());
    assert!(!dir.join("00000000000000099999.index").exists());
    assert!(matches!(
        log.read(0, 1, i64::MAX),
        Err(StorageError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn storage_recovery_of_empty_and_missing_directories() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("t-0");
    let log = PartitionLog::open(&dir, LogConfig::default(), NOW).expect("create");
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.size_bytes()
        ),
        (0, 0, 0)
    );
    drop(log);
    // All segment files lost, checkpoints kept: restart at the log start.
    let mut log = PartitionLog::open(&dir, LogConfig::default(), NOW).expect("reopen");
    log.append(&batch(3, 1), 0, NOW).expect("append");
    log.delete_records_before(2).expect("delete");
    drop(log);
    for n in files_with_suffix(&dir, "") {
        if n.ends_with(".log") || n.ends_with("index") {
            fs::remove_file(dir.join(n)).expect("rm");
        }
    }
    let log = PartitionLog::open(&dir, LogConfig::default(), NOW).expect("reopen");
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (2, 2));
}

#[test]
fn storage_recovery_clean_marker_with_torn_tail_still_checked() {
    // The clean-shutdown marker makes open trust the bytes, but the
    // structure of the active segment's tail is still checked.
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let mut log = PartitionLog::open(dir, config(), NOW).expect("open");
    let mut ranges = Vec::new();
    for i in 0..20 {
        let r = log.append(&batch(2, i), 0, NOW).expect("append");
        ranges.push((r.base_offset, r.last_offset, i));
    }
    log.close().expect("close");
    let last = last_log_file(dir);
    let len = fs::metadata(&last).expect("meta").len();
    truncate_file(&last, len - 5);
    let log = PartitionLog::open(dir, config(), NOW).expect("open");
    assert_holds_exactly(&log, &ranges[..19]);
}

#[test]
fn storage_roll_when_index_full() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = LogConfig {
        index_interval_bytes: 0,
        segment_index_bytes: 96, // 12 offset entries, 8 time entries
        ..config()
    };
    let mut log = PartitionLog::open(tmp.path(), cfg.clone(), NOW).expect("open");
    for i in 0..10 {
        log.append(&batch(1, i), 0, NOW).expect("append");
    }
    // Every batch after the first is indexed; the time index (8 entries)
    // fills after 9 batches and forces a roll.
    assert_eq!(log.segment_count(), 2);
    assert_eq!(log.segment_base_offsets()[1], 9);
    let ranges: Vec<(i64, i64, i64)> = (0..10).map(|i| (i, i, i)).collect();
    assert_holds_exactly(&log, &ranges);
    drop(log);
    let log = PartitionLog::open(tmp.path(), cfg, NOW).expect("reopen");
    assert_holds_exactly(&log, &ranges);
}

/// A clean close (in place, as the broker closes its logs at shutdown)
/// makes the next open recover nothing; a closed log refuses changes; a
/// crash makes the next open re-validate from the recovery point.
#[test]
fn storage_clean_close_in_place_then_open_recovers_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("p");
    let ranges = build(&dir, 40, Some(10));
    // The crash in `build` is seen and repaired.
    let mut log = PartitionLog::open(&dir, config(), NOW).expect("open");
    let report = log.open_report();
    assert!(report.unclean, "{report:?}");
    assert!(report.segments_recovered >= 1, "{report:?}");
    assert_holds_exactly(&log, &ranges);
    let segments = log.segment_count();

    log.close_in_place().expect("close");
    assert!(log.is_closed());
    log.close_in_place().expect("closing twice is a no-op");
    assert!(matches!(
        log.append(&batch(1, 0), 1, NOW),
        Err(StorageError::Io(_))
    ));
    assert!(log.delete_records_before(1).is_err());
    let far_future = NOW + 10 * 365 * 24 * 3600 * 1000;
    let outcome = log.enforce_retention(far_future).expect("retention");
    assert_eq!(outcome.segments_deleted, 0, "a closed log changes nothing");
    log.flush().expect("flush is a no-op");
    assert_eq!(log.segment_count(), segments);
    drop(log);
    assert!(dir.join(".clean-shutdown").is_file());

    let log = PartitionLog::open(&dir, config(), NOW).expect("reopen");
    assert_eq!(
        log.open_report(),
        Default::default(),
        "a clean stop leaves nothing to recover"
    );
    assert_eq!(log.recovery_point(), log.log_end_offset());
    assert_holds_exactly(&log, &ranges);
    assert!(!dir.join(".clean-shutdown").exists(), "marker consumed");
    drop(log);

    // Crash after that clean start: everything was flushed, so the
    // recovery point is the log end and only the last segment (the one
    // holding it) is re-validated.
    let log = PartitionLog::open(&dir, config(), NOW).expect("reopen");
    let report = log.open_report();
    assert!(report.unclean);
    assert_eq!(report.segments_recovered, 1, "{report:?}");
    assert_holds_exactly(&log, &ranges);
}
