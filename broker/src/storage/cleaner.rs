//! Log compaction (`cleanup.policy=compact`): the pieces of one cleaning
//! pass and the crash-safe swap of cleaned segments.
//!
//! This module owns the bytes of cleaned segments (`<base>.log.cleaned`,
//! `<base>.log.swap`) and the rules of what survives a clean; the choice of
//! which segments to clean, the cleaner checkpoint and the replacement of
//! in-memory segments belong to `log` (`PartitionLog::compact`). It never
//! touches the active segment (the log never hands it over) and knows
//! nothing of the Kafka protocol or of topics.
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
//! - control batches (transaction markers) and batches whose records cannot
//!   be decoded are kept unchanged.
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
//! Crash safety (the swap, per segment, oldest first): the cleaned copy is
//! written to `<base>.log.cleaned` and fsynced; after all copies of a pass
//! are written the log checkpoints the cleaner offset; then each copy is
//! renamed `<base>.log.swap` (the commit point, directory fsynced), the
//! segment's index files are removed, and the `.swap` is renamed over
//! `<base>.log` (directory fsynced). On open, [`recover_leftovers`] removes
//! every `.cleaned` file (an uncommitted pass) and completes every
//! `<base>.log.swap` (removing that segment's indexes, which recovery then
//! rebuilds). Because segments are committed oldest first, a crash leaves
//! a prefix of cleaned segments followed by untouched ones: every record a
//! cleaned segment dropped is superseded by a later record that is still
//! present, so no latest value (nor a tombstone's effect) is lost.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};

use super::batch::{self, BatchHeader};
use super::checkpoint;
use super::segment::{self, Segment};
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
    /// Bytes of the cleanable segments before and after the pass.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The cleaner checkpoint after the call: segments below it are clean.
    pub cleaned_up_to: i64,
    /// How far past `max.compaction.lag.ms` the oldest dirty record was
    /// (0 when within the lag or when no pass was considered).
    pub compaction_delay_ms: i64,
}

/// Latest offset of every key in the segments being cleaned, and the base
/// offset of each producer's last batch among them.
#[derive(Debug, Default)]
pub struct OffsetMap {
    latest: HashMap<Bytes, i64>,
    last_batch_of_producer: HashMap<i64, i64>,
}

impl OffsetMap {
    pub fn len(&self) -> usize {
        self.latest.len()
    }
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
}

/// Counters of one pass and the earliest time a retained tombstone expires.
#[derive(Debug, Default, Clone, Copy)]
pub struct CleanStats {
    pub records_removed: u64,
    pub tombstones_removed: u64,
    pub next_tombstone_expiry: Option<i64>,
}

fn corrupt(msg: impl Into<String>) -> StorageError {
    StorageError::CorruptBatch(msg.into())
}

/// Walks the batches of a segment: `(position, header, whole batch bytes)`.
fn for_each_batch(
    seg: &Segment,
    mut f: impl FnMut(u64, &BatchHeader, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut pos = 0u64;
    while pos < seg.size() {
        let h = seg.header_at(pos)?;
        let size = h.total_size() as u64;
        let bytes = seg.read_batch(pos, size)?;
        f(pos, &h, &bytes)?;
        pos += size;
    }
    Ok(())
}

/// Builds the key → latest offset map over `segments` (oldest first).
/// Memory: one entry per distinct key, holding a copy of the key.
pub fn build_offset_map(segments: &[Segment]) -> Result<OffsetMap> {
    let mut map = OffsetMap::default();
    for seg in segments {
        for_each_batch(seg, |pos, h, bytes| {
            if h.producer_id >= 0 {
                map.last_batch_of_producer
                    .insert(h.producer_id, h.base_offset);
            }
            if h.is_control() {
                return Ok(());
            }
            match batch::decode_records(bytes) {
                Ok(records) => {
                    for r in records {
                        if let Some(k) = r.key {
                            map.latest.insert(Bytes::copy_from_slice(&k), r.offset);
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
    let records = batch::decode_records(bytes)?;
    let mut kept = Vec::with_capacity(records.len());
    let (mut removed, mut tombstones) = (0u64, 0u64);
    let mut expiry: Option<i64> = None;
    for r in records {
        let latest = r
            .key
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
        stats.next_tombstone_expiry = Some(stats.next_tombstone_expiry.map_or(e, |n| n.min(e)));
    }
    Ok(fate)
}

/// `<dir>/<base>.log.cleaned`.
pub fn cleaned_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!(
        "{}{}",
        segment::file_name(base, segment::LOG_SUFFIX),
        segment::CLEANED_SUFFIX
    ))
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
fn copy_range(seg: &Segment, from: u64, to: u64, out: &mut impl Write) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let mut buf = Vec::new();
    let mut pos = from;
    while pos < to {
        let len = (to - pos).min(CHUNK);
        buf.resize(usize::try_from(len).unwrap_or(0), 0);
        seg.file().read_exact_at(&mut buf, pos)?;
        out.write_all(&buf)?;
        pos += len;
    }
    Ok(())
}

/// Writes the cleaned copy of `seg` to `<base>.log.cleaned` and fsyncs it.
/// Returns `false` (and leaves no file) when nothing in the segment goes.
/// The file is created only at the first change; the unchanged prefix
/// is then copied as is.
pub fn write_cleaned(
    seg: &Segment,
    map: &OffsetMap,
    now_ms: i64,
    delete_retention_ms: i64,
    stats: &mut CleanStats,
) -> Result<bool> {
    let dir = seg.log_path().parent().unwrap_or(Path::new("."));
    let path = cleaned_path(dir, seg.base_offset());
    let mut out: Option<BufWriter<File>> = None;
    let result = for_each_batch(seg, |pos, h, bytes| {
        let fate = if h.is_control() {
            Fate::Keep
        } else {
            match filter_batch(h, bytes, map, now_ms, delete_retention_ms, stats) {
                Ok(f) => f,
                Err(StorageError::Io(e)) => return Err(e.into()),
                Err(e) => {
                    tracing::warn!(path = %seg.log_path().display(), position = pos, error = %e, "cleaner keeps a batch unchanged");
                    Fate::Keep
                }
            }
        };
        if out.is_none() && !matches!(fate, Fate::Keep) {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            let mut w = BufWriter::with_capacity(1 << 16, f);
            copy_range(seg, 0, pos, &mut w)?;
            out = Some(w);
        }
        if let Some(w) = out.as_mut() {
            match &fate {
                Fate::Keep => w.write_all(bytes)?,
                Fate::Replace(b) => w.write_all(b)?,
                Fate::Drop => {}
            }
        }
        Ok(())
    });
    let finish = result.and_then(|()| match out.take() {
        Some(w) => {
            let f = w.into_inner().map_err(|e| e.into_error())?;
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

/// Removes a cleaned copy that will not be committed.
pub fn discard_cleaned(dir: &Path, base: i64) -> Result<()> {
    remove_if_exists(&cleaned_path(dir, base))
}

/// Commit point of one segment: `.cleaned` → `.swap`, directory fsynced.
pub fn commit_swap(dir: &Path, base: i64) -> Result<()> {
    fs::rename(cleaned_path(dir, base), swap_path(dir, base))?;
    checkpoint::fsync_dir(dir)?;
    Ok(())
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
    checkpoint::fsync_dir(dir)?;
    Ok(())
}

/// On open, before segments are listed: discards uncommitted `.cleaned`
/// files and completes committed `<base>.log.swap` files. Returns the base
/// offsets of completed swaps (their indexes are gone and get rebuilt).
pub fn recover_leftovers(dir: &Path) -> Result<Vec<i64>> {
    let mut completed = Vec::new();
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
