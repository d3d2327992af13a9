//! Fuzz check `log_recovery`: a partition directory as found on disk after
//! a crash (or a clean stop), opened and recovered by the storage layer,
//! then read back as consumers and ListOffsets would.
//!
//! Input: `flags u8`, then the fields the flags ask for, then the `.log`:
//! - `flags & 0x02`: `len u16 | bytes` of `00000000000000000000.index`;
//! - `flags & 0x04`: `len u16 | bytes` of `00000000000000000000.timeindex`;
//! - `flags & 0x20`: `base u64 | split u32`: the log is cut at `split` and
//!   its tail is a second segment with base offset `base` (below 2^40);
//! - `flags & 0x80`: `len u16 | bytes` of `00000000000000000000.txnindex`
//!   (aborted transactions), then `len u16 | bytes` of a producer-state
//!   snapshot, named after the offset it claims (bytes 10..18, when that
//!   is in `0..2^40`, else 0);
//! - the rest: `00000000000000000000.log`.
//!
//! Other flags: `0x01` clean shutdown (the `.clean-shutdown` marker and a
//! recovery point checkpoint: segments are trusted, not re-validated);
//! `0x08` recompute the CRC of every batch first (mutations then reach the
//! code behind the CRC check); `0x10` a cleaner checkpoint (segments count
//! as compacted: offset gaps allowed); `0x40` close and reopen (a clean
//! restart) after the reads, then read again.
//! Seeds are segments written by the broker for real clients' produces,
//! and segments with transactions (`txn-*`: transactional batches of two
//! producers, COMMIT and ABORT markers, an open transaction, with and
//! without `.txnindex` and snapshot) built by `tests/seeds.rs`.
//!
//! Exercises `PartitionLog::open` (inventory, checkpoints, `Segment::recover`
//! or `Segment::load_trusted` with index sanity checks and header scans,
//! truncation of torn tails, removal of segments after a truncated one),
//! then `read` from the log start to the log end (fetch-style, small and
//! large `max_bytes`), `offset_for_timestamp` at several timestamps (which
//! decodes batches) and `max_timestamp`; then `close` and a reopen.
//!
//! With `0x80` the directory is instead the one partition of a data
//! directory opened as the broker starts (`TopicManager::open`:
//! `Partition::open`, which also rebuilds the producers' state from the
//! newest usable snapshot and the batches after it, and the aborted
//! transactions from the `.txnindex` files and the markers the replay
//! meets), then read at read_committed, closed cleanly and opened again.
//!
//! Asserts: no panic, abort or out-of-memory; any error is fine. After an
//! unclean open (everything re-validated) every read returns whole batches
//! that pass `validate_one`, in offset order, each read makes progress, and
//! a clean restart serves exactly the same bytes. With `0x80`: log start ≤
//! last stable offset ≤ high watermark ≤ log end; every entry the
//! `.txnindex` files hold after the open names a marker inside the log
//! (log start ≤ its offset < log end); a read_committed fetch reports only
//! aborted transactions that began below the last stable offset; and after
//! an unclean open, a clean restart keeps the offsets and the aborted
//! transactions (unless the input's snapshot sits at the log end: the
//! close then keeps it, and it need not agree with the log).

use crate::common;

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use std::collections::BTreeMap;

use moldau_broker::config::BrokerConfig;
use moldau_broker::storage::batch::{validate_one, BatchHeader};
use moldau_broker::storage::{
    checkpoint, producer_snapshot, segment, txn_index, LogConfig, PartitionLog,
};
use moldau_broker::topics::TopicManager;

const NOW: i64 = 1_700_000_000_000;

/// The topic of the data directory of flag `0x80`: its partition 0 is the
/// directory under test.
const TOPIC: &str = "t";

thread_local! {
    /// The data directory of this thread (the bounded run checks inputs on
    /// several threads of one process); the partition directory under
    /// test is its `t-0`.
    static DATA: PathBuf = {
        let n = next_thread();
        common::scratch_dir("log_recovery").join(format!("t-{n}"))
    };
    /// A data directory holding topic `t` (one partition, the segment and
    /// index sizes of [`config`]), made once: its metadata files are
    /// copied into [`DATA`] for flag `0x80`.
    static TEMPLATE: PathBuf = {
        let n = next_thread();
        let dir = common::scratch_dir("log_recovery").join(format!("template-{n}"));
        let _ = fs::remove_dir_all(&dir);
        let topics = TopicManager::open(&dir, BrokerConfig::default()).expect("a data directory");
        let configs = BTreeMap::from([
            ("segment.bytes".to_string(), (1 << 20).to_string()),
            ("index.interval.bytes".to_string(), "128".to_string()),
            ("segment.index.bytes".to_string(), "4096".to_string()),
            ("retention.ms".to_string(), "-1".to_string()),
        ]);
        topics.create(TOPIC, 1, 1, configs).expect("create the topic");
        topics.close();
        dir
    };
}

fn next_thread() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 20,
        index_interval_bytes: 128,
        segment_index_bytes: 4096,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

fn write(dir: &Path, base: i64, suffix: &str, bytes: &[u8]) {
    fs::write(dir.join(segment::file_name(base, suffix)), bytes).expect("write a segment file");
}

/// Reads the whole log; returns the bytes served (empty if a read failed).
fn read_all(log: &PartitionLog, strict: bool, max_bytes: u64) -> Vec<u8> {
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset();
    let mut served = Vec::new();
    for _ in 0..10_000 {
        if offset >= end {
            break;
        }
        let Ok(slice) = log.read(offset, max_bytes, end) else {
            assert!(!strict, "read at {offset} of a validated log failed");
            return Vec::new();
        };
        if slice.is_empty() {
            break;
        }
        let mut bytes = vec![0u8; slice.len as usize];
        if slice
            .file
            .read_exact_at(&mut bytes, slice.position)
            .is_err()
        {
            assert!(!strict, "slice past the end of a validated segment");
            return Vec::new();
        }
        let mut pos = 0usize;
        let mut next = offset;
        while pos < bytes.len() {
            let Ok(h) = BatchHeader::parse(&bytes[pos..]) else {
                assert!(!strict, "served bytes of a validated log do not parse");
                break;
            };
            let Some(batch) = bytes.get(pos..pos + h.total_size()) else {
                assert!(!strict, "partial batch in a slice");
                break;
            };
            if strict {
                validate_one(batch).expect("served batches are valid");
                if pos == 0 {
                    assert!(h.base_offset <= offset && offset <= h.last_offset());
                } else {
                    assert_eq!(h.base_offset, next, "contiguous batches");
                }
            }
            next = h.last_offset().saturating_add(1);
            pos += h.total_size();
        }
        served.extend_from_slice(&bytes);
        if next <= offset {
            assert!(!strict, "a read made no progress at {offset}");
            break;
        }
        offset = next;
    }
    served
}

fn lookups(log: &PartitionLog) {
    let max = log.max_timestamp();
    let mut timestamps = vec![i64::MIN, -1, 0, NOW];
    if let Some((ts, _)) = max {
        timestamps.extend([ts, ts.saturating_sub(1), ts.saturating_add(1)]);
    }
    for ts in timestamps {
        let _ = log.offset_for_timestamp(ts);
    }
}

/// One input through the check (see the module doc).
pub fn run(data: &[u8]) {
    let mut input = common::Input::new(data);
    let flags = input.u8();
    let index = (flags & 0x02 != 0).then(|| {
        let n = usize::from(input.u16());
        input.bytes(n)
    });
    let time_index = (flags & 0x04 != 0).then(|| {
        let n = usize::from(input.u16());
        input.bytes(n)
    });
    let second = (flags & 0x20 != 0).then(|| {
        let base = (input.u64() & ((1 << 40) - 1)) as i64;
        let split = input.u32() as usize;
        (base, split)
    });
    let txns = (flags & 0x80 != 0).then(|| {
        let n = usize::from(input.u16());
        let index = input.bytes(n);
        let n = usize::from(input.u16());
        (index, input.bytes(n))
    });
    let mut log_bytes = input.rest.to_vec();
    if flags & 0x08 != 0 {
        common::fix_crcs(&mut log_bytes);
    }
    let clean = flags & 0x01 != 0;
    let compacted = flags & 0x10 != 0;

    let data = DATA.with(PathBuf::clone);
    let dir = data.join(format!("{TOPIC}-0"));
    let dir: &Path = &dir;
    let _ = fs::remove_dir_all(&data);
    fs::create_dir_all(dir).expect("create the partition directory");
    match second {
        Some((base, split)) if base > 0 => {
            let split = split.min(log_bytes.len());
            write(dir, 0, segment::LOG_SUFFIX, &log_bytes[..split]);
            write(dir, base, segment::LOG_SUFFIX, &log_bytes[split..]);
        }
        _ => write(dir, 0, segment::LOG_SUFFIX, &log_bytes),
    }
    if let Some(b) = index {
        write(dir, 0, segment::INDEX_SUFFIX, b);
    }
    if let Some(b) = time_index {
        write(dir, 0, segment::TIME_INDEX_SUFFIX, b);
    }
    if clean {
        checkpoint::write_checkpoint(dir, checkpoint::RECOVERY_POINT_FILE, i64::MAX)
            .expect("checkpoint");
        checkpoint::write_clean_shutdown(dir).expect("marker");
    }
    if compacted {
        checkpoint::write_checkpoint(dir, checkpoint::CLEANER_OFFSET_FILE, i64::MAX)
            .expect("checkpoint");
    }

    // Unclean and not compacted: every byte left was validated, in order.
    let strict = !clean && !compacted;
    if let Some((index, snapshot)) = txns {
        write(dir, 0, txn_index::TXN_INDEX_SUFFIX, index);
        let claimed = snapshot
            .get(10..18)
            .map(|b| i64::from_be_bytes(b.try_into().expect("8 bytes")))
            .filter(|o| (0..1 << 40).contains(o))
            .unwrap_or(0);
        fs::write(dir.join(producer_snapshot::file_name(claimed)), snapshot)
            .expect("write a snapshot");
        let template = TEMPLATE.with(PathBuf::clone);
        for entry in fs::read_dir(&template).expect("the template") {
            let entry = entry.expect("a template entry");
            if entry.file_type().expect("its type").is_file() {
                fs::copy(entry.path(), data.join(entry.file_name())).expect("copy");
            }
        }
        partition(&data, dir, strict, claimed);
        return;
    }

    let Ok(log) = PartitionLog::open(dir, config(), NOW) else {
        return;
    };
    let served = read_all(&log, strict, 1 << 20);
    let _ = read_all(&log, strict, 1);
    lookups(&log);
    let (start, end) = (log.log_start_offset(), log.log_end_offset());

    if flags & 0x40 != 0 && log.close().is_ok() {
        let Ok(log) = PartitionLog::open(dir, config(), NOW) else {
            assert!(!strict, "a validated, cleanly closed log reopens");
            return;
        };
        if strict {
            assert_eq!((log.log_start_offset(), log.log_end_offset()), (start, end));
        }
        let again = read_all(&log, strict, 1 << 20);
        if strict {
            assert_eq!(again, served, "a clean restart serves the same bytes");
        }
        lookups(&log);
    }
}

/// What a partition's transactions look like from outside: its offsets,
/// and the aborted transactions a read_committed fetch from the log start
/// reports.
type TxnView = (
    moldau_broker::partition::PartitionOffsets,
    Option<Vec<(i64, i64)>>,
);

/// The partition of data directory `data` (directory `dir`) opened as the
/// broker starts; the checks of flag `0x80` (see the module doc).
fn open_partition(data: &Path, dir: &Path) -> Option<(TopicManager, TxnView)> {
    let topics = TopicManager::open(data, BrokerConfig::default()).ok()?;
    let p = topics.partition(TOPIC, 0)?;
    let o = p.offsets();
    assert!(
        o.log_start <= o.last_stable
            && o.last_stable <= o.high_watermark
            && o.high_watermark <= o.log_end,
        "offsets out of order: {o:?}"
    );
    for base in txn_index::list(dir).expect("list the .txnindex files") {
        for e in txn_index::read(dir, base).expect("read a .txnindex file") {
            assert!(
                o.log_start <= e.last_offset && e.last_offset < o.log_end,
                "{e:?} in {} names a marker outside the log {o:?}",
                txn_index::file_name(base)
            );
        }
    }
    let aborted = p.read_committed(o.log_start, 1 << 20).ok().map(|r| {
        for (_, first) in &r.aborted {
            assert!(*first < r.offsets.last_stable, "{r:?}");
        }
        r.aborted
    });
    drop(p);
    Some((topics, (o, aborted)))
}

/// `snapshot_at`: the offset the input's snapshot file is named after.
fn partition(data: &Path, dir: &Path, strict: bool, snapshot_at: i64) {
    let Some((topics, first)) = open_partition(data, dir) else {
        return;
    };
    // A clean close writes no snapshot where one is already (as Kafka): if
    // the input's is at the log end, the restart starts from it, and an
    // input snapshot need not agree with the log it comes with.
    let strict = strict && snapshot_at != first.0.log_end;
    topics.close();
    drop(topics);
    let Some((topics, again)) = open_partition(data, dir) else {
        assert!(!strict, "a validated, cleanly closed partition reopens");
        return;
    };
    if strict {
        assert_eq!(again, first, "a clean restart keeps the transactions");
    }
    drop(topics);
}
