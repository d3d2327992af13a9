//! Tests of the replication side of `PartitionLog`: the leader-epoch
//! cache, follower appends and truncation (real files in temp dirs).

use std::os::unix::fs::FileExt;

use bytes::Bytes;

use super::*;
use crate::storage::epochs::{self, EpochEntry};

const NOW: i64 = 1_700_000_000_000;

fn batch(n: usize, ts: i64) -> Vec<u8> {
    crate::storage::test_batches::batch_of(n, ts, |i| {
        (
            Some(Bytes::from(format!("k{i}"))),
            Some(Bytes::from(vec![b'x'; 40])),
        )
    })
}

/// Small segments and a dense index, so that tests cross segments and
/// index entries.
fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 700,
        index_interval_bytes: 100,
        segment_index_bytes: 4096,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

/// Every byte of the log from the log start, batch by batch.
fn read_all(log: &PartitionLog) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let slice = log.read(offset, 1 << 20, i64::MAX).expect("read");
        assert!(!slice.is_empty(), "nothing read at {offset}");
        let mut buf = vec![0u8; slice.len as usize];
        slice
            .file
            .read_exact_at(&mut buf, slice.position)
            .expect("pread");
        let mut pos = 0;
        while pos < buf.len() {
            let h = BatchHeader::parse(&buf[pos..]).expect("header");
            offset = h.last_offset() + 1;
            pos += h.total_size();
        }
        out.extend_from_slice(&buf);
    }
    out
}

/// The batches of `bytes` as `(base offset, leader epoch, bytes)`.
fn split(bytes: &[u8]) -> Vec<(i64, i32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let h = BatchHeader::parse(&bytes[pos..]).expect("header");
        out.push((
            h.base_offset,
            h.partition_leader_epoch,
            bytes[pos..pos + h.total_size()].to_vec(),
        ));
        pos += h.total_size();
    }
    out
}

fn entries(pairs: &[(i32, i64)]) -> Vec<EpochEntry> {
    pairs
        .iter()
        .map(|&(epoch, start_offset)| EpochEntry {
            epoch,
            start_offset,
        })
        .collect()
}

/// A leader log with batches of 3 records: epochs 1 (offsets 0..9),
/// 3 (9..18), 4 (18..30).
fn leader(dir: &Path) -> PartitionLog {
    let mut log = PartitionLog::open(dir, small(), NOW).expect("open");
    for (i, epoch) in [1, 1, 1, 3, 3, 3, 4, 4, 4, 4].into_iter().enumerate() {
        let b = batch(3, NOW + i as i64);
        log.append(&b, epoch, NOW).expect("append");
    }
    log
}

#[test]
fn leader_append_records_new_epochs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = leader(dir.path());
    assert_eq!(log.log_end_offset(), 30);
    assert!(log.segment_count() > 2, "{:?}", log.segment_base_offsets());
    assert_eq!(
        log.leader_epoch_entries(),
        entries(&[(1, 0), (3, 9), (4, 18)])
    );
    assert_eq!(log.latest_leader_epoch(), Some(4));
    assert_eq!(log.end_offset_for_epoch(4), Some((4, 30)));
    assert_eq!(log.end_offset_for_epoch(3), Some((3, 18)));
    assert_eq!(log.end_offset_for_epoch(2), Some((1, 9)));
    assert_eq!(log.end_offset_for_epoch(0), Some((0, 0)));
    assert_eq!(log.end_offset_for_epoch(5), None);
    assert_eq!(log.leader_epoch_for_offset(10), Some(3));
    // Checkpointed as Kafka's text format.
    let text = fs::read_to_string(dir.path().join(epochs::LEADER_EPOCH_CHECKPOINT_FILE))
        .expect("checkpoint");
    assert_eq!(text, "0\n3\n1 0\n3 9\n4 18\n");
    // An older epoch is stamped but does not rewrite the cache.
    let mut log = log;
    log.append(&batch(1, NOW), 2, NOW).expect("append");
    assert_eq!(
        log.leader_epoch_entries(),
        entries(&[(1, 0), (3, 9), (4, 18)])
    );
}

#[test]
fn append_replicated_keeps_bytes_identical() {
    let ldir = tempfile::tempdir().expect("tempdir");
    let fdir = tempfile::tempdir().expect("tempdir");
    let leader = leader(ldir.path());
    let bytes = read_all(&leader);
    let mut follower = PartitionLog::open(fdir.path(), small(), NOW).expect("open");
    // Fetched in runs of 1, 2, 3 ... batches.
    let batches = split(&bytes);
    let mut i = 0;
    let mut run = 1;
    while i < batches.len() {
        let chunk: Vec<u8> = batches[i..(i + run).min(batches.len())]
            .iter()
            .flat_map(|(_, _, b)| b.clone())
            .collect();
        let r = follower.append_replicated(&chunk, NOW).expect("append");
        assert_eq!(r.base_offset, batches[i].0);
        assert_eq!(r.log_append_time, -1);
        i += run;
        run += 1;
    }
    assert_eq!(follower.log_end_offset(), 30);
    assert_eq!(read_all(&follower), bytes);
    assert!(follower.segment_count() > 2);
    assert_eq!(
        follower.leader_epoch_entries(),
        leader.leader_epoch_entries()
    );
    assert_eq!(
        follower.high_watermark(),
        0,
        "the leader tells the high watermark"
    );
    // Identical after a clean and an unclean reopen.
    follower.close().expect("close");
    let follower = PartitionLog::open(fdir.path(), small(), NOW).expect("reopen");
    assert_eq!(read_all(&follower), bytes);
    drop(follower);
    let follower = PartitionLog::open(fdir.path(), small(), NOW).expect("reopen unclean");
    assert!(follower.open_report().unclean);
    assert_eq!(read_all(&follower), bytes);
    assert_eq!(
        follower.leader_epoch_entries(),
        leader.leader_epoch_entries()
    );
}

#[test]
fn append_replicated_refuses_gaps_overlaps_and_corruption() {
    let ldir = tempfile::tempdir().expect("tempdir");
    let fdir = tempfile::tempdir().expect("tempdir");
    let leader = leader(ldir.path());
    let batches = split(&read_all(&leader));
    let mut follower = PartitionLog::open(fdir.path(), small(), NOW).expect("open");
    follower
        .append_replicated(&batches[0].2, NOW)
        .expect("first batch");
    let corrupt = |r: Result<AppendResult>| match r {
        Err(StorageError::CorruptBatch(msg)) => msg,
        other => panic!("expected CorruptBatch, got {other:?}"),
    };
    // Overlap: the same batch again.
    let msg = corrupt(follower.append_replicated(&batches[0].2, NOW));
    assert!(
        msg.contains("start at offset 0 but the log ends at 3"),
        "{msg}"
    );
    // Gap: batch 2 (offset 6) while the log ends at 3.
    corrupt(follower.append_replicated(&batches[2].2, NOW));
    // A gap inside one fetch.
    let mut two = batches[1].2.clone();
    two.extend_from_slice(&batches[3].2);
    let msg = corrupt(follower.append_replicated(&two, NOW));
    assert!(
        msg.contains("batch 1 starts at offset 9 where 6 was expected"),
        "{msg}"
    );
    // A flipped byte (CRC) and a torn batch.
    let mut bad = batches[1].2.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    corrupt(follower.append_replicated(&bad, NOW));
    corrupt(follower.append_replicated(&batches[1].2[..30], NOW));
    corrupt(follower.append_replicated(&[], NOW));
    assert_eq!(follower.log_end_offset(), 3);
    assert_eq!(follower.leader_epoch_entries(), entries(&[(1, 0)]));
    follower
        .append_replicated(&batches[1].2, NOW)
        .expect("the right next batch");
    assert_eq!(follower.log_end_offset(), 6);
}

#[test]
fn append_replicated_accepts_compaction_gaps_in_compacted_logs() {
    let ldir = tempfile::tempdir().expect("tempdir");
    let fdir = tempfile::tempdir().expect("tempdir");
    let leader = leader(ldir.path());
    let batches = split(&read_all(&leader));
    let cfg = LogConfig {
        compact: true,
        delete: false,
        ..small()
    };
    let mut follower = PartitionLog::open(fdir.path(), cfg.clone(), NOW).expect("open");
    // Offsets 0..3, then 9..12 (3..9 compacted away on the leader), then 12..15.
    follower.append_replicated(&batches[0].2, NOW).expect("0");
    follower.append_replicated(&batches[3].2, NOW).expect("gap");
    assert_eq!(follower.cleaned_up_to(), Some(12));
    follower
        .append_replicated(&batches[4].2, NOW)
        .expect("next");
    // Overlaps are still refused.
    assert!(follower.append_replicated(&batches[4].2, NOW).is_err());
    let expected: Vec<u8> = [0, 3, 4]
        .iter()
        .flat_map(|&i| batches[i].2.clone())
        .collect();
    assert_eq!(read_all(&follower), expected);
    drop(follower);
    let follower = PartitionLog::open(fdir.path(), cfg, NOW).expect("reopen unclean");
    assert_eq!(follower.log_end_offset(), 15);
    assert_eq!(read_all(&follower), expected);
    assert_eq!(follower.leader_epoch_entries(), entries(&[(1, 0), (3, 9)]));
}

/// State compared across reopens.
fn state(log: &PartitionLog) -> (i64, i64, i64, Vec<EpochEntry>, Vec<u8>) {
    (
        log.log_start_offset(),
        log.log_end_offset(),
        log.high_watermark(),
        log.leader_epoch_entries(),
        read_all(log),
    )
}

#[test]
fn truncate_inside_a_segment_then_append_and_reopen() {
    for clean in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = leader(dir.path());
        log.set_high_watermark(30);
        log.flush().expect("flush");
        let before = read_all(&log);
        let segments = log.segment_base_offsets();
        // Offset 13 lies inside the batch 12..15: the whole batch goes.
        let seg_of_12 = segments
            .iter()
            .rev()
            .find(|&&b| b <= 12)
            .copied()
            .expect("segment");
        log.truncate_to(13).expect("truncate");
        assert_eq!(log.log_end_offset(), 12);
        assert_eq!(log.high_watermark(), 12);
        assert!(log.recovery_point() <= 12);
        assert_eq!(log.segment_base_offsets().last(), Some(&seg_of_12));
        assert_eq!(log.leader_epoch_entries(), entries(&[(1, 0), (3, 9)]));
        let kept = read_all(&log);
        assert_eq!(kept, before[..kept.len()].to_vec());
        assert_eq!(split(&kept).last().map(|b| b.0), Some(9));
        // Appends continue at the new end, with a new epoch.
        let r = log.append(&batch(2, NOW), 5, NOW).expect("append");
        assert_eq!((r.base_offset, r.last_offset), (12, 13));
        assert_eq!(
            log.leader_epoch_entries(),
            entries(&[(1, 0), (3, 9), (5, 12)])
        );
        // Reads of every offset work.
        for o in 0..14 {
            assert!(
                !log.read(o, 1, i64::MAX).expect("read").is_empty(),
                "offset {o}"
            );
        }
        let expected = state(&log);
        if clean {
            log.close().expect("close");
        } else {
            drop(log);
        }
        let log = PartitionLog::open(dir.path(), small(), NOW).expect("reopen");
        assert_eq!(log.open_report().unclean, !clean);
        let mut got = state(&log);
        // The high watermark is the data directory's checkpoint
        // (high_watermarks), not the log's.
        got.2 = expected.2;
        assert_eq!(got, expected, "clean: {clean}");
    }
}

#[test]
fn truncate_across_segments_then_append_and_reopen() {
    for clean in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = leader(dir.path());
        let segments = log.segment_base_offsets();
        assert!(segments.len() >= 3, "{segments:?}");
        // Truncate to the base of the second segment: every later segment goes.
        let cut = segments[1];
        log.truncate_to(cut).expect("truncate");
        assert_eq!(log.log_end_offset(), cut);
        assert_eq!(log.segment_base_offsets(), vec![segments[0]]);
        let names: Vec<String> = fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".log"))
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        let r = log
            .append_replicated(
                &{
                    let mut b = batch(4, NOW);
                    batch::set_base_offset_and_epoch(&mut b, cut, 7);
                    b
                },
                NOW,
            )
            .expect("replicated append continues");
        assert_eq!((r.base_offset, r.last_offset), (cut, cut + 3));
        assert_eq!(log.latest_leader_epoch(), Some(7));
        // Truncating at or past the end changes nothing.
        log.truncate_to(cut + 4).expect("no-op");
        log.truncate_to(1000).expect("no-op");
        assert_eq!(log.log_end_offset(), cut + 4);
        let expected = state(&log);
        if clean {
            log.close().expect("close");
        } else {
            drop(log);
        }
        let log = PartitionLog::open(dir.path(), small(), NOW).expect("reopen");
        let mut got = state(&log);
        got.2 = expected.2;
        assert_eq!(got, expected, "clean: {clean}");
    }
}

#[test]
fn truncate_to_the_log_start_and_below() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = leader(dir.path());
    log.set_high_watermark(30);
    log.delete_records_before(10).expect("delete records");
    assert_eq!(log.log_start_offset(), 10);
    // The entry covering the new log start is kept, moved up.
    assert_eq!(log.leader_epoch_entries(), entries(&[(3, 10), (4, 18)]));
    // Exactly at the log start: everything from there goes, the start stays.
    log.truncate_to(10).expect("truncate at start");
    assert!(log.log_end_offset() <= 10);
    assert_eq!(log.log_start_offset(), log.log_end_offset());
    // Below the log start: the log restarts there.
    log.truncate_to(4).expect("truncate below start");
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.high_watermark()
        ),
        (4, 4, 4)
    );
    assert!(log.leader_epoch_entries().is_empty());
    assert!(log.truncate_to(-1).is_err());
}

#[test]
fn truncate_fully_and_start_at_new_offsets() {
    for (target, clean) in [(100, true), (0, false), (2, true), (50, false)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut log = leader(dir.path());
        log.set_high_watermark(30);
        log.flush().expect("flush");
        log.truncate_fully_and_start_at(target).expect("restart");
        assert_eq!(log.segment_base_offsets(), vec![target]);
        assert_eq!(
            (
                log.log_start_offset(),
                log.log_end_offset(),
                log.high_watermark(),
                log.recovery_point()
            ),
            (target, target, target, target)
        );
        assert!(log.leader_epoch_entries().is_empty());
        assert_eq!(log.end_offset_for_epoch(4), None);
        let mut b = batch(2, NOW);
        batch::set_base_offset_and_epoch(&mut b, target, 9);
        log.append_replicated(&b, NOW)
            .expect("append at the new start");
        assert_eq!(log.leader_epoch_entries(), entries(&[(9, target)]));
        let expected = state(&log);
        if clean {
            log.close().expect("close");
        } else {
            drop(log);
        }
        let log = PartitionLog::open(dir.path(), small(), NOW).expect("reopen");
        let mut got = state(&log);
        got.2 = expected.2;
        assert_eq!(got, expected, "target {target}");
        assert_eq!(read_all(&log), b);
    }
}

#[test]
fn epoch_cache_survives_reopen_and_is_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = leader(dir.path());
    let want = entries(&[(1, 0), (3, 9), (4, 18)]);
    log.close().expect("close");
    let file = dir.path().join(epochs::LEADER_EPOCH_CHECKPOINT_FILE);
    // Survives a reopen.
    let log = PartitionLog::open(dir.path(), small(), NOW).expect("reopen");
    assert_eq!(log.leader_epoch_entries(), want);
    log.close().expect("close");
    // Rebuilt from the batch headers when deleted ...
    fs::remove_file(&file).expect("rm");
    let log = PartitionLog::open(dir.path(), small(), NOW).expect("reopen");
    assert_eq!(log.leader_epoch_entries(), want);
    assert!(file.is_file(), "rewritten");
    log.close().expect("close");
    // ... or corrupt ...
    fs::write(&file, "0\n3\n1 0\n").expect("corrupt");
    let log = PartitionLog::open(dir.path(), small(), NOW).expect("reopen");
    assert_eq!(log.leader_epoch_entries(), want);
    log.close().expect("close");
    // ... or empty although the log has batches.
    fs::write(&file, "0\n0\n").expect("empty");
    let log = PartitionLog::open(dir.path(), small(), NOW).expect("reopen");
    assert_eq!(log.leader_epoch_entries(), want);
    // Stale entries past the log end are dropped at open (here, an epoch a
    // leader assigned without writing anything).
    let mut log = log;
    log.assign_leader_epoch(6, 30).expect("assign");
    assert_eq!(log.latest_leader_epoch(), Some(6));
    assert_eq!(log.end_offset_for_epoch(4), Some((4, 30)));
    drop(log);
    let log = PartitionLog::open(dir.path(), small(), NOW).expect("reopen");
    assert_eq!(log.leader_epoch_entries(), want);
}

#[test]
fn log_written_before_epochs_were_tracked_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = PartitionLog::open(dir.path(), small(), NOW).expect("open");
    for i in 0..6 {
        log.append(&batch(2, NOW + i), 0, NOW).expect("append");
    }
    log.close().expect("close");
    // The previous version wrote no epoch checkpoint.
    fs::remove_file(dir.path().join(epochs::LEADER_EPOCH_CHECKPOINT_FILE)).expect("rm");
    let mut log = PartitionLog::open(dir.path(), small(), NOW).expect("reopen");
    assert_eq!(log.leader_epoch_entries(), entries(&[(0, 0)]));
    assert_eq!(log.end_offset_for_epoch(0), Some((0, 12)));
    // Retention still works and moves the cache start.
    log.delete_records_before(5).expect("delete");
    assert_eq!(log.leader_epoch_entries(), entries(&[(0, 5)]));
    // A new leader takes over at the log end.
    log.assign_leader_epoch(2, 12).expect("assign");
    log.append(&batch(1, NOW), 2, NOW).expect("append");
    assert_eq!(log.leader_epoch_entries(), entries(&[(0, 5), (2, 12)]));
    assert!(log.assign_leader_epoch(-1, 3).is_err());
}

#[test]
fn assign_leader_epoch_replaces_conflicting_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = leader(dir.path());
    // The latest epoch again: nothing changes.
    log.assign_leader_epoch(4, 30).expect("assign");
    assert_eq!(
        log.leader_epoch_entries(),
        entries(&[(1, 0), (3, 9), (4, 18)])
    );
    // A newer epoch at the log end.
    log.assign_leader_epoch(5, 30).expect("assign");
    // Epoch 6 taking over at the same offset replaces 5 (no data in 5).
    log.assign_leader_epoch(6, 30).expect("assign");
    assert_eq!(
        log.leader_epoch_entries(),
        entries(&[(1, 0), (3, 9), (4, 18), (6, 30)])
    );
    assert_eq!(log.end_offset_for_epoch(5), Some((4, 30)));
    assert_eq!(log.end_offset_for_epoch(6), Some((6, 30)));
    // An entry starting before later ones removes them.
    log.assign_leader_epoch(7, 15).expect("assign");
    assert_eq!(
        log.leader_epoch_entries(),
        entries(&[(1, 0), (3, 9), (7, 15)])
    );
    drop(log);
    // Checkpointed at once: an unclean reopen sees it.
    let log = PartitionLog::open(dir.path(), small(), NOW).expect("reopen");
    assert_eq!(
        log.leader_epoch_entries(),
        entries(&[(1, 0), (3, 9), (7, 15)])
    );
}

#[test]
fn follower_truncation_end_to_end() {
    // The follower has epochs 1 and 3 like the leader, then a divergent
    // epoch 4 tail; the leader's epoch 3 ended at 12 and it moved on to 5.
    let ldir = tempfile::tempdir().expect("tempdir");
    let fdir = tempfile::tempdir().expect("tempdir");
    let leader = leader(ldir.path());
    let mut follower = PartitionLog::open(fdir.path(), small(), NOW).expect("open");
    follower
        .append_replicated(&read_all(&leader), NOW)
        .expect("copy");
    let latest = follower.latest_leader_epoch().expect("epoch");
    assert_eq!(latest, 4);
    // The leader answers (3, 12) for epoch 4 (it never had 4).
    let target = epochs::truncation_offset(
        &follower.leader_epoch_entries(),
        follower.log_end_offset(),
        3,
        12,
    );
    assert_eq!(target, 12);
    follower.truncate_to(target).expect("truncate");
    assert_eq!(follower.log_end_offset(), 12);
    assert_eq!(follower.leader_epoch_entries(), entries(&[(1, 0), (3, 9)]));
    assert_eq!(
        read_all(&follower),
        read_all(&leader)[..read_all(&follower).len()].to_vec()
    );
}
