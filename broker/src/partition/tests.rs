//! Unit tests of a partition: the producers' state across restarts, the
//! high watermark checkpoint, the leader's commits and ISR changes, and the
//! follower's copying of the leader's log.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::*;
use crate::error::TopicError;
use crate::image::PartitionImage;
use crate::metadata::TopicMeta;
use crate::storage;
use crate::storage::high_watermarks::{self, HighWatermarks};

fn batch(values: usize) -> Vec<u8> {
    crate::storage::test_batches::batch_of(values, 1_000, |i| {
        (None, Some(Bytes::from(format!("v{i}"))))
    })
}

fn append(p: &Partition, records: usize, min_isr: Option<usize>) -> Result<i64, TopicError> {
    let b = batch(records);
    let headers = crate::storage::batch::validate_batches(&b, 1 << 20).unwrap();
    match p.append(&b, &headers, min_isr)? {
        Appended::New(r) => Ok(r.last_offset + 1),
        Appended::Duplicate { .. } => panic!("no producer ids here"),
    }
}

fn high_watermarks_of(dir: &std::path::Path) -> Arc<HighWatermarks> {
    Arc::new(HighWatermarks::open(dir).unwrap())
}

fn open(dir: &std::path::Path) -> Partition {
    let meta = TopicMeta {
        name: "t".into(),
        id: Uuid::new_v4(),
        partitions: 1,
        replication_factor: 3,
        configs: Default::default(),
        held: None,
    };
    Partition::open(
        &meta,
        0,
        dir.join("t-0"),
        storage::LogConfig::default(),
        high_watermarks_of(dir),
    )
    .unwrap()
}

/// One batch of `n` records of idempotent producer `pid` in `epoch`,
/// sequences `seq..seq + n`.
fn idempotent(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    crate::storage::test_batches::idempotent_batch_of(pid, epoch, seq, n, 1_000, |_| {
        (None, Some(Bytes::from(vec![b'v'; 30])))
    })
}

fn produce(p: &Partition, pid: i64, seq: i32, n: usize) -> Result<Appended, TopicError> {
    let b = idempotent(pid, 0, seq, n);
    let headers = crate::storage::batch::validate_batches(&b, 1 << 20).unwrap();
    p.append(&b, &headers, None)
}

/// A partition of a replication factor 1 topic with small segments.
fn open_small(dir: &std::path::Path) -> Partition {
    let meta = TopicMeta {
        name: "t".into(),
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
    Partition::open(&meta, 0, dir.join("t-0"), config, high_watermarks_of(dir)).unwrap()
}

/// Producer 1 writes `rounds` batches of 2 records from sequence
/// `from`, producer 2 one record each; returns the next sequences.
fn write_rounds(p: &Partition, rounds: i32, from: (i32, i32)) -> (i32, i32) {
    let (mut s1, mut s2) = from;
    for _ in 0..rounds {
        assert!(matches!(produce(p, 1, s1, 2).unwrap(), Appended::New(_)));
        assert!(matches!(produce(p, 2, s2, 1).unwrap(), Appended::New(_)));
        s1 += 2;
        s2 += 1;
    }
    (s1, s2)
}

fn producers_of(p: &Partition) -> Vec<crate::storage::producer_snapshot::SnapshotEntry> {
    p.lock().producers.to_snapshot()
}

/// The answers the restored state gives: a retry of producer 1's last
/// batch is a duplicate at its first offset (nothing appended), a gap
/// is OUT_OF_ORDER_SEQUENCE, the next sequence appends.
fn assert_deduplicates(p: &Partition, next1: i32, last_batch_offset: i64) {
    let end = p.offsets().log_end;
    match produce(p, 1, next1 - 2, 2).unwrap() {
        Appended::Duplicate { base_offset, .. } => assert_eq!(base_offset, last_batch_offset),
        other => panic!("a retry was appended: {other:?}"),
    }
    assert_eq!(p.offsets().log_end, end, "no second copy");
    assert_eq!(
        produce(p, 1, next1 + 1, 1).unwrap_err().code,
        ResponseError::OutOfOrderSequenceNumber
    );
    assert!(matches!(produce(p, 1, next1, 1).unwrap(), Appended::New(_)));
}

fn last_batch_of_producer_1(p: &Partition) -> i64 {
    let entries = producers_of(p);
    entries[0].batches.last().unwrap().first_offset
}

#[test]
fn producer_state_survives_a_clean_restart_without_reading_batches() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_small(dir.path());
    let (s1, _) = write_rounds(&p, 20, (0, 0));
    assert!(p.with_log(|l| l.segment_count()) > 2);
    let before = producers_of(&p);
    let last = last_batch_of_producer_1(&p);
    let end = p.offsets().log_end;
    p.close_log().unwrap();
    drop(p);
    let snapshots = crate::storage::producer_snapshot::list(&dir.path().join("t-0")).unwrap();
    assert_eq!(snapshots.len(), 2, "{snapshots:?}");
    assert_eq!(snapshots.last(), Some(&end));

    let p = open_small(dir.path());
    assert_eq!(
        p.producer_state_load(),
        ProducerStateLoad {
            snapshot_loaded: true,
            bytes_read: 0
        }
    );
    let report = p.with_log(|l| l.open_report());
    assert!(!report.unclean);
    assert_eq!(report.bytes_read, 0);
    assert_eq!(producers_of(&p), before);
    assert_deduplicates(&p, s1, last);
}

#[test]
fn producer_state_survives_an_unclean_restart_reading_only_after_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("t-0");
    let p = open_small(dir.path());
    let next = write_rounds(&p, 10, (0, 0));
    p.with_log(|l| l.flush()).unwrap();
    let recovery_point = p.offsets().log_end;
    let (s1, _) = write_rounds(&p, 10, next);
    let before = producers_of(&p);
    let last = last_batch_of_producer_1(&p);
    drop(p); // kill -9: no snapshot at the end, no clean-shutdown marker
    let snapshots = crate::storage::producer_snapshot::list(&pdir).unwrap();
    let usable = *snapshots
        .iter()
        .rev()
        .find(|&&o| o <= recovery_point)
        .expect("a snapshot at or below the recovery point is kept");
    assert!(usable > 0);

    // What a full scan reads: a header per batch.
    let total_batches = 40;
    let header = crate::storage::batch::BATCH_HEADER_LEN as u64;
    let p = open_small(dir.path());
    let load = p.producer_state_load();
    assert!(load.snapshot_loaded);
    let after = p.with_log(|l| {
        let mut n = 0u64;
        l.for_each_header_from(usable, |_| n += 1).unwrap();
        n
    });
    assert_eq!(load.bytes_read, after * header);
    assert!(after > 0 && after < total_batches, "{after}");
    assert!(p.with_log(|l| l.open_report()).unclean);
    assert_eq!(producers_of(&p), before);
    assert_deduplicates(&p, s1, last);
    let state = producers_of(&p);
    drop(p);

    // Every snapshot unusable (bad CRC): a full scan gives the same state.
    for o in crate::storage::producer_snapshot::list(&pdir).unwrap() {
        let path = pdir.join(crate::storage::producer_snapshot::file_name(o));
        let mut b = std::fs::read(&path).unwrap();
        let n = b.len();
        b[n - 1] ^= 1;
        std::fs::write(&path, b).unwrap();
    }
    let p = open_small(dir.path());
    assert!(!p.producer_state_load().snapshot_loaded);
    assert!(p.producer_state_load().bytes_read > after * header);
    assert_eq!(producers_of(&p), state);
}

fn image(leader: i32, epoch: i32, isr: &[i32], partition_epoch: i32) -> PartitionImage {
    PartitionImage {
        index: 0,
        replicas: vec![1, 2, 3],
        leader,
        leader_epoch: epoch,
        isr: isr.to_vec(),
        partition_epoch,
        adding_replicas: vec![],
        removing_replicas: vec![],
    }
}

/// A replicated leader with two batches of `records` records, all
/// committed.
fn open_committed(dir: &std::path::Path, records: usize) -> Partition {
    let p = open(dir);
    p.apply_image(1, &image(1, 0, &[1], 1)).unwrap();
    append(&p, records, None).unwrap();
    append(&p, records, None).unwrap();
    p
}

#[test]
fn a_replica_opens_at_the_data_directorys_checkpoint_before_its_own_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_committed(dir.path(), 3);
    assert_eq!(p.offsets().high_watermark, 6);
    let key = p.key();
    p.close_log().unwrap();
    drop(p);
    let part_dir = dir.path().join("t-0");
    // an older broker's file, and no entry in the directory's file
    storage::checkpoint::write_checkpoint(&part_dir, high_watermarks::LEGACY_FILE, 2).unwrap();
    let hws = high_watermarks_of(dir.path());
    assert_eq!(hws.checkpointed(key), None);
    let meta = TopicMeta {
        name: "t".into(),
        id: key.topic_id,
        partitions: 1,
        replication_factor: 3,
        configs: Default::default(),
        held: None,
    };
    let reopen = |hws: Arc<HighWatermarks>| {
        Partition::open(&meta, 0, part_dir.clone(), Default::default(), hws).unwrap()
    };
    let p = reopen(hws);
    assert_eq!(p.offsets().high_watermark, 2, "the old file's value");
    p.close_log().unwrap();
    drop(p);
    // the directory's entry wins, and the old file goes
    let hws = high_watermarks_of(dir.path());
    hws.write_one(key, p_entry(4)).unwrap();
    let p = reopen(high_watermarks_of(dir.path()));
    assert_eq!(p.offsets().high_watermark, 4);
    assert!(!part_dir.join(high_watermarks::LEGACY_FILE).exists());
    p.close_log().unwrap();
    drop(p);
    // clamped to the log end, whatever the file says
    high_watermarks_of(dir.path())
        .write_one(key, p_entry(60))
        .unwrap();
    let p = reopen(high_watermarks_of(dir.path()));
    assert_eq!(p.offsets().high_watermark, 6);
}

fn p_entry(high_watermark: i64) -> high_watermarks::Entry {
    high_watermarks::Entry {
        topic: "t".into(),
        high_watermark,
    }
}

#[test]
fn a_truncation_rewrites_the_high_watermark_checkpoint_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_committed(dir.path(), 3);
    let key = p.key();
    let hws = Arc::clone(&p.high_watermarks);
    let since = hws.generation();
    let gathered = high_watermarks::Entries::from([(key, p_entry(6))]);
    // it becomes a follower whose log diverged after offset 3
    p.apply_image(1, &image(2, 1, &[2], 2)).unwrap();
    p.truncate_to(3).unwrap();
    assert_eq!(p.offsets().high_watermark, 3);
    assert_eq!(high_watermarks_of(dir.path()).checkpointed(key), Some(3));
    // the 6 gathered before the truncation is not written over it
    assert_eq!(
        hws.write_all(since, gathered).unwrap(),
        high_watermarks::WriteOutcome::Superseded
    );
    assert_eq!(high_watermarks_of(dir.path()).checkpointed(key), Some(3));
}

#[test]
fn a_leader_commits_what_every_in_sync_replica_has() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path());
    p.apply_image(1, &image(1, 4, &[1, 2, 3], 7)).unwrap();
    let end = append(&p, 3, Some(2)).unwrap();
    assert_eq!(end, 3);
    assert_eq!(p.offsets().high_watermark, 0, "no follower has it yet");
    assert_eq!(p.ack_state(end, 4, 2), AckState::Waiting);
    // follower 2 has it all, follower 3 nothing yet
    let read = p.read_for_follower(2, 3, -1, 1 << 20).unwrap();
    assert!(read.isr_expansion.is_none());
    assert_eq!(p.offsets().high_watermark, 0);
    p.read_for_follower(3, 1, -1, 1 << 20).unwrap();
    assert_eq!(p.offsets().high_watermark, 1, "the slowest in-sync replica");
    p.read_for_follower(3, 3, -1, 1 << 20).unwrap();
    assert_eq!(p.offsets().high_watermark, 3);
    assert_eq!(p.ack_state(end, 4, 2), AckState::Done);
    // consumers see only what is committed; followers read past it
    let more = append(&p, 2, None).unwrap();
    assert_eq!(more, 5);
    let (consumer, _) = p.read(3, 1 << 20).unwrap();
    assert!(consumer.is_empty(), "nothing above the high watermark");
    let loader = p.read_to_log_end(3, 1 << 20).unwrap();
    assert!(!loader.is_empty(), "a state loader reads to the log end");
    let follower = p.read_for_follower(2, 3, -1, 1 << 20).unwrap();
    assert!(follower.records.is_some_and(|r| !r.is_empty()));
    // a replica id that is not a replica is refused
    assert_eq!(
        p.read_for_follower(9, 0, -1, 1 << 20).err(),
        Some(ResponseError::NotLeaderOrFollower)
    );
}

#[test]
fn acks_all_needs_min_insync_replicas_before_and_after_the_append() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path());
    p.apply_image(1, &image(1, 0, &[1], 3)).unwrap();
    let refused = append(&p, 1, Some(2)).unwrap_err();
    assert_eq!(refused.code, ResponseError::NotEnoughReplicas);
    // acks=1 is not held to the minimum; alone, the leader commits at once
    let end = append(&p, 1, None).unwrap();
    assert_eq!(p.offsets().high_watermark, end);
    assert_eq!(p.ack_state(end, 0, 1), AckState::Done);
    assert_eq!(
        p.ack_state(end, 0, 2),
        AckState::Failed(ResponseError::NotEnoughReplicasAfterAppend)
    );
    // leadership moved: waiters fail, appends are refused
    p.apply_image(1, &image(2, 1, &[2], 4)).unwrap();
    assert_eq!(
        p.ack_state(end, 0, 1),
        AckState::Failed(ResponseError::NotLeaderOrFollower)
    );
    assert_eq!(
        append(&p, 1, None).unwrap_err().code,
        ResponseError::NotLeaderOrFollower
    );
}

#[test]
fn a_caught_up_follower_is_proposed_for_the_isr_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path());
    p.apply_image(1, &image(1, 2, &[1, 2], 5)).unwrap();
    let end = append(&p, 4, None).unwrap();
    p.read_for_follower(2, end, -1, 1 << 20).unwrap();
    assert_eq!(p.offsets().high_watermark, end);
    // 3 is behind: not yet
    let behind = p.read_for_follower(3, 1, -1, 1 << 20).unwrap();
    assert!(behind.isr_expansion.is_none());
    let caught_up = p.read_for_follower(3, end, -1, 1 << 20).unwrap();
    let proposal = caught_up.isr_expansion.expect("proposed");
    assert_eq!(
        (
            proposal.isr.clone(),
            proposal.leader_epoch,
            proposal.partition_epoch
        ),
        (vec![1, 2, 3], 2, 5)
    );
    // pending: not proposed twice
    let again = p.read_for_follower(3, end, -1, 1 << 20).unwrap();
    assert!(again.isr_expansion.is_none());
    p.isr_answered(&proposal, Some((vec![1, 2, 3], 6)));
    // committed: the ISR counts 3 for min.insync.replicas
    assert!(append(&p, 1, Some(3)).is_ok());
}

#[test]
fn a_follower_that_stops_fetching_is_proposed_out_of_the_isr() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path());
    p.apply_image(1, &image(1, 0, &[1, 2, 3], 1)).unwrap();
    let end = append(&p, 1, None).unwrap();
    p.read_for_follower(2, end, -1, 1 << 20).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    p.read_for_follower(2, end, -1, 1 << 20).unwrap();
    let shrink = p.isr_shrink(20).expect("3 lags");
    assert_eq!(shrink.isr, vec![1, 2]);
    assert!(p.isr_shrink(20).is_none(), "one change pending at a time");
    // refused (a newer partition epoch exists): the next image decides
    p.isr_answered(&shrink, None);
    p.apply_image(1, &image(1, 0, &[1, 2], 2)).unwrap();
    assert_eq!(p.offsets().high_watermark, end, "2 alone holds it back");
}

#[test]
fn a_follower_copies_the_leaders_bytes_and_its_high_watermark_and_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let leader = open(&dir.path().join("leader"));
    let follower = open(&dir.path().join("follower"));
    leader.apply_image(1, &image(1, 3, &[1, 2], 1)).unwrap();
    follower.apply_image(2, &image(1, 3, &[1, 2], 1)).unwrap();
    let end = append(&leader, 4, None).unwrap();
    let read = leader.read_for_follower(2, 0, -1, 1 << 20).unwrap();
    let slice = read.records.unwrap();
    let mut bytes = vec![0u8; slice.len as usize];
    std::os::unix::fs::FileExt::read_exact_at(&*slice.file, &mut bytes, slice.position).unwrap();
    follower
        .append_from_leader(&bytes, 3, read.offsets.high_watermark, 0)
        .unwrap();
    assert_eq!(follower.offsets().log_end, end);
    assert_eq!(
        follower.offsets().high_watermark,
        0,
        "the leader's, not yet moved"
    );
    // its next fetch moves the leader's high watermark, then its own
    let next = leader.read_for_follower(2, end, -1, 1 << 20).unwrap();
    assert_eq!(next.offsets.high_watermark, end);
    follower.append_from_leader(&[], 3, end, 2).unwrap();
    let offsets = follower.offsets();
    assert_eq!((offsets.high_watermark, offsets.log_start), (end, 2));
    // the leader's epoch history came with the batches
    assert_eq!(follower.fetch_position().last_epoch, 3);
    // appends of another epoch are refused
    assert_eq!(
        follower
            .append_from_leader(&[], 4, end, 2)
            .unwrap_err()
            .code,
        ResponseError::FencedLeaderEpoch
    );
}

#[test]
fn a_followers_offset_lag_is_what_it_lacks_of_the_leaders_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let leader = open(&dir.path().join("leader"));
    let follower = open(&dir.path().join("follower"));
    leader.apply_image(1, &image(1, 3, &[1, 2], 1)).unwrap();
    follower.apply_image(2, &image(1, 3, &[1, 2], 1)).unwrap();
    assert_eq!(follower.offset_lag(), 0, "no word from the leader yet");
    let end = append(&leader, 4, None).unwrap();
    follower.append_from_leader(&[], 3, end, 0).unwrap();
    assert_eq!(follower.offset_lag(), end, "it has none of the 4 records");
    let read = leader.read_for_follower(2, 0, -1, 1 << 20).unwrap();
    let slice = read.records.unwrap();
    let mut bytes = vec![0u8; slice.len as usize];
    std::os::unix::fs::FileExt::read_exact_at(&*slice.file, &mut bytes, slice.position).unwrap();
    follower.append_from_leader(&bytes, 3, end, 0).unwrap();
    assert_eq!(follower.offset_lag(), 0, "caught up");
    assert_eq!(leader.offset_lag(), 0, "a leader lags nobody");
    assert!(follower.size_bytes() > 0);
    assert_eq!(follower.size_bytes(), leader.size_bytes(), "byte for byte");
}
