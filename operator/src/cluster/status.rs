//! Pure status logic of a `KafkaCluster`: from what the controller observed
//! (pods, StatefulSet revision, rollout decision, reconcile error) to the
//! status object and its `Ready` / `Progressing` / `Degraded` conditions, plus
//! the Events a status change deserves. Must not talk to the API server.

use crate::crd::{find_condition, merge_conditions, Condition, KafkaClusterStatus};

use super::rollout::{PodState, RolloutStep};

/// Condition type: all brokers are up and run the current template.
pub const READY: &str = "Ready";
/// Condition type: the operator is moving the cluster towards its spec.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: the spec cannot be honoured or reconciling failed.
pub const DEGRADED: &str = "Degraded";

/// A reconcile problem to report (`reason` is CamelCase).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// What the controller observed in one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterObservation {
    /// `metadata.generation` of the KafkaCluster.
    pub generation: Option<i64>,
    /// `spec.replicas`.
    pub desired_replicas: i32,
    /// The StatefulSet's `status.updateRevision`.
    pub update_revision: Option<String>,
    /// The broker pods.
    pub pods: Vec<PodState>,
    /// The rolling-restart decision taken.
    pub rollout: RolloutStep,
    /// A problem met while reconciling.
    pub problem: Option<Problem>,
    /// `status.selector`.
    pub selector: String,
    /// `status.bootstrapServers`.
    pub bootstrap_servers: String,
}

/// Computes the new status. `now` is an RFC 3339 time for transitions.
pub fn cluster_status(
    old: Option<&KafkaClusterStatus>,
    obs: &ClusterObservation,
    now: &str,
) -> KafkaClusterStatus {
    let live: Vec<&PodState> = obs.pods.iter().filter(|p| !p.terminating).collect();
    let replicas = live.len() as i32;
    let ready = live.iter().filter(|p| p.ready).count() as i32;
    let updated = match obs.update_revision.as_deref() {
        Some(rev) => live
            .iter()
            .filter(|p| p.revision.as_deref() == Some(rev))
            .count() as i32,
        None => 0,
    };
    let desired = obs.desired_replicas;

    let degraded = match &obs.problem {
        Some(p) => Condition::new(DEGRADED, true, &p.reason, p.message.clone()),
        None => Condition::new(DEGRADED, false, "AsExpected", "reconciled without errors"),
    };

    let progressing = match &obs.rollout {
        RolloutStep::Delete { name, .. } => Condition::new(
            PROGRESSING,
            true,
            "RollingRestart",
            format!("restarting {name} to apply the current pod template"),
        ),
        RolloutStep::Wait(why) if updated < desired => Condition::new(
            PROGRESSING,
            true,
            "RollingRestart",
            format!("{updated}/{desired} brokers updated; waiting: {why}"),
        ),
        _ if replicas != desired => Condition::new(
            PROGRESSING,
            true,
            "Scaling",
            format!("{replicas} brokers exist, {desired} desired"),
        ),
        _ if ready < desired => Condition::new(
            PROGRESSING,
            true,
            "BrokersStarting",
            format!("{ready}/{desired} brokers ready"),
        ),
        _ => Condition::new(
            PROGRESSING,
            false,
            "Stable",
            "all brokers run the current spec",
        ),
    };

    let ready_cond = if obs.problem.is_some() {
        Condition::new(
            READY,
            false,
            "ReconcileFailed",
            "see the Degraded condition",
        )
    } else if ready >= desired && updated >= desired && replicas == desired {
        Condition::new(
            READY,
            true,
            "AllBrokersReady",
            format!("{ready}/{desired} brokers ready"),
        )
    } else {
        Condition::new(
            READY,
            false,
            "BrokersNotReady",
            format!("{ready}/{desired} brokers ready"),
        )
    };

    let old_conditions = old.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    KafkaClusterStatus {
        conditions: merge_conditions(
            old_conditions,
            vec![ready_cond, progressing, degraded],
            obs.generation,
            now,
        ),
        observed_generation: obs.generation,
        replicas,
        ready_replicas: ready,
        updated_replicas: updated,
        selector: Some(obs.selector.clone()),
        bootstrap_servers: Some(obs.bootstrap_servers.clone()),
    }
}

/// An Event to publish: `(warning, reason, note)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable note.
    pub note: String,
}

/// Events for condition transitions between the old and the new status.
pub fn status_events(old: Option<&KafkaClusterStatus>, new: &KafkaClusterStatus) -> Vec<EventSpec> {
    let was = |t: &str| {
        old.and_then(|s| find_condition(&s.conditions, t))
            .map(|c| c.is_true())
    };
    let now = |t: &str| find_condition(&new.conditions, t);
    let mut events = Vec::new();
    if let Some(c) = now(READY) {
        if c.is_true() && was(READY) != Some(true) {
            events.push(EventSpec {
                warning: false,
                reason: "ClusterReady".into(),
                note: c.message.clone(),
            });
        }
        if !c.is_true() && was(READY) == Some(true) {
            events.push(EventSpec {
                warning: true,
                reason: "ClusterNotReady".into(),
                note: c.message.clone(),
            });
        }
    }
    if let Some(c) = now(DEGRADED) {
        let old_reason = old
            .and_then(|s| find_condition(&s.conditions, DEGRADED))
            .map(|c| c.reason.clone());
        if c.is_true() && old_reason.as_deref() != Some(c.reason.as_str()) {
            events.push(EventSpec {
                warning: true,
                reason: c.reason.clone(),
                note: c.message.clone(),
            });
        }
    }
    events
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

    fn obs(pods: Vec<PodState>, rollout: RolloutStep) -> ClusterObservation {
        ClusterObservation {
            generation: Some(4),
            desired_replicas: 3,
            update_revision: Some("r2".into()),
            pods,
            rollout,
            problem: None,
            selector: "a=b".into(),
            bootstrap_servers: "demo-bootstrap.ns.svc:9092".into(),
        }
    }

    fn cond<'a>(s: &'a KafkaClusterStatus, t: &str) -> &'a Condition {
        find_condition(&s.conditions, t).unwrap()
    }

    #[test]
    fn all_ready() {
        let o = obs(
            vec![pod(0, "r2", true), pod(1, "r2", true), pod(2, "r2", true)],
            RolloutStep::UpToDate,
        );
        let s = cluster_status(None, &o, "t0");
        assert!(cond(&s, READY).is_true());
        assert!(!cond(&s, PROGRESSING).is_true());
        assert!(!cond(&s, DEGRADED).is_true());
        assert_eq!(
            (s.replicas, s.ready_replicas, s.updated_replicas),
            (3, 3, 3)
        );
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.selector.as_deref(), Some("a=b"));
        assert_eq!(cond(&s, READY).observed_generation, Some(4));
        assert_eq!(cond(&s, READY).last_transition_time.as_deref(), Some("t0"));
    }

    #[test]
    fn rolling_restart_is_progressing_and_not_ready() {
        let o = obs(
            vec![pod(0, "r1", true), pod(1, "r1", true), pod(2, "r2", false)],
            RolloutStep::Wait("pod demo-2 is not ready".into()),
        );
        let s = cluster_status(None, &o, "t0");
        assert!(!cond(&s, READY).is_true());
        assert_eq!(cond(&s, PROGRESSING).reason, "RollingRestart");
        assert_eq!(s.updated_replicas, 1);
    }

    #[test]
    fn scaling_and_starting() {
        let o = obs(vec![pod(0, "r2", true)], RolloutStep::UpToDate);
        let s = cluster_status(None, &o, "t0");
        assert_eq!(cond(&s, PROGRESSING).reason, "Scaling");
        let o = obs(
            vec![pod(0, "r2", true), pod(1, "r2", false), pod(2, "r2", true)],
            RolloutStep::UpToDate,
        );
        let s = cluster_status(None, &o, "t0");
        assert_eq!(cond(&s, PROGRESSING).reason, "BrokersStarting");
        assert_eq!(cond(&s, READY).reason, "BrokersNotReady");
    }

    #[test]
    fn problem_makes_degraded_and_events() {
        let ok = cluster_status(
            None,
            &obs(
                vec![pod(0, "r2", true), pod(1, "r2", true), pod(2, "r2", true)],
                RolloutStep::UpToDate,
            ),
            "t0",
        );
        let mut o = obs(
            vec![pod(0, "r2", true), pod(1, "r2", true), pod(2, "r2", true)],
            RolloutStep::UpToDate,
        );
        o.problem = Some(Problem {
            reason: "ApplyFailed".into(),
            message: "boom".into(),
        });
        let bad = cluster_status(Some(&ok), &o, "t1");
        assert!(cond(&bad, DEGRADED).is_true());
        assert_eq!(cond(&bad, DEGRADED).reason, "ApplyFailed");
        assert!(!cond(&bad, READY).is_true());
        let events = status_events(Some(&ok), &bad);
        assert!(events
            .iter()
            .any(|e| e.reason == "ClusterNotReady" && e.warning));
        assert!(events.iter().any(|e| e.reason == "ApplyFailed"));
        // the same problem again does not repeat the event
        let again = cluster_status(Some(&bad), &o, "t2");
        assert!(status_events(Some(&bad), &again).is_empty());
        assert_eq!(
            cond(&again, DEGRADED).last_transition_time.as_deref(),
            Some("t1")
        );
        // recovery
        let events = status_events(Some(&bad), &ok);
        assert_eq!(
            events,
            vec![EventSpec {
                warning: false,
                reason: "ClusterReady".into(),
                note: "3/3 brokers ready".into()
            }]
        );
    }

    #[test]
    fn terminating_pods_do_not_count() {
        let mut p = pod(2, "r2", true);
        p.terminating = true;
        let o = obs(
            vec![pod(0, "r2", true), pod(1, "r2", true), p],
            RolloutStep::UpToDate,
        );
        let s = cluster_status(None, &o, "t0");
        assert_eq!(s.replicas, 2);
        assert!(!cond(&s, READY).is_true());
    }
}
