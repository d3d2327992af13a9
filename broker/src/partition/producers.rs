//! The idempotent producers' sequence state of a partition: rebuilding it
//! when the partition opens (from the newest snapshot and the batches
//! after it), checking a leader's incoming batches against it (retries
//! deduplicated, gaps and fenced epochs refused), recording what was
//! appended or replicated, and the snapshot written when the log rolls.

use kafka_protocol::error::ResponseError;

use crate::error::TopicError;
use crate::producer::state::{last_sequence as producer_last_sequence, ProducerStates, SeqCheck};
use crate::storage::batch::{BatchHeader, BATCH_HEADER_LEN};
use crate::storage::{self, PartitionLog};

/// What rebuilding a partition's producer state cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerStateLoad {
    /// A snapshot was loaded (else the scan started at the log start).
    pub snapshot_loaded: bool,
    /// Bytes of batch headers read after the snapshot.
    pub bytes_read: u64,
}

/// Rebuilds producer sequence state: loads the newest usable snapshot (see
/// `storage::producer_snapshot` and [`PartitionLog::latest_producer_snapshot`])
/// and replays the headers of the batches after it (headers only, one
/// `pread` each); without one, replays every batch of the log.
pub(super) fn load_producers(
    log: &PartitionLog,
) -> storage::Result<(ProducerStates, ProducerStateLoad)> {
    if log.log_start_offset() == log.log_end_offset() {
        return Ok((ProducerStates::default(), ProducerStateLoad::default()));
    }
    let (mut states, from, snapshot_loaded) = match log.latest_producer_snapshot()? {
        Some((offset, entries)) => (ProducerStates::from_snapshot(entries), offset, true),
        None => (ProducerStates::default(), log.log_start_offset(), false),
    };
    let bytes_read = log.for_each_header_from(from, |h| states.replay(h))?;
    Ok((
        states,
        ProducerStateLoad {
            snapshot_loaded,
            bytes_read,
        },
    ))
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
/// are to be appended. Refused: transactional batches, sequences the state
/// rejects, and a request mixing retried and new batches of one producer.
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
    for h in headers.iter().filter(|h| h.producer_id >= 0) {
        if h.is_transactional() {
            return Err(TopicError::new(
                ResponseError::InvalidRecord,
                "transactional batches are not supported yet",
            ));
        }
        let view = scratch.as_ref().unwrap_or(producers);
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

/// Records appended batches (`headers`, in order, the first at
/// `base_offset`) in the producers' state.
pub(super) fn record_appended(
    producers: &mut ProducerStates,
    headers: &[BatchHeader],
    base_offset: i64,
) {
    let mut offset = base_offset;
    for h in headers {
        if h.producer_id >= 0 {
            let last_seq = producer_last_sequence(h);
            producers.record(
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                last_seq,
                offset,
            );
        }
        offset += h.last_offset_delta as i64 + 1;
    }
}

/// Replays into the producers' state the batches a follower copied from
/// its leader (`batches`, whole batches as the leader sent them).
pub(super) fn replay_replicated(
    producers: &mut ProducerStates,
    batches: &[u8],
) -> storage::Result<()> {
    let mut pos = 0usize;
    while let Some(rest) = batches.get(pos..).filter(|r| r.len() >= BATCH_HEADER_LEN) {
        let h = BatchHeader::parse(rest)?;
        if h.producer_id >= 0 {
            producers.replay(&h);
        }
        pos += h.total_size();
    }
    Ok(())
}
