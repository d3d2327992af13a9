//! Record batches (format v2, "magic 2"): their byte layout, validation,
//! and the few rewrites the broker is allowed to make.
//!
//! This module owns the bytes of one batch: it never touches files.
//! Records are decoded (and decompressed) only through `kafka_protocol`'s
//! `RecordBatchDecoder`, for timestamp lookups, key validation of compacted
//! topics and the cleaner. Every function here accepts untrusted bytes
//! (produce payloads, possibly corrupt log files) and must not panic.
//!
//! Its three jobs are its children, which import one way (`validate` and
//! `build` read by `parse`'s layout; `parse` imports neither); this file
//! only declares them and re-exports their items, so callers keep
//! `storage::batch::…` paths:
//! - [`parse`]: the layout, the fixed header ([`BatchHeader`]), the CRC,
//!   and reading the records of a batch;
//! - [`validate`]: the verdicts on untrusted batches and their records;
//! - [`build`]: the rewrites (offsets and epochs, LogAppendTime, the
//!   cleaner's copies) and batches encoded from records
//!   ([`BatchBuilder`], the builder tests, benches and fuzz checks use).

pub mod build;
pub mod parse;
pub mod validate;

pub use self::build::{
    empty_copy, encode_records, set_base_offset_and_epoch, set_last_offset_delta,
    set_log_append_time, stamped_header, with_delete_horizon, with_payload, BatchBuilder,
};
pub use self::parse::{
    compute_crc, decode_records, end_txn_marker, find_record_at_or_after,
    first_batch_is_compressed, first_record_at_or_after, read_offset_and_length, record_timestamp,
    BatchHeader, BATCH_HEADER_LEN, CRC_START, LOG_OVERHEAD, MAGIC_POS, MAGIC_V2, MIN_BATCH_LENGTH,
};
pub use self::validate::{
    validate_batches, validate_one, validate_records, validate_records_bounded, TimestampBounds,
};
