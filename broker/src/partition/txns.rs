//! Transactions on a partition (issue 37, Kafka's semantics): what the
//! control batches in its log mean for its producers' open transactions,
//! and the aborted transactions kept in the segments' `.txnindex` files
//! (`storage::txn_index`) for read_committed fetches.
//!
//! One function turns a batch into state ([`apply`]): a transactional data
//! batch opens (or continues) its producer's transaction; a COMMIT or ABORT
//! marker ends it, and an ABORT gives the index entry (producer, first
//! offset, the marker's offset, the last stable offset once it ended). The
//! leader's marker write, the follower's copy of the leader's batches and
//! the rebuild at open all go through it, so the three agree.
//!
//! At open ([`load`]) the producers' state comes from the newest snapshot
//! and the batches after it, as for idempotence; the aborted transactions
//! from the index files (those whose marker the log still holds; the
//! files are rewritten per live segment when a segment went, by retention
//! or the cleaner, or the log was truncated), completed by the ABORT
//! markers the replay meets that no file lists (a crash between the
//! marker and its entry, or a lost file: the entries after the snapshot
//! are rebuilt; older ones are only as good as their files, which are
//! fsynced with every entry).

use super::producers::ProducerStateLoad;
use crate::producer::state::ProducerStates;
use crate::storage::batch::BatchHeader;
use crate::storage::txn_index::{self, AbortedTxn};
use crate::storage::{self, PartitionLog};
use crate::txn::marker::TxnResult;

/// A transaction a marker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ended {
    pub(super) first_offset: i64,
    /// The marker's offset.
    pub(super) marker_offset: i64,
    /// What the aborted-transaction index records, for an ABORT.
    pub(super) aborted: Option<AbortedTxn>,
}

/// Transactions ended by a marker the in-sync replicas may not all hold
/// yet (Kafka's unreplicated transactions): until the high watermark
/// passes its marker, a transaction still holds the last stable offset at
/// its first offset, so a read_committed consumer never reads a
/// transaction's records as committed while a new leader could still
/// lack the marker.
#[derive(Debug, Default)]
pub(super) struct Unreplicated(Vec<(i64, i64)>);

impl Unreplicated {
    pub(super) fn push(&mut self, ended: &Ended) {
        self.0.push((ended.first_offset, ended.marker_offset));
    }

    /// The first offset of the earliest such transaction whose marker is
    /// at or above `hw`.
    pub(super) fn first_unstable(&self, hw: i64) -> Option<i64> {
        self.0
            .iter()
            .filter(|(_, marker)| *marker >= hw)
            .map(|(first, _)| *first)
            .min()
    }

    /// Forgets those the high watermark `hw` has passed.
    pub(super) fn prune(&mut self, hw: i64) {
        self.0.retain(|(_, marker)| *marker >= hw);
    }
}

/// The partition's aborted transactions, in marker order.
#[derive(Debug, Default)]
pub(super) struct AbortedTxns {
    entries: Vec<AbortedTxn>,
}

impl AbortedTxns {
    /// Records `entry`, whose marker was just written (or found) in
    /// `log`, in memory and in its segment's index file (fsynced: aborts
    /// are rare and read_committed consumers must not lose one). An entry
    /// already known (same marker offset) is skipped.
    pub(super) fn record(&mut self, log: &PartitionLog, entry: AbortedTxn) -> storage::Result<()> {
        if self
            .entries
            .iter()
            .rev()
            .any(|e| e.last_offset == entry.last_offset)
        {
            return Ok(());
        }
        let base = segment_of(&log.segment_base_offsets(), entry.last_offset);
        txn_index::append(log.dir(), base, &entry)?;
        sync_index(log, base)?;
        let at = self
            .entries
            .partition_point(|e| e.last_offset < entry.last_offset);
        self.entries.insert(at, entry);
        Ok(())
    }

    /// `(producer id, first offset)` of every aborted transaction a fetch
    /// of `[from, to)` overlaps (Kafka's `aborted_transactions`): those
    /// whose marker is at or after `from` and that began before `to`.
    pub(super) fn overlapping(&self, from: i64, to: i64) -> Vec<(i64, i64)> {
        let start = self.entries.partition_point(|e| e.last_offset < from);
        self.entries[start..]
            .iter()
            .filter(|e| e.first_offset < to)
            .map(|e| (e.producer_id, e.first_offset))
            .collect()
    }

    #[cfg(test)]
    pub(super) fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }
}

fn sync_index(log: &PartitionLog, base: i64) -> storage::Result<()> {
    std::fs::File::open(log.dir().join(txn_index::file_name(base)))?.sync_data()?;
    Ok(())
}

/// The base of the segment (of `bases`, ascending) holding `offset`.
fn segment_of(bases: &[i64], offset: i64) -> i64 {
    let i = bases.partition_point(|&b| b <= offset);
    bases.get(i.saturating_sub(1)).copied().unwrap_or(offset)
}

/// Applies one batch of the log (header `h`, at its final offset; for a
/// control batch, its whole bytes) to the producers' state; a COMMIT or
/// ABORT marker gives the transaction it ended (for an ABORT, with the
/// entry to index).
pub(super) fn apply(
    producers: &mut ProducerStates,
    h: &BatchHeader,
    control: Option<&[u8]>,
) -> Option<Ended> {
    if h.producer_id < 0 {
        return None;
    }
    if !h.is_control() {
        producers.replay(h);
        return None;
    }
    let marker = control.and_then(storage::batch::end_txn_marker)?;
    let stable = producers.stable_after_completion(h.producer_id, h.base_offset);
    let first = producers.end_txn(
        h.producer_id,
        h.producer_epoch,
        Some(marker.coordinator_epoch),
        h.base_offset,
    );
    Some(Ended {
        first_offset: first,
        marker_offset: h.base_offset,
        aborted: (marker.result == TxnResult::Abort).then_some(AbortedTxn {
            producer_id: h.producer_id,
            first_offset: first,
            last_offset: h.base_offset,
            last_stable_offset: stable,
        }),
    })
}

/// Applies whole batches (`batches`, as a leader sent them, offsets
/// final) and returns the transactions they end.
pub(super) fn apply_all(
    producers: &mut ProducerStates,
    batches: &[u8],
) -> storage::Result<Vec<Ended>> {
    let mut ended = Vec::new();
    let mut pos = 0usize;
    while let Some(rest) = batches
        .get(pos..)
        .filter(|r| r.len() >= storage::batch::BATCH_HEADER_LEN)
    {
        let h = BatchHeader::parse(rest)?;
        let whole = rest.get(..h.total_size()).unwrap_or(rest);
        let control = h.is_control().then_some(whole);
        ended.extend(apply(producers, &h, control));
        pos += h.total_size();
    }
    Ok(ended)
}

/// What [`load`] rebuilds.
#[derive(Debug, Default)]
pub(super) struct Loaded {
    pub(super) producers: ProducerStates,
    pub(super) aborted: AbortedTxns,
    /// Transactions the replay saw end above the log's high watermark.
    pub(super) unreplicated: Unreplicated,
    pub(super) cost: ProducerStateLoad,
}

/// Rebuilds the producers' state and the aborted transactions when the
/// partition opens or a follower's log was truncated (see the module doc;
/// set the log's high watermark first: transactions ended by markers
/// above it still hold the last stable offset, as far as the replay after
/// the snapshot sees them).
pub(super) fn load(log: &PartitionLog) -> storage::Result<Loaded> {
    let dir = log.dir();
    let bases = log.segment_base_offsets();
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    let mut entries = Vec::new();
    let mut orphans = Vec::new();
    for base in txn_index::list(dir)? {
        entries.extend(txn_index::read(dir, base)?);
        if bases.binary_search(&base).is_err() {
            // its segment is gone (retention, or merged by the cleaner):
            // what it lists in the log's range moves to the live segments
            orphans.push(base);
        }
    }
    let found = entries.len();
    entries.retain(|e| e.last_offset >= start && e.last_offset < end);
    entries.sort_by_key(|e| e.last_offset);
    entries.dedup_by_key(|e| e.last_offset);
    if entries.len() != found || !orphans.is_empty() {
        // a truncated (or torn) history, or files of segments that are
        // gone: the files say what the log holds, no more
        rewrite_all(dir, &bases, &entries)?;
        for base in orphans {
            txn_index::remove(dir, base)?;
        }
    }
    let mut aborted = AbortedTxns { entries };
    if start == end {
        return Ok(Loaded {
            aborted,
            ..Loaded::default()
        });
    }
    let (mut states, from, snapshot_loaded) = match log.latest_producer_snapshot()? {
        Some((offset, entries)) => (ProducerStates::from_snapshot(entries), offset, true),
        None => (ProducerStates::default(), start, false),
    };
    let hw = log.high_watermark();
    let mut missing = Vec::new();
    let mut unreplicated = Unreplicated::default();
    let bytes_read = log.for_each_batch_from(from, |h, control| {
        if let Some(ended) = apply(&mut states, h, control) {
            if ended.marker_offset >= hw {
                unreplicated.push(&ended);
            }
            missing.extend(ended.aborted);
        }
    })?;
    for e in missing {
        aborted.record(log, e)?;
    }
    Ok(Loaded {
        producers: states,
        aborted,
        unreplicated,
        cost: ProducerStateLoad {
            snapshot_loaded,
            bytes_read,
        },
    })
}

/// Rewrites every index file of the segments `bases` to hold `entries`.
fn rewrite_all(
    dir: &std::path::Path,
    bases: &[i64],
    entries: &[AbortedTxn],
) -> storage::Result<()> {
    for (i, &base) in bases.iter().enumerate() {
        let next = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        let mine: Vec<AbortedTxn> = entries
            .iter()
            .filter(|e| e.last_offset >= base && e.last_offset < next)
            .copied()
            .collect();
        txn_index::rewrite(dir, base, &mine)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_takes_markers_at_or_after_the_start_that_began_before_the_end() {
        let e = |pid, first, last| AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        };
        let a = AbortedTxns {
            entries: vec![e(1, 0, 5), e(2, 3, 9), e(3, 12, 20)],
        };
        assert_eq!(a.overlapping(0, 100), vec![(1, 0), (2, 3), (3, 12)]);
        assert_eq!(a.overlapping(6, 100), vec![(2, 3), (3, 12)]);
        assert_eq!(a.overlapping(6, 12), vec![(2, 3)]);
        assert_eq!(a.overlapping(21, 100), vec![]);
        assert_eq!(segment_of(&[0, 10, 20], 15), 10);
        assert_eq!(segment_of(&[0, 10, 20], 20), 20);
        assert_eq!(segment_of(&[0, 10, 20], 5), 0);
    }
}
