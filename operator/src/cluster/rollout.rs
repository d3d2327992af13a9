//! The rolling-restart planner: which broker pod to delete next so that the
//! StatefulSet (update strategy `OnDelete`) recreates it from the current
//! template revision.
//!
//! Policy: one pod at a time, highest ordinal first, and only when every other
//! pod exists and is Ready, so at most one broker is ever down. An outdated pod
//! that is the only one not Ready is replaced first (it is not serving, so
//! replacing it costs no availability, and the new template may be the fix). Owns only the decision; deleting is the controller's job.

/// What the planner knows about one broker pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodState {
    /// Pod name.
    pub name: String,
    /// StatefulSet ordinal.
    pub ordinal: i32,
    /// Its `controller-revision-hash` label.
    pub revision: Option<String>,
    /// Ready condition is True.
    pub ready: bool,
    /// Has a deletionTimestamp.
    pub terminating: bool,
}

/// The planner's decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RolloutStep {
    /// Every pod runs the update revision.
    UpToDate,
    /// Nothing to delete now; the reason says what we wait for.
    Wait(String),
    /// Delete this pod now.
    Delete {
        /// Pod name.
        name: String,
        /// Pod ordinal.
        ordinal: i32,
    },
}

/// Plans the next rolling-restart step. `desired` is the StatefulSet's replica
/// count and `update_revision` its `status.updateRevision` (None until the
/// StatefulSet controller has observed it).
pub fn next_step(desired: i32, update_revision: Option<&str>, pods: &[PodState]) -> RolloutStep {
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
        [p, ..] => return RolloutStep::Wait(format!("pod {} is not ready", p.name)),
    }
    match pods.iter().find(|p| outdated(p)) {
        Some(p) => RolloutStep::Delete {
            name: p.name.clone(),
            ordinal: p.ordinal,
        },
        None => RolloutStep::UpToDate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ordinal: i32, rev: &str, ready: bool) -> PodState {
        PodState {
            name: format!("demo-{ordinal}"),
            ordinal,
            revision: Some(rev.into()),
            ready,
            terminating: false,
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
            RolloutStep::Wait("pod demo-2 is not ready".into())
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
            RolloutStep::Wait(_)
        ));
        let pods = [pod(0, "r1", false), pod(1, "r1", false), pod(2, "r1", true)];
        assert!(matches!(
            next_step(3, Some("r2"), &pods),
            RolloutStep::Wait(_)
        ));
    }

    #[test]
    fn pods_being_scaled_away_are_ignored() {
        let pods = [pod(0, "r2", true), pod(1, "r1", false)];
        assert_eq!(next_step(1, Some("r2"), &pods), RolloutStep::UpToDate);
    }
}
