//! Recovery of a partition directory when its log opens: the inventory of
//! the directory (leftover `.deleted`, `.tmp` and orphaned index files
//! removed, an interrupted compaction discarded or completed), the
//! checkpoints read, segments below the log start dropped, every batch
//! after the recovery point re-validated and a torn tail truncated, missing
//! or corrupt indexes rebuilt, the leader-epoch cache loaded or rebuilt
//! from the batch headers, and checkpoints pulled back to what survived.
//!
//! This module owns only the scan at open: it hands the log
//! (`storage::log`) the segments and offsets it recovered ([`Recovered`])
//! and keeps nothing. It is a leaf below the log: it reads and repairs the
//! directory through `segment`, `checkpoint`, `cleaner`, `epochs`,
//! `high_watermarks` and `producer_snapshot`, and never imports the log.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::storage::checkpoint;
use crate::storage::cleaner;
use crate::storage::config::LogConfig;
use crate::storage::epochs::LeaderEpochCache;
use crate::storage::high_watermarks;
use crate::storage::producer_snapshot;
use crate::storage::segment::{self, Segment};
use crate::storage::Result;

/// What opening a log had to do (for logs and metrics: a clean restart
/// re-validates nothing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// The directory held segments but no clean-shutdown marker (with a
    /// recovery point checkpoint): the stop before was not clean.
    pub unclean: bool,
    /// Segments whose batches were re-validated and indexes rebuilt (after
    /// an unclean stop, or because an index was missing or corrupt).
    pub segments_recovered: usize,
    /// Bytes of segment data that recovery read: re-validated (CRC), plus
    /// the header walk from the last index entry below the recovery point.
    pub bytes_read: u64,
}

/// A partition directory as recovery left it: what the log starts from.
#[derive(Debug)]
pub(super) struct Recovered {
    pub dir: PathBuf,
    /// Sorted by base offset, never empty; the last is active.
    pub segments: Vec<Segment>,
    pub log_start_offset: i64,
    pub recovery_point: i64,
    pub high_watermark: i64,
    /// The recovery point and log start checkpoint files' values (`None`:
    /// absent), after any pull-back.
    pub checkpointed_recovery_point: Option<i64>,
    pub checkpointed_log_start: Option<i64>,
    /// The cleaner checkpoint, clamped to the log end.
    pub cleaned_to: Option<i64>,
    /// When a tombstone kept by the last clean expires (`Some(i64::MIN)`:
    /// unknown for a log compacted before, check once).
    pub tombstone_due: Option<i64>,
    pub epochs: LeaderEpochCache,
    pub report: OpenReport,
    /// The stop before was clean (marker and recovery point present).
    pub clean: bool,
}

/// Rebuilds a leader-epoch cache from the partition leader epoch of every
/// batch header (no CRC check). A segment whose headers cannot be walked
/// contributes what was read before the problem (it is logged).
fn rebuild_epochs(dir: &Path, segments: &[Segment]) -> LeaderEpochCache {
    let mut cache = LeaderEpochCache::empty(dir);
    for seg in segments {
        let walked = seg.for_each_header(|h| {
            cache.assign(h.partition_leader_epoch, h.base_offset);
        });
        if let Err(e) = walked {
            tracing::warn!(path = %seg.log_path().display(), error = %e, "cannot read every batch header while rebuilding the leader epoch cache");
        }
    }
    cache
}

fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Opens (creating if needed) the partition directory `dir` and recovers
/// it, as `PartitionLog::open` documents: after an unclean stop (no
/// clean-shutdown marker) every batch from the recovery point on is
/// re-validated, a torn or corrupt tail is truncated after the last valid
/// batch (later segments are then dropped) and the indexes of what was
/// re-validated are rebuilt; other segments are trusted, their indexes
/// sanity-checked and rebuilt when missing or corrupt. The leader-epoch
/// cache is loaded, or rebuilt from the batch headers, and clamped to the
/// log; checkpoints past what survived are pulled back; producer state
/// snapshots outside the log are removed; the clean-shutdown marker goes.
pub(super) fn recover(dir: &Path, config: &LogConfig, now_ms: i64) -> Result<Recovered> {
    let dir = dir.to_path_buf();
    if !dir.is_dir() {
        fs::create_dir_all(&dir)?;
        if let Some(parent) = dir.parent() {
            checkpoint::fsync_dir(parent)?;
        }
    }
    let clean = checkpoint::has_clean_shutdown(&dir);
    // An interrupted compaction: discard uncommitted copies, complete
    // committed swaps (their segments' indexes are rebuilt below).
    cleaner::recover_leftovers(&dir)?;

    // Inventory of the directory.
    let mut bases = Vec::new();
    let mut index_files = Vec::new();
    for entry in fs::read_dir(&dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(segment::DELETED_SUFFIX) || name.ends_with(checkpoint::TMP_SUFFIX) {
            remove_if_exists(&entry.path())?;
        } else if let Some(base) = segment::parse_file_name(name, segment::LOG_SUFFIX) {
            bases.push(base);
        } else if let Some(base) = segment::parse_file_name(name, segment::INDEX_SUFFIX)
            .or_else(|| segment::parse_file_name(name, segment::TIME_INDEX_SUFFIX))
        {
            index_files.push((base, entry.path()));
        }
    }
    bases.sort_unstable();
    for (base, path) in index_files {
        if bases.binary_search(&base).is_err() {
            tracing::warn!(path = %path.display(), "removing index without a log segment");
            remove_if_exists(&path)?;
        }
    }

    let checkpointed_start = checkpoint::read_checkpoint(&dir, checkpoint::LOG_START_OFFSET_FILE)?;
    let checkpointed_recovery = checkpoint::read_checkpoint(&dir, checkpoint::RECOVERY_POINT_FILE)?;
    // Written by brokers before the data directory's file; the
    // partition prefers that file's value when it has one.
    let checkpointed_hw = checkpoint::read_checkpoint(&dir, high_watermarks::LEGACY_FILE)?;
    let checkpointed_cleaned = checkpoint::read_checkpoint(&dir, checkpoint::CLEANER_OFFSET_FILE)?;
    let checkpointed_due =
        checkpoint::read_checkpoint(&dir, checkpoint::CLEANER_TOMBSTONE_DUE_FILE)?;
    // Compacted segments (wholly below the cleaner checkpoint) may have
    // offset gaps inside and end before the next segment starts; all
    // others must be contiguous, which keeps torn-tail detection strict
    // where appends happen.
    let allow_gaps = |base: i64| checkpointed_cleaned.is_some_and(|c| base < c);
    let clean = clean && checkpointed_recovery.is_some();

    // Segments wholly below the log start offset are leftovers of a
    // deletion interrupted after its checkpoint.
    if let Some(start) = checkpointed_start {
        while bases.len() > 1 && bases[1] <= start {
            let seg = Segment::open(&dir, bases[0])?;
            tracing::info!(path = %seg.log_path().display(), "removing segment below the log start offset");
            seg.delete()?;
            bases.remove(0);
        }
    }

    let recover_from = if clean {
        bases.len()
    } else {
        let rp = checkpointed_recovery.unwrap_or(i64::MIN);
        bases.partition_point(|&b| b <= rp).saturating_sub(1)
    };

    let mut segments: Vec<Segment> = Vec::with_capacity(bases.len().max(1));
    // Recovered segments have preallocated indexes: sealed below unless last.
    let mut recovered = Vec::with_capacity(bases.len());
    let mut bytes_validated = 0u64;
    for (i, &base) in bases.iter().enumerate() {
        let next_base = bases.get(i + 1).copied();
        let indexes_present = [segment::INDEX_SUFFIX, segment::TIME_INDEX_SUFFIX]
            .iter()
            .all(|s| dir.join(segment::file_name(base, s)).is_file());
        let mut seg = Segment::open(&dir, base)?;
        let mut must_recover = i >= recover_from;
        if !must_recover {
            let problem = if indexes_present {
                seg.load_trusted(
                    next_base,
                    config.index_interval_bytes,
                    now_ms,
                    allow_gaps(base),
                )?
                .err()
            } else {
                Some("index file missing".to_string())
            };
            if let Some(problem) = problem {
                tracing::warn!(path = %seg.log_path().display(), %problem, "rebuilding segment indexes");
                must_recover = true;
            } else if next_base.is_some() {
                // A sealed segment keeps only its `.log` descriptor.
                seg.close_index_files();
            }
        }
        let mut truncated = false;
        if must_recover {
            // The segment holding the recovery point is re-validated
            // from it; later ones (and any whose indexes failed) whole.
            let trusted_below = match checkpointed_recovery {
                Some(rp) if i == recover_from && indexes_present => rp,
                _ => i64::MIN,
            };
            let done = seg.recover_after(
                trusted_below,
                config.index_interval_bytes,
                config.segment_index_bytes,
                now_ms,
                allow_gaps(base),
            )?;
            bytes_validated += done.bytes_read;
            truncated = done.bytes_cut > 0;
        }
        recovered.push(must_recover);
        let consistent = next_base.is_none_or(|n| {
            n == seg.next_offset() || (allow_gaps(base) && !truncated && n > seg.next_offset())
        });
        segments.push(seg);
        if !consistent {
            // The rest of the log cannot follow a truncated segment.
            for &later in &bases[i + 1..] {
                let later_seg = Segment::open(&dir, later)?;
                tracing::warn!(path = %later_seg.log_path().display(), "removing segment after a truncated one");
                later_seg.delete()?;
            }
            break;
        }
    }
    let report = OpenReport {
        unclean: !clean && !bases.is_empty(),
        segments_recovered: recovered.iter().filter(|&&r| r).count(),
        bytes_read: bytes_validated,
    };
    if segments.is_empty() {
        let base = checkpointed_start.unwrap_or(0).max(0);
        segments.push(Segment::create(&dir, base, config.segment_index_bytes)?);
    }
    let last = segments.len() - 1;
    for (seg, _) in segments[..last]
        .iter_mut()
        .zip(&recovered)
        .filter(|(_, &r)| r)
    {
        seg.seal()?;
    }
    if let Err(e) = segments[last].make_active(config.segment_index_bytes) {
        // A full disk: the log still opens and serves reads; appends
        // fail (KAFKA_STORAGE_ERROR) until space returns.
        tracing::warn!(path = %segments[last].log_path().display(), error = %e, "cannot reserve index space for the active segment");
    }

    let first_base = segments[0].base_offset();
    let log_end = segments[last].next_offset();
    let log_start_offset = checkpointed_start
        .unwrap_or(first_base)
        .clamp(first_base, log_end);
    let high_watermark = checkpointed_hw
        .unwrap_or(log_start_offset)
        .clamp(log_start_offset, log_end);
    // Recovery validated the bytes but did not make them durable: the
    // recovery point stays where the last flush left it (so a new crash
    // re-validates them) until the next flush.
    let recovery_point = if clean {
        log_end
    } else {
        checkpointed_recovery
            .unwrap_or(first_base)
            .clamp(first_base, log_end)
    };
    let (mut epochs, mut epochs_changed) = match LeaderEpochCache::load(&dir)? {
        Some(c) if !(c.is_empty() && log_start_offset < log_end) => (c, false),
        // an empty log has no history to rebuild (a new partition)
        None if log_start_offset == log_end => (LeaderEpochCache::empty(&dir), false),
        _ => {
            tracing::info!(dir = %dir.display(), "rebuilding the leader epoch cache from batch headers");
            (rebuild_epochs(&dir, &segments), true)
        }
    };
    epochs_changed |= epochs.truncate_from_end(log_end);
    epochs_changed |= epochs.truncate_from_start(log_start_offset);
    let cleaned_to = checkpointed_cleaned.map(|c| c.min(log_end));
    let mut out = Recovered {
        dir,
        segments,
        log_start_offset,
        recovery_point,
        high_watermark,
        checkpointed_recovery_point: checkpointed_recovery,
        checkpointed_log_start: checkpointed_start,
        cleaned_to,
        tombstone_due: match checkpointed_due {
            Some(i64::MAX) => None,
            Some(due) => Some(due),
            None => checkpointed_cleaned.map(|_| i64::MIN),
        },
        epochs,
        report,
        clean,
    };
    if epochs_changed {
        // Failing (a full disk) is harmless: the next open redoes it.
        if let Err(e) = out.epochs.write() {
            tracing::warn!(dir = %out.dir.display(), error = %e, "cannot write the leader epoch cache");
        }
    }
    // Checkpoints pointing past what survived are pulled back. Failing
    // to (a full disk) is harmless: the next open clamps them again.
    let pull_back = |dir: &Path, name: &str, value: i64| match checkpoint::write_checkpoint(
        dir, name, value,
    ) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), checkpoint = name, error = %e, "cannot rewrite a checkpoint");
            false
        }
    };
    if checkpointed_start.is_some_and(|s| s != log_start_offset)
        && pull_back(
            &out.dir,
            checkpoint::LOG_START_OFFSET_FILE,
            log_start_offset,
        )
    {
        out.checkpointed_log_start = Some(log_start_offset);
    }
    if checkpointed_recovery.is_some_and(|r| r != recovery_point)
        && pull_back(&out.dir, checkpoint::RECOVERY_POINT_FILE, recovery_point)
    {
        out.checkpointed_recovery_point = Some(recovery_point);
    }
    if let (Some(c), Some(now)) = (checkpointed_cleaned, cleaned_to) {
        if c != now {
            pull_back(&out.dir, checkpoint::CLEANER_OFFSET_FILE, now);
        }
    }
    // Producer state snapshots of a history that did not survive, or
    // below the log start (a deletion interrupted after its checkpoint).
    if let Err(e) = producer_snapshot::remove_outside(&out.dir, log_start_offset, log_end) {
        tracing::warn!(dir = %out.dir.display(), error = %e, "cannot remove producer state snapshots");
    }
    checkpoint::remove_clean_shutdown(&out.dir)?;
    Ok(out)
}
