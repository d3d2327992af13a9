//! Pure status logic of a `KafkaCluster`: from what the controller observed
//! (pods and their containers' restarts, StatefulSet revision, rollout
//! decision, refused spec, reconcile error, the brokers' cluster record) to
//! the status object and its `Ready` / `Progressing` / `Degraded` /
//! `ConfigAccepted` conditions, plus the Events a status change deserves.
//! Must not talk to the API server.
//!
//! `Ready` is about serving. `Ready=True` means one Kafka cluster: every
//! desired broker pod is Ready and runs the current template, and every
//! desired node id (the pod ordinals `0..replicas`) is registered, not
//! fenced, with the one controller the cluster record names. Ready pods
//! alone are not enough: a broker that never joined the cluster serves a
//! cluster of its own. When it is False its message names what is missing
//! (which brokers are not Ready and why, which have no pod, which still run
//! the previous template, which are not registered). A refused spec or a
//! failed apply does not make serving brokers un-Ready: a refused spec is
//! `ConfigAccepted=False ConfigRefused`, and like every other problem
//! `Degraded=True` with its reason.
//!
//! `Degraded` says every problem at once: its reason is the first of a
//! refused spec, a failed reconcile, crash-looping brokers
//! ([`super::restarts`]), a scale's problem and a stalled roll; its message
//! has them all. Its messages do not change while the problem stays the same,
//! so a Warning Event is published whenever the reason or the message
//! changes ([`status_events`]): every distinct refusal is told once.
//!
//! `Progressing` names what moves: `RollingRestart` only while some pod runs
//! an older template than the StatefulSet's, a scale's own reasons
//! (`ScalingOut`, `ScalingIn`, and those of [`super::scaling`]) otherwise.

use crate::crd::{
    find_condition, merge_conditions, AutoRebalanceStatus, Condition, KafkaClusterStatus,
    ListenerStatus, RolloutHoldStatus,
};
use crate::events::EventSpec;

use super::membership::Membership;
use super::pods::PodState;
use super::restarts::{crash_loops, not_ready_detail};
use super::rollout::{roll_pending, RolloutStep};
use super::scaling::{NoteKind, ScaleNote};

/// Condition type: all brokers are up, run the current template and are
/// registered with one controller.
pub const READY: &str = "Ready";
/// Condition type: the operator is moving the cluster towards its spec.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: the spec cannot be honoured, reconciling failed, or
/// brokers crash-loop.
pub const DEGRADED: &str = "Degraded";
/// Condition type: the spec (`spec.config`, the ports) passed the checks
/// and is what the brokers are given.
pub const CONFIG_ACCEPTED: &str = "ConfigAccepted";

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
    /// Why the spec is refused (`validate`): nothing was applied.
    pub refusal: Option<Problem>,
    /// A problem met while reconciling.
    pub problem: Option<Problem>,
    /// `status.selector`.
    pub selector: String,
    /// `status.bootstrapServers`.
    pub bootstrap_servers: String,
    /// `status.listeners`.
    pub listeners: Vec<ListenerStatus>,
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

fn broker_list(ids: &[i32]) -> String {
    let word = if ids.len() == 1 { "broker" } else { "brokers" };
    format!("{word} {}", list(ids))
}

/// The `Ready` condition: whether every desired broker serves, and if not,
/// what is missing.
fn ready_condition(obs: &ClusterObservation, live: &[&PodState]) -> Condition {
    let desired = obs.desired_replicas.max(0);
    let pod_of = |id: i32| live.iter().find(|p| p.ordinal == id);
    let missing: Vec<i32> = (0..desired).filter(|id| pod_of(*id).is_none()).collect();
    let not_ready: Vec<&PodState> = (0..desired)
        .filter_map(pod_of)
        .copied()
        .filter(|p| !p.ready)
        .collect();
    // Outdated only against a revision the StatefulSet controller has
    // observed; before that nothing is known to be outdated.
    let outdated: Vec<i32> = match obs.update_revision.as_deref() {
        Some(rev) => (0..desired)
            .filter_map(pod_of)
            .filter(|p| p.ready && p.revision.as_deref() != Some(rev))
            .map(|p| p.ordinal)
            .collect(),
        None => Vec::new(),
    };
    if !missing.is_empty() || !not_ready.is_empty() {
        let ready = desired - missing.len() as i32 - not_ready.len() as i32;
        let mut message = format!("{ready}/{desired} brokers ready");
        if !not_ready.is_empty() {
            let each: Vec<String> = not_ready
                .iter()
                .map(|p| match not_ready_detail(p) {
                    Some(d) => format!("broker {} (pod {}: {d})", p.ordinal, p.name),
                    None => format!("broker {} (pod {})", p.ordinal, p.name),
                })
                .collect();
            message.push_str(&format!("; not Ready: {}", each.join(", ")));
        }
        if !missing.is_empty() {
            message.push_str(&format!("; no pod yet for {}", broker_list(&missing)));
        }
        return Condition::new(READY, false, "BrokersNotReady", message);
    }
    if !outdated.is_empty() {
        return Condition::new(
            READY,
            false,
            "BrokersOutdated",
            format!(
                "{desired}/{desired} brokers ready, but {} still {} the previous pod template; the rolling restart replaces them",
                broker_list(&outdated),
                if outdated.len() == 1 { "runs" } else { "run" }
            ),
        );
    }
    if let Some((reason, message)) = membership_gap(desired, &obs.membership) {
        return Condition::new(READY, false, reason, message);
    }
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
}

/// The `Progressing` condition.
fn progressing_condition(
    obs: &ClusterObservation,
    live: &[&PodState],
    live_pods: &[PodState],
    updated: i32,
) -> Condition {
    let desired = obs.desired_replicas;
    if obs.refusal.is_some() {
        // Nothing is applied and no pod is restarted while the spec is
        // refused: the operator is not moving the cluster anywhere.
        return Condition::new(
            PROGRESSING,
            false,
            "ConfigRefused",
            "nothing is applied while the spec is refused; see ConfigAccepted",
        );
    }
    let scale_progress = obs
        .scaling
        .as_ref()
        .filter(|n| n.kind == NoteKind::Progress);
    // A roll is under way only when some pod runs another revision than
    // the StatefulSet's (known) update revision: a plain scale is not one.
    let rolling = roll_pending(desired, obs.update_revision.as_deref(), live_pods);
    let below: Vec<i32> = (0..desired.max(0))
        .filter(|id| !live.iter().any(|p| p.ordinal == *id))
        .collect();
    let above: Vec<i32> = live
        .iter()
        .map(|p| p.ordinal)
        .filter(|o| *o >= desired)
        .collect();
    let highest_live = live
        .iter()
        .map(|p| p.ordinal)
        .filter(|o| *o < desired)
        .max();
    let ready = live
        .iter()
        .filter(|p| p.ordinal < desired && p.ready)
        .count() as i32;
    match &obs.rollout {
        RolloutStep::Delete { name, .. } => {
            return Condition::new(
                PROGRESSING,
                true,
                "RollingRestart",
                format!("restarting {name} to apply the current pod template"),
            )
        }
        RolloutStep::Held(h) => {
            return Condition::new(
                PROGRESSING,
                true,
                "RollingRestart",
                format!("{updated}/{desired} brokers updated; held: {}", h.message),
            )
        }
        RolloutStep::Wait(why) if rolling => {
            return Condition::new(
                PROGRESSING,
                true,
                "RollingRestart",
                format!("{updated}/{desired} brokers updated; waiting: {why}"),
            )
        }
        _ => {}
    }
    if let Some(n) = scale_progress {
        return Condition::new(PROGRESSING, true, n.reason, n.message.clone());
    }
    if !above.is_empty() {
        return Condition::new(
            PROGRESSING,
            true,
            "ScalingIn",
            format!(
                "scaling in to {desired} brokers: {} are being removed",
                broker_list(&above)
            ),
        );
    }
    // The StatefulSet creates pods in ordinal order: missing pods above
    // every existing one are a scale-out's.
    if !below.is_empty() {
        return match highest_live {
            Some(h) if below.iter().all(|b| *b > h) => Condition::new(
                PROGRESSING,
                true,
                "ScalingOut",
                format!(
                    "scaling out to {desired} brokers: creating {}",
                    broker_list(&below)
                ),
            ),
            Some(_) => Condition::new(
                PROGRESSING,
                true,
                "BrokersStarting",
                format!(
                    "{ready}/{desired} brokers ready; the StatefulSet recreates the pod of {}",
                    broker_list(&below)
                ),
            ),
            None => Condition::new(
                PROGRESSING,
                true,
                "CreatingBrokers",
                format!(
                    "creating {desired} broker{}",
                    if desired == 1 { "" } else { "s" }
                ),
            ),
        };
    }
    if ready < desired {
        return Condition::new(
            PROGRESSING,
            true,
            "BrokersStarting",
            format!("{ready}/{desired} brokers ready"),
        );
    }
    if let RolloutStep::Wait(why) = &obs.rollout {
        if obs.update_revision.is_none() {
            return Condition::new(PROGRESSING, true, "StatefulSetUpdating", why.clone());
        }
    }
    if matches!(
        membership_gap(desired, &obs.membership),
        Some(("BrokersNotRegistered" | "NoController", _))
    ) {
        return Condition::new(
            PROGRESSING,
            true,
            "BrokersRegistering",
            "brokers are ready; waiting for them to register with a controller",
        );
    }
    Condition::new(
        PROGRESSING,
        false,
        "Stable",
        "all brokers run the current spec",
    )
}

/// The `Degraded` condition: every problem, the first one's reason.
fn degraded_condition(
    obs: &ClusterObservation,
    hold: Option<&RolloutHoldStatus>,
    now: &str,
) -> Condition {
    let mut causes: Vec<(String, String)> = Vec::new();
    for p in [&obs.refusal, &obs.problem].into_iter().flatten() {
        causes.push((p.reason.clone(), p.message.clone()));
    }
    let loops = crash_loops(&obs.pods, now);
    if !loops.is_empty() {
        let each: Vec<String> = loops.iter().map(|l| l.describe()).collect();
        causes.push((
            "BrokerCrashLooping".into(),
            format!("brokers keep restarting: {}", each.join("; ")),
        ));
    }
    if let Some(n) = obs.scaling.as_ref().filter(|n| n.kind == NoteKind::Problem) {
        causes.push((n.reason.into(), n.message.clone()));
    }
    if let Some(h) = hold {
        let waited = seconds_between(&h.since, now);
        if waited >= obs.stall_timeout_seconds {
            let at = h
                .broker
                .map(|b| format!(" at broker {b}"))
                .unwrap_or_default();
            // No growing count of seconds: the message stays the same while
            // the stall does.
            causes.push((
                "RollingRestartStalled".into(),
                format!(
                    "rolling restart held{at} since {}, longer than the {}s limit: {}; it is not forced on and goes on by itself once that is resolved",
                    h.since, obs.stall_timeout_seconds, h.message
                ),
            ));
        }
    }
    match causes.split_first() {
        None => Condition::new(DEGRADED, false, "AsExpected", "reconciled without errors"),
        Some(((reason, message), rest)) => {
            let mut message = message.clone();
            for (r, m) in rest {
                message.push_str(&format!("; also {r}: {m}"));
            }
            Condition::new(DEGRADED, true, reason, message)
        }
    }
}

/// The `ConfigAccepted` condition.
fn config_condition(obs: &ClusterObservation) -> Condition {
    match &obs.refusal {
        Some(p) => Condition::new(CONFIG_ACCEPTED, false, "ConfigRefused", p.message.clone()),
        None => Condition::new(
            CONFIG_ACCEPTED,
            true,
            "ConfigValid",
            "the spec passed the broker's own config checks",
        ),
    }
}

/// Computes the new status. `now` is an RFC 3339 time for transitions.
pub fn cluster_status(
    old: Option<&KafkaClusterStatus>,
    obs: &ClusterObservation,
    now: &str,
) -> KafkaClusterStatus {
    let live: Vec<&PodState> = obs.pods.iter().filter(|p| !p.terminating).collect();
    let live_pods: Vec<PodState> = live.iter().map(|p| (*p).clone()).collect();
    let replicas = live.len() as i32;
    let ready = live.iter().filter(|p| p.ready).count() as i32;
    let updated = match obs.update_revision.as_deref() {
        Some(rev) => live
            .iter()
            .filter(|p| p.revision.as_deref() == Some(rev))
            .count() as i32,
        None => 0,
    };

    let hold = rollout_hold(old, &obs.rollout, now);
    let degraded = degraded_condition(obs, hold.as_ref(), now);
    let progressing = progressing_condition(obs, &live, &live_pods, updated);
    let ready_cond = ready_condition(obs, &live);
    let config = config_condition(obs);
    let view = obs.membership.view();

    let old_conditions = old.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    KafkaClusterStatus {
        conditions: merge_conditions(
            old_conditions,
            vec![ready_cond, progressing, degraded, config],
            obs.generation,
            now,
        ),
        observed_generation: obs.generation,
        replicas,
        ready_replicas: ready,
        updated_replicas: updated,
        selector: Some(obs.selector.clone()),
        bootstrap_servers: Some(obs.bootstrap_servers.clone()),
        listeners: obs.listeners.clone(),
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

/// Events for condition transitions between the old and the new status:
/// `ClusterReady` / `ClusterNotReady` when `Ready` flips, and a Warning
/// whenever `Degraded=True` gets another reason or message.
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
        // Every distinct problem once: a new reason, or the same reason
        // with another message (a second refused config), is a new Event.
        let same = old
            .and_then(|s| find_condition(&s.conditions, DEGRADED))
            .is_some_and(|o| o.is_true() && o.reason == c.reason && o.message == c.message);
        if c.is_true() && !same {
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
            containers: Vec::new(),
        }
    }

    fn obs(pods: Vec<PodState>, rollout: RolloutStep) -> ClusterObservation {
        ClusterObservation {
            generation: Some(4),
            desired_replicas: 3,
            update_revision: Some("r2".into()),
            pods,
            rollout,
            refusal: None,
            problem: None,
            selector: "a=b".into(),
            bootstrap_servers: "demo-bootstrap.ns.svc:9092".into(),
            listeners: Vec::new(),
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
            d.message
                .contains("held since 2026-12-02T10:00:00Z, longer than the 300s limit"),
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
        assert_eq!(cond(&s, PROGRESSING).reason, "ScalingOut");
        let o = obs(
            vec![pod(0, "r2", true), pod(1, "r2", false), pod(2, "r2", true)],
            RolloutStep::UpToDate,
        );
        let s = cluster_status(None, &o, "t0");
        assert_eq!(cond(&s, PROGRESSING).reason, "BrokersStarting");
        assert_eq!(cond(&s, READY).reason, "BrokersNotReady");
    }

    #[test]
    fn problem_makes_degraded_and_events_and_serving_brokers_stay_ready() {
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
        assert!(cond(&bad, READY).is_true(), "the brokers serve");
        let events = status_events(Some(&ok), &bad);
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(events[0].warning && events[0].reason == "ApplyFailed");
        // the same problem again does not repeat the event
        let again = cluster_status(Some(&bad), &o, "t2");
        assert!(status_events(Some(&bad), &again).is_empty());
        assert_eq!(
            cond(&again, DEGRADED).last_transition_time.as_deref(),
            Some("t1")
        );
        // recovery: nothing to tell, Ready never left
        assert!(status_events(Some(&bad), &ok).is_empty());
        assert!(!cond(&ok, DEGRADED).is_true());
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

    fn crashing(ordinal: i32, restarts: i32, waiting: Option<&str>, finished: &str) -> PodState {
        use crate::cluster::pods::{ContainerRestarts, Termination};
        let mut p = pod(ordinal, "r2", false);
        p.containers = vec![ContainerRestarts {
            name: "broker".into(),
            init: false,
            restart_count: restarts,
            ready: false,
            waiting_reason: waiting.map(Into::into),
            last_termination: Some(Termination {
                reason: Some("Error".into()),
                exit_code: 1,
                signal: None,
                message: Some("error: no Kubernetes credentials".into()),
                finished_at: Some(finished.into()),
            }),
        }];
        p
    }

    #[test]
    fn crash_looping_brokers_are_degraded_with_their_last_termination() {
        let t = |s: &str| format!("2026-12-02T10:{s}Z");
        let healthy = cluster_status(
            None,
            &obs(all_pods_ready(), RolloutStep::UpToDate),
            &t("00:00"),
        );
        // broker 1 crashed 4 times and backs off
        let pods = |p1: PodState| vec![pod(0, "r2", true), p1, pod(2, "r2", true)];
        let o = obs(
            pods(crashing(1, 4, Some("CrashLoopBackOff"), &t("04:50"))),
            RolloutStep::UpToDate,
        );
        let s1 = cluster_status(Some(&healthy), &o, &t("05:00"));
        let d = cond(&s1, DEGRADED);
        assert!(d.is_true(), "{d:?}");
        assert_eq!(d.reason, "BrokerCrashLooping");
        assert!(
            d.message
                .contains("broker 1 (pod demo-1): container broker restarted 4 times"),
            "{}",
            d.message
        );
        assert!(
            d.message
                .contains("Error, exit code 1: error: no Kubernetes credentials"),
            "{}",
            d.message
        );
        let r = cond(&s1, READY);
        assert_eq!(r.reason, "BrokersNotReady");
        assert!(
            r.message.starts_with("2/3 brokers ready; not Ready: broker 1 (pod demo-1: CrashLoopBackOff, restarted 4 times"),
            "{}",
            r.message
        );
        let events = status_events(Some(&healthy), &s1);
        assert!(
            events.iter().any(|e| e.warning
                && e.reason == "BrokerCrashLooping"
                && e.note.contains("credentials")),
            "{events:?}"
        );
        // it runs again for a moment between two crashes: still degraded,
        // the same message, no new Event
        let mut running = crashing(1, 4, None, &t("04:50"));
        running.ready = false;
        let o2 = obs(pods(running), RolloutStep::UpToDate);
        let s2 = cluster_status(Some(&s1), &o2, &t("05:05"));
        assert_eq!(cond(&s2, DEGRADED).reason, "BrokerCrashLooping");
        assert!(status_events(Some(&s1), &s2).is_empty());
        // the next crash is a new Event
        let o3 = obs(
            pods(crashing(1, 5, Some("CrashLoopBackOff"), &t("05:30"))),
            RolloutStep::UpToDate,
        );
        let s3 = cluster_status(Some(&s2), &o3, &t("05:31"));
        assert_eq!(status_events(Some(&s2), &s3).len(), 1);
        // Ready and running for 10 minutes after the last crash: over
        let mut fine = crashing(1, 5, None, &t("05:30"));
        fine.ready = true;
        let o4 = obs(pods(fine), RolloutStep::UpToDate);
        assert!(cond(&cluster_status(Some(&s3), &o4, &t("14:00")), DEGRADED).is_true());
        let s5 = cluster_status(Some(&s3), &o4, &t("15:30"));
        assert!(!cond(&s5, DEGRADED).is_true());
        assert!(cond(&s5, READY).is_true());
        // a single restart (a kill) is no crash loop
        let o6 = obs(
            pods(crashing(1, 1, Some("CrashLoopBackOff"), &t("05:30"))),
            RolloutStep::UpToDate,
        );
        assert!(!cond(&cluster_status(None, &o6, &t("05:31")), DEGRADED).is_true());
    }

    #[test]
    fn a_refused_config_keeps_ready_and_has_its_own_condition() {
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        let serving = cluster_status(None, &o, "t0");
        let accepted = cond(&serving, CONFIG_ACCEPTED);
        assert!(accepted.is_true());
        assert_eq!(accepted.reason, "ConfigValid");
        o.refusal = Some(Problem {
            reason: "InvalidConfig".into(),
            message: "spec.config is refused, no broker was restarted: num.partitions: \"abc\" is not a number".into(),
        });
        let s = cluster_status(Some(&serving), &o, "t1");
        let r = cond(&s, READY);
        assert!(r.is_true(), "{r:?}");
        assert_eq!(r.reason, "AllBrokersRegistered");
        assert_eq!(r.last_transition_time.as_deref(), Some("t0"));
        let c = cond(&s, CONFIG_ACCEPTED);
        assert!(!c.is_true());
        assert_eq!(c.reason, "ConfigRefused");
        assert!(c.message.contains("num.partitions"), "{}", c.message);
        let d = cond(&s, DEGRADED);
        assert!(d.is_true());
        assert_eq!(d.reason, "InvalidConfig");
        let p = cond(&s, PROGRESSING);
        assert!(!p.is_true());
        assert_eq!(p.reason, "ConfigRefused");
        let events = status_events(Some(&serving), &s);
        assert_eq!(
            events.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(),
            vec!["InvalidConfig"],
            "a Warning for the refusal, no ClusterNotReady"
        );
    }

    #[test]
    fn every_distinct_refusal_emits_an_event() {
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        let serving = cluster_status(None, &o, "t0");
        let refuse = |o: &mut ClusterObservation, m: &str| {
            o.refusal = Some(Problem {
                reason: "InvalidConfig".into(),
                message: m.into(),
            })
        };
        refuse(&mut o, "num.partitions: \"abc\"");
        let s1 = cluster_status(Some(&serving), &o, "t1");
        assert_eq!(status_events(Some(&serving), &s1).len(), 1);
        // the same refusal on the next reconcile: told once
        let s2 = cluster_status(Some(&s1), &o, "t2");
        assert!(status_events(Some(&s1), &s2).is_empty());
        // the user fixes that and makes another mistake: a new Event
        refuse(&mut o, "log.retention.msx: unknown broker config");
        let s3 = cluster_status(Some(&s2), &o, "t3");
        let events = status_events(Some(&s2), &s3);
        assert_eq!(events.len(), 1, "{events:?}");
        assert!(events[0].warning);
        assert_eq!(events[0].reason, "InvalidConfig");
        assert!(events[0].note.contains("log.retention.msx"));
        // a scale-down refused while the config is refused: both said, and
        // the new one told
        o.scaling = Some(ScaleNote {
            kind: NoteKind::Problem,
            reason: "ScaleDownRefused",
            message: "topic t has replication factor 3".into(),
        });
        let s4 = cluster_status(Some(&s3), &o, "t4");
        let d = cond(&s4, DEGRADED);
        assert_eq!(d.reason, "InvalidConfig");
        assert!(
            d.message
                .ends_with("; also ScaleDownRefused: topic t has replication factor 3"),
            "{}",
            d.message
        );
        assert_eq!(status_events(Some(&s3), &s4).len(), 1);
    }

    #[test]
    fn not_ready_says_what_is_missing_when_every_pod_is_ready() {
        let check = |o: &ClusterObservation, reason: &str, says: &str| {
            let s = cluster_status(None, o, "t0");
            let r = cond(&s, READY);
            assert!(!r.is_true());
            assert_eq!(r.reason, reason);
            assert_ne!(r.message, "3/3 brokers ready");
            assert!(r.message.contains(says), "{}", r.message);
        };
        // a roll is due: which brokers run the old template
        let o = obs(
            vec![pod(0, "r1", true), pod(1, "r1", true), pod(2, "r2", true)],
            RolloutStep::Delete {
                name: "demo-1".into(),
                ordinal: 1,
            },
        );
        check(
            &o,
            "BrokersOutdated",
            "brokers 0, 1 still run the previous pod template",
        );
        // a broker not registered (fenced)
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        o.membership = known(Some(0), 4, &[0, 2]);
        check(&o, "BrokersNotRegistered", "not registered: 1");
        // no controller
        o.membership = known(None, 4, &[0, 1, 2]);
        check(&o, "NoController", "no active controller");
        // the StatefulSet has not observed a scale yet: nothing is missing,
        // the brokers serve
        let mut o = obs(
            all_pods_ready(),
            RolloutStep::Wait("StatefulSet has no update revision yet".into()),
        );
        o.update_revision = None;
        let s = cluster_status(None, &o, "t0");
        assert!(cond(&s, READY).is_true(), "{:?}", cond(&s, READY));
        // a pod that does not exist and one that is not Ready, by name
        let o = obs(
            vec![pod(0, "r2", true), pod(2, "r2", false)],
            RolloutStep::UpToDate,
        );
        check(
            &o,
            "BrokersNotReady",
            "1/3 brokers ready; not Ready: broker 2 (pod demo-2); no pod yet for broker 1",
        );
        // pods beyond the desired count (a scale-in) do not count as ready
        let mut o = obs(
            vec![
                pod(0, "r2", true),
                pod(1, "r2", false),
                pod(2, "r2", true),
                pod(3, "r2", true),
            ],
            RolloutStep::UpToDate,
        );
        o.desired_replicas = 3;
        check(&o, "BrokersNotReady", "2/3 brokers ready");
    }

    #[test]
    fn a_plain_scale_is_scaling_not_a_rolling_restart() {
        let no_revision = |pods: Vec<PodState>, desired: i32| {
            let mut o = obs(
                pods,
                RolloutStep::Wait("StatefulSet has no update revision yet".into()),
            );
            o.update_revision = None;
            o.desired_replicas = desired;
            o
        };
        // scale-out 3 -> 5, the StatefulSet grown, its status not yet
        let s = cluster_status(None, &no_revision(all_pods_ready(), 5), "t0");
        let p = cond(&s, PROGRESSING);
        assert_eq!(p.reason, "ScalingOut", "{p:?}");
        assert_eq!(p.message, "scaling out to 5 brokers: creating brokers 3, 4");
        // the same with the revision known: the new pods are the current one
        let mut o = obs(all_pods_ready(), RolloutStep::UpToDate);
        o.desired_replicas = 5;
        assert_eq!(
            cond(&cluster_status(None, &o, "t0"), PROGRESSING).reason,
            "ScalingOut"
        );
        // scale-in 5 -> 3: the StatefulSet lowered, pods 3 and 4 still there
        let mut pods = all_pods_ready();
        pods.extend([pod(3, "r2", true), pod(4, "r2", true)]);
        let s = cluster_status(None, &no_revision(pods, 3), "t0");
        let p = cond(&s, PROGRESSING);
        assert_eq!(p.reason, "ScalingIn", "{p:?}");
        assert!(p.message.contains("brokers 3, 4 are being removed"));
        assert!(cond(&s, READY).is_true());
        // ... and once they are gone, while the StatefulSet's status lags
        let s = cluster_status(None, &no_revision(all_pods_ready(), 3), "t0");
        assert_ne!(cond(&s, PROGRESSING).reason, "RollingRestart");
        assert!(cond(&s, READY).is_true());
        // a pod recreated in the middle is not a scale
        let o = obs(
            vec![pod(0, "r2", true), pod(2, "r2", true)],
            RolloutStep::UpToDate,
        );
        assert_eq!(
            cond(&cluster_status(None, &o, "t0"), PROGRESSING).reason,
            "BrokersStarting"
        );
        // a template change is still a rolling restart
        let o = obs(
            vec![pod(0, "r1", true), pod(1, "r1", true), pod(2, "r2", false)],
            RolloutStep::Wait("pod demo-2 is terminating".into()),
        );
        assert_eq!(
            cond(&cluster_status(None, &o, "t0"), PROGRESSING).reason,
            "RollingRestart"
        );
    }
}
