//! The byte phase: while bytes per eligible broker differ by more than the
//! tolerance, move a replica, or swap two, between the heaviest or the
//! lightest broker and another, choosing the operation that brings the pair
//! closest together.
//!
//! An operation moving `d` net bytes from a pair `gap` apart is taken only
//! when `0 < d < gap`, which lowers the sum of squared bytes (so the phase
//! ends). It never widens the replica or leader count spread: a single move
//! needs the giver to hold more replicas than the receiver, and a moved
//! leadership needs the giver to lead more partitions. Cost per step:
//! O(pairs · (P_h + P_l) · log P_l) for a pair's replica lists P_h, P_l.

use std::cmp::Ordering;

use super::state::State;

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `p` from `h` to `l`.
    Move { p: usize, h: usize, l: usize },
    /// `p` from `h` to `l` and `q` from `l` to `h`.
    Swap {
        p: usize,
        q: usize,
        h: usize,
        l: usize,
    },
}

/// Evens bytes down to the tolerance where the moves allow it.
pub(super) fn balance_bytes(s: &mut State) -> bool {
    let mut changed = false;
    while s.spread(|l| l.bytes) > s.tolerance {
        let Some(op) = pairs(s)
            .into_iter()
            .find_map(|(h, l)| best_for_pair(s, h, l))
        else {
            break;
        };
        apply(s, op);
        changed = true;
    }
    changed
}

fn apply(s: &mut State, op: Op) {
    match op {
        Op::Move { p, h, l } => {
            s.relocate(p, h, l);
            s.steps.bytes += 1;
        }
        Op::Swap { p, q, h, l } => {
            s.relocate(p, h, l);
            s.relocate(q, l, h);
            s.steps.bytes += 2;
        }
    }
}

/// Pairs (heavier, lighter) that move the extremes: heaviest with the
/// lightest first, then the heaviest with the others from light to heavy,
/// then the others from heavy to light with the lightest.
fn pairs(s: &State) -> Vec<(usize, usize)> {
    let order = s.by_desc(|l| l.bytes);
    let (Some(&max), Some(&min)) = (order.first(), order.last()) else {
        return Vec::new();
    };
    let middle = &order[1..order.len().saturating_sub(1).max(1)];
    let mut out = vec![(max, min)];
    out.extend(middle.iter().rev().map(|x| (max, *x)));
    out.extend(middle.iter().map(|x| (*x, min)));
    out.retain(|(h, l)| h != l && s.load[*h].bytes > s.load[*l].bytes);
    out
}

/// How far an operation moving `d` bytes leaves a pair `gap` apart from
/// even, doubled to stay in integers; None when it does not narrow the gap.
fn miss(gap: u64, d: u64) -> Option<u64> {
    (d > 0 && d < gap).then(|| (gap as i128 - 2 * d as i128).unsigned_abs() as u64)
}

/// Whether a net change of `h`'s leaderships by `delta` (−1, 0, +1, the
/// opposite for `l`) keeps the leader spread.
fn leaders_ok(s: &State, h: usize, l: usize, delta: i32) -> bool {
    let (lh, ll) = (s.load[h].leaders, s.load[l].leaders);
    match delta.cmp(&0) {
        Ordering::Equal => true,
        Ordering::Less => lh > ll,
        Ordering::Greater => ll > lh,
    }
}

/// Ranks operations: (miss, bytes copied, swap after move, partitions);
/// the partitions make it total, so the choice is deterministic.
type Key = (u64, u64, bool, usize, usize);

fn best_for_pair(s: &State, h: usize, l: usize) -> Option<Op> {
    let gap = s.load[h].bytes - s.load[l].bytes;
    let leads = |p: usize, b: usize| i32::from(s.leader(p) == b);
    let out: Vec<usize> = s.on(h).filter(|p| s.can_move(*p, h, l)).collect();
    let mut best: Option<(Key, Op)> = None;
    let mut offer = |key: Key, op: Op| {
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((key, op));
        }
    };
    if s.load[h].replicas > s.load[l].replicas {
        for &p in &out {
            let size = s.parts[p].size;
            if let Some(m) = miss(gap, size).filter(|_| leaders_ok(s, h, l, -leads(p, h))) {
                offer((m, size, false, p, 0), Op::Move { p, h, l });
            }
        }
    }
    // Returning replicas by size, split by whether `l` leads them, so the
    // leadership effect is the same for a whole list.
    let back: Vec<usize> = s.on(l).filter(|q| s.can_move(*q, l, h)).collect();
    for led in [false, true] {
        let mut list: Vec<(u64, usize)> = back
            .iter()
            .filter(|q| (s.leader(**q) == l) == led)
            .map(|q| (s.parts[*q].size, *q))
            .collect();
        list.sort_unstable();
        for &p in &out {
            let delta = i32::from(led) - leads(p, h);
            if !leaders_ok(s, h, l, delta) {
                continue;
            }
            for q in nearest(&list, s.parts[p].size, gap) {
                let (sp, sq) = (s.parts[p].size, s.parts[q].size);
                if let Some(m) = sp.checked_sub(sq).and_then(|d| miss(gap, d)) {
                    offer((m, sp + sq, true, p, q), Op::Swap { p, q, h, l });
                }
            }
        }
    }
    best.map(|(_, op)| op)
}

/// The entries of `list` (sorted by size) whose size is nearest to
/// `size − gap/2`, the one that would even the pair exactly.
fn nearest(list: &[(u64, usize)], size: u64, gap: u64) -> impl Iterator<Item = usize> + '_ {
    let target = 2 * size as i128 - gap as i128;
    let at = list.partition_point(|(sq, _)| 2 * (*sq as i128) < target);
    let below = at.checked_sub(1).map(|i| list[i].1);
    let above = list.get(at).map(|e| e.1);
    below.into_iter().chain(above)
}
