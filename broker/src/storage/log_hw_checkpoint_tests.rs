//! Tests of the high watermark checkpoint taken under the log's lock and
//! written outside it (`PartitionLog::take_high_watermark_checkpoint`):
//! appends never write it, and a checkpoint taken before the log wrote its
//! checkpoints itself, moved or deleted its directory never lands over
//! what the log wrote (real files in temp dirs).

use bytes::Bytes;

use super::*;

const NOW: i64 = 1_700_000_000_000;

fn append(log: &mut PartitionLog, n: usize) {
    let b = crate::storage::test_batches::batch_of(n, NOW, |i| {
        (None, Some(Bytes::from(format!("value-{i}"))))
    });
    log.append(&b, 0, NOW).unwrap();
}

fn hw_file(dir: &Path) -> Option<i64> {
    checkpoint::read_checkpoint(dir, checkpoint::HIGH_WATERMARK_FILE).unwrap()
}

#[test]
fn appends_leave_the_checkpoint_to_the_taker_which_writes_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), LogConfig::default(), NOW).unwrap();
    append(&mut log, 3);
    log.set_high_watermark(3);
    // long past the interval: the append path still writes nothing
    log.maybe_flush(NOW + 60_000).unwrap();
    assert!(
        !log.append_may_block(100, 1, 1, NOW + 60_000),
        "no fsync is due on append"
    );
    append(&mut log, 1);
    assert_eq!(hw_file(dir.path()), None);

    let taken = log.take_high_watermark_checkpoint().expect("changed: due");
    assert_eq!(taken.value(), 3);
    // the log goes on meanwhile (in the broker: its lock is free)
    log.set_high_watermark(4);
    let outcome = taken.write().unwrap();
    assert!(matches!(
        outcome,
        HighWatermarkWrite::Written { value: 3, .. }
    ));
    log.high_watermark_checkpointed(outcome);
    assert_eq!(hw_file(dir.path()), Some(3));
    // 4 is not on disk yet: due again, then not any more
    let taken = log.take_high_watermark_checkpoint().expect("4 is due");
    log.high_watermark_checkpointed(taken.write().unwrap());
    assert_eq!(hw_file(dir.path()), Some(4));
    assert!(
        log.take_high_watermark_checkpoint().is_none(),
        "unchanged: nothing to write"
    );
}

#[test]
fn a_checkpoint_taken_before_a_flush_never_lands_over_the_flushed_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), LogConfig::default(), NOW).unwrap();
    append(&mut log, 8);
    log.set_high_watermark(5);
    let stale = log.take_high_watermark_checkpoint().unwrap();
    log.set_high_watermark(8);
    log.flush().unwrap();
    assert_eq!(hw_file(dir.path()), Some(8));
    let outcome = stale.write().unwrap();
    assert_eq!(outcome, HighWatermarkWrite::Superseded);
    log.high_watermark_checkpointed(outcome);
    assert_eq!(hw_file(dir.path()), Some(8), "the flushed value stays");
    assert!(
        log.take_high_watermark_checkpoint().is_none(),
        "8 is on disk"
    );

    // written first, then the log flushes a newer value before the write
    // is recorded: the record must not claim the file holds the older one
    log.set_high_watermark(6);
    let taken = log.take_high_watermark_checkpoint().unwrap();
    let written = taken.write().unwrap();
    log.set_high_watermark(7);
    log.flush().unwrap();
    log.high_watermark_checkpointed(written);
    assert_eq!(hw_file(dir.path()), Some(7));
    assert!(
        log.take_high_watermark_checkpoint().is_none(),
        "7 is on disk and recorded"
    );
}

#[test]
fn a_checkpoint_taken_before_the_directory_moved_or_went_writes_nothing() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("t-0");
    let mut log = PartitionLog::open(&dir, LogConfig::default(), NOW).unwrap();
    append(&mut log, 2);
    log.set_high_watermark(2);
    let stale = log.take_high_watermark_checkpoint().unwrap();
    let moved = parent.path().join("t-0.deleting");
    log.rename_dir(&moved).unwrap();
    // a new partition of the same name where the old one was
    fs::create_dir(&dir).unwrap();
    assert_eq!(stale.write().unwrap(), HighWatermarkWrite::Superseded);
    assert_eq!(
        hw_file(&dir),
        None,
        "nothing written into the new directory"
    );
    assert_eq!(hw_file(&moved), None);

    let stale = log.take_high_watermark_checkpoint().unwrap();
    log.delete().unwrap();
    assert_eq!(stale.write().unwrap(), HighWatermarkWrite::Superseded);
    assert!(!moved.exists(), "not recreated by the stale checkpoint");
}

#[test]
fn a_closed_log_has_no_checkpoint_to_take_and_one_taken_before_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), LogConfig::default(), NOW).unwrap();
    append(&mut log, 2);
    log.set_high_watermark(1);
    let stale = log.take_high_watermark_checkpoint().unwrap();
    log.set_high_watermark(2);
    log.close_in_place().unwrap();
    assert_eq!(stale.write().unwrap(), HighWatermarkWrite::Superseded);
    assert_eq!(
        hw_file(dir.path()),
        Some(2),
        "the close wrote the last value"
    );
    assert!(log.take_high_watermark_checkpoint().is_none());
}
