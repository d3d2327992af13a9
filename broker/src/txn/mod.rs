//! Transactions with Kafka's semantics (issue 37): the pure foundation the
//! transaction coordinator and the partitions build on. Nothing here does
//! I/O, keeps time or takes a lock; every function is a decision on values.
//!
//! What the rooms own:
//!
//! - [`vocab`]: producer id and epoch sentinels, the transaction version
//!   (KIP-890), topic-partitions, and which `__transaction_state`
//!   partition owns a transactional id.
//! - [`log_record`]: the `__transaction_state` records (key, value,
//!   tombstone) byte for byte in Kafka's schema, read defensively.
//! - [`marker`]: the control records that end a transaction on a partition
//!   (commit/abort key, end-marker value) and the attributes of the batch
//!   that carries one.
//! - [`census`]: what the coordinator counts for `/metrics`: how a
//!   transaction ended (result and reason) and ids by state.
//! - [`state`]: the coordinator's state machine: one
//!   [`state::TransactionMetadata`] per transactional id, and the decisions
//!   InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, timeouts
//!   and expiry lead to — a Kafka error code, or the transition to persist
//!   and what to do once it is durable.
//!
//! How the later pieces use them:
//!
//! - The coordinator runtime (one per `__transaction_state` partition this
//!   broker leads, loaded and unloaded with that leadership, like the group
//!   coordinators) replays the partition with
//!   [`log_record::decode_record`] into
//!   [`state::TransactionMetadata::from_log`], resumes the markers of every
//!   prepared transaction, and then serves requests: look up the metadata
//!   ([`state::coordinator_epoch`] gates a partition still loading), call
//!   the decision function, [`state::TransactionMetadata::begin`] the
//!   transit, append its [`state::Transit::log_value`] encoded at the
//!   cluster's [`vocab::TransactionVersion::log_value_version`] (acks=all),
//!   then [`state::TransactionMetadata::apply`] it or
//!   [`state::TransactionMetadata::abandon`] it and answer. Timers call
//!   [`state::abort_timed_out`] and [`state::expire`].
//! - WriteTxnMarkers: the coordinator sends each
//!   [`state::MarkerPlan`] to the partitions' leaders (over the brokers'
//!   own connections, with its coordinator epoch); a leader appends a
//!   [`marker::MarkerBatch`] (built with [`marker::EndTxnMarker`]) and
//!   updates its producer state, refusing markers from an older
//!   coordinator epoch or, with transaction version 2, an epoch not above
//!   the data's.
//! - Partitions keep a last stable offset (the first offset of the oldest
//!   open transaction) and an aborted-transaction index per segment, both
//!   found by reading control batches ([`marker::is_control`],
//!   [`marker::decode_control_key`]); read_committed fetches stop at the LSO
//!   and return the aborted transactions they overlap.
//!
//! What it must not touch: anything of the broker. `txn` imports only
//! itself (and `kafka_protocol`'s error codes), so every floor above it —
//! partitions, coordinators, handlers — can use it without a loop.

pub mod census;
pub mod log_record;
pub mod marker;
pub mod state;
pub mod vocab;
