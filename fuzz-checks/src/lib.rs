//! The checks the fuzzers run, one module each: an input of bytes goes
//! through one part of the broker that reads untrusted bytes (request
//! frames, record batches, consumer-group records, partition directories
//! on disk, the transaction coordinator's records, transaction markers,
//! `.txnindex` files and producer snapshots, SASL exchanges and the
//! security configs, client telemetry payloads) and whatever property that
//! part promises is asserted. A check panics on a violated property; any
//! error the broker returns for bad bytes is fine.
//!
//! Two drivers: libFuzzer (`fuzz/`, `scripts/fuzz.sh`: coverage-guided,
//! with AddressSanitizer and allocation limits) and the bounded mutation run
//! of `tests/bounded.rs` that the workspace's tests include.

pub mod auth_exchanges;
pub mod common;
pub mod group_codecs;
pub mod log_recovery;
pub mod record_batch;
pub mod request_frame;
pub mod telemetry_payload;
pub mod txn_codecs;

/// A check: one input, a panic if a property fails.
pub type Check = fn(&[u8]);

/// Every check by the name of its fuzz target (and its corpus directory).
pub const CHECKS: [(&str, Check); 7] = [
    ("request_frame", request_frame::run),
    ("record_batch", record_batch::run),
    ("group_codecs", group_codecs::run),
    ("log_recovery", log_recovery::run),
    ("txn_codecs", txn_codecs::run),
    ("auth_exchanges", auth_exchanges::run),
    ("telemetry_payload", telemetry_payload::run),
];
