//! A member's way from its current assignment to its target (Kafka's
//! `CurrentAssignmentBuilder`): partitions the target takes away are
//! revoked first — the member keeps its epoch until it reports, in a
//! heartbeat, that it no longer owns them (at once if the heartbeat
//! that brings the new target already says so) — and a partition the target
//! gives it is handed over only once no other member holds it (assigned
//! or still being revoked). Pure: the caller says which partitions are
//! free.

use super::assignor::Assignment;
use uuid::Uuid;

/// Kafka's `MemberState` values (they are stored in the
/// current-assignment record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemberState {
    #[default]
    Stable,
    /// Waiting for the member to revoke `revoking`.
    UnrevokedPartitions,
    /// Waiting for other members to release partitions of its target.
    UnreleasedPartitions,
}

impl MemberState {
    pub fn code(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
        }
    }
    pub fn from_code(code: i8) -> MemberState {
        match code {
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Stable,
        }
    }
}

/// What the coordinator tracks of a member's assignment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CurrentAssignment {
    pub epoch: i32,
    /// The epoch before the last bump: a member whose response carrying
    /// the bump was lost may still heartbeat with it.
    pub previous_epoch: i32,
    pub state: MemberState,
    /// Partitions the member may use now.
    pub assigned: Assignment,
    /// Partitions it must give up before its epoch moves on.
    pub revoking: Assignment,
}

fn intersect(a: &Assignment, b: &Assignment) -> Assignment {
    a.iter()
        .filter_map(|(t, ps)| {
            let both: std::collections::BTreeSet<i32> = b
                .get(t)
                .map(|other| ps.intersection(other).copied().collect())
                .unwrap_or_default();
            (!both.is_empty()).then_some((*t, both))
        })
        .collect()
}

fn minus(a: &Assignment, b: &Assignment) -> Assignment {
    a.iter()
        .filter_map(|(t, ps)| {
            let rest: std::collections::BTreeSet<i32> = match b.get(t) {
                Some(other) => ps.difference(other).copied().collect(),
                None => ps.clone(),
            };
            (!rest.is_empty()).then_some((*t, rest))
        })
        .collect()
}

/// Whether `owned` (what the member reported) still holds any of `revoking`.
fn still_owns(owned: &Assignment, revoking: &Assignment) -> bool {
    !intersect(owned, revoking).is_empty()
}

/// Whether every partition of `a` is in `b`.
pub fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    minus(a, b).is_empty()
}

/// The member's next assignment state, given the group's target epoch and
/// the member's target, what it reported owning in this heartbeat (`None`:
/// not reported), and whether a partition is free of other members.
pub fn reconcile(
    current: &CurrentAssignment,
    target_epoch: i32,
    target: &Assignment,
    owned: Option<&Assignment>,
    is_free: &dyn Fn(Uuid, i32) -> bool,
) -> CurrentAssignment {
    match current.state {
        MemberState::Stable if current.epoch == target_epoch => current.clone(),
        MemberState::UnrevokedPartitions => match owned {
            // the revocation is acknowledged only by a report without them
            Some(owned) if !still_owns(owned, &current.revoking) => {
                next(current, target_epoch, target, Some(owned), is_free)
            }
            _ => current.clone(),
        },
        _ => next(current, target_epoch, target, owned, is_free),
    }
}

fn next(
    current: &CurrentAssignment,
    target_epoch: i32,
    target: &Assignment,
    owned: Option<&Assignment>,
    is_free: &dyn Fn(Uuid, i32) -> bool,
) -> CurrentAssignment {
    let keep = intersect(&current.assigned, target);
    let revoke = minus(&current.assigned, target);
    // a member that reports it no longer owns what it must give up (a
    // classic member rejoining after an eager revocation) skips the
    // revocation step, as in Kafka
    if !revoke.is_empty() && owned.is_none_or(|o| still_owns(o, &revoke)) {
        return CurrentAssignment {
            epoch: current.epoch,
            previous_epoch: current.previous_epoch,
            state: MemberState::UnrevokedPartitions,
            assigned: keep,
            revoking: revoke,
        };
    }
    let mut assigned = keep;
    let mut unreleased = false;
    for (t, ps) in minus(target, &assigned) {
        for p in ps {
            if is_free(t, p) {
                assigned.entry(t).or_default().insert(p);
            } else {
                unreleased = true;
            }
        }
    }
    CurrentAssignment {
        epoch: target_epoch,
        previous_epoch: if target_epoch != current.epoch {
            current.epoch
        } else {
            current.previous_epoch
        },
        state: if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        },
        assigned,
        revoking: Assignment::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(parts: &[(u128, &[i32])]) -> Assignment {
        parts
            .iter()
            .map(|(t, ps)| (Uuid::from_u128(*t), ps.iter().copied().collect()))
            .collect()
    }

    fn stable(epoch: i32, assigned: Assignment) -> CurrentAssignment {
        CurrentAssignment {
            epoch,
            previous_epoch: epoch - 1,
            state: MemberState::Stable,
            assigned,
            revoking: Assignment::new(),
        }
    }

    #[test]
    fn a_stable_member_at_the_target_epoch_is_unchanged() {
        let c = stable(3, a(&[(1, &[0, 1])]));
        let r = reconcile(&c, 3, &a(&[(1, &[0])]), None, &|_, _| true);
        assert_eq!(r, c);
    }

    #[test]
    fn revocation_comes_before_the_epoch_bump() {
        let c = stable(3, a(&[(1, &[0, 1, 2])]));
        let target = a(&[(1, &[0, 3])]);
        let r = reconcile(&c, 4, &target, None, &|_, _| true);
        assert_eq!(r.state, MemberState::UnrevokedPartitions);
        assert_eq!(
            r.epoch, 3,
            "epoch held until the revocation is acknowledged"
        );
        assert_eq!(r.assigned, a(&[(1, &[0])]));
        assert_eq!(r.revoking, a(&[(1, &[1, 2])]));
        // still reporting a revoked partition: no progress
        let owned = a(&[(1, &[0, 1])]);
        assert_eq!(reconcile(&r, 4, &target, Some(&owned), &|_, _| true), r);
        assert_eq!(reconcile(&r, 4, &target, None, &|_, _| true), r);
        // acknowledged: the new partitions come, the epoch moves on
        let owned = a(&[(1, &[0])]);
        let r2 = reconcile(&r, 4, &target, Some(&owned), &|_, _| true);
        assert_eq!(r2.state, MemberState::Stable);
        assert_eq!((r2.epoch, r2.previous_epoch), (4, 3));
        assert_eq!(r2.assigned, target);
        assert!(r2.revoking.is_empty());
    }

    #[test]
    fn a_member_that_reports_the_partitions_gone_skips_the_revocation() {
        let c = stable(3, a(&[(1, &[0, 1, 2])]));
        let target = a(&[(1, &[0, 3])]);
        // still owning one of those the target takes: revocation first
        let owned = a(&[(1, &[0, 2])]);
        let r = reconcile(&c, 4, &target, Some(&owned), &|_, _| true);
        assert_eq!((r.state, r.epoch), (MemberState::UnrevokedPartitions, 3));
        // none of them (Kafka's rule): straight to the new epoch
        let owned = a(&[(1, &[0])]);
        let r = reconcile(&c, 4, &target, Some(&owned), &|_, _| true);
        assert_eq!(
            (r.state, r.epoch, r.previous_epoch),
            (MemberState::Stable, 4, 3)
        );
        assert_eq!(r.assigned, target);
    }

    #[test]
    fn a_partition_still_held_elsewhere_waits() {
        let c = stable(1, a(&[]));
        let target = a(&[(1, &[0, 1])]);
        let busy = Uuid::from_u128(1);
        let r = reconcile(&c, 2, &target, None, &|t, p| !(t == busy && p == 1));
        assert_eq!(r.state, MemberState::UnreleasedPartitions);
        assert_eq!(r.epoch, 2);
        assert_eq!(r.assigned, a(&[(1, &[0])]));
        // released: it comes at the next heartbeat
        let r2 = reconcile(&r, 2, &target, None, &|_, _| true);
        assert_eq!(r2.state, MemberState::Stable);
        assert_eq!(r2.assigned, target);
        assert_eq!(r2.previous_epoch, 1);
    }
}
