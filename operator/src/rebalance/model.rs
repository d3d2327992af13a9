//! The planner's vocabulary: its input (brokers, partitions, the goal and
//! the options, with the topic filter's [`may_move`]) and its output (the
//! plan: moves in batches, load per broker, steps taken, caveats) and why no
//! plan can be made. Plain data, read by `plan` (the entry point and its
//! validation) and by the working `state` and the phases that change it,
//! which `plan` runs: the types sit below all of them.

use std::collections::BTreeSet;

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

/// Whether the topic filter lets this topic move.
pub(super) fn may_move(topic: &str, options: &Options) -> bool {
    options.topics.as_ref().is_none_or(|t| t.contains(topic))
}
