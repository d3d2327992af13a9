//! The `KafkaRebalance` lifecycle as one pure function, [`next`]: given the
//! request (spec, approve/stop annotations, generation), the current status
//! and what the cluster looks like now (brokers, partitions with replicas,
//! leaders and sizes, running reassignments), it returns the one action to
//! take and the status to write. The controller only reads, executes and
//! writes; calling `next` again on the result converges (level-triggered,
//! idempotent: every action is safe to repeat).
//!
//! # Phases
//!
//! - no phase / `Failed` / a changed request → **propose**: validate the
//!   request, run the planner, store the proposal *and its moves* in the
//!   status (`ProposalReady`; `Ready` at once when nothing has to move;
//!   `Failed` with a reason when it cannot be planned).
//! - `ProposalReady` → waits for approval (`spec.approved` or the
//!   `moldau.io/rebalance-approve: "true"` annotation). Approved, it starts:
//!   `Rebalancing`, the first batch submitted.
//! - `Rebalancing` → each call classifies the moves of the batch in flight
//!   (running per ListPartitionReassignments; done when the replicas equal
//!   the target; not started when they still equal the source) and submits
//!   what has not started, or advances to the next batch when all are done.
//!   After the last batch: `Ready`, and a preferred-leader election of the
//!   moved partitions whose leader is not their new first replica.
//! - `moldau.io/rebalance-stop: "true"` → `Stopped`; while any move of the
//!   proposal still runs, each call cancels it (KIP-455 cancel: the original
//!   replicas stay). Moves already finished stay.
//! - `Ready` and `Stopped` are final until the request changes.
//!
//! # Decisions
//!
//! - **What the proposal is computed from**: the fields that change the plan
//!   (`cluster`, `mode`, `brokers`, `topics`, `maxConcurrentMoves`) are
//!   fingerprinted (`status.plannedFor`). A change recomputes the proposal in
//!   any phase (in `Rebalancing` once the batch in flight has finished; it
//!   is never cancelled for it). `approved` and the throttle are not part of
//!   it, so approving does not recompute what was approved.
//!   `observedGeneration` records the generation every status describes.
//! - **The cluster changed under a proposal** (a move's partition no longer
//!   has the move's source replicas and is not at its target, the partition
//!   is gone, or a target broker is no longer live): the proposal is
//!   recomputed from the cluster as it is now (reason `ClusterChanged`,
//!   a new `sessionId`). Approval is standing: an approved rebalance runs
//!   the recomputed proposal without asking again (the goal — e.g. "nothing
//!   on broker 3" — is still what was approved); an unapproved one waits.
//!   New topics or brokers alone do not recompute a proposal.
//! - **Offline brokers**: Metadata lists live brokers only. A broker that
//!   holds replicas but is not live may be removed (`remove-brokers`), but
//!   any other rebalance fails (`BrokersOffline`), because moves onto or
//!   off it could not complete.
//! - **Transient trouble** (no broker reachable) keeps the phase and sets
//!   `Ready=False KafkaUnavailable`; an unknown cluster is `Failed
//!   ClusterNotFound` and re-evaluated on every call, like every `Failed`.
//! - **Throttle** (`throttleBytesPerSecond`): set in Kafka for the batch in
//!   flight, moved on with each batch, removed when the rebalance ends in
//!   any way; see [`super::throttle`]. Each step carries the change
//!   ([`Step::throttle`]) from what `status.throttle` says is set to what
//!   the new status wants; a step whose change or action could not be
//!   performed is not written (the controller writes the
//!   `KafkaUnavailable` step instead), so the next one computes it again.
//!
//! # Automatic rebalancing (scale-out, drain before scale-down)
//!
//! The cluster controller (`cluster::scaling`) creates a `KafkaRebalance`
//! of its own (`add-brokers`/`remove-brokers`, `approved: true`, owned by
//! the `KafkaCluster`), which runs through this same lifecycle, and lowers
//! the StatefulSet only when Kafka shows no replica on the drained brokers
//! ([`drained`] answers the same question for one broker).

use std::collections::{BTreeMap, BTreeSet};

use crate::crd::{
    merge_conditions, BrokerBalance, BrokerLoadStatus, Condition, KafkaRebalanceSpec,
    KafkaRebalanceStatus, PlannedMove, Proposal, RebalanceMode, RebalancePhase, RebalanceProgress,
};
use crate::events::EventSpec;
use crate::kafka::{OngoingReassignment, PartitionError, Reassignment};

use super::model::{Broker, BrokerId, BrokerLoad, Caveat, Goal, Options, Partition, PlanError};
use super::plan;
use super::throttle::{self, ThrottleChange};

/// The request: the spec and what the annotations say.
#[derive(Clone, Debug, PartialEq)]
pub struct Request<'a> {
    /// The spec.
    pub spec: &'a KafkaRebalanceSpec,
    /// `moldau.io/rebalance-approve: "true"`.
    pub approve_annotation: bool,
    /// `moldau.io/rebalance-stop: "true"`.
    pub stop_annotation: bool,
    /// `metadata.generation`.
    pub generation: Option<i64>,
}

/// The cluster as the brokers report it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObservedCluster {
    /// Live brokers (Metadata).
    pub brokers: Vec<Broker>,
    /// Every partition: replicas, leader, size (the largest replica per
    /// DescribeLogDirs), its topic's `min.insync.replicas`.
    pub partitions: Vec<Partition>,
    /// Running reassignments (ListPartitionReassignments).
    pub ongoing: Vec<OngoingReassignment>,
}

/// What could be observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// The `KafkaCluster` does not exist (or is being deleted).
    ClusterNotFound(String),
    /// The brokers could not be reached; the message says why.
    Unavailable(String),
    /// The cluster.
    Cluster(ObservedCluster),
}

/// The one thing to do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing (wait for approval, for moves to finish, or done).
    None,
    /// Start these reassignments (AlterPartitionReassignments, targets).
    Submit(Vec<Reassignment>),
    /// Cancel these reassignments (replicas = null).
    Cancel(Vec<Reassignment>),
    /// Elect the preferred leader of these partitions (best effort).
    ElectPreferred(Vec<(String, i32)>),
}

/// When to look again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requeue {
    /// Soon: moves run, or something failed.
    Soon,
    /// At the periodic resync (a proposal waits; the cluster may change).
    Resync,
    /// Only when the resource changes (Ready, Stopped).
    Idle,
}

/// The result of one step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// What to do.
    pub action: Action,
    /// The status to write.
    pub status: KafkaRebalanceStatus,
    /// When to look again.
    pub requeue: Requeue,
    /// An Event for a phase transition.
    pub event: Option<EventSpec>,
    /// Throttle configs to change in Kafka before (Submit) or after (the
    /// other actions) the action.
    pub throttle: Option<ThrottleChange>,
}

/// Whether the approve annotation is set.
pub fn annotation_true(value: Option<&String>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Whether `broker` holds no replica (and is not a target of a running
/// reassignment).
pub fn drained(cluster: &ObservedCluster, broker: BrokerId) -> bool {
    cluster
        .partitions
        .iter()
        .all(|p| !p.replicas.contains(&broker))
        && cluster
            .ongoing
            .iter()
            .all(|o| !o.replicas.contains(&broker))
}

/// FNV-1a, stable across builds (ids and fingerprints are stored).
fn fnv(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Fingerprint of the spec fields a proposal depends on.
pub fn fingerprint(spec: &KafkaRebalanceSpec) -> String {
    let brokers: BTreeSet<i32> = spec.brokers.iter().copied().collect();
    let topics: Option<BTreeSet<&String>> = spec.topics.as_ref().map(|t| t.iter().collect());
    let key = serde_json::json!([
        spec.cluster,
        spec.mode,
        brokers,
        topics,
        spec.max_concurrent_moves
    ]);
    format!("{:016x}", fnv(key.to_string().as_bytes()))
}

struct Failure {
    reason: &'static str,
    message: String,
}

fn fail(reason: &'static str, message: impl Into<String>) -> Failure {
    Failure {
        reason,
        message: message.into(),
    }
}

/// The planner's goal and options for a spec, or why the spec is invalid.
fn goal_of(spec: &KafkaRebalanceSpec) -> Result<(Goal, Options), Failure> {
    let brokers: Vec<i32> = spec
        .brokers
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let goal = match spec.mode {
        RebalanceMode::Full if !brokers.is_empty() => {
            return Err(fail(
                "BrokersNotAllowed",
                "spec.brokers applies only to add-brokers and remove-brokers",
            ))
        }
        RebalanceMode::Full => Goal::Full,
        _ if brokers.is_empty() => {
            return Err(fail(
                "BrokersRequired",
                "spec.brokers must list at least one broker for add-brokers and remove-brokers",
            ))
        }
        RebalanceMode::AddBrokers => Goal::AddBrokers(brokers),
        RebalanceMode::RemoveBrokers => Goal::RemoveBrokers(brokers),
    };
    let mut options = Options {
        topics: spec.topics.as_ref().map(|t| t.iter().cloned().collect()),
        ..Options::default()
    };
    if let Some(n) = spec.max_concurrent_moves {
        if n < 1 {
            return Err(fail(
                "InvalidSpec",
                "spec.maxConcurrentMoves must be at least 1",
            ));
        }
        options.max_moves_per_batch = n as usize;
    }
    Ok((goal, options))
}

fn plan_failure(e: &PlanError) -> Failure {
    let reason = match e {
        PlanError::UnknownGoalBroker(_) => "UnknownBroker",
        PlanError::NotEnoughBrokers { .. } => "NotEnoughBrokers",
        PlanError::PinnedOnRemovedBroker { .. } => "TopicFilterBlocksRemoval",
        PlanError::EmptyGoal => "BrokersRequired",
        _ => "PlanFailed",
    };
    fail(reason, e.to_string())
}

fn caveat_text(c: &Caveat) -> String {
    match c {
        Caveat::RackSpread {
            topic,
            partition,
            spread,
            wanted,
        } => format!("{topic}-{partition} stays in {spread} racks, {wanted} wanted"),
        Caveat::ReplicaImbalance { spread } => {
            format!("replica counts per broker still differ by {spread}")
        }
        Caveat::LeaderImbalance { spread } => {
            format!("preferred-leader counts per broker still differ by {spread}")
        }
        Caveat::ByteImbalance { spread, tolerance } => {
            format!("bytes per broker still differ by {spread} (tolerance {tolerance})")
        }
    }
}

fn to_i64<T: TryInto<i64>>(v: T) -> i64 {
    v.try_into().unwrap_or(i64::MAX)
}

/// The brokers the planner sees: the live ones, plus offline brokers that
/// hold replicas and are being removed. Offline brokers that hold replicas
/// and are not being removed are a failure.
fn planner_brokers(spec: &KafkaRebalanceSpec, c: &ObservedCluster) -> Result<Vec<Broker>, Failure> {
    let live: BTreeSet<BrokerId> = c.brokers.iter().map(|b| b.id).collect();
    let removing: BTreeSet<BrokerId> = match spec.mode {
        RebalanceMode::RemoveBrokers => spec.brokers.iter().copied().collect(),
        _ => BTreeSet::new(),
    };
    let offline: BTreeSet<BrokerId> = c
        .partitions
        .iter()
        .flat_map(|p| p.replicas.iter().copied())
        .filter(|b| !live.contains(b))
        .collect();
    let stuck: Vec<String> = offline
        .iter()
        .filter(|b| !removing.contains(b))
        .map(|b| b.to_string())
        .collect();
    if !stuck.is_empty() {
        return Err(fail(
            "BrokersOffline",
            format!(
                "broker(s) {} hold replicas but are not live; bring them back or remove them (mode remove-brokers)",
                stuck.join(", ")
            ),
        ));
    }
    let mut out = c.brokers.clone();
    out.extend(offline.into_iter().map(|id| Broker { id, rack: None }));
    out.sort_by_key(|b| b.id);
    Ok(out)
}

fn proposal_status(
    req: &Request,
    c: &ObservedCluster,
) -> Result<(Proposal, Vec<PlannedMove>), Failure> {
    let (goal, options) = goal_of(req.spec)?;
    let brokers = planner_brokers(req.spec, c)?;
    let p = plan::plan(&brokers, &c.partitions, &goal, &options).map_err(|e| plan_failure(&e))?;
    let mut caveats: Vec<String> = p.caveats.iter().map(caveat_text).collect();
    if let Some(topics) = &req.spec.topics {
        let known: BTreeSet<&str> = c.partitions.iter().map(|p| p.topic.as_str()).collect();
        for t in topics.iter().filter(|t| !known.contains(t.as_str())) {
            caveats.push(format!("topic {t} does not exist"));
        }
    }
    let load = |l: Option<&BrokerLoad>| {
        l.map(|l| BrokerLoadStatus {
            replicas: to_i64(l.replicas),
            leaders: to_i64(l.leaders),
            bytes: to_i64(l.bytes),
        })
        .unwrap_or_default()
    };
    let brokers = p
        .before
        .iter()
        .map(|b| BrokerBalance {
            broker: b.broker,
            before: load(Some(b)),
            after: load(p.after.iter().find(|a| a.broker == b.broker)),
        })
        .collect();
    let moves: Vec<PlannedMove> = p
        .batches
        .iter()
        .enumerate()
        .flat_map(|(i, batch)| {
            batch.iter().map(move |m| PlannedMove {
                topic: m.topic.clone(),
                partition: m.partition,
                from: m.from.clone(),
                to: m.to.clone(),
                bytes: to_i64(m.bytes),
                batch: i as i64,
            })
        })
        .collect();
    let proposal = Proposal {
        moves: to_i64(p.total_moves),
        batches: to_i64(p.batches.len()),
        bytes_to_move: to_i64(p.bytes_to_move),
        brokers,
        caveats,
    };
    Ok((proposal, moves))
}

/// Where one move stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MoveState {
    Running,
    Done,
    NotStarted,
    /// Neither at the source nor at the target, or gone.
    Diverged,
}

fn same_set(a: &[i32], b: &[i32]) -> bool {
    a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

fn classify(m: &PlannedMove, c: &ObservedCluster) -> MoveState {
    if c.ongoing
        .iter()
        .any(|o| o.topic == m.topic && o.partition == m.partition)
    {
        return MoveState::Running;
    }
    let Some(p) = c
        .partitions
        .iter()
        .find(|p| p.topic == m.topic && p.partition == m.partition)
    else {
        return MoveState::Diverged;
    };
    // A reorder (same brokers) is judged by order; a data move by the set
    // (the broker may order the final list its own way).
    let reorder = same_set(&m.from, &m.to);
    let at = |target: &[i32]| {
        if reorder {
            p.replicas == target
        } else {
            same_set(&p.replicas, target)
        }
    };
    if at(&m.to) {
        return MoveState::Done;
    }
    let live: BTreeSet<BrokerId> = c.brokers.iter().map(|b| b.id).collect();
    if at(&m.from) && m.to.iter().all(|b| live.contains(b)) {
        return MoveState::NotStarted;
    }
    MoveState::Diverged
}

fn progress_of(
    moves: &[PlannedMove],
    batches: i64,
    current: i64,
    done_now: &[bool],
) -> RebalanceProgress {
    let mut done = 0;
    let mut bytes_moved = 0;
    let mut i = 0;
    for m in moves {
        let finished = if m.batch < current {
            true
        } else if m.batch == current {
            let d = done_now.get(i).copied().unwrap_or(false);
            i += 1;
            d
        } else {
            false
        };
        if finished {
            done += 1;
            bytes_moved += m.bytes;
        }
    }
    RebalanceProgress {
        partitions_done: done,
        partitions_total: to_i64(moves.len()),
        bytes_moved,
        bytes_total: moves.iter().map(|m| m.bytes).sum(),
        current_batch: current,
        batches,
    }
}

fn conditions(
    old: &KafkaRebalanceStatus,
    phase: RebalancePhase,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &str,
) -> Vec<Condition> {
    let fresh = vec![
        Condition::new("Ready", phase == RebalancePhase::Ready, reason, message),
        Condition::new(
            "Progressing",
            phase == RebalancePhase::Rebalancing,
            reason,
            message,
        ),
    ];
    merge_conditions(&old.conditions, fresh, generation, now)
}

fn ready_reason(s: &KafkaRebalanceStatus) -> Option<&str> {
    s.conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.as_str())
}

/// Builds a step with a fresh phase/reason and an Event when the phase or
/// reason changes.
#[allow(clippy::too_many_arguments)] // one flat call per transition reads best
fn finish(
    req: &Request,
    old: &KafkaRebalanceStatus,
    mut status: KafkaRebalanceStatus,
    phase: RebalancePhase,
    reason: &str,
    message: String,
    action: Action,
    requeue: Requeue,
    now: &str,
) -> Step {
    status.phase = Some(phase);
    status.observed_generation = req.generation;
    let throttle = set_throttle(req, old, &mut status);
    status.conditions = conditions(old, phase, reason, &message, req.generation, now);
    let changed = old.phase != Some(phase) || ready_reason(old) != Some(reason);
    let event = changed.then(|| EventSpec {
        warning: phase == RebalancePhase::Failed || reason == "KafkaUnavailable",
        reason: reason.to_string(),
        note: message,
    });
    Step {
        action,
        status,
        requeue,
        event,
        throttle,
    }
}

/// The throttle `status` wants (only while `Rebalancing` with a throttle in
/// the spec: for the moves of the batch in flight), stored in it; returns
/// the change from what `old` says is set.
fn set_throttle(
    req: &Request,
    old: &KafkaRebalanceStatus,
    status: &mut KafkaRebalanceStatus,
) -> Option<ThrottleChange> {
    let wanted = match (req.spec.throttle_bytes_per_second, status.phase) {
        (Some(rate), Some(RebalancePhase::Rebalancing)) if rate > 0 => {
            let batch = status.progress.as_ref().map(|p| p.current_batch);
            let moves: Vec<&PlannedMove> = status
                .moves
                .iter()
                .filter(|m| Some(m.batch) == batch)
                .collect();
            (!moves.is_empty()).then(|| throttle::wanted(rate, moves))
        }
        _ => None,
    };
    status.throttle = wanted;
    throttle::change(old.throttle.as_ref(), status.throttle.as_ref())
}

fn failed(req: &Request, old: &KafkaRebalanceStatus, f: Failure, now: &str) -> Step {
    let status = KafkaRebalanceStatus {
        planned_for: Some(fingerprint(req.spec)),
        ..KafkaRebalanceStatus::default()
    };
    finish(
        req,
        old,
        status,
        RebalancePhase::Failed,
        f.reason,
        f.message,
        Action::None,
        Requeue::Soon,
        now,
    )
}

/// The step after the brokers refused some of `performed`'s reassignments
/// (`old` is the status before that step): `Failed` with the refusals as
/// the reason's message, removing the throttle `performed` set. Like every
/// `Failed`, the next step plans again from the cluster as it is.
pub fn refused(
    req: &Request,
    old: Option<&KafkaRebalanceStatus>,
    performed: &Step,
    errors: &[PartitionError],
    now: &str,
) -> Step {
    let mut old = old.cloned().unwrap_or_default();
    old.throttle = performed.status.throttle.clone();
    let listed: Vec<String> = errors
        .iter()
        .take(5)
        .map(|e| {
            let error = crate::kafka::KafkaError::broker(
                "AlterPartitionReassignments",
                e.code,
                e.message.clone(),
            );
            format!("{}-{}: {error}", e.topic, e.partition)
        })
        .collect();
    let more = errors.len().saturating_sub(listed.len());
    let mut message = format!("the brokers refused: {}", listed.join("; "));
    if more > 0 {
        message.push_str(&format!(" (and {more} more)"));
    }
    failed(req, &old, fail("ReassignmentRefused", message), now)
}

fn approved(req: &Request) -> bool {
    req.spec.approved || req.approve_annotation
}

/// The next step of a rebalance. Pure; never panics on any input.
pub fn next(
    req: &Request,
    status: Option<&KafkaRebalanceStatus>,
    observed: &Observation,
    now: &str,
) -> Step {
    let mut step = next_step(req, status, observed, now);
    if !matches!(observed, Observation::Cluster(_)) {
        // Nothing can be changed in Kafka now: what is set stays recorded,
        // to be removed once the brokers are reachable again.
        step.throttle = None;
        step.status.throttle = status.and_then(|s| s.throttle.clone());
    }
    step
}

fn next_step(
    req: &Request,
    status: Option<&KafkaRebalanceStatus>,
    observed: &Observation,
    now: &str,
) -> Step {
    let old = status.cloned().unwrap_or_default();
    let same_request = old.planned_for.as_deref() == Some(fingerprint(req.spec).as_str());
    let cluster = match observed {
        Observation::Cluster(c) => c,
        Observation::ClusterNotFound(msg) => {
            if old.phase == Some(RebalancePhase::Stopped)
                || (old.phase == Some(RebalancePhase::Ready) && same_request)
            {
                return keep(req, &old, Requeue::Idle, now);
            }
            return failed(req, &old, fail("ClusterNotFound", msg.clone()), now);
        }
        Observation::Unavailable(msg) => {
            let phase = old.phase.unwrap_or(RebalancePhase::Failed);
            if matches!(phase, RebalancePhase::Ready | RebalancePhase::Stopped) && same_request {
                return keep(req, &old, Requeue::Idle, now);
            }
            let status = old.clone();
            return finish(
                req,
                &old,
                status,
                phase,
                "KafkaUnavailable",
                msg.clone(),
                Action::None,
                Requeue::Soon,
                now,
            );
        }
    };

    if req.stop_annotation {
        return stop(req, &old, cluster, now);
    }
    match old.phase {
        Some(RebalancePhase::Ready | RebalancePhase::Stopped) if same_request => {
            keep(req, &old, Requeue::Idle, now)
        }
        Some(RebalancePhase::Rebalancing) if same_request => execute(req, &old, &old, cluster, now),
        Some(RebalancePhase::Rebalancing) => {
            // The request changed mid-way: let the batch in flight finish
            // (never cancelled for this), then propose again.
            let running = in_flight(&old, cluster);
            if running.is_empty() {
                propose(req, &old, cluster, "SpecChanged", now)
            } else {
                let status = old.clone();
                finish(
                    req,
                    &old,
                    status,
                    RebalancePhase::Rebalancing,
                    "SpecChanged",
                    format!(
                        "the spec changed; the proposal is recomputed once the {} move(s) in flight finish",
                        running.len()
                    ),
                    Action::None,
                    Requeue::Soon,
                    now,
                )
            }
        }
        Some(RebalancePhase::ProposalReady) if same_request => {
            if old.moves.iter().any(|m| {
                matches!(
                    classify(m, cluster),
                    MoveState::Diverged | MoveState::Running
                )
            }) {
                return propose(req, &old, cluster, "ClusterChanged", now);
            }
            if approved(req) {
                start(req, &old, old.clone(), cluster, now)
            } else {
                keep(req, &old, Requeue::Resync, now)
            }
        }
        _ => propose(req, &old, cluster, "ProposalReady", now),
    }
}

/// The same status with a fresh `observedGeneration`.
fn keep(req: &Request, old: &KafkaRebalanceStatus, requeue: Requeue, now: &str) -> Step {
    let mut status = old.clone();
    status.observed_generation = req.generation;
    let throttle = set_throttle(req, old, &mut status);
    if let Some(phase) = old.phase {
        if let Some(c) = old.conditions.iter().find(|c| c.type_ == "Ready") {
            let (reason, message) = (c.reason.clone(), c.message.clone());
            status.conditions = conditions(old, phase, &reason, &message, req.generation, now);
        }
    }
    Step {
        action: Action::None,
        status,
        requeue,
        event: None,
        throttle,
    }
}

fn propose(
    req: &Request,
    old: &KafkaRebalanceStatus,
    cluster: &ObservedCluster,
    why: &str,
    now: &str,
) -> Step {
    let (proposal, moves) = match proposal_status(req, cluster) {
        Ok(p) => p,
        Err(f) => return failed(req, old, f, now),
    };
    let fp = fingerprint(req.spec);
    let session = {
        let key = serde_json::json!([fp, moves]).to_string();
        format!("{:016x}", fnv(key.as_bytes()))
    };
    let batches = proposal.batches;
    let status = KafkaRebalanceStatus {
        session_id: Some(session),
        planned_for: Some(fp),
        progress: Some(progress_of(&moves, batches, 0, &[])),
        proposal: Some(proposal.clone()),
        moves,
        ..KafkaRebalanceStatus::default()
    };
    if status.moves.is_empty() {
        return finish(
            req,
            old,
            status,
            RebalancePhase::Ready,
            "NothingToMove",
            "the cluster already meets the goal; no partition has to move".into(),
            Action::None,
            Requeue::Idle,
            now,
        );
    }
    let what = format!(
        "{} move(s), {} bytes, in {} batch(es)",
        proposal.moves, proposal.bytes_to_move, batches
    );
    if approved(req) {
        let mut step = start(req, old, status, cluster, now);
        if why != "ProposalReady" {
            // Approval is standing: say why the plan changed under it.
            step.event = Some(EventSpec {
                warning: false,
                reason: why.to_string(),
                note: format!("the proposal was recomputed: {what}; running it"),
            });
        }
        return step;
    }
    let message = match why {
        "ClusterChanged" => format!("the cluster changed under the previous proposal; new proposal: {what}; waiting for approval"),
        "SpecChanged" => format!("the spec changed; new proposal: {what}; waiting for approval"),
        _ => format!("{what}; approve with spec.approved: true or the annotation moldau.io/rebalance-approve: \"true\""),
    };
    finish(
        req,
        old,
        status,
        RebalancePhase::ProposalReady,
        if why == "ClusterChanged" {
            "ClusterChanged"
        } else {
            "ProposalReady"
        },
        message,
        Action::None,
        Requeue::Resync,
        now,
    )
}

/// Starts executing `status`'s proposal (batch 0).
fn start(
    req: &Request,
    old: &KafkaRebalanceStatus,
    mut status: KafkaRebalanceStatus,
    cluster: &ObservedCluster,
    now: &str,
) -> Step {
    let batches = status.proposal.as_ref().map(|p| p.batches).unwrap_or(0);
    status.progress = Some(progress_of(&status.moves, batches, 0, &[]));
    status.phase = Some(RebalancePhase::Rebalancing);
    execute(req, old, &status, cluster, now)
}

/// Moves of the batch in flight that the cluster reports as running.
fn in_flight(status: &KafkaRebalanceStatus, cluster: &ObservedCluster) -> Vec<Reassignment> {
    let current = status
        .progress
        .as_ref()
        .map(|p| p.current_batch)
        .unwrap_or(0);
    status
        .moves
        .iter()
        .filter(|m| m.batch <= current)
        .filter(|m| classify(m, cluster) == MoveState::Running)
        .map(|m| Reassignment {
            topic: m.topic.clone(),
            partition: m.partition,
            replicas: None,
        })
        .collect()
}

fn execute(
    req: &Request,
    old: &KafkaRebalanceStatus,
    current: &KafkaRebalanceStatus,
    cluster: &ObservedCluster,
    now: &str,
) -> Step {
    let batches = current.proposal.as_ref().map(|p| p.batches).unwrap_or(0);
    let mut batch = current
        .progress
        .as_ref()
        .map(|p| p.current_batch)
        .unwrap_or(0)
        .max(0);
    loop {
        let moves: Vec<&PlannedMove> = current.moves.iter().filter(|m| m.batch == batch).collect();
        if moves.is_empty() || batch >= batches {
            return complete(req, old, current, cluster, batches, now);
        }
        let states: Vec<MoveState> = moves.iter().map(|m| classify(m, cluster)).collect();
        if states.contains(&MoveState::Diverged) {
            if states.contains(&MoveState::Running) {
                // Let what runs finish before planning again.
                let mut status = current.clone();
                let done: Vec<bool> = states.iter().map(|s| *s == MoveState::Done).collect();
                status.progress = Some(progress_of(&current.moves, batches, batch, &done));
                return finish(
                    req,
                    old,
                    status,
                    RebalancePhase::Rebalancing,
                    "ClusterChanged",
                    "the cluster changed under the proposal; it is recomputed once the moves in flight finish".into(),
                    Action::None,
                    Requeue::Soon,
                    now,
                );
            }
            return propose(req, old, cluster, "ClusterChanged", now);
        }
        if states.iter().all(|s| *s == MoveState::Done) {
            batch += 1;
            continue;
        }
        let submit: Vec<Reassignment> = moves
            .iter()
            .zip(&states)
            .filter(|(_, s)| **s == MoveState::NotStarted)
            .map(|(m, _)| Reassignment {
                topic: m.topic.clone(),
                partition: m.partition,
                replicas: Some(m.to.clone()),
            })
            .collect();
        let done: Vec<bool> = states.iter().map(|s| *s == MoveState::Done).collect();
        let mut status = current.clone();
        let progress = progress_of(&current.moves, batches, batch, &done);
        let message = format!(
            "batch {} of {}: {} of {} partition(s) moved, {} of {} bytes",
            batch + 1,
            batches,
            progress.partitions_done,
            progress.partitions_total,
            progress.bytes_moved,
            progress.bytes_total
        );
        status.progress = Some(progress);
        let action = if submit.is_empty() {
            Action::None
        } else {
            Action::Submit(submit)
        };
        return finish(
            req,
            old,
            status,
            RebalancePhase::Rebalancing,
            "Rebalancing",
            message,
            action,
            Requeue::Soon,
            now,
        );
    }
}

fn complete(
    req: &Request,
    old: &KafkaRebalanceStatus,
    current: &KafkaRebalanceStatus,
    cluster: &ObservedCluster,
    batches: i64,
    now: &str,
) -> Step {
    let mut status = current.clone();
    let progress = progress_of(&current.moves, batches, batches, &[]);
    let message = format!(
        "{} partition(s) moved, {} bytes",
        progress.partitions_done, progress.bytes_moved
    );
    status.progress = Some(progress);
    // Leadership follows the new first replicas.
    let leaders: BTreeMap<(&str, i32), Option<BrokerId>> = cluster
        .partitions
        .iter()
        .map(|p| ((p.topic.as_str(), p.partition), p.leader))
        .collect();
    let elect: Vec<(String, i32)> = current
        .moves
        .iter()
        .filter(|m| {
            leaders
                .get(&(m.topic.as_str(), m.partition))
                .is_some_and(|l| *l != m.to.first().copied())
        })
        .map(|m| (m.topic.clone(), m.partition))
        .collect();
    let action = if elect.is_empty() {
        Action::None
    } else {
        Action::ElectPreferred(elect)
    };
    finish(
        req,
        old,
        status,
        RebalancePhase::Ready,
        "RebalanceComplete",
        message,
        action,
        Requeue::Idle,
        now,
    )
}

fn stop(req: &Request, old: &KafkaRebalanceStatus, cluster: &ObservedCluster, now: &str) -> Step {
    if old.phase == Some(RebalancePhase::Ready) {
        return keep(req, old, Requeue::Idle, now);
    }
    let cancel = in_flight(old, cluster);
    let mut status = old.clone();
    if old.phase == Some(RebalancePhase::Rebalancing) || old.phase == Some(RebalancePhase::Stopped)
    {
        if let Some(p) = &old.progress {
            let current: Vec<&PlannedMove> = old
                .moves
                .iter()
                .filter(|m| m.batch == p.current_batch)
                .collect();
            let done: Vec<bool> = current
                .iter()
                .map(|m| classify(m, cluster) == MoveState::Done)
                .collect();
            status.progress = Some(progress_of(&old.moves, p.batches, p.current_batch, &done));
        }
    }
    let message = if cancel.is_empty() {
        "stopped by the annotation moldau.io/rebalance-stop; no move was in flight".to_string()
    } else {
        format!(
            "stopped by the annotation moldau.io/rebalance-stop; cancelling {} move(s) in flight",
            cancel.len()
        )
    };
    let (action, requeue) = if cancel.is_empty() {
        (Action::None, Requeue::Idle)
    } else {
        (Action::Cancel(cancel), Requeue::Soon)
    };
    let mut step = finish(
        req,
        old,
        status,
        RebalancePhase::Stopped,
        "Stopped",
        message,
        action,
        requeue,
        now,
    );
    if old.phase == Some(RebalancePhase::Stopped) {
        step.event = None;
    }
    step
}
