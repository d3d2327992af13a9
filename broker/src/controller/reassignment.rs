//! Partition reassignment decisions (Kafka's KIP-455), as pure functions
//! over a partition's state; the controller persists what they return.
//!
//! A reassignment to a target replica list runs in three steps, so the
//! partition never has fewer in-sync copies than before:
//! 1. **start**: the replicas become the target followed by the original
//!    replicas that leave (`removing`); the new ones (`adding`) start empty
//!    and fetch from the leader like any follower;
//! 2. the leader adds each new replica to the ISR once it has caught up
//!    (an ordinary ISR expansion through the controller);
//! 3. **complete**: once every target replica is in the ISR, the replicas
//!    become exactly the target, the leaving ones drop out of the ISR, and
//!    if the leader was leaving a target replica in the ISR takes over. The
//!    brokers that left delete their copy when their image no longer places
//!    the partition on them.
//!
//! **Cancel** restores the original replicas (those not being added) in
//! the order the running reassignment gave them, as Kafka does: the set is
//! restored, the preferred leader may differ (the target's order comes
//! first while a reassignment runs). A new target given while one runs
//! replaces it, starting from the original replicas. Leader elections here
//! are clean (from the ISR) only.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;

use super::leadership::{elect_clean, PartitionState};

/// Why a reassignment request is refused, with Kafka's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReassignError {
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("no reassignment is in progress for this partition")]
    NoReassignmentInProgress,
}

impl ReassignError {
    pub fn code(&self) -> ResponseError {
        match self {
            Self::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
            Self::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
            Self::NoReassignmentInProgress => ResponseError::NoReassignmentInProgress,
        }
    }
}

/// Whether a reassignment of `p` is running.
pub fn in_progress(p: &PartitionState) -> bool {
    !p.adding.is_empty() || !p.removing.is_empty()
}

/// The replicas `p` had before its running reassignment (its replicas
/// when none runs).
pub fn original_replicas(p: &PartitionState) -> Vec<i32> {
    p.replicas
        .iter()
        .copied()
        .filter(|r| !p.adding.contains(r))
        .collect()
}

/// The replicas `p` will have once its running reassignment completes.
pub fn target_replicas(p: &PartitionState) -> Vec<i32> {
    p.replicas
        .iter()
        .copied()
        .filter(|r| !p.removing.contains(r))
        .collect()
}

fn minus(a: &[i32], b: &[i32]) -> Vec<i32> {
    a.iter().copied().filter(|r| !b.contains(r)).collect()
}

fn validate_target(target: &[i32], registered: &BTreeSet<i32>) -> Result<(), ReassignError> {
    let invalid = |m: String| Err(ReassignError::InvalidReplicaAssignment(m));
    if target.is_empty() {
        return invalid("the target replica list is empty".into());
    }
    let distinct: BTreeSet<i32> = target.iter().copied().collect();
    if distinct.len() != target.len() {
        return invalid(format!("the target replicas {target:?} repeat a broker"));
    }
    if let Some(unknown) = target.iter().find(|r| !registered.contains(r)) {
        return invalid(format!(
            "the target replicas {target:?} include broker {unknown}, which is not registered"
        ));
    }
    Ok(())
}

/// `next`'s leader when the current one is no longer a replica: a clean
/// election among the ISR (or none), with a new leader epoch.
fn keep_a_replica_leading(next: &mut PartitionState, live: &BTreeSet<i32>) {
    if next.leader >= 0 && !next.replicas.contains(&next.leader) {
        next.leader = elect_clean(next, live);
        next.leader_epoch += 1;
    }
}

/// Starts moving `p` to `target` (or replaces its running reassignment).
/// `None` when nothing changes (the target is the current replica list
/// and nothing runs). `allow_rf_change: false` (AlterPartitionReassignments
/// v1, KIP-860) refuses a target of another length than the original.
pub fn start(
    p: &PartitionState,
    target: &[i32],
    registered: &BTreeSet<i32>,
    live: &BTreeSet<i32>,
    allow_rf_change: bool,
) -> Result<Option<PartitionState>, ReassignError> {
    validate_target(target, registered)?;
    let original = original_replicas(p);
    if !allow_rf_change && target.len() != original.len() {
        return Err(ReassignError::InvalidReplicationFactor(format!(
            "the target replicas {target:?} change the replication factor {} (not allowed by this request)",
            original.len()
        )));
    }
    if !in_progress(p) && p.replicas == target {
        return Ok(None);
    }
    let removing = minus(&original, target);
    let mut next = p.clone();
    next.adding = minus(target, &original);
    next.replicas = target
        .iter()
        .copied()
        .chain(removing.iter().copied())
        .collect();
    next.removing = removing;
    next.isr.retain(|r| next.replicas.contains(r));
    next.elr.retain(|r| next.replicas.contains(r));
    next.partition_epoch += 1;
    keep_a_replica_leading(&mut next, live);
    Ok(Some(next))
}

/// Completes `p`'s running reassignment when every target replica is in
/// the ISR (and, if the leader leaves, a target replica can lead);
/// `None` while it must wait, or when none runs.
pub fn complete(p: &PartitionState, live: &BTreeSet<i32>) -> Option<PartitionState> {
    if !in_progress(p) {
        return None;
    }
    let target = target_replicas(p);
    if !target.iter().all(|r| p.isr.contains(r)) {
        return None;
    }
    let mut next = p.clone();
    next.replicas = target;
    next.adding.clear();
    next.removing.clear();
    next.isr.retain(|r| next.replicas.contains(r));
    next.elr.retain(|r| next.replicas.contains(r));
    next.partition_epoch += 1;
    keep_a_replica_leading(&mut next, live);
    (next.leader >= 0 || p.leader < 0).then_some(next)
}

/// Cancels `p`'s running reassignment: its original replicas again, and
/// the ISR within them. Refused when no original replica is in sync (the
/// partition would lose its only complete copies).
pub fn cancel(p: &PartitionState, live: &BTreeSet<i32>) -> Result<PartitionState, ReassignError> {
    if !in_progress(p) {
        return Err(ReassignError::NoReassignmentInProgress);
    }
    let mut next = p.clone();
    next.replicas = original_replicas(p);
    next.adding.clear();
    next.removing.clear();
    next.isr.retain(|r| next.replicas.contains(r));
    next.elr.retain(|r| next.replicas.contains(r));
    if next.isr.is_empty() {
        return Err(ReassignError::InvalidReplicaAssignment(format!(
            "cannot cancel: none of the original replicas {:?} is in sync (ISR {:?})",
            next.replicas, p.isr
        )));
    }
    next.partition_epoch += 1;
    keep_a_replica_leading(&mut next, live);
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::controller::test_support::{p, set};

    #[test]
    fn a_move_adds_first_and_removes_once_the_new_replicas_are_in_sync() {
        let all = set(&[1, 2, 3, 4, 5]);
        let cur = p(&[1, 2, 3], &[1, 2, 3], 1);
        let started = start(&cur, &[4, 2, 5], &all, &all, true).unwrap().unwrap();
        assert_eq!(
            started.replicas,
            vec![4, 2, 5, 1, 3],
            "target first, then the leaving ones"
        );
        assert_eq!(
            (started.adding.clone(), started.removing.clone()),
            (vec![4, 5], vec![1, 3])
        );
        assert_eq!(
            started.isr,
            vec![1, 2, 3],
            "no copy is dropped while the new ones catch up"
        );
        assert_eq!(
            (
                started.leader,
                started.leader_epoch,
                started.partition_epoch
            ),
            (1, 5, 10)
        );
        assert_eq!(original_replicas(&started), vec![2, 1, 3]);
        assert_eq!(target_replicas(&started), vec![4, 2, 5]);
        assert!(
            complete(&started, &all).is_none(),
            "4 and 5 not in sync yet"
        );
        let half = PartitionState {
            isr: vec![1, 2, 3, 4],
            ..started.clone()
        };
        assert!(complete(&half, &all).is_none());
        let caught_up = PartitionState {
            isr: vec![1, 2, 3, 4, 5],
            ..started
        };
        let done = complete(&caught_up, &all).unwrap();
        assert_eq!(done.replicas, vec![4, 2, 5]);
        assert_eq!(done.isr, vec![2, 4, 5]);
        assert!(done.adding.is_empty() && done.removing.is_empty());
        assert_eq!(
            done.leader, 4,
            "the leaving leader hands over to the first target replica in sync"
        );
        assert_eq!((done.leader_epoch, done.partition_epoch), (6, 11));
    }

    #[test]
    fn a_leader_that_stays_keeps_its_epoch() {
        let all = set(&[1, 2, 3, 4]);
        let cur = p(&[1, 2, 3], &[1, 2, 3], 2);
        let started = start(&cur, &[1, 2, 4], &all, &all, false).unwrap().unwrap();
        let done = complete(
            &PartitionState {
                isr: vec![1, 2, 3, 4],
                ..started
            },
            &all,
        )
        .unwrap();
        assert_eq!((done.leader, done.leader_epoch), (2, 5));
        assert_eq!(done.replicas, vec![1, 2, 4]);
    }

    #[test]
    fn targets_are_validated_with_kafkas_errors() {
        let all = set(&[1, 2, 3]);
        let cur = p(&[1, 2], &[1, 2], 1);
        for bad in [vec![], vec![1, 1], vec![1, 9]] {
            assert!(matches!(
                start(&cur, &bad, &all, &all, true),
                Err(ReassignError::InvalidReplicaAssignment(_))
            ));
        }
        assert!(matches!(
            start(&cur, &[1, 2, 3], &all, &all, false),
            Err(ReassignError::InvalidReplicationFactor(_))
        ));
        assert!(
            start(&cur, &[1, 2, 3], &all, &all, true).unwrap().is_some(),
            "v0 may change it"
        );
        assert_eq!(
            start(&cur, &[1, 2], &all, &all, false),
            Ok(None),
            "already there"
        );
        assert_eq!(
            ReassignError::NoReassignmentInProgress.code(),
            ResponseError::NoReassignmentInProgress
        );
    }

    #[test]
    fn a_reordering_completes_at_once() {
        let all = set(&[1, 2, 3]);
        let cur = p(&[1, 2, 3], &[1, 2, 3], 1);
        let next = start(&cur, &[3, 1, 2], &all, &all, false).unwrap().unwrap();
        assert!(!in_progress(&next));
        assert_eq!((next.replicas.clone(), next.leader), (vec![3, 1, 2], 1));
        assert!(complete(&next, &all).is_none());
    }

    #[test]
    fn cancel_restores_the_original_replicas() {
        let all = set(&[1, 2, 3, 4]);
        let cur = p(&[1, 2, 3], &[1, 2, 3], 1);
        let started = start(&cur, &[4, 2, 3], &all, &all, false).unwrap().unwrap();
        // 4 joined the ISR but 1 has not been dropped yet
        let running = PartitionState {
            isr: vec![1, 2, 3, 4],
            ..started
        };
        let back = cancel(&running, &all).unwrap();
        assert_eq!(
            back.replicas,
            vec![2, 3, 1],
            "the original replicas, in the running order"
        );
        assert_eq!(back.isr, vec![1, 2, 3]);
        assert!(!in_progress(&back));
        assert_eq!(
            cancel(&back, &all),
            Err(ReassignError::NoReassignmentInProgress)
        );
        // a target replica that led meanwhile gives leadership back
        let led_by_new = PartitionState {
            leader: 4,
            ..running.clone()
        };
        let back = cancel(&led_by_new, &all).unwrap();
        assert_eq!((back.leader, back.leader_epoch), (2, 6));
        // with no original replica in sync a cancel would lose data
        let only_new = PartitionState {
            isr: vec![4],
            leader: 4,
            ..running
        };
        assert!(matches!(
            cancel(&only_new, &all),
            Err(ReassignError::InvalidReplicaAssignment(_))
        ));
    }

    #[test]
    fn a_new_target_replaces_a_running_one_from_the_original_replicas() {
        let all = set(&[1, 2, 3, 4, 5]);
        let cur = p(&[1, 2, 3], &[1, 2, 3], 1);
        let first = start(&cur, &[4, 2, 3], &all, &all, false).unwrap().unwrap();
        let second = start(&first, &[5, 2, 3], &all, &all, false)
            .unwrap()
            .unwrap();
        assert_eq!(second.replicas, vec![5, 2, 3, 1], "4 is no longer added");
        assert_eq!(
            (second.adding.clone(), second.removing.clone()),
            (vec![5], vec![1])
        );
        assert_eq!(original_replicas(&second), vec![2, 3, 1]);
        // back to the original list: nothing left to move
        let undone = start(&second, &[1, 2, 3], &all, &all, false)
            .unwrap()
            .unwrap();
        assert!(!in_progress(&undone));
        assert_eq!(undone.replicas, vec![1, 2, 3]);
    }

    #[test]
    fn a_leaving_leader_waits_for_a_live_target_replica() {
        let all = set(&[1, 2, 3, 4]);
        let cur = p(&[1, 2, 3], &[1, 2, 3], 1);
        let started = start(&cur, &[4], &all, &all, true).unwrap().unwrap();
        let caught_up = PartitionState {
            isr: vec![1, 2, 3, 4],
            ..started
        };
        assert!(
            complete(&caught_up, &set(&[1, 2, 3])).is_none(),
            "4 is in sync but not live"
        );
        let done = complete(&caught_up, &all).unwrap();
        assert_eq!(
            (done.replicas.clone(), done.isr.clone(), done.leader),
            (vec![4], vec![4], 4)
        );
    }
}
