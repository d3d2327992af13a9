//! Log compaction (`cleanup.policy=compact`): the pieces of one cleaning
//! pass and the crash-safe swap of cleaned segments.
//!
//! This module owns the bytes of cleaned segments (the staging directory
//! `<partition>/cleaner-staging/`, `<base>.log.swap`), the rules of what
//! survives a clean and the cleaner's I/O throttle
//! (`log.cleaner.io.max.bytes.per.second`); the choice of which segments to
//! clean, the cleaner checkpoint and the replacement of in-memory segments
//! belong to `log` (`PartitionLog::plan_compaction` /
//! `CompactionPass::run` / `PartitionLog::finish_compaction`). It reads
//! sealed segments through [`SealedBytes`], never the active segment, so a
//! pass runs without the partition's lock, and knows nothing of the Kafka
//! protocol or of topics.
//!
//! What survives, per record of a cleaned segment (as Kafka's cleaner):
//! - the record is the latest one for its key among all cleaned segments;
//! - records without a key are dropped (compacted topics reject them at
//!   produce time, see `batch::validate_records`);
//! - a tombstone (null value) that is the latest for its key is kept while
//!   `now - its timestamp <= delete.retention.ms`, then dropped. The
//!   timestamp is the record's own (the batch max for LogAppendTime): the
//!   same clock time retention uses; a producer's old CreateTime timestamps
//!   therefore shorten the time a tombstone is kept;
//! - records of an aborted transaction (its ABORT marker among the cleaned
//!   segments) go, and never count as a key's latest; a committed
//!   transaction's records count from their own offsets once its COMMIT is
//!   seen; records of a transaction whose marker is not among the cleaned
//!   segments are kept unchanged and count for nothing (a pass never
//!   reaches past the last stable offset, so that is rare). Without this
//!   an aborted offset commit in `__consumer_offsets` would outlive, and
//!   erase, the committed one before it;
//! - a transaction marker is kept while any batch of its transaction
//!   survives the pass (or while it is its producer's last batch). Once none
//!   does, it is marked with KIP-534's delete horizon (`now +
//!   delete.retention.ms`, in the batch's base timestamp with attributes
//!   bit 6, as Kafka's cleaner marks it), and the first pass after the
//!   horizon drops it: a read_committed consumer that read the
//!   transaction's records before they went has `delete.retention.ms` to
//!   read the marker that ends it. The next pass is scheduled for the
//!   horizon as for an expiring tombstone. Other control batches and
//!   batches whose records cannot be decoded are kept unchanged.
//!
//! A batch keeps its bytes untouched when nothing in it goes. Otherwise
//! the surviving records are re-encoded with `RecordBatchEncoder`, keeping
//! each record's offset, timestamp, key, value and headers, the codec, the
//! producer id/epoch, the transactional/control flags, the partition
//! leader epoch and the LogAppendTime flag and time. The encoder sets the
//! base offset to the first surviving record's offset (and the base
//! sequence to that record's sequence, so every record keeps its sequence);
//! the last offset delta is then restored so that the batch still ends at
//! its original last offset, as Kafka does. A batch with no survivor is
//! dropped, except the last batch of each producer id among the cleaned
//! segments, which stays as a header-only batch so that the producer's
//! sequence state rebuilt from the log survives (Kafka keeps it likewise).
//!
//! Crash safety (the swap, one commit per pass): each cleaned copy is
//! written to `cleaner-staging/<base>.log` and fsynced, its indexes are
//! built beside it, and the pass's cleaner checkpoints (the cleaner offset,
//! below which offsets may have gaps, and when a kept tombstone is due)
//! are written there too, the staging directory fsynced — all without the
//! partition's lock. Under the lock, the staging directory is renamed
//! `cleaner-commit/` (the commit point of the whole pass, the partition
//! directory fsynced), each copy's indexes and the copy itself are renamed
//! over the segment's, the checkpoints over the partition's, and the
//! partition directory is fsynced once more before the commit directory
//! goes: two fsyncs however many segments the pass rewrote, no data copied
//! or read under the lock. On open,
//! [`recover_leftovers`] removes the staging directory and every
//! `.cleaned` file (an uncommitted pass; `.cleaned` is where earlier
//! versions wrote copies), installs whatever a commit directory still
//! holds (those segments' indexes are rebuilt), and completes every
//! `<base>.log.swap` (the per-segment commit of earlier versions). A crash
//! therefore keeps all of a pass's copies or none: every record a copy
//! dropped is superseded by a later record that is still present, and a
//! tombstone dropped in one copy never outlives the older values it
//! deleted in another, so no latest value (nor a tombstone's effect) is
//! lost.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};

use super::batch::{self, BatchHeader};
use super::checkpoint;
use super::segment::{self, SealedBytes};
use super::{Result, StorageError};

/// What one `PartitionLog::compact` call did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CompactionOutcome {
    /// Whether a cleaning pass ran (the dirty ratio, the max compaction
    /// lag or a due tombstone asked for one).
    pub ran: bool,
    /// Share of the cleanable bytes not cleaned yet, before the pass.
    pub dirty_ratio: f64,
    /// Non-active segments that were eligible for cleaning.
    pub segments_cleanable: usize,
    /// Segments replaced by a cleaned copy.
    pub segments_rewritten: usize,
    /// Segments removed because cleaning left them empty.
    pub segments_deleted: usize,
    /// Records dropped (superseded, keyless or expired tombstones).
    pub records_removed: u64,
    /// Of those, tombstones dropped after `delete.retention.ms`.
    pub tombstones_removed: u64,
    /// Transaction markers dropped after their delete horizon.
    pub markers_removed: u64,
    /// Bytes of the cleanable segments before and after the pass.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The cleaner checkpoint after the call: segments below it are clean.
    pub cleaned_up_to: i64,
    /// How far past `max.compaction.lag.ms` the oldest dirty record was
    /// (0 when within the lag or when no pass was considered).
    pub compaction_delay_ms: i64,
    /// A pass ran but was not swapped in: the log changed while it ran
    /// (retention, a truncation, a move of the partition's directory).
    pub abandoned: bool,
}

/// Latest offset of every key in the segments being cleaned, and the base
/// offset of each producer's last batch among them. Records of aborted
/// transactions never count as a key's latest, and those of a transaction
/// whose marker is not in the cleaned segments count only once it commits
/// (see the module docs).
#[derive(Debug, Default)]
pub struct OffsetMap {
    latest: HashMap<Bytes, i64>,
    last_batch_of_producer: HashMap<i64, i64>,
    /// Per producer, the `[first, marker]` offsets of its aborted
    /// transactions among the cleaned segments.
    aborted: HashMap<i64, Vec<(i64, i64)>>,
    /// Per producer, the first offset of its transaction still open at the
    /// end of the cleaned segments (its records are kept as they are).
    open: HashMap<i64, i64>,
}

/// Where a batch stands with its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxnFate {
    /// Not transactional, or its transaction committed.
    Settled,
    Aborted,
    /// Its marker is not among the cleaned segments.
    Open,
}

impl OffsetMap {
    /// Records `offset` as `key`'s latest unless a later one is known (a
    /// committed transaction's records are added at its marker, after
    /// records that follow them in the log).
    fn saw(&mut self, key: &[u8], offset: i64) {
        match self.latest.get_mut(key) {
            Some(latest) => *latest = (*latest).max(offset),
            None => {
                self.latest.insert(Bytes::copy_from_slice(key), offset);
            }
        }
    }

    fn txn_fate(&self, h: &BatchHeader) -> TxnFate {
        if !h.is_transactional() || h.producer_id < 0 {
            return TxnFate::Settled;
        }
        let offset = h.base_offset;
        if self.aborted.get(&h.producer_id).is_some_and(|ranges| {
            ranges
                .iter()
                .any(|(first, last)| (*first..=*last).contains(&offset))
        }) {
            return TxnFate::Aborted;
        }
        if self
            .open
            .get(&h.producer_id)
            .is_some_and(|first| offset >= *first)
        {
            return TxnFate::Open;
        }
        TxnFate::Settled
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
}

/// Counters of one pass and the earliest time a retained tombstone (or a
/// marked transaction marker) expires.
#[derive(Debug, Default, Clone, Copy)]
pub struct CleanStats {
    pub records_removed: u64,
    pub tombstones_removed: u64,
    pub markers_removed: u64,
    pub next_tombstone_expiry: Option<i64>,
}

impl CleanStats {
    fn expires_at(&mut self, at: i64) {
        self.next_tombstone_expiry = Some(self.next_tombstone_expiry.map_or(at, |n| n.min(at)));
    }
}

/// What one pass saw of each producer's transaction since its last marker:
/// whether any of its batches survives (carried across the pass's
/// segments, oldest first).
#[derive(Debug, Default)]
pub struct MarkerTracker {
    data_kept: HashMap<i64, bool>,
}

impl MarkerTracker {
    fn saw_data(&mut self, producer_id: i64, kept: bool) {
        *self.data_kept.entry(producer_id).or_default() |= kept;
    }

    /// At a producer's marker: whether its transaction kept a batch (and
    /// a fresh start for the next transaction).
    fn transaction_kept_data(&mut self, producer_id: i64) -> bool {
        self.data_kept.remove(&producer_id).unwrap_or(false)
    }
}

/// The fate of a control batch: see the module doc.
fn marker_fate(
    h: &BatchHeader,
    bytes: &[u8],
    map: &OffsetMap,
    tracker: &mut MarkerTracker,
    now_ms: i64,
    delete_retention_ms: i64,
    stats: &mut CleanStats,
) -> Result<Fate> {
    if h.producer_id < 0 || batch::end_txn_marker(bytes).is_none() {
        return Ok(Fate::Keep);
    }
    let kept_data = tracker.transaction_kept_data(h.producer_id);
    let last_of_producer = map.last_batch_of_producer.get(&h.producer_id) == Some(&h.base_offset);
    if kept_data || last_of_producer {
        return Ok(Fate::Keep);
    }
    Ok(match h.delete_horizon_ms() {
        Some(horizon) if now_ms >= horizon => {
            stats.markers_removed += 1;
            Fate::Drop
        }
        Some(horizon) => {
            stats.expires_at(horizon);
            Fate::Keep
        }
        None => {
            let horizon = now_ms.saturating_add(delete_retention_ms);
            stats.expires_at(horizon);
            Fate::Replace(batch::with_delete_horizon(bytes, horizon)?)
        }
    })
}

fn corrupt(msg: impl Into<String>) -> StorageError {
    StorageError::CorruptBatch(msg.into())
}

/// Walks the batches of a segment: `(position, header, whole batch bytes)`.
fn for_each_batch(
    seg: &SealedBytes,
    throttle: &Throttle,
    mut f: impl FnMut(u64, &BatchHeader, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut pos = 0u64;
    while pos < seg.size() {
        let h = seg.header_at(pos)?;
        let size = h.total_size() as u64;
        let bytes = seg.read_batch(pos, size)?;
        throttle.account(size);
        f(pos, &h, &bytes)?;
        pos += size;
    }
    Ok(())
}

/// Builds the key → latest offset map over `segments` (oldest first).
/// Memory: one entry per distinct key, holding a copy of the key.
/// A transaction's records wait for its marker before they count: a
/// COMMIT adds them to the map, an ABORT records the transaction's range
/// (its records go), and a transaction still open at the end stays open.
pub fn build_offset_map(segments: &[SealedBytes], throttle: &Throttle) -> Result<OffsetMap> {
    let mut map = OffsetMap::default();
    // per producer, the keys and offsets of its open transaction
    let mut pending: HashMap<i64, Vec<(Bytes, i64)>> = HashMap::new();
    for seg in segments {
        for_each_batch(seg, throttle, |pos, h, bytes| {
            if h.producer_id >= 0 {
                map.last_batch_of_producer
                    .insert(h.producer_id, h.base_offset);
            }
            if h.is_control() {
                if let Some(result) = batch::end_txn_marker(bytes).map(|m| m.result) {
                    let first = map.open.remove(&h.producer_id);
                    let keys = pending.remove(&h.producer_id).unwrap_or_default();
                    match result {
                        crate::txn::marker::TxnResult::Commit => {
                            for (k, offset) in keys {
                                map.saw(&k, offset);
                            }
                        }
                        crate::txn::marker::TxnResult::Abort => map
                            .aborted
                            .entry(h.producer_id)
                            .or_default()
                            .push((first.unwrap_or(i64::MIN), h.base_offset)),
                    }
                }
                return Ok(());
            }
            let transactional = h.is_transactional() && h.producer_id >= 0;
            if transactional {
                map.open.entry(h.producer_id).or_insert(h.base_offset);
            }
            match batch::decode_records(bytes) {
                Ok(records) => {
                    for r in records {
                        let Some(k) = r.key else { continue };
                        if transactional {
                            pending
                                .entry(h.producer_id)
                                .or_default()
                                .push((k, r.offset));
                        } else {
                            map.saw(&k, r.offset);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(path = %seg.log_path().display(), position = pos, error = %e, "cleaner keeps a batch it cannot decode");
                }
            }
            Ok(())
        })?;
    }
    Ok(map)
}

/// What becomes of one batch.
enum Fate {
    Keep,
    Drop,
    Replace(Vec<u8>),
}

fn codec(h: &BatchHeader) -> Result<Compression> {
    Ok(match h.compression() {
        0 => Compression::None,
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        c => return Err(corrupt(format!("unknown compression codec {c}"))),
    })
}

/// Re-encodes the surviving records `kept` (in offset order, non-empty) of
/// the batch `h` into one batch, as described in the module docs.
pub fn rewrite_batch(h: &BatchHeader, kept: &[Record]) -> Result<Vec<u8>> {
    let Some(first) = kept.first() else {
        return Err(corrupt("no record to re-encode"));
    };
    let first_offset = first.offset;
    let records: Vec<Record> = kept
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if h.base_sequence < 0 {
                // No sequence: keep the batch's base sequence at -1 (the
                // encoder derives it from the first record's sequence).
                r.sequence = (r.offset - first_offset - 1) as i32;
            }
            r
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: codec(h)?,
        },
    )
    .map_err(|e| corrupt(format!("cannot re-encode the surviving records: {e}")))?;
    let mut out = buf.to_vec();
    let nh = BatchHeader::parse(&out)?;
    if nh.total_size() != out.len() {
        return Err(corrupt("re-encoding split the batch"));
    }
    let delta = i32::try_from(h.last_offset() - nh.base_offset)
        .ok()
        .filter(|&d| d >= nh.last_offset_delta)
        .ok_or_else(|| corrupt("surviving records lie outside their batch"))?;
    batch::set_last_offset_delta(&mut out, delta);
    batch::set_base_offset_and_epoch(&mut out, nh.base_offset, h.partition_leader_epoch);
    if h.is_log_append_time() {
        batch::set_log_append_time(&mut out, h.max_timestamp);
    }
    batch::validate_one(&out)?;
    Ok(out)
}

/// Decides the fate of one (non-control, decodable) batch.
fn filter_batch(
    h: &BatchHeader,
    bytes: &[u8],
    map: &OffsetMap,
    now_ms: i64,
    delete_retention_ms: i64,
    stats: &mut CleanStats,
) -> Result<Fate> {
    let fate = map.txn_fate(h);
    if fate == TxnFate::Open {
        return Ok(Fate::Keep);
    }
    let records = batch::decode_records(bytes)?;
    let mut kept = Vec::with_capacity(records.len());
    let (mut removed, mut tombstones) = (0u64, 0u64);
    let mut expiry: Option<i64> = None;
    for r in records {
        let latest = fate == TxnFate::Settled
            && r.key
                .as_ref()
                .is_some_and(|k| map.latest.get(k) == Some(&r.offset));
        if !latest {
            removed += 1;
            continue;
        }
        if r.value.is_none() {
            let ts = batch::record_timestamp(h, &r);
            if now_ms.saturating_sub(ts) > delete_retention_ms {
                removed += 1;
                tombstones += 1;
                continue;
            }
            let due = ts.saturating_add(delete_retention_ms).saturating_add(1);
            expiry = Some(expiry.map_or(due, |e| e.min(due)));
        }
        kept.push(r);
    }
    let fate = if removed == 0 {
        Fate::Keep
    } else if kept.is_empty() {
        let last_of_producer = h.producer_id >= 0
            && map.last_batch_of_producer.get(&h.producer_id) == Some(&h.base_offset);
        if last_of_producer {
            Fate::Replace(batch::empty_copy(bytes)?)
        } else {
            Fate::Drop
        }
    } else {
        Fate::Replace(rewrite_batch(h, &kept)?)
    };
    if !matches!(fate, Fate::Keep) {
        stats.records_removed += removed;
        stats.tombstones_removed += tombstones;
    }
    if let Some(e) = expiry {
        stats.expires_at(e);
    }
    Ok(fate)
}

/// Name of the directory inside a partition's where a pass builds its
/// cleaned segments (removed when the pass ends, and at open).
pub const STAGING_DIR: &str = "cleaner-staging";

/// `<dir>/cleaner-staging`.
pub fn staging_dir(dir: &Path) -> PathBuf {
    dir.join(STAGING_DIR)
}

/// Creates an empty staging directory (removing what an earlier pass left).
pub fn create_staging(dir: &Path) -> Result<PathBuf> {
    let staging = staging_dir(dir);
    remove_staging(dir)?;
    fs::create_dir(&staging)?;
    Ok(staging)
}

/// Removes the staging directory and whatever is in it.
pub fn remove_staging(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(staging_dir(dir)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `<dir>/<base>.log.swap`.
pub fn swap_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!(
        "{}{}",
        segment::file_name(base, segment::LOG_SUFFIX),
        segment::SWAP_SUFFIX
    ))
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Copies `[from, to)` of the segment file to `out`.
fn copy_range(
    seg: &SealedBytes,
    from: u64,
    to: u64,
    out: &mut impl Write,
    throttle: &Throttle,
) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let mut buf = Vec::new();
    let mut pos = from;
    while pos < to {
        let len = (to - pos).min(CHUNK);
        buf.resize(usize::try_from(len).unwrap_or(0), 0);
        seg.file().read_exact_at(&mut buf, pos)?;
        out.write_all(&buf)?;
        throttle.account(len);
        pos += len;
    }
    Ok(())
}

/// Writes the cleaned copy of `seg` to `<staging>/<base>.log` and fsyncs
/// it. Returns `false` (and leaves no file) when nothing in the segment
/// goes. The file is created only at the first change; the unchanged
/// prefix is then copied as is.
#[allow(clippy::too_many_arguments)]
pub fn write_cleaned(
    seg: &SealedBytes,
    staging: &Path,
    map: &OffsetMap,
    markers: &mut MarkerTracker,
    now_ms: i64,
    delete_retention_ms: i64,
    stats: &mut CleanStats,
    throttle: &Throttle,
) -> Result<bool> {
    let path = staging.join(segment::file_name(seg.base_offset(), segment::LOG_SUFFIX));
    let mut out: Option<BufWriter<PacedWriteback>> = None;
    let result = for_each_batch(seg, throttle, |pos, h, bytes| {
        let decided = if h.is_control() {
            marker_fate(h, bytes, map, markers, now_ms, delete_retention_ms, stats)
        } else {
            filter_batch(h, bytes, map, now_ms, delete_retention_ms, stats)
        };
        let fate = match decided {
            Ok(f) => f,
            Err(StorageError::Io(e)) => return Err(e.into()),
            Err(e) => {
                tracing::warn!(path = %seg.log_path().display(), position = pos, error = %e, "cleaner keeps a batch unchanged");
                Fate::Keep
            }
        };
        if !h.is_control() && h.is_transactional() && h.producer_id >= 0 {
            // a header-only copy counts as kept: replayed, it opens the
            // transaction that its marker must still close
            markers.saw_data(h.producer_id, !matches!(fate, Fate::Drop));
        }
        if out.is_none() && !matches!(fate, Fate::Keep) {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            let mut w = BufWriter::with_capacity(1 << 16, PacedWriteback::new(f));
            copy_range(seg, 0, pos, &mut w, throttle)?;
            out = Some(w);
        }
        if let Some(w) = out.as_mut() {
            match &fate {
                Fate::Keep => w.write_all(bytes)?,
                Fate::Replace(b) => {
                    w.write_all(b)?;
                    throttle.account(b.len() as u64);
                }
                Fate::Drop => {}
            }
        }
        Ok(())
    });
    let finish = result.and_then(|()| match out.take() {
        Some(w) => {
            let f = w.into_inner().map_err(|e| e.into_error())?.into_inner();
            f.sync_all()?;
            Ok(true)
        }
        None => Ok(false),
    });
    if finish.is_err() {
        remove_if_exists(&path)?;
    }
    finish
}

/// A cleaned copy's file that is written back to disk as it grows: after
/// each [`WRITEBACK_CHUNK`] the chunk's writeback is started and the one
/// before it waited for (`sync_file_range`, as RocksDB's `bytes_per_sync`).
/// A copy therefore never holds more than two chunks of dirty pages, and
/// its final fsync finds almost nothing to write. Without it a 16 MiB copy
/// was written back all at once by that fsync, and on ext4 the journal
/// commit it forces made the request handlers' appends wait behind it
/// (produce latency rose while a pass ran). The pacing also holds the
/// cleaner to the disk's speed rather than the page cache's.
struct PacedWriteback {
    file: File,
    written: u64,
    /// `[unwaited_from, started_to)`: writeback started, not waited for.
    unwaited_from: u64,
    started_to: u64,
}

/// How much of a cleaned copy is written back at a time.
const WRITEBACK_CHUNK: u64 = 1 << 20;

impl PacedWriteback {
    fn new(file: File) -> Self {
        PacedWriteback {
            file,
            written: 0,
            unwaited_from: 0,
            started_to: 0,
        }
    }

    fn into_inner(self) -> File {
        self.file
    }

    fn sync_range(&self, from: u64, to: u64, flags: libc::c_uint) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(from), i64::try_from(to - from)) else {
            return Ok(());
        };
        // SAFETY: the descriptor is open for as long as `self`; the call
        // only reads its integer arguments.
        let rc = unsafe { libc::sync_file_range(self.file.as_raw_fd(), offset, len, flags) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

impl Write for PacedWriteback {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.started_to >= WRITEBACK_CHUNK {
            // start this chunk's writeback, then wait for the one before
            // (its writeback was started a chunk ago)
            self.sync_range(self.started_to, self.written, libc::SYNC_FILE_RANGE_WRITE)?;
            if self.started_to > self.unwaited_from {
                self.sync_range(
                    self.unwaited_from,
                    self.started_to,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                )?;
            }
            self.unwaited_from = self.started_to;
            self.started_to = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Where a committed pass's cleaned copies wait to be installed: the
/// staging directory, renamed (see [`commit_pass`]).
pub const COMMIT_DIR: &str = "cleaner-commit";

/// `<dir>/cleaner-commit`.
pub fn commit_dir(dir: &Path) -> PathBuf {
    dir.join(COMMIT_DIR)
}

/// The commit point of a whole pass: the staging directory becomes the
/// commit directory (one rename, the partition directory fsynced). Before
/// it a crash discards the pass; after it recovery installs every copy
/// (see [`recover_leftovers`]). The pass fsynced the staging directory
/// (and each copy) before. All copies or none: a pass may drop a
/// tombstone in one segment together with the older values it deleted in
/// earlier ones, so a crash must never keep some of a pass's copies.
pub fn commit_pass(dir: &Path) -> Result<()> {
    fs::rename(staging_dir(dir), commit_dir(dir))?;
    checkpoint::fsync_dir(dir)?;
    Ok(())
}

/// Installs the committed copy of segment `base`: its prepared indexes
/// renamed over the segment's, then the copy renamed over `<base>.log`.
/// Nothing is fsynced here: until [`finish_install`]'s one directory fsync
/// a crash may keep any subset of these renames, and recovery finishes
/// the rest from the commit directory.
pub fn install_committed(dir: &Path, base: i64) -> Result<()> {
    let commit = commit_dir(dir);
    for suffix in [segment::INDEX_SUFFIX, segment::TIME_INDEX_SUFFIX] {
        let name = segment::file_name(base, suffix);
        match fs::rename(commit.join(&name), dir.join(&name)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => remove_if_exists(&dir.join(&name))?,
            Err(e) => return Err(e.into()),
        }
    }
    let name = segment::file_name(base, segment::LOG_SUFFIX);
    fs::rename(commit.join(&name), dir.join(&name))?;
    Ok(())
}

/// The cleaner checkpoints a pass staged (cleaner offset, tombstone due),
/// renamed over the partition's; not fsynced, as [`install_committed`].
pub fn install_checkpoints(dir: &Path) -> Result<()> {
    let commit = commit_dir(dir);
    for name in [
        checkpoint::CLEANER_OFFSET_FILE,
        checkpoint::CLEANER_TOMBSTONE_DUE_FILE,
    ] {
        match fs::rename(commit.join(name), dir.join(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// After every [`install_committed`] of a pass: fsyncs the partition
/// directory (the installs are durable), then removes the commit
/// directory.
pub fn finish_install(dir: &Path) -> Result<()> {
    checkpoint::fsync_dir(dir)?;
    match fs::remove_dir_all(commit_dir(dir)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Recovery of a committed pass interrupted while installing: every
/// segment with a file left in the commit directory gets its copy (if the
/// copy's rename did not survive) and loses its indexes, whichever they
/// are (recovery rebuilds them). Returns those segments' base offsets.
fn complete_committed(dir: &Path) -> Result<Vec<i64>> {
    let commit = commit_dir(dir);
    let mut bases = std::collections::BTreeSet::new();
    for entry in fs::read_dir(&commit)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let base = [
            segment::LOG_SUFFIX,
            segment::INDEX_SUFFIX,
            segment::TIME_INDEX_SUFFIX,
        ]
        .iter()
        .find_map(|suffix| segment::parse_file_name(name, suffix));
        if let Some(base) = base {
            bases.insert(base);
        }
    }
    for &base in &bases {
        tracing::info!(dir = %dir.display(), base, "completing the install of a committed cleaned segment");
        remove_if_exists(&dir.join(segment::file_name(base, segment::INDEX_SUFFIX)))?;
        remove_if_exists(&dir.join(segment::file_name(base, segment::TIME_INDEX_SUFFIX)))?;
        let name = segment::file_name(base, segment::LOG_SUFFIX);
        match fs::rename(commit.join(&name), dir.join(&name)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    install_checkpoints(dir)?;
    finish_install(dir)?;
    Ok(bases.into_iter().collect())
}

/// Completes a committed swap: removes the segment's index files (rebuilt
/// from the new log by recovery), renames `.swap` over `.log` and fsyncs
/// the directory.
pub fn finish_swap(dir: &Path, base: i64) -> Result<()> {
    remove_if_exists(&dir.join(segment::file_name(base, segment::INDEX_SUFFIX)))?;
    remove_if_exists(&dir.join(segment::file_name(base, segment::TIME_INDEX_SUFFIX)))?;
    fs::rename(
        swap_path(dir, base),
        dir.join(segment::file_name(base, segment::LOG_SUFFIX)),
    )?;
    Ok(())
}

/// On open, before segments are listed: discards an uncommitted pass (the
/// staging directory, and `.cleaned` files of earlier versions) and
/// completes committed `<base>.log.swap` files. Returns the base offsets of
/// completed swaps (their indexes are gone and get rebuilt).
pub fn recover_leftovers(dir: &Path) -> Result<Vec<i64>> {
    if staging_dir(dir).exists() {
        tracing::info!(path = %staging_dir(dir).display(), "discarding an unfinished compaction pass");
        remove_staging(dir)?;
    }
    let mut completed = Vec::new();
    if commit_dir(dir).exists() {
        completed = complete_committed(dir)?;
    }
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    for name in names {
        let path = dir.join(&name);
        if name.ends_with(segment::CLEANED_SUFFIX) {
            tracing::info!(path = %path.display(), "discarding an unfinished cleaned segment");
            remove_if_exists(&path)?;
        } else if let Some(stem) = name.strip_suffix(segment::SWAP_SUFFIX) {
            match segment::parse_file_name(stem, segment::LOG_SUFFIX) {
                Some(base) => {
                    tracing::info!(path = %path.display(), "completing the swap of a cleaned segment");
                    finish_swap(dir, base)?;
                    completed.push(base);
                }
                None => remove_if_exists(&path)?,
            }
        }
    }
    if !completed.is_empty() {
        checkpoint::fsync_dir(dir)?;
    }
    Ok(completed)
}

/// The cleaner's I/O budget, `log.cleaner.io.max.bytes.per.second`, shared
/// by every pass of the broker (as Kafka's cleaner threads share theirs):
/// bytes read and written are accounted as they go, and the pass sleeps
/// whenever it is ahead of the rate. Unlimited by default.
#[derive(Debug)]
pub struct Throttle {
    bytes_per_second: f64,
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    bytes: u64,
}

/// The rate is measured over windows this long (restarted when one is
/// over), so an idle cleaner earns no burst.
const THROTTLE_WINDOW: Duration = Duration::from_secs(1);

impl Throttle {
    /// A budget of `bytes_per_second`; not finite or not positive (Kafka's
    /// default is `Double.MAX_VALUE`) means unlimited.
    pub fn new(bytes_per_second: f64) -> Self {
        Throttle {
            bytes_per_second,
            window: Mutex::new(Window {
                started: Instant::now(),
                bytes: 0,
            }),
        }
    }

    pub fn unlimited() -> Self {
        Throttle::new(f64::INFINITY)
    }

    fn limited(&self) -> bool {
        // Kafka's default, Double.MAX_VALUE, is "no limit" too
        self.bytes_per_second.is_finite()
            && self.bytes_per_second > 0.0
            && self.bytes_per_second < f64::MAX
    }

    /// Counts `bytes` of cleaner I/O and sleeps as long as the budget says.
    pub fn account(&self, bytes: u64) {
        if !self.limited() {
            return;
        }
        let pause = {
            let mut w = self.window.lock();
            let now = Instant::now();
            if now.duration_since(w.started) > THROTTLE_WINDOW {
                w.started = now;
                w.bytes = 0;
            }
            w.bytes += bytes;
            pause_for(
                self.bytes_per_second,
                w.bytes,
                now.duration_since(w.started),
            )
        };
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
}

/// How long to wait so that `bytes` over `elapsed` come down to `rate`
/// bytes per second (zero when already at or below it).
pub fn pause_for(rate: f64, bytes: u64, elapsed: Duration) -> Duration {
    let due = Duration::from_secs_f64(bytes as f64 / rate);
    due.saturating_sub(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_brings_the_rate_down_to_the_budget() {
        // 1 MB at 1 MB/s after 0.25 s: wait the other 0.75 s
        assert_eq!(
            pause_for(1e6, 1_000_000, Duration::from_millis(250)),
            Duration::from_millis(750)
        );
        // below the rate: no wait
        assert_eq!(
            pause_for(1e6, 100_000, Duration::from_millis(250)),
            Duration::ZERO
        );
    }

    #[test]
    fn the_throttle_holds_a_pass_to_its_rate() {
        // 600 KB at 1 MB/s: at least 0.5 s (the first window's bytes are
        // accounted before any pause, so a little less than 0.6 s)
        let t = Throttle::new(1e6);
        let started = Instant::now();
        for _ in 0..60 {
            t.account(10_000);
        }
        assert!(
            started.elapsed() >= Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        // unlimited, and Kafka's default: no wait
        let started = Instant::now();
        for rate in [f64::MAX, f64::INFINITY, 0.0] {
            let t = Throttle::new(rate);
            for _ in 0..1000 {
                t.account(1 << 20);
            }
        }
        assert!(started.elapsed() < Duration::from_millis(500));
    }
}
