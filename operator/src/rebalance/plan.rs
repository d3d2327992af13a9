//! The planner's entry point, [`plan`], and the validation of its input
//! (the types it takes and returns are in `model`).
//!
//! # What the planner optimises, in order
//!
//! 1. **Hard constraints.** After `RemoveBrokers` no replica is on a removed
//!    broker. The replication factor never changes and a replica list never
//!    names a broker twice. Rack spread: a partition should have replicas in
//!    `min(RF, racks)` distinct racks (`racks` = racks among the eligible
//!    brokers; a broker without a rack counts as a rack of its own, so a
//!    cluster without racks has no rack constraint). Partitions below that
//!    are repaired; no step ever lowers a partition's spread below
//!    `min(its spread, wanted)`. Only `AddBrokers` (which may place replicas
//!    on new brokers only) or a topic filter can leave a partition below;
//!    the plan says so ([`Caveat::RackSpread`]) instead of failing, because
//!    a plan that cannot fix the racks still fixes the load.
//! 2. **Replica counts** per eligible broker within 1 of each other.
//! 3. **Preferred-leader counts** (first replica of each list) within 1.
//! 4. **Bytes** per eligible broker: max − min at most the tolerance
//!    ([`Options::byte_tolerance_percent`] of the mean), never at the
//!    price of 2 or 3.
//!
//! Rack spread wins over counts: with racks of unequal sizes an even count
//! may need two replicas of a partition in one rack, which the planner does
//! not do. Whatever of 2–4 is not reached is reported as a [`Caveat`].
//!
//! # Guarantees (checked by the property tests)
//!
//! "Without a filter" means [`Options::topics`] is None; "eligible" means
//! not being removed.
//!
//! - Always: RF unchanged, distinct brokers per list, only filtered topics
//!   move, no replica left on a removed broker, and no partition's rack
//!   spread falls below `min(its spread before, RF, eligible racks)`.
//! - `Full` and `RemoveBrokers` without a filter: every partition in
//!   `min(RF, racks)` racks; replica and preferred-leader counts within 1
//!   when every rack has the same number of eligible brokers (always true
//!   without racks); without racks, bytes max − min ≤ tolerance + the
//!   largest partition (a move carries a whole partition, so an exact byte
//!   balance is not always reachable).
//! - `AddBrokers`: no old broker gains replicas, preferred leaderships or
//!   bytes; without racks and filter no old broker ends more than 1 replica
//!   above a new one. (Old brokers that were already light stay light: they
//!   may not gain, so counts within 1 are not promised.)
//! - Moves are few. A balanced cluster gets an empty plan, and planning
//!   again on a plan's result gives an empty plan (every step improves a
//!   balance, none is undone). Lower bound: to get counts within 1, brokers
//!   above the ceiling of the mean (and removed brokers, for all they hold)
//!   must give `E` replicas in total and brokers below the floor must get
//!   `D`, so at least `max(E, D)` copies are needed. Each drain or
//!   replica-balance step lowers `E + D`, so without racks and filter there
//!   are at most `E + D ≤ 2·max(E, D)` of them ([`Steps`]); with partitions
//!   of one size and RF (where nothing else moves data) the plan copies at
//!   most twice the minimum bytes. With racks a step may be a chain of moves
//!   through brokers whose counts stay, and byte or leader balance may add
//!   copies; each is counted in [`Steps`].
//! - Replicas to move are chosen by how well they even bytes relative to
//!   replica counts, so byte balance mostly follows from count balance and
//!   the byte phase (swaps) is rarely needed.
//! - Every partition moves at most once (`from` = now, `to` = final), so
//!   under KIP-455 (targets added, caught up, then the old ones dropped) a
//!   partition holds `from ∪ to` during its move: never fewer than RF
//!   replicas, nor fewer in-sync replicas than `from` had.
//! - Deterministic: the same input gives the same plan.
//!
//! [`Steps`]: super::model::Steps

use std::collections::BTreeSet;

use super::model::{
    may_move, Broker, BrokerId, BrokerLoad, Caveat, Goal, Move, Options, Partition, Plan, PlanError,
};
use super::state::State;
use super::{bytes, phases};

/// Plans the moves that reach `goal`. Pure and deterministic.
pub fn plan(
    brokers: &[Broker],
    partitions: &[Partition],
    goal: &Goal,
    options: &Options,
) -> Result<Plan, PlanError> {
    validate(brokers, partitions, goal, options)?;
    let mut state = State::new(brokers, partitions, goal, options);
    let before = state.loads();
    phases::drain(&mut state);
    // Each phase keeps what the earlier ones reached, and the rounds end:
    // (replica counts, leader counts, bytes) improve lexicographically.
    loop {
        let mut changed = phases::repair_racks(&mut state);
        changed |= phases::balance_replicas(&mut state);
        changed |= phases::balance_leaders(&mut state);
        changed |= bytes::balance_bytes(&mut state);
        if !changed {
            break;
        }
    }
    Ok(finish(&state, partitions, before, options))
}

fn validate(
    brokers: &[Broker],
    partitions: &[Partition],
    goal: &Goal,
    options: &Options,
) -> Result<(), PlanError> {
    if options.max_moves_per_batch == 0 {
        return Err(PlanError::ZeroBatch);
    }
    let mut ids = BTreeSet::new();
    for b in brokers {
        if !ids.insert(b.id) {
            return Err(PlanError::DuplicateBroker(b.id));
        }
    }
    let named = match goal {
        Goal::Full => &[][..],
        Goal::AddBrokers(v) | Goal::RemoveBrokers(v) if v.is_empty() => {
            return Err(PlanError::EmptyGoal)
        }
        Goal::AddBrokers(v) | Goal::RemoveBrokers(v) => &v[..],
    };
    if let Some(b) = named.iter().find(|b| !ids.contains(b)) {
        return Err(PlanError::UnknownGoalBroker(*b));
    }
    let removed: BTreeSet<BrokerId> = match goal {
        Goal::RemoveBrokers(v) => v.iter().copied().collect(),
        _ => BTreeSet::new(),
    };
    let eligible = ids.len() - removed.len();
    let mut seen = BTreeSet::new();
    for p in partitions {
        validate_partition(p, &ids, &mut seen)?;
        check_removable(p, &removed, eligible, options)?;
    }
    Ok(())
}

fn validate_partition<'a>(
    p: &'a Partition,
    ids: &BTreeSet<BrokerId>,
    seen: &mut BTreeSet<(&'a str, i32)>,
) -> Result<(), PlanError> {
    if !seen.insert((p.topic.as_str(), p.partition)) {
        return Err(PlanError::DuplicatePartition {
            topic: p.topic.clone(),
            partition: p.partition,
        });
    }
    let distinct: BTreeSet<_> = p.replicas.iter().collect();
    if p.replicas.is_empty() || distinct.len() != p.replicas.len() {
        return Err(PlanError::BadReplicas {
            topic: p.topic.clone(),
            partition: p.partition,
        });
    }
    if let Some(b) = p.replicas.iter().find(|b| !ids.contains(b)) {
        return Err(PlanError::UnknownReplicaBroker {
            topic: p.topic.clone(),
            partition: p.partition,
            broker: *b,
        });
    }
    Ok(())
}

fn check_removable(
    p: &Partition,
    removed: &BTreeSet<BrokerId>,
    eligible: usize,
    options: &Options,
) -> Result<(), PlanError> {
    if p.replication_factor() > eligible {
        return Err(PlanError::NotEnoughBrokers {
            topic: p.topic.clone(),
            partition: p.partition,
            replication_factor: p.replication_factor(),
            eligible,
        });
    }
    let on_removed = p.replicas.iter().find(|b| removed.contains(b));
    match on_removed {
        Some(b) if !may_move(&p.topic, options) => Err(PlanError::PinnedOnRemovedBroker {
            topic: p.topic.clone(),
            partition: p.partition,
            broker: *b,
        }),
        _ => Ok(()),
    }
}

fn finish(
    state: &State,
    partitions: &[Partition],
    before: Vec<BrokerLoad>,
    options: &Options,
) -> Plan {
    let mut data = Vec::new();
    let mut reorders = Vec::new();
    for (i, p) in partitions.iter().enumerate() {
        let to = state.replica_ids(i);
        if to == p.replicas {
            continue;
        }
        let mut m = Move {
            topic: p.topic.clone(),
            partition: p.partition,
            from: p.replicas.clone(),
            to,
            bytes: 0,
        };
        m.bytes = p.size_bytes * m.added().len() as u64;
        if m.is_reorder() {
            reorders.push(m);
        } else {
            data.push(m);
        }
    }
    let key = |m: &Move| (m.topic.clone(), m.partition);
    data.sort_by_key(key);
    reorders.sort_by_key(key);
    let total_moves = data.len() + reorders.len();
    let bytes_to_move = data.iter().map(|m| m.bytes).sum();
    let mut batches = chunk(data, options.max_moves_per_batch);
    batches.extend(chunk(reorders, options.max_moves_per_batch));
    Plan {
        batches,
        total_moves,
        bytes_to_move,
        byte_tolerance: state.tolerance,
        before,
        after: state.loads(),
        steps: state.steps,
        caveats: caveats(state),
    }
}

fn chunk(moves: Vec<Move>, size: usize) -> Vec<Vec<Move>> {
    let mut out: Vec<Vec<Move>> = Vec::new();
    for m in moves {
        match out.last_mut() {
            Some(batch) if batch.len() < size => batch.push(m),
            _ => out.push(vec![m]),
        }
    }
    out
}

fn caveats(state: &State) -> Vec<Caveat> {
    let mut out: Vec<Caveat> = state
        .short_of_racks()
        .map(|(topic, partition, spread, wanted)| Caveat::RackSpread {
            topic,
            partition,
            spread,
            wanted,
        })
        .collect();
    let replicas = state.spread(|l| l.replicas as u64);
    if replicas > 1 {
        out.push(Caveat::ReplicaImbalance {
            spread: replicas as usize,
        });
    }
    let leaders = state.spread(|l| l.leaders as u64);
    if leaders > 1 {
        out.push(Caveat::LeaderImbalance {
            spread: leaders as usize,
        });
    }
    let bytes = state.spread(|l| l.bytes);
    if bytes > state.tolerance {
        out.push(Caveat::ByteImbalance {
            spread: bytes,
            tolerance: state.tolerance,
        });
    }
    out
}
