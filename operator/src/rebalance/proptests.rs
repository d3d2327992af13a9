//! Property tests of the planner on random clusters: 1–12 brokers, 0–4
//! racks, 1–60 partitions in 1–4 topics, RF 1–min(3, brokers), sizes from
//! 0 to 100 kB with a few large ones, placements skewed toward some
//! brokers, every goal, sometimes a topic filter.
//!
//! The shape comes from proptest (so it shrinks); the details from a seed
//! through a small deterministic generator.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::model::*;
use super::plan::*;
use super::testkit::*;

/// SplitMix64: enough randomness for test inputs, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Clone, Debug)]
struct Case {
    brokers: Vec<Broker>,
    partitions: Vec<Partition>,
    goal: Goal,
    options: Options,
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    brokers: usize,
    racks: usize,
    partitions: usize,
    topics: usize,
    goal: u8,
    even_racks: bool,
    filter: bool,
    seed: u64,
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        1usize..=12,
        0usize..=4,
        1usize..=60,
        1usize..=4,
        0u8..3,
        any::<bool>(),
        0u8..4,
        any::<u64>(),
    )
        .prop_map(
            |(brokers, racks, partitions, topics, goal, even_racks, filter, seed)| Shape {
                brokers,
                racks,
                partitions,
                topics,
                goal,
                even_racks,
                filter: filter == 0,
                seed,
            },
        )
}

/// Goal, the brokers holding replicas now, and the eligible ones.
fn pick_goal(s: &Shape, ids: &[BrokerId], rng: &mut Rng) -> (Goal, Vec<BrokerId>, Vec<BrokerId>) {
    let n = ids.len();
    match s.goal {
        1 if n >= 2 => {
            let k = 1 + rng.below(n - 1);
            (
                Goal::AddBrokers(ids[n - k..].to_vec()),
                ids[..n - k].to_vec(),
                ids.to_vec(),
            )
        }
        2 if n >= 2 => {
            let mut shuffled = ids.to_vec();
            for i in (1..n).rev() {
                shuffled.swap(i, rng.below(i + 1));
            }
            let k = 1 + rng.below(n - 1);
            let kept: Vec<BrokerId> = ids
                .iter()
                .copied()
                .filter(|b| !shuffled[..k].contains(b))
                .collect();
            (
                Goal::RemoveBrokers(shuffled[..k].to_vec()),
                ids.to_vec(),
                kept,
            )
        }
        _ => (Goal::Full, ids.to_vec(), ids.to_vec()),
    }
}

fn racks_for(s: &Shape, ids: &[BrokerId], eligible: &[BrokerId], rng: &mut Rng) -> Vec<Broker> {
    let mut next_even = 0;
    ids.iter()
        .map(|id| {
            let rack = match s.racks {
                0 => None,
                r if s.even_racks && eligible.contains(id) => {
                    next_even += 1;
                    Some(format!("r{}", (next_even - 1) % r))
                }
                r => Some(format!("r{}", rng.below(r))),
            };
            Broker { id: *id, rack }
        })
        .collect()
}

/// `rf` distinct brokers drawn by weight.
fn sample(hosts: &[BrokerId], weights: &[u64], rf: usize, rng: &mut Rng) -> Vec<BrokerId> {
    let mut pool: Vec<(BrokerId, u64)> =
        hosts.iter().copied().zip(weights.iter().copied()).collect();
    let mut out = Vec::new();
    for _ in 0..rf {
        let total: u64 = pool.iter().map(|(_, w)| w).sum();
        let mut at = rng.next() % total;
        let i = pool
            .iter()
            .position(|(_, w)| {
                let hit = at < *w;
                at = at.saturating_sub(*w);
                hit
            })
            .unwrap();
        out.push(pool.remove(i).0);
    }
    out
}

fn size(rng: &mut Rng) -> u64 {
    match rng.below(10) {
        0 => 0,
        9 => rng.below(100_000) as u64,
        _ => rng.below(1_000) as u64,
    }
}

fn build(s: Shape) -> Case {
    let mut rng = Rng(s.seed);
    // Sparse ids: indexes and ids must not be confused.
    let ids: Vec<BrokerId> = (0..s.brokers as i32).map(|i| i * 3 + 1).collect();
    let (goal, hosts, eligible) = pick_goal(&s, &ids, &mut rng);
    let brokers = racks_for(&s, &ids, &eligible, &mut rng);
    let max_rf = 3.min(hosts.len()).min(eligible.len());
    let topics: Vec<(usize, usize)> = (0..s.topics)
        .map(|_| {
            let rf = 1 + rng.below(max_rf);
            (rf, 1 + rng.below(rf))
        })
        .collect();
    let weights: Vec<u64> = hosts.iter().map(|_| 1 << rng.below(6)).collect();
    let mut next = vec![0; s.topics];
    let partitions = (0..s.partitions)
        .map(|_| {
            let t = rng.below(s.topics);
            let (rf, min_isr) = topics[t];
            let replicas = sample(&hosts, &weights, rf, &mut rng);
            next[t] += 1;
            Partition {
                topic: format!("t{t}"),
                partition: next[t] - 1,
                leader: (rng.below(8) > 0).then(|| replicas[rng.below(rf)]),
                replicas,
                size_bytes: size(&mut rng),
                min_insync_replicas: min_isr,
            }
        })
        .collect();
    let topics = s.filter.then(|| {
        (0..s.topics)
            .filter(|_| rng.below(2) == 0)
            .map(|t| format!("t{t}"))
            .collect::<BTreeSet<_>>()
    });
    let options = Options {
        byte_tolerance_percent: [0, 5, 10, 30][rng.below(4)],
        max_moves_per_batch: 1 + rng.below(8),
        topics,
    };
    Case {
        brokers,
        partitions,
        goal,
        options,
    }
}

/// Every rack has as many eligible brokers as every other (true without
/// racks: each broker is its own).
fn even_racks(c: &Case) -> bool {
    let el = eligible(&c.brokers, &c.goal);
    let mut sizes = std::collections::BTreeMap::new();
    for b in c.brokers.iter().filter(|b| el.contains(&b.id)) {
        let key = b.rack.clone().unwrap_or_else(|| format!("solo-{}", b.id));
        *sizes.entry(key).or_insert(0) += 1;
    }
    let v: BTreeSet<i32> = sizes.values().copied().collect();
    v.len() <= 1
}

/// Lower bound of replica additions to reach counts within 1: brokers above
/// the ceiling of the mean (removed ones: all they hold) must give that
/// many, brokers below the floor must get that many; `(excess, deficit)`.
fn count_bounds(c: &Case, before: &[BrokerLoad]) -> (usize, usize) {
    let el = eligible(&c.brokers, &c.goal);
    let total: usize = before.iter().map(|l| l.replicas).sum();
    let (floor, ceil) = (total / el.len(), total.div_ceil(el.len()));
    let mut excess = 0;
    let mut deficit = 0;
    for l in before {
        if !el.contains(&l.broker) {
            excess += l.replicas;
        } else {
            excess += l.replicas.saturating_sub(ceil);
            deficit += floor.saturating_sub(l.replicas);
        }
    }
    (excess, deficit)
}

fn check_caveats(c: &Case, plan: &Plan) {
    let el = eligible(&c.brokers, &c.goal);
    let has = |f: &dyn Fn(&Caveat) -> bool| plan.caveats.iter().any(f);
    let replicas = spread(&plan.after, &el, |l| l.replicas as u64);
    let leaders = spread(&plan.after, &el, |l| l.leaders as u64);
    let bytes = spread(&plan.after, &el, |l| l.bytes);
    assert_eq!(
        replicas > 1,
        has(&|k| matches!(k, Caveat::ReplicaImbalance { .. }))
    );
    assert_eq!(
        leaders > 1,
        has(&|k| matches!(k, Caveat::LeaderImbalance { .. }))
    );
    assert_eq!(
        bytes > plan.byte_tolerance,
        has(&|k| matches!(k, Caveat::ByteImbalance { .. }))
    );
}

fn check_balance(c: &Case, plan: &Plan, after: &[Partition]) {
    let el = eligible(&c.brokers, &c.goal);
    let no_racks = c.brokers.iter().all(|b| b.rack.is_none());
    let free = c.options.topics.is_none();
    let adding = matches!(c.goal, Goal::AddBrokers(_));
    if free && !adding {
        let racks = eligible_racks(&c.brokers, &c.goal);
        for p in after {
            let wanted = p.replicas.len().min(racks);
            assert!(
                rack_spread(&c.brokers, &p.replicas) >= wanted,
                "{p:?} short of racks"
            );
        }
        if even_racks(c) {
            assert!(
                spread(&plan.after, &el, |l| l.replicas as u64) <= 1,
                "replicas {:?}",
                plan.after
            );
            assert!(
                spread(&plan.after, &el, |l| l.leaders as u64) <= 1,
                "leaders {:?}",
                plan.after
            );
        }
        if no_racks {
            let largest = c.partitions.iter().map(|p| p.size_bytes).max().unwrap_or(0);
            let bytes = spread(&plan.after, &el, |l| l.bytes);
            assert!(
                bytes <= plan.byte_tolerance + largest,
                "bytes {bytes} {:?}",
                plan.after
            );
        }
    }
    if let (Goal::AddBrokers(added), true, true) = (&c.goal, no_racks, free) {
        let count = |id: &BrokerId| {
            plan.after
                .iter()
                .find(|l| l.broker == *id)
                .unwrap()
                .replicas
        };
        let lowest_new = added.iter().map(count).min().unwrap();
        for b in el.iter().filter(|b| !added.contains(b)) {
            assert!(
                count(b) <= lowest_new + 1,
                "old broker {b} above a new one: {:?}",
                plan.after
            );
        }
    }
}

fn check_few_moves(c: &Case, plan: &Plan) {
    let no_racks = c.brokers.iter().all(|b| b.rack.is_none());
    let added: usize = plan.moves().map(|m| m.added().len()).sum();
    let s = plan.steps;
    assert!(added <= s.drain + s.rack + s.replica + s.leader_move + s.leader_swap + s.bytes);
    if no_racks && c.options.topics.is_none() {
        let (excess, deficit) = count_bounds(c, &plan.before);
        let count_steps = s.drain + s.replica;
        assert!(
            count_steps <= excess + deficit,
            "{s:?} vs {excess}+{deficit}"
        );
        assert!(count_steps <= 2 * excess.max(deficit));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn plans_keep_their_guarantees(s in shape()) {
        let c = build(s);
        let result = plan(&c.brokers, &c.partitions, &c.goal, &c.options);
        let p = match result {
            Err(PlanError::PinnedOnRemovedBroker { .. }) if c.options.topics.is_some() => return Ok(()),
            r => r.unwrap(),
        };
        let after = check_always(&c.brokers, &c.partitions, &c.goal, &c.options, &p);
        check_caveats(&c, &p);
        check_balance(&c, &p, &after);
        check_few_moves(&c, &p);
        prop_assert_eq!(&plan(&c.brokers, &c.partitions, &c.goal, &c.options).unwrap(), &p);
        let again = plan(&c.brokers, &after, &c.goal, &c.options).unwrap();
        prop_assert!(again.is_empty(), "planning the result moved {:?}", again.batches);
    }

    #[test]
    fn uniform_partitions_move_at_most_twice_the_minimum(s in shape(), size in 1u64..10_000) {
        // One topic, one RF, one size, no racks, no filter: every count step
        // is a replica copy of `size` bytes and nothing else moves data.
        let mut c = build(s);
        let rf = c.partitions.iter().map(|p| p.replicas.len()).min().unwrap();
        for (i, p) in c.partitions.iter_mut().enumerate() {
            p.topic = "t".into();
            p.partition = i as i32;
            p.replicas.truncate(rf);
            p.leader = p.replicas.first().copied();
            p.size_bytes = size;
            p.min_insync_replicas = p.min_insync_replicas.min(rf);
        }
        for b in &mut c.brokers {
            b.rack = None;
        }
        c.options.topics = None;
        let p = plan(&c.brokers, &c.partitions, &c.goal, &c.options).unwrap();
        check_always(&c.brokers, &c.partitions, &c.goal, &c.options, &p);
        let (excess, deficit) = count_bounds(&c, &p.before);
        let bound = 2 * excess.max(deficit) as u64 * size;
        prop_assert!(p.bytes_to_move <= bound, "{} > {bound}: {:?}", p.bytes_to_move, p.steps);
    }

    #[test]
    fn balanced_clusters_stay_put(
        brokers in 1usize..=12,
        racks in 0usize..=4,
        per_broker in 1usize..=5,
        rf in 1usize..=3,
        size in 0u64..10_000,
        seed in any::<u64>(),
    ) {
        // Partition i starts at broker i mod n, replicas on the next ones:
        // with n·k partitions every broker holds k·RF and leads k. Racks
        // cycle with the brokers, so consecutive brokers differ in rack.
        let racks = racks.min(brokers);
        let n = if racks > 0 { brokers - brokers % racks } else { brokers };
        let rf = rf.min(n).min(if racks > 0 { racks } else { n });
        let mut rng = Rng(seed);
        let mut ids: Vec<BrokerId> = (0..n as i32).map(|i| i * 5 + 2).collect();
        for i in (1..n).rev() {
            ids.swap(i, rng.below(i + 1));
        }
        let bs: Vec<Broker> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| Broker { id: *id, rack: (racks > 0).then(|| format!("r{}", i % racks)) })
            .collect();
        let parts: Vec<Partition> = (0..n * per_broker)
            .map(|i| {
                let replicas: Vec<BrokerId> = (0..rf).map(|j| ids[(i + j) % n]).collect();
                part("t", i as i32, &replicas, size)
            })
            .collect();
        let p = plan(&bs, &parts, &Goal::Full, &Options::default()).unwrap();
        prop_assert!(p.is_empty(), "moved {:?}", p.batches);
        prop_assert!(p.caveats.is_empty(), "{:?}", p.caveats);
    }
}
