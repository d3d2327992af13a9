//! Hand-made cases of the planner.

use std::collections::BTreeSet;

use super::model::*;
use super::plan::*;
use super::testkit::*;

fn brokers(ids: &[BrokerId]) -> Vec<Broker> {
    ids.iter().map(|id| broker(*id, None)).collect()
}

/// `count` partitions of `topic`, replicas round-robin over `ids`.
fn round_robin(topic: &str, count: i32, rf: usize, ids: &[BrokerId], size: u64) -> Vec<Partition> {
    (0..count)
        .map(|i| {
            let replicas: Vec<BrokerId> =
                (0..rf).map(|j| ids[(i as usize + j) % ids.len()]).collect();
            part(topic, i, &replicas, size)
        })
        .collect()
}

fn load(plan_loads: &[BrokerLoad], id: BrokerId) -> &BrokerLoad {
    plan_loads.iter().find(|l| l.broker == id).unwrap()
}

#[test]
fn scale_out_three_to_five() {
    let bs = brokers(&[0, 1, 2, 3, 4]);
    let parts = round_robin("orders", 24, 2, &[0, 1, 2], 100);
    let goal = Goal::AddBrokers(vec![3, 4]);
    let plan = plan(&bs, &parts, &goal, &Options::default()).unwrap();
    check_always(&bs, &parts, &goal, &Options::default(), &plan);
    // 48 replicas on 5 brokers: 9 or 10 each; the old ones had 16.
    for l in &plan.after {
        assert!((9..=10).contains(&l.replicas), "{l:?}");
        assert!((4..=5).contains(&l.leaders), "{l:?}");
    }
    // The minimum: each new broker needs 9 replicas, 18 copies of 100 bytes.
    assert_eq!(plan.steps.replica, 18);
    assert_eq!(plan.bytes_to_move, 1800);
    // 9 or 10 replicas of 100 bytes: 100 apart, over 10 % of the mean.
    assert_eq!(
        plan.caveats,
        vec![Caveat::ByteImbalance {
            spread: 100,
            tolerance: 96
        }]
    );
    assert!(plan
        .batches
        .iter()
        .all(|b| b.len() <= DEFAULT_MAX_MOVES_PER_BATCH));
}

#[test]
fn drain_two_of_five() {
    let bs = brokers(&[0, 1, 2, 3, 4]);
    let parts = round_robin("orders", 20, 2, &[0, 1, 2, 3, 4], 10);
    let goal = Goal::RemoveBrokers(vec![3, 4]);
    let plan = plan(&bs, &parts, &goal, &Options::default()).unwrap();
    check_always(&bs, &parts, &goal, &Options::default(), &plan);
    for id in [3, 4] {
        assert_eq!(
            load(&plan.after, id),
            &BrokerLoad {
                broker: id,
                ..Default::default()
            }
        );
    }
    for id in [0, 1, 2] {
        let l = load(&plan.after, id);
        assert!((13..=14).contains(&l.replicas), "{l:?}");
        assert!((6..=7).contains(&l.leaders), "{l:?}");
    }
    // 16 replicas sit on brokers 3 and 4; draining copies each once.
    assert_eq!(plan.steps.drain, 16);
    assert_eq!(
        plan.steps.replica + plan.steps.bytes + plan.steps.leader_swap,
        0
    );
    assert_eq!(plan.bytes_to_move, 160);
}

#[test]
fn balanced_cluster_gets_an_empty_plan() {
    let bs = brokers(&[1, 2, 3, 4]);
    let mut parts = round_robin("a", 12, 3, &[1, 2, 3, 4], 1000);
    parts.extend(round_robin("b", 8, 2, &[3, 4, 1, 2], 500));
    let plan = plan(&bs, &parts, &Goal::Full, &Options::default()).unwrap();
    assert!(plan.is_empty(), "{:?}", plan.batches);
    assert!(plan.caveats.is_empty());
    assert_eq!(plan.before, plan.after);
}

#[test]
fn racks_are_repaired_and_counts_stay_even() {
    let bs: Vec<Broker> = (0..6)
        .map(|id| broker(id, Some(["a", "b", "c"][id as usize / 2])))
        .collect();
    // Every partition is in racks a and b only: two replicas share a rack.
    let parts = round_robin("t", 12, 3, &[0, 1, 2, 3], 100);
    let plan = plan(&bs, &parts, &Goal::Full, &Options::default()).unwrap();
    let after = check_always(&bs, &parts, &Goal::Full, &Options::default(), &plan);
    for p in &after {
        assert_eq!(rack_spread(&bs, &p.replicas), 3, "{p:?}");
    }
    for l in &plan.after {
        assert_eq!(l.replicas, 6, "{l:?}");
        assert_eq!(l.leaders, 2, "{l:?}");
    }
    assert!(plan.steps.rack > 0);
    assert!(plan.caveats.is_empty(), "{:?}", plan.caveats);
}

#[test]
fn add_brokers_cannot_repair_racks_and_says_so() {
    // Old brokers 0,1 in rack a; new broker 2 also in rack a, 3 in rack b.
    let bs = vec![
        broker(0, Some("a")),
        broker(1, Some("a")),
        broker(2, Some("a")),
        broker(3, Some("b")),
    ];
    let parts = round_robin("t", 8, 2, &[0, 1], 100);
    let goal = Goal::AddBrokers(vec![2, 3]);
    let plan = plan(&bs, &parts, &goal, &Options::default()).unwrap();
    let after = check_always(&bs, &parts, &goal, &Options::default(), &plan);
    // Each partition gets its second rack through broker 3, which can take
    // all 8 only at the price of the count balance: racks first.
    for p in &after {
        assert_eq!(rack_spread(&bs, &p.replicas), 2, "{p:?}");
    }
    assert_eq!(load(&plan.after, 3).replicas, 8);
    assert!(plan
        .caveats
        .iter()
        .any(|c| matches!(c, Caveat::ReplicaImbalance { .. })));
}

#[test]
fn mixed_replication_factors_swap_for_leaders() {
    // Broker 0 holds only RF=1 partitions and leads all 3; brokers 1-3 lead
    // 1 each of the RF=3 partitions. Reordering cannot help broker 0.
    let bs = brokers(&[0, 1, 2, 3]);
    let mut parts = round_robin("one", 3, 1, &[0], 10);
    parts.extend(round_robin("three", 3, 3, &[1, 2, 3], 10));
    let plan = plan(&bs, &parts, &Goal::Full, &Options::default()).unwrap();
    check_always(&bs, &parts, &Goal::Full, &Options::default(), &plan);
    assert!(spread(&plan.after, &[0, 1, 2, 3], |l| l.leaders as u64) <= 1);
    assert!(spread(&plan.after, &[0, 1, 2, 3], |l| l.replicas as u64) <= 1);
    assert_eq!(plan.steps.leader_swap, 2);
}

#[test]
fn topic_filter_moves_only_named_topics() {
    let bs = brokers(&[0, 1, 2]);
    let mut parts = round_robin("pinned", 6, 1, &[0], 10);
    parts.extend(round_robin("free", 6, 1, &[0], 10));
    let options = Options {
        topics: Some(BTreeSet::from(["free".to_string()])),
        ..Options::default()
    };
    let plan = plan(&bs, &parts, &Goal::Full, &options).unwrap();
    check_always(&bs, &parts, &Goal::Full, &options, &plan);
    assert!(plan.moves().all(|m| m.topic == "free"));
    // 12 replicas, 6 pinned on broker 0: the free ones all leave it.
    assert_eq!(load(&plan.after, 0).replicas, 6);
    assert!(plan
        .caveats
        .contains(&Caveat::ReplicaImbalance { spread: 3 }));
}

#[test]
fn batches_hold_at_most_n_moves_and_reorders_come_last() {
    let bs = brokers(&[0, 1, 2, 3]);
    let parts = round_robin("t", 16, 2, &[0, 1], 10);
    let options = Options {
        max_moves_per_batch: 3,
        ..Options::default()
    };
    let plan = plan(&bs, &parts, &Goal::Full, &options).unwrap();
    check_always(&bs, &parts, &Goal::Full, &options, &plan);
    assert!(plan.batches.iter().all(|b| b.len() <= 3));
    let kinds: Vec<bool> = plan.moves().map(|m| m.is_reorder()).collect();
    assert!(
        kinds.windows(2).all(|w| w[0] <= w[1]),
        "a reorder before a data move"
    );
}

#[test]
fn impossible_inputs_are_typed_errors() {
    let bs = brokers(&[0, 1, 2]);
    let parts = round_robin("t", 3, 3, &[0, 1, 2], 10);
    let o = Options::default();
    assert_eq!(
        plan(&bs, &parts, &Goal::RemoveBrokers(vec![2]), &o),
        Err(PlanError::NotEnoughBrokers {
            topic: "t".into(),
            partition: 0,
            replication_factor: 3,
            eligible: 2
        })
    );
    assert_eq!(
        plan(&bs, &parts, &Goal::AddBrokers(vec![7]), &o),
        Err(PlanError::UnknownGoalBroker(7))
    );
    assert_eq!(
        plan(&bs, &parts, &Goal::AddBrokers(vec![]), &o),
        Err(PlanError::EmptyGoal)
    );
    let zero = Options {
        max_moves_per_batch: 0,
        ..Options::default()
    };
    assert_eq!(
        plan(&bs, &parts, &Goal::Full, &zero),
        Err(PlanError::ZeroBatch)
    );
    let dup = vec![broker(0, None), broker(0, None)];
    assert_eq!(
        plan(&dup, &[], &Goal::Full, &o),
        Err(PlanError::DuplicateBroker(0))
    );
    let bad = vec![part("t", 0, &[0, 0], 1)];
    assert!(matches!(
        plan(&bs, &bad, &Goal::Full, &o),
        Err(PlanError::BadReplicas { .. })
    ));
    let unknown = vec![part("t", 0, &[0, 9], 1)];
    assert!(matches!(
        plan(&bs, &unknown, &Goal::Full, &o),
        Err(PlanError::UnknownReplicaBroker { broker: 9, .. })
    ));
    let twice = vec![part("t", 0, &[0], 1), part("t", 0, &[1], 1)];
    assert!(matches!(
        plan(&bs, &twice, &Goal::Full, &o),
        Err(PlanError::DuplicatePartition { .. })
    ));
    let filtered = Options {
        topics: Some(BTreeSet::from(["other".to_string()])),
        ..Options::default()
    };
    let one = vec![part("t", 0, &[2], 1)];
    assert_eq!(
        plan(&bs, &one, &Goal::RemoveBrokers(vec![2]), &filtered),
        Err(PlanError::PinnedOnRemovedBroker {
            topic: "t".into(),
            partition: 0,
            broker: 2
        })
    );
}

#[test]
fn execution_model_rejects_a_shrinking_move() {
    let result = std::panic::catch_unwind(|| execute_move(&[0, 1], &[2], 1));
    assert!(result.is_err());
    execute_move(&[0, 1, 2], &[3, 4, 0], 2);
}
