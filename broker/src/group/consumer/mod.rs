//! KIP-848 consumer groups (`group.protocol=consumer`): the group type
//! whose members heartbeat with ConsumerGroupHeartbeat and are assigned
//! partitions by the coordinator, next to the classic groups of
//! [`super::state`] under the same per-`__consumer_offsets`-partition
//! shard, as Kafka's group coordinator hosts them.
//!
//! - [`assignor`]: the server-side assignors `uniform` and `range`.
//! - [`rack_aware`]: the same assignors preferring, for each partition, a
//!   member in the rack of one of its replicas; [`racks`] says who is
//!   where.
//! - [`reconcile`]: a member's way from its current to its target
//!   assignment (revocation before reassignment).
//! - [`machine`]: one group's state machine (epochs, members, fencing,
//!   timeouts). Pure.
//! - [`records`]: the group's records in Kafka's schemas, and their replay.
//! - [`metadata_hash`]: KIP-1101's hash of the subscribed topics, which
//!   the group's record stores and whose change triggers a rebalance.
//! - [`conversion`]: online conversion between classic and consumer
//!   groups under `group.consumer.migration.policy` (upgrade on a
//!   ConsumerGroupHeartbeat, downgrade when the last member of the
//!   consumer protocol leaves) and the classic members a consumer group
//!   serves through JoinGroup, SyncGroup, Heartbeat and LeaveGroup.
//! - [`consumer_protocol`]: the classic consumer's embedded
//!   subscription and assignment, by topic id.
//!
//! This module owns no I/O: the coordinator (`super`) runs the machine
//! under its shard lock, writes [`records::diff`] through the shard's
//! write path, and installs the new state only once that write succeeded.
//!
//! Not in this slice (next steps): KIP-1251's per-partition assignment
//! epochs for commits;
//! client-side assignors (`ConsumerGroupPrepareAssignment`); periodic
//! regex refresh (a regex is resolved at each heartbeat instead of every
//! `group.consumer.regex.refresh.interval.ms`); share and streams groups.

pub mod assignor;
pub mod consumer_protocol;
pub mod conversion;
pub mod machine;
pub mod metadata_hash;
pub mod migration;
pub mod rack_aware;
pub mod racks;
pub mod reconcile;
pub mod records;

#[cfg(test)]
mod conversion_tests;
#[cfg(test)]
mod rack_aware_tests;
#[cfg(test)]
mod tests;

pub use machine::{ConsumerGroup, ConsumerSettings, Heartbeat, HeartbeatAnswer, TopicMeta, Topics};
