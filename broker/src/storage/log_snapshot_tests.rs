//! Tests of `PartitionLog`'s side of producer state snapshots: which
//! snapshot a start may use, pruning on truncation, retention and
//! DeleteRecords, and the bytes a start reads (real files in temp dirs).

use bytes::Bytes;

use super::*;
use crate::storage::producer_snapshot::{self as snap, SnapshotBatch};
use crate::storage::segment;

const NOW: i64 = 1_700_000_000_000;

fn batch(n: usize) -> Vec<u8> {
    crate::storage::test_batches::batch_of(n, NOW, |i| {
        (None, Some(Bytes::from(format!("value-{i:040}"))))
    })
}

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 500,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// A snapshot naming the log end in its only entry, to tell them apart.
fn entries_for(end: i64) -> Vec<SnapshotEntry> {
    vec![SnapshotEntry {
        producer_id: 1,
        epoch: 0,
        batches: vec![SnapshotBatch {
            first_seq: 0,
            last_seq: 0,
            first_offset: end,
        }],
        current_txn_first_offset: -1,
        coordinator_epoch: -1,
    }]
}

/// Appends `n` batches of 2 records, snapshotting after each (as a roll
/// would); returns the log ends.
fn fill(log: &mut PartitionLog, n: usize) -> Vec<i64> {
    let mut ends = Vec::new();
    for _ in 0..n {
        log.append(&batch(2), 0, NOW).unwrap();
        let end = log.log_end_offset();
        log.write_producer_snapshot(&entries_for(end)).unwrap();
        ends.push(end);
    }
    ends
}

#[test]
fn at_most_two_snapshots_are_kept_one_of_them_usable_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small(), NOW).unwrap();
    let ends = fill(&mut log, 3);
    log.flush().unwrap();
    let more = fill(&mut log, 3);
    assert_eq!(snap::list(dir.path()).unwrap(), vec![ends[2], more[2]]);
    assert_eq!(
        log.latest_producer_snapshot().unwrap().map(|s| s.0),
        Some(ends[2]),
        "the newest at or below the recovery point"
    );
    log.flush().unwrap();
    assert_eq!(
        log.latest_producer_snapshot().unwrap(),
        Some((more[2], entries_for(more[2])))
    );
    // one at the log end already: not rewritten
    log.write_producer_snapshot(&[]).unwrap();
    assert_eq!(
        log.latest_producer_snapshot().unwrap(),
        Some((more[2], entries_for(more[2])))
    );
}

#[test]
fn truncation_retention_and_delete_records_remove_snapshots_outside_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small(), NOW).unwrap();
    let ends = fill(&mut log, 8);
    log.flush().unwrap();
    // keep a few around: prune keeps two, so write them back
    for &e in &ends[2..6] {
        snap::write(dir.path(), e, &entries_for(e)).unwrap();
    }
    log.truncate_to(ends[4]).unwrap();
    assert_eq!(log.log_end_offset(), ends[4]);
    assert!(snap::list(dir.path())
        .unwrap()
        .iter()
        .all(|&o| o <= ends[4]));
    assert_eq!(
        log.latest_producer_snapshot().unwrap().map(|s| s.0),
        Some(ends[4])
    );
    log.delete_records_before(ends[3]).unwrap();
    assert_eq!(snap::list(dir.path()).unwrap(), vec![ends[3], ends[4]]);
    // retention deletes whole segments: the log start moves up
    let more = fill(&mut log, 6);
    assert_eq!(snap::list(dir.path()).unwrap(), vec![ends[4], more[5]]);
    let mut config = small();
    config.retention_bytes = 1;
    log.set_config(config);
    log.enforce_retention(NOW).unwrap();
    let start = log.log_start_offset();
    assert!(start > ends[4]);
    assert_eq!(snap::list(dir.path()).unwrap(), vec![more[5]]);
    log.truncate_fully_and_start_at(100).unwrap();
    fill(&mut log, 1);
    assert_eq!(snap::list(dir.path()).unwrap(), vec![102]);
    log.truncate_fully_and_start_at(100).unwrap();
    assert!(snap::list(dir.path()).unwrap().is_empty());
}

#[test]
fn a_clean_open_reads_nothing_an_unclean_one_from_the_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), small(), NOW).unwrap();
    fill(&mut log, 10);
    log.close().unwrap();
    let log = PartitionLog::open(dir.path(), small(), NOW).unwrap();
    let report = log.open_report();
    assert!(!report.unclean);
    assert_eq!(report.bytes_read, 0);
    let end = log.log_end_offset();
    assert_eq!(
        log.latest_producer_snapshot().unwrap().map(|s| s.0),
        Some(end)
    );
    assert_eq!(
        log.for_each_header_from(end, |_| panic!("a header"))
            .unwrap(),
        0
    );
    let mut log = log;
    log.append(&batch(2), 0, NOW).unwrap();
    let segments = log.segment_base_offsets();
    let total: u64 = log.size_bytes();
    drop(log); // crash
    let log = PartitionLog::open(dir.path(), small(), NOW).unwrap();
    let report = log.open_report();
    assert!(report.unclean);
    // the segment holding the recovery point (the old log end) on
    let from = *segments.iter().rev().find(|&&b| b <= end).unwrap();
    let expect: u64 = log.size_bytes()
        - (0..segments.len())
            .filter(|&i| segments[i] < from)
            .map(|i| {
                std::fs::metadata(dir.path().join(segment::file_name(segments[i], ".log")))
                    .unwrap()
                    .len()
            })
            .sum::<u64>();
    assert_eq!(report.bytes_read, expect);
    assert!(expect > 0 && expect < total);
    let mut headers = 0;
    let bytes = log.for_each_header_from(end, |_| headers += 1).unwrap();
    assert_eq!(headers, 1);
    assert_eq!(bytes, batch::BATCH_HEADER_LEN as u64);
}

#[test]
fn a_torn_tail_removes_the_snapshots_past_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (orig, work) = (tmp.path().join("orig"), tmp.path().join("work"));
    let mut log = PartitionLog::open(&orig, small(), NOW).unwrap();
    fill(&mut log, 6);
    let before_last = log.log_end_offset();
    log.write_producer_snapshot(&entries_for(before_last))
        .unwrap();
    log.append(&batch(2), 0, NOW).unwrap();
    let end = log.log_end_offset();
    log.write_producer_snapshot(&entries_for(end)).unwrap();
    let active = log.active().log_path().to_path_buf();
    let last_len = log.active().size() - log.read(before_last, 1, i64::MAX).unwrap().position;
    drop(log);
    let size = std::fs::metadata(&active).unwrap().len();
    let name = active.file_name().unwrap().to_owned();
    for cut in size - last_len..size {
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).unwrap();
        for e in std::fs::read_dir(&orig).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), work.join(e.file_name())).unwrap();
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(work.join(&name))
            .unwrap()
            .set_len(cut)
            .unwrap();
        let log = PartitionLog::open(&work, small(), NOW).unwrap();
        assert_eq!(log.log_end_offset(), before_last, "cut at {cut}");
        assert_eq!(snap::list(&work).unwrap(), vec![before_last]);
        assert_eq!(
            log.latest_producer_snapshot().unwrap(),
            None,
            "the recovery point is 0 after a crash without flush"
        );
    }
}

/// Copies the files of `from` into a fresh `to`.
fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// What a recovered segment holds besides its bytes.
#[derive(Debug, PartialEq)]
struct SegmentState {
    next_offset: i64,
    size: u64,
    max_timestamp: Option<(i64, i64)>,
    offset_entries: Vec<(i64, u64)>,
    time_entries: Vec<(i64, i64)>,
}

fn segment_state(seg: &Segment) -> SegmentState {
    SegmentState {
        next_offset: seg.next_offset(),
        size: seg.size(),
        max_timestamp: seg.max_timestamp(),
        offset_entries: (0..seg.offset_index().entries())
            .map(|i| seg.offset_index().entry(i).unwrap())
            .collect(),
        time_entries: (0..seg.time_index().entries())
            .map(|i| seg.time_index().entry(i).unwrap())
            .collect(),
    }
}

fn indexed_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 256,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// Appends `n` batches of 1–3 records with increasing timestamps.
fn append_varied(log: &mut PartitionLog, n: usize, first_ts: i64) {
    for i in 0..n {
        let ts = first_ts + 1_000 * i as i64;
        let b = crate::storage::test_batches::batch_of(1 + i % 3, ts, |j| {
            (None, Some(Bytes::from(format!("value-{i}-{j:030}"))))
        });
        log.append(&b, 0, NOW).unwrap();
    }
}

/// An unclean open re-validates only what follows the recovery point in
/// its segment, and ends in exactly the state a whole-segment recovery
/// reaches (end, size, max timestamp, index entries), also after more
/// appends (which index where a full recovery would).
#[test]
fn an_unclean_open_reads_only_what_follows_the_recovery_point() {
    let tmp = tempfile::tempdir().unwrap();
    let (crashed, partial, full) = (
        tmp.path().join("crashed"),
        tmp.path().join("partial"),
        tmp.path().join("full"),
    );
    let mut log = PartitionLog::open(&crashed, indexed_config(), NOW).unwrap();
    append_varied(&mut log, 60, 0);
    log.flush().unwrap();
    let flushed_size = log.active().size();
    append_varied(&mut log, 12, 100_000);
    let size = log.active().size();
    assert_eq!(log.segment_count(), 1);
    drop(log); // crash
    copy_dir(&crashed, &partial);
    copy_dir(&crashed, &full);
    std::fs::remove_file(full.join(checkpoint::RECOVERY_POINT_FILE)).unwrap();

    let mut p = PartitionLog::open(&partial, indexed_config(), NOW).unwrap();
    let mut f = PartitionLog::open(&full, indexed_config(), NOW).unwrap();
    let (pr, fr) = (p.open_report(), f.open_report());
    assert!(pr.unclean);
    assert_eq!(
        fr.bytes_read, size,
        "without a recovery point: the whole segment"
    );
    let after = size - flushed_size;
    // the walk from the last index entry before the recovery point
    // covers at most an interval plus one batch
    assert!(
        pr.bytes_read >= after && pr.bytes_read < after + 256 + 200,
        "read {} bytes, {after} follow the recovery point",
        pr.bytes_read
    );
    assert_eq!(segment_state(p.active()), segment_state(f.active()));
    assert!(p.active().offset_index().entries() > 10);
    for (log, first_ts) in [(&mut p, 500_000), (&mut f, 500_000)] {
        append_varied(log, 25, first_ts);
    }
    assert_eq!(segment_state(p.active()), segment_state(f.active()));
    assert_eq!(p.log_end_offset(), f.log_end_offset());
}

/// Wherever the recovery point falls (batch boundaries, inside a batch
/// as the log start can put it, the segment's base, its end), the unclean
/// open reaches the state of a whole-segment recovery.
#[test]
fn every_recovery_point_gives_the_state_of_a_full_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let (crashed, work, full) = (
        tmp.path().join("crashed"),
        tmp.path().join("work"),
        tmp.path().join("full"),
    );
    let mut log = PartitionLog::open(&crashed, indexed_config(), NOW).unwrap();
    append_varied(&mut log, 40, 0);
    let end = log.log_end_offset();
    drop(log);
    copy_dir(&crashed, &full);
    let _ = std::fs::remove_file(full.join(checkpoint::RECOVERY_POINT_FILE));
    let expected = segment_state(
        PartitionLog::open(&full, indexed_config(), NOW)
            .unwrap()
            .active(),
    );
    for rp in 0..=end {
        copy_dir(&crashed, &work);
        checkpoint::write_checkpoint(&work, checkpoint::RECOVERY_POINT_FILE, rp).unwrap();
        let log = PartitionLog::open(&work, indexed_config(), NOW).unwrap();
        assert_eq!(segment_state(log.active()), expected, "recovery point {rp}");
        assert_eq!(log.log_end_offset(), end);
    }
}

/// When what lies below the recovery point does not check out (an index
/// entry damaged, flushed bytes lost), the whole segment is re-validated
/// and the log keeps exactly the whole batches that survive.
#[test]
fn damage_below_the_recovery_point_falls_back_to_a_full_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let (crashed, work) = (tmp.path().join("crashed"), tmp.path().join("work"));
    let mut log = PartitionLog::open(&crashed, indexed_config(), NOW).unwrap();
    append_varied(&mut log, 40, 0);
    log.flush().unwrap();
    let end = log.log_end_offset();
    let state = segment_state(log.active());
    let log_name = log.active().log_path().file_name().unwrap().to_owned();
    let index_name = log
        .active()
        .offset_index()
        .path()
        .file_name()
        .unwrap()
        .to_owned();
    let size = log.active().size();
    drop(log);

    // the last kept index entry (the one the walk starts from, checked as
    // the last entry of a trusted segment is) pointing into a batch
    copy_dir(&crashed, &work);
    let last = state.offset_entries.len() - 1;
    let mut damaged = std::fs::read(work.join(&index_name)).unwrap();
    damaged[8 * last + 7] ^= 0x01;
    std::fs::write(work.join(&index_name), &damaged).unwrap();
    let log = PartitionLog::open(&work, indexed_config(), NOW).unwrap();
    assert_eq!(log.open_report().bytes_read, size);
    assert_eq!(segment_state(log.active()), state);
    drop(log);

    // flushed bytes gone: the file ends inside the log's last batches
    for cut in [size - 1, size / 2, 100] {
        copy_dir(&crashed, &work);
        std::fs::OpenOptions::new()
            .write(true)
            .open(work.join(&log_name))
            .unwrap()
            .set_len(cut)
            .unwrap();
        let log = PartitionLog::open(&work, indexed_config(), NOW).unwrap();
        assert_eq!(log.open_report().bytes_read, cut, "cut at {cut}");
        let kept = log.log_end_offset();
        assert!(kept < end);
        assert!(log.active().size() <= cut);
        // what is kept is whole batches, contiguous from 0 to the end
        let mut next = 0;
        let mut bytes = 0;
        log.for_each_header_from(0, |h| {
            assert_eq!(h.base_offset, next);
            next = h.last_offset() + 1;
            bytes += h.total_size() as u64;
        })
        .unwrap();
        assert_eq!((next, bytes), (kept, log.active().size()));
    }
}
