//! The transaction coordinator's state machine, as pure code: one
//! [`TransactionMetadata`] per transactional id, the states it moves
//! through, and the decisions each request leads to.
//!
//! # How a change happens
//!
//! As in Kafka, a change is made in three steps, so that memory never runs
//! ahead of the log:
//!
//! 1. A decision function ([`init_producer_id`], [`add_partitions`],
//!    [`end_txn`], [`abort_timed_out`], [`expire`], …) reads the metadata
//!    and returns a Kafka error code, an answer with nothing to write
//!    ([`Decision::Done`], e.g. a retried request), or a [`Plan`]: the
//!    [`Transit`] (the whole new metadata) to persist, the reply to send
//!    once it is durable, and what follows ([`AfterPersist`]).
//! 2. The runtime calls [`TransactionMetadata::begin`], which checks the
//!    transition and marks it pending: until it is over, every other
//!    request for the id gets `CONCURRENT_TRANSACTIONS`. It then writes
//!    [`Transit::log_value`] (or, for [`TxnState::Dead`], a tombstone).
//! 3. Once the write is durable it calls [`TransactionMetadata::apply`];
//!    if the write failed, [`TransactionMetadata::abandon`].
//!
//! After a PrepareCommit or PrepareAbort is applied, the runtime calls
//! [`TransactionMetadata::begin_completion`] (the CompleteCommit or
//! CompleteAbort transit, pending from then on), sends the markers of
//! [`TransactionMetadata::marker_plan`] with WriteTxnMarkers, reports each
//! partition done with [`TransactionMetadata::marker_written`], and writes
//! and applies the completion when none is left. A coordinator that loads a
//! PrepareCommit or PrepareAbort from the log does the same.
//!
//! # Transaction versions
//!
//! With transaction version 2 (KIP-890), the client's EndTxn (v5+) bumps
//! the producer epoch: PrepareCommit/PrepareAbort carry epoch + 1 (the
//! markers are written at it) and the reply tells the client. A retried
//! EndTxn therefore arrives with the epoch one below the stored one and is
//! recognised by that; when the epoch is exhausted the end rotates to a new
//! producer id (reply: the new id at epoch 0), and a retry with the old id
//! at `i16::MAX - 1` is recognised by the previous producer id. Version 2
//! also lets a client abort from Empty, CompleteCommit or CompleteAbort (it
//! may not know whether its transaction started), which bumps the epoch
//! with no partitions to mark. Older clients keep the epoch across a
//! transaction and are told nothing but the error code.
//!
//! # Where Kafka is subtle
//!
//! - Fencing an ongoing transaction (InitProducerId from a new producer
//!   instance, or the transaction timing out) aborts it at a bumped epoch
//!   and answers `CONCURRENT_TRANSACTIONS`; the client retries until the
//!   abort is complete and then gets the epoch bumped once more. Kafka
//!   models this with a pending PrepareEpochFence state that is never
//!   written; here the decision directly yields the PrepareAbort, and
//!   [`TxnState::PrepareEpochFence`] exists for the wire (its id and name)
//!   but never becomes a state.
//! - Under the older rules, the fencing epoch bump takes effect in memory
//!   before the write (a zombie is refused at once). If the write fails the
//!   bump stays, and the next fence does not bump again
//!   ([`TransactionMetadata::has_failed_epoch_fence`]), so failed writes
//!   cannot run the epoch up. Under version 2 the abort's own bump is the
//!   fence (bumping for both, as Kafka once did, could overflow the epoch:
//!   KAFKA-19367), and a failed write leaves memory untouched.
//! - The coordinator's own aborts (fencing, timeouts) follow the cluster's
//!   transaction version, not the client's.
//! - InitProducerId with an expected producer id and epoch (KIP-360) bumps
//!   when they are current, returns the current epoch unbumped when they
//!   are the previous one (a retry of a bump whose answer was lost), and
//!   fences otherwise. An exhausted epoch rotates to a new producer id.
//! - Every transit records the producer id it replaces as the previous
//!   producer id, as Kafka's does; only rotations make that differ.
//!
//! Where this module refuses a case Kafka would fail with an internal
//! exception (a state that cannot occur), it answers
//! `UNKNOWN_SERVER_ERROR` (or `PRODUCER_FENCED` for a KIP-360 request
//! against an exhausted epoch) instead; nothing here panics.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;

use super::log_record::TxnLogValue;
use super::marker::TxnResult;
use super::vocab::{
    is_epoch_exhausted, ProducerIdAndEpoch, TopicPartition, TransactionVersion,
    CONSUMER_OFFSETS_TOPIC, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
};

/// A transaction's state, with Kafka's ids (the `TransactionStatus` byte)
/// and names (what DescribeTransactions and ListTransactions show).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction: after InitProducerId.
    Empty,
    /// Partitions have been added; the transaction is open.
    Ongoing,
    /// EndTxn(commit) is durable; markers are being written.
    PrepareCommit,
    /// An abort is durable; markers are being written.
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    /// The transactional id is expiring; only ever pending.
    Dead,
    /// Kafka's transient fencing state; never a state here (see module doc).
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// The `TransactionStatus` byte.
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.id() == id)
    }

    /// Kafka's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The states a transition into `self` may start from (Kafka's table;
    /// PrepareAbort from Empty and the Complete states is version 2's
    /// abort-when-unsure).
    pub fn valid_previous_states(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        }
    }

    pub fn can_transition_to(self, next: TxnState) -> bool {
        next.valid_previous_states().contains(&self)
    }

    /// Whether an id in this state may expire: no transaction in flight.
    pub fn expiration_allowed(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }

    pub fn is_prepare(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }

    pub fn is_complete(self) -> bool {
        matches!(self, TxnState::CompleteCommit | TxnState::CompleteAbort)
    }
}

/// What a transit is for (logging, and how a failed write is undone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransitKind {
    InitProducerId,
    AddPartitions,
    EndTxn,
    /// The coordinator's abort of an ongoing transaction: fencing by
    /// InitProducerId, or a timeout.
    Fence,
    /// CompleteCommit or CompleteAbort after the markers.
    Complete,
    /// The tombstone of an expired transactional id.
    Expire,
}

/// The metadata a transition leads to: what is persisted, then applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transit {
    pub kind: TransitKind,
    pub state: TxnState,
    pub producer_id: i64,
    pub prev_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub partitions: BTreeSet<TopicPartition>,
    pub start_ms: i64,
    pub last_update_ms: i64,
    pub client_tv: TransactionVersion,
}

impl Transit {
    /// Whether this is written as a tombstone rather than a value.
    pub fn is_tombstone(&self) -> bool {
        self.state == TxnState::Dead
    }

    /// The record value to persist; `None` for a tombstone. Encode it at
    /// the cluster's [`TransactionVersion::log_value_version`].
    pub fn log_value(&self) -> Option<TxnLogValue> {
        if self.is_tombstone() {
            return None;
        }
        Some(TxnLogValue {
            producer_id: self.producer_id,
            previous_producer_id: self.prev_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            next_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: self.timeout_ms,
            status: self.state.id(),
            partitions: (self.state != TxnState::Empty)
                .then(|| TxnLogValue::group_partitions(&self.partitions)),
            last_update_ms: self.last_update_ms,
            start_ms: self.start_ms,
            client_transaction_version: self.client_tv.feature_level(),
            unknown_tags: Vec::new(),
        })
    }

    pub fn producer(&self) -> ProducerIdAndEpoch {
        ProducerIdAndEpoch::new(self.producer_id, self.producer_epoch)
    }

    /// The producer id and epoch the client goes on with once this end is
    /// complete: the next producer id at epoch 0 when the end rotates it.
    pub fn client_producer(&self) -> ProducerIdAndEpoch {
        if self.next_producer_id != NO_PRODUCER_ID {
            ProducerIdAndEpoch::new(self.next_producer_id, 0)
        } else {
            self.producer()
        }
    }
}

/// What a request leads to, when it is not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision<R> {
    /// Nothing to write: answer with this now (e.g. a retried request).
    Done(R),
    /// Write the transit first.
    Persist(Plan<R>),
}

/// A transition to persist, the answer once it is durable, and what comes
/// after. If the write fails, the answer is the write's error (see
/// [`append_error`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan<R> {
    pub transit: Transit,
    pub reply: R,
    pub then: AfterPersist,
}

/// What the runtime does once a plan's transit is durable and applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterPersist {
    /// Nothing more.
    Reply,
    /// Write these markers to the transaction's partitions, then complete
    /// (see the module doc).
    SendMarkers(TxnResult),
}

/// The markers to send for a transaction in PrepareCommit or PrepareAbort:
/// what WriteTxnMarkers carries, but for the coordinator epoch, which the
/// runtime adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerPlan {
    pub result: TxnResult,
    pub producer_id: i64,
    /// With transaction version 2, the epoch EndTxn bumped to.
    pub producer_epoch: i16,
    /// The transaction's version (WriteTxnMarkers v2 carries it, KIP-1228:
    /// partitions then require a strictly higher epoch than the data's).
    pub transaction_version: TransactionVersion,
    pub partitions: Vec<TopicPartition>,
}

/// A transition the metadata refuses: a bug in the caller, never input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("transactional id {transactional_id:?}: {from:?} to {to:?} refused: {reason}")]
pub struct IllegalTransition {
    pub transactional_id: String,
    pub from: TxnState,
    pub to: TxnState,
    pub reason: &'static str,
}

impl IllegalTransition {
    /// What a client is told.
    pub fn code(&self) -> ResponseError {
        ResponseError::UnknownServerError
    }
}

/// A `__transaction_state` value that cannot become metadata.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("unknown transaction status {0}")]
    UnknownStatus(i8),
    #[error("state {0:?} is never written to the log")]
    UnexpectedState(TxnState),
    #[error("unknown client transaction version {0}")]
    UnknownTransactionVersion(i16),
}

/// Hands out new producer ids (Moldau's `producer::ids`, behind whatever
/// persistence the runtime needs). Closures returning a `Result` are one.
pub trait ProducerIdSource {
    fn next_producer_id(&mut self) -> Result<i64, ResponseError>;
}

impl<F: FnMut() -> Result<i64, ResponseError>> ProducerIdSource for F {
    fn next_producer_id(&mut self) -> Result<i64, ResponseError> {
        self()
    }
}

/// One transactional id's coordinator state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionMetadata {
    transactional_id: String,
    producer_id: i64,
    prev_producer_id: i64,
    next_producer_id: i64,
    producer_epoch: i16,
    last_producer_epoch: i16,
    timeout_ms: i32,
    state: TxnState,
    partitions: BTreeSet<TopicPartition>,
    start_ms: i64,
    last_update_ms: i64,
    client_tv: TransactionVersion,
    pending: Option<TxnState>,
    failed_epoch_fence: bool,
}

impl TransactionMetadata {
    /// A transactional id seen for the first time, with a freshly
    /// allocated producer id and no epoch yet. The runtime caches it before
    /// writing the InitProducerId that gives it epoch 0, so a retry after a
    /// failed write reuses the producer id.
    pub fn new(
        transactional_id: impl Into<String>,
        producer_id: i64,
        timeout_ms: i32,
        now_ms: i64,
    ) -> Self {
        Self {
            transactional_id: transactional_id.into(),
            producer_id,
            prev_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
            client_tv: TransactionVersion::V0,
            pending: None,
            failed_epoch_fence: false,
        }
    }

    /// The metadata a log value describes (the last epoch is not in the
    /// log: it starts unknown, as in Kafka). Dead and PrepareEpochFence are
    /// never written; a value claiming them is refused.
    pub fn from_log(
        transactional_id: impl Into<String>,
        value: &TxnLogValue,
    ) -> Result<Self, LoadError> {
        let state =
            TxnState::from_id(value.status).ok_or(LoadError::UnknownStatus(value.status))?;
        if matches!(state, TxnState::Dead | TxnState::PrepareEpochFence) {
            return Err(LoadError::UnexpectedState(state));
        }
        let client_tv = TransactionVersion::from_feature_level(value.client_transaction_version)
            .ok_or(LoadError::UnknownTransactionVersion(
                value.client_transaction_version,
            ))?;
        let partitions = if state == TxnState::Empty {
            BTreeSet::new()
        } else {
            value.topic_partitions().into_iter().collect()
        };
        Ok(Self {
            transactional_id: transactional_id.into(),
            producer_id: value.producer_id,
            prev_producer_id: value.previous_producer_id,
            next_producer_id: value.next_producer_id,
            producer_epoch: value.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: value.timeout_ms,
            state,
            partitions,
            start_ms: value.start_ms,
            last_update_ms: value.last_update_ms,
            client_tv,
            pending: None,
            failed_epoch_fence: false,
        })
    }

    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }
    pub fn prev_producer_id(&self) -> i64 {
        self.prev_producer_id
    }
    pub fn next_producer_id(&self) -> i64 {
        self.next_producer_id
    }
    pub fn producer_epoch(&self) -> i16 {
        self.producer_epoch
    }
    pub fn last_producer_epoch(&self) -> i16 {
        self.last_producer_epoch
    }
    pub fn timeout_ms(&self) -> i32 {
        self.timeout_ms
    }
    pub fn state(&self) -> TxnState {
        self.state
    }
    pub fn partitions(&self) -> &BTreeSet<TopicPartition> {
        &self.partitions
    }
    pub fn start_ms(&self) -> i64 {
        self.start_ms
    }
    pub fn last_update_ms(&self) -> i64 {
        self.last_update_ms
    }
    pub fn client_tv(&self) -> TransactionVersion {
        self.client_tv
    }
    /// The transition being persisted, if any.
    pub fn pending(&self) -> Option<TxnState> {
        self.pending
    }
    /// Whether a fencing abort's write failed after its bump took effect
    /// (older rules; see the module doc).
    pub fn has_failed_epoch_fence(&self) -> bool {
        self.failed_epoch_fence
    }
    pub fn producer(&self) -> ProducerIdAndEpoch {
        ProducerIdAndEpoch::new(self.producer_id, self.producer_epoch)
    }
    pub fn is_epoch_exhausted(&self) -> bool {
        is_epoch_exhausted(self.producer_epoch)
    }

    /// Whether `producer_id` is this id's producer. A fresh id whose first
    /// InitProducerId was never written has no producer yet (its epoch is
    /// -1), whatever a request claims; Kafka would fail such a request
    /// with an internal error, here it is INVALID_PRODUCER_ID_MAPPING.
    fn has_producer(&self, producer_id: i64) -> bool {
        self.producer_epoch != NO_PRODUCER_EPOCH && self.producer_id == producer_id
    }

    fn refuse(&self, to: TxnState, reason: &'static str) -> IllegalTransition {
        IllegalTransition {
            transactional_id: self.transactional_id.clone(),
            from: self.state,
            to,
            reason,
        }
    }

    /// Marks `t` pending before it is written. Under the older rules a
    /// fencing abort's bump takes effect here already.
    pub fn begin(&mut self, t: &Transit) -> Result<(), IllegalTransition> {
        if self.pending.is_some() {
            return Err(self.refuse(t.state, "another transition is pending"));
        }
        if t.producer_id < 0 {
            return Err(self.refuse(t.state, "negative producer id"));
        }
        if t.state != TxnState::Dead && t.producer_epoch < 0 {
            return Err(self.refuse(t.state, "negative producer epoch"));
        }
        if !self.state.can_transition_to(t.state) {
            return Err(self.refuse(t.state, "not a valid previous state"));
        }
        if t.kind == TransitKind::Fence && !t.client_tv.supports_epoch_bump() {
            self.producer_epoch = t.producer_epoch;
            self.last_producer_epoch = NO_PRODUCER_EPOCH;
        }
        self.pending = Some(t.state);
        Ok(())
    }

    /// The write of `t` failed: nothing changes but the pending mark,
    /// except that a fence under the older rules stays in effect and is
    /// not bumped again.
    pub fn abandon(&mut self, t: &Transit) {
        self.pending = None;
        if t.kind == TransitKind::Fence && !t.client_tv.supports_epoch_bump() {
            self.failed_epoch_fence = true;
        }
    }

    /// `t` is durable: make it the metadata, after Kafka's sanity checks
    /// (the transit must be the pending one and consistent with the current
    /// metadata). Dead is never applied: the runtime drops the metadata
    /// once the tombstone is durable (see [`Self::tombstone_written`]).
    pub fn apply(&mut self, t: &Transit) -> Result<(), IllegalTransition> {
        if self.pending != Some(t.state) {
            return Err(self.refuse(t.state, "not the pending transition"));
        }
        let ok = match t.state {
            TxnState::Empty => {
                (t.producer_epoch == self.producer_epoch || self.valid_epoch_bump(t))
                    && t.partitions.is_empty()
                    && t.start_ms == -1
            }
            TxnState::Ongoing => {
                self.valid_producer_epoch(t)
                    && t.partitions.is_superset(&self.partitions)
                    && t.timeout_ms == self.timeout_ms
            }
            TxnState::PrepareCommit | TxnState::PrepareAbort => {
                let empty_abort = t.state == TxnState::PrepareAbort
                    && t.client_tv.supports_epoch_bump()
                    && self.state.expiration_allowed();
                self.valid_producer_epoch(t)
                    && t.partitions == self.partitions
                    && t.timeout_ms == self.timeout_ms
                    && (t.start_ms == self.start_ms || empty_abort)
            }
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                self.valid_producer_epoch(t) && t.timeout_ms == self.timeout_ms && t.start_ms != -1
            }
            TxnState::Dead | TxnState::PrepareEpochFence => false,
        };
        if !ok {
            return Err(self.refuse(t.state, "transit inconsistent with the metadata"));
        }
        self.producer_id = t.producer_id;
        self.prev_producer_id = t.prev_producer_id;
        self.next_producer_id = t.next_producer_id;
        self.producer_epoch = t.producer_epoch;
        self.last_producer_epoch = t.last_producer_epoch;
        self.timeout_ms = t.timeout_ms;
        self.partitions = t.partitions.clone();
        self.start_ms = t.start_ms;
        self.last_update_ms = t.last_update_ms;
        self.client_tv = t.client_tv;
        self.state = t.state;
        self.pending = None;
        Ok(())
    }

    /// Whether the runtime may drop this metadata now that `t`'s tombstone
    /// is durable: the expiry is still the pending transition and no bump
    /// happened meanwhile.
    pub fn tombstone_written(&self, t: &Transit) -> bool {
        t.is_tombstone()
            && self.pending == Some(TxnState::Dead)
            && self.producer_epoch == t.producer_epoch
    }

    /// Kafka's epoch check on completing a transition. With version 2, a
    /// prepare carries the bumped epoch (its last epoch is the current
    /// one), and a rotating completion carries epoch 0 of a new id.
    fn valid_producer_epoch(&self, t: &Transit) -> bool {
        let bumps = t.client_tv.supports_epoch_bump();
        if bumps && t.state.is_complete() && t.producer_epoch == 0 {
            t.last_producer_epoch == self.last_producer_epoch
                && t.prev_producer_id == self.producer_id
        } else if bumps && t.state.is_prepare() {
            t.last_producer_epoch == self.producer_epoch && t.producer_id == self.producer_id
        } else {
            t.producer_epoch == self.producer_epoch && t.producer_id == self.producer_id
        }
    }

    fn valid_epoch_bump(&self, t: &Transit) -> bool {
        i32::from(t.producer_epoch) == i32::from(self.producer_epoch) + 1
            || (t.producer_epoch == 0 && t.producer_id != self.producer_id)
    }

    /// The current metadata as a transit to `state`, stamped `now_ms`,
    /// recording the current producer id as the previous one.
    fn transit(&self, kind: TransitKind, state: TxnState, now_ms: i64) -> Transit {
        Transit {
            kind,
            state,
            producer_id: self.producer_id,
            prev_producer_id: self.producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            last_producer_epoch: self.last_producer_epoch,
            timeout_ms: self.timeout_ms,
            partitions: self.partitions.clone(),
            start_ms: self.start_ms,
            last_update_ms: now_ms,
            client_tv: self.client_tv,
        }
    }

    /// The result the markers of a prepared transaction carry.
    pub fn prepared_result(&self) -> Option<TxnResult> {
        match self.state {
            TxnState::PrepareCommit => Some(TxnResult::Commit),
            TxnState::PrepareAbort => Some(TxnResult::Abort),
            _ => None,
        }
    }

    /// The markers still to write, in PrepareCommit or PrepareAbort.
    pub fn marker_plan(&self) -> Option<MarkerPlan> {
        Some(MarkerPlan {
            result: self.prepared_result()?,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            transaction_version: self.client_tv,
            partitions: self.partitions.iter().cloned().collect(),
        })
    }

    /// `tp`'s marker is written (or its partition is gone): it leaves the
    /// set still to mark. True when none is left, so the completion can be
    /// written. Only meaningful while prepared.
    pub fn marker_written(&mut self, tp: &TopicPartition) -> bool {
        if self.state.is_prepare() {
            self.partitions.remove(tp);
        }
        self.partitions.is_empty()
    }

    /// The CompleteCommit or CompleteAbort that ends a prepared
    /// transaction, marked pending while the markers are written. With
    /// version 2 and a next producer id, the completion switches to it at
    /// epoch 0 (the last epoch stays the one the client last saw).
    pub fn begin_completion(&mut self, now_ms: i64) -> Result<Transit, IllegalTransition> {
        let state = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return Err(self.refuse(TxnState::CompleteAbort, "not prepared")),
        };
        let mut t = self.transit(TransitKind::Complete, state, now_ms);
        if self.client_tv.supports_epoch_bump() && self.next_producer_id != NO_PRODUCER_ID {
            t.producer_id = self.next_producer_id;
            t.producer_epoch = 0;
        }
        t.next_producer_id = NO_PRODUCER_ID;
        t.partitions.clear();
        self.begin(&t)?;
        // The prepare is durable: a failed fence before it no longer matters.
        self.failed_epoch_fence = false;
        Ok(t)
    }
}

/// Whether a transactional id is acceptable at all: not empty (Kafka's
/// INVALID_REQUEST), and short enough for the record key's `int16` length.
pub fn check_transactional_id(transactional_id: &str) -> Result<(), ResponseError> {
    if transactional_id.is_empty() || transactional_id.len() > i16::MAX as usize {
        return Err(ResponseError::InvalidRequest);
    }
    Ok(())
}

/// The checks of a transactional InitProducerId before its metadata is
/// looked up, in Kafka's order; the expected producer (KIP-360) if given.
/// A producer id without an epoch, or the reverse, is malformed.
pub fn check_init_producer_id(
    transactional_id: &str,
    timeout_ms: i32,
    max_timeout_ms: i32,
    producer: ProducerIdAndEpoch,
) -> Result<Option<ProducerIdAndEpoch>, ResponseError> {
    let expected = match (producer.producer_id, producer.epoch) {
        (NO_PRODUCER_ID, NO_PRODUCER_EPOCH) => None,
        (NO_PRODUCER_ID, _) | (_, NO_PRODUCER_EPOCH) => return Err(ResponseError::InvalidRequest),
        _ => Some(producer),
    };
    check_transactional_id(transactional_id)?;
    if timeout_ms <= 0 || timeout_ms > max_timeout_ms {
        return Err(ResponseError::InvalidTransactionTimeout);
    }
    Ok(expected)
}

/// A transactional InitProducerId.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitProducerId {
    pub timeout_ms: i32,
    /// KIP-360: the producer id and epoch the client had.
    pub expected: Option<ProducerIdAndEpoch>,
}

/// What InitProducerId answers once its transit is durable: the producer
/// id and epoch, or (when it had to fence an ongoing transaction first)
/// `CONCURRENT_TRANSACTIONS`, so that the client retries.
pub type InitReply = Result<ProducerIdAndEpoch, ResponseError>;

/// InitProducerId for existing metadata (new ids: [`TransactionMetadata::new`]
/// first). Bumps the epoch (or rotates the producer id when it is
/// exhausted) from Empty or a completed transaction; fences an ongoing
/// transaction by aborting it, answering `CONCURRENT_TRANSACTIONS`;
/// `cluster_tv` decides how that abort bumps.
pub fn init_producer_id(
    meta: &TransactionMetadata,
    req: &InitProducerId,
    cluster_tv: TransactionVersion,
    now_ms: i64,
    ids: &mut impl ProducerIdSource,
) -> Result<Decision<InitReply>, ResponseError> {
    if meta.pending.is_some() {
        return Err(ResponseError::ConcurrentTransactions);
    }
    if let Some(e) = req.expected {
        // A fresh id (no epoch yet: its state was lost, any expected
        // producer may recover with it), the current producer id (its
        // epoch is checked below), or the previous one retrying a rotation.
        let known = meta.producer_epoch == NO_PRODUCER_EPOCH
            || e.producer_id == meta.producer_id
            || (e.producer_id == meta.prev_producer_id && is_epoch_exhausted(e.epoch));
        if !known {
            return Err(ResponseError::ProducerFenced);
        }
    }
    match meta.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => {
            Err(ResponseError::ConcurrentTransactions)
        }
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let rotate = meta.is_epoch_exhausted()
                && req.expected.is_none_or(|e| e.epoch == meta.producer_epoch);
            let transit = if rotate {
                let mut t = meta.transit(TransitKind::InitProducerId, TxnState::Empty, now_ms);
                t.producer_id = ids.next_producer_id()?;
                t.producer_epoch = 0;
                t.last_producer_epoch = if req.expected.is_some() {
                    meta.producer_epoch
                } else {
                    NO_PRODUCER_EPOCH
                };
                reset_for_init(t, req.timeout_ms)
            } else {
                bump_for_init(meta, req, now_ms)?
            };
            Ok(Decision::Persist(Plan {
                reply: Ok(transit.producer()),
                transit,
                then: AfterPersist::Reply,
            }))
        }
        TxnState::Ongoing => Ok(Decision::Persist(Plan {
            transit: fence(meta, cluster_tv, now_ms, ids)?,
            reply: Err(ResponseError::ConcurrentTransactions),
            then: AfterPersist::SendMarkers(TxnResult::Abort),
        })),
        TxnState::Dead | TxnState::PrepareEpochFence => Err(ResponseError::UnknownServerError),
    }
}

/// Kafka's epoch increment for InitProducerId (KIP-360 cases included).
fn bump_for_init(
    meta: &TransactionMetadata,
    req: &InitProducerId,
    now_ms: i64,
) -> Result<Transit, ResponseError> {
    let current = meta.producer_epoch;
    let (epoch, last) = match req.expected.map(|e| e.epoch) {
        // Kafka refuses to bump an exhausted epoch (its rotation case was
        // handled before); only a stale KIP-360 request reaches here.
        _ if meta.is_epoch_exhausted() => return Err(ResponseError::ProducerFenced),
        // A new producer instance: bump, forget the last epoch (-1 becomes 0).
        None => (current + 1, NO_PRODUCER_EPOCH),
        // The producer recovering from an error, or a lost id: bump.
        Some(x) if current == NO_PRODUCER_EPOCH || x == current => (current + 1, current),
        // A retry of that bump whose answer was lost: answer it again.
        Some(x) if x == meta.last_producer_epoch => (current, meta.last_producer_epoch),
        Some(_) => return Err(ResponseError::ProducerFenced),
    };
    let mut t = meta.transit(TransitKind::InitProducerId, TxnState::Empty, now_ms);
    t.producer_epoch = epoch;
    t.last_producer_epoch = last;
    Ok(reset_for_init(t, req.timeout_ms))
}

fn reset_for_init(mut t: Transit, timeout_ms: i32) -> Transit {
    t.timeout_ms = timeout_ms;
    t.partitions.clear();
    t.start_ms = -1;
    t
}

/// The coordinator's abort of an ongoing transaction (fencing or timeout).
/// Version 2: the abort's own bump (none past `i16::MAX`), a next producer
/// id when the epoch is exhausted. Older: one bump, unless an earlier
/// fence's write failed after bumping, recorded as version 0 like Kafka's.
fn fence(
    meta: &TransactionMetadata,
    cluster_tv: TransactionVersion,
    now_ms: i64,
    ids: &mut impl ProducerIdSource,
) -> Result<Transit, ResponseError> {
    let mut t = meta.transit(TransitKind::Fence, TxnState::PrepareAbort, now_ms);
    let current = meta.producer_epoch;
    if cluster_tv.supports_epoch_bump() {
        t.next_producer_id = if meta.is_epoch_exhausted() {
            ids.next_producer_id()?
        } else {
            NO_PRODUCER_ID
        };
        t.producer_epoch = current.saturating_add(1);
        t.last_producer_epoch = current;
        t.client_tv = TransactionVersion::V2;
    } else {
        t.producer_epoch = if meta.failed_epoch_fence {
            current
        } else {
            current.saturating_add(1)
        };
        t.last_producer_epoch = NO_PRODUCER_EPOCH;
        t.next_producer_id = NO_PRODUCER_ID;
        t.client_tv = TransactionVersion::V0;
    }
    Ok(t)
}

/// AddPartitionsToTxn (and, through [`add_offsets`], AddOffsetsToTxn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddPartitions {
    pub producer: ProducerIdAndEpoch,
    pub partitions: BTreeSet<TopicPartition>,
    /// The client's transaction version (version 2 when the partition
    /// leader adds on the producer's behalf, KIP-890).
    pub client_tv: TransactionVersion,
}

/// Adds partitions to the transaction, starting it if need be. The
/// pending check comes first (KAFKA-18660): right after a version 2 end
/// the client already holds the bumped epoch while the completion is
/// still being written, and must be told to retry, not that it is fenced.
pub fn add_partitions(
    meta: Option<&TransactionMetadata>,
    req: &AddPartitions,
    now_ms: i64,
) -> Result<Decision<()>, ResponseError> {
    let meta = meta.ok_or(ResponseError::InvalidProducerIdMapping)?;
    if meta.pending.is_some() {
        return Err(ResponseError::ConcurrentTransactions);
    }
    if !meta.has_producer(req.producer.producer_id) {
        return Err(ResponseError::InvalidProducerIdMapping);
    }
    if meta.producer_epoch != req.producer.epoch {
        return Err(ResponseError::ProducerFenced);
    }
    match meta.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => {
            Err(ResponseError::ConcurrentTransactions)
        }
        TxnState::Ongoing if req.partitions.is_subset(&meta.partitions) => Ok(Decision::Done(())),
        TxnState::Dead | TxnState::PrepareEpochFence => Err(ResponseError::UnknownServerError),
        TxnState::Empty
        | TxnState::Ongoing
        | TxnState::CompleteCommit
        | TxnState::CompleteAbort => {
            let mut t = meta.transit(TransitKind::AddPartitions, TxnState::Ongoing, now_ms);
            if meta.state != TxnState::Ongoing {
                t.start_ms = now_ms;
            }
            t.partitions.extend(req.partitions.iter().cloned());
            t.client_tv = req.client_tv;
            Ok(Decision::Persist(Plan {
                transit: t,
                reply: (),
                then: AfterPersist::Reply,
            }))
        }
    }
}

/// AddOffsetsToTxn: adds the group's `__consumer_offsets` partition
/// (`offsets_partition`, from the group coordinator's mapping).
pub fn add_offsets(
    meta: Option<&TransactionMetadata>,
    producer: ProducerIdAndEpoch,
    offsets_partition: i32,
    client_tv: TransactionVersion,
    now_ms: i64,
) -> Result<Decision<()>, ResponseError> {
    let req = AddPartitions {
        producer,
        partitions: BTreeSet::from([TopicPartition::new(
            CONSUMER_OFFSETS_TOPIC,
            offsets_partition,
        )]),
        client_tv,
    };
    add_partitions(meta, &req, now_ms)
}

/// AddPartitionsToTxn v4+ with verify-only set (a partition leader asking
/// before it accepts a transactional write): per partition, `None` if it is
/// in the transaction, else `TRANSACTION_ABORTABLE`. No pending check, as
/// in Kafka: the append itself is validated again.
pub fn verify_partitions(
    meta: Option<&TransactionMetadata>,
    producer: ProducerIdAndEpoch,
    partitions: &BTreeSet<TopicPartition>,
) -> Result<Vec<(TopicPartition, Option<ResponseError>)>, ResponseError> {
    let meta = meta.ok_or(ResponseError::InvalidProducerIdMapping)?;
    if !meta.has_producer(producer.producer_id) {
        return Err(ResponseError::InvalidProducerIdMapping);
    }
    if meta.producer_epoch != producer.epoch {
        return Err(ResponseError::ProducerFenced);
    }
    if meta.state.is_prepare() {
        return Err(ResponseError::ConcurrentTransactions);
    }
    Ok(partitions
        .iter()
        .map(|tp| {
            let err =
                (!meta.partitions.contains(tp)).then_some(ResponseError::TransactionAbortable);
            (tp.clone(), err)
        })
        .collect())
}

/// EndTxn from a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxn {
    pub producer: ProducerIdAndEpoch,
    pub result: TxnResult,
    /// From the request version: [`TransactionVersion::of_end_txn_request`].
    pub client_tv: TransactionVersion,
}

/// Commits or aborts. The reply is the producer id and epoch EndTxn v5+
/// returns (`-1`/`-1` under the older rules); a plan's reply goes out once
/// the prepare is durable, before the markers.
pub fn end_txn(
    meta: Option<&TransactionMetadata>,
    req: &EndTxn,
    now_ms: i64,
    ids: &mut impl ProducerIdSource,
) -> Result<Decision<ProducerIdAndEpoch>, ResponseError> {
    let meta = meta.ok_or(ResponseError::InvalidProducerIdMapping)?;
    if req.client_tv.supports_epoch_bump() {
        end_txn_bumping(meta, req, now_ms, ids)
    } else {
        end_txn_classic(meta, req, now_ms)
    }
}

fn invalid_state() -> ResponseError {
    ResponseError::InvalidTxnState
}

/// EndTxn under the older rules: the epoch must be the current one
/// (strictly, as it comes from a client) and is kept; a retry finds the
/// transaction complete with the same result and succeeds.
fn end_txn_classic(
    meta: &TransactionMetadata,
    req: &EndTxn,
    now_ms: i64,
) -> Result<Decision<ProducerIdAndEpoch>, ResponseError> {
    if !meta.has_producer(req.producer.producer_id) {
        return Err(ResponseError::InvalidProducerIdMapping);
    }
    if meta.producer_epoch != req.producer.epoch {
        return Err(ResponseError::ProducerFenced);
    }
    if meta.pending.is_some() {
        return Err(ResponseError::ConcurrentTransactions);
    }
    let done = Ok(Decision::Done(ProducerIdAndEpoch::NONE));
    match (meta.state, req.result) {
        (TxnState::Ongoing, result) => {
            let t = prepare_end(meta, result, false, NO_PRODUCER_ID, false, now_ms)?;
            Ok(Decision::Persist(Plan {
                transit: t,
                reply: ProducerIdAndEpoch::NONE,
                then: AfterPersist::SendMarkers(result),
            }))
        }
        (TxnState::CompleteCommit, TxnResult::Commit) => done,
        (TxnState::CompleteAbort, TxnResult::Abort) => done,
        (TxnState::PrepareCommit, TxnResult::Commit) => Err(ResponseError::ConcurrentTransactions),
        (TxnState::PrepareAbort, TxnResult::Abort) => Err(ResponseError::ConcurrentTransactions),
        (TxnState::Dead | TxnState::PrepareEpochFence, _) => Err(ResponseError::UnknownServerError),
        _ => Err(invalid_state()),
    }
}

/// EndTxn under transaction version 2: the end bumps the epoch.
///
/// | state \ request | abort, retry | abort, current | commit, retry | commit, current |
/// | --- | --- | --- | --- | --- |
/// | Empty | PRODUCER_FENCED | bump | PRODUCER_FENCED | INVALID_TXN_STATE |
/// | CompleteAbort | ok | bump | INVALID_TXN_STATE | INVALID_TXN_STATE |
/// | CompleteCommit | INVALID_TXN_STATE | bump | ok | INVALID_TXN_STATE |
///
/// "Retry" is the epoch one below the stored one (or the previous producer
/// id at `i16::MAX - 1` after a rotation); "current" is the stored epoch.
/// The pending check comes before the epoch check (KAFKA-18464): a client
/// aborting right after its commit must wait, not be fenced.
fn end_txn_bumping(
    meta: &TransactionMetadata,
    req: &EndTxn,
    now_ms: i64,
    ids: &mut impl ProducerIdSource,
) -> Result<Decision<ProducerIdAndEpoch>, ResponseError> {
    let p = req.producer;
    let retry_on_overflow = meta.prev_producer_id == p.producer_id
        && p.epoch == i16::MAX - 1
        && meta.producer_epoch == 0;
    let retry_on_bump = i32::from(meta.producer_epoch) == i32::from(p.epoch) + 1;
    if !meta.has_producer(p.producer_id) && !retry_on_overflow {
        return Err(ResponseError::InvalidProducerIdMapping);
    }
    if meta.pending.is_some() {
        return Err(ResponseError::ConcurrentTransactions);
    }
    let valid_epoch = match meta.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_bump,
        TxnState::CompleteCommit | TxnState::CompleteAbort => {
            retry_on_bump || retry_on_overflow || p.epoch == meta.producer_epoch
        }
        _ => p.epoch == meta.producer_epoch,
    };
    if !valid_epoch {
        return Err(ResponseError::ProducerFenced);
    }
    let retry = retry_on_bump || retry_on_overflow;
    let mut end = |result: TxnResult,
                   no_partition_added: bool|
     -> Result<Decision<ProducerIdAndEpoch>, ResponseError> {
        let next = if meta.is_epoch_exhausted() {
            ids.next_producer_id()?
        } else {
            NO_PRODUCER_ID
        };
        let t = prepare_end(meta, result, true, next, no_partition_added, now_ms)?;
        Ok(Decision::Persist(Plan {
            reply: t.client_producer(),
            transit: t,
            then: AfterPersist::SendMarkers(result),
        }))
    };
    match (meta.state, req.result) {
        (TxnState::Ongoing, result) => end(result, false),
        (TxnState::CompleteCommit, TxnResult::Commit) if retry => {
            Ok(Decision::Done(meta.producer()))
        }
        (TxnState::CompleteCommit, TxnResult::Abort) if !retry => end(TxnResult::Abort, true),
        (TxnState::CompleteAbort, TxnResult::Abort) if retry => Ok(Decision::Done(meta.producer())),
        (TxnState::CompleteAbort, TxnResult::Abort) => end(TxnResult::Abort, true),
        (TxnState::Empty, TxnResult::Abort) => end(TxnResult::Abort, true),
        (TxnState::PrepareCommit, TxnResult::Commit) => Err(ResponseError::ConcurrentTransactions),
        (TxnState::PrepareAbort, TxnResult::Abort) => Err(ResponseError::ConcurrentTransactions),
        (TxnState::Dead | TxnState::PrepareEpochFence, _) => Err(ResponseError::UnknownServerError),
        _ => Err(invalid_state()),
    }
}

/// Kafka's prepare-to-end transit. Bumping (version 2): epoch + 1 (an
/// abort already at `i16::MAX` stays there, so a broken id can still be
/// cleaned up), the current epoch becomes the last one. Classic: epochs
/// kept, recorded as version 0 as Kafka does. An abort with no partition
/// ever added starts (and ends) now.
fn prepare_end(
    meta: &TransactionMetadata,
    result: TxnResult,
    bump: bool,
    next_producer_id: i64,
    no_partition_added: bool,
    now_ms: i64,
) -> Result<Transit, ResponseError> {
    let state = match result {
        TxnResult::Commit => TxnState::PrepareCommit,
        TxnResult::Abort => TxnState::PrepareAbort,
    };
    let mut t = meta.transit(TransitKind::EndTxn, state, now_ms);
    if bump {
        t.producer_epoch = match meta.producer_epoch.checked_add(1) {
            Some(e) => e,
            None if result == TxnResult::Abort => i16::MAX,
            None => return Err(ResponseError::UnknownServerError),
        };
        t.last_producer_epoch = meta.producer_epoch;
        t.client_tv = TransactionVersion::V2;
    } else {
        t.client_tv = TransactionVersion::V0;
    }
    t.next_producer_id = next_producer_id;
    if no_partition_added {
        t.start_ms = now_ms;
    }
    Ok(t)
}

/// Whether an ongoing transaction has outlived its timeout (and nothing is
/// pending): the coordinator then aborts it ([`abort_timed_out`]).
pub fn timed_out(meta: &TransactionMetadata, now_ms: i64) -> bool {
    meta.pending.is_none()
        && meta.state == TxnState::Ongoing
        && meta.start_ms.saturating_add(i64::from(meta.timeout_ms)) < now_ms
}

/// The abort of a timed-out transaction, as Kafka's coordinator does it: a
/// fence (the producer's epoch is bumped, so it learns it was fenced) and
/// the abort markers. `None` if the transaction has not timed out.
pub fn abort_timed_out(
    meta: &TransactionMetadata,
    cluster_tv: TransactionVersion,
    now_ms: i64,
    ids: &mut impl ProducerIdSource,
) -> Result<Option<Plan<()>>, ResponseError> {
    if !timed_out(meta, now_ms) {
        return Ok(None);
    }
    Ok(Some(Plan {
        transit: fence(meta, cluster_tv, now_ms, ids)?,
        reply: (),
        then: AfterPersist::SendMarkers(TxnResult::Abort),
    }))
}

/// Whether a transactional id has been idle for `expiration_ms`
/// (`transactional.id.expiration.ms`) with no transaction in flight.
pub fn should_expire(meta: &TransactionMetadata, now_ms: i64, expiration_ms: i64) -> bool {
    meta.pending.is_none()
        && meta.state.expiration_allowed()
        && meta.last_update_ms <= now_ms.saturating_sub(expiration_ms)
}

/// The Dead transit of an expiring id, written as a tombstone (see
/// [`TransactionMetadata::tombstone_written`]).
pub fn expire(meta: &TransactionMetadata, now_ms: i64, expiration_ms: i64) -> Option<Transit> {
    if !should_expire(meta, now_ms, expiration_ms) {
        return None;
    }
    let mut t = meta.transit(TransitKind::Expire, TxnState::Dead, meta.last_update_ms);
    t.partitions.clear();
    Some(t)
}

/// DescribeTransactions' view: an id not cached, or dead, is not found.
pub fn describe(meta: Option<&TransactionMetadata>) -> Result<&TransactionMetadata, ResponseError> {
    match meta {
        Some(m) if m.state != TxnState::Dead => Ok(m),
        _ => Err(ResponseError::TransactionalIdNotFound),
    }
}

/// Where the `__transaction_state` partition owning an id stands on this
/// broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionLoad {
    /// Not the leader: the client must find the coordinator again.
    NotOwned,
    /// Leader, still reading the log.
    Loading,
    Loaded {
        coordinator_epoch: i32,
    },
}

/// The coordinator epoch to act under, or the error a request gets.
pub fn coordinator_epoch(load: PartitionLoad) -> Result<i32, ResponseError> {
    match load {
        PartitionLoad::NotOwned => Err(ResponseError::NotCoordinator),
        PartitionLoad::Loading => Err(ResponseError::CoordinatorLoadInProgress),
        PartitionLoad::Loaded { coordinator_epoch } => Ok(coordinator_epoch),
    }
}

/// What a client is told when writing a transit failed with `error`, as
/// Kafka maps it: replication trouble is "coordinator not available"
/// (retry here), lost leadership "not coordinator" (look it up again).
pub fn append_error(error: ResponseError) -> ResponseError {
    use ResponseError::*;
    match error {
        UnknownTopicOrPartition
        | NotEnoughReplicas
        | NotEnoughReplicasAfterAppend
        | RequestTimedOut => CoordinatorNotAvailable,
        NotLeaderOrFollower | KafkaStorageError => NotCoordinator,
        MessageTooLarge | RecordListTooLarge => UnknownServerError,
        other => other,
    }
}

/// The transaction APIs whose old versions predate PRODUCER_FENCED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnApi {
    InitProducerId,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    EndTxn,
}

/// `error` as a client of `api` at `version` understands it: before
/// KIP-588 (InitProducerId v4, the others v2) PRODUCER_FENCED was
/// INVALID_PRODUCER_EPOCH.
pub fn error_for_version(api: TxnApi, version: i16, error: ResponseError) -> ResponseError {
    let first_fenced = match api {
        TxnApi::InitProducerId => 4,
        TxnApi::AddPartitionsToTxn | TxnApi::AddOffsetsToTxn | TxnApi::EndTxn => 2,
    };
    if error == ResponseError::ProducerFenced && version < first_fenced {
        ResponseError::InvalidProducerEpoch
    } else {
        error
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
