//! Idempotent and transactional producers: producer ids and, per
//! partition, the sequence state that turns retried batches into
//! duplicates instead of copies, with each producer's open transaction
//! (issue 37).
//!
//! [`state`] is the pure per-partition bookkeeping; [`ids`] hands out
//! producer ids that stay unique across restarts. Partitions own their
//! [`state::ProducerStates`] next to their log (see `topics`), so the check
//! and the append happen under one lock; at start they restore it from the
//! log's producer state snapshots (`storage::producer_snapshot`) and the
//! batches after the newest usable one.

pub mod ids;
pub mod state;
