//! The rack-aware layer over the server-side assignors of
//! [`super::assignor`]: what the group machine calls. When members carry a
//! rack (ConsumerGroupHeartbeat's `RackId`) and the subscribed partitions'
//! replicas sit on brokers with a `broker.rack`, each partition goes, where
//! the assignor's guarantees leave a choice, to a member in the rack of one
//! of its replicas, so the member can fetch from that replica (KIP-392)
//! instead of across racks.
//!
//! Moldau's decision, since Kafka's own server-side assignors are not
//! rack-aware yet (KAFKA-19909): the rules KIP-881 gave the client-side
//! assignors, applied to `uniform` and `range`, with the differences
//! marked below.
//!
//! - **When.** Only if racks can change something: some member's matches
//!   ([`super::racks`]) over the partitions it may be given are mixed
//!   (for `range`, over a set of co-partitioned topics). Otherwise — no
//!   member has a rack, no partition has racks, the racks don't overlap,
//!   or every replica set spans every member's rack — the rack-blind
//!   assignor runs and its result is returned as it is.
//! - **Members without a rack** take what is left after the members of
//!   partitions' racks (Kafka's client-side `RangeAssignor` lets them take
//!   their range first, before members whose racks match).
//! - **Balance first.** `uniform` keeps its guarantee (no partition can move
//!   to an eligible member with two fewer) and `range` its per-topic counts
//!   (each subscriber gets ⌊n/k⌋ or ⌈n/k⌉, exactly `n % k` of them the
//!   larger) and its co-partitioning (topics with the same subscribers and
//!   partition count give partition `i` to the same member); racks only
//!   decide among the assignments those allow, so a rack with few members
//!   does not get all its partitions.
//! - **Stickiness, then locality.** `uniform` keeps a member's previous
//!   partitions in its rack first (up to its fair share); a previous
//!   partition outside its rack is kept only when no member of the
//!   partition's racks has room, so an assignment made before racks were
//!   known becomes rack-local at the next rebalance (as KIP-881's sticky
//!   assignors do). A partition moves for balance or to gain a rack match,
//!   never otherwise. `range` is not sticky, with or without racks.
//! - **Co-partitioning over locality.** `range` lays out topics with the
//!   same subscribers and partition count together: partition `i` of all
//!   of them goes to one member, the one in whose rack most of them have
//!   a replica (Kafka's client-side `RangeAssignor` asks all of them to
//!   match, which replicas placed independently per topic rarely do).
//! - **Best effort.** Matching is greedy (partitions with the fewest
//!   matching members first, then improving moves and swaps for
//!   `uniform`); it finds the most matches in simple layouts, not
//!   provably in every one.
//!
//! With racks, `range`'s ranges are no longer contiguous (as in Kafka's
//! rack-aware client-side `RangeAssignor`): the partitions in a member's
//! rack go to it first, the rest fill the members up in id order.
//!
//! Pure functions; owns no state.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::assignor::{self, Assignment, AssignorMember};
use super::racks::{mixed, Racks};

type Tp = (Uuid, i32);

/// Runs the assignor named `name` (`uniform` for any unknown name, as
/// [`assignor::assign`]) with `racks`.
pub fn assign(
    name: &str,
    members: &BTreeMap<String, AssignorMember>,
    partitions: &BTreeMap<Uuid, i32>,
    racks: &Racks,
) -> BTreeMap<String, Assignment> {
    match name {
        assignor::RANGE => range(members, partitions, racks),
        _ => uniform(members, partitions, racks),
    }
}

/// The partitions of subscribed topics, in topic then partition order.
fn subscribed_partitions(
    members: &BTreeMap<String, AssignorMember>,
    partitions: &BTreeMap<Uuid, i32>,
) -> Vec<Tp> {
    partitions
        .iter()
        .filter(|(t, _)| members.values().any(|m| m.subscribed.contains(t)))
        .flat_map(|(t, n)| (0..(*n).max(0)).map(move |p| (*t, p)))
        .collect()
}

/// Who holds what, while an assignment is built.
struct Plan<'a> {
    owner: BTreeMap<Tp, &'a str>,
    held: BTreeMap<&'a str, BTreeSet<Tp>>,
}

impl<'a> Plan<'a> {
    fn new(members: &'a BTreeMap<String, AssignorMember>) -> Self {
        Self {
            owner: BTreeMap::new(),
            held: members
                .keys()
                .map(|m| (m.as_str(), BTreeSet::new()))
                .collect(),
        }
    }

    fn count(&self, m: &str) -> usize {
        self.held.get(m).map_or(0, BTreeSet::len)
    }

    fn give(&mut self, m: &'a str, tp: Tp) {
        if let Some(prev) = self.owner.insert(tp, m) {
            if let Some(h) = self.held.get_mut(prev) {
                h.remove(&tp);
            }
        }
        self.held.entry(m).or_default().insert(tp);
    }

    fn into_assignments(self) -> BTreeMap<String, Assignment> {
        self.held
            .into_iter()
            .map(|(m, tps)| {
                let mut a = Assignment::new();
                for (t, p) in tps {
                    a.entry(t).or_default().insert(p);
                }
                (m.to_string(), a)
            })
            .collect()
    }
}

/// What the `uniform` steps ask of members and racks.
struct Ctx<'a> {
    members: &'a BTreeMap<String, AssignorMember>,
    racks: &'a Racks,
    /// The members of each rack, by id.
    in_rack: BTreeMap<&'a str, Vec<&'a str>>,
}

impl<'a> Ctx<'a> {
    fn new(members: &'a BTreeMap<String, AssignorMember>, racks: &'a Racks) -> Self {
        let mut in_rack: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (m, r) in &racks.members {
            if members.contains_key(m) {
                in_rack.entry(r.as_str()).or_default().push(m.as_str());
            }
        }
        Self {
            members,
            racks,
            in_rack,
        }
    }

    fn eligible(&self, m: &str, t: &Uuid) -> bool {
        self.members
            .get(m)
            .is_some_and(|x| x.subscribed.contains(t))
    }

    fn matches(&self, m: &str, (t, p): Tp) -> bool {
        self.racks.matches(m, t, p)
    }

    /// The members that may take `tp` and are in one of its racks, by id.
    fn matching(&self, (t, p): Tp) -> Vec<&'a str> {
        let mut out: Vec<&str> = self
            .racks
            .of(t, p)
            .into_iter()
            .flatten()
            .filter_map(|r| self.in_rack.get(r.as_str()))
            .flatten()
            .copied()
            .filter(|m| self.eligible(m, &t))
            .collect();
        out.sort_unstable();
        out
    }

    /// Every member, by id.
    fn ids(&self) -> impl Iterator<Item = &'a str> + 'a {
        self.members.keys().map(String::as_str)
    }
}

/// `uniform` with racks: see the module doc.
pub fn uniform(
    members: &BTreeMap<String, AssignorMember>,
    partitions: &BTreeMap<Uuid, i32>,
    racks: &Racks,
) -> BTreeMap<String, Assignment> {
    let all = subscribed_partitions(members, partitions);
    let cx = Ctx::new(members, racks);
    let matters = cx.ids().any(|m| {
        mixed(
            all.iter()
                .filter(|(t, _)| cx.eligible(m, t))
                .map(|tp| cx.matches(m, *tp)),
        )
    });
    if !matters || members.is_empty() {
        return assignor::uniform(members, partitions);
    }
    // As the rack-blind assignor: a member keeps at most its fair share.
    let share = all.len().div_ceil(members.len());
    let mut plan = Plan::new(members);
    // A member's previous partitions that still exist and it still
    // subscribes to.
    let previous = |m: &AssignorMember| -> Vec<Tp> {
        m.current
            .iter()
            .filter(|(t, _)| m.subscribed.contains(*t))
            .filter_map(|(t, ps)| partitions.get(t).map(|n| (t, ps, *n)))
            .flat_map(|(t, ps, n)| {
                ps.iter()
                    .filter(move |p| (0..n).contains(*p))
                    .map(move |p| (*t, *p))
            })
            .collect()
    };

    // 1. Sticky, in rack: previous partitions the member matches.
    for (id, m) in members {
        for tp in previous(m).into_iter().filter(|tp| cx.matches(id, *tp)) {
            if plan.count(id) < share && !plan.owner.contains_key(&tp) {
                plan.give(id, tp);
            }
        }
    }
    // 2. Unowned partitions to a member of their racks with room, those
    // with the fewest such members first (they have the least choice).
    let mut pending: Vec<(usize, Tp)> = all
        .iter()
        .filter(|tp| !plan.owner.contains_key(*tp))
        .map(|tp| (cx.matching(*tp).len(), *tp))
        .filter(|(n, _)| *n > 0)
        .collect();
    pending.sort();
    for (_, tp) in pending {
        let to = cx
            .matching(tp)
            .into_iter()
            .filter(|m| plan.count(m) < share)
            .min_by_key(|m| (plan.count(m), *m));
        if let Some(to) = to {
            plan.give(to, tp);
        }
    }
    // 3. Sticky, out of rack: what no member of its racks had room for
    // stays where it was, up to the share.
    for (id, m) in members {
        for tp in previous(m) {
            if plan.count(id) < share && !plan.owner.contains_key(&tp) {
                plan.give(id, tp);
            }
        }
    }
    // 4. The rest to the least loaded eligible member, one of its racks
    // among equals.
    for tp in all.iter().copied() {
        if plan.owner.contains_key(&tp) {
            continue;
        }
        let to = cx
            .ids()
            .filter(|m| cx.eligible(m, &tp.0))
            .min_by_key(|m| (plan.count(m), !cx.matches(m, tp), *m));
        if let Some(to) = to {
            plan.give(to, tp);
        }
    }
    // 5. Improve until nothing can: balance moves first (as the rack-blind
    // assignor's, choosing the move that loses the fewest matches), then
    // moves and swaps that gain matches without unbalancing. Each step
    // lowers the sum of squared counts or keeps it and raises the matches,
    // so this ends.
    while let Some(moves) = balance_move(&plan, &cx)
        .or_else(|| rack_move(&plan, &cx))
        .or_else(|| rack_swap(&plan, &cx))
    {
        for (to, tp) in moves {
            plan.give(to, tp);
        }
    }
    plan.into_assignments()
}

/// Partition moves: `(to, tp)`.
type Moves<'a> = Vec<(&'a str, Tp)>;

/// A move from the most loaded member that can give one to an eligible
/// member with at least two fewer, the one gaining the most matches.
fn balance_move<'a>(plan: &Plan<'a>, cx: &Ctx<'a>) -> Option<Moves<'a>> {
    let mut by_load: Vec<&str> = cx.ids().collect();
    by_load.sort_by_key(|m| (std::cmp::Reverse(plan.count(m)), *m));
    let least = by_load.last().map_or(0, |m| plan.count(m));
    for from in by_load {
        // nobody holds two fewer than this one or any after it
        if plan.count(from) < least + 2 {
            break;
        }
        let best = plan.held[from]
            .iter()
            .flat_map(|tp| {
                cx.ids()
                    .filter(|to| cx.eligible(to, &tp.0) && plan.count(to) + 1 < plan.count(from))
                    .map(move |to| (to, *tp))
            })
            .max_by_key(|(to, tp)| {
                let gain = i8::from(cx.matches(to, *tp)) - i8::from(cx.matches(from, *tp));
                (gain, std::cmp::Reverse((plan.count(to), *to)), *tp)
            });
        if let Some(mv) = best {
            return Some(vec![mv]);
        }
    }
    None
}

/// A partition outside its holder's racks that can move to an eligible
/// member of its racks holding fewer (balance stays within one).
fn rack_move<'a>(plan: &Plan<'a>, cx: &Ctx<'a>) -> Option<Moves<'a>> {
    for (from, held) in &plan.held {
        for tp in held.iter().filter(|tp| !cx.matches(from, **tp)) {
            let to = cx
                .matching(*tp)
                .into_iter()
                .filter(|to| plan.count(to) < plan.count(from))
                .min_by_key(|to| (plan.count(to), *to));
            if let Some(to) = to {
                return Some(vec![(to, *tp)]);
            }
        }
    }
    None
}

/// Two partitions whose holders, swapping them, gain matches (counts
/// unchanged).
fn rack_swap<'a>(plan: &Plan<'a>, cx: &Ctx<'a>) -> Option<Moves<'a>> {
    for (x, held_x) in &plan.held {
        for a in held_x.iter().filter(|a| !cx.matches(x, **a)) {
            for y in cx.matching(*a) {
                // y gains `a`; giving `b` back must not lose that match
                let b = plan.held[y]
                    .iter()
                    .find(|b| cx.eligible(x, &b.0) && (cx.matches(x, **b) || !cx.matches(y, **b)));
                if let Some(b) = b {
                    return Some(vec![(y, *a), (*x, *b)]);
                }
            }
        }
    }
    None
}

/// `range` with racks: see the module doc. Topics with the same
/// subscribers and partition count are laid out together, so partition
/// `i` of each goes to the same member.
pub fn range(
    members: &BTreeMap<String, AssignorMember>,
    partitions: &BTreeMap<Uuid, i32>,
    racks: &Racks,
) -> BTreeMap<String, Assignment> {
    let mut classes: BTreeMap<(Vec<&str>, i32), Vec<Uuid>> = BTreeMap::new();
    for (t, n) in partitions {
        let subs: Vec<&str> = members
            .iter()
            .filter(|(_, m)| m.subscribed.contains(t))
            .map(|(id, _)| id.as_str())
            .collect();
        if !subs.is_empty() && *n > 0 {
            classes.entry((subs, *n)).or_default().push(*t);
        }
    }
    // How many of a class's topics have partition `p` in `m`'s rack: the
    // class's partition `p` goes to one member for all its topics, so to
    // the one where most of them are local.
    let weight = |m: &str, topics: &[Uuid], p: i32| {
        topics.iter().filter(|t| racks.matches(m, **t, p)).count()
    };
    let prefers = |subs: &[&str], n: i32, topics: &[Uuid]| {
        subs.iter()
            .any(|m| mixed((0..n).map(|p| weight(m, topics, p))))
    };
    if !classes
        .iter()
        .any(|((subs, n), topics)| prefers(subs, *n, topics))
    {
        return assignor::range(members, partitions);
    }
    let mut out: BTreeMap<String, Assignment> = members
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    for ((subs, n), topics) in &classes {
        let by_rack = prefers(subs, *n, topics);
        let layout = lay_out(subs.len(), *n, |i, p| {
            if by_rack {
                weight(subs[i], topics, p)
            } else {
                0
            }
        });
        for (p, i) in (0..*n).zip(layout) {
            for t in topics {
                if let Some(a) = out.get_mut(subs[i]) {
                    a.entry(*t).or_default().insert(p);
                }
            }
        }
    }
    out
}

/// The subscriber (an index into `k` subscribers in id order) of each of
/// `n` partitions, with range's counts: ⌊n/k⌋ each, one more for `n % k`
/// of them. A partition with a `weight` (how local it is) for some
/// subscribers goes to the heaviest of them with room first (partitions
/// with the heaviest, then the fewest, candidates first); the rest fill
/// the subscribers up in order, lowest partitions first — with no weight
/// anywhere, the contiguous ranges of the rack-blind `range`.
fn lay_out(k: usize, n: i32, weight: impl Fn(usize, i32) -> usize) -> Vec<usize> {
    let slots = usize::try_from(n).unwrap_or(0);
    if k == 0 {
        return Vec::new();
    }
    let mut owner: Vec<Option<usize>> = vec![None; slots];
    let mut fill = Fill {
        quota: slots / k,
        extra: slots % k,
        assigned: vec![0; k],
    };
    // per partition, its candidates `(subscriber, weight)`
    let candidates: Vec<Vec<(usize, usize)>> = (0..n)
        .map(|p| {
            (0..k)
                .map(|i| (i, weight(i, p)))
                .filter(|(_, w)| *w > 0)
                .collect()
        })
        .collect();
    let mut order: Vec<(std::cmp::Reverse<usize>, usize, usize)> = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.is_empty())
        .map(|(p, c)| {
            let best = c.iter().map(|(_, w)| *w).max().unwrap_or(0);
            (std::cmp::Reverse(best), c.len(), p)
        })
        .collect();
    order.sort();
    for (_, _, p) in order {
        let to = candidates[p]
            .iter()
            .filter(|(i, _)| fill.room(*i) > 0)
            .max_by_key(|(i, w)| (*w, std::cmp::Reverse((fill.assigned[*i], *i))));
        if let Some((i, _)) = to {
            fill.take(*i);
            owner[p] = Some(*i);
        }
    }
    for i in 0..k {
        for slot in owner.iter_mut().filter(|o| o.is_none()) {
            if fill.room(i) == 0 {
                break;
            }
            fill.take(i);
            *slot = Some(i);
        }
    }
    // Every partition has an owner: the rooms add up to `n`.
    owner.into_iter().map(|o| o.unwrap_or(0)).collect()
}

/// Range's counts while partitions are handed out: each subscriber may
/// take `quota`, and one more while some of the `extra` are left.
struct Fill {
    quota: usize,
    extra: usize,
    assigned: Vec<usize>,
}

impl Fill {
    /// How many more subscriber `i` may take now.
    fn room(&self, i: usize) -> usize {
        (self.quota + usize::from(self.extra > 0)).saturating_sub(self.assigned[i])
    }

    fn take(&mut self, i: usize) {
        self.assigned[i] += 1;
        if self.assigned[i] == self.quota + 1 {
            self.extra = self.extra.saturating_sub(1);
        }
    }
}
