//! Unit tests of transactions on a partition (issue 37): the last stable
//! offset, markers and their fencing, the aborted-transaction index and
//! read_committed reads, across restarts and on a follower.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::*;
use crate::image::PartitionImage;
use crate::metadata::TopicMeta;
use crate::storage;
use crate::storage::batch::BatchBuilder;
use crate::storage::high_watermarks::HighWatermarks;
use crate::txn::marker::TxnResult;

fn open_at(dir: &std::path::Path, name: &str) -> Partition {
    let meta = TopicMeta {
        name: name.into(),
        id: Uuid::nil(),
        partitions: 1,
        replication_factor: 1,
        configs: Default::default(),
        held: None,
    };
    let config = storage::LogConfig {
        segment_bytes: 600,
        ..storage::LogConfig::default()
    };
    let hws = Arc::new(HighWatermarks::open(dir).unwrap());
    Partition::open(&meta, 0, dir.join(format!("{name}-0")), config, hws).unwrap()
}

fn txn_batch(pid: i64, seq: i32, n: usize, transactional: bool) -> Vec<u8> {
    txn_batch_of(pid, 0, seq, n, transactional)
}

/// One record of producer `pid` at `epoch`.
fn txn_batch_at(pid: i64, epoch: i16, seq: i32, transactional: bool) -> Vec<u8> {
    txn_batch_of(pid, epoch, seq, 1, transactional)
}

fn txn_batch_of(pid: i64, epoch: i16, seq: i32, n: usize, transactional: bool) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(pid, epoch, seq);
    if transactional {
        b = b.transactional();
    }
    b.records((0..n).map(|i| (None, Some(Bytes::from(format!("v{i}"))), 1_000)))
        .encode()
        .unwrap()
}

fn write(
    p: &Partition,
    pid: i64,
    seq: i32,
    n: usize,
    transactional: bool,
) -> Result<i64, ResponseError> {
    let b = txn_batch(pid, seq, n, transactional);
    let headers = storage::batch::validate_batches(&b, 1 << 20).unwrap();
    match p.append(&b, &headers, None).map_err(|e| e.code)? {
        Appended::New(r) => Ok(r.base_offset),
        Appended::Duplicate { base_offset, .. } => Ok(base_offset),
    }
}

fn committed(p: &Partition, from: i64) -> (i64, Vec<(i64, i64)>) {
    let read = p.read_committed(from, 1 << 20).unwrap();
    (read.offsets.last_stable, read.aborted)
}

#[test]
fn open_transactions_hold_the_last_stable_offset_and_markers_release_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_at(dir.path(), "t");
    assert_eq!(write(&p, 1, 0, 2, true), Ok(0));
    assert_eq!(write(&p, 9, 0, 1, false), Ok(2));
    assert_eq!(write(&p, 2, 0, 2, true), Ok(3));
    assert_eq!(write(&p, 1, 2, 1, true), Ok(5));
    let o = p.offsets();
    assert_eq!((o.high_watermark, o.last_stable), (6, 0));
    // a plain batch inside an open transaction is refused
    assert_eq!(
        write(&p, 1, 3, 1, false),
        Err(ResponseError::InvalidTxnState)
    );
    // nothing is read_committed before the LSO
    let read = p.read_committed(0, 1 << 20).unwrap();
    assert!(read.records.is_empty() && read.aborted.is_empty());
    // producer 1 aborts: the LSO moves to producer 2's first offset
    assert_eq!(p.write_txn_marker(1, 0, 3, TxnResult::Abort, false), Ok(6));
    assert_eq!(committed(&p, 0), (3, vec![(1, 0)]));
    // fencing
    assert_eq!(
        p.write_txn_marker(1, 0, 2, TxnResult::Commit, false)
            .unwrap_err()
            .code,
        ResponseError::TransactionCoordinatorFenced
    );
    assert_eq!(
        p.write_txn_marker(2, -1, 3, TxnResult::Commit, false)
            .unwrap_err()
            .code,
        ResponseError::InvalidProducerEpoch
    );
    // producer 2 commits: everything is stable
    assert_eq!(p.write_txn_marker(2, 0, 3, TxnResult::Commit, false), Ok(7));
    assert_eq!(committed(&p, 0), (8, vec![(1, 0)]));
    assert_eq!(committed(&p, 7), (8, vec![]));
    let entries = p.lock().aborted.entries().to_vec();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (
            entries[0].first_offset,
            entries[0].last_offset,
            entries[0].last_stable_offset
        ),
        (0, 6, 3)
    );
    // a new transaction of producer 1 after the abort
    assert_eq!(write(&p, 1, 3, 1, true), Ok(8));
    assert_eq!(p.offsets().last_stable, 8);

    // a clean restart: snapshot and index carry it all
    p.close_log().unwrap();
    drop(p);
    let p = open_at(dir.path(), "t");
    assert_eq!(committed(&p, 0), (8, vec![(1, 0)]));
    assert_eq!(p.lock().aborted.entries(), entries.as_slice());
    assert_eq!(
        p.write_txn_marker(1, 0, 2, TxnResult::Commit, false)
            .unwrap_err()
            .code,
        ResponseError::TransactionCoordinatorFenced
    );
    assert_eq!(p.write_txn_marker(1, 0, 3, TxnResult::Abort, false), Ok(9));
    assert_eq!(committed(&p, 0), (10, vec![(1, 0), (1, 8)]));
    let entries = p.lock().aborted.entries().to_vec();

    // an unclean stop, every index file and snapshot lost: rebuilt from the log
    drop(p);
    let pdir = dir.path().join("t-0");
    for f in std::fs::read_dir(&pdir).unwrap() {
        let path = f.unwrap().path();
        let name = path.to_string_lossy().to_string();
        if name.ends_with(".txnindex") || name.ends_with(".snapshot") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let p = open_at(dir.path(), "t");
    assert_eq!(p.lock().aborted.entries(), entries.as_slice());
    assert_eq!(committed(&p, 0), (10, vec![(1, 0), (1, 8)]));
    assert!(!storage::txn_index::list(&pdir).unwrap().is_empty());
}

#[test]
fn a_follower_keeps_the_same_transactions_and_index() {
    let dir = tempfile::tempdir().unwrap();
    let leader = open_at(dir.path(), "l");
    write(&leader, 1, 0, 2, true).unwrap();
    write(&leader, 2, 0, 1, true).unwrap();
    leader
        .write_txn_marker(1, 0, 0, TxnResult::Abort, false)
        .unwrap();
    write(&leader, 3, 0, 1, true).unwrap();
    let follower = open_at(dir.path(), "f");
    let image = PartitionImage {
        index: 0,
        replicas: vec![1, 2],
        leader: 1,
        leader_epoch: 0,
        isr: vec![1, 2],
        partition_epoch: 1,
        adding_replicas: vec![],
        removing_replicas: vec![],
    };
    follower.apply_image(2, &image).unwrap();
    let mut at = 0;
    let end = leader.offsets().log_end;
    while at < end {
        let bytes = leader.with_log(|l| {
            let s = l.read(at, 1 << 20, i64::MAX).unwrap();
            let mut buf = vec![0u8; s.len as usize];
            std::os::unix::fs::FileExt::read_exact_at(&*s.file, &mut buf, s.position).unwrap();
            buf
        });
        follower.append_from_leader(&bytes, 0, end, 0).unwrap();
        at = follower.offsets().log_end;
    }
    assert_eq!(
        follower.lock().aborted.entries(),
        leader.lock().aborted.entries()
    );
    assert_eq!(follower.offsets().last_stable, 2);
    assert_eq!(committed(&follower, 0), committed(&leader, 0));
    // truncating the marker away reopens the transaction
    follower.truncate_to(3).unwrap();
    assert!(follower.lock().aborted.entries().is_empty());
    assert_eq!(follower.offsets().last_stable, 0);
    assert_eq!(
        follower
            .write_txn_marker(1, 0, 0, TxnResult::Abort, false)
            .unwrap_err()
            .code,
        ResponseError::NotLeaderOrFollower
    );
}

#[test]
fn an_ended_transaction_holds_the_lso_until_its_marker_is_replicated() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_at(dir.path(), "r");
    let image = PartitionImage {
        index: 0,
        replicas: vec![1, 2],
        leader: 1,
        leader_epoch: 0,
        isr: vec![1, 2],
        partition_epoch: 1,
        adding_replicas: vec![],
        removing_replicas: vec![],
    };
    p.apply_image(1, &image).unwrap();
    write(&p, 1, 0, 2, true).unwrap();
    write(&p, 9, 0, 1, false).unwrap();
    p.read_for_follower(2, 3, -1, 1 << 20).unwrap();
    assert_eq!(p.offsets().high_watermark, 3);
    assert_eq!(p.offsets().last_stable, 0);
    assert_eq!(p.write_txn_marker(1, 0, 0, TxnResult::Commit, false), Ok(3));
    // the follower lacks the marker: still unstable
    let o = p.offsets();
    assert_eq!((o.high_watermark, o.last_stable), (3, 0));
    p.read_for_follower(2, 4, -1, 1 << 20).unwrap();
    let o = p.offsets();
    assert_eq!((o.high_watermark, o.last_stable), (4, 4));
    assert!(p.lock().unreplicated.first_unstable(0).is_none(), "pruned");
}

#[test]
fn index_files_of_removed_segments_move_to_the_live_ones_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("s-0");
    let p = open_at(dir.path(), "s");
    let mut seq = 0;
    for _ in 0..12 {
        write(&p, 1, seq, 3, true).unwrap();
        seq += 3;
        p.write_txn_marker(1, 0, 0, TxnResult::Abort, false)
            .unwrap();
    }
    let bases = p.with_log(|l| l.segment_base_offsets());
    assert!(bases.len() > 2, "{bases:?}");
    let before = p.lock().aborted.entries().to_vec();
    assert_eq!(before.len(), 12);
    // retention takes the first segment away; its index file stays behind
    let cut = bases[1];
    p.with_log(|l| l.delete_records_before(cut)).unwrap();
    p.with_log(|l| l.enforce_retention(crate::clock::now_ms()))
        .unwrap();
    p.close_log().unwrap();
    drop(p);
    let p = open_at(dir.path(), "s");
    let start = p.offsets().log_start;
    let live = p.with_log(|l| l.segment_base_offsets());
    let kept: Vec<_> = before
        .iter()
        .filter(|e| e.last_offset >= start)
        .copied()
        .collect();
    assert_eq!(p.lock().aborted.entries(), kept.as_slice());
    for base in storage::txn_index::list(&pdir).unwrap() {
        assert!(
            live.contains(&base),
            "{base} is not a live segment: {live:?}"
        );
    }
}

#[test]
fn a_verification_lasts_until_the_transaction_opens_or_a_marker_ends_one() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_at(dir.path(), "verify");
    let verified_write = |seq: i32| {
        let b = txn_batch(1, seq, 1, true);
        let headers = storage::batch::validate_batches(&b, 1 << 20).unwrap();
        p.append_verified(&b, &headers, None).map_err(|e| e.code)
    };
    assert!(p.needs_verification(1, 0));
    assert_eq!(
        verified_write(0).unwrap_err(),
        ResponseError::InvalidTxnState,
        "not confirmed"
    );
    p.verified(1, 0);
    assert!(verified_write(0).is_ok());
    assert!(
        !p.needs_verification(1, 0),
        "open: later batches need no question"
    );
    assert!(verified_write(1).is_ok());
    p.write_txn_marker(1, 0, 0, TxnResult::Commit, false)
        .unwrap();
    assert!(p.needs_verification(1, 0));
    assert_eq!(
        verified_write(2).unwrap_err(),
        ResponseError::InvalidTxnState,
        "the confirmation was the ended transaction's"
    );
    // confirmed, then the transaction ends before the batch comes
    p.verified(1, 0);
    p.write_txn_marker(1, 0, 0, TxnResult::Abort, false)
        .unwrap();
    assert_eq!(
        verified_write(2).unwrap_err(),
        ResponseError::InvalidTxnState,
        "a batch that lost the race to the marker opens nothing"
    );
    p.verified(1, 7);
    assert_eq!(
        verified_write(2).unwrap_err(),
        ResponseError::InvalidTxnState,
        "confirmed for another epoch"
    );
    // the unverified path (verification off) is unchanged
    assert!(write(&p, 1, 2, 1, true).is_ok());
    // transaction version 2: the next transaction (epoch 1) writes while
    // the previous one (epoch 0) is open here, its marker at epoch 1 still
    // on its way: the batch is a first batch, not a continuation
    p.verified(1, 0);
    assert!(verified_write(2).is_ok());
    assert!(!p.needs_verification(1, 0));
    assert!(
        p.needs_verification(1, 1),
        "a newer epoch is a new transaction"
    );
    let next = txn_batch_at(1, 1, 0, true);
    let headers = storage::batch::validate_batches(&next, 1 << 20).unwrap();
    assert_eq!(
        p.append_verified(&next, &headers, None).unwrap_err().code,
        ResponseError::InvalidTxnState,
        "not added: it must not join the open transaction of epoch 0"
    );
    assert_eq!(
        p.write_txn_marker(1, 1, 0, TxnResult::Commit, true)
            .map(|_| ()),
        Ok(())
    );
}

/// Every record of the partition as (offset, key, value), control records
/// left out, read across segments and compaction gaps.
/// Every batch of `p`'s log: its header and bytes.
fn all_batches(p: &Partition) -> Vec<(storage::batch::BatchHeader, Vec<u8>)> {
    use std::os::unix::fs::FileExt;
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let slice = p.read_to_log_end(offset, 1 << 20).unwrap();
        if slice.is_empty() {
            return out;
        }
        let mut bytes = vec![0u8; slice.len as usize];
        slice
            .file
            .read_exact_at(&mut bytes, slice.position)
            .unwrap();
        let mut pos = 0;
        while pos < bytes.len() {
            let h = storage::batch::BatchHeader::parse(&bytes[pos..]).unwrap();
            let end = pos + h.total_size();
            offset = h.last_offset() + 1;
            out.push((h, bytes[pos..end].to_vec()));
            pos = end;
        }
    }
}

fn all_records(p: &Partition) -> Vec<(i64, String, String)> {
    let mut out = Vec::new();
    for (_, bytes) in all_batches(p) {
        for r in storage::batch::decode_records(&bytes).unwrap() {
            if !r.control {
                let text =
                    |b: Option<Bytes>| String::from_utf8_lossy(&b.unwrap_or_default()).to_string();
                out.push((r.offset, text(r.key), text(r.value)));
            }
        }
    }
    out
}

/// A compacted partition of small segments in `dir` (opened again if
/// there), cleaned at any dirty ratio.
fn compacted_partition(dir: &std::path::Path, delete_retention_ms: i64) -> Partition {
    let meta = TopicMeta {
        name: "compacted".into(),
        id: Uuid::nil(),
        partitions: 1,
        replication_factor: 1,
        configs: Default::default(),
        held: None,
    };
    let config = storage::LogConfig {
        segment_bytes: 400,
        compact: true,
        delete: false,
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms,
        ..storage::LogConfig::default()
    };
    let hws = Arc::new(HighWatermarks::open(dir).unwrap());
    Partition::open(&meta, 0, dir.join("compacted-0"), config, hws).unwrap()
}

/// Appends one keyed record, in a transaction of `pid` when `pid >= 0`.
fn append_keyed(p: &Partition, pid: i64, seq: i32, key: &str, value: &str) {
    let mut b = BatchBuilder::new();
    if pid >= 0 {
        b = b.producer(pid, 0, seq).transactional();
    }
    let b = b
        .record(
            Some(Bytes::from(key.to_string())),
            Some(Bytes::from(value.to_string())),
            1_000,
        )
        .encode()
        .unwrap();
    let headers = storage::batch::validate_batches(&b, 1 << 20).unwrap();
    p.append(&b, &headers, None).unwrap();
}

#[test]
fn compaction_drops_aborted_records_and_counts_committed_ones_at_their_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let p = compacted_partition(
        dir.path(),
        storage::LogConfig::default().delete_retention_ms,
    );
    let keyed = |pid: i64, seq: i32, key: &str, value: &str| append_keyed(&p, pid, seq, key, value);
    keyed(-1, 0, "k", "committed-before");
    keyed(1, 0, "k", "aborted");
    p.write_txn_marker(1, 0, 0, TxnResult::Abort, false)
        .unwrap();
    keyed(2, 0, "k", "committed-in-txn");
    keyed(-1, 0, "j", "plain-inside");
    p.write_txn_marker(2, 0, 0, TxnResult::Commit, false)
        .unwrap();
    for i in 0..8 {
        keyed(-1, 0, "filler", &format!("f{i}"));
    }
    keyed(3, 0, "j", "open");
    for i in 8..20 {
        keyed(-1, 0, "filler", &format!("f{i}"));
    }
    let stable = p.offsets().last_stable;
    assert_eq!(stable, 14, "producer 3's transaction holds it");

    let mut cleaned = 0;
    for _ in 0..3 {
        if let storage::CompactionPlan::Pass(mut pass) = p.plan_compaction(i64::MAX / 2).unwrap() {
            let ran = pass.run(&storage::cleaner::Throttle::unlimited());
            p.with_log(|l| l.finish_compaction(pass, ran)).unwrap();
            cleaned += 1;
        }
    }
    assert!(cleaned > 0, "a pass ran");
    let records = all_records(&p);
    let of = |key: &str| -> Vec<String> {
        records
            .iter()
            .filter(|r| r.1 == key)
            .map(|r| r.2.clone())
            .collect()
    };
    assert_eq!(
        of("k"),
        vec!["committed-in-txn".to_string()],
        "the aborted record is gone and did not erase the commit before it"
    );
    assert_eq!(
        of("j"),
        vec!["plain-inside".to_string(), "open".to_string()],
        "the open transaction's record neither goes nor counts"
    );
    let fillers = of("filler");
    assert!(
        fillers.len() < 20 && fillers.contains(&"f19".to_string()),
        "fillers below the last stable offset were cleaned, the latest kept: {fillers:?}"
    );
    assert_eq!(
        records.iter().filter(|r| r.0 >= stable).count(),
        13,
        "nothing at or past the last stable offset was cleaned (the open record, f8..f19)"
    );
    // the transactions read the same way after the pass
    assert_eq!(p.offsets().last_stable, stable);
    p.write_txn_marker(3, 0, 0, TxnResult::Commit, false)
        .unwrap();
}

#[test]
fn compaction_marks_then_drops_the_markers_of_transactions_whose_records_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let p = compacted_partition(dir.path(), 1_000);
    let keyed = append_keyed;
    // producer 1: an aborted transaction (its record goes at once), then a
    // committed one that stays
    keyed(&p, 1, 0, "a", "aborted");
    p.write_txn_marker(1, 0, 0, TxnResult::Abort, false)
        .unwrap();
    keyed(&p, 1, 1, "b", "kept");
    p.write_txn_marker(1, 0, 0, TxnResult::Commit, false)
        .unwrap();
    // producer 2: a committed record a plain write supersedes, then another
    // transaction (so the first marker is not the producer's last batch)
    keyed(&p, 2, 0, "c", "superseded");
    p.write_txn_marker(2, 0, 0, TxnResult::Commit, false)
        .unwrap();
    keyed(&p, -1, 0, "c", "plain");
    keyed(&p, 2, 1, "d", "kept");
    p.write_txn_marker(2, 0, 0, TxnResult::Commit, false)
        .unwrap();
    for i in 0..12 {
        keyed(&p, -1, 0, "filler", &format!("f{i}"));
    }
    let markers = |p: &Partition| -> Vec<(i64, i64, Option<i64>)> {
        all_batches(p)
            .into_iter()
            .filter(|(h, _)| h.is_control())
            .map(|(h, _)| (h.producer_id, h.base_offset, h.delete_horizon_ms()))
            .collect()
    };
    let before = markers(&p);
    assert_eq!(before.len(), 4);
    assert!(before.iter().all(|m| m.2.is_none()));
    let pass_at = |p: &Partition, now: i64| -> bool {
        match p.plan_compaction(now).unwrap() {
            storage::CompactionPlan::Pass(mut pass) => {
                let ran = pass.run(&storage::cleaner::Throttle::unlimited());
                p.with_log(|l| l.finish_compaction(pass, ran)).unwrap();
                true
            }
            storage::CompactionPlan::Nothing(_) => false,
        }
    };
    let t = 10_000_000i64;
    assert!(pass_at(&p, t), "the first pass runs");
    let marked = markers(&p);
    let (aborted_marker, first_commit_of_2) = (before[0], before[2]);
    assert_eq!(
        marked,
        vec![
            (1, aborted_marker.1, Some(t + 1_000)),
            before[1],
            (2, first_commit_of_2.1, Some(t + 1_000)),
            before[3],
        ],
        "markers whose transactions lost every record carry the delete horizon; the others are untouched"
    );
    // before the horizon nothing is due; after it the marked markers go
    assert!(!pass_at(&p, t + 500), "no pass is due before the horizon");
    assert!(pass_at(&p, t + 1_000), "the horizon schedules a pass");
    assert_eq!(markers(&p), vec![before[1], before[3]]);
    let records = all_records(&p);
    for (key, value) in [("b", "kept"), ("c", "plain"), ("d", "kept")] {
        assert!(
            records.iter().any(|r| r.1 == key && r.2 == value),
            "{key}={value} kept: {records:?}"
        );
    }
    // the log reads back whole: no transaction left open by a lost marker
    let end = p.offsets().high_watermark;
    assert_eq!(p.offsets().last_stable, end);
    drop(p);
    let reopened = compacted_partition(dir.path(), 1_000);
    assert_eq!(
        reopened.offsets().last_stable,
        reopened.offsets().high_watermark
    );
    assert_eq!(markers(&reopened), vec![before[1], before[3]]);
}

#[test]
fn a_new_transaction_cannot_reuse_the_sequences_of_a_batch_before_the_last_marker() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_at(dir.path(), "reuse");
    // the aborted transaction's batch was written, though its client
    // dropped it as unsent when it aborted
    assert_eq!(write(&p, 1, 0, 1, true), Ok(0));
    p.write_txn_marker(1, 0, 0, TxnResult::Abort, false)
        .unwrap();
    // the next transaction's first batch comes with the same sequence: not
    // acknowledged as a duplicate (its records would be lost)
    assert_eq!(
        write(&p, 1, 0, 1, true),
        Err(ResponseError::OutOfOrderSequenceNumber)
    );
    // the right sequence opens the transaction, and a retry inside it is
    // still a duplicate
    assert_eq!(write(&p, 1, 1, 1, true), Ok(2));
    assert_eq!(write(&p, 1, 1, 1, true), Ok(2));
    p.write_txn_marker(1, 0, 0, TxnResult::Commit, false)
        .unwrap();
    // an idempotent producer without transactions keeps Kafka's rule
    assert_eq!(write(&p, 7, 0, 1, false), Ok(4));
    assert_eq!(write(&p, 7, 0, 1, false), Ok(4));
}
