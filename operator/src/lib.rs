//! Moldau operator: runs Moldau clusters and their topics on Kubernetes.
//!
//! Layout: `crd` (resource types and CRD YAML), `cluster` (the KafkaCluster
//! reconciler: pure builders, validation, status logic, rollout planner, async
//! edge), `topic` (the KafkaTopic reconciler: planner, status, sync, async
//! edge), `kafka` (a small Kafka admin client), `leader` (Lease-based leader
//! election), `telemetry` (metrics and the HTTP endpoints), `events`
//! (Kubernetes Events), `rebalance` (the partition-reassignment planner and
//! the KafkaRebalance reconciler: pure lifecycle, admin edge, async edge),
//! `brokers` (the Ready broker pods' addresses and an admin connection to
//! the controller, for every reconciler), `context` (what reconcilers
//! share), `error`.
//! Decisions are pure functions; the async code only reads, applies and
//! reports. The operator uses only the broker's wire protocol and its
//! flag/env contract, never the broker crate.

pub mod brokers;
pub mod cluster;
pub mod context;
pub mod crd;
pub mod error;
pub mod events;
pub mod kafka;
pub mod leader;
pub mod quota;
pub mod rebalance;
pub mod retention;
pub mod telemetry;
pub mod topic;

pub use error::{Error, Result};
