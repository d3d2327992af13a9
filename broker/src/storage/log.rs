//! `PartitionLog`: the ordered list of segments of one partition, with
//! append, read, recovery, rolling, retention and checkpoints.
//!
//! Concurrency: mutations take `&mut self`; the broker wraps each log in a
//! lock. Bytes below the log end never change once written, and a
//! [`FetchSlice`] holds its segment file open, so a reader may send a slice
//! after releasing the lock even if retention deletes the segment meanwhile.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{LogConfig, Result};

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendResult {
    /// Offset assigned to the first record of the first batch.
    pub base_offset: i64,
    /// Offset of the last record of the last batch.
    pub last_offset: i64,
    /// The broker time written into the batches if the log uses
    /// LogAppendTime, else -1.
    pub log_append_time: i64,
    /// Log start offset after the append.
    pub log_start_offset: i64,
}

/// A region of one segment file holding whole batches, to be sent as is.
#[derive(Debug, Clone)]
pub struct FetchSlice {
    pub file: Arc<File>,
    pub position: u64,
    pub len: u64,
}

impl FetchSlice {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What a retention pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
    pub log_start_offset: i64,
}

/// The log of one partition.
#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
}

impl PartitionLog {
    /// Opens (creating if needed) the partition directory and recovers it:
    /// after an unclean stop, batches past the recovery point are
    /// re-validated (length, CRC-32C) and a torn tail is truncated; missing
    /// or corrupt indexes are rebuilt.
    pub fn open(dir: impl AsRef<Path>, config: LogConfig, now_ms: i64) -> Result<Self> {
        let _ = now_ms;
        let _ = Self {
            dir: dir.as_ref().to_path_buf(),
            config,
        };
        todo!()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    /// Replaces the settings (takes effect for the next roll / retention pass).
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    /// Appends already validated batches (see `batch::validate_batches`):
    /// assigns consecutive offsets from the log end, stamps `leader_epoch`,
    /// applies LogAppendTime when configured, rolls the segment first if
    /// size or age demands, and writes the whole payload with one write.
    pub fn append(&mut self, batches: &mut [u8], leader_epoch: i32, now_ms: i64) -> Result<AppendResult> {
        let _ = (batches, leader_epoch, now_ms);
        todo!()
    }

    /// Returns whole batches starting with the one containing `offset`, up
    /// to about `max_bytes` (but always at least one whole batch if any is
    /// available, as KIP-74 requires), from a single segment, and never
    /// past `max_offset` (exclusive; the high watermark for consumers).
    /// `offset == log end` gives an empty slice; outside
    /// `[log start, log end]` is `OffsetOutOfRange`.
    pub fn read(&self, offset: i64, max_bytes: u64, max_offset: i64) -> Result<FetchSlice> {
        let _ = (offset, max_bytes, max_offset);
        todo!()
    }

    pub fn log_start_offset(&self) -> i64 {
        todo!()
    }
    /// Offset the next appended record will get.
    pub fn log_end_offset(&self) -> i64 {
        todo!()
    }
    /// Total bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        todo!()
    }

    /// The first offset whose record timestamp is `>= timestamp`, with that
    /// record's batch max timestamp; `None` if no record is that recent.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>> {
        let _ = timestamp;
        todo!()
    }

    /// The largest timestamp in the log and the offset of its batch's last
    /// record (ListOffsets MAX_TIMESTAMP); `None` for an empty log.
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        todo!()
    }

    /// `DeleteRecords`: advances the log start offset to `offset` (deleting
    /// segments wholly below it) and checkpoints it. `offset` must be in
    /// `[log start, log end]`. Returns the new log start offset.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<i64> {
        let _ = offset;
        todo!()
    }

    /// Time (`retention.ms`) and size (`retention.bytes`) retention: deletes
    /// whole non-active segments and advances the log start offset. Also
    /// rolls the active segment when `segment.ms` has passed.
    pub fn enforce_retention(&mut self, now_ms: i64) -> Result<RetentionOutcome> {
        let _ = now_ms;
        todo!()
    }

    /// Applies the flush policy (`flush.messages`, `flush.ms`); call after
    /// appends and periodically.
    pub fn maybe_flush(&mut self, now_ms: i64) -> Result<()> {
        let _ = now_ms;
        todo!()
    }

    /// fsyncs all segments and indexes and checkpoints the recovery point.
    pub fn flush(&mut self) -> Result<()> {
        todo!()
    }

    /// Checkpoints the high watermark (replication owns its value; a
    /// single broker sets it to the log end after each append).
    pub fn set_high_watermark(&mut self, hw: i64) {
        let _ = hw;
        todo!()
    }
    pub fn high_watermark(&self) -> i64 {
        todo!()
    }

    /// Clean shutdown: flush, trim preallocated indexes, write all
    /// checkpoints and a clean-shutdown marker so the next open skips
    /// re-validation.
    pub fn close(self) -> Result<()> {
        todo!()
    }

    /// Removes the partition directory and everything in it.
    pub fn delete(self) -> Result<()> {
        todo!()
    }
}
