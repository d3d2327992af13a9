//! What the transaction coordinator counts for `/metrics` (issue 37,
//! item 6), as values: how a transaction ended ([`TxnEnd`], from the
//! decision the runtime applied) and how many transactional ids stand in
//! each state ([`Census`], counted over a shard's metadata). Pure: the
//! runtime keeps the counters and takes the census under its locks.

use super::marker::TxnResult;
use super::state::{AfterPersist, TransactionMetadata, TxnState};

/// Who ended a transaction: the runtime path whose decision it applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndCause {
    /// The client's EndTxn (commit or abort).
    EndTxn,
    /// The coordinator's periodic check: the transaction outlived its
    /// `transaction.timeout.ms`.
    Timeout,
    /// InitProducerId of a new producer instance found it ongoing.
    Fence,
}

/// How a transaction ended, as counted: the result and its reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnEnd {
    Committed,
    AbortedByClient,
    AbortedOnTimeout,
    AbortedByFence,
}

impl TxnEnd {
    /// Every end, in [`index`](Self::index) order.
    pub const ALL: [TxnEnd; 4] = [
        TxnEnd::Committed,
        TxnEnd::AbortedByClient,
        TxnEnd::AbortedOnTimeout,
        TxnEnd::AbortedByFence,
    ];

    /// The end `cause` leads to with `result`; `None` for a commit the
    /// coordinator did not get from a client (it never decides one).
    pub fn of(cause: EndCause, result: TxnResult) -> Option<TxnEnd> {
        match (cause, result) {
            (EndCause::EndTxn, TxnResult::Commit) => Some(TxnEnd::Committed),
            (EndCause::EndTxn, TxnResult::Abort) => Some(TxnEnd::AbortedByClient),
            (EndCause::Timeout, TxnResult::Abort) => Some(TxnEnd::AbortedOnTimeout),
            (EndCause::Fence, TxnResult::Abort) => Some(TxnEnd::AbortedByFence),
            (EndCause::Timeout | EndCause::Fence, TxnResult::Commit) => None,
        }
    }

    /// The end a durable plan of `cause` made: a plan that sends markers
    /// ended its transaction (its PrepareCommit/PrepareAbort is written);
    /// any other (a retried EndTxn answered again, an InitProducerId of an
    /// idle id) ended nothing.
    pub fn after(cause: EndCause, then: AfterPersist) -> Option<TxnEnd> {
        match then {
            AfterPersist::SendMarkers(result) => Self::of(cause, result),
            AfterPersist::Reply => None,
        }
    }

    /// Its position in [`ALL`](Self::ALL) (a counter array's index).
    pub fn index(self) -> usize {
        match self {
            TxnEnd::Committed => 0,
            TxnEnd::AbortedByClient => 1,
            TxnEnd::AbortedOnTimeout => 2,
            TxnEnd::AbortedByFence => 3,
        }
    }

    /// The `result` label: `commit` or `abort`.
    pub fn result(self) -> &'static str {
        match self {
            TxnEnd::Committed => "commit",
            _ => "abort",
        }
    }

    /// The `reason` label: `client` (EndTxn), `timeout` or `fenced`.
    pub fn reason(self) -> &'static str {
        match self {
            TxnEnd::Committed | TxnEnd::AbortedByClient => "client",
            TxnEnd::AbortedOnTimeout => "timeout",
            TxnEnd::AbortedByFence => "fenced",
        }
    }
}

/// The states a transactional id is shown in (Dead and PrepareEpochFence
/// are never a state here, only pending or Kafka's).
pub const REPORTED_STATES: [TxnState; 6] = [
    TxnState::Empty,
    TxnState::Ongoing,
    TxnState::PrepareCommit,
    TxnState::PrepareAbort,
    TxnState::CompleteCommit,
    TxnState::CompleteAbort,
];

/// Transactional ids by state, and the partitions whose markers prepared
/// transactions still owe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    by_state: [u64; TxnState::ALL.len()],
    markers_pending: u64,
}

impl Census {
    /// Counts one id: in its current state (a pending transition counts
    /// once it is applied), and, when prepared, the partitions still to
    /// mark. Dead ids are left out, as ListTransactions leaves them.
    pub fn add(&mut self, meta: &TransactionMetadata) {
        let state = meta.state();
        if state == TxnState::Dead {
            return;
        }
        self.by_state[Self::slot(state)] += 1;
        if state.is_prepare() {
            self.markers_pending += meta.partitions().len() as u64;
        }
    }

    /// Adds another census (one shard's) to this one.
    pub fn merge(&mut self, other: &Census) {
        for (a, b) in self.by_state.iter_mut().zip(other.by_state) {
            *a += b;
        }
        self.markers_pending += other.markers_pending;
    }

    /// Ids in `state`.
    pub fn count(&self, state: TxnState) -> u64 {
        self.by_state[Self::slot(state)]
    }

    /// Partitions of PrepareCommit/PrepareAbort transactions whose marker
    /// is not written yet.
    pub fn markers_pending(&self) -> u64 {
        self.markers_pending
    }

    fn slot(state: TxnState) -> usize {
        usize::try_from(state.id()).unwrap_or(0) % TxnState::ALL.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::log_record::TxnLogValue;
    use crate::txn::vocab::TopicPartition;

    fn meta(id: &str, state: TxnState, partitions: &[i32]) -> TransactionMetadata {
        let tps: std::collections::BTreeSet<TopicPartition> = partitions
            .iter()
            .map(|p| TopicPartition::new("t", *p))
            .collect();
        let value = TxnLogValue {
            producer_id: 7,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 0,
            next_producer_epoch: -1,
            timeout_ms: 60_000,
            status: state.id(),
            partitions: Some(TxnLogValue::group_partitions(&tps)),
            last_update_ms: 1,
            start_ms: 1,
            client_transaction_version: 0,
            unknown_tags: Vec::new(),
        };
        TransactionMetadata::from_log(id, &value).expect("valid value")
    }

    #[test]
    fn ends_by_cause_and_result() {
        use TxnResult::{Abort, Commit};
        assert_eq!(
            TxnEnd::of(EndCause::EndTxn, Commit),
            Some(TxnEnd::Committed)
        );
        assert_eq!(
            TxnEnd::of(EndCause::EndTxn, Abort),
            Some(TxnEnd::AbortedByClient)
        );
        assert_eq!(
            TxnEnd::of(EndCause::Timeout, Abort),
            Some(TxnEnd::AbortedOnTimeout)
        );
        assert_eq!(
            TxnEnd::of(EndCause::Fence, Abort),
            Some(TxnEnd::AbortedByFence)
        );
        assert_eq!(TxnEnd::of(EndCause::Timeout, Commit), None);
        assert_eq!(TxnEnd::of(EndCause::Fence, Commit), None);
    }

    #[test]
    fn only_a_plan_sending_markers_ends_a_transaction() {
        assert_eq!(TxnEnd::after(EndCause::EndTxn, AfterPersist::Reply), None);
        assert_eq!(TxnEnd::after(EndCause::Fence, AfterPersist::Reply), None);
        assert_eq!(
            TxnEnd::after(EndCause::Fence, AfterPersist::SendMarkers(TxnResult::Abort)),
            Some(TxnEnd::AbortedByFence)
        );
        assert_eq!(
            TxnEnd::after(
                EndCause::EndTxn,
                AfterPersist::SendMarkers(TxnResult::Commit)
            ),
            Some(TxnEnd::Committed)
        );
    }

    #[test]
    fn labels_and_indexes_are_distinct() {
        let labels: std::collections::BTreeSet<_> = TxnEnd::ALL
            .iter()
            .map(|e| (e.result(), e.reason()))
            .collect();
        assert_eq!(labels.len(), 4);
        assert!(labels.contains(&("commit", "client")));
        assert!(labels.contains(&("abort", "client")));
        assert!(labels.contains(&("abort", "timeout")));
        assert!(labels.contains(&("abort", "fenced")));
        for (i, e) in TxnEnd::ALL.iter().enumerate() {
            assert_eq!(e.index(), i);
        }
    }

    #[test]
    fn census_counts_states_and_owed_markers() {
        let mut a = Census::default();
        a.add(&meta("a", TxnState::Ongoing, &[0, 1]));
        a.add(&meta("b", TxnState::Ongoing, &[0]));
        a.add(&meta("c", TxnState::PrepareCommit, &[0, 1, 2]));
        let mut b = Census::default();
        b.add(&meta("d", TxnState::PrepareAbort, &[4]));
        b.add(&meta("e", TxnState::Empty, &[]));
        b.add(&meta("f", TxnState::CompleteCommit, &[]));
        a.merge(&b);
        assert_eq!(a.count(TxnState::Ongoing), 2);
        assert_eq!(a.count(TxnState::PrepareCommit), 1);
        assert_eq!(a.count(TxnState::PrepareAbort), 1);
        assert_eq!(a.count(TxnState::Empty), 1);
        assert_eq!(a.count(TxnState::CompleteCommit), 1);
        assert_eq!(a.count(TxnState::CompleteAbort), 0);
        assert_eq!(
            a.markers_pending(),
            4,
            "only prepared transactions owe markers"
        );
        let total: u64 = REPORTED_STATES.iter().map(|s| a.count(*s)).sum();
        assert_eq!(total, 6);
    }

    #[test]
    fn a_written_marker_is_no_longer_owed() {
        let mut m = meta("a", TxnState::PrepareAbort, &[0, 1]);
        let mut before = Census::default();
        before.add(&m);
        assert_eq!(before.markers_pending(), 2);
        m.marker_written(&TopicPartition::new("t", 0));
        let mut after = Census::default();
        after.add(&m);
        assert_eq!(after.markers_pending(), 1);
        assert_eq!(after.count(TxnState::PrepareAbort), 1);
    }
}
