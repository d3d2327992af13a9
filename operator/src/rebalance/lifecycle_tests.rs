//! Every transition of the `KafkaRebalance` lifecycle, against a simulated
//! cluster that executes reassignments the way KIP-455 does (a submitted
//! move runs until the test finishes it; a cancel restores the source).

use super::lifecycle::*;
use super::model::{Broker, Partition};
use crate::crd::{KafkaRebalanceSpec, KafkaRebalanceStatus, RebalanceMode, RebalancePhase};
use crate::kafka::{OngoingReassignment, Reassignment};

const NOW: &str = "2026-12-02T00:00:00Z";

fn spec(mode: RebalanceMode, brokers: &[i32]) -> KafkaRebalanceSpec {
    KafkaRebalanceSpec {
        cluster: "demo".into(),
        mode,
        brokers: brokers.to_vec(),
        throttle_bytes_per_second: None,
        topics: None,
        max_concurrent_moves: Some(2),
        approved: false,
    }
}

/// Brokers 0..n; topic `t` with `parts` partitions of RF 2 on brokers
/// 0..=2 only (so broker 3, when present, is empty).
fn cluster(n: i32, parts: i32) -> ObservedCluster {
    ObservedCluster {
        brokers: (0..n).map(|id| Broker { id, rack: None }).collect(),
        partitions: (0..parts)
            .map(|i| {
                let a = i % 3;
                let b = (i + 1) % 3;
                Partition {
                    topic: "t".into(),
                    partition: i,
                    replicas: vec![a, b],
                    leader: Some(a),
                    size_bytes: 1000,
                    min_insync_replicas: 1,
                }
            })
            .collect(),
        ongoing: Vec::new(),
    }
}

fn req(spec: &KafkaRebalanceSpec) -> Request<'_> {
    Request {
        spec,
        approve_annotation: false,
        stop_annotation: false,
        generation: Some(1),
    }
}

fn step(r: &Request, status: Option<&KafkaRebalanceStatus>, c: &ObservedCluster) -> Step {
    next(r, status, &Observation::Cluster(c.clone()), NOW)
}

fn reason(s: &KafkaRebalanceStatus) -> String {
    s.conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

/// Starts the submitted moves (they run until [`finish_all`]).
fn start_moves(c: &mut ObservedCluster, action: &Action) {
    if let Action::Submit(moves) = action {
        for m in moves {
            let to = m.replicas.clone().unwrap();
            let p = c
                .partitions
                .iter_mut()
                .find(|p| p.topic == m.topic && p.partition == m.partition)
                .unwrap();
            let mut all = p.replicas.clone();
            all.extend(to.iter().filter(|b| !p.replicas.contains(b)));
            c.ongoing.push(OngoingReassignment {
                topic: m.topic.clone(),
                partition: m.partition,
                replicas: all,
                adding: to
                    .iter()
                    .copied()
                    .filter(|b| !p.replicas.contains(b))
                    .collect(),
                removing: p
                    .replicas
                    .iter()
                    .copied()
                    .filter(|b| !to.contains(b))
                    .collect(),
            });
            p.replicas = to; // the final list, applied when finished (below)
        }
    }
}

/// Finishes every running move. `start_moves` already wrote the targets
/// into the partitions; while a move runs the test keeps them as they would
/// be read, so here only the running list is cleared.
fn finish_all(c: &mut ObservedCluster) {
    c.ongoing.clear();
}

/// Cancels: the partitions go back to their sources.
fn cancel(c: &mut ObservedCluster, action: &Action, status: &KafkaRebalanceStatus) {
    if let Action::Cancel(moves) = action {
        for m in moves {
            assert_eq!(m.replicas, None);
            let planned = status
                .moves
                .iter()
                .find(|p| p.topic == m.topic && p.partition == m.partition)
                .unwrap();
            c.ongoing
                .retain(|o| !(o.topic == m.topic && o.partition == m.partition));
            let p = c
                .partitions
                .iter_mut()
                .find(|p| p.topic == m.topic && p.partition == m.partition)
                .unwrap();
            p.replicas = planned.from.clone();
        }
    }
}

/// Replicas on brokers 0, 1, 3 that are neither `m`'s source nor target.
fn elsewhere(m: &crate::crd::PlannedMove) -> Vec<i32> {
    let set = |v: &[i32]| v.iter().copied().collect::<std::collections::BTreeSet<_>>();
    [[0, 1], [0, 3], [1, 3], [3, 0], [1, 0], [3, 1]]
        .into_iter()
        .map(|p| p.to_vec())
        .find(|p| set(p) != set(&m.from) && set(p) != set(&m.to))
        .unwrap()
}

#[test]
fn first_step_proposes_and_waits_for_approval() {
    let s = spec(RebalanceMode::RemoveBrokers, &[2]);
    let c = cluster(4, 6);
    let st = step(&req(&s), None, &c);
    assert_eq!(st.status.phase, Some(RebalancePhase::ProposalReady));
    assert_eq!(st.action, Action::None);
    assert_eq!(st.requeue, Requeue::Resync);
    assert_eq!(reason(&st.status), "ProposalReady");
    assert_eq!(st.status.observed_generation, Some(1));
    let p = st.status.proposal.clone().unwrap();
    assert_eq!(p.moves, 4, "4 partitions have a replica on broker 2");
    assert_eq!(p.bytes_to_move, 4000);
    assert_eq!(p.batches, 2, "maxConcurrentMoves 2");
    let b2 = p.brokers.iter().find(|b| b.broker == 2).unwrap();
    assert_eq!((b2.before.replicas, b2.after.replicas), (4, 0));
    assert_eq!(st.status.moves.len(), 4);
    assert!(st.status.session_id.is_some());
    assert!(st.event.is_some());
    // again, unapproved: nothing changes, no new Event
    let again = step(&req(&s), Some(&st.status), &c);
    assert_eq!(again.status, st.status);
    assert_eq!(again.action, Action::None);
    assert!(again.event.is_none());
}

fn run_to_end(s: &KafkaRebalanceSpec, annotation: bool) -> (ObservedCluster, KafkaRebalanceStatus) {
    let mut c = cluster(4, 6);
    let proposal = step(&req(s), None, &c);
    let mut r = req(s);
    r.approve_annotation = annotation;
    let mut status = proposal.status;
    let mut submitted_batches = 0;
    for _ in 0..20 {
        let st = step(&r, Some(&status), &c);
        status = st.status;
        match &st.action {
            Action::Submit(moves) => {
                assert!(moves.len() <= 2, "a batch is at most maxConcurrentMoves");
                assert_eq!(status.phase, Some(RebalancePhase::Rebalancing));
                assert_eq!(st.requeue, Requeue::Soon);
                start_moves(&mut c, &st.action);
                submitted_batches += 1;
                // while they run: wait, submit nothing again
                let wait = step(&r, Some(&status), &c);
                assert_eq!(wait.action, Action::None);
                assert_eq!(wait.status.phase, Some(RebalancePhase::Rebalancing));
                finish_all(&mut c);
            }
            Action::ElectPreferred(_) | Action::None
                if status.phase == Some(RebalancePhase::Ready) =>
            {
                break
            }
            other => panic!("unexpected {other:?} in {:?}", status.phase),
        }
    }
    assert_eq!(submitted_batches, 2);
    (c, status)
}

#[test]
fn approval_by_annotation_runs_every_batch_to_ready() {
    let s = spec(RebalanceMode::RemoveBrokers, &[2]);
    let (c, status) = run_to_end(&s, true);
    assert_eq!(status.phase, Some(RebalancePhase::Ready));
    assert_eq!(reason(&status), "RebalanceComplete");
    assert!(drained(&c, 2));
    let p = status.progress.clone().unwrap();
    assert_eq!((p.partitions_done, p.partitions_total), (4, 4));
    assert_eq!(p.bytes_moved, 4000);
    assert_eq!(p.current_batch, p.batches);
    // Ready is final: the same request does nothing more
    let again = step(&req(&s), Some(&status), &c);
    assert_eq!(again.action, Action::None);
    assert_eq!(again.requeue, Requeue::Idle);
    assert_eq!(again.status.phase, Some(RebalancePhase::Ready));
}

#[test]
fn approval_by_spec_runs_the_same_plan() {
    let mut s = spec(RebalanceMode::RemoveBrokers, &[2]);
    let first = step(&req(&s), None, &cluster(4, 6));
    s.approved = true;
    let st = step(&req(&s), Some(&first.status), &cluster(4, 6));
    assert_eq!(st.status.phase, Some(RebalancePhase::Rebalancing));
    assert_eq!(
        st.status.session_id, first.status.session_id,
        "approving does not recompute the proposal"
    );
    let Action::Submit(moves) = &st.action else {
        panic!("expected a batch, got {:?}", st.action)
    };
    let planned: Vec<Reassignment> = first
        .status
        .moves
        .iter()
        .filter(|m| m.batch == 0)
        .map(|m| Reassignment {
            topic: m.topic.clone(),
            partition: m.partition,
            replicas: Some(m.to.clone()),
        })
        .collect();
    assert_eq!(moves, &planned);
    let (_, status) = run_to_end(&s, false);
    assert_eq!(status.phase, Some(RebalancePhase::Ready));
}

#[test]
fn approved_from_creation_starts_at_once() {
    let mut s = spec(RebalanceMode::AddBrokers, &[3]);
    s.approved = true;
    let st = step(&req(&s), None, &cluster(4, 6));
    assert_eq!(st.status.phase, Some(RebalancePhase::Rebalancing));
    assert!(matches!(st.action, Action::Submit(_)));
    assert!(st.status.proposal.is_some());
}

#[test]
fn stop_cancels_the_moves_in_flight() {
    let mut s = spec(RebalanceMode::RemoveBrokers, &[2]);
    s.approved = true;
    let mut c = cluster(4, 6);
    let st = step(&req(&s), None, &c);
    start_moves(&mut c, &st.action);
    let mut r = req(&s);
    r.stop_annotation = true;
    let stopped = step(&r, Some(&st.status), &c);
    assert_eq!(stopped.status.phase, Some(RebalancePhase::Stopped));
    assert_eq!(reason(&stopped.status), "Stopped");
    let Action::Cancel(cancelled) = &stopped.action else {
        panic!("expected a cancel, got {:?}", stopped.action)
    };
    assert_eq!(cancelled.len(), 2);
    assert_eq!(stopped.requeue, Requeue::Soon);
    // the cancel was lost: the next step cancels again (idempotent)
    let retry = step(&r, Some(&stopped.status), &c);
    assert_eq!(retry.action, stopped.action);
    assert!(retry.event.is_none());
    cancel(&mut c, &stopped.action, &stopped.status);
    let settled = step(&r, Some(&stopped.status), &c);
    assert_eq!(settled.action, Action::None);
    assert_eq!(settled.status.phase, Some(RebalancePhase::Stopped));
    assert_eq!(settled.requeue, Requeue::Idle);
    assert_eq!(settled.status.progress.clone().unwrap().partitions_done, 0);
    assert!(!drained(&c, 2), "cancelled moves restored the sources");
    // Stopped is final, also once the annotation is removed
    let later = step(&req(&s), Some(&settled.status), &c);
    assert_eq!(later.status.phase, Some(RebalancePhase::Stopped));
    assert_eq!(later.action, Action::None);
}

#[test]
fn stop_before_approval_just_stops() {
    let s = spec(RebalanceMode::RemoveBrokers, &[2]);
    let c = cluster(4, 6);
    let st = step(&req(&s), None, &c);
    let mut r = req(&s);
    r.stop_annotation = true;
    let stopped = step(&r, Some(&st.status), &c);
    assert_eq!(stopped.status.phase, Some(RebalancePhase::Stopped));
    assert_eq!(stopped.action, Action::None);
}

#[test]
fn a_spec_change_after_the_proposal_recomputes_it() {
    let mut s = spec(RebalanceMode::RemoveBrokers, &[2]);
    let c = cluster(4, 6);
    let first = step(&req(&s), None, &c);
    s.max_concurrent_moves = Some(4);
    let mut r = req(&s);
    r.generation = Some(2);
    let st = step(&r, Some(&first.status), &c);
    assert_eq!(st.status.phase, Some(RebalancePhase::ProposalReady));
    assert_eq!(st.status.observed_generation, Some(2));
    assert_eq!(st.status.proposal.as_ref().unwrap().batches, 1);
    assert_ne!(st.status.session_id, first.status.session_id);
    assert!(st
        .status
        .conditions
        .iter()
        .all(|c| c.observed_generation == Some(2)));
    // a change of the mode, too; even after Ready
    let (c2, done) = run_to_end(&spec(RebalanceMode::RemoveBrokers, &[2]), true);
    let full = spec(RebalanceMode::Full, &[]);
    let st = step(&req(&full), Some(&done), &c2);
    assert_ne!(st.status.session_id, done.session_id);
    assert_ne!(st.status.phase, Some(RebalancePhase::Rebalancing));
}

#[test]
fn a_spec_change_mid_way_waits_for_the_batch_in_flight() {
    let mut s = spec(RebalanceMode::RemoveBrokers, &[2]);
    s.approved = true;
    let mut c = cluster(4, 6);
    let st = step(&req(&s), None, &c);
    start_moves(&mut c, &st.action);
    s.max_concurrent_moves = Some(5);
    let changed = step(&req(&s), Some(&st.status), &c);
    assert_eq!(changed.status.phase, Some(RebalancePhase::Rebalancing));
    assert_eq!(reason(&changed.status), "SpecChanged");
    assert_eq!(changed.action, Action::None, "nothing cancelled");
    finish_all(&mut c);
    let replanned = step(&req(&s), Some(&changed.status), &c);
    assert_ne!(replanned.status.session_id, st.status.session_id);
    assert_eq!(
        replanned.status.proposal.as_ref().unwrap().moves,
        2,
        "what is left"
    );
    assert!(
        matches!(replanned.action, Action::Submit(_)),
        "still approved"
    );
}

#[test]
fn a_cluster_changed_under_an_approved_plan_is_replanned() {
    let mut s = spec(RebalanceMode::RemoveBrokers, &[2]);
    s.approved = true;
    let mut c = cluster(4, 6);
    let st = step(&req(&s), None, &c);
    start_moves(&mut c, &st.action);
    finish_all(&mut c);
    // someone else moves a partition of batch 1 elsewhere
    let later = st.status.moves.iter().find(|m| m.batch == 1).unwrap();
    let p = c
        .partitions
        .iter_mut()
        .find(|p| p.topic == later.topic && p.partition == later.partition)
        .unwrap();
    p.replicas = elsewhere(later);
    let advanced = step(&req(&s), Some(&st.status), &c);
    assert_eq!(reason(&advanced.status), "Rebalancing");
    assert_ne!(advanced.status.session_id, st.status.session_id);
    assert_eq!(advanced.status.phase, Some(RebalancePhase::Rebalancing));
    assert!(matches!(advanced.action, Action::Submit(_)));
    assert_eq!(advanced.event.as_ref().unwrap().reason, "ClusterChanged");
}

#[test]
fn a_cluster_changed_under_an_unapproved_proposal_recomputes_and_waits() {
    let s = spec(RebalanceMode::RemoveBrokers, &[2]);
    let mut c = cluster(4, 6);
    let st = step(&req(&s), None, &c);
    let m = &st.status.moves[0];
    let p = c
        .partitions
        .iter_mut()
        .find(|p| p.topic == m.topic && p.partition == m.partition)
        .unwrap();
    p.replicas = elsewhere(m);
    let again = step(&req(&s), Some(&st.status), &c);
    assert_eq!(again.status.phase, Some(RebalancePhase::ProposalReady));
    assert_eq!(reason(&again.status), "ClusterChanged");
    assert_ne!(again.status.session_id, st.status.session_id);
    assert!(again
        .status
        .moves
        .iter()
        .all(|n| !(n.topic == m.topic && n.partition == m.partition && n.from == m.from)));
    assert_eq!(again.action, Action::None);
}

#[test]
fn a_target_broker_gone_is_a_cluster_change() {
    let mut s = spec(RebalanceMode::AddBrokers, &[3]);
    s.approved = true;
    let mut c = cluster(4, 6);
    let st = step(&req(&s), None, &c);
    c.brokers.retain(|b| b.id != 3);
    let gone = step(&req(&s), Some(&st.status), &c);
    // broker 3 named by the goal is gone: the recomputation fails clearly
    assert_eq!(gone.status.phase, Some(RebalancePhase::Failed));
    assert_eq!(reason(&gone.status), "UnknownBroker");
}

fn failure(s: &KafkaRebalanceSpec, c: &ObservedCluster) -> String {
    let st = step(&req(s), None, c);
    assert_eq!(st.status.phase, Some(RebalancePhase::Failed), "{st:?}");
    assert_eq!(st.action, Action::None);
    assert!(st.event.as_ref().unwrap().warning);
    assert_eq!(
        st.status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap()
            .status,
        "False"
    );
    reason(&st.status)
}

#[test]
fn invalid_input_fails_with_a_reason() {
    let c = cluster(4, 6);
    assert_eq!(
        failure(&spec(RebalanceMode::RemoveBrokers, &[]), &c),
        "BrokersRequired"
    );
    assert_eq!(
        failure(&spec(RebalanceMode::AddBrokers, &[]), &c),
        "BrokersRequired"
    );
    assert_eq!(
        failure(&spec(RebalanceMode::Full, &[1]), &c),
        "BrokersNotAllowed"
    );
    assert_eq!(
        failure(&spec(RebalanceMode::RemoveBrokers, &[7]), &c),
        "UnknownBroker"
    );
    assert_eq!(
        failure(&spec(RebalanceMode::RemoveBrokers, &[0, 1, 2]), &c),
        "NotEnoughBrokers"
    );
    let mut zero = spec(RebalanceMode::Full, &[]);
    zero.max_concurrent_moves = Some(0);
    assert_eq!(failure(&zero, &c), "InvalidSpec");
    let mut pinned = spec(RebalanceMode::RemoveBrokers, &[2]);
    pinned.topics = Some(vec!["other".into()]);
    assert_eq!(failure(&pinned, &c), "TopicFilterBlocksRemoval");

    let s = spec(RebalanceMode::Full, &[]);
    let st = next(
        &req(&s),
        None,
        &Observation::ClusterNotFound("KafkaCluster ns/demo does not exist".into()),
        NOW,
    );
    assert_eq!(st.status.phase, Some(RebalancePhase::Failed));
    assert_eq!(reason(&st.status), "ClusterNotFound");
    assert_eq!(st.requeue, Requeue::Soon);
    // once the cluster exists the failure heals
    let healed = step(&req(&s), Some(&st.status), &c);
    assert_eq!(healed.status.phase, Some(RebalancePhase::ProposalReady));
}

#[test]
fn offline_brokers_may_only_be_removed() {
    let mut c = cluster(4, 6);
    c.brokers.retain(|b| b.id != 2);
    assert_eq!(
        failure(&spec(RebalanceMode::Full, &[]), &c),
        "BrokersOffline"
    );
    let st = step(&req(&spec(RebalanceMode::RemoveBrokers, &[2])), None, &c);
    assert_eq!(st.status.phase, Some(RebalancePhase::ProposalReady));
    assert_eq!(st.status.proposal.unwrap().moves, 4);
}

#[test]
fn unreachable_brokers_keep_the_phase() {
    let mut s = spec(RebalanceMode::RemoveBrokers, &[2]);
    s.approved = true;
    let c = cluster(4, 6);
    let st = step(&req(&s), None, &c);
    let down = next(
        &req(&s),
        Some(&st.status),
        &Observation::Unavailable("no Ready broker".into()),
        NOW,
    );
    assert_eq!(down.status.phase, Some(RebalancePhase::Rebalancing));
    assert_eq!(reason(&down.status), "KafkaUnavailable");
    assert_eq!(down.status.moves, st.status.moves);
    assert_eq!(down.action, Action::None);
    assert_eq!(down.requeue, Requeue::Soon);
    let back = step(&req(&s), Some(&down.status), &c);
    assert_eq!(back.status.phase, Some(RebalancePhase::Rebalancing));
    assert_eq!(reason(&back.status), "Rebalancing");
}

#[test]
fn a_balanced_cluster_is_ready_at_once() {
    let c = cluster(3, 6);
    let st = step(&req(&spec(RebalanceMode::Full, &[])), None, &c);
    assert_eq!(st.status.phase, Some(RebalancePhase::Ready));
    assert_eq!(reason(&st.status), "NothingToMove");
    assert_eq!(st.status.proposal.unwrap().moves, 0);
}

#[test]
fn unknown_topics_are_reported() {
    let mut s = spec(RebalanceMode::AddBrokers, &[3]);
    s.topics = Some(vec!["t".into(), "nope".into()]);
    let st = step(&req(&s), None, &cluster(4, 6));
    let caveats = st.status.proposal.unwrap().caveats;
    assert!(caveats
        .iter()
        .any(|c| c.contains("topic nope does not exist")));
}

#[test]
fn the_throttle_follows_the_batch_in_flight_and_is_removed_at_the_end() {
    let mut s = spec(RebalanceMode::AddBrokers, &[3]);
    s.throttle_bytes_per_second = Some(1_000_000);
    s.approved = true;
    let r = req(&s);
    let mut c = cluster(4, 12);
    // Approved: the first batch is submitted with its throttle.
    let st = step(&r, None, &c);
    assert!(matches!(st.action, Action::Submit(_)));
    let set = st.throttle.clone().expect("throttle set with batch 0");
    let applied = st.status.throttle.clone().unwrap();
    assert_eq!(applied.bytes_per_second, 1_000_000);
    let batch0: Vec<_> = st.status.moves.iter().filter(|m| m.batch == 0).collect();
    for m in &batch0 {
        for b in m.from.iter().chain(&m.to) {
            assert_eq!(set.brokers.get(b), Some(&Some(1_000_000)), "broker {b}");
        }
        let (leader, follower) = set.topics[&m.topic].clone().unwrap();
        assert!(leader.contains(&format!("{}:{}", m.partition, m.from[0])));
        assert!(follower.contains(&format!("{}:3", m.partition)));
    }
    start_moves(&mut c, &st.action);
    // While the batch runs nothing changes.
    let wait = step(&r, Some(&st.status), &c);
    assert_eq!(wait.throttle, None);
    assert_eq!(wait.status.throttle, st.status.throttle);
    // Kafka unreachable: nothing changes, what is set stays recorded.
    let down = next(
        &r,
        Some(&wait.status),
        &Observation::Unavailable("no broker".into()),
        NOW,
    );
    assert_eq!(down.throttle, None);
    assert_eq!(down.status.throttle, st.status.throttle);
    // A new rate while moves run is set on the same brokers.
    let mut faster = s.clone();
    faster.throttle_bytes_per_second = Some(2_000_000);
    let r2 = req(&faster);
    let sped = step(&r2, Some(&wait.status), &c);
    let ch = sped.throttle.clone().unwrap();
    assert!(ch.brokers.values().all(|v| *v == Some(2_000_000)));
    assert!(ch.topics.is_empty());
    // Run every batch to the end; the last step removes exactly what is set.
    let mut status = sped.status;
    let mut last = None;
    for _ in 0..20 {
        finish_all(&mut c);
        let st = step(&r2, Some(&status), &c);
        start_moves(&mut c, &st.action);
        status = st.status.clone();
        if status.phase == Some(RebalancePhase::Ready) {
            last = Some(st);
            break;
        }
        assert!(status.throttle.is_some());
    }
    let done = last.expect("Ready");
    assert_eq!(done.status.throttle, None);
    let clear = done.throttle.unwrap();
    assert!(clear.brokers.values().all(|v| v.is_none()));
    assert!(clear.topics.values().all(|v| v.is_none()));
    assert!(!clear.topics.is_empty());
}

#[test]
fn stop_and_failure_remove_the_throttle() {
    let mut s = spec(RebalanceMode::AddBrokers, &[3]);
    s.throttle_bytes_per_second = Some(1_000);
    s.approved = true;
    let r = req(&s);
    let mut c = cluster(4, 12);
    let st = step(&r, None, &c);
    start_moves(&mut c, &st.action);
    let set = st.status.throttle.clone().unwrap();
    let mut stop = r.clone();
    stop.stop_annotation = true;
    let stopped = step(&stop, Some(&st.status), &c);
    assert!(matches!(stopped.action, Action::Cancel(_)));
    assert_eq!(stopped.status.throttle, None);
    let clear = stopped.throttle.unwrap();
    assert_eq!(clear.brokers.len(), set.brokers.len());
    // Failed (the brokers refused) removes it too.
    let refused = refused(
        &r,
        None,
        &st,
        &[crate::kafka::PartitionError {
            topic: "t".into(),
            partition: 0,
            code: 39,
            message: None,
        }],
        NOW,
    );
    assert_eq!(refused.status.phase, Some(RebalancePhase::Failed));
    assert_eq!(refused.status.throttle, None);
    assert!(refused.throttle.is_some());
    // Without a throttle in the spec nothing is ever set.
    let mut plain = s.clone();
    plain.throttle_bytes_per_second = None;
    let st = step(&req(&plain), None, &cluster(4, 12));
    assert_eq!(st.throttle, None);
    assert_eq!(st.status.throttle, None);
}

#[test]
fn reorders_finish_with_a_preferred_leader_election() {
    // Leaders all on broker 0: a full rebalance without data to move only
    // reorders; once the lists are reordered the leaders are elected.
    let mut c = ObservedCluster {
        brokers: (0..2).map(|id| Broker { id, rack: None }).collect(),
        partitions: (0..4)
            .map(|i| Partition {
                topic: "t".into(),
                partition: i,
                replicas: vec![0, 1],
                leader: Some(0),
                size_bytes: 10,
                min_insync_replicas: 1,
            })
            .collect(),
        ongoing: Vec::new(),
    };
    let mut s = spec(RebalanceMode::Full, &[]);
    s.approved = true;
    let st = step(&req(&s), None, &c);
    assert_eq!(st.status.proposal.as_ref().unwrap().bytes_to_move, 0);
    start_moves(&mut c, &st.action);
    finish_all(&mut c);
    let done = step(&req(&s), Some(&st.status), &c);
    assert_eq!(done.status.phase, Some(RebalancePhase::Ready));
    let Action::ElectPreferred(parts) = &done.action else {
        panic!("expected an election, got {:?}", done.action)
    };
    assert_eq!(parts.len(), 2);
}

#[test]
fn garbage_status_never_panics() {
    let s = spec(RebalanceMode::RemoveBrokers, &[2]);
    let c = cluster(4, 6);
    let good = step(&req(&s), None, &c).status;
    let mut variants = Vec::new();
    for phase in [
        None,
        Some(RebalancePhase::ProposalReady),
        Some(RebalancePhase::Rebalancing),
        Some(RebalancePhase::Ready),
        Some(RebalancePhase::Stopped),
        Some(RebalancePhase::Failed),
    ] {
        let mut a = good.clone();
        a.phase = phase;
        variants.push(a.clone());
        let mut b = a.clone();
        b.proposal = None;
        b.progress = None;
        variants.push(b);
        let mut d = a.clone();
        if let Some(p) = d.progress.as_mut() {
            p.current_batch = -7;
        }
        d.moves.iter_mut().for_each(|m| m.batch = 99);
        variants.push(d);
        let mut e = a;
        e.moves.iter_mut().for_each(|m| {
            m.topic = "gone".into();
            m.to.clear();
        });
        variants.push(e);
    }
    for v in &variants {
        for stop in [false, true] {
            let mut r = req(&s);
            r.stop_annotation = stop;
            r.approve_annotation = true;
            let _ = step(&r, Some(v), &c);
            let _ = next(&r, Some(v), &Observation::Unavailable("x".into()), NOW);
            let _ = next(&r, Some(v), &Observation::ClusterNotFound("x".into()), NOW);
        }
    }
}

#[test]
fn annotations_are_true_only_when_they_say_so() {
    assert!(annotation_true(Some(&"true".to_string())));
    assert!(annotation_true(Some(&" TRUE ".to_string())));
    assert!(!annotation_true(Some(&"yes".to_string())));
    assert!(!annotation_true(None));
}

#[test]
fn refused_moves_fail_with_the_brokers_reason() {
    let mut s = spec(RebalanceMode::RemoveBrokers, &[2]);
    s.approved = true;
    let c = cluster(4, 6);
    let st = step(&req(&s), None, &c);
    let errors = vec![crate::kafka::PartitionError {
        topic: "t".into(),
        partition: 1,
        code: 39,
        message: Some("replica 9 is not alive".into()),
    }];
    let failed = refused(&req(&s), Some(&st.status), &st, &errors, NOW);
    assert_eq!(failed.status.phase, Some(RebalancePhase::Failed));
    assert_eq!(reason(&failed.status), "ReassignmentRefused");
    let msg = &failed
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message;
    assert!(
        msg.contains("t-1") && msg.contains("replica 9 is not alive"),
        "{msg}"
    );
    // the next step plans again from the cluster as it is
    let again = step(&req(&s), Some(&failed.status), &c);
    assert_eq!(again.status.phase, Some(RebalancePhase::Rebalancing));
}
