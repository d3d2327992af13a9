//! One partition this broker holds (Kafka's `Partition`): its log, the
//! producers' state (idempotent sequences, open transactions), its
//! aborted transactions, and its replica role — leader or follower in a
//! leader epoch — behind one lock, so checking a batch, appending it and
//! moving the high watermark are one step.
//!
//! Transactions (issue 37): the last stable offset is the high watermark,
//! held back to the first offset of the earliest open transaction, or of
//! an ended one whose marker the high watermark has not passed yet (as
//! Kafka does); read_committed fetches stop there. Markers come from a
//! transaction coordinator through WriteTxnMarkers
//! ([`Partition::write_txn_marker`]); followers copy them and keep the
//! same state; ABORTs go to the segments' `.txnindex` files.
//!
//! As leader it tracks each follower's progress from their fetches and
//! keeps the high watermark at the smallest log end of the in-sync
//! replicas (`replication::progress` decides), proposes ISR changes (the
//! controller commits them), and stamps its leader epoch into appended
//! batches and the log's epoch history. As follower it appends the
//! leader's batches as they are, keeps the producers' state from them (so
//! it can deduplicate retries once it leads), takes the leader's high
//! watermark, and truncates where its log diverged from the leader's.
//!
//! Watches let waiters sleep until something moves: consumers' fetches and
//! `acks=all` produces on the high watermark, followers' fetches on the log
//! end.
//!
//! Its parts, each building only on those listed before it (imports and
//! method calls alike):
//! - `role`: leader or follower, the leader's ISR bookkeeping, proposals;
//! - `producers`: the producers' state on the produce path (sequences,
//!   a plain batch inside an open transaction);
//! - `txns`: transactions (issue 37): what control batches mean for the
//!   producers' open transactions, the aborted transactions and their
//!   `.txnindex` files, rebuilding both at open;
//! - `state`: the [`Partition`], its lock, opening and accessors;
//! - `leader`: the role an image gives, the high watermark and its
//!   publication, `acks=all` waits, ISR changes;
//! - `append`: the leader's produce path, and its transaction markers
//!   (WriteTxnMarkers: [`Partition::write_txn_marker`]);
//! - `read`: the fetch path (consumers, read_committed ones stopping at the
//!   last stable offset, loaders, followers' fetches);
//! - `follower`: appending the leader's batches, truncation.
//!
//! This module only declares them and re-exports their public items.

mod append;
mod follower;
mod leader;
mod producers;
mod read;
mod role;
mod state;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod txn_tests;
mod txns;

pub use self::append::{Appended, BlockingAppendHook, BLOCKING_APPEND_HOOK};
pub use self::follower::FetchPosition;
pub use self::producers::ProducerStateLoad;
pub use self::read::{CommittedRead, FollowerRead};
pub use self::role::{AckState, IsrProposal, ReplicaSummary};
pub use self::state::{Partition, PartitionOffsets};
