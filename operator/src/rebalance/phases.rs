//! The count phases of the planner: drain removed brokers, repair rack
//! spread, even replica counts, even preferred-leader counts. Each mutates
//! the [`State`] and reports whether it changed anything.
//!
//! Balancing moves a unit (a replica, a leadership) from a broker with at
//! least 2 more than the receiver, directly or, when racks or the topic
//! filter block every direct move, along a shortest chain of brokers whose
//! own counts stay the same. Each such step lowers the sum of squared
//! counts, so the phases end.

use std::cmp::Reverse;
use std::collections::VecDeque;

use super::state::State;

/// Moves every replica off removed (non-eligible) brokers, largest
/// partitions first so that the small ones even out the bytes, each to the
/// least loaded broker that keeps the rack spread.
pub(super) fn drain(s: &mut State) {
    let mut order: Vec<usize> = (0..s.parts.len()).collect();
    order.sort_by_key(|p| (Reverse(s.parts[*p].size), *p));
    for p in order {
        let off: Vec<usize> = s.parts[p]
            .replicas
            .iter()
            .copied()
            .filter(|b| !s.eligible[*b])
            .collect();
        for from in off {
            let target = s
                .receivers_by_asc(|l| (l.replicas, l.bytes))
                .into_iter()
                .find(|t| s.can_move(p, from, *t));
            // Validation leaves at least one eligible broker outside the
            // partition, and some of them sit in a rack it lacks whenever
            // its spread is short, so a target always exists.
            debug_assert!(target.is_some(), "no drain target for partition {p}");
            if let Some(to) = target {
                s.relocate(p, from, to);
                s.steps.drain += 1;
            }
        }
    }
}

/// Spreads partitions that sit in fewer racks than `min(RF, racks)`: a
/// replica from a crowded rack goes to the least loaded receiving broker
/// of a rack the partition lacks.
pub(super) fn repair_racks(s: &mut State) -> bool {
    let mut changed = false;
    for p in 0..s.parts.len() {
        while s.parts[p].movable && s.rack_spread(p) < s.wanted_spread(p) {
            let Some((from, to)) = rack_step(s, p) else {
                break;
            };
            s.relocate(p, from, to);
            s.steps.rack += 1;
            changed = true;
        }
    }
    changed
}

fn rack_step(s: &State, p: usize) -> Option<(usize, usize)> {
    let mut crowded = s.crowded(p);
    crowded.sort_by_key(|b| (Reverse((s.load[*b].replicas, s.load[*b].bytes)), *b));
    let from = *crowded.first()?;
    let to = s
        .receivers_by_asc(|l| (l.replicas, l.bytes))
        .into_iter()
        .find(|t| !s.rack_used(p, *t))?;
    Some((from, to))
}

/// Evens replica counts.
pub(super) fn balance_replicas(s: &mut State) -> bool {
    let mut changed = false;
    while replica_step(s) {
        changed = true;
    }
    changed
}

fn replica_step(s: &mut State) -> bool {
    let givers = s.by_desc(|l| (l.replicas, l.bytes));
    let receivers = s.receivers_by_asc(|l| (l.replicas, l.bytes));
    let count = |s: &State, b: usize| s.load[b].replicas;
    for &g in &givers {
        for &r in &receivers {
            if count(s, g) < count(s, r) + 2 {
                break;
            }
            if let Some(p) = pick_replica(s, g, r) {
                s.relocate(p, g, r);
                s.steps.replica += 1;
                return true;
            }
        }
    }
    let lowest = receivers.first().map_or(usize::MAX, |r| count(s, *r));
    // Givers are sorted: once one has no receiver 2 below it, none has.
    for &g in givers
        .iter()
        .take_while(|g| count(s, **g) >= lowest.saturating_add(2))
    {
        let need = count(s, g);
        let target = |s: &State, v: usize| count(s, v) + 2 <= need;
        let edge = |s: &State, x: usize, y: usize| pick_replica(s, x, y).is_some();
        if let Some(path) = shortest_path(s, g, &receivers, target, edge) {
            for hop in path.windows(2) {
                let p = pick_replica(s, hop[0], hop[1]).expect("edge found by the search");
                s.relocate(p, hop[0], hop[1]);
                s.steps.replica += 1;
            }
            return true;
        }
    }
    false
}

/// The partition to move from `g` to `r`: the one that best evens their
/// bytes relative to their replica counts (each broker's bytes should be
/// its count times the mean replica size, so that byte balance follows
/// once counts are even), sparing preferred and current leaderships on
/// ties. A leadership that `g` cannot spare (it leads no more than its
/// share) goes last: a receiver that may not hand it back (`AddBrokers`)
/// would leave `g` short for good.
fn pick_replica(s: &State, g: usize, r: usize) -> Option<usize> {
    let (replicas, bytes) = s.totals();
    // Byte excess over count × mean size, scaled by the replica total to
    // stay in integers.
    let excess = |b: usize| s.load[b].bytes as i128 * replicas - bytes * s.load[b].replicas as i128;
    let gap = excess(g) - excess(r);
    let short = s.load[g].leaders <= s.leader_share();
    s.on(g).filter(|p| s.can_move(*p, g, r)).min_by_key(|p| {
        let part = &s.parts[*p];
        let leads = s.leader(*p) == g;
        let shift = part.size as i128 * replicas - bytes;
        (
            short && leads,
            (gap - 2 * shift).unsigned_abs(),
            leads,
            part.current_leader == Some(g),
            *p,
        )
    })
}

/// Evens preferred-leader counts: reorder replica lists; where reordering
/// cannot (mixed replication factors, racks), also move a led partition or
/// swap it against a replica of the receiver.
pub(super) fn balance_leaders(s: &mut State) -> bool {
    let mut changed = false;
    while leader_step(s) {
        changed = true;
    }
    changed
}

fn leader_step(s: &mut State) -> bool {
    let givers = s.by_desc(|l| l.leaders);
    let receivers = s.receivers_by_asc(|l| l.leaders);
    let count = |s: &State, b: usize| s.load[b].leaders;
    for &g in &givers {
        for &r in &receivers {
            if count(s, g) < count(s, r) + 2 {
                break;
            }
            if let Some(p) = pick_leadership(s, g, r) {
                s.promote(p, r);
                return true;
            }
        }
    }
    // Chains of reorders first (no data moves), then chains that may also
    // relocate replicas.
    let lowest = receivers.first().map_or(usize::MAX, |r| count(s, *r));
    let needy: Vec<usize> = givers
        .iter()
        .copied()
        .take_while(|g| count(s, *g) >= lowest.saturating_add(2))
        .collect();
    for relocating in [false, true] {
        for &g in &needy {
            let need = count(s, g);
            let target = |s: &State, v: usize| count(s, v) + 2 <= need;
            let edge = |s: &State, x: usize, y: usize| leader_hop(s, x, y, relocating).is_some();
            let Some(path) = shortest_path(s, g, &receivers, target, edge) else {
                continue;
            };
            if apply_leader_path(s, &path, relocating) {
                return true;
            }
        }
    }
    false
}

/// One way to hand a leadership from `x` to `y`.
#[derive(Clone, Copy, Debug)]
enum Hop {
    /// Reorder `p` so that `y` leads it.
    Reorder(usize),
    /// Move `p` (led by `x`) to `y`.
    Move(usize),
    /// Move `p` (led by `x`) to `y` and `q` (on `y`, not led by it) to `x`.
    Swap(usize, usize),
}

/// The cheapest hop from `x` to `y`: a reorder; with `relocating`, a move
/// when `x` holds more replicas than `y` (the replica spread stays), else a
/// swap (replica counts stay).
fn leader_hop(s: &State, x: usize, y: usize, relocating: bool) -> Option<Hop> {
    if let Some(p) = pick_leadership(s, x, y) {
        return Some(Hop::Reorder(p));
    }
    if !relocating {
        return None;
    }
    if s.load[x].replicas > s.load[y].replicas {
        if let Some(p) = led_movable(s, x, y) {
            return Some(Hop::Move(p));
        }
    }
    let p = led_movable(s, x, y)?;
    let q = s
        .on(y)
        .filter(|q| s.leader(*q) != y && s.can_move(*q, y, x))
        .min_by_key(|q| (s.parts[*q].size, *q))?;
    Some(Hop::Swap(p, q))
}

/// Applies the hops of `path` on a copy and keeps it only when every hop
/// was still possible after the earlier ones (relocations change replica
/// lists, so a hop found by the search may be gone).
fn apply_leader_path(s: &mut State, path: &[usize], relocating: bool) -> bool {
    let mut trial = s.clone();
    for hop in path.windows(2) {
        let (x, y) = (hop[0], hop[1]);
        match leader_hop(&trial, x, y, relocating) {
            Some(Hop::Reorder(p)) => trial.promote(p, y),
            Some(Hop::Move(p)) => {
                trial.relocate(p, x, y);
                trial.steps.leader_move += 1;
            }
            Some(Hop::Swap(p, q)) => {
                trial.relocate(p, x, y);
                trial.relocate(q, y, x);
                trial.steps.leader_swap += 2;
            }
            None => return false,
        }
    }
    *s = trial;
    true
}

/// A partition led by `g` that `r` also holds, preferring one `r` leads
/// now (its election then changes nothing).
fn pick_leadership(s: &State, g: usize, r: usize) -> Option<usize> {
    (0..s.parts.len())
        .filter(|p| s.parts[*p].movable && s.leader(*p) == g && s.parts[*p].replicas.contains(&r))
        .min_by_key(|p| (s.parts[*p].current_leader != Some(r), *p))
}

/// The smallest partition led by `u` that may move to `v`.
fn led_movable(s: &State, u: usize, v: usize) -> Option<usize> {
    s.on(u)
        .filter(|p| s.leader(*p) == u && s.can_move(*p, u, v))
        .min_by_key(|p| (s.parts[*p].size, *p))
}

/// Breadth-first search from `from` over `nodes` for the nearest broker
/// that `is_target` accepts, following `edge`; the path includes both ends.
fn shortest_path(
    s: &State,
    from: usize,
    nodes: &[usize],
    is_target: impl Fn(&State, usize) -> bool,
    edge: impl Fn(&State, usize, usize) -> bool,
) -> Option<Vec<usize>> {
    let mut prev: Vec<Option<usize>> = vec![None; s.brokers()];
    let mut seen = vec![false; s.brokers()];
    seen[from] = true;
    let mut queue = VecDeque::from([from]);
    while let Some(x) = queue.pop_front() {
        for &y in nodes {
            if seen[y] || !edge(s, x, y) {
                continue;
            }
            seen[y] = true;
            prev[y] = Some(x);
            if is_target(s, y) {
                return Some(walk_back(&prev, y));
            }
            queue.push_back(y);
        }
    }
    None
}

fn walk_back(prev: &[Option<usize>], mut at: usize) -> Vec<usize> {
    let mut path = vec![at];
    while let Some(p) = prev[at] {
        path.push(p);
        at = p;
    }
    path.reverse();
    path
}
