//! Record batch (format v2, "magic 2") header parsing, validation and the
//! few in-place rewrites the broker is allowed to make.
//!
//! Layout of a v2 batch (big endian):
//! baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 |
//! crc u32 | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 |
//! maxTimestamp i64 | producerId i64 | producerEpoch i16 | baseSequence i32 |
//! recordsCount i32 | records...
//! The CRC-32C covers everything from `attributes` to the end of the batch.

use super::{Result, StorageError};

/// Bytes before the records of a v2 batch.
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes of `baseOffset` + `batchLength`: the part not counted in `batchLength`.
pub const LOG_OVERHEAD: usize = 12;

/// The parsed fixed header of one v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the header at the start of `buf` (which must hold at least
    /// `BATCH_HEADER_LEN` bytes). Checks only the structure, not the CRC.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        let _ = buf;
        todo!()
    }
    /// Whole size of the batch on disk and on the wire.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length as usize
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }
    /// Compression codec id (attributes bits 0-2): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression(&self) -> u8 {
        (self.attributes & 0x07) as u8
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & 0x08 != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & 0x10 != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & 0x20 != 0
    }
}

/// Validates a produce payload: a non-empty sequence of whole v2 batches with
/// consistent lengths, magic 2, a good CRC-32C, a sane `lastOffsetDelta` and
/// record count, and each batch no larger than `max_batch_bytes`.
/// Returns the parsed headers in order.
pub fn validate_batches(buf: &[u8], max_batch_bytes: usize) -> Result<Vec<BatchHeader>> {
    let _ = (buf, max_batch_bytes);
    let _ = StorageError::UnsupportedMagic(0);
    todo!()
}

/// CRC-32C of a whole batch as stored in its `crc` field (from `attributes` on).
pub fn compute_crc(batch: &[u8]) -> u32 {
    let _ = batch;
    todo!()
}

/// Rewrites `baseOffset` and `partitionLeaderEpoch` of the batch at the start
/// of `batch` (neither is covered by the CRC).
pub fn set_base_offset_and_epoch(batch: &mut [u8], base_offset: i64, leader_epoch: i32) {
    let _ = (batch, base_offset, leader_epoch);
    todo!()
}

/// Marks the batch as LogAppendTime with `timestamp` as its max timestamp and
/// recomputes the CRC (attributes and maxTimestamp are covered by it).
pub fn set_log_append_time(batch: &mut [u8], timestamp: i64) {
    let _ = (batch, timestamp);
    todo!()
}
