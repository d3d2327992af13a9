//! Compaction as a partition log drives it (`cleanup.policy=compact`):
//! whether a pass is due and which segments it may clean ([`plan`]), the
//! pass itself between its plan and its finish ([`CompactionPass`], run
//! without the log's lock), and whether a pass that ran still matches the
//! log it was planned on.
//!
//! The rules of a pass (what survives, tombstones, the crash-safe swap)
//! live in `storage::cleaner`; the log (`storage::log`) owns the segments,
//! takes the plan under its lock, swaps the cleaned copies in and keeps
//! the cleaner checkpoint. This module is a leaf below the log: it reads
//! the log's segments through the slice the log hands it and never
//! imports the log.

use std::fs;
use std::path::{Path, PathBuf};

use crate::storage::checkpoint;
use crate::storage::cleaner::{self, CleanStats, CompactionOutcome, Throttle};
use crate::storage::config::LogConfig;
use crate::storage::segment::{SealedBytes, Segment};
use crate::storage::Result;

/// What `PartitionLog::plan_compaction` decided.
#[derive(Debug)]
pub enum CompactionPlan {
    /// No pass is due (the outcome says why: nothing cleanable, not dirty
    /// enough, ...).
    Nothing(CompactionOutcome),
    /// A pass to run without the log's lock, then finish under it.
    Pass(CompactionPass),
}

/// One compaction pass between its plan and its finish: the bytes it reads
/// (segments that were sealed and cleanable when planned) and, once run,
/// the cleaned segments it prepared in the staging directory, indexes
/// included. It holds no lock and touches nothing of the live log.
#[derive(Debug)]
pub struct CompactionPass {
    pub(super) id: u64,
    pub(super) dir: PathBuf,
    pub(super) staging: PathBuf,
    pub(super) segments: Vec<SealedBytes>,
    /// Base offset of the first segment after the cleaned range: the
    /// cleaner checkpoint once the pass is swapped in.
    pub(super) clean_to: i64,
    now_ms: i64,
    delete_retention_ms: i64,
    index_interval_bytes: u64,
    segment_index_bytes: u64,
    pub(super) outcome: CompactionOutcome,
    /// `(index among segments, the cleaned copy)` for each segment that
    /// loses records, oldest first.
    pub(super) prepared: Vec<(usize, Segment)>,
    pub(super) stats: CleanStats,
}

impl CompactionPass {
    /// The middle phase, without the log's lock: builds the latest offset
    /// per key over the cleanable segments, writes a cleaned copy of each
    /// segment that loses records into the staging directory and builds
    /// its indexes there (validating the copy as recovery would), every
    /// byte read and written counted against `throttle`. Appends, reads and
    /// rolls of the log go on meanwhile; they never touch these segments.
    pub fn run(&mut self, throttle: &Throttle) -> Result<()> {
        let map = cleaner::build_offset_map(&self.segments, throttle)?;
        let mut markers = cleaner::MarkerTracker::default();
        for (i, seg) in self.segments.iter().enumerate() {
            let changed = cleaner::write_cleaned(
                seg,
                &self.staging,
                &map,
                &mut markers,
                self.now_ms,
                self.delete_retention_ms,
                &mut self.stats,
                throttle,
            )?;
            if !changed {
                continue;
            }
            let mut copy = Segment::open(&self.staging, seg.base_offset())?;
            copy.recover(
                self.index_interval_bytes,
                self.segment_index_bytes,
                self.now_ms,
                true,
            )?;
            throttle.account(copy.size());
            copy.seal()?;
            copy.flush()?;
            self.prepared.push((i, copy));
        }
        // The checkpoints the pass leaves are staged with the copies and
        // committed with them (see cleaner::commit_pass); writing them
        // fsyncs the staging directory, which makes the copies' entries
        // durable too.
        let due = self.stats.next_tombstone_expiry.unwrap_or(i64::MAX);
        checkpoint::write_checkpoints(
            &self.staging,
            &[
                (checkpoint::CLEANER_OFFSET_FILE, self.clean_to),
                (checkpoint::CLEANER_TOMBSTONE_DUE_FILE, due),
            ],
        )?;
        Ok(())
    }

    /// Whether the log (pass number `current_pass`, directory `dir`,
    /// `segments` now) still holds the segments this pass read: the same
    /// files and sizes, no retention, truncation, move or later pass in
    /// between.
    pub(super) fn still_matches(
        &self,
        current_pass: u64,
        dir: &Path,
        segments: &[Segment],
    ) -> bool {
        let k = self.segments.len();
        self.id == current_pass
            && self.dir == dir
            && k < segments.len()
            && segments[k].base_offset() == self.clean_to
            && self
                .segments
                .iter()
                .zip(segments)
                .all(|(taken, seg)| taken.is_still(seg))
    }
}

/// Removes a pass's staging directory (a pass that failed, or that no
/// longer matches its log).
pub(super) fn discard(dir: &Path, staging: &Path, why: &str) {
    if let Err(e) = fs::remove_dir_all(staging) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %staging.display(), error = %e, "cannot remove the cleaner's staging directory");
        }
    }
    tracing::debug!(dir = %dir.display(), why, "compaction pass discarded");
}

/// What the log tells [`plan`] about itself.
pub(super) struct LogView<'a> {
    pub dir: &'a Path,
    pub config: &'a LogConfig,
    /// Sorted by base offset, never empty; the last is active.
    pub segments: &'a [Segment],
    pub high_watermark: i64,
    /// The cleaner checkpoint (`None`: never compacted).
    pub cleaned_to: Option<i64>,
    pub tombstone_due: Option<i64>,
    pub closed: bool,
}

/// The first phase of a compaction (`PartitionLog::plan_compaction`, under
/// the log's lock): decides whether a pass is due and, if so, numbers it
/// (`*passes` counts the passes planned), takes what it will read (the
/// cleanable segments' bytes as they are now, [`SealedBytes`]) and creates
/// its staging directory. Cheap: one header read per segment.
///
/// Cleanable are the leading non-active segments that end at or below the
/// high watermark and whose newest record is at least
/// `min.compaction.lag.ms` old. A pass is due when the dirty ratio reaches
/// `min.cleanable.dirty.ratio` (and some bytes are dirty), when some bytes
/// are dirty and the oldest dirty record is older than
/// `max.compaction.lag.ms` (KIP-354), or when a tombstone kept by an
/// earlier pass has expired.
pub(super) fn plan(log: &LogView<'_>, passes: &mut u64, now_ms: i64) -> Result<CompactionPlan> {
    let first_base = log.segments[0].base_offset();
    let mut outcome = CompactionOutcome {
        cleaned_up_to: log.cleaned_to.unwrap_or(first_base),
        ..CompactionOutcome::default()
    };
    if !log.config.compact || log.closed {
        return Ok(CompactionPlan::Nothing(outcome));
    }
    let n = log.segments.len();
    let lag = log.config.min_compaction_lag_ms;
    let mut k = 0;
    while k + 1 < n {
        if log.segments[k + 1].base_offset() > log.high_watermark {
            break;
        }
        let seg = &log.segments[k];
        if lag > 0 && now_ms.saturating_sub(seg.retention_timestamp()) < lag {
            break;
        }
        k += 1;
    }
    outcome.segments_cleanable = k;
    if k == 0 {
        return Ok(CompactionPlan::Nothing(outcome));
    }
    let cleaned_to = log.cleaned_to.unwrap_or(i64::MIN);
    let (mut dirty, mut total) = (0u64, 0u64);
    for seg in &log.segments[..k] {
        total += seg.size();
        if seg.base_offset() >= cleaned_to {
            dirty += seg.size();
        }
    }
    outcome.dirty_ratio = if total == 0 {
        0.0
    } else {
        dirty as f64 / total as f64
    };
    let dirty_enough = dirty > 0 && outcome.dirty_ratio >= log.config.min_cleanable_dirty_ratio;
    let tombstones_due = log.tombstone_due.is_some_and(|t| now_ms >= t);
    outcome.compaction_delay_ms = max_compaction_delay_ms(log, cleaned_to, now_ms)?;
    let lag_passed = dirty > 0 && outcome.compaction_delay_ms > 0;
    if !dirty_enough && !tombstones_due && !lag_passed {
        return Ok(CompactionPlan::Nothing(outcome));
    }
    outcome.ran = true;
    outcome.bytes_before = total;
    *passes += 1;
    let staging = cleaner::create_staging(log.dir)?;
    Ok(CompactionPlan::Pass(CompactionPass {
        id: *passes,
        dir: log.dir.to_path_buf(),
        staging,
        segments: log.segments[..k]
            .iter()
            .map(Segment::sealed_bytes)
            .collect(),
        clean_to: log.segments[k].base_offset(),
        now_ms,
        delete_retention_ms: log.config.delete_retention_ms,
        index_interval_bytes: log.config.index_interval_bytes,
        segment_index_bytes: log.config.segment_index_bytes,
        outcome,
        prepared: Vec::new(),
        stats: CleanStats::default(),
    }))
}

/// How long ago the oldest dirty record should have been cleaned by
/// `max.compaction.lag.ms` (0 if not yet): as Kafka's
/// `LogCleanerManager.maxCompactionDelay`, the oldest dirty record's
/// time is the smallest positive max timestamp of the first batch of
/// each non-active segment at or after the cleaner checkpoint.
fn max_compaction_delay_ms(log: &LogView<'_>, cleaned_to: i64, now_ms: i64) -> Result<i64> {
    let lag = log.config.max_compaction_lag_ms.max(0);
    let clean_until = now_ms.saturating_sub(lag);
    let n = log.segments.len();
    let mut earliest = i64::MAX;
    for seg in &log.segments[..n - 1] {
        if seg.base_offset() < cleaned_to || seg.is_empty() {
            continue;
        }
        let first = seg.header_at(0)?.max_timestamp;
        if first > 0 {
            earliest = earliest.min(first);
        }
    }
    Ok(if earliest < clean_until {
        clean_until - earliest
    } else {
        0
    })
}
