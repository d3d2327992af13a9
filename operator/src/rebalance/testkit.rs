//! Test helpers: building inputs, applying a plan, modelling its execution
//! under KIP-455, and the checks every plan must pass whatever the input.

use std::collections::{BTreeMap, BTreeSet};

use super::model::{Broker, BrokerId, BrokerLoad, Goal, Options, Partition, Plan};

pub fn broker(id: BrokerId, rack: Option<&str>) -> Broker {
    Broker {
        id,
        rack: rack.map(str::to_string),
    }
}

pub fn part(topic: &str, partition: i32, replicas: &[BrokerId], size: u64) -> Partition {
    Partition {
        topic: topic.into(),
        partition,
        replicas: replicas.to_vec(),
        leader: replicas.first().copied(),
        size_bytes: size,
        min_insync_replicas: replicas.len().min(2),
    }
}

/// The partitions as they are after every move of `plan`.
pub fn apply(partitions: &[Partition], plan: &Plan) -> Vec<Partition> {
    let moves: BTreeMap<(&str, i32), &Vec<BrokerId>> = plan
        .moves()
        .map(|m| ((m.topic.as_str(), m.partition), &m.to))
        .collect();
    partitions
        .iter()
        .map(|p| {
            let mut p = p.clone();
            if let Some(to) = moves.get(&(p.topic.as_str(), p.partition)) {
                p.replicas = to.to_vec();
                p.leader = p.replicas.first().copied();
            }
            p
        })
        .collect()
}

/// Distinct racks of a replica list (a broker without a rack is a rack of
/// its own).
pub fn rack_spread(brokers: &[Broker], replicas: &[BrokerId]) -> usize {
    let racks: BTreeSet<String> = replicas
        .iter()
        .map(|id| {
            let b = brokers.iter().find(|b| b.id == *id).unwrap();
            b.rack.clone().unwrap_or_else(|| format!("solo-{id}"))
        })
        .collect();
    racks.len()
}

/// Brokers not removed by the goal.
pub fn eligible(brokers: &[Broker], goal: &Goal) -> Vec<BrokerId> {
    let removed: &[BrokerId] = match goal {
        Goal::RemoveBrokers(v) => v,
        _ => &[],
    };
    brokers
        .iter()
        .map(|b| b.id)
        .filter(|id| !removed.contains(id))
        .collect()
}

/// Distinct racks among eligible brokers.
pub fn eligible_racks(brokers: &[Broker], goal: &Goal) -> usize {
    rack_spread(brokers, &eligible(brokers, goal))
}

/// max − min of `key` over the eligible brokers' loads.
pub fn spread(
    loads: &[BrokerLoad],
    eligible: &[BrokerId],
    key: impl Fn(&BrokerLoad) -> u64,
) -> u64 {
    let values: Vec<u64> = loads
        .iter()
        .filter(|l| eligible.contains(&l.broker))
        .map(key)
        .collect();
    values.iter().max().unwrap_or(&0) - values.iter().min().unwrap_or(&0)
}

/// Loads recomputed from a list of partitions.
pub fn loads_of(brokers: &[Broker], partitions: &[Partition]) -> Vec<BrokerLoad> {
    let mut ids: Vec<BrokerId> = brokers.iter().map(|b| b.id).collect();
    ids.sort_unstable();
    ids.iter()
        .map(|id| {
            let on = partitions.iter().filter(|p| p.replicas.contains(id));
            BrokerLoad {
                broker: *id,
                replicas: on.clone().count(),
                leaders: on.clone().filter(|p| p.replicas[0] == *id).count(),
                bytes: on.map(|p| p.size_bytes).sum(),
            }
        })
        .collect()
}

/// Models one move under KIP-455: the targets join (the replica set is the
/// union), catch up one by one (joining the ISR), then the replicas not in
/// the target are dropped. The ISR starts as the old replicas (all in
/// sync). Asserts the partition never has fewer than RF replicas nor fewer
/// in-sync replicas than `min.insync.replicas`.
pub fn execute_move(from: &[BrokerId], to: &[BrokerId], min_isr: usize) {
    let rf = from.len();
    let ok = |replicas: &BTreeSet<BrokerId>, isr: &BTreeSet<BrokerId>| {
        assert!(replicas.len() >= rf, "replicas {replicas:?} < RF {rf}");
        assert!(
            isr.len() >= min_isr.min(rf),
            "ISR {isr:?} < min.isr {min_isr}"
        );
        assert!(isr.is_subset(replicas));
    };
    let mut replicas: BTreeSet<BrokerId> = from.iter().copied().collect();
    let mut isr = replicas.clone();
    ok(&replicas, &isr);
    replicas.extend(to.iter().copied());
    ok(&replicas, &isr);
    for b in to.iter().filter(|b| !from.contains(b)) {
        isr.insert(*b);
        ok(&replicas, &isr);
    }
    replicas = to.iter().copied().collect();
    isr.retain(|b| replicas.contains(b));
    ok(&replicas, &isr);
    assert_eq!(replicas.len(), rf);
}

/// Checks that hold for every plan of every input.
pub fn check_always(
    brokers: &[Broker],
    partitions: &[Partition],
    goal: &Goal,
    options: &Options,
    plan: &Plan,
) -> Vec<Partition> {
    let ids: BTreeSet<BrokerId> = brokers.iter().map(|b| b.id).collect();
    let mut seen = BTreeSet::new();
    for batch in &plan.batches {
        assert!(!batch.is_empty() && batch.len() <= options.max_moves_per_batch);
    }
    for m in plan.moves() {
        assert!(seen.insert((m.topic.clone(), m.partition)), "moved twice");
        let p = partitions
            .iter()
            .find(|p| p.topic == m.topic && p.partition == m.partition)
            .unwrap();
        assert_eq!(m.from, p.replicas);
        assert_ne!(m.from, m.to);
        assert_eq!(m.to.len(), m.from.len(), "RF changed");
        let distinct: BTreeSet<_> = m.to.iter().collect();
        assert_eq!(distinct.len(), m.to.len(), "repeated broker");
        assert!(m.to.iter().all(|b| ids.contains(b)));
        assert_eq!(m.bytes, p.size_bytes * m.added().len() as u64);
        if let Some(topics) = &options.topics {
            assert!(topics.contains(&m.topic), "filtered topic moved");
        }
        execute_move(&m.from, &m.to, p.min_insync_replicas);
    }
    assert_eq!(plan.total_moves, seen.len());
    assert_eq!(
        plan.bytes_to_move,
        plan.moves().map(|m| m.bytes).sum::<u64>()
    );
    let after = apply(partitions, plan);
    assert_eq!(plan.before, loads_of(brokers, partitions));
    assert_eq!(plan.after, loads_of(brokers, &after));
    check_goal(goal, plan, &after);
    check_racks(brokers, partitions, goal, &after);
    after
}

fn check_goal(goal: &Goal, plan: &Plan, after: &[Partition]) {
    match goal {
        Goal::Full => {}
        Goal::RemoveBrokers(removed) => {
            for p in after {
                assert!(
                    p.replicas.iter().all(|b| !removed.contains(b)),
                    "left on removed broker"
                );
            }
        }
        Goal::AddBrokers(added) => {
            for (b, a) in plan.before.iter().zip(&plan.after) {
                if !added.contains(&b.broker) {
                    assert!(
                        a.replicas <= b.replicas,
                        "old broker {} gained replicas",
                        b.broker
                    );
                    assert!(
                        a.leaders <= b.leaders,
                        "old broker {} gained leaders",
                        b.broker
                    );
                    assert!(a.bytes <= b.bytes, "old broker {} gained bytes", b.broker);
                }
            }
        }
    }
}

/// No partition loses rack spread below what the eligible racks allow.
fn check_racks(brokers: &[Broker], before: &[Partition], goal: &Goal, after: &[Partition]) {
    let racks = eligible_racks(brokers, goal);
    for (b, a) in before.iter().zip(after) {
        let (was, is) = (
            rack_spread(brokers, &b.replicas),
            rack_spread(brokers, &a.replicas),
        );
        assert!(
            is >= was.min(racks).min(a.replicas.len()),
            "rack spread of {}-{} fell",
            a.topic,
            a.partition
        );
    }
}
