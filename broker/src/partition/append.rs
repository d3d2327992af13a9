//! The leader's produce path: [`Partition::append`] checks the ISR against
//! `min.insync.replicas` and the batches against the producers' state,
//! stamps the leader epoch, appends (moving file work off the runtime's
//! workers), and moves the high watermark. [`Partition::write_txn_marker`]
//! is the leader's other writer: the COMMIT or ABORT marker a transaction
//! coordinator sends with WriteTxnMarkers (issue 37).

use kafka_protocol::error::ResponseError;

use super::producers;
use super::role::Role;
use super::state::{Partition, PartitionState};
use super::txns;
use crate::clock::now_ms;
use crate::error::TopicError;
use crate::storage::batch::{BatchBuilder, BatchHeader};
use crate::storage::AppendResult;
use crate::txn::marker::{EndTxnMarker, MarkerBatch, TxnResult};

/// A test hook: called (off the runtime's workers) right before an append
/// that will do blocking file work (a roll, an index growth, an fsync),
/// with the partition's lock held. Lets a test hold such an append in
/// progress and prove other requests are served meanwhile.
#[doc(hidden)]
pub static BLOCKING_APPEND_HOOK: std::sync::OnceLock<BlockingAppendHook> =
    std::sync::OnceLock::new();

/// The type of [`BLOCKING_APPEND_HOOK`]: called with the topic and partition.
#[doc(hidden)]
pub type BlockingAppendHook = Box<dyn Fn(&str, i32) + Send + Sync>;

/// The outcome of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    New(AppendResult),
    /// A retried idempotent batch already in the log, at `base_offset`.
    Duplicate {
        base_offset: i64,
        log_start_offset: i64,
    },
}

/// Who writes an append: a client's produce (sequences checked) or one
/// of this broker's coordinators (epochs only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// `verified`: a transaction's first batch needs its verification.
    Client {
        verified: bool,
    },
    Coordinator,
}

/// Refuses the first transactional batch of a producer's transaction that
/// its coordinator has not confirmed (INVALID_TXN_STATE, as Kafka answers
/// a produce to a partition not added to the transaction).
fn check_verified(state: &PartitionState, headers: &[BatchHeader]) -> Result<(), TopicError> {
    for h in headers
        .iter()
        .filter(|h| h.is_transactional() && h.producer_id >= 0)
    {
        let open = state.producers.open_txn_at(h.producer_id, h.producer_epoch);
        if !open && state.verified.get(&h.producer_id) != Some(&h.producer_epoch) {
            return Err(TopicError::new(
                ResponseError::InvalidTxnState,
                format!(
                    "producer {} epoch {}: the partition was not added to its transaction",
                    h.producer_id, h.producer_epoch
                ),
            ));
        }
    }
    Ok(())
}

impl Partition {
    /// Appends validated batches (`headers` are theirs, in order) as the
    /// leader, stamping its leader epoch. Batches of idempotent producers
    /// are checked against the producer state first: a retry of a batch
    /// already in the log is reported as [`Appended::Duplicate`] and not
    /// written again. With `min_isr` (acks=all) the append is refused with
    /// `NOT_ENOUGH_REPLICAS` while the ISR is smaller. The high watermark
    /// moves at once when this broker is the only in-sync replica; else
    /// once the followers have fetched the batches.
    ///
    /// An append into the page cache runs inline (the hot path). One that
    /// will roll the segment, grow an index or fsync (flush policy, high
    /// watermark checkpoint) runs through [`crate::offload::blocking`], and so does
    /// waiting for the lock while another request holds it longer than
    /// an append takes.
    pub fn append(
        &self,
        batches: &[u8],
        headers: &[BatchHeader],
        min_isr: Option<usize>,
    ) -> Result<Appended, TopicError> {
        self.append_from(
            batches,
            headers,
            min_isr,
            Origin::Client { verified: false },
        )
    }

    /// [`append`](Self::append) for a client's produce when transactions
    /// are verified (`transaction.partition.verification.enable`): the
    /// first transactional batch of a producer's transaction here is taken
    /// only if its coordinator confirmed the partition is in the
    /// transaction since the producer's last marker ([`Self::verified`]),
    /// else INVALID_TXN_STATE — a transaction that ended between the check
    /// and the append must not leave a hanging one behind.
    pub fn append_verified(
        &self,
        batches: &[u8],
        headers: &[BatchHeader],
        min_isr: Option<usize>,
    ) -> Result<Appended, TopicError> {
        self.append_from(batches, headers, min_isr, Origin::Client { verified: true })
    }

    /// Whether producer `producer_id` has no transaction open here at
    /// `epoch`: its next transactional batch (of that epoch) needs the
    /// coordinator's confirmation (`ProducerStates::open_txn_at`).
    pub fn needs_verification(&self, producer_id: i64, epoch: i16) -> bool {
        !self.lock().producers.open_txn_at(producer_id, epoch)
    }

    /// The coordinator confirmed this partition is in the transaction of
    /// `producer_id` at `epoch`: its first transactional batch may come.
    pub fn verified(&self, producer_id: i64, epoch: i16) {
        self.lock().verified.insert(producer_id, epoch);
    }

    /// [`append`](Self::append) for batches one of this broker's
    /// coordinators writes to its own topic: a transactional offset commit
    /// carries its producer's id and epoch but no sequence, so only the
    /// epoch is checked (Kafka's coordinator origin).
    pub fn append_as_coordinator(
        &self,
        batches: &[u8],
        headers: &[BatchHeader],
    ) -> Result<Appended, TopicError> {
        self.append_from(batches, headers, None, Origin::Coordinator)
    }

    fn append_from(
        &self,
        batches: &[u8],
        headers: &[BatchHeader],
        min_isr: Option<usize>,
        origin: Origin,
    ) -> Result<Appended, TopicError> {
        let now = now_ms();
        let records: i64 = headers
            .iter()
            .map(|h| i64::from(h.last_offset_delta) + 1)
            .sum();
        let mut state = self.lock();
        let epoch = match &state.role {
            Role::Leader(l) => {
                if let Some(min) = min_isr {
                    if l.isr_size() < min {
                        return Err(TopicError::new(
                            ResponseError::NotEnoughReplicas,
                            format!(
                                "{} in-sync replicas, min.insync.replicas is {min}",
                                l.isr_size()
                            ),
                        ));
                    }
                }
                l.epoch
            }
            Role::Follower { .. } => {
                return Err(TopicError::new(
                    ResponseError::NotLeaderOrFollower,
                    "this broker follows the partition",
                ))
            }
        };
        let blocking =
            state
                .log
                .append_may_block(batches.len() as u64, headers.len(), records, now);
        let result = if blocking {
            crate::offload::blocking(|| {
                if let Some(hook) = BLOCKING_APPEND_HOOK.get() {
                    hook(&self.topic, self.index);
                }
                Self::append_locked(&mut state, batches, headers, epoch, now, origin)
            })
        } else {
            Self::append_locked(&mut state, batches, headers, epoch, now, origin)
        };
        let hw = result
            .as_ref()
            .ok()
            .and_then(|_| Self::advance_high_watermark(&mut state));
        let end = state.log.log_end_offset();
        // Published under the lock, so the watches never go back.
        self.log_end.send_replace(end);
        if let Some(hw) = hw {
            self.publish_hw(hw);
        }
        drop(state);
        result
    }

    /// Leader: writes the control batch (one COMMIT or ABORT record,
    /// Kafka's layout, see `txn::marker`) ending `producer_id`'s
    /// transaction, at `producer_epoch`, from a transaction coordinator at
    /// `coordinator_epoch`; returns the marker's offset. The transaction
    /// closes (the last stable offset moves past it), and an ABORT is
    /// recorded in the segment's aborted-transaction index. Refused:
    /// NOT_LEADER_OR_FOLLOWER on a follower; INVALID_PRODUCER_EPOCH for an
    /// epoch older than the producer's; TRANSACTION_COORDINATOR_FENCED for
    /// a coordinator epoch older than the producer's last marker's. A
    /// marker for a producer without an open transaction is written all
    /// the same, as Kafka does (a coordinator retrying after a failover).
    /// `bumped`: the transaction is of version 2 (its end bumped the
    /// epoch), so the marker's epoch must be above the producer's
    /// (`ProducerStates::check_marker`'s strict rule).
    /// The marker is not held to `min.insync.replicas`: the coordinator
    /// waits for it like an acks=all produce ([`Partition::ack_state`]).
    pub fn write_txn_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        result: TxnResult,
        bumped: bool,
    ) -> Result<i64, TopicError> {
        let now = now_ms();
        let marker = MarkerBatch::new(
            producer_id,
            producer_epoch,
            EndTxnMarker::new(result, coordinator_epoch),
        );
        let batch = BatchBuilder::marker(&marker, now).encode()?;
        let mut state = self.lock();
        let epoch = match &state.role {
            Role::Leader(l) => l.epoch,
            Role::Follower { .. } => {
                return Err(TopicError::new(
                    ResponseError::NotLeaderOrFollower,
                    "this broker follows the partition",
                ))
            }
        };
        state
            .producers
            .check_marker(producer_id, producer_epoch, coordinator_epoch, bumped)
            .map_err(|code| {
                TopicError::new(
                    code,
                    format!(
                        "marker of producer {producer_id} epoch {producer_epoch} from coordinator epoch {coordinator_epoch}"
                    ),
                )
            })?;
        let blocking = state.log.append_may_block(batch.len() as u64, 1, 1, now);
        let result = if blocking {
            crate::offload::blocking(|| Self::append_marker_locked(&mut state, &batch, epoch, now))
        } else {
            Self::append_marker_locked(&mut state, &batch, epoch, now)
        };
        let hw = result
            .as_ref()
            .ok()
            .and_then(|_| Self::advance_high_watermark(&mut state));
        let end = state.log.log_end_offset();
        self.log_end.send_replace(end);
        if let Some(hw) = hw {
            self.publish_hw(hw);
        }
        drop(state);
        result
    }

    fn append_marker_locked(
        state: &mut PartitionState,
        batch: &[u8],
        leader_epoch: i32,
        now: i64,
    ) -> Result<i64, TopicError> {
        let active_before = state.log.active_base_offset();
        let appended = state.log.append(batch, leader_epoch, now)?;
        let mut header = BatchHeader::parse(batch)?;
        header.base_offset = appended.base_offset;
        state.verified.remove(&header.producer_id);
        if let Some(ended) = txns::apply(&mut state.producers, &header, Some(batch)) {
            state.unreplicated.push(&ended);
            if let Some(aborted) = ended.aborted {
                state.aborted.record(&state.log, aborted)?;
            }
        }
        producers::snapshot_if_rolled(&mut state.log, &state.producers, active_before);
        state.log.maybe_flush(now)?;
        Ok(appended.base_offset)
    }

    fn append_locked(
        state: &mut PartitionState,
        batches: &[u8],
        headers: &[BatchHeader],
        leader_epoch: i32,
        now: i64,
        origin: Origin,
    ) -> Result<Appended, TopicError> {
        if origin == (Origin::Client { verified: true }) {
            check_verified(state, headers)?;
        }
        match origin {
            Origin::Client { .. } => {
                if let Some(base_offset) = producers::check_sequences(&state.producers, headers)? {
                    return Ok(Appended::Duplicate {
                        base_offset,
                        log_start_offset: state.log.log_start_offset(),
                    });
                }
            }
            Origin::Coordinator => producers::check_coordinator_batches(&state.producers, headers)?,
        }
        let active_before = state.log.active_base_offset();
        let result = state.log.append(batches, leader_epoch, now)?;
        producers::record_appended(&mut state.producers, headers, result.base_offset);
        if !state.verified.is_empty() {
            for h in headers.iter().filter(|h| h.is_transactional()) {
                state.verified.remove(&h.producer_id);
            }
        }
        producers::snapshot_if_rolled(&mut state.log, &state.producers, active_before);
        state.log.maybe_flush(now)?;
        Ok(Appended::New(result))
    }
}
