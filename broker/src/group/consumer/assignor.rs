//! The server-side assignors of KIP-848 consumer groups: `uniform` (the
//! default) and `range`, as `group.consumer.assignors` names them. Pure:
//! members' subscriptions and the topics' partition counts in, one target
//! assignment per member out.
//!
//! `uniform` balances partitions across the members subscribed to them
//! (counts differ by at most one where the subscriptions allow it) and is
//! sticky: a member keeps the partitions of its previous target that it
//! still subscribes to, up to its share, so a rebalance moves as few
//! partitions as it can. `range` gives each topic's subscribers contiguous
//! ranges, members sorted by id (co-partitioned topics land together);
//! unlike Kafka's it is not sticky. Both are rack-blind:
//! [`super::rack_aware`] wraps them with members' and replicas' racks and
//! returns their result unchanged when racks cannot make a difference.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// Partitions per topic id.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// The names `group.consumer.assignors` and `group.remote.assignor` use.
pub const UNIFORM: &str = "uniform";
pub const RANGE: &str = "range";

/// What an assignor knows of one member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssignorMember {
    /// Ids of the topics it subscribes to (names and regex resolved).
    pub subscribed: BTreeSet<Uuid>,
    /// Its previous target assignment (for stickiness).
    pub current: Assignment,
}

/// Runs the assignor named `name` (`uniform` for any unknown name: the
/// caller validates names against `group.consumer.assignors`).
pub fn assign(
    name: &str,
    members: &BTreeMap<String, AssignorMember>,
    partitions: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    match name {
        RANGE => range(members, partitions),
        _ => uniform(members, partitions),
    }
}

type Tp = (Uuid, i32);

fn put(out: &mut BTreeMap<String, Assignment>, member: &str, (t, p): Tp) {
    out.entry(member.to_string())
        .or_default()
        .entry(t)
        .or_default()
        .insert(p);
}

fn take(out: &mut BTreeMap<String, Assignment>, member: &str, (t, p): Tp) {
    if let Some(a) = out.get_mut(member) {
        if let Some(ps) = a.get_mut(&t) {
            ps.remove(&p);
            if ps.is_empty() {
                a.remove(&t);
            }
        }
    }
}

/// Every member with nothing assigned yet.
fn empty_assignments(members: &BTreeMap<String, AssignorMember>) -> BTreeMap<String, Assignment> {
    members
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect()
}

/// Sticky, balanced: see the module doc.
pub fn uniform(
    members: &BTreeMap<String, AssignorMember>,
    partitions: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out = empty_assignments(members);
    if members.is_empty() {
        return out;
    }
    let eligible = |t: &Uuid| -> Vec<&String> {
        members
            .iter()
            .filter(|(_, m)| m.subscribed.contains(t))
            .map(|(id, _)| id)
            .collect()
    };
    let all: Vec<Tp> = partitions
        .iter()
        .filter(|(t, _)| members.values().any(|m| m.subscribed.contains(t)))
        .flat_map(|(t, n)| (0..(*n).max(0)).map(move |p| (*t, p)))
        .collect();
    // A member keeps at most its fair share of its previous partitions.
    let share = all.len().div_ceil(members.len());
    let mut count: BTreeMap<&String, usize> = members.keys().map(|m| (m, 0)).collect();
    let mut owned: BTreeSet<Tp> = BTreeSet::new();
    for (id, m) in members {
        for (t, ps) in &m.current {
            let Some(n) = partitions.get(t) else { continue };
            if !m.subscribed.contains(t) {
                continue;
            }
            for p in ps.iter().filter(|p| **p >= 0 && **p < *n) {
                if count[id] < share && owned.insert((*t, *p)) {
                    put(&mut out, id, (*t, *p));
                    *count.get_mut(id).expect("every member counted") += 1;
                }
            }
        }
    }
    // The rest go to the least loaded eligible member.
    for tp in all.iter().filter(|tp| !owned.contains(tp)) {
        let Some(to) = eligible(&tp.0).into_iter().min_by_key(|m| (count[*m], *m)) else {
            continue;
        };
        put(&mut out, to, *tp);
        *count.get_mut(to).expect("every member counted") += 1;
    }
    // Balance: move one partition from a member to an eligible one with at
    // least two fewer, until none can move (each move lowers the sum of
    // squares, so this ends).
    loop {
        let mut by_load: Vec<&String> = members.keys().collect();
        by_load.sort_by_key(|m| (std::cmp::Reverse(count[*m]), *m));
        let mut moved = None;
        'search: for from in by_load {
            let held: Vec<Tp> = out[from]
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
                .collect();
            for tp in held.into_iter().rev() {
                let to = eligible(&tp.0)
                    .into_iter()
                    .filter(|m| count[*m] + 1 < count[from])
                    .min_by_key(|m| (count[*m], *m));
                if let Some(to) = to {
                    moved = Some((from.clone(), to.clone(), tp));
                    break 'search;
                }
            }
        }
        let Some((from, to, tp)) = moved else { break };
        take(&mut out, &from, tp);
        put(&mut out, &to, tp);
        *count.get_mut(&from).expect("counted") -= 1;
        *count.get_mut(&to).expect("counted") += 1;
    }
    out
}

/// Per topic, contiguous ranges over its subscribers sorted by member id;
/// the first `partitions % subscribers` members get one more.
pub fn range(
    members: &BTreeMap<String, AssignorMember>,
    partitions: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out = empty_assignments(members);
    for (t, n) in partitions {
        let subs: Vec<&String> = members
            .iter()
            .filter(|(_, m)| m.subscribed.contains(t))
            .map(|(id, _)| id)
            .collect();
        if subs.is_empty() || *n <= 0 {
            continue;
        }
        let k = subs.len() as i32;
        let (quota, extra) = (n / k, n % k);
        let mut next = 0;
        for (i, m) in subs.into_iter().enumerate() {
            let len = quota + i32::from((i as i32) < extra);
            for p in next..next + len {
                put(&mut out, m, (*t, p));
            }
            next += len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn members(specs: &[(&str, &[u128])]) -> BTreeMap<String, AssignorMember> {
        specs
            .iter()
            .map(|(id, topics)| {
                (
                    id.to_string(),
                    AssignorMember {
                        subscribed: topics.iter().map(|n| t(*n)).collect(),
                        current: Assignment::new(),
                    },
                )
            })
            .collect()
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    /// Every partition of a subscribed topic is assigned exactly once.
    fn assert_exact(out: &BTreeMap<String, Assignment>, parts: &BTreeMap<Uuid, i32>) {
        let mut seen = BTreeSet::new();
        for a in out.values() {
            for (topic, ps) in a {
                for p in ps {
                    assert!(seen.insert((*topic, *p)), "{topic} {p} twice");
                }
            }
        }
        let total: i32 = parts.values().sum();
        assert_eq!(seen.len(), total as usize);
    }

    #[test]
    fn uniform_balances_homogeneous_members() {
        let parts: BTreeMap<Uuid, i32> = [(t(1), 6), (t(2), 1)].into();
        let m = members(&[("a", &[1, 2]), ("b", &[1, 2]), ("c", &[1, 2])]);
        let out = uniform(&m, &parts);
        assert_exact(&out, &parts);
        let counts: Vec<usize> = out.values().map(count).collect();
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
    }

    #[test]
    fn uniform_is_sticky_when_a_member_joins() {
        let parts: BTreeMap<Uuid, i32> = [(t(1), 6)].into();
        let m = members(&[("a", &[1]), ("b", &[1])]);
        let first = uniform(&m, &parts);
        let mut m2 = members(&[("a", &[1]), ("b", &[1]), ("c", &[1])]);
        for (id, a) in &first {
            m2.get_mut(id).unwrap().current = a.clone();
        }
        let second = uniform(&m2, &parts);
        assert_exact(&second, &parts);
        for id in ["a", "b"] {
            assert_eq!(count(&second[id]), 2);
            let kept = second[id][&t(1)].is_subset(&first[id][&t(1)]);
            assert!(kept, "{id} only lost partitions");
        }
        assert_eq!(count(&second["c"]), 2);
    }

    #[test]
    fn uniform_respects_heterogeneous_subscriptions() {
        let parts: BTreeMap<Uuid, i32> = [(t(1), 4), (t(2), 4)].into();
        let m = members(&[("a", &[1]), ("b", &[1, 2]), ("c", &[2])]);
        let out = uniform(&m, &parts);
        assert_exact(&out, &parts);
        assert!(!out["a"].contains_key(&t(2)));
        assert!(!out["c"].contains_key(&t(1)));
        let counts: Vec<usize> = out.values().map(count).collect();
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
        // nobody subscribes: nothing assigned
        let lonely: BTreeMap<Uuid, i32> = [(t(9), 3)].into();
        assert!(uniform(&m, &lonely).values().all(|a| a.is_empty()));
    }

    #[test]
    fn range_gives_contiguous_ranges_in_member_order() {
        let parts: BTreeMap<Uuid, i32> = [(t(1), 5), (t(2), 2)].into();
        let m = members(&[("b", &[1, 2]), ("a", &[1, 2])]);
        let out = range(&m, &parts);
        assert_exact(&out, &parts);
        assert_eq!(out["a"][&t(1)], [0, 1, 2].into());
        assert_eq!(out["b"][&t(1)], [3, 4].into());
        assert_eq!(out["a"][&t(2)], [0].into());
        assert_eq!(out["b"][&t(2)], [1].into());
        assert_eq!(assign(RANGE, &m, &parts), out);
    }
}
