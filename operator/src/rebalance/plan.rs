//! The planner's input and output types and its entry point, [`plan`].
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

use std::collections::BTreeSet;

use super::state::State;
use super::{bytes, phases};

/// A Kafka broker (node) id.
pub type BrokerId = i32;

/// One broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broker {
    /// Node id.
    pub id: BrokerId,
    /// `broker.rack`, if set.
    pub rack: Option<String>,
}

/// One partition as the cluster reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Current replicas in order; the first is the preferred leader.
    pub replicas: Vec<BrokerId>,
    /// Current leader (None when offline).
    pub leader: Option<BrokerId>,
    /// Size of one replica in bytes (DescribeLogDirs).
    pub size_bytes: u64,
    /// The topic's `min.insync.replicas`.
    pub min_insync_replicas: usize,
}

impl Partition {
    /// The replication factor: the number of replicas.
    pub fn replication_factor(&self) -> usize {
        self.replicas.len()
    }
}

/// What the plan is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Goal {
    /// Balance across all brokers.
    Full,
    /// Move load onto these (new) brokers; the others only give.
    AddBrokers(Vec<BrokerId>),
    /// Move every replica off these brokers; nothing new goes onto them.
    RemoveBrokers(Vec<BrokerId>),
}

/// Default of [`Options::byte_tolerance_percent`]: bytes per broker may
/// differ by 10 % of the mean.
pub const DEFAULT_BYTE_TOLERANCE_PERCENT: u32 = 10;
/// Default of [`Options::max_moves_per_batch`].
pub const DEFAULT_MAX_MOVES_PER_BATCH: usize = 10;

/// Knobs of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Byte balance is reached when max − min bytes per eligible broker is
    /// at most this percentage of the mean.
    pub byte_tolerance_percent: u32,
    /// Most partition moves executed at once (one batch); at least 1.
    pub max_moves_per_batch: usize,
    /// Only partitions of these topics may move (None = all topics). The
    /// others still count in each broker's load.
    pub topics: Option<BTreeSet<String>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            byte_tolerance_percent: DEFAULT_BYTE_TOLERANCE_PERCENT,
            max_moves_per_batch: DEFAULT_MAX_MOVES_PER_BATCH,
            topics: None,
        }
    }
}

/// One partition reassignment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Replicas before, in order.
    pub from: Vec<BrokerId>,
    /// Replicas after, in order; the first is the new preferred leader.
    pub to: Vec<BrokerId>,
    /// Bytes copied: the partition's size once per added replica.
    pub bytes: u64,
}

impl Move {
    /// Brokers that get a new replica.
    pub fn added(&self) -> Vec<BrokerId> {
        self.to
            .iter()
            .copied()
            .filter(|b| !self.from.contains(b))
            .collect()
    }

    /// Brokers that lose their replica.
    pub fn removed(&self) -> Vec<BrokerId> {
        self.from
            .iter()
            .copied()
            .filter(|b| !self.to.contains(b))
            .collect()
    }

    /// Only the order (the preferred leader) changes; no data is copied.
    pub fn is_reorder(&self) -> bool {
        self.added().is_empty()
    }
}

/// Load of one broker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrokerLoad {
    /// Node id.
    pub broker: BrokerId,
    /// Replicas hosted.
    pub replicas: usize,
    /// Partitions whose preferred leader it is.
    pub leaders: usize,
    /// Bytes hosted.
    pub bytes: u64,
}

/// Single-replica relocations the planner made, by reason. A partition's
/// move may sum several (a replica moved twice is copied once), so these
/// bound the moves from above and explain them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Steps {
    /// Off removed brokers.
    pub drain: usize,
    /// To repair rack spread.
    pub rack: usize,
    /// To even replica counts.
    pub replica: usize,
    /// To even preferred-leader counts where reordering alone cannot
    /// (mixed replication factors, racks): one partition moved.
    pub leader_move: usize,
    /// The same by swapping two replicas (counted 2).
    pub leader_swap: usize,
    /// To even bytes.
    pub bytes: usize,
}

/// Something the plan could not achieve. The plan is still valid and
/// improves what it can.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caveat {
    /// This partition stays in fewer racks than wanted.
    RackSpread {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
        /// Distinct racks after the plan.
        spread: usize,
        /// `min(RF, racks)`.
        wanted: usize,
    },
    /// Replica counts of eligible brokers still differ by more than 1.
    ReplicaImbalance {
        /// max − min.
        spread: usize,
    },
    /// Preferred-leader counts still differ by more than 1.
    LeaderImbalance {
        /// max − min.
        spread: usize,
    },
    /// Bytes per eligible broker still differ by more than the tolerance.
    ByteImbalance {
        /// max − min.
        spread: u64,
        /// The tolerance in bytes.
        tolerance: u64,
    },
}

/// The planner's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Moves in execution order, at most `max_moves_per_batch` per batch.
    /// Data moves come first, reorders (leadership only) last.
    pub batches: Vec<Vec<Move>>,
    /// Number of moves.
    pub total_moves: usize,
    /// Bytes copied by all moves.
    pub bytes_to_move: u64,
    /// The byte tolerance in bytes.
    pub byte_tolerance: u64,
    /// Load per broker (all brokers, by id) now.
    pub before: Vec<BrokerLoad>,
    /// Load per broker after the plan.
    pub after: Vec<BrokerLoad>,
    /// Relocations by reason.
    pub steps: Steps,
    /// What the plan could not achieve.
    pub caveats: Vec<Caveat>,
}

impl Plan {
    /// Every move, in execution order.
    pub fn moves(&self) -> impl Iterator<Item = &Move> {
        self.batches.iter().flatten()
    }

    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.total_moves == 0
    }
}

/// Why no plan can be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Two brokers share an id.
    #[error("broker {0} is listed twice")]
    DuplicateBroker(BrokerId),
    /// Two partitions share a topic and index.
    #[error("partition {topic}-{partition} is listed twice")]
    DuplicatePartition {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
    },
    /// A partition has no replica or names a broker twice.
    #[error("partition {topic}-{partition} has an empty or repeating replica list")]
    BadReplicas {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
    },
    /// A replica is on a broker that is not in the broker list.
    #[error("partition {topic}-{partition} has a replica on unknown broker {broker}")]
    UnknownReplicaBroker {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
        /// The broker.
        broker: BrokerId,
    },
    /// The goal names a broker that is not in the broker list.
    #[error("the goal names unknown broker {0}")]
    UnknownGoalBroker(BrokerId),
    /// `AddBrokers` or `RemoveBrokers` with no broker.
    #[error("the goal names no broker")]
    EmptyGoal,
    /// `max_moves_per_batch` is 0.
    #[error("max_moves_per_batch must be at least 1")]
    ZeroBatch,
    /// After removing brokers too few are left for a partition.
    #[error(
        "partition {topic}-{partition} needs {replication_factor} brokers; \
         {eligible} would be left"
    )]
    NotEnoughBrokers {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
        /// Its replication factor.
        replication_factor: usize,
        /// Brokers left after the removal.
        eligible: usize,
    },
    /// A partition on a removed broker is excluded by the topic filter.
    #[error(
        "partition {topic}-{partition} is on removed broker {broker} but its topic may not move"
    )]
    PinnedOnRemovedBroker {
        /// Topic name.
        topic: String,
        /// Partition index.
        partition: i32,
        /// The removed broker.
        broker: BrokerId,
    },
}

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

/// Whether the topic filter lets this topic move.
pub(super) fn may_move(topic: &str, options: &Options) -> bool {
    options.topics.as_ref().is_none_or(|t| t.contains(topic))
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
