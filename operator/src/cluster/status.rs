//! Pure status logic of a `KafkaCluster`: from what the controller observed
//! (pods, StatefulSet revision, rollout decision, reconcile error, the
//! brokers' cluster record) to the status object and its `Ready` /
//! `Progressing` / `Degraded` conditions, plus the Events a status change
//! deserves. Must not talk to the API server.
//!
//! `Ready=True` means one Kafka cluster: every desired broker pod is Ready
//! and runs the current template, and every desired node id (the pod
//! ordinals `0..replicas`) is registered, not fenced, with the one
//! controller the cluster record names. Ready pods alone are not enough: a
//! broker that never joined the cluster serves a cluster of its own.

use crate::crd::{
    find_condition, merge_conditions, AutoRebalanceStatus, Condition, KafkaClusterStatus,
    RolloutHoldStatus,
};

use super::membership::Membership;
use super::rollout::{PodState, RolloutStep};
use super::scaling::{NoteKind, ScaleNote};

/// Condition type: all brokers are up, run the current template and are
/// registered with one controller.
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
    /// The brokers' cluster record.
    pub membership: Membership,
    /// What a scale is doing (`scaling::decide`).
    pub scaling: Option<ScaleNote>,
    /// The scale's partition move in progress (`status.autoRebalance`).
    pub auto_rebalance: Option<AutoRebalanceStatus>,
    /// `spec.rollout.stallTimeoutSeconds`.
    pub stall_timeout_seconds: i64,
}

/// The hold to report: the planner's, since the time the roll first waited
/// at this gate for this broker (kept from the old status), else now.
fn rollout_hold(
    old: Option<&KafkaClusterStatus>,
    step: &RolloutStep,
    now: &str,
) -> Option<RolloutHoldStatus> {
    let RolloutStep::Held(hold) = step else {
        return None;
    };
    let reason = hold.gate.reason().to_string();
    let since = old
        .and_then(|s| s.rollout_hold.as_ref())
        .filter(|h| h.reason == reason && h.broker == hold.broker)
        .map(|h| h.since.clone())
        .unwrap_or_else(|| now.to_string());
    Some(RolloutHoldStatus {
        reason,
        broker: hold.broker,
        message: hold.message.clone(),
        since,
    })
}

/// Whole seconds from `since` to `now` (RFC 3339); 0 when either does not
/// parse.
fn seconds_between(since: &str, now: &str) -> i64 {
    use k8s_openapi::jiff::Timestamp;
    match (since.parse::<Timestamp>(), now.parse::<Timestamp>()) {
        (Ok(a), Ok(b)) => b.as_second() - a.as_second(),
        _ => 0,
    }
}

/// Node ids `0..desired` that are not registered (unfenced) in `view`.
fn unregistered(desired: i32, registered: &[i32]) -> Vec<i32> {
    (0..desired.max(0))
        .filter(|id| !registered.contains(id))
        .collect()
}

fn list(ids: &[i32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why the brokers are not one registered cluster, as `(reason, message)`;
/// None when every desired broker is registered with the controller.
fn membership_gap(desired: i32, membership: &Membership) -> Option<(&'static str, String)> {
    match membership {
        Membership::Absent => Some((
            "NoController",
            "no controller elected yet: the brokers' cluster record does not exist".into(),
        )),
        Membership::Unreadable(why) => Some(("ClusterRecordUnreadable", why.clone())),
        Membership::Known(v) => {
            let Some(controller) = v.controller else {
                return Some((
                    "NoController",
                    format!(
                        "the cluster record names no active controller (epoch {})",
                        v.epoch
                    ),
                ));
            };
            let missing = unregistered(desired, &v.registered);
            (!missing.is_empty()).then(|| {
                (
                    "BrokersNotRegistered",
                    format!(
                        "{}/{desired} brokers registered with controller {controller}; not registered: {}",
                        desired - missing.len() as i32,
                        list(&missing)
                    ),
                )
            })
        }
    }
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

    let scale_note = |kind: NoteKind| obs.scaling.as_ref().filter(|n| n.kind == kind);
    let hold = rollout_hold(old, &obs.rollout, now);
    let stalled = hold.as_ref().and_then(|h| {
        let waited = seconds_between(&h.since, now);
        (waited >= obs.stall_timeout_seconds).then(|| {
            let at = h.broker.map(|b| format!(" at broker {b}")).unwrap_or_default();
            format!(
                "rolling restart held{at} for {waited}s (limit {}s): {}; it is not forced on and goes on by itself once that is resolved",
                obs.stall_timeout_seconds, h.message
            )
        })
    });
    let degraded = match (&obs.problem, scale_note(NoteKind::Problem), stalled) {
        (Some(p), _, _) => Condition::new(DEGRADED, true, &p.reason, p.message.clone()),
        (None, Some(n), _) => Condition::new(DEGRADED, true, n.reason, n.message.clone()),
        (None, None, Some(message)) => {
            Condition::new(DEGRADED, true, "RollingRestartStalled", message)
        }
        (None, None, None) => {
            Condition::new(DEGRADED, false, "AsExpected", "reconciled without errors")
        }
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
        RolloutStep::Held(h) => Condition::new(
            PROGRESSING,
            true,
            "RollingRestart",
            format!("{updated}/{desired} brokers updated; held: {}", h.message),
        ),
        _ if scale_note(NoteKind::Progress).is_some() => {
            let n = scale_note(NoteKind::Progress).expect("checked");
            Condition::new(PROGRESSING, true, n.reason, n.message.clone())
        }
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
        _ if matches!(
            membership_gap(desired, &obs.membership),
            Some(("BrokersNotRegistered" | "NoController", _))
        ) =>
        {
            Condition::new(
                PROGRESSING,
                true,
                "BrokersRegistering",
                "brokers are ready; waiting for them to register with a controller",
            )
        }
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
    } else if !(ready >= desired && updated >= desired && replicas == desired) {
        Condition::new(
            READY,
            false,
            "BrokersNotReady",
            format!("{ready}/{desired} brokers ready"),
        )
    } else if let Some((reason, message)) = membership_gap(desired, &obs.membership) {
        Condition::new(READY, false, reason, message)
    } else {
        let (controller, epoch) = obs
            .membership
            .view()
            .map(|v| (v.controller.unwrap_or(-1), v.epoch))
            .unwrap_or((-1, 0));
        Condition::new(
            READY,
            true,
            "AllBrokersRegistered",
            format!(
                "{desired}/{desired} brokers ready and registered with controller {controller} (epoch {epoch})"
            ),
        )
    };
    let view = obs.membership.view();

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
        controller: view.and_then(|v| v.controller),
        controller_epoch: view.map(|v| v.epoch),
        registered_brokers: view.map(|v| v.registered.clone()).unwrap_or_default(),
        auto_rebalance: obs.auto_rebalance.clone(),
        rollout_hold: hold,
    }
}

/// The merge patch that writes `status`: fields the status leaves out (no
/// controller, no registered broker) are sent as `null`, so a merge patch
/// removes a value that is no longer true instead of keeping it.
pub fn status_patch(status: &KafkaClusterStatus) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Some(obj) = value.as_object_mut() {
        for key in [
            "controller",
            "controllerEpoch",
            "registeredBrokers",
            "rolloutHold",
            "autoRebalance",
        ] {
            obj.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    serde_json::json!({ "status": value })
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
    use crate::cluster::membership::ClusterView;

    fn known(controller: Option<i32>, epoch: i64, registered: &[i32]) -> Membership {
        Membership::Known(ClusterView {
            controller,
            epoch,
            registered: registered.to_vec(),
        })
    }

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
            membership: known(Some(1), 5, &[0, 1, 2]),
            scaling: None,
            auto_rebalance: None,
            stall_timeout_seconds: 300,
        }
    }

    fn all_pods_ready() -> Vec<PodState> {
        vec![pod(0, "r2", true), pod(1, "r2", true), pod(2, "r2", true)]
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
        assert_eq!(cond(&s, READY).reason, "AllBrokersRegistered");
        assert_eq!(
            cond(&s, READY).message,
            "3/3 brokers ready and registered with controller 1 (epoch 5)"
        );
        assert_eq!(s.controller, Some(1));
        assert_eq!(s.controller_epoch, Some(5));
        assert_eq!(s.registered_brokers, vec![0, 1, 2]);
        assert_eq!(s.selector.as_deref(), Some("a=b"));
        assert_eq!(cond(&s, READY).observed_generation, Some(4));
        assert_eq!(cond(&s, READY).last_transition_time.as_deref(), Some("t0"));
    }

    #[test]
    fn rolling_restart_is_progressing_and_not_ready() {
        let o = obs(
            vec![pod(0, "r1", true), pod(1, "r1", true), pod(2, "r2", false)],
            RolloutStep::Wait("pod demo-2 is terminating".into()),
        );
        let s = cluster_status(None, &o, "t0");
        assert!(!cond(&s, READY).is_true());
        assert_eq!(cond(&s, PROGRESSING).reason, "RollingRestart");
        assert_eq!(s.updated_replicas, 1);
    }

    #[test]
    fn a_held_roll_is_reported_and_stalls_after_the_timeout() {
        use crate::cluster::rollout::{Gate, Hold};
        let pods = vec![pod(0, "r1", true), pod(1, "r1", true), pod(2, "r2", true)];
        let held = |broker: Option<i32>, gate: Gate| {
            obs(
                pods.clone(),
                RolloutStep::Held(Hold {
                    gate,
                    broker,
                    message: "broker 1 is next once every partition is in sync: 1 under-replicated partition(s) (t-0)".into(),
                }),
            )
        };
        let o = held(None, Gate::UnderReplicated);
        let t0 = "2026-12-02T10:00:00Z";
        let s1 = cluster_status(None, &o, t0);
        assert_eq!(cond(&s1, PROGRESSING).reason, "RollingRestart");
        assert!(cond(&s1, PROGRESSING)
            .message
            .contains("held: broker 1 is next"));
        assert!(!cond(&s1, DEGRADED).is_true());
        let h = s1.rollout_hold.clone().unwrap();
        assert_eq!(h.reason, "PartitionsUnderReplicated");
        assert_eq!(h.since, t0);
        // still held 299 s later: not yet stalled, the start time kept
        let s2 = cluster_status(Some(&s1), &o, "2026-12-02T10:04:59Z");
        assert_eq!(s2.rollout_hold.as_ref().unwrap().since, t0);
        assert!(!cond(&s2, DEGRADED).is_true());
        assert!(status_events(Some(&s1), &s2).is_empty());
        // 300 s: stalled, with a Warning Event once
        let s3 = cluster_status(Some(&s2), &o, "2026-12-02T10:05:00Z");
        let d = cond(&s3, DEGRADED);
        assert!(d.is_true());
        assert_eq!(d.reason, "RollingRestartStalled");
        assert!(
            d.message.contains("held for 300s (limit 300s)"),
            "{}",
            d.message
        );
        assert!(d.message.contains("t-0"), "{}", d.message);
        let events = status_events(Some(&s2), &s3);
        assert!(
            events
                .iter()
                .any(|e| e.warning && e.reason == "RollingRestartStalled"),
            "{events:?}"
        );
        // another gate starts its own clock
        let other = held(Some(2), Gate::BrokerNotReady);
        let s4 = cluster_status(Some(&s3), &other, "2026-12-02T10:06:00Z");
        let h4 = s4.rollout_hold.as_ref().unwrap();
        assert_eq!(
            (h4.broker, h4.since.as_str()),
            (Some(2), "2026-12-02T10:06:00Z")
        );
        assert!(!cond(&s4, DEGRADED).is_true());
        // the gate opens: no hold, not degraded
        let going = obs(
            pods.clone(),
            RolloutStep::Delete {
                name: "demo-1".into(),
                ordinal: 1,
            },
        );
        let s5 = cluster_status(Some(&s3), &going, "2026-12-02T10:07:00Z");
        assert_eq!(s5.rollout_hold, None);
        assert!(!cond(&s5, DEGRADED).is_true());
        assert_eq!(
            status_patch(&s5)["status"]["rolloutHold"],
            serde_json::Value::Null
        );
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
                note: "3/3 brokers ready and registered with controller 1 (epoch 5)".into()
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

    #[test]
    fn ready_pods_without_a_controller_are_not_ready() {
        // Today's failure: three Ready pods, each its own one-broker cluster.
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        o.membership = Membership::Absent;
        let s = cluster_status(None, &o, "t0");
        assert!(!cond(&s, READY).is_true());
        assert_eq!(cond(&s, READY).reason, "NoController");
        assert_eq!(cond(&s, PROGRESSING).reason, "BrokersRegistering");
        assert_eq!((s.controller, s.controller_epoch), (None, None));
        assert!(s.registered_brokers.is_empty());
        assert_eq!(s.ready_replicas, 3);

        o.membership = known(None, 2, &[0]);
        let s = cluster_status(None, &o, "t0");
        assert_eq!(cond(&s, READY).reason, "NoController");
        assert_eq!(s.controller, None);
        assert_eq!(s.controller_epoch, Some(2));
        assert_eq!(s.registered_brokers, vec![0]);
    }

    #[test]
    fn brokers_not_registered_says_which() {
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        o.membership = known(Some(1), 3, &[0, 1]);
        let s = cluster_status(None, &o, "t0");
        let ready = cond(&s, READY);
        assert!(!ready.is_true());
        assert_eq!(ready.reason, "BrokersNotRegistered");
        assert_eq!(
            ready.message,
            "2/3 brokers registered with controller 1; not registered: 2"
        );
        assert_eq!(cond(&s, PROGRESSING).reason, "BrokersRegistering");
        assert_eq!(s.registered_brokers, vec![0, 1]);
        // A registered broker outside 0..replicas does not stand in for a
        // missing one.
        o.membership = known(Some(1), 3, &[0, 1, 5]);
        let s = cluster_status(None, &o, "t0");
        assert_eq!(cond(&s, READY).reason, "BrokersNotRegistered");
        // ... and one left over after a scale-down does not block Ready.
        o.membership = known(Some(1), 3, &[0, 1, 2, 3]);
        let s = cluster_status(None, &o, "t0");
        assert!(cond(&s, READY).is_true());
    }

    #[test]
    fn unreadable_record_is_reported() {
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        o.membership = Membership::Unreadable("spec.clusterRecord is invalid: x".into());
        let s = cluster_status(None, &o, "t0");
        assert_eq!(cond(&s, READY).reason, "ClusterRecordUnreadable");
        assert!(cond(&s, READY).message.contains("invalid"));
        assert_eq!(cond(&s, PROGRESSING).reason, "Stable");
    }

    #[test]
    fn pods_not_ready_come_before_registration() {
        let mut o = obs(
            vec![pod(0, "r2", true), pod(1, "r2", false), pod(2, "r2", true)],
            RolloutStep::UpToDate,
        );
        o.membership = Membership::Absent;
        let s = cluster_status(None, &o, "t0");
        assert_eq!(cond(&s, READY).reason, "BrokersNotReady");
        assert_eq!(cond(&s, PROGRESSING).reason, "BrokersStarting");
    }

    #[test]
    fn registration_transitions_and_events() {
        // scale 1 -> 3: pods come up, register one by one, then Ready.
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        o.membership = known(Some(0), 1, &[0]);
        let s1 = cluster_status(None, &o, "t0");
        assert_eq!(cond(&s1, READY).reason, "BrokersNotRegistered");
        assert!(cond(&s1, READY).message.starts_with("1/3 "));
        o.membership = known(Some(0), 1, &[0, 1, 2]);
        let s2 = cluster_status(Some(&s1), &o, "t1");
        assert!(cond(&s2, READY).is_true());
        assert_eq!(cond(&s2, READY).last_transition_time.as_deref(), Some("t1"));
        assert_eq!(
            status_events(Some(&s1), &s2),
            vec![EventSpec {
                warning: false,
                reason: "ClusterReady".into(),
                note: "3/3 brokers ready and registered with controller 0 (epoch 1)".into()
            }]
        );
        // broker 2 is fenced: not Ready, with a warning Event.
        o.membership = known(Some(0), 1, &[0, 1]);
        let s3 = cluster_status(Some(&s2), &o, "t2");
        assert_eq!(cond(&s3, READY).reason, "BrokersNotRegistered");
        let events = status_events(Some(&s2), &s3);
        assert!(events
            .iter()
            .any(|e| e.reason == "ClusterNotReady" && e.warning));
        // failover: a new controller with a higher epoch.
        o.membership = known(Some(2), 2, &[0, 1, 2]);
        let s4 = cluster_status(Some(&s3), &o, "t3");
        assert!(cond(&s4, READY).is_true());
        assert_eq!((s4.controller, s4.controller_epoch), (Some(2), Some(2)));
    }

    #[test]
    fn a_lost_controller_is_removed_by_the_patch() {
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        o.membership = Membership::Absent;
        let patch = status_patch(&cluster_status(None, &o, "t0"));
        assert!(patch["status"]["controller"].is_null());
        assert!(patch["status"]
            .as_object()
            .unwrap()
            .contains_key("registeredBrokers"));
        assert!(patch["status"]["registeredBrokers"].is_null());
        assert_eq!(patch["status"]["replicas"], 3);
    }

    #[test]
    fn status_fields_serialize_in_camel_case() {
        let s = cluster_status(None, &obs(all_pods_ready(), RolloutStep::UpToDate), "t0");
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["controller"], 1);
        assert_eq!(json["controllerEpoch"], 5);
        assert_eq!(json["registeredBrokers"], serde_json::json!([0, 1, 2]));
    }

    #[test]
    fn a_refused_scale_down_is_degraded_with_a_warning_and_the_brokers_stay_ready() {
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        let ready = cluster_status(None, &o, "t0");
        o.scaling = Some(ScaleNote {
            kind: NoteKind::Problem,
            reason: "ScaleDownRefused",
            message: "topic t has replication factor 2".into(),
        });
        let s = cluster_status(Some(&ready), &o, "t1");
        let d = find_condition(&s.conditions, DEGRADED).unwrap();
        assert!(d.is_true());
        assert_eq!(d.reason, "ScaleDownRefused");
        assert!(find_condition(&s.conditions, READY).unwrap().is_true());
        let events = status_events(Some(&ready), &s);
        assert_eq!(events.len(), 1);
        assert!(events[0].warning);
        assert_eq!(events[0].reason, "ScaleDownRefused");
        // once, not on every reconcile
        assert!(status_events(Some(&s), &cluster_status(Some(&s), &o, "t2")).is_empty());
    }

    #[test]
    fn a_drain_is_progress_and_the_pending_move_is_in_the_status() {
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        o.scaling = Some(ScaleNote {
            kind: NoteKind::Progress,
            reason: "DrainingBrokers",
            message: "moving every replica off brokers 2".into(),
        });
        o.auto_rebalance = Some(AutoRebalanceStatus {
            mode: crate::crd::RebalanceMode::RemoveBrokers,
            brokers: vec![2],
            rebalance: "demo-auto-rebalance".into(),
        });
        let s = cluster_status(None, &o, "t0");
        let p = find_condition(&s.conditions, PROGRESSING).unwrap();
        assert!(p.is_true());
        assert_eq!(p.reason, "DrainingBrokers");
        assert!(!find_condition(&s.conditions, DEGRADED).unwrap().is_true());
        assert_eq!(s.auto_rebalance, o.auto_rebalance);
        let patch = status_patch(&cluster_status(
            None,
            &obs(all_pods_ready(), RolloutStep::UpToDate),
            "t0",
        ));
        assert!(patch["status"]["autoRebalance"].is_null());
        assert!(patch["status"].get("autoRebalance").is_some());
    }
}
