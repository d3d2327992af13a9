//! The topic manager: the live set of topics and their partitions' logs,
//! and the admin operations that change them (create, delete, add
//! partitions, alter configs). Every change is persisted through
//! [`MetadataFile`](crate::metadata::MetadataFile) before it becomes
//! visible.
//!
//! It owns the mapping topic → partitions and each partition's lock; the
//! bytes inside a log belong to `storage`, the wire format to `protocol`.
//! In cluster mode the controller decides, and [`TopicManager::apply_assignment`]
//! makes the local logs match what it placed on this broker (a topic then
//! holds only some of its partitions).
//!
//! Its parts, each building only on those listed before it (imports and
//! method calls alike):
//! - `topic`: one [`Topic`] and the lookup of its partitions;
//! - `dirs`: partition directories on disk and the crash-safe record of
//!   deletions;
//! - `open`: opening partitions' logs (recovery at start, creation);
//! - `manager`: the [`TopicManager`] registry, its lookup and persistence;
//! - `admin`: create, delete, add partitions, alter configs;
//! - `assignment`: cluster mode's placement by the controller;
//! - `maintenance`: retention, compaction, checkpoints, the clean close.
//!
//! This module only declares them and re-exports their public items.

mod admin;
mod assignment;
mod dirs;
mod maintenance;
mod manager;
mod open;
mod topic;

pub use admin::AlterOp;
pub use dirs::DELETE_DIR_SUFFIX;
pub use maintenance::CLOSE_THREADS;
pub use manager::{RecoveryStats, TopicManager};
pub use topic::Topic;

pub use crate::partition::{
    Appended, BlockingAppendHook, Partition, PartitionOffsets, BLOCKING_APPEND_HOOK,
};
