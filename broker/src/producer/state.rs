//! Per-partition producer state, as Kafka keeps it: for each producer id
//! the current epoch, the metadata of its last five batches, the first
//! offset of its open transaction (issue 37: a transactional batch opens
//! one, a COMMIT or ABORT marker ends it) and the coordinator epoch of the
//! last marker it got. The earliest open transaction bounds the
//! partition's last stable offset. Pure logic; the partition calls it
//! under its lock.

use std::collections::{HashMap, VecDeque};

use kafka_protocol::error::ResponseError;

use crate::storage::batch::BatchHeader;
use crate::storage::producer_snapshot::{SnapshotBatch, SnapshotEntry};

/// How many recent batches per producer are remembered for duplicate
/// detection (the producer's `max.in.flight.requests.per.connection` limit).
pub const BATCHES_PER_PRODUCER: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchMeta {
    first_seq: i32,
    last_seq: i32,
    first_offset: i64,
}

#[derive(Debug, Clone)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<BatchMeta>,
    /// First offset of its open transaction.
    txn_first_offset: Option<i64>,
    /// Coordinator epoch of the last marker (-1: none yet).
    coordinator_epoch: i32,
    /// Max timestamp of its last batch (-1: none since the state was
    /// loaded from a snapshot, which does not keep it).
    last_timestamp: i64,
    /// Offset of its last COMMIT or ABORT marker (-1: none seen since the
    /// state was loaded; snapshots do not keep it).
    last_marker_offset: i64,
}

impl Default for ProducerEntry {
    fn default() -> Self {
        Self {
            epoch: 0,
            batches: VecDeque::new(),
            txn_first_offset: None,
            coordinator_epoch: -1,
            last_timestamp: -1,
            last_marker_offset: -1,
        }
    }
}

/// What to do with an idempotent batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCheck {
    Append,
    /// Already in the log: answer with its first offset, append nothing.
    Duplicate {
        first_offset: i64,
    },
    Reject(ResponseError),
}

/// The sequence numbers a batch covers.
pub fn last_sequence(h: &BatchHeader) -> i32 {
    // Sequences wrap from i32::MAX to 0, as in Kafka.
    let next = h.base_sequence as i64 + h.last_offset_delta as i64;
    if next > i32::MAX as i64 {
        (next - i32::MAX as i64 - 1) as i32
    } else {
        next as i32
    }
}

fn next_sequence(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

/// One producer as DescribeProducers (KIP-664) shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last sequence of its last batch (-1: none remembered).
    pub last_sequence: i32,
    /// The max timestamp of its last batch (-1: not known).
    pub last_timestamp: i64,
    /// The coordinator epoch of the last marker it got (-1: none).
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction (-1: none).
    pub current_txn_start_offset: i64,
}

/// The producer state of one partition.
#[derive(Debug, Clone, Default)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerStates {
    /// Decides about a batch of producer `pid` with `epoch` covering
    /// sequences `first_seq..=last_seq`.
    pub fn check(&self, pid: i64, epoch: i16, first_seq: i32, last_seq: i32) -> SeqCheck {
        if first_seq < 0 {
            return SeqCheck::Reject(ResponseError::InvalidRecord);
        }
        let Some(entry) = self.producers.get(&pid) else {
            return if first_seq == 0 {
                SeqCheck::Append
            } else {
                // State lost (e.g. retention removed the producer's batches):
                // the client resets its sequence under a bumped epoch.
                SeqCheck::Reject(ResponseError::UnknownProducerId)
            };
        };
        if epoch < entry.epoch {
            return SeqCheck::Reject(ResponseError::InvalidProducerEpoch);
        }
        if epoch > entry.epoch {
            return if first_seq == 0 {
                SeqCheck::Append
            } else {
                SeqCheck::Reject(ResponseError::OutOfOrderSequenceNumber)
            };
        }
        if let Some(b) = entry
            .batches
            .iter()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
        {
            return SeqCheck::Duplicate {
                first_offset: b.first_offset,
            };
        }
        match entry.batches.back() {
            Some(last) if first_seq == next_sequence(last.last_seq) => SeqCheck::Append,
            None if first_seq == 0 => SeqCheck::Append,
            _ => SeqCheck::Reject(ResponseError::OutOfOrderSequenceNumber),
        }
    }

    /// Whether the batch of `pid` at `first_offset` (a duplicate
    /// [`check`](Self::check) found) was written before the producer's
    /// last COMMIT or ABORT marker. A transaction's first batch can never
    /// be a retry of such a batch: a client ends a transaction only once
    /// its batches are acknowledged or dropped. A sequence that matches one
    /// is a client reusing the sequences of batches it dropped as unsent
    /// on abort (librdkafka does, for batches waiting to be retried after
    /// a broken connection, which may have been written): acknowledging it
    /// as a duplicate would lose the new records, so the caller refuses it
    /// (OUT_OF_ORDER_SEQUENCE_NUMBER: the client aborts and bumps its
    /// epoch). Kafka acknowledges it; Moldau chooses not to lose the data.
    pub fn duplicate_precedes_marker(&self, pid: i64, first_offset: i64) -> bool {
        self.producers
            .get(&pid)
            .is_some_and(|e| e.last_marker_offset >= 0 && first_offset < e.last_marker_offset)
    }

    /// Remembers an appended (or replayed) batch.
    pub fn record(
        &mut self,
        pid: i64,
        epoch: i16,
        first_seq: i32,
        last_seq: i32,
        first_offset: i64,
    ) {
        let entry = self.producers.entry(pid).or_default();
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.batches.push_back(BatchMeta {
            first_seq,
            last_seq,
            first_offset,
        });
        while entry.batches.len() > BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
    }

    /// Whether producer `pid` may write a batch (`transactional` or not):
    /// a plain batch of a producer whose transaction is open is Kafka's
    /// INVALID_TXN_STATE.
    pub fn check_txn(&self, pid: i64, transactional: bool) -> Result<(), ResponseError> {
        let open = self
            .producers
            .get(&pid)
            .is_some_and(|e| e.txn_first_offset.is_some());
        if open && !transactional {
            return Err(ResponseError::InvalidTxnState);
        }
        Ok(())
    }

    /// A transactional batch of `pid` at `first_offset`: opens its
    /// transaction there unless one is open.
    pub fn begin_txn(&mut self, pid: i64, first_offset: i64) {
        let entry = self.producers.entry(pid).or_default();
        entry.txn_first_offset.get_or_insert(first_offset);
    }

    /// Remembers a batch without sequences (a coordinator's transactional
    /// offset commit) of `pid` at `epoch`: only a newer epoch is news,
    /// and it resets the remembered batches as any new epoch does.
    pub fn record_unsequenced(&mut self, pid: i64, epoch: i16) {
        let entry = self.producers.entry(pid).or_default();
        if epoch > entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
    }

    /// Whether a batch a coordinator of this broker writes for producer
    /// `pid` at `epoch` (a transactional offset commit: no sequence, as
    /// Kafka's coordinators write them) may be appended: an epoch older
    /// than the producer's is INVALID_PRODUCER_EPOCH.
    pub fn check_epoch(&self, pid: i64, epoch: i16) -> Result<(), ResponseError> {
        match self.producers.get(&pid) {
            Some(entry) if epoch < entry.epoch => Err(ResponseError::InvalidProducerEpoch),
            _ => Ok(()),
        }
    }

    /// Whether a marker of `pid` at `epoch` from a coordinator at
    /// `coordinator_epoch` may be written: an epoch older than the
    /// producer's is INVALID_PRODUCER_EPOCH (Kafka's answer to a fenced
    /// marker), a coordinator epoch older than the last marker's is
    /// TRANSACTION_COORDINATOR_FENCED.
    ///
    /// `bumped` is set for a transaction of version 2 (WriteTxnMarkers v2
    /// says so), whose end bumped the epoch: its marker must then be
    /// strictly above the epoch of the data it ends (Kafka 4.2's strict
    /// rule), so a marker of an earlier transaction can never end a later
    /// one. The same epoch is let through only as a retry of a marker
    /// already written: no transaction of the producer is open, or the
    /// epoch is `i16::MAX` (an exhausted producer aborts there without
    /// bumping).
    pub fn check_marker(
        &self,
        pid: i64,
        epoch: i16,
        coordinator_epoch: i32,
        bumped: bool,
    ) -> Result<(), ResponseError> {
        let Some(entry) = self.producers.get(&pid) else {
            return Ok(());
        };
        let stale = if bumped {
            let retry =
                epoch == entry.epoch && (entry.txn_first_offset.is_none() || epoch == i16::MAX);
            epoch <= entry.epoch && !retry
        } else {
            epoch < entry.epoch
        };
        if stale {
            return Err(ResponseError::InvalidProducerEpoch);
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(ResponseError::TransactionCoordinatorFenced);
        }
        Ok(())
    }

    /// A marker of `pid` at `epoch` (from `coordinator_epoch`, `None`
    /// when unknown: a header-only replay) written at `offset`: ends its
    /// open transaction and returns its first offset (`offset` itself when
    /// none was open, as Kafka records it). A newer epoch resets the
    /// remembered batches (the producer starts over at sequence 0).
    pub fn end_txn(
        &mut self,
        pid: i64,
        epoch: i16,
        coordinator_epoch: Option<i32>,
        offset: i64,
    ) -> i64 {
        let entry = self.producers.entry(pid).or_default();
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        if let Some(c) = coordinator_epoch {
            entry.coordinator_epoch = c;
        }
        entry.last_marker_offset = entry.last_marker_offset.max(offset);
        entry.txn_first_offset.take().unwrap_or(offset)
    }

    /// The first offset of `pid`'s open transaction.
    pub fn open_txn(&self, pid: i64) -> Option<i64> {
        self.producers.get(&pid).and_then(|e| e.txn_first_offset)
    }

    /// Whether `pid` has a transaction open here at `epoch` (Kafka's
    /// `hasOngoingTransaction(producerId, epoch)`): a batch of that epoch
    /// continues it. A batch of a newer epoch does not: under transaction
    /// version 2 it is the next transaction, sent while the previous one's
    /// marker (at that newer epoch) is still on its way, and must be added
    /// to its transaction like any first batch, or the marker would find
    /// it and end it too.
    pub fn open_txn_at(&self, pid: i64, epoch: i16) -> bool {
        self.producers
            .get(&pid)
            .is_some_and(|e| e.txn_first_offset.is_some() && e.epoch == epoch)
    }

    /// The first offset of the earliest open transaction: the last
    /// stable offset can be no higher.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.producers
            .values()
            .filter_map(|e| e.txn_first_offset)
            .min()
    }

    /// The last stable offset once `pid`'s transaction ends with a marker
    /// at `marker_offset` (what an aborted transaction's index entry
    /// records): the earliest other open transaction, else past the marker.
    pub fn stable_after_completion(&self, pid: i64, marker_offset: i64) -> i64 {
        self.producers
            .iter()
            .filter(|(&p, _)| p != pid)
            .filter_map(|(_, e)| e.txn_first_offset)
            .min()
            .unwrap_or(marker_offset + 1)
    }

    /// A copy holding only the producers in `pids`.
    pub fn subset(&self, pids: impl IntoIterator<Item = i64>) -> ProducerStates {
        let producers = pids
            .into_iter()
            .filter_map(|pid| self.producers.get(&pid).map(|e| (pid, e.clone())))
            .collect();
        ProducerStates { producers }
    }

    /// Replays a data batch found in the log (or copied from a leader)
    /// while rebuilding the state: its sequences, and the transaction a
    /// transactional batch opens. Control batches are the caller's (their
    /// type is in the record, see `partition`'s transactions): ignored.
    pub fn replay(&mut self, h: &BatchHeader) {
        if h.producer_id < 0 || h.is_control() {
            return;
        }
        if h.base_sequence >= 0 {
            self.record(
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                last_sequence(h),
                h.base_offset,
            );
        } else {
            self.record_unsequenced(h.producer_id, h.producer_epoch);
        }
        self.record_timestamp(h.producer_id, h.max_timestamp);
        if h.is_transactional() {
            self.begin_txn(h.producer_id, h.base_offset);
        }
    }

    /// Remembers the max timestamp of producer `pid`'s last batch (what
    /// DescribeProducers shows).
    pub fn record_timestamp(&mut self, pid: i64, max_timestamp: i64) {
        if let Some(e) = self.producers.get_mut(&pid) {
            e.last_timestamp = max_timestamp;
        }
    }

    /// The producers as DescribeProducers shows them, sorted by producer id.
    pub fn active(&self) -> Vec<ActiveProducer> {
        let mut out: Vec<ActiveProducer> = self
            .producers
            .iter()
            .map(|(&producer_id, e)| ActiveProducer {
                producer_id,
                epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_start_offset: e.txn_first_offset.unwrap_or(-1),
            })
            .collect();
        out.sort_unstable_by_key(|p| p.producer_id);
        out
    }

    /// The table as snapshot entries (see `storage::producer_snapshot`),
    /// sorted by producer id.
    pub fn to_snapshot(&self) -> Vec<SnapshotEntry> {
        let mut entries: Vec<SnapshotEntry> = self
            .producers
            .iter()
            .map(|(&producer_id, e)| SnapshotEntry {
                producer_id,
                epoch: e.epoch,
                batches: e
                    .batches
                    .iter()
                    .map(|b| SnapshotBatch {
                        first_seq: b.first_seq,
                        last_seq: b.last_seq,
                        first_offset: b.first_offset,
                    })
                    .collect(),
                current_txn_first_offset: e.txn_first_offset.unwrap_or(-1),
                coordinator_epoch: e.coordinator_epoch,
            })
            .collect();
        entries.sort_unstable_by_key(|e| e.producer_id);
        entries
    }

    /// The table a snapshot holds (the last [`BATCHES_PER_PRODUCER`]
    /// batches of each producer are kept).
    pub fn from_snapshot(entries: Vec<SnapshotEntry>) -> Self {
        let producers = entries
            .into_iter()
            .map(|e| {
                let skip = e.batches.len().saturating_sub(BATCHES_PER_PRODUCER);
                let batches = e.batches[skip..]
                    .iter()
                    .map(|b| BatchMeta {
                        first_seq: b.first_seq,
                        last_seq: b.last_seq,
                        first_offset: b.first_offset,
                    })
                    .collect();
                (
                    e.producer_id,
                    ProducerEntry {
                        epoch: e.epoch,
                        batches,
                        txn_first_offset: (e.current_txn_first_offset >= 0)
                            .then_some(e.current_txn_first_offset),
                        coordinator_epoch: e.coordinator_epoch,
                        last_timestamp: -1,
                        last_marker_offset: -1,
                    },
                )
            })
            .collect();
        ProducerStates { producers }
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_batches_append_and_retries_are_duplicates() {
        let mut s = ProducerStates::default();
        assert_eq!(s.check(7, 0, 0, 4), SeqCheck::Append);
        s.record(7, 0, 0, 4, 100);
        assert_eq!(s.check(7, 0, 5, 9), SeqCheck::Append);
        s.record(7, 0, 5, 9, 105);
        assert_eq!(
            s.check(7, 0, 0, 4),
            SeqCheck::Duplicate { first_offset: 100 }
        );
        assert_eq!(
            s.check(7, 0, 5, 9),
            SeqCheck::Duplicate { first_offset: 105 }
        );
        assert_eq!(
            s.check(7, 0, 11, 12),
            SeqCheck::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(s.check(7, 0, 10, 12), SeqCheck::Append);
    }

    #[test]
    fn epochs_fence_and_reset_sequences() {
        let mut s = ProducerStates::default();
        s.record(7, 3, 0, 0, 0);
        assert_eq!(
            s.check(7, 2, 1, 1),
            SeqCheck::Reject(ResponseError::InvalidProducerEpoch)
        );
        assert_eq!(
            s.check(7, 4, 5, 5),
            SeqCheck::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(s.check(7, 4, 0, 0), SeqCheck::Append);
        s.record(7, 4, 0, 0, 1);
        assert_eq!(s.check(7, 4, 0, 0), SeqCheck::Duplicate { first_offset: 1 });
    }

    #[test]
    fn subset_keeps_only_the_named_producers() {
        let mut s = ProducerStates::default();
        s.record(1, 0, 0, 0, 10);
        s.record(2, 0, 0, 0, 11);
        let sub = s.subset([2, 3]);
        assert_eq!(sub.len(), 1);
        assert_eq!(
            sub.check(2, 0, 0, 0),
            SeqCheck::Duplicate { first_offset: 11 }
        );
        assert_eq!(
            sub.check(1, 0, 1, 1),
            SeqCheck::Reject(ResponseError::UnknownProducerId)
        );
    }

    #[test]
    fn unknown_producers_must_start_at_zero() {
        let s = ProducerStates::default();
        assert_eq!(s.check(9, 0, 0, 3), SeqCheck::Append);
        assert_eq!(
            s.check(9, 0, 4, 5),
            SeqCheck::Reject(ResponseError::UnknownProducerId)
        );
        assert_eq!(
            s.check(9, 0, -1, 0),
            SeqCheck::Reject(ResponseError::InvalidRecord)
        );
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            s.record(1, 0, i, i, i as i64);
        }
        assert_eq!(s.check(1, 0, 6, 6), SeqCheck::Duplicate { first_offset: 6 });
        assert_eq!(s.check(1, 0, 2, 2), SeqCheck::Duplicate { first_offset: 2 });
        assert_eq!(
            s.check(1, 0, 1, 1),
            SeqCheck::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
    }

    #[test]
    fn snapshot_round_trip_keeps_every_answer() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            s.record(1, 2, i * 2, i * 2 + 1, 10 + i as i64);
        }
        s.record(2, 0, 0, 0, 40);
        let entries = s.to_snapshot();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].batches.len(), BATCHES_PER_PRODUCER);
        let back = ProducerStates::from_snapshot(entries.clone());
        assert_eq!(back.to_snapshot(), entries);
        for (pid, epoch, first, last) in [
            (1, 2, 12, 13),
            (1, 2, 4, 5),
            (1, 2, 2, 3),
            (1, 2, 14, 14),
            (1, 2, 15, 15),
            (1, 1, 14, 14),
            (2, 0, 0, 0),
            (2, 0, 1, 1),
            (3, 0, 0, 0),
            (3, 0, 1, 1),
        ] {
            assert_eq!(
                back.check(pid, epoch, first, last),
                s.check(pid, epoch, first, last),
                "{pid} {epoch} {first}..={last}"
            );
        }
    }

    #[test]
    fn transactions_open_end_and_bound_the_stable_offset() {
        let mut s = ProducerStates::default();
        assert_eq!(s.first_unstable_offset(), None);
        s.record(1, 0, 0, 1, 10);
        s.begin_txn(1, 10);
        s.begin_txn(1, 12); // a later batch of the same transaction
        s.begin_txn(2, 11);
        assert_eq!(s.open_txn(1), Some(10));
        assert_eq!(s.first_unstable_offset(), Some(10));
        assert_eq!(s.check_txn(1, false), Err(ResponseError::InvalidTxnState));
        assert_eq!(s.check_txn(1, true), Ok(()));
        assert_eq!(s.check_txn(3, false), Ok(()));
        // fencing of markers
        assert_eq!(s.check_marker(1, 0, 5, false), Ok(()));
        assert_eq!(s.stable_after_completion(1, 13), 11);
        assert_eq!(s.end_txn(1, 0, Some(5), 13), 10);
        assert_eq!(s.first_unstable_offset(), Some(11));
        assert_eq!(
            s.check_marker(1, 0, 4, false),
            Err(ResponseError::TransactionCoordinatorFenced)
        );
        // a marker with a bumped epoch (transaction version 2) resets sequences
        assert_eq!(s.stable_after_completion(2, 14), 15);
        assert_eq!(s.end_txn(2, 1, Some(5), 14), 11);
        assert_eq!(s.first_unstable_offset(), None);
        assert_eq!(
            s.check_marker(2, 0, 5, false),
            Err(ResponseError::InvalidProducerEpoch)
        );
        assert_eq!(s.check(2, 1, 0, 0), SeqCheck::Append);
        // no open transaction: the marker's own offset
        assert_eq!(s.end_txn(1, 0, None, 20), 20);
        // the snapshot keeps open transactions and coordinator epochs
        s.begin_txn(1, 21);
        let back = ProducerStates::from_snapshot(s.to_snapshot());
        assert_eq!(back.open_txn(1), Some(21));
        assert_eq!(back.open_txn(2), None);
        assert_eq!(
            back.check_marker(1, 0, 4, false),
            Err(ResponseError::TransactionCoordinatorFenced)
        );
        assert_eq!(back.to_snapshot(), s.to_snapshot());
    }

    #[test]
    fn a_version_2_marker_must_be_above_the_data_s_epoch_but_may_be_retried() {
        let mut s = ProducerStates::default();
        // transaction at epoch 4 open at offset 10
        s.record(1, 4, 0, 2, 10);
        s.begin_txn(1, 10);
        assert_eq!(
            s.check_marker(1, 4, 0, true),
            Err(ResponseError::InvalidProducerEpoch),
            "the same epoch as the open transaction's data: not the end of it"
        );
        assert_eq!(s.check_marker(1, 4, 0, false), Ok(()), "the older rule");
        assert_eq!(
            s.check_marker(1, 3, 0, true),
            Err(ResponseError::InvalidProducerEpoch)
        );
        assert_eq!(s.check_marker(1, 5, 0, true), Ok(()));
        assert_eq!(s.end_txn(1, 5, Some(0), 13), 10);
        // a coordinator that failed over sends the same marker again
        assert_eq!(s.check_marker(1, 5, 0, true), Ok(()), "a retry");
        // the next transaction (epoch 5, from sequence 0) opens; a marker at
        // 5 would now end it without its coordinator's say: refused
        assert_eq!(s.check(1, 5, 0, 0), SeqCheck::Append);
        s.record(1, 5, 0, 0, 14);
        s.begin_txn(1, 14);
        assert_eq!(
            s.check_marker(1, 5, 0, true),
            Err(ResponseError::InvalidProducerEpoch)
        );
        // an exhausted producer aborts at i16::MAX without a bump
        s.record(2, i16::MAX, 0, 0, 20);
        s.begin_txn(2, 20);
        assert_eq!(s.check_marker(2, i16::MAX, 0, true), Ok(()));
        // a producer this partition never saw
        assert_eq!(s.check_marker(9, 0, 0, true), Ok(()));
    }

    #[test]
    fn sequences_wrap_at_int_max() {
        let mut s = ProducerStates::default();
        s.record(1, 0, i32::MAX - 1, i32::MAX, 0);
        assert_eq!(s.check(1, 0, 0, 3), SeqCheck::Append);
        let h = BatchHeader {
            base_offset: 0,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: 3,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: 1,
            producer_epoch: 0,
            base_sequence: i32::MAX - 1,
            records_count: 4,
        };
        assert_eq!(last_sequence(&h), 1);
    }
}
