//! Retention of a partition log (`cleanup.policy` with `delete`): which
//! leading segments time retention (`retention.ms`) and size retention
//! (`retention.bytes`) delete, what a pass removed ([`RetentionOutcome`]),
//! and the files taken out of the log that wait to be removed without the
//! partition's lock ([`RetiredFiles`]).
//!
//! The decisions here are pure: the log (`storage::log`) applies them,
//! advancing and checkpointing the log start offset and retiring the
//! segments. This module is a leaf below the log and never imports it.

use crate::storage::segment::{DeletedSegment, Segment};

/// What a retention pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
    pub log_start_offset: i64,
}

/// Files that retention and compaction took out of a log, still open:
/// dropping this removes the deleted segments' files (renamed `.deleted`
/// already) and closes the replaced ones. Both free the files' blocks,
/// which a filesystem does synchronously and which can take tens of
/// milliseconds for large segments (much more with online discard), so the
/// broker takes them out of the log under the partition's lock
/// (`PartitionLog::take_retired`) and drops them after releasing it,
/// keeping that work off the produce and fetch paths. Kafka defers it too
/// (`file.delete.delay.ms`, on a scheduler thread).
#[derive(Debug, Default)]
#[must_use = "dropping it removes the files: do so without the partition's lock"]
pub struct RetiredFiles {
    pub(super) deleted: Vec<DeletedSegment>,
    pub(super) replaced: Vec<Segment>,
}

impl RetiredFiles {
    pub fn is_empty(&self) -> bool {
        self.deleted.is_empty() && self.replaced.is_empty()
    }
}

/// Time retention over `segments` (sorted, the last active): how many
/// leading non-active segments are past `retention_ms` at `now_ms` (a
/// non-active segment compaction emptied holds nothing and does not hold
/// back the ones after it), and whether every one of them is and the
/// active segment too, which then rolls and goes in the same pass (as
/// Kafka does).
pub(super) fn expired_by_time(
    segments: &[Segment],
    retention_ms: i64,
    now_ms: i64,
) -> (usize, bool) {
    let expired = |s: &Segment| {
        !s.is_empty() && now_ms.saturating_sub(s.retention_timestamp()) > retention_ms
    };
    let n = segments.len();
    let count = segments[..n - 1]
        .iter()
        .take_while(|s| s.is_empty() || expired(s))
        .count();
    let active_too = count == n - 1 && expired(&segments[n - 1]);
    (count, active_too)
}

/// Size retention over `segments` (sorted, the last active): how many
/// leading non-active segments go so that the log holds at most
/// `retention_bytes` (a segment goes only whole, and only while all of it
/// is in excess).
pub(super) fn excess_by_size(segments: &[Segment], retention_bytes: i64) -> usize {
    let total: u64 = segments.iter().map(Segment::size).sum();
    let mut excess = total.saturating_sub(retention_bytes as u64);
    let n = segments.len();
    let mut count = 0;
    for seg in &segments[..n - 1] {
        if seg.size() > excess {
            break;
        }
        excess -= seg.size();
        count += 1;
    }
    count
}
