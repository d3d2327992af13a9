//! The leader-epoch cache of one partition (KIP-101/KIP-279) and the
//! follower's truncation rule.
//!
//! This module owns the mapping "leader epoch → first offset written in
//! that epoch" and its checkpoint file `leader-epoch-checkpoint` in the
//! partition directory; it never reads or writes segments (the log feeds
//! it the epochs of the batches it appends, and rebuilds it from batch
//! headers when the file is missing). Replication needs it to find where a
//! follower's log diverges from its leader's: a follower asks the leader
//! for the end offset of its latest epoch (OffsetsForLeaderEpoch, or the
//! diverging epoch of a Fetch response) and truncates with
//! [`truncation_offset`].
//!
//! The rules follow Apache Kafka's `LeaderEpochFileCache`: entries are
//! strictly increasing in both epoch and start offset; assigning an epoch
//! first removes the entries it contradicts; truncation from the end drops
//! entries starting at or after the new log end; truncation from the start
//! keeps the entry covering the new log start, moved up to it.
//!
//! File format (Kafka's): line 1 the version `0`, line 2 the number of
//! entries, then one `<epoch> <start offset>` line per entry. It is written
//! atomically (temp file, fsync, rename, directory fsync); a file that does
//! not parse reads as absent and the log rebuilds the cache.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::checkpoint;
use super::Result;

/// Name of the checkpoint file in the partition directory.
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// Kafka's `UNDEFINED_EPOCH`.
pub const UNDEFINED_EPOCH: i32 = -1;
/// Kafka's `UNDEFINED_EPOCH_OFFSET`.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

const FILE_VERSION: u32 = 0;

/// One entry: `epoch` started at `start_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// The leader-epoch cache of one partition: entries sorted by epoch (and
/// so by start offset), plus the directory its checkpoint lives in.
/// Changes are in memory until [`LeaderEpochCache::write`].
#[derive(Debug, Clone)]
pub struct LeaderEpochCache {
    dir: PathBuf,
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    /// An empty cache for `dir` (nothing is written).
    pub fn empty(dir: &Path) -> Self {
        LeaderEpochCache {
            dir: dir.to_path_buf(),
            entries: Vec::new(),
        }
    }

    /// Reads the checkpoint of `dir`: `Ok(None)` when the file is absent
    /// or does not parse (a warning is logged for the latter).
    pub fn load(dir: &Path) -> Result<Option<Self>> {
        let path = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let entries = std::str::from_utf8(&bytes).ok().and_then(parse);
        if entries.is_none() {
            tracing::warn!(path = %path.display(), "ignoring unreadable leader epoch checkpoint");
        }
        Ok(entries.map(|entries| LeaderEpochCache {
            dir: dir.to_path_buf(),
            entries,
        }))
    }

    /// Writes the checkpoint atomically.
    pub fn write(&self) -> Result<()> {
        checkpoint::write_atomically(
            &self.dir,
            LEADER_EPOCH_CHECKPOINT_FILE,
            format(&self.entries).as_bytes(),
        )
    }

    /// Follows a rename of the partition directory (nothing is written).
    pub fn relocate(&mut self, dir: &Path) {
        self.dir = dir.to_path_buf();
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }
    pub fn latest_epoch(&self) -> Option<i32> {
        self.latest().map(|e| e.epoch)
    }

    /// Records that `epoch` starts at `start_offset`, as Kafka's
    /// `assign`: nothing changes when it is already the latest epoch with
    /// a start at or before `start_offset`; otherwise the entries from the
    /// end whose epoch is `>= epoch` or whose start is `>= start_offset`
    /// are removed and the new entry appended. Negative values are
    /// ignored. Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        if self
            .latest()
            .is_some_and(|l| l.epoch == epoch && l.start_offset <= start_offset)
        {
            return false;
        }
        while self
            .entries
            .last()
            .is_some_and(|l| l.epoch >= epoch || l.start_offset >= start_offset)
        {
            let removed = self.entries.pop();
            // Removing an entry that starts where the new one does drops
            // no data: only the others are worth a note.
            if let Some(r) = removed.filter(|r| r.start_offset != start_offset) {
                tracing::debug!(
                    dir = %self.dir.display(),
                    removed_epoch = r.epoch,
                    removed_start = r.start_offset,
                    epoch,
                    start_offset,
                    "new leader epoch entry replaces a conflicting one"
                );
            }
        }
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// Removes the entries starting at or after `end_offset` (the log was
    /// truncated to end there). Returns whether the cache changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// The log now starts at `start_offset`: entries starting at or before
    /// it are removed except the last of them, which is kept with its
    /// start moved to `start_offset` (it covers the new log start).
    /// Returns whether the cache changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let covered = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        let Some(last) = covered.checked_sub(1) else {
            return false;
        };
        let changed = last > 0 || self.entries[last].start_offset != start_offset;
        self.entries.drain(..last);
        self.entries[0].start_offset = start_offset;
        changed
    }

    /// Removes every entry. Returns whether the cache changed.
    pub fn clear(&mut self) -> bool {
        let changed = !self.entries.is_empty();
        self.entries.clear();
        changed
    }

    /// Kafka's `endOffsetFor` (KIP-101/KIP-279): for `requested`, the
    /// largest cached epoch `<=` it and that epoch's end offset (the start
    /// of the next larger cached epoch, or `log_end` for the latest).
    /// Corner cases, as Kafka:
    /// - `requested` is [`UNDEFINED_EPOCH`], the cache is empty, or
    ///   `requested` is above the latest epoch: `None` (undefined);
    /// - `requested` is the latest epoch: `(requested, log_end)`;
    /// - `requested` is below every cached epoch: `(requested, start of the
    ///   first cached epoch)` — the data of older epochs is gone, so the
    ///   asker should not keep anything before that start.
    pub fn end_offset_for(&self, requested: i32, log_end: i64) -> Option<(i32, i64)> {
        if requested == UNDEFINED_EPOCH {
            return None;
        }
        let latest = self.latest()?;
        if latest.epoch == requested {
            return Some((requested, log_end));
        }
        // First entry with an epoch above `requested`.
        let higher = self.entries.partition_point(|e| e.epoch <= requested);
        let next = self.entries.get(higher)?;
        match higher.checked_sub(1).and_then(|i| self.entries.get(i)) {
            Some(floor) => Some((floor.epoch, next.start_offset)),
            None => Some((requested, next.start_offset)),
        }
    }

    /// The epoch the record at `offset` was written in, if known.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        let covered = self.entries.partition_point(|e| e.start_offset <= offset);
        covered
            .checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .map(|e| e.epoch)
    }
}

/// Kafka's text format of the entries.
fn format(entries: &[EpochEntry]) -> String {
    let mut s = format!("{FILE_VERSION}\n{}\n", entries.len());
    for e in entries {
        s.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
    }
    s
}

/// Parses the checkpoint file: `None` unless it is exactly the version
/// line, the count and that many entries, with epochs and start offsets
/// non-negative and strictly increasing.
fn parse(content: &str) -> Option<Vec<EpochEntry>> {
    let body = content.strip_suffix('\n')?;
    let mut lines = body.split('\n');
    if lines.next()?.trim().parse::<u32>().ok()? != FILE_VERSION {
        return None;
    }
    let count = lines.next()?.trim().parse::<usize>().ok()?;
    let mut entries: Vec<EpochEntry> = Vec::with_capacity(count.min(1024));
    for line in lines {
        let mut parts = line.split_whitespace();
        let epoch = parts.next()?.parse::<i32>().ok()?;
        let start_offset = parts.next()?.parse::<i64>().ok()?;
        if parts.next().is_some() || epoch < 0 || start_offset < 0 {
            return None;
        }
        if entries
            .last()
            .is_some_and(|l| l.epoch >= epoch || l.start_offset >= start_offset)
        {
            return None;
        }
        entries.push(EpochEntry {
            epoch,
            start_offset,
        });
    }
    (entries.len() == count).then_some(entries)
}

/// Where a follower truncates after its leader answered, and whether that
/// is final.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TruncationPoint {
    /// Offset to truncate the follower's log to (`PartitionLog::truncate_to`).
    pub offset: i64,
    /// `false` when the leader answered with an epoch the follower does
    /// not have: after truncating, the follower asks again with its (new)
    /// latest epoch; each round strictly lowers that epoch, so this ends.
    pub complete: bool,
}

/// KIP-279 truncation (Kafka's `getOffsetTruncationState`): `local` are
/// the follower's cache entries, `local_log_end` its log end, and
/// `(leader_epoch, leader_end_offset)` the leader's answer for the
/// follower's latest epoch (OffsetsForLeaderEpoch) or the diverging epoch
/// of a Fetch response. `high_watermark` is used only when the leader's
/// answer is undefined.
///
/// - Undefined end offset ([`UNDEFINED_EPOCH_OFFSET`], i.e. the leader
///   knows no epoch at or below the one asked about): truncate to the
///   follower's high watermark (Kafka's rule), never above the log end.
/// - Undefined epoch with a defined offset (an old protocol): truncate to
///   that offset.
/// - The follower has the leader's epoch: truncate to the smaller of the
///   two end offsets of that epoch. Complete.
/// - The follower lacks it but has smaller epochs: truncate to the end of
///   its largest epoch below the leader's; not complete (ask again).
/// - The follower has no epoch at or below the leader's (it started
///   tracking epochs later): truncate to the leader's end offset.
///
/// The result never exceeds `local_log_end` (no truncation).
pub fn truncation_point(
    local: &[EpochEntry],
    local_log_end: i64,
    high_watermark: i64,
    leader_epoch: i32,
    leader_end_offset: i64,
) -> TruncationPoint {
    let done = |offset: i64| TruncationPoint {
        offset: offset.min(local_log_end),
        complete: true,
    };
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET || leader_end_offset < 0 {
        return done(high_watermark);
    }
    if leader_epoch == UNDEFINED_EPOCH {
        return done(leader_end_offset);
    }
    let cache = LeaderEpochCache {
        dir: PathBuf::new(),
        entries: local.to_vec(),
    };
    match cache.end_offset_for(leader_epoch, local_log_end) {
        Some((epoch, end)) if epoch != leader_epoch => TruncationPoint {
            offset: end.min(local_log_end),
            complete: false,
        },
        Some((_, end)) => done(end.min(leader_end_offset)),
        None => done(leader_end_offset),
    }
}

/// [`truncation_point`]'s offset, for callers without the high watermark:
/// when the leader's answer is undefined (end offset
/// [`UNDEFINED_EPOCH_OFFSET`]) this returns [`UNDEFINED_EPOCH_OFFSET`],
/// meaning "truncate to your high watermark" (Kafka's rule; the log
/// refuses a negative truncation offset, so it cannot be applied by
/// mistake). When the follower lacks the leader's epoch the offset is an
/// intermediate one: truncate, then ask again with the new latest epoch
/// (see [`TruncationPoint::complete`]).
pub fn truncation_offset(
    local: &[EpochEntry],
    local_log_end: i64,
    leader_epoch: i32,
    leader_end_offset: i64,
) -> i64 {
    if leader_end_offset < 0 {
        return UNDEFINED_EPOCH_OFFSET;
    }
    truncation_point(
        local,
        local_log_end,
        local_log_end,
        leader_epoch,
        leader_end_offset,
    )
    .offset
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(epoch: i32, start_offset: i64) -> EpochEntry {
        EpochEntry {
            epoch,
            start_offset,
        }
    }

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::empty(Path::new("/nonexistent"));
        for &(epoch, start) in entries {
            assert!(c.assign(epoch, start));
        }
        c
    }

    fn pairs(c: &LeaderEpochCache) -> Vec<(i32, i64)> {
        c.entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[test]
    fn assign_follows_kafka() {
        let mut c = cache(&[(0, 0), (2, 10)]);
        // The latest epoch again at a later offset: no change.
        assert!(!c.assign(2, 15));
        assert_eq!(pairs(&c), [(0, 0), (2, 10)]);
        // The latest epoch at an earlier offset: moved down.
        assert!(c.assign(2, 8));
        assert_eq!(pairs(&c), [(0, 0), (2, 8)]);
        // A newer epoch.
        assert!(c.assign(5, 20));
        assert_eq!(pairs(&c), [(0, 0), (2, 8), (5, 20)]);
        // A newer epoch at the same start replaces the entry without data.
        assert!(c.assign(6, 20));
        assert_eq!(pairs(&c), [(0, 0), (2, 8), (6, 20)]);
        // An older epoch removes the entries it contradicts.
        assert!(c.assign(3, 25));
        assert_eq!(pairs(&c), [(0, 0), (2, 8), (3, 25)]);
        // A newer epoch starting before the latest start removes it.
        assert!(c.assign(7, 9));
        assert_eq!(pairs(&c), [(0, 0), (2, 8), (7, 9)]);
        // Negative values are ignored.
        assert!(!c.assign(-1, 30));
        assert!(!c.assign(8, -1));
        assert_eq!(c.latest_epoch(), Some(7));
        assert_eq!(cache(&[]).latest_epoch(), None);
    }

    #[test]
    fn end_offset_for_corner_cases() {
        let c = cache(&[(1, 0), (3, 100), (6, 200)]);
        let leo = 250;
        // The latest epoch: the log end.
        assert_eq!(c.end_offset_for(6, leo), Some((6, 250)));
        // A cached epoch: the start of the next one.
        assert_eq!(c.end_offset_for(3, leo), Some((3, 200)));
        assert_eq!(c.end_offset_for(1, leo), Some((1, 100)));
        // Between cached epochs: the largest below, ending where the next starts.
        assert_eq!(c.end_offset_for(2, leo), Some((1, 100)));
        assert_eq!(c.end_offset_for(5, leo), Some((3, 200)));
        // Below every cached epoch: the requested epoch, ending at the first start.
        assert_eq!(c.end_offset_for(0, leo), Some((0, 0)));
        let c2 = cache(&[(4, 50), (6, 80)]);
        assert_eq!(c2.end_offset_for(2, 90), Some((2, 50)));
        // Above the latest epoch, undefined epoch, empty cache: undefined.
        assert_eq!(c.end_offset_for(7, leo), None);
        assert_eq!(c.end_offset_for(UNDEFINED_EPOCH, leo), None);
        assert_eq!(cache(&[]).end_offset_for(0, leo), None);
        // A single entry.
        let one = cache(&[(0, 0)]);
        assert_eq!(one.end_offset_for(0, 7), Some((0, 7)));
        assert_eq!(one.end_offset_for(1, 7), None);
    }

    #[test]
    fn truncate_from_end_and_start() {
        let mut c = cache(&[(1, 0), (3, 100), (6, 200)]);
        assert!(!c.truncate_from_end(201));
        assert!(c.truncate_from_end(200));
        assert_eq!(pairs(&c), [(1, 0), (3, 100)]);
        assert!(c.truncate_from_end(50));
        assert_eq!(pairs(&c), [(1, 0)]);
        assert!(c.truncate_from_end(0));
        assert!(c.is_empty());

        let mut c = cache(&[(1, 0), (3, 100), (6, 200)]);
        assert!(!c.truncate_from_start(0));
        // Keeps the entry covering the new start, moved up to it.
        assert!(c.truncate_from_start(150));
        assert_eq!(pairs(&c), [(3, 150), (6, 200)]);
        // Exactly at an entry's start: the earlier ones go.
        assert!(c.truncate_from_start(200));
        assert_eq!(pairs(&c), [(6, 200)]);
        assert!(!c.truncate_from_start(200));
        assert!(c.truncate_from_start(500));
        assert_eq!(pairs(&c), [(6, 500)]);
        // Before the first entry: nothing to do.
        let mut c = cache(&[(2, 10)]);
        assert!(!c.truncate_from_start(5));
        assert_eq!(pairs(&c), [(2, 10)]);
        assert_eq!(c.epoch_for_offset(5), None);
        assert_eq!(c.epoch_for_offset(10), Some(2));
        assert!(c.clear());
        assert!(!c.clear());
    }

    #[test]
    fn file_round_trip_and_rejects_garbage() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(LeaderEpochCache::load(dir.path()).expect("load").is_none());
        let mut c = LeaderEpochCache::empty(dir.path());
        c.write().expect("write empty");
        let read = LeaderEpochCache::load(dir.path())
            .expect("load")
            .expect("present");
        assert!(read.is_empty());
        c.assign(0, 0);
        c.assign(4, 1234);
        c.write().expect("write");
        let text = fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE)).expect("read");
        assert_eq!(text, "0\n2\n0 0\n4 1234\n");
        let read = LeaderEpochCache::load(dir.path())
            .expect("load")
            .expect("present");
        assert_eq!(read.entries(), &[e(0, 0), e(4, 1234)]);
        for bad in [
            "",
            "0\n2\n0 0\n4 1234",
            "1\n1\n0 0\n",
            "0\n2\n0 0\n",
            "0\n1\n0 0\n1 5\n",
            "0\n2\n3 0\n2 5\n",
            "0\n2\n0 5\n1 5\n",
            "0\n1\n-1 0\n",
            "0\n1\n0 x\n",
            "0\n1\n0 0 0\n",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        fs::write(dir.path().join(LEADER_EPOCH_CHECKPOINT_FILE), "0\n1\n").expect("write");
        assert!(LeaderEpochCache::load(dir.path()).expect("load").is_none());
    }

    #[test]
    fn truncation_kip_279() {
        // Follower: epochs 0 @0, 2 @100, 4 @200, log end 300.
        let local = [e(0, 0), e(2, 100), e(4, 200)];
        // The leader has epoch 4 too and it ended at 250: truncate to 250.
        assert_eq!(
            truncation_point(&local, 300, 50, 4, 250),
            TruncationPoint {
                offset: 250,
                complete: true
            }
        );
        // The leader's epoch 4 went further than the follower's log: nothing to cut.
        assert_eq!(truncation_offset(&local, 300, 4, 400), 300);
        // The leader answers a smaller epoch the follower also has (2,
        // ending at 150 on the leader, 200 here): the smaller end.
        assert_eq!(
            truncation_point(&local, 300, 50, 2, 150),
            TruncationPoint {
                offset: 150,
                complete: true
            }
        );
        // ... and if the leader's epoch 2 ended later than the follower's.
        assert_eq!(truncation_offset(&local, 300, 2, 220), 200);
        // The leader answers epoch 3, unknown here: truncate to the end of
        // the follower's largest epoch below 3 (epoch 2, ending at 200)
        // and ask again.
        assert_eq!(
            truncation_point(&local, 300, 50, 3, 260),
            TruncationPoint {
                offset: 200,
                complete: false
            }
        );
        // The next round: the follower now has 0 @0, 2 @100 and log end
        // 200, asks for epoch 2, the leader answers (2, 150).
        let after = [e(0, 0), e(2, 100)];
        assert_eq!(
            truncation_point(&after, 200, 50, 2, 150),
            TruncationPoint {
                offset: 150,
                complete: true
            }
        );
        // The leader answers an epoch below every epoch the follower has:
        // the follower keeps nothing of unknown epoch past the leader's end
        // nor past its own first epoch start.
        let late = [e(3, 100), e(5, 200)];
        assert_eq!(
            truncation_point(&late, 300, 50, 1, 150),
            TruncationPoint {
                offset: 100,
                complete: true
            }
        );
        assert_eq!(truncation_offset(&late, 300, 1, 80), 80);
        // The follower tracks no epochs at all: the leader's offset.
        assert_eq!(truncation_offset(&[], 300, 2, 120), 120);
        assert_eq!(truncation_offset(&[], 100, 2, 120), 100);
        // Undefined epoch, defined offset (old protocol): the leader's offset.
        assert_eq!(truncation_offset(&local, 300, UNDEFINED_EPOCH, 120), 120);
        // Undefined answer: the high watermark (truncation_point), or the
        // UNDEFINED_EPOCH_OFFSET marker (truncation_offset).
        assert_eq!(
            truncation_point(&local, 300, 50, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET),
            TruncationPoint {
                offset: 50,
                complete: true
            }
        );
        assert_eq!(
            truncation_point(&local, 30, 50, 4, UNDEFINED_EPOCH_OFFSET).offset,
            30
        );
        assert_eq!(
            truncation_offset(&local, 300, 4, UNDEFINED_EPOCH_OFFSET),
            UNDEFINED_EPOCH_OFFSET
        );
    }
}
