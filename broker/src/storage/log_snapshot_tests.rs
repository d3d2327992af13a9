//! Tests of `PartitionLog`'s side of producer state snapshots: which
//! snapshot a start may use, pruning on truncation, retention and
//! DeleteRecords, and the bytes a start reads (real files in temp dirs).

use bytes::Bytes;

use super::*;
use crate::storage::producer_snapshot::{self as snap, SnapshotBatch};

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
    }]
}

/// Appends `n` batches of 2 records, snapshotting after each (as a roll
/// would); returns the log ends.
fn fill(log: &mut PartitionLog, n: usize) -> Vec<i64> {
    let mut ends = Vec::new();
    for _ in 0..n {
        log.append(&mut batch(2), 0, NOW).unwrap();
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
    log.append(&mut batch(2), 0, NOW).unwrap();
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
    log.append(&mut batch(2), 0, NOW).unwrap();
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
