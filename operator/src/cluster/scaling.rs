//! Scaling with data: how many brokers the StatefulSet runs and which
//! partition move a scale waits for, as one pure function ([`decide`]) of
//! `spec.replicas`, the StatefulSet's replica count, the brokers that are
//! Ready and registered, the scale's move in progress (kept in
//! `status.autoRebalance`), the operator's `KafkaRebalance` for it, and —
//! for a scale-down — where the replicas are. The controller reads those,
//! applies the StatefulSet with [`ScaleDecision::replicas`] and the
//! `KafkaRebalance` [`ScaleDecision::rebalance`] asks for, and stores
//! [`ScaleDecision::pending`]; it decides nothing itself.
//!
//! With `spec.rebalance.autoOnScale` (the default):
//!
//! - **Scale-out** (`replicas` above the StatefulSet's): the StatefulSet
//!   grows at once; once every new broker is Ready and registered with the
//!   controller, an `add-brokers` rebalance of the new ids (approved by the
//!   operator) moves partitions onto them; the scale is done when it is
//!   `Ready`. A second scale-out before that adds its brokers to the same
//!   rebalance.
//! - **Scale-down**: refused — the StatefulSet stays, `Degraded=True
//!   ScaleDownRefused` and a Warning Event — when some topic's replication
//!   factor exceeds the new broker count (its partitions could not keep
//!   their replicas). Otherwise the highest ordinals `replicas..current`
//!   are drained by a `remove-brokers` rebalance, and the StatefulSet is
//!   lowered only when none of them holds a replica or is the target of a
//!   running reassignment (read from Kafka at that moment, not inferred
//!   from the rebalance's phase). While the partitions cannot be read, the
//!   StatefulSet stays too. Removed brokers' PVCs follow
//!   `storage.deleteClaim` (the StatefulSet's `whenScaled` policy).
//! - **A scale-down given up** (`replicas` raised back before the drain
//!   finished): the partly drained brokers are filled again with an
//!   `add-brokers` rebalance, as after a scale-out.
//! - A rebalance that fails or is stopped by hand leaves the scale waiting,
//!   `Degraded=True` with the rebalance's reason; a failed one is retried
//!   by the rebalance controller.
//!
//! One `KafkaRebalance` per cluster (`<cluster>-auto-rebalance`): turning a
//! drain into a fill is a spec change the rebalance lifecycle already
//! handles (the batch in flight finishes, then it re-plans). It is deleted
//! when its scale is done, so the next scale starts from a fresh proposal
//! (an old `Ready` can never pass for a new scale's); the Events and the
//! cluster's log keep the history.
//!
//! Without `autoOnScale`, `replicas` goes to the StatefulSet unchanged and
//! nothing moves.

use std::collections::BTreeSet;

use crate::crd::{AutoRebalanceStatus, RebalanceMode, RebalancePhase};
use crate::events::EventSpec;

/// The operator's `KafkaRebalance` for scaling, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedRebalance {
    /// `spec.mode`.
    pub mode: RebalanceMode,
    /// `spec.brokers`.
    pub brokers: Vec<i32>,
    /// `status.phase`, only when the status describes the current spec
    /// (`status.observedGeneration == metadata.generation`).
    pub phase: Option<RebalancePhase>,
    /// Its `Ready` condition's reason and message.
    pub reason: String,
    /// The message.
    pub message: String,
}

/// Where the replicas are, read from Kafka.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The topic with the highest replication factor, and that factor.
    pub max_replication_factor: Option<(String, i32)>,
    /// Brokers that hold a replica or are a target of a running
    /// reassignment.
    pub holding: BTreeSet<i32>,
}

/// What the decision needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleInput<'a> {
    /// `spec.replicas`.
    pub desired: i32,
    /// `spec.rebalance.autoOnScale`.
    pub auto: bool,
    /// The StatefulSet's `spec.replicas` (None: no StatefulSet yet).
    pub current: Option<i32>,
    /// Brokers whose pod is Ready and that are registered (unfenced) with
    /// the controller.
    pub ready: &'a BTreeSet<i32>,
    /// `status.autoRebalance`.
    pub pending: Option<&'a AutoRebalanceStatus>,
    /// The operator's `KafkaRebalance`, when it exists.
    pub rebalance: Option<&'a ObservedRebalance>,
    /// Where the replicas are (None: not read, or Kafka unreachable).
    pub placement: Option<&'a Placement>,
    /// The name of the operator's `KafkaRebalance`.
    pub rebalance_name: &'a str,
}

/// Whether a [`ScaleNote`] is progress or a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoteKind {
    /// `Progressing=True` with the reason.
    Progress,
    /// `Degraded=True` with the reason (and a Warning Event).
    Problem,
}

/// What the scale is doing, for the conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleNote {
    /// Progress or problem.
    pub kind: NoteKind,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

/// What to do with the operator's `KafkaRebalance`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RebalanceChange {
    /// Leave it as it is (or absent).
    Keep,
    /// Create or update it with this mode and these brokers.
    Apply(RebalanceMode, Vec<i32>),
    /// Delete it: the scale it served is done. Each scale gets a fresh
    /// one, so an old `Ready` never passes for a new scale's.
    Delete,
}

/// The decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleDecision {
    /// The StatefulSet's replicas.
    pub replicas: i32,
    /// What to do with the operator's `KafkaRebalance`.
    pub rebalance: RebalanceChange,
    /// The new `status.autoRebalance`.
    pub pending: Option<AutoRebalanceStatus>,
    /// What to report.
    pub note: Option<ScaleNote>,
    /// An Event for a transition of the scale.
    pub event: Option<EventSpec>,
}

/// Whether [`decide`] needs a [`Placement`]: only for a scale-down.
pub fn needs_placement(desired: i32, auto: bool, current: Option<i32>) -> bool {
    auto && current.is_some_and(|c| desired < c)
}

fn list(ids: &BTreeSet<i32>) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn note(kind: NoteKind, reason: &'static str, message: String) -> Option<ScaleNote> {
    Some(ScaleNote {
        kind,
        reason,
        message,
    })
}

fn event(warning: bool, reason: &str, note: String) -> Option<EventSpec> {
    Some(EventSpec {
        warning,
        reason: reason.into(),
        note,
    })
}

/// The observed rebalance, when it is ours for exactly (`mode`, `brokers`).
fn matching<'a>(
    input: &ScaleInput<'a>,
    mode: RebalanceMode,
    brokers: &BTreeSet<i32>,
) -> Option<&'a ObservedRebalance> {
    input.rebalance.filter(|r| {
        r.mode == mode && r.brokers.iter().copied().collect::<BTreeSet<_>>() == *brokers
    })
}

/// Decides the StatefulSet's replicas and the scale's partition move.
pub fn decide(input: &ScaleInput) -> ScaleDecision {
    let Some(current) = input.current else {
        return plain(input.desired);
    };
    if !input.auto {
        return plain(input.desired);
    }
    if input.desired >= current {
        scale_out(input, current)
    } else {
        scale_down(input, current)
    }
}

fn plain(replicas: i32) -> ScaleDecision {
    ScaleDecision {
        replicas,
        rebalance: RebalanceChange::Keep,
        pending: None,
        note: None,
        event: None,
    }
}

fn pending(mode: RebalanceMode, brokers: &BTreeSet<i32>, name: &str) -> AutoRebalanceStatus {
    AutoRebalanceStatus {
        mode,
        brokers: brokers.iter().copied().collect(),
        rebalance: name.to_string(),
    }
}

/// `desired >= current`: grow the StatefulSet; fill the new brokers (and
/// those of a drain given up) once they are Ready.
fn scale_out(input: &ScaleInput, current: i32) -> ScaleDecision {
    let desired = input.desired;
    let mut fill: BTreeSet<i32> = (current..desired).collect();
    let mut given_up = false;
    if let Some(p) = input.pending {
        if p.mode == RebalanceMode::RemoveBrokers {
            given_up = true;
        }
        // Earlier new brokers still waiting, or drained ones to refill.
        fill.extend(p.brokers.iter().copied());
    }
    fill.retain(|b| *b < desired);
    let mut out = plain(desired);
    if fill.is_empty() {
        return out;
    }
    let name = input.rebalance_name;
    out.pending = Some(pending(RebalanceMode::AddBrokers, &fill, name));
    let was = input.pending.map(|p| (p.mode, p.brokers.clone()));
    let now = (
        RebalanceMode::AddBrokers,
        fill.iter().copied().collect::<Vec<_>>(),
    );
    if was.as_ref() != Some(&now) {
        out.event = if given_up {
            event(
                false,
                "ScaleDownCancelled",
                format!(
                    "replicas is {desired} again: brokers {} are filled again instead of drained",
                    list(&fill)
                ),
            )
        } else {
            event(
                false,
                "ScaleOutStarted",
                format!(
                    "scaling out to {desired} brokers: partitions move onto brokers {} once they are Ready",
                    list(&fill)
                ),
            )
        };
    }
    let waiting: BTreeSet<i32> = fill.difference(input.ready).copied().collect();
    if !waiting.is_empty() {
        out.note = note(
            NoteKind::Progress,
            "WaitingForNewBrokers",
            format!(
                "partitions move onto brokers {} once broker(s) {} are Ready and registered",
                list(&fill),
                list(&waiting)
            ),
        );
        return out;
    }
    out.rebalance = RebalanceChange::Apply(now.0, now.1.clone());
    let observed = matching(input, RebalanceMode::AddBrokers, &fill);
    match observed.and_then(|r| r.phase.map(|p| (r, p))) {
        Some((_, RebalancePhase::Ready)) => {
            out.pending = None;
            out.rebalance = RebalanceChange::Delete;
            out.event = event(
                false,
                "ScaleOutRebalanced",
                format!(
                    "brokers {} received their share of the partitions ({name})",
                    list(&fill)
                ),
            );
        }
        Some((r, RebalancePhase::Stopped)) => {
            out.note = note(
                NoteKind::Problem,
                "RebalanceStopped",
                format!(
                    "KafkaRebalance {name} that fills brokers {} was stopped: {}; remove its stop annotation to go on",
                    list(&fill),
                    r.message
                ),
            );
        }
        Some((r, RebalancePhase::Failed)) => {
            out.note = note(
                NoteKind::Problem,
                "RebalanceFailed",
                format!(
                    "KafkaRebalance {name} that fills brokers {} failed ({}): {}; it is retried",
                    list(&fill),
                    r.reason,
                    r.message
                ),
            );
        }
        _ => {
            out.note = note(
                NoteKind::Progress,
                "RebalancingNewBrokers",
                format!("moving partitions onto brokers {} ({name})", list(&fill)),
            );
        }
    }
    out
}

/// `desired < current`: refuse, wait, drain, or lower the StatefulSet.
fn scale_down(input: &ScaleInput, current: i32) -> ScaleDecision {
    let desired = input.desired;
    let name = input.rebalance_name;
    let drain: BTreeSet<i32> = (desired..current).collect();
    let mut out = plain(current);
    // A fill still pending goes on while the scale-down cannot start.
    let keep_fill = |out: &mut ScaleDecision| {
        if let Some(p) = input
            .pending
            .filter(|p| p.mode == RebalanceMode::AddBrokers)
        {
            out.pending = Some(p.clone());
            out.rebalance = RebalanceChange::Apply(p.mode, p.brokers.clone());
        }
    };
    let Some(placement) = input.placement else {
        keep_fill(&mut out);
        if let Some(p) = input
            .pending
            .filter(|p| p.mode == RebalanceMode::RemoveBrokers)
        {
            out.pending = Some(p.clone());
        }
        out.note = note(
            NoteKind::Progress,
            "WaitingForPartitions",
            format!(
                "scaling down to {desired} brokers waits until the partitions can be read from the brokers; the StatefulSet stays at {current}"
            ),
        );
        return out;
    };
    if let Some((topic, rf)) = placement
        .max_replication_factor
        .as_ref()
        .filter(|(_, rf)| *rf > desired)
    {
        keep_fill(&mut out);
        out.note = note(
            NoteKind::Problem,
            "ScaleDownRefused",
            format!(
                "scaling down to {desired} brokers is refused: topic {topic} has replication factor {rf}; the StatefulSet stays at {current} brokers"
            ),
        );
        return out;
    }
    let holding: BTreeSet<i32> = drain.intersection(&placement.holding).copied().collect();
    if holding.is_empty() {
        out.replicas = desired;
        out.rebalance = RebalanceChange::Delete;
        // Brokers of an earlier, deeper drain that stay are filled again.
        let refill: BTreeSet<i32> = input
            .pending
            .filter(|p| p.mode == RebalanceMode::RemoveBrokers)
            .map(|p| p.brokers.iter().copied().filter(|b| *b < desired).collect())
            .unwrap_or_default();
        if !refill.is_empty() {
            out.pending = Some(pending(RebalanceMode::AddBrokers, &refill, name));
        }
        out.event = event(
            false,
            "BrokersDrained",
            format!(
                "brokers {} hold no replica; the StatefulSet goes from {current} to {desired} brokers",
                list(&drain)
            ),
        );
        return out;
    }
    // Remember brokers of a deeper drain given up halfway: they are filled
    // again once the StatefulSet is lowered.
    let was: Option<BTreeSet<i32>> = input
        .pending
        .filter(|p| p.mode == RebalanceMode::RemoveBrokers)
        .map(|p| p.brokers.iter().copied().collect());
    let mut remembered = drain.clone();
    remembered.extend(was.iter().flatten().copied());
    out.pending = Some(pending(RebalanceMode::RemoveBrokers, &remembered, name));
    out.rebalance = RebalanceChange::Apply(
        RebalanceMode::RemoveBrokers,
        drain.iter().copied().collect(),
    );
    if was.as_ref() != Some(&drain) {
        out.event = event(
            false,
            "DrainStarted",
            format!(
                "scaling down to {desired} brokers: moving every replica off brokers {} before they are removed ({name})",
                list(&drain)
            ),
        );
    }
    let observed = matching(input, RebalanceMode::RemoveBrokers, &drain);
    out.note = match observed.and_then(|r| r.phase.map(|p| (r, p))) {
        Some((r, RebalancePhase::Failed)) => note(
            NoteKind::Problem,
            "RebalanceFailed",
            format!(
                "KafkaRebalance {name} that drains brokers {} failed ({}): {}; the StatefulSet stays at {current}",
                list(&drain),
                r.reason,
                r.message
            ),
        ),
        Some((r, RebalancePhase::Stopped)) => note(
            NoteKind::Problem,
            "RebalanceStopped",
            format!(
                "KafkaRebalance {name} that drains brokers {} was stopped: {}; the StatefulSet stays at {current}",
                list(&drain),
                r.message
            ),
        ),
        _ => note(
            NoteKind::Progress,
            "DrainingBrokers",
            format!(
                "moving every replica off brokers {} (still on {}) before the StatefulSet goes from {current} to {desired} ({name})",
                list(&drain),
                list(&holding)
            ),
        ),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "demo-auto-rebalance";

    fn ids(v: &[i32]) -> BTreeSet<i32> {
        v.iter().copied().collect()
    }

    fn input<'a>(desired: i32, current: Option<i32>, ready: &'a BTreeSet<i32>) -> ScaleInput<'a> {
        ScaleInput {
            desired,
            auto: true,
            current,
            ready,
            pending: None,
            rebalance: None,
            placement: None,
            rebalance_name: NAME,
        }
    }

    fn pend(mode: RebalanceMode, brokers: &[i32]) -> AutoRebalanceStatus {
        AutoRebalanceStatus {
            mode,
            brokers: brokers.to_vec(),
            rebalance: NAME.into(),
        }
    }

    fn observed(
        mode: RebalanceMode,
        brokers: &[i32],
        phase: Option<RebalancePhase>,
    ) -> ObservedRebalance {
        ObservedRebalance {
            mode,
            brokers: brokers.to_vec(),
            phase,
            reason: "Why".into(),
            message: "because".into(),
        }
    }

    fn placement(rf: i32, holding: &[i32]) -> Placement {
        Placement {
            max_replication_factor: Some(("orders".into(), rf)),
            holding: ids(holding),
        }
    }

    fn reason(d: &ScaleDecision) -> Option<(&'static str, NoteKind)> {
        d.note.as_ref().map(|n| (n.reason, n.kind))
    }

    use RebalanceMode::{AddBrokers, RemoveBrokers};

    #[test]
    fn a_new_cluster_gets_its_replicas() {
        let ready = ids(&[]);
        let d = decide(&input(3, None, &ready));
        assert_eq!(d, plain(3));
    }

    #[test]
    fn without_auto_replicas_go_to_the_statefulset_as_they_are() {
        let ready = ids(&[0, 1, 2]);
        let pl = placement(3, &[0, 1, 2]);
        for desired in [1, 3, 5] {
            let mut i = input(desired, Some(3), &ready);
            i.auto = false;
            i.placement = Some(&pl);
            assert_eq!(decide(&i), plain(desired));
        }
        assert!(!needs_placement(1, false, Some(3)));
    }

    #[test]
    fn steady_state_does_nothing() {
        let ready = ids(&[0, 1, 2]);
        assert_eq!(decide(&input(3, Some(3), &ready)), plain(3));
        assert!(!needs_placement(3, true, Some(3)));
        assert!(!needs_placement(5, true, Some(3)));
        assert!(needs_placement(2, true, Some(3)));
        assert!(!needs_placement(2, true, None));
    }

    #[test]
    fn scale_out_grows_at_once_and_waits_for_the_new_brokers() {
        let ready = ids(&[0, 1, 2]);
        let d = decide(&input(5, Some(3), &ready));
        assert_eq!(d.replicas, 5);
        assert_eq!(d.pending, Some(pend(AddBrokers, &[3, 4])));
        assert_eq!(
            d.rebalance,
            RebalanceChange::Keep,
            "not before they are Ready"
        );
        assert_eq!(
            reason(&d),
            Some(("WaitingForNewBrokers", NoteKind::Progress))
        );
        assert_eq!(d.event.as_ref().unwrap().reason, "ScaleOutStarted");
        // next reconcile: StatefulSet at 5, broker 3 Ready, 4 not yet
        let ready = ids(&[0, 1, 2, 3]);
        let p = pend(AddBrokers, &[3, 4]);
        let mut i = input(5, Some(5), &ready);
        i.pending = Some(&p);
        let d = decide(&i);
        assert_eq!(d.replicas, 5);
        assert_eq!(d.pending, Some(p.clone()));
        assert_eq!(d.rebalance, RebalanceChange::Keep);
        assert!(d.note.unwrap().message.contains("broker(s) 4"));
        assert_eq!(d.event, None, "no repeated event");
    }

    #[test]
    fn scale_out_rebalances_once_the_new_brokers_are_ready_and_ends_when_it_is_ready() {
        let ready = ids(&[0, 1, 2, 3, 4]);
        let p = pend(AddBrokers, &[3, 4]);
        let mut i = input(5, Some(5), &ready);
        i.pending = Some(&p);
        let d = decide(&i);
        assert_eq!(d.rebalance, RebalanceChange::Apply(AddBrokers, vec![3, 4]));
        assert_eq!(
            reason(&d),
            Some(("RebalancingNewBrokers", NoteKind::Progress))
        );
        // the rebalance runs; its status may still describe an older spec
        for phase in [
            None,
            Some(RebalancePhase::ProposalReady),
            Some(RebalancePhase::Rebalancing),
        ] {
            let r = observed(AddBrokers, &[3, 4], phase);
            let mut i = i.clone();
            i.rebalance = Some(&r);
            let d = decide(&i);
            assert_eq!(d.pending, Some(p.clone()));
            assert_eq!(
                reason(&d),
                Some(("RebalancingNewBrokers", NoteKind::Progress))
            );
        }
        // a Ready rebalance of other brokers does not end this scale
        let other = observed(AddBrokers, &[3], Some(RebalancePhase::Ready));
        i.rebalance = Some(&other);
        assert_eq!(decide(&i).pending, Some(p.clone()));
        let done = observed(AddBrokers, &[4, 3], Some(RebalancePhase::Ready));
        i.rebalance = Some(&done);
        let d = decide(&i);
        assert_eq!(d.replicas, 5);
        assert_eq!(d.pending, None);
        assert_eq!(d.rebalance, RebalanceChange::Delete);
        assert_eq!(d.note, None);
        assert_eq!(d.event.unwrap().reason, "ScaleOutRebalanced");
    }

    #[test]
    fn a_failed_or_stopped_fill_is_reported_and_kept() {
        let ready = ids(&[0, 1, 2, 3]);
        let p = pend(AddBrokers, &[3]);
        let mut i = input(4, Some(4), &ready);
        i.pending = Some(&p);
        for (phase, why) in [
            (RebalancePhase::Failed, "RebalanceFailed"),
            (RebalancePhase::Stopped, "RebalanceStopped"),
        ] {
            let r = observed(AddBrokers, &[3], Some(phase));
            let mut i = i.clone();
            i.rebalance = Some(&r);
            let d = decide(&i);
            assert_eq!(reason(&d), Some((why, NoteKind::Problem)));
            assert_eq!(d.pending, Some(p.clone()));
            assert_eq!(d.rebalance, RebalanceChange::Apply(AddBrokers, vec![3]));
            assert!(d.note.unwrap().message.contains("because"));
        }
    }

    #[test]
    fn a_second_scale_out_joins_the_first() {
        let ready = ids(&[0, 1, 2, 3]);
        let p = pend(AddBrokers, &[3]);
        let mut i = input(6, Some(4), &ready);
        i.pending = Some(&p);
        let d = decide(&i);
        assert_eq!(d.replicas, 6);
        assert_eq!(d.pending, Some(pend(AddBrokers, &[3, 4, 5])));
        assert_eq!(d.event.unwrap().reason, "ScaleOutStarted");
    }

    #[test]
    fn scale_down_below_a_replication_factor_is_refused_and_the_statefulset_stays() {
        let ready = ids(&[0, 1, 2]);
        let pl = placement(2, &[0, 1, 2]);
        let mut i = input(1, Some(3), &ready);
        i.placement = Some(&pl);
        let d = decide(&i);
        assert_eq!(d.replicas, 3);
        assert_eq!(d.rebalance, RebalanceChange::Keep);
        assert_eq!(d.pending, None);
        let n = d.note.unwrap();
        assert_eq!((n.reason, n.kind), ("ScaleDownRefused", NoteKind::Problem));
        assert!(
            n.message.contains("topic orders has replication factor 2"),
            "{}",
            n.message
        );
        // exactly the factor is allowed
        let mut i = input(2, Some(3), &ready);
        i.placement = Some(&pl);
        assert_ne!(
            reason(&decide(&i)),
            Some(("ScaleDownRefused", NoteKind::Problem))
        );
    }

    #[test]
    fn a_refused_scale_down_lets_a_pending_fill_go_on() {
        let ready = ids(&[0, 1, 2, 3]);
        let pl = placement(3, &[0, 1, 2, 3]);
        let p = pend(AddBrokers, &[3]);
        let mut i = input(2, Some(4), &ready);
        i.placement = Some(&pl);
        i.pending = Some(&p);
        let d = decide(&i);
        assert_eq!(d.replicas, 4);
        assert_eq!(d.pending, Some(p));
        assert_eq!(d.rebalance, RebalanceChange::Apply(AddBrokers, vec![3]));
        assert_eq!(reason(&d), Some(("ScaleDownRefused", NoteKind::Problem)));
    }

    #[test]
    fn scale_down_waits_while_the_partitions_cannot_be_read() {
        let ready = ids(&[0, 1, 2, 3, 4]);
        let p = pend(RemoveBrokers, &[3, 4]);
        let mut i = input(3, Some(5), &ready);
        i.pending = Some(&p);
        let d = decide(&i);
        assert_eq!(d.replicas, 5);
        assert_eq!(d.pending, Some(p));
        assert_eq!(d.rebalance, RebalanceChange::Keep);
        assert_eq!(
            reason(&d),
            Some(("WaitingForPartitions", NoteKind::Progress))
        );
    }

    #[test]
    fn scale_down_drains_the_highest_ordinals_first() {
        let ready = ids(&[0, 1, 2, 3, 4]);
        let pl = placement(2, &[0, 1, 2, 3, 4]);
        let mut i = input(3, Some(5), &ready);
        i.placement = Some(&pl);
        let d = decide(&i);
        assert_eq!(
            d.replicas, 5,
            "the StatefulSet stays while they hold replicas"
        );
        assert_eq!(
            d.rebalance,
            RebalanceChange::Apply(RemoveBrokers, vec![3, 4])
        );
        assert_eq!(d.pending, Some(pend(RemoveBrokers, &[3, 4])));
        assert_eq!(reason(&d), Some(("DrainingBrokers", NoteKind::Progress)));
        assert_eq!(d.event.unwrap().reason, "DrainStarted");
        // while it runs: no new event; a Ready rebalance is not enough while
        // Kafka still shows a replica on broker 4
        let p = pend(RemoveBrokers, &[3, 4]);
        let pl = placement(2, &[0, 1, 2, 4]);
        let r = observed(RemoveBrokers, &[3, 4], Some(RebalancePhase::Ready));
        i.pending = Some(&p);
        i.placement = Some(&pl);
        i.rebalance = Some(&r);
        let d = decide(&i);
        assert_eq!(d.replicas, 5);
        assert_eq!(d.event, None);
        assert!(d.note.unwrap().message.contains("still on 4"));
    }

    #[test]
    fn the_statefulset_is_lowered_once_the_drained_brokers_hold_nothing() {
        let ready = ids(&[0, 1, 2, 3, 4]);
        let p = pend(RemoveBrokers, &[3, 4]);
        let pl = placement(2, &[0, 1, 2]);
        let mut i = input(3, Some(5), &ready);
        i.pending = Some(&p);
        i.placement = Some(&pl);
        let d = decide(&i);
        assert_eq!(d.replicas, 3);
        assert_eq!(d.pending, None);
        assert_eq!(d.rebalance, RebalanceChange::Delete);
        assert_eq!(d.note, None);
        assert_eq!(d.event.unwrap().reason, "BrokersDrained");
        // brokers that never held anything go at once
        let mut i = input(3, Some(5), &ready);
        i.placement = Some(&pl);
        assert_eq!(decide(&i).replicas, 3);
        // after lowering, the next reconcile is steady
        assert_eq!(decide(&input(3, Some(3), &ids(&[0, 1, 2]))), plain(3));
    }

    #[test]
    fn a_failed_or_stopped_drain_keeps_the_statefulset() {
        let ready = ids(&[0, 1, 2, 3]);
        let p = pend(RemoveBrokers, &[3]);
        let pl = placement(1, &[0, 1, 2, 3]);
        for (phase, why) in [
            (RebalancePhase::Failed, "RebalanceFailed"),
            (RebalancePhase::Stopped, "RebalanceStopped"),
        ] {
            let r = observed(RemoveBrokers, &[3], Some(phase));
            let mut i = input(3, Some(4), &ready);
            i.pending = Some(&p);
            i.placement = Some(&pl);
            i.rebalance = Some(&r);
            let d = decide(&i);
            assert_eq!(d.replicas, 4);
            assert_eq!(reason(&d), Some((why, NoteKind::Problem)));
            assert_eq!(d.rebalance, RebalanceChange::Apply(RemoveBrokers, vec![3]));
        }
    }

    #[test]
    fn a_deeper_scale_down_mid_drain_drains_more() {
        let ready = ids(&[0, 1, 2, 3, 4]);
        let p = pend(RemoveBrokers, &[4]);
        let pl = placement(1, &[0, 1, 2, 3, 4]);
        let mut i = input(3, Some(5), &ready);
        i.pending = Some(&p);
        i.placement = Some(&pl);
        let d = decide(&i);
        assert_eq!(
            d.rebalance,
            RebalanceChange::Apply(RemoveBrokers, vec![3, 4])
        );
        assert_eq!(d.event.unwrap().reason, "DrainStarted");
    }

    #[test]
    fn a_scale_down_given_up_refills_the_drained_brokers() {
        let ready = ids(&[0, 1, 2, 3, 4]);
        let p = pend(RemoveBrokers, &[3, 4]);
        let mut i = input(5, Some(5), &ready);
        i.pending = Some(&p);
        let d = decide(&i);
        assert_eq!(d.replicas, 5);
        assert_eq!(d.pending, Some(pend(AddBrokers, &[3, 4])));
        assert_eq!(d.rebalance, RebalanceChange::Apply(AddBrokers, vec![3, 4]));
        assert_eq!(d.event.unwrap().reason, "ScaleDownCancelled");
        // half given up: 5 -> 3 draining, then replicas 4: broker 4 is
        // drained, and once the StatefulSet is lowered broker 3 is filled
        let mut i = input(4, Some(5), &ready);
        i.pending = Some(&p);
        let pl = placement(1, &[0, 1, 2, 3, 4]);
        i.placement = Some(&pl);
        let d = decide(&i);
        assert_eq!(d.rebalance, RebalanceChange::Apply(RemoveBrokers, vec![4]));
        assert_eq!(
            d.pending,
            Some(pend(RemoveBrokers, &[3, 4])),
            "3 remembered"
        );
        assert_eq!(d.event.unwrap().reason, "DrainStarted");
        let p = d.pending.unwrap();
        i.pending = Some(&p);
        let pl = placement(1, &[0, 1, 2, 3]);
        i.placement = Some(&pl);
        let d = decide(&i);
        assert_eq!(d.replicas, 4);
        assert_eq!(d.rebalance, RebalanceChange::Delete);
        assert_eq!(d.pending, Some(pend(AddBrokers, &[3])));
        let p = d.pending.unwrap();
        let mut i = input(4, Some(4), &ready);
        i.pending = Some(&p);
        assert_eq!(
            decide(&i).rebalance,
            RebalanceChange::Apply(AddBrokers, vec![3])
        );
    }
}
