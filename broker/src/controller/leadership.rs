//! Leader election and ISR decisions: what happens to partitions when a
//! broker is fenced or comes back, when preferred leaders should be
//! restored, and whether a leader's ISR change request is current. Pure
//! functions over partition states; the controller persists what they
//! return (each change bumps the partition's epoch, a compare-and-swap key
//! for later requests) and publishes it in the next image.
//!
//! Rules, as Kafka's with `unclean.leader.election.enable=false` by
//! default:
//! - a new leader is the first replica (in replica order, so the preferred
//!   one when it can) that is in the ISR and live;
//! - a fenced broker leaves every ISR, except that the ISR never becomes
//!   empty: when its last live members are fenced together, one of them
//!   stays (the leader if it was one of them), as Kafka keeps the last
//!   member, and the others become *eligible leader replicas* (ELR, after
//!   KIP-966). Dead brokers are therefore never listed as in sync with a
//!   leader that came back, so acks=all fails at once with
//!   NOT_ENOUGH_REPLICAS instead of waiting for replicas that are gone;
//! - when no ISR member is live, the partition has no leader (-1); an ELR
//!   member that returns first may lead, cleanly: it was in the ISR at the
//!   moment the partition lost its last leader, so it holds every record
//!   below the high watermark, and nothing was written since (there was no
//!   leader). Moldau's ELR exists only while a partition is leaderless and
//!   is cleared by any election, so unlike KIP-966 it needs no rule that
//!   freezes the high watermark below `min.insync.replicas`. Only a topic
//!   that allows unclean election takes any other live replica, and the
//!   caller logs it as possible data loss;
//! - a leader change bumps the leader epoch; any change bumps the
//!   partition epoch.

use std::collections::BTreeSet;

/// A partition's replication state as the controller keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub topic: String,
    /// The topic's id (`Uuid::nil()` when not known yet).
    pub topic_id: uuid::Uuid,
    pub index: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// -1: no leader.
    pub leader: i32,
    pub leader_epoch: i32,
    /// Bumped by every change of this state (leader, ISR, replicas).
    pub partition_epoch: i32,
    /// A running reassignment's replicas being added (see
    /// [`reassignment`](super::reassignment)); empty otherwise.
    pub adding: Vec<i32>,
    /// A running reassignment's replicas to drop once it completes.
    pub removing: Vec<i32>,
    /// Eligible leader replicas: while the partition is leaderless, the
    /// former ISR members that may lead cleanly besides the ISR's own.
    pub elr: Vec<i32>,
}

impl PartitionState {
    /// A partition of a metadata image as the decisions see it.
    pub fn from_image(t: &crate::image::TopicImage, p: &crate::image::PartitionImage) -> Self {
        Self {
            topic: t.name.clone(),
            topic_id: t.id,
            index: p.index,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
            // the image carries no ELR: only the controller decides with it
            elr: Vec::new(),
        }
    }
}

/// How a leader was chosen, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// From the ISR: no acknowledged record can be lost.
    Clean,
    /// Outside the ISR (the topic allows it): records may be lost.
    Unclean,
    /// Nobody can lead now.
    None,
}

/// One decided change: the new state and how its leader was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub state: PartitionState,
    pub election: Election,
}

fn elect(p: &PartitionState, live: &BTreeSet<i32>, unclean_allowed: bool) -> (i32, Election) {
    if let Some(leader) = p
        .replicas
        .iter()
        .find(|r| p.isr.contains(r) && live.contains(r))
    {
        return (*leader, Election::Clean);
    }
    if let Some(leader) = p
        .replicas
        .iter()
        .find(|r| p.elr.contains(r) && live.contains(r))
    {
        return (*leader, Election::Clean);
    }
    if unclean_allowed {
        if let Some(leader) = p.replicas.iter().find(|r| live.contains(r)) {
            return (*leader, Election::Unclean);
        }
    }
    (-1, Election::None)
}

/// A clean election's winner (the first live replica in the ISR), or -1.
pub(super) fn elect_clean(p: &PartitionState, live: &BTreeSet<i32>) -> i32 {
    elect(p, live, false).0
}

/// The state with `leader` and `isr`, when that differs from `p`. A
/// partition with a leader has no ELR (see the module doc).
fn changed(p: &PartitionState, leader: i32, isr: Vec<i32>, election: Election) -> Option<Change> {
    let elr = if leader >= 0 {
        Vec::new()
    } else {
        p.elr.clone()
    };
    changed_with_elr(p, leader, isr, elr, election)
}

fn changed_with_elr(
    p: &PartitionState,
    leader: i32,
    isr: Vec<i32>,
    elr: Vec<i32>,
    election: Election,
) -> Option<Change> {
    if leader == p.leader && isr == p.isr && elr == p.elr {
        return None;
    }
    let mut state = p.clone();
    if leader != p.leader {
        state.leader_epoch += 1;
    }
    state.leader = leader;
    state.isr = isr;
    state.elr = elr;
    state.partition_epoch += 1;
    Some(Change { state, election })
}

/// The ISR member kept when every live one is fenced at once: the leader
/// if it is among them (it also has what was not yet replicated), else
/// the first in ISR order.
fn last_member(p: &PartitionState) -> Option<i32> {
    if p.isr.contains(&p.leader) {
        return Some(p.leader);
    }
    p.isr.first().copied()
}

/// After `fenced` brokers left service (`live` is who remains): new leaders
/// and ISRs of the partitions they touched. `unclean_allowed(topic)` is the
/// topic's `unclean.leader.election.enable`.
pub fn on_brokers_fenced(
    partitions: &[PartitionState],
    fenced: &BTreeSet<i32>,
    live: &BTreeSet<i32>,
    unclean_allowed: impl Fn(&str) -> bool,
) -> Vec<Change> {
    partitions
        .iter()
        .filter(|p| p.replicas.iter().any(|r| fenced.contains(r)))
        .filter_map(|p| {
            let mut isr: Vec<i32> = p
                .isr
                .iter()
                .copied()
                .filter(|r| !fenced.contains(r))
                .collect();
            let mut elr = p.elr.clone();
            if isr.is_empty() {
                // Every remaining ISR member is fenced at once: keep one
                // (Kafka keeps the last member); the others were just as
                // much in sync, so they become eligible leaders.
                let kept = last_member(p);
                isr = kept.into_iter().collect();
                for r in &p.isr {
                    if Some(*r) != kept && !elr.contains(r) {
                        elr.push(*r);
                    }
                }
            }
            let narrowed = PartitionState {
                isr: isr.clone(),
                elr: elr.clone(),
                ..p.clone()
            };
            let (leader, election) = if live.contains(&p.leader) && isr.contains(&p.leader) {
                (p.leader, Election::Clean)
            } else {
                elect(&narrowed, live, unclean_allowed(&p.topic))
            };
            if leader >= 0 && !isr.contains(&leader) {
                // elected from the ELR or uncleanly: it is the ISR now
                isr = vec![leader];
            }
            if leader >= 0 {
                elr.clear();
            }
            changed_with_elr(p, leader, isr, elr, election)
        })
        .collect()
}

/// After `returned` came back into service: leaderless partitions it can
/// lead again (it is in their ISR, or unclean election is allowed).
pub fn on_broker_returned(
    partitions: &[PartitionState],
    live: &BTreeSet<i32>,
    unclean_allowed: impl Fn(&str) -> bool,
) -> Vec<Change> {
    partitions
        .iter()
        .filter(|p| p.leader < 0)
        .filter_map(|p| {
            let (leader, election) = elect(p, live, unclean_allowed(&p.topic));
            if leader < 0 {
                return None;
            }
            // elected from the ELR or uncleanly: it alone is in sync now
            let isr = if p.isr.contains(&leader) {
                p.isr.clone()
            } else {
                vec![leader]
            };
            changed(p, leader, isr, election)
        })
        .collect()
}

/// Preferred leaders to restore (auto leader rebalance): partitions whose
/// first replica is live and in sync but does not lead.
pub fn preferred_leader_moves(partitions: &[PartitionState], live: &BTreeSet<i32>) -> Vec<Change> {
    partitions
        .iter()
        .filter_map(|p| {
            let preferred = *p.replicas.first()?;
            let ready =
                preferred != p.leader && live.contains(&preferred) && p.isr.contains(&preferred);
            ready
                .then(|| changed(p, preferred, p.isr.clone(), Election::Clean))
                .flatten()
        })
        .collect()
}

/// A leader's request to change its partition's ISR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

/// Why an ISR change is refused (Kafka's AlterPartition errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsrError {
    #[error("broker {0} is not the leader")]
    NotLeader(i32),
    #[error("leader epoch {sent} is not the current {current}")]
    FencedLeaderEpoch { sent: i32, current: i32 },
    #[error("partition epoch {sent} is not the current {current}")]
    InvalidUpdateVersion { sent: i32, current: i32 },
    #[error("the new ISR {0:?} must be replicas, include the leader, and name live brokers")]
    InvalidIsr(Vec<i32>),
}

/// Applies an ISR change if it is current (a compare-and-swap on the
/// partition epoch) and sound.
pub fn alter_isr(
    p: &PartitionState,
    req: &IsrChange,
    live: &BTreeSet<i32>,
) -> Result<PartitionState, IsrError> {
    if req.leader != p.leader {
        return Err(IsrError::NotLeader(req.leader));
    }
    if req.leader_epoch != p.leader_epoch {
        return Err(IsrError::FencedLeaderEpoch {
            sent: req.leader_epoch,
            current: p.leader_epoch,
        });
    }
    if req.partition_epoch != p.partition_epoch {
        return Err(IsrError::InvalidUpdateVersion {
            sent: req.partition_epoch,
            current: p.partition_epoch,
        });
    }
    let unique: BTreeSet<i32> = req.isr.iter().copied().collect();
    let sound = unique.len() == req.isr.len()
        && req.isr.contains(&p.leader)
        && req.isr.iter().all(|r| p.replicas.contains(r))
        // a broker may only join the ISR while it is in service
        && req
            .isr
            .iter()
            .all(|r| p.isr.contains(r) || live.contains(r));
    if !sound {
        return Err(IsrError::InvalidIsr(req.isr.clone()));
    }
    let mut next = p.clone();
    next.isr = req.isr.clone();
    next.partition_epoch += 1;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::controller::test_support::{p, set};

    #[test]
    fn a_fenced_leader_is_replaced_from_the_isr_and_epochs_grow() {
        let parts = [p(&[1, 2, 3], &[1, 2, 3], 1)];
        let changes = on_brokers_fenced(&parts, &set(&[1]), &set(&[2, 3]), |_| false);
        assert_eq!(changes.len(), 1);
        let s = &changes[0].state;
        assert_eq!((s.leader, s.isr.clone()), (2, vec![2, 3]));
        assert_eq!((s.leader_epoch, s.partition_epoch), (6, 10));
        assert_eq!(changes[0].election, Election::Clean);
    }

    #[test]
    fn a_fenced_follower_only_leaves_the_isr() {
        let parts = [p(&[1, 2, 3], &[1, 2, 3], 1), p(&[4, 5], &[4, 5], 4)];
        let changes = on_brokers_fenced(&parts, &set(&[3]), &set(&[1, 2, 4, 5]), |_| false);
        assert_eq!(changes.len(), 1, "the untouched partition does not change");
        let s = &changes[0].state;
        assert_eq!(
            (s.leader, s.leader_epoch),
            (1, 5),
            "leader and its epoch stay"
        );
        assert_eq!((s.isr.clone(), s.partition_epoch), (vec![1, 2], 10));
    }

    #[test]
    fn without_a_live_isr_member_nobody_leads_unless_unclean_is_allowed() {
        // 2 and 3 fell out of the ISR earlier; now 1 dies.
        let parts = [p(&[1, 2, 3], &[1], 1)];
        let clean = on_brokers_fenced(&parts, &set(&[1]), &set(&[2, 3]), |_| false);
        let s = &clean[0].state;
        assert_eq!(s.leader, -1);
        assert_eq!(s.isr, vec![1], "the last in-sync replica is remembered");
        assert_eq!(clean[0].election, Election::None);
        let unclean = on_brokers_fenced(&parts, &set(&[1]), &set(&[2, 3]), |_| true);
        assert_eq!(unclean[0].state.leader, 2);
        assert_eq!(unclean[0].state.isr, vec![2]);
        assert_eq!(unclean[0].election, Election::Unclean);
        // when 1 returns, it leads again, cleanly
        let back = on_broker_returned(std::slice::from_ref(s), &set(&[1, 2, 3]), |_| false);
        assert_eq!(back[0].state.leader, 1);
        assert_eq!(back[0].election, Election::Clean);
        assert!(back[0].state.leader_epoch > s.leader_epoch);
        // a returning broker outside the ISR does not lead cleanly
        assert!(on_broker_returned(std::slice::from_ref(s), &set(&[2, 3]), |_| false).is_empty());
    }

    #[test]
    fn fenced_together_the_isr_keeps_one_member_and_the_others_are_eligible() {
        // all three fenced at once (e.g. a controller that fenced everyone)
        let parts = [p(&[1, 2, 3], &[1, 2, 3], 2)];
        let down = on_brokers_fenced(&parts, &set(&[1, 2, 3]), &set(&[]), |_| false);
        let s = &down[0].state;
        assert_eq!(s.leader, -1);
        assert_eq!(s.isr, vec![2], "only the last member (the leader) stays");
        assert_eq!(s.elr, vec![1, 3]);
        // 3 returns first: it was in sync when the partition lost its
        // leader, so it leads cleanly, alone in the ISR
        let back = on_broker_returned(std::slice::from_ref(s), &set(&[3]), |_| false);
        assert_eq!(back[0].election, Election::Clean);
        let b = &back[0].state;
        assert_eq!(
            (b.leader, b.isr.clone(), b.elr.clone()),
            (3, vec![3], vec![])
        );
        assert!(b.leader_epoch > s.leader_epoch);
        // the kept member returning first leads with itself only: the dead
        // ones are not listed as in sync
        let kept = on_broker_returned(std::slice::from_ref(s), &set(&[2]), |_| false);
        let k = &kept[0].state;
        assert_eq!(
            (k.leader, k.isr.clone(), k.elr.clone()),
            (2, vec![2], vec![])
        );
        // a replica that was out of the ISR before is not eligible
        let earlier = [p(&[1, 2, 3], &[1, 2], 1)];
        let down = on_brokers_fenced(&earlier, &set(&[1, 2]), &set(&[3]), |_| false);
        assert_eq!(down[0].state.leader, -1);
        assert_eq!(
            (down[0].state.isr.clone(), down[0].state.elr.clone()),
            (vec![1], vec![2])
        );
        assert!(on_broker_returned(&[down[0].state.clone()], &set(&[3]), |_| false).is_empty());
    }

    #[test]
    fn a_live_leader_fenced_with_its_followers_is_replaced_by_an_eligible_one() {
        // 1 leads, ISR [1, 2]; 1 and 2 fenced together while 3 (out of sync) lives
        let parts = [p(&[1, 2, 3], &[1, 2], 1)];
        let d = on_brokers_fenced(&parts, &set(&[1, 2]), &set(&[3]), |_| false);
        let s = &d[0].state;
        // then 2 comes back in a later round: it may lead
        let back = on_broker_returned(std::slice::from_ref(s), &set(&[2, 3]), |_| false);
        assert_eq!(
            (back[0].state.leader, back[0].state.isr.clone()),
            (2, vec![2])
        );
        // and if 2 is fenced again before anyone leads, it stays eligible
        let again = on_brokers_fenced(std::slice::from_ref(s), &set(&[2]), &set(&[3]), |_| false);
        assert!(again.is_empty() || again[0].state.elr.contains(&2));
    }

    #[test]
    fn preferred_leaders_are_restored_once_in_sync() {
        let moved = p(&[1, 2, 3], &[2, 3], 2);
        assert!(
            preferred_leader_moves(std::slice::from_ref(&moved), &set(&[1, 2, 3])).is_empty(),
            "1 is back but not in sync yet"
        );
        let caught_up = PartitionState {
            isr: vec![2, 3, 1],
            ..moved
        };
        let changes = preferred_leader_moves(&[caught_up], &set(&[1, 2, 3]));
        assert_eq!(changes[0].state.leader, 1);
        assert_eq!(changes[0].state.leader_epoch, 6);
        assert!(preferred_leader_moves(&[p(&[1, 2], &[1, 2], 1)], &set(&[1, 2])).is_empty());
    }

    #[test]
    fn isr_changes_are_a_compare_and_swap_on_the_partition_epoch() {
        let cur = p(&[1, 2, 3], &[1, 2], 1);
        let live = set(&[1, 2, 3]);
        let ok = IsrChange {
            leader: 1,
            leader_epoch: 5,
            partition_epoch: 9,
            isr: vec![1, 2, 3],
        };
        let next = alter_isr(&cur, &ok, &live).unwrap();
        assert_eq!(
            (next.isr.clone(), next.partition_epoch),
            (vec![1, 2, 3], 10)
        );
        // the same request again is stale now
        assert_eq!(
            alter_isr(&next, &ok, &live),
            Err(IsrError::InvalidUpdateVersion {
                sent: 9,
                current: 10
            })
        );
        let old_leader = IsrChange {
            leader_epoch: 4,
            ..ok.clone()
        };
        assert!(matches!(
            alter_isr(&cur, &old_leader, &live),
            Err(IsrError::FencedLeaderEpoch { .. })
        ));
        let not_leader = IsrChange {
            leader: 2,
            ..ok.clone()
        };
        assert_eq!(
            alter_isr(&cur, &not_leader, &live),
            Err(IsrError::NotLeader(2))
        );
        for bad in [vec![2], vec![1, 1], vec![1, 9]] {
            let req = IsrChange {
                isr: bad.clone(),
                ..ok.clone()
            };
            assert_eq!(alter_isr(&cur, &req, &live), Err(IsrError::InvalidIsr(bad)));
        }
        // a fenced broker cannot join the ISR
        let join_dead = IsrChange { ..ok };
        assert!(alter_isr(&cur, &join_dead, &set(&[1, 2])).is_err());
    }
}
