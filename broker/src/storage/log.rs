//! `PartitionLog`: the ordered list of segments of one partition, with
//! append, read, rolling, truncation, flushes and checkpoints, and the
//! application of what recovery, retention and compaction decide.
//!
//! This module owns the partition directory as a whole: which segments
//! exist, the log start offset, recovery point and high watermark, and
//! the checkpoints of the first two (the high watermark's is the data
//! directory's file, `high_watermarks`; the log only reads the file older
//! brokers wrote). It delegates the bytes of each segment to `segment`
//! and never parses the Kafka protocol; callers (the protocol layer)
//! validate produce payloads with `batch::validate_batches` first (and,
//! for compacted topics, `batch::validate_records`).
//!
//! Its jobs apart from the live log are leaf modules below it, which
//! never import it:
//! - [`recovery`]: the scan at open (inventory, re-validation after an
//!   unclean stop, torn-tail truncation, index and epoch-cache rebuilds);
//! - [`retention`]: which segments time and size retention delete, and
//!   the retired files that wait for removal without the lock;
//! - [`compaction`]: when a pass is due and what it reads, and the pass
//!   between plan and finish. The rules of a pass and its crash-safe swap
//!   live in `cleaner`; this module keeps the cleaner checkpoint and swaps
//!   the in-memory segments.
//!
//! Deleted segments (retention, DeleteRecords, truncation in recovery) are
//! renamed with the `.deleted` suffix and removed at once rather than after
//! `file.delete.delay.ms`: a reader holding a [`FetchSlice`] keeps the open
//! file (Linux keeps the inode until the last descriptor closes), so no
//! delay is needed; leftover `.deleted` files are removed on open.
//!
//! Concurrency: mutations take `&mut self`; the broker wraps each log in a
//! lock. Bytes below the log end never change once written, and a
//! [`FetchSlice`] holds its segment file open, so a reader may send a slice
//! after releasing the lock even if retention deletes the segment meanwhile.

mod compaction;
mod recovery;
mod retention;

use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::batch::{self, BatchHeader};
use super::checkpoint;
use super::cleaner::{self, CompactionOutcome, Throttle};
use super::epochs::{EpochEntry, LeaderEpochCache};
use super::producer_snapshot::{self, SnapshotEntry};
use super::segment::{BatchInfo, Segment};
use super::{LogConfig, Result, StorageError};

pub use self::compaction::{CompactionPass, CompactionPlan};
pub use self::recovery::OpenReport;
pub use self::retention::{RetentionOutcome, RetiredFiles};

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    /// Offset assigned to the first record of the first batch.
    pub base_offset: i64,
    /// Offset of the last record of the last batch.
    pub last_offset: i64,
    /// The broker time written into the batches if the log uses
    /// LogAppendTime, else -1.
    pub log_append_time: i64,
    /// Log start offset after the append.
    pub log_start_offset: i64,
}

/// A region of one segment file holding whole batches, to be sent as is.
#[derive(Debug, Clone)]
pub struct FetchSlice {
    pub file: Arc<File>,
    pub position: u64,
    pub len: u64,
}

impl FetchSlice {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The largest control batch [`PartitionLog::for_each_batch_from`] reads
/// whole (a marker batch takes about 80 bytes).
pub const MAX_CONTROL_BATCH: usize = 4096;

/// The log of one partition.
#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
    /// Sorted by base offset, never empty; the last is active. Contiguous
    /// except below the cleaner checkpoint, where compaction leaves gaps.
    segments: Vec<Segment>,
    log_start_offset: i64,
    recovery_point: i64,
    /// Kept in memory only: the broker checkpoints every partition's in
    /// the data directory's file (`storage::high_watermarks`).
    high_watermark: i64,
    /// Values of the recovery point and log start checkpoint files as last
    /// read or written (`None`: absent), so unchanged ones are not rewritten.
    checkpointed_recovery_point: Option<i64>,
    checkpointed_log_start: Option<i64>,
    unflushed_messages: i64,
    first_unflushed_ms: Option<i64>,
    /// The cleaner checkpoint: segments below it were compacted (their
    /// offsets may have gaps). `None` if the log was never compacted.
    cleaned_to: Option<i64>,
    /// Earliest time a tombstone kept by the last clean expires; a clean
    /// runs then even if the dirty ratio is low. Checkpointed after each
    /// pass; when that checkpoint is missing for a log compacted before,
    /// `Some(i64::MIN)` (check once).
    tombstone_due: Option<i64>,
    /// The leader-epoch cache (see `epochs`), checkpointed whenever it
    /// changes. Invariant kept across crashes: the checkpoint never lacks
    /// an epoch of the batches on disk (entries are written before the
    /// batches that need them; truncations cut the log before the cache),
    /// and entries past the log end are dropped at open.
    epochs: LeaderEpochCache,
    /// Set by [`PartitionLog::close_in_place`]: the log refuses changes.
    closed: bool,
    /// Number of the last compaction pass planned; a pass finishes only if
    /// no later one was planned meanwhile.
    compaction_pass: u64,
    open_report: OpenReport,
    /// Random per opened log: with a segment's base offset it draws that
    /// segment's roll jitter (`segment.jitter.ms`), fixed for the segment.
    jitter_seed: u64,
    /// Whether files taken out of the log wait in `retired` for the owner
    /// to drop them after releasing its lock (see [`RetiredFiles`]).
    defer_file_removal: bool,
    retired: RetiredFiles,
}

fn out_of_range(requested: i64, log_start: i64, log_end: i64) -> StorageError {
    StorageError::OffsetOutOfRange {
        requested,
        log_start,
        log_end,
    }
}

/// The broker's clock, for the few mutations that take no `now_ms`.
fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl PartitionLog {
    /// Opens (creating if needed) the partition directory and recovers it:
    /// after an unclean stop (no clean-shutdown marker), every batch from
    /// the recovery point on is re-validated (length, magic, CRC-32C,
    /// contiguous offsets), a torn or corrupt tail is truncated after the
    /// last valid batch (later segments are then dropped) and the indexes
    /// of what was re-validated are rebuilt. In the segment holding the
    /// recovery point only the batches reaching it and after are
    /// (`Segment::recover_after`: what the last flush made durable is
    /// trusted, as Kafka trusts the segments below it, unless its index
    /// entries do not check out). Other segments are trusted, but their indexes are
    /// sanity-checked and rebuilt (by the same validation) when missing or
    /// corrupt. Leftover `.deleted` and `.tmp` files are removed; an
    /// interrupted compaction is discarded (`.cleaned`) or completed
    /// (`.swap`). Segments wholly below the cleaner checkpoint were
    /// compacted: their offsets may jump between batches and they may end
    /// before the next segment starts; everywhere else offsets must be
    /// contiguous.
    ///
    /// The leader-epoch cache is read from its checkpoint; when that is
    /// missing or unreadable (or empty while the log holds batches: a
    /// truncation that cleared it was interrupted), it is rebuilt from the
    /// batch headers (a log written before epochs were tracked has its
    /// batches stamped epoch 0 and gets `[(0, first offset)]`). Entries at
    /// or past the log end (a torn tail, an interrupted truncation, an
    /// epoch a leader assigned without writing) are dropped and the cache
    /// is moved up to the log start, as Kafka's log loading does.
    ///
    /// The scan itself is [`recovery`]'s; the log starts from what it
    /// recovered.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig, now_ms: i64) -> Result<Self> {
        let r = recovery::recover(dir.as_ref(), &config, now_ms)?;
        let log_end = r.segments.last().map_or(0, Segment::next_offset);
        let log = PartitionLog {
            dir: r.dir,
            config,
            segments: r.segments,
            log_start_offset: r.log_start_offset,
            recovery_point: r.recovery_point,
            high_watermark: r.high_watermark,
            checkpointed_recovery_point: r.checkpointed_recovery_point,
            checkpointed_log_start: r.checkpointed_log_start,
            unflushed_messages: log_end - r.recovery_point,
            first_unflushed_ms: (r.recovery_point < log_end).then_some(now_ms),
            cleaned_to: r.cleaned_to,
            tombstone_due: r.tombstone_due,
            epochs: r.epochs,
            closed: false,
            compaction_pass: 0,
            open_report: r.report,
            jitter_seed: {
                use std::hash::BuildHasher;
                std::collections::hash_map::RandomState::new().hash_one(now_ms)
            },
            defer_file_removal: false,
            retired: RetiredFiles::default(),
        };
        tracing::debug!(
            dir = %log.dir.display(),
            clean = r.clean,
            log_start = log.log_start_offset,
            log_end,
            segments = log.segments.len(),
            "opened partition log"
        );
        Ok(log)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// What [`PartitionLog::open`] had to recover.
    pub fn open_report(&self) -> OpenReport {
        self.open_report
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    /// Replaces the settings (takes effect for the next roll / retention pass).
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    fn active(&self) -> &Segment {
        // `segments` is never empty (an invariant kept by every mutation).
        &self.segments[self.segments.len() - 1]
    }
    fn active_mut(&mut self) -> &mut Segment {
        let last = self.segments.len() - 1;
        &mut self.segments[last]
    }

    /// Base offset of the active segment (it changes when the log rolls).
    pub fn active_base_offset(&self) -> i64 {
        self.active().base_offset()
    }

    /// The producer state snapshot a rebuild of the producer state starts
    /// from: the newest usable one (see `producer_snapshot`) between the
    /// log start and the recovery point (the log end after a clean start;
    /// after an unclean one, what the last flush made durable). `None`: scan
    /// from the log start.
    pub fn latest_producer_snapshot(&self) -> Result<Option<(i64, Vec<SnapshotEntry>)>> {
        let max = self.recovery_point.min(self.log_end_offset());
        producer_snapshot::latest(&self.dir, self.log_start_offset, max)
    }

    /// Writes a producer state snapshot at the log end (`entries` must be
    /// the state after every batch below it), unless one is there already,
    /// and prunes older ones (see [`producer_snapshot::prune`]).
    pub fn write_producer_snapshot(&mut self, entries: &[SnapshotEntry]) -> Result<()> {
        let end = self.log_end_offset();
        if end == self.log_start_offset {
            // Nothing to replay: a start needs no snapshot.
            return Ok(());
        }
        let existing = producer_snapshot::list(&self.dir)?;
        if existing.contains(&end) {
            return Ok(());
        }
        producer_snapshot::write(&self.dir, end, entries)?;
        producer_snapshot::prune(&self.dir, self.recovery_point)?;
        Ok(())
    }

    /// Calls `f` with the header of every batch from the one holding
    /// `offset` to the log end (one `pread` of the header each); returns
    /// the bytes read.
    pub fn for_each_header_from(
        &self,
        offset: i64,
        mut f: impl FnMut(&BatchHeader),
    ) -> Result<u64> {
        self.for_each_batch_from(offset, |h, _| f(h))
    }

    /// [`Self::for_each_header_from`], also handing over the whole bytes of
    /// each control batch (a transaction marker: its type is in its record)
    /// up to [`MAX_CONTROL_BATCH`] bytes; `None` for other batches.
    pub fn for_each_batch_from(
        &self,
        offset: i64,
        mut f: impl FnMut(&BatchHeader, Option<&[u8]>),
    ) -> Result<u64> {
        use std::os::unix::fs::FileExt;
        let end = self.log_end_offset();
        let mut offset = offset.max(self.log_start_offset);
        let mut bytes = 0u64;
        let mut header = [0u8; batch::BATCH_HEADER_LEN];
        while offset < end {
            let slice = self.read(offset, 1 << 20, end)?;
            if slice.is_empty() {
                break;
            }
            let mut pos = slice.position;
            let stop = slice.position + slice.len;
            let mut next = offset;
            while pos + batch::BATCH_HEADER_LEN as u64 <= stop {
                slice.file.read_exact_at(&mut header, pos)?;
                bytes += batch::BATCH_HEADER_LEN as u64;
                let h = BatchHeader::parse(&header)?;
                if h.is_control() && h.total_size() <= MAX_CONTROL_BATCH {
                    let mut whole = vec![0u8; h.total_size()];
                    slice.file.read_exact_at(&mut whole, pos)?;
                    bytes += (h.total_size() - batch::BATCH_HEADER_LEN) as u64;
                    f(&h, Some(&whole));
                } else {
                    f(&h, None);
                }
                next = h.last_offset() + 1;
                pos += h.total_size() as u64;
            }
            if next <= offset {
                break;
            }
            offset = next;
        }
        Ok(bytes)
    }

    /// Number of segments (for tests and metrics).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }
    /// Base offsets of all segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        self.segments.iter().map(Segment::base_offset).collect()
    }
    /// Offset below which everything is fsynced.
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }

    /// Largest segment size allowed: `segment.bytes`, capped so positions fit the index.
    fn max_segment_bytes(&self) -> u64 {
        self.config.segment_bytes.min(i32::MAX as u64)
    }

    /// Seals the active segment and starts a new one at the log end.
    fn roll(&mut self) -> Result<()> {
        let base = self.log_end_offset();
        self.active_mut().seal()?;
        let seg = Segment::create(&self.dir, base, self.config.segment_index_bytes)?;
        tracing::debug!(path = %seg.log_path().display(), "rolled a new segment");
        self.segments.push(seg);
        Ok(())
    }

    /// Rolls first when appending `bytes` bytes ending at `last_offset`
    /// would overflow the active segment (size, age, full indexes, or
    /// offsets too far from its base).
    fn roll_if_needed(&mut self, bytes: u64, last_offset: i64, now_ms: i64) -> Result<()> {
        let active = self.active();
        let needs_roll = !active.is_empty()
            && (active.size() + bytes > self.max_segment_bytes()
                || self.segment_expired_by_age(active, now_ms)
                || active.indexes_full()
                || last_offset - active.base_offset() > i64::from(i32::MAX));
        if needs_roll {
            self.roll()?;
        }
        Ok(())
    }

    /// The age at which the active segment rolls: `segment.ms`, or in a
    /// compacted log `max.compaction.lag.ms` when that is shorter, so that
    /// records cannot stay uncleanable in the active segment longer than
    /// the lag allows (Kafka's `LogConfig.maxSegmentMs`; the jitter is
    /// still drawn below `segment.ms`).
    pub fn max_segment_ms(&self) -> i64 {
        if self.config.compact && self.config.max_compaction_lag_ms > 0 {
            self.config
                .max_compaction_lag_ms
                .min(self.config.segment_ms)
        } else {
            self.config.segment_ms
        }
    }

    fn segment_expired_by_age(&self, seg: &Segment, now_ms: i64) -> bool {
        let roll_after = self
            .max_segment_ms()
            .saturating_sub(self.roll_jitter_ms(seg.base_offset()));
        !seg.is_empty()
            && seg
                .roll_base_ms()
                .is_some_and(|b| now_ms.saturating_sub(b) > roll_after)
    }

    /// The roll jitter of the segment starting at `base_offset`: as
    /// Kafka's `LogConfig.randomSegmentJitter`, uniform in
    /// `[0, min(segment.jitter.ms, segment.ms))`, 0 without jitter; the
    /// same for the segment's whole life (it depends only on the log's
    /// random seed and the segment's base offset).
    pub fn roll_jitter_ms(&self, base_offset: i64) -> i64 {
        let bound = self.config.segment_jitter_ms.min(self.config.segment_ms);
        if bound <= 0 {
            return 0;
        }
        // splitmix64 of seed and base offset: uniform enough for spreading rolls.
        let mut z = self
            .jitter_seed
            .wrapping_add((base_offset as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % bound as u64) as i64
    }

    /// Appends already validated batches (see `batch::validate_batches`):
    /// assigns consecutive offsets from the log end, stamps `leader_epoch`,
    /// applies LogAppendTime when configured, rolls the segment first if
    /// size or age demands, and writes the whole payload with one write.
    /// `batches` is left as it is: the stamped fields live in a copy of
    /// each batch's header, written ahead of its unchanged records.
    /// The batch structure is re-checked (not the CRC): a payload that is
    /// not a whole number of v2 batches is `CorruptBatch`. When
    /// `leader_epoch` is newer than the latest cached epoch, `(leader_epoch,
    /// first offset)` is added to the leader-epoch cache and checkpointed
    /// before the batches are written (an older epoch is logged and leaves
    /// the cache alone).
    pub fn append(
        &mut self,
        batches: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendResult> {
        self.refuse_if_closed()?;
        if batches.is_empty() {
            return Err(StorageError::CorruptBatch("empty record set".to_string()));
        }
        if batches.len() as u64 > i32::MAX as u64 {
            return Err(StorageError::MessageTooLarge {
                size: batches.len(),
                max: i32::MAX as usize,
            });
        }
        let log_append_time = if self.config.log_append_time {
            now_ms
        } else {
            -1
        };
        let mut infos = Vec::new();
        let mut next = self.log_end_offset();
        let mut pos = 0usize;
        while pos < batches.len() {
            let rest = batches.get(pos..).unwrap_or(&[]);
            let h = BatchHeader::parse(rest)?;
            let size = h.total_size();
            if size > rest.len() || h.last_offset_delta < 0 {
                return Err(StorageError::CorruptBatch(format!(
                    "malformed batch at byte {pos} of the append"
                )));
            }
            let last = next
                .checked_add(i64::from(h.last_offset_delta))
                .ok_or_else(|| StorageError::CorruptBatch("offset overflow".to_string()))?;
            infos.push(BatchInfo {
                position: pos as u64,
                size: size as u64,
                base_offset: next,
                last_offset: last,
                max_timestamp: if self.config.log_append_time {
                    now_ms
                } else {
                    h.max_timestamp
                },
            });
            next = last + 1;
            pos += size;
        }
        let (Some(first), Some(last)) = (infos.first().copied(), infos.last().copied()) else {
            return Err(StorageError::CorruptBatch("empty record set".to_string()));
        };
        // Each batch goes to the file as its stamped header followed by its
        // records straight from `batches` (one vectored write).
        let append_time = self.config.log_append_time.then_some(now_ms);
        let headers = infos
            .iter()
            .map(|b| {
                let start = b.position as usize;
                batches
                    .get(start..start + b.size as usize)
                    .and_then(|w| {
                        batch::stamped_header(w, b.base_offset, leader_epoch, append_time)
                    })
                    .ok_or_else(|| {
                        StorageError::CorruptBatch(format!(
                            "batch at byte {start} of the append is shorter than its header"
                        ))
                    })
            })
            .collect::<Result<Vec<_>>>()?;

        self.roll_if_needed(batches.len() as u64, last.last_offset, now_ms)?;

        // A newer leader epoch is checkpointed before the batches carrying
        // it are written, so the cache file never lacks an epoch on disk.
        let epochs_before = self.epochs.clone();
        let latest = self.epochs.latest_epoch();
        let new_epoch = leader_epoch >= 0 && latest.is_none_or(|l| leader_epoch > l);
        if new_epoch {
            self.epochs.assign(leader_epoch, first.base_offset);
            if let Err(e) = self.epochs.write() {
                self.epochs = epochs_before;
                return Err(e);
            }
        } else if latest.is_some_and(|l| leader_epoch < l) {
            tracing::warn!(dir = %self.dir.display(), leader_epoch, latest = ?latest, "append with a leader epoch older than the latest cached one; the cache is left as is");
        }

        let mut pieces: Vec<&[u8]> = Vec::with_capacity(infos.len() * 2);
        for (b, header) in infos.iter().zip(&headers) {
            let start = b.position as usize;
            let end = start + b.size as usize;
            pieces.push(header);
            pieces.push(
                batches
                    .get(start + batch::BATCH_HEADER_LEN..end)
                    .unwrap_or(&[]),
            );
        }
        let interval = self.config.index_interval_bytes;
        if let Err(e) = self.active_mut().append(&pieces, &infos, interval, now_ms) {
            if new_epoch {
                self.restore_epochs(epochs_before);
            }
            return Err(e);
        }
        self.unflushed_messages = self
            .unflushed_messages
            .saturating_add(last.last_offset - first.base_offset + 1);
        self.first_unflushed_ms.get_or_insert(now_ms);
        Ok(AppendResult {
            base_offset: first.base_offset,
            last_offset: last.last_offset,
            log_append_time,
            log_start_offset: self.log_start_offset,
        })
    }

    /// Puts back the epoch cache of before a failed append, rewriting its
    /// checkpoint (best effort: an entry past the log end left in the
    /// file is dropped at the next open).
    fn restore_epochs(&mut self, before: LeaderEpochCache) {
        self.epochs = before;
        if let Err(e) = self.epochs.write() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot rewrite the leader epoch cache after a failed append");
        }
    }

    /// A follower's append: batches fetched from the partition leader are
    /// written exactly as they are (base offsets, partition leader epochs,
    /// timestamps and CRCs untouched). Structure and CRC-32C of every batch
    /// are checked (`batch::validate_batches`, without a size limit: the
    /// leader accepted them); records are not re-validated. The first
    /// batch must start at the log end and each next one right after the
    /// previous, else `CorruptBatch` (a leader whose log start lies inside
    /// a batch sends that whole batch: the caller sees its base offset
    /// below the log end and restarts the log there with
    /// [`PartitionLog::truncate_fully_and_start_at`]). In a compacted log
    /// (`cleanup.policy` with `compact`) offsets may jump forward, as
    /// they do in the leader's compacted segments: the cleaner checkpoint
    /// is then moved to the new log end first, so recovery accepts the
    /// gaps. Rolls segments as [`PartitionLog::append`] does; each new
    /// partition leader epoch of the batches is recorded in the
    /// leader-epoch cache (Kafka's `assign`), checkpointed before the
    /// batches are written. The high watermark is not touched (the leader
    /// tells it).
    pub fn append_replicated(&mut self, batches: &[u8], now_ms: i64) -> Result<AppendResult> {
        self.refuse_if_closed()?;
        if batches.len() as u64 > i32::MAX as u64 {
            return Err(StorageError::MessageTooLarge {
                size: batches.len(),
                max: i32::MAX as usize,
            });
        }
        let headers = batch::validate_batches(batches, usize::MAX)?;
        let end = self.log_end_offset();
        let gaps_allowed = self.config.compact;
        let mut infos = Vec::with_capacity(headers.len());
        let mut expected = end;
        let mut gap = false;
        let mut pos = 0u64;
        let mut records = 0i64;
        for (i, h) in headers.iter().enumerate() {
            let in_order = if gaps_allowed {
                h.base_offset >= expected
            } else {
                h.base_offset == expected
            };
            if !in_order {
                return Err(StorageError::CorruptBatch(if i == 0 {
                    format!(
                        "replicated batches start at offset {} but the log ends at {end}",
                        h.base_offset
                    )
                } else {
                    format!(
                        "replicated batch {i} starts at offset {} where {expected} was expected",
                        h.base_offset
                    )
                }));
            }
            gap |= h.base_offset != expected;
            let last = h
                .base_offset
                .checked_add(i64::from(h.last_offset_delta))
                .filter(|&l| l < i64::MAX)
                .ok_or_else(|| StorageError::CorruptBatch("offset overflow".to_string()))?;
            let size = h.total_size() as u64;
            infos.push(BatchInfo {
                position: pos,
                size,
                base_offset: h.base_offset,
                last_offset: last,
                max_timestamp: h.max_timestamp,
            });
            records = records.saturating_add(last - h.base_offset + 1);
            expected = last + 1;
            pos += size;
        }
        let (Some(first), Some(last)) = (infos.first().copied(), infos.last().copied()) else {
            return Err(StorageError::CorruptBatch("empty record set".to_string()));
        };
        self.roll_if_needed(batches.len() as u64, last.last_offset, now_ms)?;
        if last.last_offset - self.active().base_offset() > i64::from(i32::MAX) {
            return Err(StorageError::CorruptBatch(format!(
                "replicated batch at offset {} is too far from the segment base {}",
                first.base_offset,
                self.active().base_offset()
            )));
        }
        if gap && self.cleaned_to.is_none_or(|c| c < expected) {
            // Recovery must know about the gaps before they are on disk.
            checkpoint::write_checkpoint(&self.dir, checkpoint::CLEANER_OFFSET_FILE, expected)?;
            self.cleaned_to = Some(expected);
        }
        let epochs_before = self.epochs.clone();
        let mut epochs_changed = false;
        for h in &headers {
            epochs_changed |= self.epochs.assign(h.partition_leader_epoch, h.base_offset);
        }
        if epochs_changed {
            if let Err(e) = self.epochs.write() {
                self.epochs = epochs_before;
                return Err(e);
            }
        }
        let interval = self.config.index_interval_bytes;
        if let Err(e) = self
            .active_mut()
            .append(&[batches], &infos, interval, now_ms)
        {
            if epochs_changed {
                self.restore_epochs(epochs_before);
            }
            return Err(e);
        }
        self.unflushed_messages = self.unflushed_messages.saturating_add(records);
        self.first_unflushed_ms.get_or_insert(now_ms);
        Ok(AppendResult {
            base_offset: first.base_offset,
            last_offset: last.last_offset,
            log_append_time: -1,
            log_start_offset: self.log_start_offset,
        })
    }

    /// Removes every record at offset `>= offset` (a follower's divergent
    /// tail). A batch straddling `offset` is removed whole (as in Kafka),
    /// so the log may end below `offset`. At or past the log end the log
    /// is left alone, but cached epochs starting at or after the log end
    /// are dropped (as Kafka: a leader may have assigned an epoch without
    /// writing anything before losing leadership). Below the log start it
    /// is [`PartitionLog::truncate_fully_and_start_at`]; a negative offset
    /// is `OffsetOutOfRange`.
    ///
    /// Crash-safe: the recovery point is checkpointed at or below `offset`
    /// first (a crash mid-way re-validates the cut segment); later segments
    /// are deleted newest first (a crash leaves a prefix); the segment
    /// holding `offset` is cut at the batch boundary, its indexes too, and
    /// fsynced; only then are the high watermark, recovery point, log start
    /// (if the log now ends below it), cleaner checkpoint and leader-epoch
    /// cache (entries starting at or after the new log end) clamped and
    /// checkpointed (the high watermark by the caller, in the data
    /// directory's file).
    pub fn truncate_to(&mut self, offset: i64) -> Result<()> {
        self.refuse_if_closed()?;
        let end = self.log_end_offset();
        if offset < 0 {
            return Err(out_of_range(offset, self.log_start_offset, end));
        }
        if offset >= end {
            if self.epochs.truncate_from_end(end) {
                self.epochs.write()?;
            }
            return Ok(());
        }
        if offset < self.log_start_offset {
            return self.truncate_fully_and_start_at(offset);
        }
        if self.recovery_point > offset {
            checkpoint::write_checkpoint(&self.dir, checkpoint::RECOVERY_POINT_FILE, offset)?;
            self.recovery_point = offset;
            self.checkpointed_recovery_point = Some(offset);
        }
        let keep = self
            .segments
            .partition_point(|s| s.base_offset() < offset)
            .max(1);
        let dropped = self.segments.len() > keep;
        while self.segments.len() > keep {
            if let Some(seg) = self.segments.pop() {
                tracing::info!(path = %seg.log_path().display(), offset, "deleting segment past the truncation offset");
                seg.delete()?;
            }
        }
        if dropped {
            checkpoint::fsync_dir(&self.dir)?;
        }
        let interval = self.config.index_interval_bytes;
        let index_bytes = self.config.segment_index_bytes;
        let cut = self
            .active_mut()
            .truncate_to(offset, interval, index_bytes, wall_clock_ms())?;
        if let Err(e) = self.active_mut().make_active(index_bytes) {
            tracing::warn!(path = %self.active().log_path().display(), error = %e, "cannot reserve index space for the active segment");
        }
        let new_end = self.log_end_offset();
        tracing::info!(dir = %self.dir.display(), offset, log_end = new_end, bytes = cut, "truncated the log");
        self.high_watermark = self.high_watermark.min(new_end);
        self.recovery_point = self.recovery_point.min(new_end);
        self.log_start_offset = self.log_start_offset.min(new_end);
        self.unflushed_messages = self.unflushed_messages.min(new_end - self.recovery_point);
        if self.recovery_point == new_end {
            self.first_unflushed_ms = None;
        }
        if self.cleaned_to.is_some_and(|c| c > new_end) {
            checkpoint::write_checkpoint(&self.dir, checkpoint::CLEANER_OFFSET_FILE, new_end)?;
            self.cleaned_to = Some(new_end);
        }
        self.write_offset_checkpoints()?;
        if self.epochs.truncate_from_end(new_end) {
            self.epochs.write()?;
        }
        producer_snapshot::remove_outside(&self.dir, i64::MIN, new_end)?;
        Ok(())
    }

    /// Rewrites the recovery point and log start checkpoints whose files
    /// do not hold the current values (one directory fsync).
    fn write_offset_checkpoints(&mut self) -> Result<()> {
        let mut due = Vec::with_capacity(2);
        if self.checkpointed_recovery_point != Some(self.recovery_point) {
            due.push((checkpoint::RECOVERY_POINT_FILE, self.recovery_point));
        }
        if self.checkpointed_log_start != Some(self.log_start_offset) {
            due.push((checkpoint::LOG_START_OFFSET_FILE, self.log_start_offset));
        }
        checkpoint::write_checkpoints(&self.dir, &due)?;
        self.checkpointed_recovery_point = Some(self.recovery_point);
        self.checkpointed_log_start = Some(self.log_start_offset);
        Ok(())
    }

    /// Deletes every record and restarts the log, empty, at `offset`
    /// (Kafka's `truncateFullyAndStartAt`): log start, log end, high
    /// watermark and recovery point all become `offset`; the leader-epoch
    /// cache and the cleaner checkpoint are cleared. A negative offset is
    /// `OffsetOutOfRange`.
    ///
    /// Crash-safe: the epoch cache and cleaner checkpoints are cleared
    /// first (an empty cache with batches on disk is rebuilt at open), then
    /// segments are deleted newest first (a crash leaves a prefix), then
    /// the first segment is emptied in place (same base) or replaced by a
    /// new one created before it is deleted, and the offsets are
    /// checkpointed last (open clamps stale ones to the segments).
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<()> {
        self.refuse_if_closed()?;
        if offset < 0 {
            return Err(out_of_range(
                offset,
                self.log_start_offset,
                self.log_end_offset(),
            ));
        }
        self.epochs.clear();
        self.epochs.write()?;
        // Every snapshot describes the history that goes.
        producer_snapshot::remove_outside(&self.dir, i64::MAX, i64::MIN)?;
        checkpoint::remove_checkpoint(&self.dir, checkpoint::CLEANER_OFFSET_FILE)?;
        checkpoint::remove_checkpoint(&self.dir, checkpoint::CLEANER_TOMBSTONE_DUE_FILE)?;
        self.cleaned_to = None;
        self.tombstone_due = None;
        while self.segments.len() > 1 {
            if let Some(seg) = self.segments.pop() {
                tracing::info!(path = %seg.log_path().display(), "deleting segment (log restarts)");
                seg.delete()?;
            }
        }
        let interval = self.config.index_interval_bytes;
        let index_bytes = self.config.segment_index_bytes;
        if self.segments[0].base_offset() == offset {
            self.segments[0].truncate_to(offset, interval, index_bytes, wall_clock_ms())?;
        } else {
            let seg = Segment::create(&self.dir, offset, index_bytes)?;
            let old = std::mem::replace(&mut self.segments[0], seg);
            tracing::info!(path = %old.log_path().display(), "deleting segment (log restarts)");
            old.delete()?;
        }
        checkpoint::fsync_dir(&self.dir)?;
        if let Err(e) = self.active_mut().make_active(index_bytes) {
            tracing::warn!(path = %self.active().log_path().display(), error = %e, "cannot reserve index space for the active segment");
        }
        self.log_start_offset = offset;
        self.high_watermark = offset;
        self.recovery_point = offset;
        self.unflushed_messages = 0;
        self.first_unflushed_ms = None;
        self.write_offset_checkpoints()?;
        tracing::info!(dir = %self.dir.display(), offset, "log truncated fully and restarted");
        Ok(())
    }

    /// Records that `epoch` starts at `start_offset` (a new leader does
    /// this at its log end when it takes over), as Kafka's
    /// `LeaderEpochFileCache.assign`: nothing changes if `epoch` is already
    /// the latest with a start at or before `start_offset`; otherwise the
    /// entries whose epoch is `>= epoch` or start `>= start_offset` are
    /// replaced by the new one. Checkpointed. Negative values are an
    /// `InvalidInput` I/O error.
    pub fn assign_leader_epoch(&mut self, epoch: i32, start_offset: i64) -> Result<()> {
        self.refuse_if_closed()?;
        if epoch < 0 || start_offset < 0 {
            return Err(StorageError::Io(std::io::Error::new(
                ErrorKind::InvalidInput,
                format!("invalid leader epoch entry ({epoch}, {start_offset})"),
            )));
        }
        let before = self.epochs.clone();
        if self.epochs.assign(epoch, start_offset) {
            if let Err(e) = self.epochs.write() {
                self.epochs = before;
                return Err(e);
            }
        }
        Ok(())
    }

    /// The latest epoch in the leader-epoch cache (`None` when empty).
    pub fn latest_leader_epoch(&self) -> Option<i32> {
        self.epochs.latest_epoch()
    }

    /// Kafka's `endOffsetFor` (see `LeaderEpochCache::end_offset_for`):
    /// `(largest cached epoch <= epoch, its end offset)`, the log end for
    /// the latest epoch; `(epoch, first cached start)` when `epoch` is
    /// below every cached epoch; `None` (Kafka's `UNDEFINED_EPOCH` /
    /// `UNDEFINED_EPOCH_OFFSET`) when the cache is empty, `epoch` is
    /// negative or above the latest cached epoch.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// The leader-epoch cache's entries, oldest first.
    pub fn leader_epoch_entries(&self) -> Vec<EpochEntry> {
        self.epochs.entries().to_vec()
    }

    /// The epoch the record at `offset` was written in, per the cache.
    pub fn leader_epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.epochs.epoch_for_offset(offset)
    }

    fn empty_slice(&self) -> FetchSlice {
        let active = self.active();
        FetchSlice {
            file: Arc::clone(active.file()),
            position: active.size(),
            len: 0,
        }
    }

    /// Returns whole batches starting with the one containing `offset`, up
    /// to about `max_bytes` (but always at least one whole batch if any is
    /// available, as KIP-74 requires), from a single segment, and never
    /// past `max_offset` (exclusive; the high watermark for consumers).
    /// `offset == log end` gives an empty slice; outside
    /// `[log start, log end]` is `OffsetOutOfRange`.
    pub fn read(&self, offset: i64, max_bytes: u64, max_offset: i64) -> Result<FetchSlice> {
        let (start, end) = (self.log_start_offset, self.log_end_offset());
        if offset < start || offset > end {
            return Err(out_of_range(offset, start, end));
        }
        if offset == end || offset >= max_offset {
            return Ok(self.empty_slice());
        }
        let first = self
            .segments
            .partition_point(|s| s.base_offset() <= offset)
            .saturating_sub(1);
        for seg in &self.segments[first..] {
            if let Some((pos, h)) = seg.find_position(offset)? {
                if h.base_offset >= max_offset {
                    break;
                }
                let len = seg.slice_len(pos, max_bytes, max_offset)?;
                return Ok(FetchSlice {
                    file: Arc::clone(seg.file()),
                    position: pos,
                    len,
                });
            }
        }
        Ok(self.empty_slice())
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    /// Offset the next appended record will get.
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset()
    }
    /// Total bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(Segment::size).sum()
    }

    /// ListOffsets by timestamp: `(offset, timestamp)` of the first record
    /// (in offset order, at or after the log start) whose timestamp is
    /// `>= timestamp`, with that record's own timestamp; `None` if no record
    /// is that recent. Exact to the record for every codec (compressed
    /// batches are decoded); in a LogAppendTime batch every record carries
    /// the batch max timestamp, so the answer is the batch's first offset
    /// (not below the log start) with that timestamp. Only the batch holding
    /// the answer is read whole; the others are skipped by header.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>> {
        let log_start = self.log_start_offset;
        for seg in &self.segments {
            if seg.next_offset() <= log_start
                || seg.max_timestamp().is_none_or(|(max, _)| max < timestamp)
            {
                continue;
            }
            let from = seg
                .time_index()
                .lookup_before(timestamp)
                .map_or(seg.base_offset(), |(_, o)| o)
                .max(log_start);
            let Some((mut pos, _)) = seg.find_position(from)? else {
                continue;
            };
            while pos < seg.size() {
                let h = seg.header_at(pos)?;
                let size = h.total_size() as u64;
                if h.max_timestamp >= timestamp && h.last_offset() >= log_start {
                    let bytes = seg.read_batch(pos, size)?;
                    match batch::find_record_at_or_after(&bytes, timestamp, log_start) {
                        Ok(Some(found)) => return Ok(Some(found)),
                        // Only records below the log start qualify.
                        Ok(None) => {}
                        Err(e) => {
                            // Records that cannot be decoded: answer with the
                            // batch (clients skip earlier records themselves).
                            tracing::warn!(path = %seg.log_path().display(), position = pos, error = %e, "timestamp lookup at batch granularity");
                            return Ok(Some((h.base_offset.max(log_start), h.max_timestamp)));
                        }
                    }
                }
                pos += size;
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP (KIP-734, as Apache Kafka 3.x/4.x answers
    /// it): the largest record timestamp in the log and the offset of the
    /// first record carrying it, as `(timestamp, offset)`; `None` for an
    /// empty log or one without timestamps. Segments track their max
    /// timestamp and its batch, so only that one batch is read and decoded.
    /// If it cannot be read (or every record with the max lies below the
    /// log start), the answer falls back to the batch's last offset.
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        let mut best: Option<(&Segment, i64, i64)> = None;
        for seg in &self.segments {
            if seg.next_offset() <= self.log_start_offset {
                continue;
            }
            if let Some((ts, off)) = seg.max_timestamp() {
                if best.is_none_or(|(_, b, _)| ts > b) {
                    best = Some((seg, ts, off));
                }
            }
        }
        let (_, ts, batch_offset) = best?;
        // The first record at or after the log start with a timestamp
        // `>= ts` is the first one carrying the max: only the segment's
        // max batch (or a later one, if the max lies below the log start)
        // is decoded.
        match self.offset_for_timestamp(ts) {
            Ok(Some((offset, found))) if found == ts => Some((ts, offset)),
            Ok(_) => Some((ts, batch_offset.max(self.log_start_offset))),
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "max timestamp lookup at batch granularity");
                Some((ts, batch_offset.max(self.log_start_offset)))
            }
        }
    }

    fn checkpoint_log_start(&mut self) -> Result<()> {
        checkpoint::write_checkpoint(
            &self.dir,
            checkpoint::LOG_START_OFFSET_FILE,
            self.log_start_offset,
        )?;
        self.checkpointed_log_start = Some(self.log_start_offset);
        Ok(())
    }

    /// Moves the log start offset up to `new_start` (checkpointed before any
    /// file is removed), then deletes the first `count` segments.
    fn advance_start_and_delete(&mut self, new_start: i64, count: usize) -> Result<(usize, u64)> {
        if new_start > self.log_start_offset {
            self.log_start_offset = new_start;
            self.checkpoint_log_start()?;
            self.high_watermark = self.high_watermark.max(new_start);
            self.recovery_point = self.recovery_point.max(new_start);
            // After the log start checkpoint: a crash in between is
            // repaired at open (the cache is moved up to the log start).
            if self.epochs.truncate_from_start(new_start) {
                if let Err(e) = self.epochs.write() {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write the leader epoch cache");
                }
            }
            // Snapshots below the log start cannot be replayed from.
            if let Err(e) = producer_snapshot::remove_outside(&self.dir, new_start, i64::MAX) {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot remove producer state snapshots");
            }
        }
        let count = count.min(self.segments.len().saturating_sub(1));
        let mut bytes = 0;
        for seg in self.segments.drain(..count).collect::<Vec<_>>() {
            bytes += seg.size();
            tracing::info!(path = %seg.log_path().display(), "deleting segment");
            self.retire_deleted(seg)?;
        }
        Ok((count, bytes))
    }

    /// From now on, files that retention and compaction take out of the
    /// log wait for [`PartitionLog::take_retired`] instead of being
    /// removed at once (the broker's logs do this; see [`RetiredFiles`]).
    pub fn defer_file_removal(&mut self) {
        self.defer_file_removal = true;
    }

    /// The files taken out of the log since the last call, for the caller
    /// to drop once it has released the partition's lock.
    pub fn take_retired(&mut self) -> RetiredFiles {
        std::mem::take(&mut self.retired)
    }

    /// Renames `seg`'s files `.deleted`; they are removed now, or when the
    /// retired files are dropped if removal is deferred.
    fn retire_deleted(&mut self, seg: Segment) -> Result<()> {
        let deleted = seg.into_deleted()?;
        if self.defer_file_removal {
            self.retired.deleted.push(deleted);
        }
        Ok(())
    }

    /// `old`, whose file another one replaced, is closed now or when the
    /// retired files are dropped if removal is deferred.
    fn retire_replaced(&mut self, old: Segment) {
        if self.defer_file_removal {
            self.retired.replaced.push(old);
        }
    }

    /// `DeleteRecords`: advances the log start offset to `offset` (deleting
    /// segments wholly below it, rolling the active segment first when all
    /// of it goes) and checkpoints it. `offset` above the log end is
    /// `OffsetOutOfRange`; at or below the log start it changes nothing (as
    /// in Kafka). Returns the new log start offset.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64> {
        self.refuse_if_closed()?;
        let end = self.log_end_offset();
        if offset > end {
            return Err(out_of_range(offset, self.log_start_offset, end));
        }
        if offset <= self.log_start_offset {
            return Ok(self.log_start_offset);
        }
        if offset == end && !self.active().is_empty() {
            self.roll()?;
        }
        let count = self
            .segments
            .iter()
            .skip(1)
            .take_while(|s| s.base_offset() <= offset)
            .count();
        self.advance_start_and_delete(offset, count)?;
        Ok(self.log_start_offset)
    }

    /// Time (`retention.ms`) and size (`retention.bytes`) retention, only
    /// when the cleanup policy contains `delete`: deletes whole non-active
    /// segments and advances the log start offset. Also
    /// rolls the active segment when `segment.ms` has passed. When every
    /// segment, the active one included, is past `retention.ms`, the active
    /// segment is rolled first and deleted in the same pass (as Kafka does).
    /// Deleted segments are renamed `.deleted` and removed at once
    /// (`file.delete.delay.ms` is not needed: readers keep their open file).
    pub fn enforce_retention(&mut self, now_ms: i64) -> Result<RetentionOutcome> {
        let mut outcome = RetentionOutcome::default();
        if self.closed {
            outcome.log_start_offset = self.log_start_offset;
            return Ok(outcome);
        }
        if self.segment_expired_by_age(self.active(), now_ms) {
            self.roll()?;
        }
        if self.config.delete && self.config.retention_ms >= 0 {
            let (mut count, active_too) =
                retention::expired_by_time(&self.segments, self.config.retention_ms, now_ms);
            if active_too {
                self.roll()?;
                count += 1;
            }
            if count > 0 {
                let new_start = self.segments[count].base_offset();
                let (segs, bytes) = self.advance_start_and_delete(new_start, count)?;
                outcome.segments_deleted += segs;
                outcome.bytes_deleted += bytes;
            }
        }
        if self.config.delete && self.config.retention_bytes >= 0 {
            let count = retention::excess_by_size(&self.segments, self.config.retention_bytes);
            if count > 0 {
                let new_start = self.segments[count].base_offset();
                let (segs, bytes) = self.advance_start_and_delete(new_start, count)?;
                outcome.segments_deleted += segs;
                outcome.bytes_deleted += bytes;
            }
        }
        outcome.log_start_offset = self.log_start_offset;
        Ok(outcome)
    }

    /// The cleaner checkpoint: segments below it are compacted.
    pub fn cleaned_up_to(&self) -> Option<i64> {
        self.cleaned_to
    }

    /// One compaction pass when the cleanup policy contains `compact` (see
    /// `cleaner` for what survives and how the swap is crash-safe), all
    /// three phases in a row with no I/O limit: what a caller that holds
    /// the log alone (tests, tools) uses. The broker runs the phases
    /// itself so that the work in the middle happens without the
    /// partition's lock: [`PartitionLog::plan_compaction`] (under the
    /// lock), [`CompactionPass::run`] (without it),
    /// [`PartitionLog::finish_compaction`] (under the lock, a few renames).
    ///
    /// Cleanable are the leading non-active segments that end at or below
    /// the high watermark and whose newest record is at least
    /// `min.compaction.lag.ms` old; the active segment is never touched.
    /// A pass runs when the dirty ratio (bytes of cleanable segments at or
    /// after the cleaner checkpoint / bytes of all cleanable segments) is
    /// at least `min.cleanable.dirty.ratio` (and some bytes are dirty), or
    /// when some bytes are dirty and the oldest dirty record is older than
    /// `max.compaction.lag.ms` (KIP-354; `min.compaction.lag.ms` still
    /// bounds what is cleanable), or when a tombstone kept by an earlier
    /// pass has expired. It builds the
    /// latest offset per key over all cleanable segments, writes cleaned
    /// copies of the segments that lose records, checkpoints the cleaner
    /// offset (the end of the cleaned range), swaps the copies in oldest
    /// first, and removes segments other than the first that end up empty.
    /// Offsets of kept records never change; reads across the gaps return
    /// the next batch.
    pub fn compact(&mut self, now_ms: i64) -> Result<CompactionOutcome> {
        match self.plan_compaction(now_ms)? {
            CompactionPlan::Nothing(outcome) => Ok(outcome),
            CompactionPlan::Pass(mut pass) => {
                let ran = pass.run(&Throttle::unlimited());
                self.finish_compaction(pass, ran)
            }
        }
    }

    /// The first phase of [`PartitionLog::compact`], under the log's lock:
    /// decides whether a pass is due and, if so, takes what it will read
    /// (the cleanable segments' bytes as they are now, `SealedBytes`) and
    /// creates its staging directory. Cheap: one header read per segment.
    pub fn plan_compaction(&mut self, now_ms: i64) -> Result<CompactionPlan> {
        self.plan_compaction_below(now_ms, self.high_watermark)
    }

    /// [`plan_compaction`](Self::plan_compaction) for a partition with
    /// transactions: nothing at or past `stable` (its last stable offset)
    /// is cleaned, so a pass sees every transaction it reads end.
    pub fn plan_compaction_below(&mut self, now_ms: i64, stable: i64) -> Result<CompactionPlan> {
        let view = compaction::LogView {
            dir: &self.dir,
            config: &self.config,
            segments: &self.segments,
            high_watermark: self.high_watermark.min(stable),
            cleaned_to: self.cleaned_to,
            tombstone_due: self.tombstone_due,
            closed: self.closed,
        };
        compaction::plan(&view, &mut self.compaction_pass, now_ms)
    }

    /// The last phase of [`PartitionLog::compact`], under the log's lock:
    /// if the log still holds the segments the pass read (same files and
    /// sizes: no retention, truncation, move or later pass in between),
    /// commits the pass (the prepared segments and the cleaner checkpoints
    /// together) and swaps them in (renames and two fsyncs, see
    /// `cleaner::commit_pass`), then removes
    /// segments other than the first that cleaning left empty. Otherwise
    /// nothing is swapped (`abandoned`; the next pass starts over). Either
    /// way the staging directory goes. `ran` is what
    /// [`CompactionPass::run`] returned.
    pub fn finish_compaction(
        &mut self,
        pass: CompactionPass,
        ran: Result<()>,
    ) -> Result<CompactionOutcome> {
        let unchanged =
            !self.closed && pass.still_matches(self.compaction_pass, &self.dir, &self.segments);
        let CompactionPass {
            dir,
            staging,
            segments,
            clean_to,
            mut outcome,
            prepared,
            stats,
            ..
        } = pass;
        if let Err(e) = ran {
            drop(prepared);
            compaction::discard(&dir, &staging, "failed");
            return Err(e);
        }
        let k = segments.len();
        if !unchanged {
            drop(prepared);
            compaction::discard(&dir, &staging, "the log changed while it ran");
            outcome.ran = false;
            outcome.abandoned = true;
            return Ok(outcome);
        }
        // The copies and the cleaner checkpoints (the cleaner offset tells
        // recovery that offsets below it may have gaps) are committed
        // together: two directory fsyncs under the lock, however many
        // segments the pass rewrote (see cleaner::commit_pass).
        outcome.segments_rewritten = prepared.len();
        cleaner::commit_pass(&self.dir)?;
        self.cleaned_to = Some(clean_to);
        for (i, mut seg) in prepared {
            cleaner::install_committed(&self.dir, seg.base_offset())?;
            seg.relocate(&self.dir);
            let old = std::mem::replace(&mut self.segments[i], seg);
            self.retire_replaced(old);
        }
        cleaner::install_checkpoints(&self.dir)?;
        cleaner::finish_install(&self.dir)?;
        // Segments left empty (other than the first, which keeps the log
        // start in place) hold nothing: remove them.
        let mut i = 1;
        let mut end = k;
        while i < end {
            if self.segments[i].is_empty() {
                let seg = self.segments.remove(i);
                tracing::debug!(path = %seg.log_path().display(), "removing a segment compaction emptied");
                self.retire_deleted(seg)?;
                outcome.segments_deleted += 1;
                end -= 1;
            } else {
                i += 1;
            }
        }
        self.tombstone_due = stats.next_tombstone_expiry;
        outcome.records_removed = stats.records_removed;
        outcome.tombstones_removed = stats.tombstones_removed;
        outcome.markers_removed = stats.markers_removed;
        outcome.bytes_after = self.segments[..end].iter().map(Segment::size).sum();
        outcome.cleaned_up_to = clean_to;
        if outcome.records_removed > 0 || outcome.markers_removed > 0 {
            tracing::info!(
                dir = %self.dir.display(),
                records = outcome.records_removed,
                tombstones = outcome.tombstones_removed,
                markers = outcome.markers_removed,
                bytes_before = outcome.bytes_before,
                bytes_after = outcome.bytes_after,
                "compacted log"
            );
        }
        Ok(outcome)
    }

    /// Applies the flush policy (`flush.messages`, `flush.ms`); call after
    /// appends and periodically.
    pub fn maybe_flush(&mut self, now_ms: i64) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        let by_count =
            self.unflushed_messages > 0 && self.unflushed_messages >= self.config.flush_messages;
        let by_time = self
            .first_unflushed_ms
            .is_some_and(|t| now_ms.saturating_sub(t) >= self.config.flush_ms);
        if by_count || by_time {
            self.flush()?;
        }
        Ok(())
    }

    /// fsyncs what changed in the segments and indexes and checkpoints the
    /// recovery point (and the log start if it changed).
    pub fn flush(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.flush_and_checkpoint()
    }

    /// fsyncs the segments changed since the last flush (only the files
    /// written since), then rewrites the recovery point and log start
    /// checkpoints whose files do not hold the current values, with one
    /// directory fsync.
    fn flush_and_checkpoint(&mut self) -> Result<()> {
        for seg in &mut self.segments {
            seg.flush()?;
        }
        let end = self.log_end_offset();
        let mut due = Vec::with_capacity(2);
        if self.checkpointed_recovery_point != Some(end) {
            due.push((checkpoint::RECOVERY_POINT_FILE, end));
        }
        if self.checkpointed_log_start != Some(self.log_start_offset) {
            due.push((checkpoint::LOG_START_OFFSET_FILE, self.log_start_offset));
        }
        checkpoint::write_checkpoints(&self.dir, &due)?;
        self.checkpointed_recovery_point = Some(end);
        self.checkpointed_log_start = Some(self.log_start_offset);
        self.recovery_point = end;
        self.unflushed_messages = 0;
        self.first_unflushed_ms = None;
        Ok(())
    }

    /// Whether appending `bytes` bytes in `batches` batches now would do
    /// blocking file work beyond a write into the page cache: roll the
    /// segment (create files, reserve and map indexes, seal the old one),
    /// grow an index, or fsync by the flush policy (`flush.messages`,
    /// `flush.ms`). A few
    /// comparisons: callers use it to move such appends off an async
    /// runtime's worker threads. `records` is the number of records.
    pub fn append_may_block(&self, bytes: u64, batches: usize, records: i64, now_ms: i64) -> bool {
        let active = self.active();
        let rolls = !active.is_empty()
            && (active.size().saturating_add(bytes) > self.max_segment_bytes()
                || self.segment_expired_by_age(active, now_ms)
                || active.indexes_full()
                || self.log_end_offset().saturating_add(records) - active.base_offset()
                    > i64::from(i32::MAX));
        let flushes = self.unflushed_messages.saturating_add(records) >= self.config.flush_messages
            || now_ms.saturating_sub(self.first_unflushed_ms.unwrap_or(now_ms))
                >= self.config.flush_ms;
        rolls || flushes || active.append_grows_indexes(batches)
    }

    /// Sets the high watermark (replication owns its value; a single
    /// broker sets it to the log end after each append), clamped to
    /// `[log start, log end]`. The broker checkpoints it in the data
    /// directory's file (`storage::high_watermarks`), not the log.
    pub fn set_high_watermark(&mut self, hw: i64) {
        self.high_watermark = hw.clamp(self.log_start_offset, self.log_end_offset());
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// Clean shutdown: [`PartitionLog::close_in_place`], consuming the log.
    pub fn close(mut self) -> Result<()> {
        self.close_in_place()
    }

    /// Clean shutdown: trims the active segment's preallocated indexes,
    /// fsyncs what changed since the last flush, brings the recovery point
    /// and log start checkpoints up to date, and only then
    /// writes the clean-shutdown marker, so the next open trusts the
    /// segments instead of re-validating them. Afterwards the log refuses
    /// appends and skips retention, compaction and flushes, so nothing can
    /// change behind the marker (requests still in flight at shutdown fail
    /// with `KAFKA_STORAGE_ERROR`).
    ///
    /// Cost per partition, at most: one `fdatasync` per segment written
    /// since the last flush, one `msync` per changed index, one fsync per
    /// checkpoint whose value changed, one directory fsync for their
    /// renames, and the marker (its fsync and a directory fsync).
    pub fn close_in_place(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.active_mut().seal()?;
        self.flush_and_checkpoint()?;
        checkpoint::write_clean_shutdown(&self.dir)?;
        Ok(())
    }

    /// Whether [`PartitionLog::close_in_place`] ran.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    fn refuse_if_closed(&self) -> Result<()> {
        if self.closed {
            return Err(StorageError::Io(std::io::Error::other(
                "the log is closed (the broker is shutting down)",
            )));
        }
        Ok(())
    }

    /// Renames the partition directory to `to` (same filesystem) and makes
    /// every later file operation of this log happen there: a log being
    /// deleted can never touch a new directory of the same name.
    pub fn rename_dir(&mut self, to: &Path) -> Result<()> {
        fs::rename(&self.dir, to)?;
        self.dir = to.to_path_buf();
        for seg in &mut self.segments {
            seg.relocate(to);
        }
        self.epochs.relocate(to);
        Ok(())
    }

    /// Removes the partition directory and everything in it.
    pub fn delete(self) -> Result<()> {
        let PartitionLog { dir, segments, .. } = self;
        drop(segments);
        fs::remove_dir_all(&dir)?;
        if let Some(parent) = dir.parent() {
            if let Err(e) = checkpoint::fsync_dir(parent) {
                tracing::warn!(dir = %parent.display(), error = %e, "cannot fsync after deleting a partition");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "log_repl_tests.rs"]
mod repl_tests;

#[cfg(test)]
#[path = "log_snapshot_tests.rs"]
mod snapshot_tests;
