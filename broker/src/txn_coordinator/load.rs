//! Reading a `__transaction_state` partition into the coordinator's state:
//! every record in log order, the last one per transactional id winning
//! (a tombstone forgets the id), as Kafka's `TransactionStateManager`
//! loads a partition it becomes leader of.
//!
//! [`apply_batches`] is pure (bytes in, metadata out); [`read_partition`]
//! walks a partition's log to its end (not only to the high watermark: a
//! coordinator taking a partition over serves what the old leader
//! acknowledged, as the group coordinator does).

use std::collections::HashMap;
use std::os::unix::fs::FileExt;

use crate::error::TopicError;
use crate::storage::batch::{BatchHeader, BATCH_HEADER_LEN};
use crate::txn::log_record::{decode_record, TxnLogEntry};
use crate::txn::state::TransactionMetadata;

/// The transactional ids of one partition, as its log leaves them.
pub type Loaded = HashMap<String, TransactionMetadata>;

/// What a load saw besides the state: how many records it applied and
/// how many it skipped (undecodable, or metadata Moldau refuses).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LoadStats {
    pub records: usize,
    pub skipped: usize,
}

/// Applies the whole batches at the start of `bytes` (read at `offset`)
/// to `state`. Control records are not transaction metadata and are
/// passed over; a record that does not decode is skipped and logged (a
/// coordinator must not refuse a partition for one bad record). Returns
/// the offset after the last whole batch (`offset` if none was whole).
pub fn apply_batches(
    bytes: &[u8],
    offset: i64,
    state: &mut Loaded,
    stats: &mut LoadStats,
    partition: i32,
) -> Result<i64, TopicError> {
    let mut pos = 0usize;
    let mut next = offset;
    while pos + BATCH_HEADER_LEN <= bytes.len() {
        let header = BatchHeader::parse(&bytes[pos..])?;
        let end = pos.saturating_add(header.total_size());
        if end > bytes.len() {
            break;
        }
        match crate::storage::batch::decode_records(&bytes[pos..end]) {
            Ok(records) => {
                for r in records.into_iter().filter(|r| !r.control) {
                    let Some(key) = r.key.as_deref() else {
                        stats.skipped += 1;
                        continue;
                    };
                    match decode_record(key, r.value.as_deref()) {
                        Ok(entry) => {
                            stats.records += 1;
                            apply_entry(state, entry, stats, partition);
                        }
                        Err(e) => {
                            stats.skipped += 1;
                            tracing::warn!(partition, error = %e, "skipping an undecodable __transaction_state record");
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(partition, error = %e, "skipping an undecodable __transaction_state batch")
            }
        }
        next = header.last_offset().saturating_add(1);
        pos = end;
    }
    Ok(next)
}

fn apply_entry(state: &mut Loaded, entry: TxnLogEntry, stats: &mut LoadStats, partition: i32) {
    match entry {
        TxnLogEntry::Tombstone { transactional_id } => {
            state.remove(&transactional_id);
        }
        TxnLogEntry::Value {
            transactional_id,
            value,
        } => match TransactionMetadata::from_log(transactional_id.clone(), &value) {
            Ok(meta) => {
                state.insert(transactional_id, meta);
            }
            Err(e) => {
                stats.skipped += 1;
                tracing::warn!(partition, transactional_id, error = %e, "skipping __transaction_state metadata");
            }
        },
    }
}

/// Every record of a `__transaction_state` partition, to its log end.
pub fn read_partition(p: &crate::topics::Partition) -> Result<(Loaded, LoadStats), TopicError> {
    let mut state = Loaded::new();
    let mut stats = LoadStats::default();
    let mut offset = p.offsets().log_start;
    loop {
        let slice = p.read_to_log_end(offset, 1024 * 1024)?;
        if slice.is_empty() {
            break;
        }
        let len = usize::try_from(slice.len).map_err(|_| {
            TopicError::new(
                kafka_protocol::error::ResponseError::UnknownServerError,
                "a read larger than memory",
            )
        })?;
        let mut bytes = vec![0u8; len];
        slice
            .file
            .read_exact_at(&mut bytes, slice.position)
            .map_err(TopicError::from_io)?;
        let next = apply_batches(&bytes, offset, &mut state, &mut stats, p.index)?;
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok((state, stats))
}
