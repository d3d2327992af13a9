//! The rolling-restart planner: which broker pod to delete next so that the
//! StatefulSet (update strategy `OnDelete`) recreates it from the current
//! template revision.
//!
//! Policy: one pod at a time, highest ordinal first, and only when every other
//! pod exists and is Ready **and no partition is under-replicated or
//! offline** ([`super::health`]), so at most one broker is ever down and a
//! restart never takes a second replica of a partition out of sync; the next
//! broker waits until the one restarted is back in every ISR it left. An
//! outdated pod that is the only one not Ready is replaced first (it is not
//! serving, so replacing it costs no availability, and the new template may
//! be the fix). When the replicas' health cannot be read, the roll waits.
//! A roll held by a gate ([`RolloutStep::Held`]) is never forced on; the
//! status reports it, and reports it stalled past the cluster's
//! `spec.rollout.stallTimeoutSeconds`. Owns only the decision; deleting is
//! the controller's job.

use super::health::HealthView;
use super::pods::PodState;

/// The planner's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RolloutStep {
    /// Every pod runs the update revision.
    UpToDate,
    /// Nothing to delete now; the reason says what we wait for (a state
    /// Kubernetes moves on by itself: a revision, a pod being created or
    /// terminated).
    Wait(String),
    /// A broker is due for a restart, but a health gate holds the roll.
    Held(Hold),
    /// Delete this pod now.
    Delete {
        /// Pod name.
        name: String,
        /// Pod ordinal.
        ordinal: i32,
    },
}

/// Why a due restart is held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// What holds it.
    pub gate: Gate,
    /// The broker waited for (the one not Ready), if one.
    pub broker: Option<i32>,
    /// For the status: what is waited for.
    pub message: String,
}

/// The health gates of a rolling restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// A broker (typically the one just restarted) is not Ready.
    BrokerNotReady,
    /// Some partition is under-replicated or offline.
    UnderReplicated,
    /// The replicas' health could not be read.
    HealthUnknown,
}

impl Gate {
    /// CamelCase reason for conditions.
    pub fn reason(self) -> &'static str {
        match self {
            Gate::BrokerNotReady => "BrokerNotReady",
            Gate::UnderReplicated => "PartitionsUnderReplicated",
            Gate::HealthUnknown => "ReplicaHealthUnknown",
        }
    }
}

/// Whether some pod of the first `desired` runs another revision than
/// `update_revision` (the replicas' health is read only then).
pub fn roll_pending(desired: i32, update_revision: Option<&str>, pods: &[PodState]) -> bool {
    update_revision.is_some_and(|rev| {
        pods.iter()
            .any(|p| p.ordinal < desired && p.revision.as_deref() != Some(rev))
    })
}

/// Plans the next rolling-restart step. `desired` is the StatefulSet's replica
/// count and `update_revision` its `status.updateRevision` (None until the
/// StatefulSet controller has observed it); `health` is the replicas'
/// health as the controller recorded it.
pub fn next_step(
    desired: i32,
    update_revision: Option<&str>,
    pods: &[PodState],
    health: &HealthView,
) -> RolloutStep {
    let Some(update_revision) = update_revision.filter(|r| !r.is_empty()) else {
        return RolloutStep::Wait("StatefulSet has no update revision yet".into());
    };
    // Pods beyond the desired count are being scaled away; ignore them.
    let mut pods: Vec<&PodState> = pods.iter().filter(|p| p.ordinal < desired).collect();
    pods.sort_by_key(|p| std::cmp::Reverse(p.ordinal));
    let outdated = |p: &PodState| p.revision.as_deref() != Some(update_revision);
    if !pods.iter().any(|p| outdated(p)) {
        return RolloutStep::UpToDate;
    }
    if let Some(p) = pods.iter().find(|p| p.terminating) {
        return RolloutStep::Wait(format!("pod {} is terminating", p.name));
    }
    if (pods.len() as i32) < desired {
        return RolloutStep::Wait(format!("{} of {} pods exist", pods.len(), desired));
    }
    let not_ready: Vec<&PodState> = pods.iter().copied().filter(|p| !p.ready).collect();
    match not_ready[..] {
        [] => {}
        // The only unavailable broker may be replaced: at most one stays down.
        [p] if outdated(p) => {
            return RolloutStep::Delete {
                name: p.name.clone(),
                ordinal: p.ordinal,
            };
        }
        [p, ..] => {
            return RolloutStep::Held(Hold {
                gate: Gate::BrokerNotReady,
                broker: Some(p.ordinal),
                message: format!("broker {} (pod {}) is not Ready", p.ordinal, p.name),
            })
        }
    }
    let Some(p) = pods.iter().find(|p| outdated(p)) else {
        return RolloutStep::UpToDate;
    };
    match health {
        HealthView::Unknown(why) => RolloutStep::Held(Hold {
            gate: Gate::HealthUnknown,
            broker: None,
            message: format!(
                "broker {} is next, but the replicas' health is unknown: {why}",
                p.ordinal
            ),
        }),
        HealthView::Known(h) if !h.is_healthy() => RolloutStep::Held(Hold {
            gate: Gate::UnderReplicated,
            broker: None,
            message: format!(
                "broker {} is next once every partition is in sync: {}",
                p.ordinal,
                h.summary()
            ),
        }),
        HealthView::Known(_) => RolloutStep::Delete {
            name: p.name.clone(),
            ordinal: p.ordinal,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::health::ReplicaHealth;

    fn healthy() -> HealthView {
        HealthView::Known(ReplicaHealth::default())
    }

    fn next_step(desired: i32, rev: Option<&str>, pods: &[PodState]) -> RolloutStep {
        super::next_step(desired, rev, pods, &healthy())
    }

    fn pod(ordinal: i32, rev: &str, ready: bool) -> PodState {
        PodState {
            name: format!("demo-{ordinal}"),
            ordinal,
            revision: Some(rev.into()),
            ready,
            terminating: false,
            containers: Vec::new(),
        }
    }

    #[test]
    fn up_to_date() {
        let pods = [pod(0, "r2", true), pod(1, "r2", true)];
        assert_eq!(next_step(2, Some("r2"), &pods), RolloutStep::UpToDate);
    }

    #[test]
    fn no_revision_waits() {
        assert!(matches!(
            next_step(1, None, &[pod(0, "r1", true)]),
            RolloutStep::Wait(_)
        ));
        assert!(matches!(
            next_step(1, Some(""), &[pod(0, "r1", true)]),
            RolloutStep::Wait(_)
        ));
    }

    #[test]
    fn highest_ordinal_first() {
        let pods = [pod(0, "r1", true), pod(1, "r1", true), pod(2, "r1", true)];
        assert_eq!(
            next_step(3, Some("r2"), &pods),
            RolloutStep::Delete {
                name: "demo-2".into(),
                ordinal: 2
            }
        );
    }

    #[test]
    fn waits_for_recreated_pod_to_be_ready() {
        let pods = [pod(0, "r1", true), pod(1, "r1", true), pod(2, "r2", false)];
        assert_eq!(
            next_step(3, Some("r2"), &pods),
            RolloutStep::Held(Hold {
                gate: Gate::BrokerNotReady,
                broker: Some(2),
                message: "broker 2 (pod demo-2) is not Ready".into()
            })
        );
        let pods = [pod(0, "r1", true), pod(1, "r1", true), pod(2, "r2", true)];
        assert_eq!(
            next_step(3, Some("r2"), &pods),
            RolloutStep::Delete {
                name: "demo-1".into(),
                ordinal: 1
            }
        );
    }

    #[test]
    fn waits_while_a_pod_terminates_or_is_missing() {
        let mut p2 = pod(2, "r1", true);
        p2.terminating = true;
        let pods = [pod(0, "r1", true), pod(1, "r1", true), p2];
        assert!(matches!(
            next_step(3, Some("r2"), &pods),
            RolloutStep::Wait(_)
        ));
        let pods = [pod(0, "r1", true), pod(2, "r2", true)];
        assert!(matches!(
            next_step(3, Some("r2"), &pods),
            RolloutStep::Wait(_)
        ));
    }

    #[test]
    fn broken_outdated_pod_is_replaced_first() {
        let pods = [pod(0, "r1", false), pod(1, "r1", true), pod(2, "r1", true)];
        assert_eq!(
            next_step(3, Some("r2"), &pods),
            RolloutStep::Delete {
                name: "demo-0".into(),
                ordinal: 0
            }
        );
    }

    #[test]
    fn never_a_second_broker_down() {
        // demo-1 was just replaced and is starting; demo-0 flaps not-ready.
        let pods = [pod(0, "r1", false), pod(1, "r2", false), pod(2, "r2", true)];
        assert!(matches!(
            next_step(3, Some("r2"), &pods),
            RolloutStep::Held(Hold {
                gate: Gate::BrokerNotReady,
                ..
            })
        ));
        let pods = [pod(0, "r1", false), pod(1, "r1", false), pod(2, "r1", true)];
        assert!(matches!(
            next_step(3, Some("r2"), &pods),
            RolloutStep::Held(_)
        ));
    }

    #[test]
    fn pods_being_scaled_away_are_ignored() {
        let pods = [pod(0, "r2", true), pod(1, "r1", false)];
        assert_eq!(next_step(1, Some("r2"), &pods), RolloutStep::UpToDate);
    }

    #[test]
    fn never_while_a_partition_is_under_replicated_or_health_is_unknown() {
        // demo-2 was restarted and is Ready, but not yet back in every ISR.
        let pods = [pod(0, "r1", true), pod(1, "r1", true), pod(2, "r2", true)];
        let lagging = HealthView::Known(ReplicaHealth {
            under_replicated: vec!["t-0".into(), "t-3".into()],
            offline: vec![],
        });
        let RolloutStep::Held(hold) = super::next_step(3, Some("r2"), &pods, &lagging) else {
            panic!("a restart while t-0 and t-3 are under-replicated");
        };
        assert_eq!(hold.gate, Gate::UnderReplicated);
        assert_eq!(hold.gate.reason(), "PartitionsUnderReplicated");
        assert!(
            hold.message.contains("broker 1 is next"),
            "{}",
            hold.message
        );
        assert!(hold.message.contains("t-0, t-3"), "{}", hold.message);
        let offline = HealthView::Known(ReplicaHealth {
            under_replicated: vec![],
            offline: vec!["t-1".into()],
        });
        assert!(matches!(
            super::next_step(3, Some("r2"), &pods, &offline),
            RolloutStep::Held(Hold {
                gate: Gate::UnderReplicated,
                ..
            })
        ));
        let unknown = HealthView::Unknown("no record".into());
        assert!(matches!(
            super::next_step(3, Some("r2"), &pods, &unknown),
            RolloutStep::Held(Hold {
                gate: Gate::HealthUnknown,
                ..
            })
        ));
        // back in sync: the roll goes on
        assert_eq!(
            next_step(3, Some("r2"), &pods),
            RolloutStep::Delete {
                name: "demo-1".into(),
                ordinal: 1
            }
        );
        // nothing due: health does not matter
        let done = [pod(0, "r2", true), pod(1, "r2", true), pod(2, "r2", true)];
        assert_eq!(
            super::next_step(3, Some("r2"), &done, &lagging),
            RolloutStep::UpToDate
        );
    }

    #[test]
    fn a_broken_outdated_pod_is_replaced_even_while_its_partitions_lag() {
        // it is down, so its partitions are under-replicated: replacing it
        // takes nothing more out of sync
        let pods = [pod(0, "r1", true), pod(1, "r1", false), pod(2, "r1", true)];
        let lagging = HealthView::Known(ReplicaHealth {
            under_replicated: vec!["t-0".into()],
            offline: vec![],
        });
        assert_eq!(
            super::next_step(3, Some("r2"), &pods, &lagging),
            RolloutStep::Delete {
                name: "demo-1".into(),
                ordinal: 1
            }
        );
    }
}
