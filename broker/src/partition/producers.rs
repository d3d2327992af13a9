//! The producers' state of a partition on the leader's produce path:
//! checking incoming batches against it (retries deduplicated, gaps and
//! fenced epochs refused, a plain batch inside an open transaction
//! refused), recording what was appended (a transactional batch opens its
//! producer's transaction), and the snapshot written when the log rolls.
//! Rebuilding it (and replaying control batches) is `txns`' business.

use kafka_protocol::error::ResponseError;

use crate::error::TopicError;
use crate::producer::state::{last_sequence as producer_last_sequence, ProducerStates, SeqCheck};
use crate::storage::batch::BatchHeader;
use crate::storage::PartitionLog;

/// What rebuilding a partition's producer state cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerStateLoad {
    /// A snapshot was loaded (else the scan started at the log start).
    pub snapshot_loaded: bool,
    /// Bytes of batch headers read after the snapshot.
    pub bytes_read: u64,
}

/// Writes a producer state snapshot when the log rolled during an append
/// (the active segment changed). Failing (a full disk) only costs a longer
/// rebuild at the next start, so it is logged, not returned.
pub(super) fn snapshot_if_rolled(
    log: &mut PartitionLog,
    producers: &ProducerStates,
    active_before: i64,
) {
    if log.active_base_offset() != active_before {
        let entries = producers.to_snapshot();
        if let Err(e) = log.write_producer_snapshot(&entries) {
            tracing::warn!(dir = %log.dir().display(), error = %e, "cannot write a producer state snapshot");
        }
    }
}

/// Checks a leader's incoming batches (`headers`, in order) against the
/// producers' state: `Some(first offset)` when they are a retry of
/// batches already in the log (not to be written again), `None` when they
/// are to be appended. Refused: control batches (only a leader's marker
/// writes them), sequences the state rejects, a plain batch of a producer
/// whose transaction is open, and a request mixing retried and new batches
/// of one producer.
pub(super) fn check_sequences(
    producers: &ProducerStates,
    headers: &[BatchHeader],
) -> Result<Option<i64>, TopicError> {
    let mut duplicate = None;
    let mut fresh = 0;
    // Later batches of one request may follow earlier ones of the
    // same producer: check against a scratch copy of just this
    // request's producers as we go (not the whole table: this is
    // the produce hot path).
    let mut scratch: Option<ProducerStates> = None;
    let request_pids = || {
        headers
            .iter()
            .map(|h| h.producer_id)
            .filter(|pid| *pid >= 0)
    };
    for h in headers {
        if h.is_control() || (h.is_transactional() && h.producer_id < 0) {
            return Err(TopicError::new(
                ResponseError::InvalidRecord,
                "a control batch, or a transactional one without a producer id",
            ));
        }
    }
    for h in headers.iter().filter(|h| h.producer_id >= 0) {
        let view = scratch.as_ref().unwrap_or(producers);
        if let Err(code) = view.check_txn(h.producer_id, h.is_transactional()) {
            return Err(TopicError::new(
                code,
                format!(
                    "producer {} wrote a non-transactional batch inside its open transaction",
                    h.producer_id
                ),
            ));
        }
        let last_seq = producer_last_sequence(h);
        match view.check(h.producer_id, h.producer_epoch, h.base_sequence, last_seq) {
            SeqCheck::Append => {
                fresh += 1;
                let s = scratch.get_or_insert_with(|| producers.subset(request_pids()));
                s.record(
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    last_seq,
                    -1,
                );
            }
            SeqCheck::Duplicate { first_offset }
                if h.is_transactional()
                    && view.open_txn(h.producer_id).is_none()
                    && view.duplicate_precedes_marker(h.producer_id, first_offset) =>
            {
                return Err(TopicError::new(
                    ResponseError::OutOfOrderSequenceNumber,
                    format!(
                        "producer {} epoch {} opens a transaction with sequences {}..={} of a batch before its last marker (offset {first_offset})",
                        h.producer_id, h.producer_epoch, h.base_sequence, last_seq
                    ),
                ));
            }
            SeqCheck::Duplicate { first_offset } => {
                duplicate.get_or_insert(first_offset);
            }
            SeqCheck::Reject(code) => {
                return Err(TopicError::new(
                    code,
                    format!(
                        "producer {} epoch {} sequences {}..={}",
                        h.producer_id, h.producer_epoch, h.base_sequence, last_seq
                    ),
                ))
            }
        }
    }
    if duplicate.is_some() && fresh > 0 {
        return Err(TopicError::new(
            ResponseError::OutOfOrderSequenceNumber,
            "a request mixing retried and new batches of one producer",
        ));
    }
    Ok(duplicate)
}

/// Checks the batches one of this broker's coordinators writes
/// (`headers`, in order): no sequences to check, as Kafka's coordinators
/// write a transactional offset commit without one, but a producer epoch
/// older than the partition has seen is refused (INVALID_PRODUCER_EPOCH:
/// a fenced producer's late commit), and so is a control batch.
pub(super) fn check_coordinator_batches(
    producers: &ProducerStates,
    headers: &[BatchHeader],
) -> Result<(), TopicError> {
    for h in headers {
        if h.is_control() {
            return Err(TopicError::new(
                ResponseError::InvalidRecord,
                "a coordinator writes no control batch through append",
            ));
        }
        if h.producer_id >= 0 {
            producers
                .check_epoch(h.producer_id, h.producer_epoch)
                .map_err(|code| {
                    TopicError::new(
                        code,
                        format!(
                            "producer {} epoch {} is older than the partition's",
                            h.producer_id, h.producer_epoch
                        ),
                    )
                })?;
        }
    }
    Ok(())
}

/// Records appended batches (`headers`, in order, the first at
/// `base_offset`) in the producers' state.
pub(super) fn record_appended(
    producers: &mut ProducerStates,
    headers: &[BatchHeader],
    base_offset: i64,
) {
    let mut offset = base_offset;
    for h in headers {
        if h.producer_id >= 0 && h.base_sequence < 0 {
            producers.record_unsequenced(h.producer_id, h.producer_epoch);
            producers.record_timestamp(h.producer_id, h.max_timestamp);
            if h.is_transactional() {
                producers.begin_txn(h.producer_id, offset);
            }
        } else if h.producer_id >= 0 {
            let last_seq = producer_last_sequence(h);
            producers.record(
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                last_seq,
                offset,
            );
            producers.record_timestamp(h.producer_id, h.max_timestamp);
            if h.is_transactional() {
                producers.begin_txn(h.producer_id, offset);
            }
        }
        offset += h.last_offset_delta as i64 + 1;
    }
}
