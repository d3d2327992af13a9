//! Tests of [`super::rack_aware`]: the rack-aware assignors keep the
//! rack-blind ones' guarantees, match racks where those leave a choice, and
//! change nothing when racks cannot matter.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::assignor::{self, Assignment, AssignorMember, RANGE, UNIFORM};
use super::rack_aware::{assign, range, uniform};
use super::racks::Racks;

fn t(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

/// Members `(id, rack, topics)`, with no previous assignment.
fn members(specs: &[(&str, Option<&str>, &[u128])]) -> (BTreeMap<String, AssignorMember>, Racks) {
    let mut racks = Racks::default();
    let members = specs
        .iter()
        .map(|(id, rack, topics)| {
            if let Some(r) = rack {
                racks.members.insert(id.to_string(), r.to_string());
            }
            let m = AssignorMember {
                subscribed: topics.iter().map(|n| t(*n)).collect(),
                current: Assignment::new(),
            };
            (id.to_string(), m)
        })
        .collect();
    (members, racks)
}

/// Gives topic `topic`'s partitions the racks in `layout`, one string of
/// comma-separated racks per partition ("" for none).
fn place(racks: &mut Racks, topic: u128, layout: &[&str]) {
    let sets = layout
        .iter()
        .map(|rs| {
            rs.split(',')
                .filter(|r| !r.is_empty())
                .map(String::from)
                .collect()
        })
        .collect();
    racks.partitions.insert(t(topic), sets);
}

fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

fn ps(a: &Assignment, topic: u128) -> BTreeSet<i32> {
    a.get(&t(topic)).cloned().unwrap_or_default()
}

/// How many assigned partitions are in their member's rack.
fn matched(out: &BTreeMap<String, Assignment>, racks: &Racks) -> usize {
    out.iter()
        .flat_map(|(m, a)| {
            a.iter()
                .flat_map(move |(t, ps)| ps.iter().map(move |p| (m, *t, *p)))
        })
        .filter(|(m, t, p)| racks.matches(m, *t, *p))
        .count()
}

/// Every partition of a subscribed topic goes to exactly one member that
/// subscribes to it; every member has an entry.
fn assert_exact(
    out: &BTreeMap<String, Assignment>,
    members: &BTreeMap<String, AssignorMember>,
    parts: &BTreeMap<Uuid, i32>,
) {
    assert_eq!(
        out.keys().collect::<Vec<_>>(),
        members.keys().collect::<Vec<_>>()
    );
    let mut seen = BTreeSet::new();
    for (m, a) in out {
        for (topic, ps) in a {
            assert!(members[m].subscribed.contains(topic), "{m} got {topic}");
            for p in ps {
                assert!((0..parts[topic]).contains(p));
                assert!(seen.insert((*topic, *p)), "{topic} {p} twice");
            }
        }
    }
    let wanted: usize = parts
        .iter()
        .filter(|(t, _)| members.values().any(|m| m.subscribed.contains(t)))
        .map(|(_, n)| (*n).max(0) as usize)
        .sum();
    assert_eq!(seen.len(), wanted);
}

/// Uniform's guarantee: no partition could move to an eligible member
/// holding two fewer.
fn assert_uniform_balance(
    out: &BTreeMap<String, Assignment>,
    members: &BTreeMap<String, AssignorMember>,
) {
    for (from, a) in out {
        for topic in a.keys() {
            for (to, m) in members {
                if m.subscribed.contains(topic) {
                    assert!(
                        count(&out[to]) + 1 >= count(a),
                        "{from} ({}) could give {topic} to {to} ({})",
                        count(a),
                        count(&out[to])
                    );
                }
            }
        }
    }
}

/// Range's guarantee, per topic: each subscriber gets ⌊n/k⌋ or ⌈n/k⌉,
/// exactly `n % k` of them the larger.
fn assert_range_counts(
    out: &BTreeMap<String, Assignment>,
    members: &BTreeMap<String, AssignorMember>,
    parts: &BTreeMap<Uuid, i32>,
) {
    for (topic, n) in parts {
        let subs: Vec<&String> = members
            .iter()
            .filter(|(_, m)| m.subscribed.contains(topic))
            .map(|(id, _)| id)
            .collect();
        if subs.is_empty() {
            continue;
        }
        let k = subs.len();
        let n = (*n).max(0) as usize;
        let counts: Vec<usize> = subs
            .iter()
            .map(|m| out[*m].get(topic).map_or(0, BTreeSet::len))
            .collect();
        assert!(counts.iter().all(|c| *c == n / k || *c == n / k + 1));
        assert_eq!(counts.iter().filter(|c| **c == n / k + 1).count(), n % k);
    }
}

#[test]
fn uniform_puts_each_partition_in_its_members_rack() {
    let parts: BTreeMap<Uuid, i32> = [(t(1), 4)].into();
    let (m, mut racks) = members(&[("a", Some("r1"), &[1]), ("b", Some("r2"), &[1])]);
    place(&mut racks, 1, &["r2", "r1", "r2", "r1"]);
    let out = uniform(&m, &parts, &racks);
    assert_exact(&out, &m, &parts);
    assert_eq!(ps(&out["a"], 1), [1, 3].into());
    assert_eq!(ps(&out["b"], 1), [0, 2].into());
    // the rack-blind assignor alternates, all out of rack
    let blind = assignor::uniform(&m, &parts);
    assert_eq!(matched(&blind, &racks), 0);
    assert_eq!(matched(&out, &racks), 4);
    assert_eq!(assign(UNIFORM, &m, &parts, &racks), out);
}

#[test]
fn uniform_keeps_balance_over_racks() {
    // five partitions in r1, one in r2, three members: r1 cannot take
    // everything of its rack
    let parts: BTreeMap<Uuid, i32> = [(t(1), 6)].into();
    let (m, mut racks) = members(&[
        ("a", Some("r1"), &[1]),
        ("b", Some("r2"), &[1]),
        ("c", Some("r1"), &[1]),
    ]);
    place(&mut racks, 1, &["r1", "r1", "r2", "r1", "r1", "r1"]);
    let out = uniform(&m, &parts, &racks);
    assert_exact(&out, &m, &parts);
    assert!(out.values().all(|a| count(a) == 2));
    assert!(ps(&out["b"], 1).contains(&2));
    // a and c: 4 of r1's; b: r2's one and one of r1's
    assert_eq!(matched(&out, &racks), 5);
}

#[test]
fn uniform_matches_partitions_with_replicas_in_several_racks() {
    // p0 can go to either rack, p1 only to r1: greedy by "fewest
    // candidates first" gives p1 to a, p0 to b
    let parts: BTreeMap<Uuid, i32> = [(t(1), 2)].into();
    let (m, mut racks) = members(&[("a", Some("r1"), &[1]), ("b", Some("r2"), &[1])]);
    place(&mut racks, 1, &["r1,r2", "r1"]);
    let out = uniform(&m, &parts, &racks);
    assert_eq!(ps(&out["a"], 1), [1].into());
    assert_eq!(ps(&out["b"], 1), [0].into());
}

#[test]
fn uniform_is_sticky_with_racks() {
    let parts: BTreeMap<Uuid, i32> = [(t(1), 6), (t(2), 3)].into();
    let (m, mut racks) = members(&[("a", Some("r1"), &[1, 2]), ("b", Some("r2"), &[1, 2])]);
    place(&mut racks, 1, &["r1", "r2", "r1", "r2", "r1", "r2"]);
    place(&mut racks, 2, &["r1,r2", "r2", "r1"]);
    let first = uniform(&m, &parts, &racks);
    assert_eq!(matched(&first, &racks), 9);
    // the same inputs again: nothing moves
    let mut again = m.clone();
    for (id, a) in &first {
        again.get_mut(id).unwrap().current = a.clone();
    }
    assert_eq!(uniform(&again, &parts, &racks), first);
    // c joins in r1: a and b only give partitions up, and c gets r1's
    let (mut m2, mut racks2) = members(&[
        ("a", Some("r1"), &[1, 2]),
        ("b", Some("r2"), &[1, 2]),
        ("c", Some("r1"), &[1, 2]),
    ]);
    racks2.partitions = racks.partitions.clone();
    for (id, a) in &first {
        m2.get_mut(id).unwrap().current = a.clone();
    }
    let second = uniform(&m2, &parts, &racks2);
    assert_exact(&second, &m2, &parts);
    assert_uniform_balance(&second, &m2);
    assert!(second.values().all(|a| count(a) == 3));
    for id in ["a", "b"] {
        for (topic, ps) in &second[id] {
            assert!(ps.is_subset(&first[id][topic]), "{id} only lost partitions");
        }
    }
    // four partitions only b's rack holds, three places at b: one match
    // is lost, no more
    assert_eq!(matched(&second, &racks2), 8);
    // b leaves: its partitions spread, a and c keep theirs
    let mut m3 = m2.clone();
    m3.remove("b");
    for (id, a) in &second {
        if let Some(x) = m3.get_mut(id) {
            x.current = a.clone();
        }
    }
    let third = uniform(&m3, &parts, &racks2);
    assert_exact(&third, &m3, &parts);
    for id in ["a", "c"] {
        for (topic, ps) in &second[id] {
            assert!(ps.is_subset(&third[id][topic]), "{id} kept its partitions");
        }
    }
}

#[test]
fn uniform_moves_partitions_into_their_rack_once_racks_are_known() {
    // an assignment made before the brokers had racks: all out of rack
    let parts: BTreeMap<Uuid, i32> = [(t(1), 4)].into();
    let (mut m, mut racks) = members(&[("a", Some("r1"), &[1]), ("b", Some("r2"), &[1])]);
    m.get_mut("a").unwrap().current = [(t(1), [0, 1].into())].into();
    m.get_mut("b").unwrap().current = [(t(1), [2, 3].into())].into();
    place(&mut racks, 1, &["r2", "r2", "r1", "r1"]);
    let out = uniform(&m, &parts, &racks);
    assert_eq!(ps(&out["a"], 1), [2, 3].into());
    assert_eq!(ps(&out["b"], 1), [0, 1].into());
}

#[test]
fn uniform_gives_members_without_rack_what_is_left() {
    let parts: BTreeMap<Uuid, i32> = [(t(1), 4)].into();
    let (m, mut racks) = members(&[("a", None, &[1]), ("b", Some("r2"), &[1])]);
    place(&mut racks, 1, &["r1", "r1", "r2", "r2"]);
    let out = uniform(&m, &parts, &racks);
    assert_eq!(ps(&out["a"], 1), [0, 1].into());
    assert_eq!(ps(&out["b"], 1), [2, 3].into());
}

#[test]
fn range_lays_co_partitioned_topics_out_by_rack() {
    let parts: BTreeMap<Uuid, i32> = [(t(1), 4), (t(2), 4)].into();
    let (m, mut racks) = members(&[("a", Some("r1"), &[1, 2]), ("b", Some("r2"), &[1, 2])]);
    place(&mut racks, 1, &["r2", "r1", "r2", "r1"]);
    place(&mut racks, 2, &["r2", "r1", "r2", "r1"]);
    let out = range(&m, &parts, &racks);
    assert_exact(&out, &m, &parts);
    for topic in [1, 2] {
        assert_eq!(ps(&out["a"], topic), [1, 3].into());
        assert_eq!(ps(&out["b"], topic), [0, 2].into());
    }
    assert_eq!(assign(RANGE, &m, &parts, &racks), out);
}

#[test]
fn range_keeps_its_counts_and_gives_the_extra_where_it_matches() {
    // three partitions, two in r1: b (r1) takes the extra one
    let parts: BTreeMap<Uuid, i32> = [(t(1), 3), (t(2), 5)].into();
    let (m, mut racks) = members(&[
        ("a", Some("r2"), &[1, 2]),
        ("b", Some("r1"), &[1, 2]),
        ("c", None, &[2]),
    ]);
    place(&mut racks, 1, &["r1", "r1", "r2"]);
    place(&mut racks, 2, &["r1", "r2", "r1", "r2", "r1"]);
    let out = range(&m, &parts, &racks);
    assert_exact(&out, &m, &parts);
    assert_range_counts(&out, &m, &parts);
    assert_eq!(ps(&out["a"], 1), [2].into());
    assert_eq!(ps(&out["b"], 1), [0, 1].into());
    // t2 (three subscribers, two extras): a and b two of their rack's
    // each, c (no rack) the last one
    assert_eq!(matched(&out, &racks), 3 + 4);
    assert_eq!(ps(&out["c"], 2), [4].into());
}

#[test]
fn range_co_partitions_by_the_rack_most_topics_share() {
    // t1 and t2 disagree on p0's rack; both have p1 in r2, so a gets p1
    // of both
    let parts: BTreeMap<Uuid, i32> = [(t(1), 2), (t(2), 2)].into();
    let (m, mut racks) = members(&[("a", Some("r2"), &[1, 2]), ("b", Some("r1"), &[1, 2])]);
    place(&mut racks, 1, &["r1", "r2"]);
    place(&mut racks, 2, &["r2", "r2"]);
    let out = range(&m, &parts, &racks);
    for topic in [1, 2] {
        assert_eq!(ps(&out["a"], topic), [1].into());
        assert_eq!(ps(&out["b"], topic), [0].into());
    }
}

#[test]
fn range_gives_co_partitioned_partitions_where_most_are_local() {
    // partition 0 of t1 and t2 is in r1, of t3 in r2; partition 1 the
    // other way round: b (r1) takes partition 0 of all three
    let parts: BTreeMap<Uuid, i32> = [(t(1), 2), (t(2), 2), (t(3), 2)].into();
    let (m, mut racks) = members(&[("a", Some("r2"), &[1, 2, 3]), ("b", Some("r1"), &[1, 2, 3])]);
    place(&mut racks, 1, &["r1", "r2"]);
    place(&mut racks, 2, &["r1", "r2"]);
    place(&mut racks, 3, &["r2", "r1"]);
    let out = range(&m, &parts, &racks);
    for topic in [1, 2, 3] {
        assert_eq!(ps(&out["a"], topic), [1].into());
        assert_eq!(ps(&out["b"], topic), [0].into());
    }
    assert_eq!(matched(&out, &racks), 4);
    assert_eq!(matched(&assignor::range(&m, &parts), &racks), 2);
}

/// A small deterministic generator (no extra dependency for tests).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A random group: up to 6 members in up to 3 racks (or none), up to 3
/// topics of up to 7 partitions, replicas in up to 2 racks (or none), and
/// some previous assignment.
fn random_group(rng: &mut Lcg) -> (BTreeMap<String, AssignorMember>, BTreeMap<Uuid, i32>, Racks) {
    let rack = |i: u64| format!("r{i}");
    let topics = 1 + rng.next(3) as u128;
    let parts: BTreeMap<Uuid, i32> = (1..=topics).map(|i| (t(i), rng.next(8) as i32)).collect();
    let mut racks = Racks::default();
    for (topic, n) in &parts {
        let sets = (0..*n)
            .map(|_| (0..rng.next(3)).map(|_| rack(rng.next(3))).collect())
            .collect();
        racks.partitions.insert(*topic, sets);
    }
    let mut members = BTreeMap::new();
    for i in 0..1 + rng.next(6) {
        let id = format!("m{i}");
        let subscribed: BTreeSet<Uuid> = (1..=topics).filter(|_| rng.next(4) > 0).map(t).collect();
        let mut current = Assignment::new();
        for topic in &subscribed {
            for p in 0..parts[topic] {
                if rng.next(3) == 0 {
                    current.entry(*topic).or_default().insert(p);
                }
            }
        }
        if rng.next(4) > 0 {
            racks.members.insert(id.clone(), rack(rng.next(3)));
        }
        members.insert(
            id,
            AssignorMember {
                subscribed,
                current,
            },
        );
    }
    (members, parts, racks)
}

#[test]
fn guarantees_hold_for_random_groups() {
    let mut rng = Lcg(848);
    for _ in 0..2000 {
        let (m, parts, racks) = random_group(&mut rng);
        let u = uniform(&m, &parts, &racks);
        assert_exact(&u, &m, &parts);
        assert_uniform_balance(&u, &m);
        assert_eq!(uniform(&m, &parts, &racks), u, "deterministic");
        let r = range(&m, &parts, &racks);
        assert_exact(&r, &m, &parts);
        assert_range_counts(&r, &m, &parts);
        assert_eq!(range(&m, &parts, &racks), r, "deterministic");
        // co-partitioning: same subscribers and partition count, same layout
        for (t1, n1) in &parts {
            for (t2, n2) in parts.range(..*t1) {
                let same = m
                    .values()
                    .all(|x| x.subscribed.contains(t1) == x.subscribed.contains(t2));
                if n1 == n2 && same {
                    for a in r.values() {
                        assert_eq!(a.get(t1), a.get(t2));
                    }
                }
            }
        }
    }
}

#[test]
fn without_a_rack_preference_the_result_is_the_rack_blind_one() {
    let mut rng = Lcg(881);
    for case in 0..2000 {
        let (m, parts, mut racks) = random_group(&mut rng);
        match case % 4 {
            // no member has a rack
            0 => racks.members.clear(),
            // no partition has racks
            1 => racks.partitions.clear(),
            // racks don't overlap
            2 => {
                for r in racks.members.values_mut() {
                    *r = format!("elsewhere-{r}");
                }
            }
            // every partition has a replica in every rack
            _ => {
                let all: BTreeSet<String> = (0..3).map(|i| format!("r{i}")).collect();
                for sets in racks.partitions.values_mut() {
                    sets.iter_mut().for_each(|s| *s = all.clone());
                }
            }
        }
        assert_eq!(uniform(&m, &parts, &racks), assignor::uniform(&m, &parts));
        assert_eq!(range(&m, &parts, &racks), assignor::range(&m, &parts));
    }
}
