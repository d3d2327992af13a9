//! On-disk log storage: one directory per partition, holding segments of
//! record batches (format v2) exactly as producers sent them.
//!
//! This module owns the bytes on disk and nothing else: it knows nothing of
//! the Kafka wire protocol, topics' metadata or the network. Callers hand it
//! validated produce payloads and get back offsets; they ask it for file
//! regions to send to consumers and followers. For replication it keeps
//! each partition's leader-epoch cache (`epochs`), appends batches fetched
//! from a leader as they are, and truncates a follower's divergent tail.
//!
//! Layout of a partition directory (`<topic>-<partition>/`):
//! - `<base offset, 20 digits>.log`: record batches; on a leader, base
//!   offset and leader epoch rewritten by the broker (neither is covered by
//!   the batch CRC); on a follower, byte for byte as the leader has them;
//! - `<base>.index`: sparse, memory-mapped offset → file position;
//! - `<base>.timeindex`: sparse, memory-mapped timestamp → offset;
//! - `<base>.txnindex`: the transactions aborted in that segment
//!   (`txn_index`; written and rebuilt by the partition);
//! - checkpoint files (recovery point, log start offset, cleaner offset,
//!   `leader-epoch-checkpoint`), each written atomically (temp file,
//!   fsync, rename, fsync directory);
//! - transiently, `<base>.log.cleaned` / `<base>.log.swap` while the
//!   cleaner (`cleanup.policy=compact`) swaps in a compacted segment.
//!
//! Beside the partition directories, `replication-offset-checkpoint`
//! holds every partition's high watermark (`high_watermarks`).

pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod compression;
pub mod config;
pub mod epochs;
pub mod high_watermarks;
pub mod index;
pub mod log;
pub mod producer_snapshot;
pub mod recompress;
pub mod segment;
pub mod space;
#[cfg(test)]
pub(crate) mod test_batches;
pub mod txn_index;
pub mod vectored;

pub use cleaner::CompactionOutcome;
pub use config::LogConfig;
pub use epochs::{
    truncation_offset, truncation_point, EpochEntry, LeaderEpochCache, TruncationPoint,
};
pub use log::{
    AppendResult, CompactionPass, CompactionPlan, FetchSlice, PartitionLog, RetentionOutcome,
    RetiredFiles,
};

/// Errors of the storage layer. Each maps onto one Kafka error code at the
/// protocol edge (see `protocol::errors`).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// A batch failed length/CRC/structure checks (`CORRUPT_MESSAGE`).
    #[error("corrupt record batch: {0}")]
    CorruptBatch(String),
    /// Magic other than 2 (`UNSUPPORTED_FOR_MESSAGE_FORMAT`).
    #[error("unsupported record batch magic {0}")]
    UnsupportedMagic(i8),
    /// A batch larger than `max.message.bytes` (`MESSAGE_TOO_LARGE`).
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: usize },
    /// A record the topic's settings forbid, such as a record without a key
    /// in a compacted topic (`INVALID_RECORD`).
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// Records the topic's settings forbid, each named by its index in the
    /// partition's record set (KIP-467: `INVALID_RECORD` with per-record
    /// errors), e.g. records without a key in a compacted topic.
    #[error("{} record(s) rejected, the first: {}", errors.len(), errors.first().map_or("", |e| e.1.as_str()))]
    RecordErrors { errors: Vec<(i32, String)> },
    /// Records whose timestamps lie outside the topic's
    /// `message.timestamp.before/after.max.ms` bounds, by index in the
    /// record set (`INVALID_TIMESTAMP`, KIP-467 per-record errors).
    #[error("One or more records have been rejected due to invalid timestamp")]
    TimestampErrors { errors: Vec<(i32, String)> },
    /// A timestamp outside what the topic accepts (`INVALID_TIMESTAMP`).
    #[error("invalid timestamp: {0}")]
    InvalidTimestamp(String),
    /// Fetch or DeleteRecords outside `[log start, log end]` (`OFFSET_OUT_OF_RANGE`).
    #[error("offset {requested} out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        requested: i64,
        log_start: i64,
        log_end: i64,
    },
}

pub type Result<T> = std::result::Result<T, StorageError>;
