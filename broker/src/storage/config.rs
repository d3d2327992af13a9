//! Per-partition log settings, named after their Kafka topic configs.

/// Settings of one partition's log. Field names follow Kafka topic configs.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll the active segment when it would exceed this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll the active segment when its first batch is older.
    pub segment_ms: i64,
    /// `retention.ms`: delete whole segments whose newest record is older; -1 = forever.
    pub retention_ms: i64,
    /// `retention.bytes`: delete oldest segments while the log is larger; -1 = unlimited.
    pub retention_bytes: i64,
    /// `max.message.bytes`: largest accepted record batch.
    pub max_message_bytes: usize,
    /// `index.interval.bytes`: bytes between two sparse index entries.
    pub index_interval_bytes: u64,
    /// `segment.index.bytes`: size the index files are preallocated to.
    pub segment_index_bytes: u64,
    /// `flush.messages`: fsync after this many messages; `i64::MAX` = leave it to the OS.
    pub flush_messages: i64,
    /// `flush.ms`: fsync when the oldest unflushed data is this old; `i64::MAX` = never.
    pub flush_ms: i64,
    /// `message.timestamp.type` is LogAppendTime (true) or CreateTime (false).
    pub log_append_time: bool,
    /// `file.delete.delay.ms`: how long a deleted segment lingers (renamed `.deleted`).
    pub file_delete_delay_ms: i64,
    /// `cleanup.policy` contains `compact`: the cleaner keeps the last
    /// record per key (see `cleaner`).
    pub compact: bool,
    /// `cleanup.policy` contains `delete`: time and size retention apply.
    pub delete: bool,
    /// `delete.retention.ms`: how long a tombstone (null value) is kept in
    /// a compacted log, counted from the tombstone's timestamp.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`: clean once the bytes not yet cleaned
    /// are at least this share of the cleanable log.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: a segment is cleaned only once its newest
    /// record is at least this old.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms` (KIP-354): once the oldest dirty record
    /// (first batch of the oldest uncleaned non-active segment) is older
    /// than this, the log is cleaned whatever its dirty ratio; and in a
    /// compacted log the active segment rolls by age at
    /// `min(segment.ms, max.compaction.lag.ms)` so that its records become
    /// cleanable (Kafka's `LogConfig.maxSegmentMs`).
    pub max_compaction_lag_ms: i64,
    /// `segment.jitter.ms`: the active segment rolls by age at `segment.ms`
    /// minus a random jitter in `[0, min(jitter, segment.ms))`, drawn once
    /// per segment (as Kafka), so many partitions do not roll together.
    pub segment_jitter_ms: i64,
    /// `message.timestamp.before.max.ms`: with CreateTime, a record whose
    /// timestamp is more than this in the past is refused (`INVALID_TIMESTAMP`).
    pub message_timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: with CreateTime, a record whose
    /// timestamp is more than this in the future is refused.
    pub message_timestamp_after_max_ms: i64,
    /// `compression.type` with its codec's `compression.*.level`: what the
    /// leader's produce path recompresses batches to (`Producer`: stored
    /// as sent, zero-copy).
    pub compression: super::recompress::TargetCompression,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            max_message_bytes: 1024 * 1024 + 12,
            index_interval_bytes: 4096,
            segment_index_bytes: 10 * 1024 * 1024,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            log_append_time: false,
            file_delete_delay_ms: 60_000,
            compact: false,
            delete: true,
            delete_retention_ms: 24 * 3600 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            segment_jitter_ms: 0,
            message_timestamp_before_max_ms: i64::MAX,
            message_timestamp_after_max_ms: 3_600_000,
            compression: super::recompress::TargetCompression::Producer,
        }
    }
}
