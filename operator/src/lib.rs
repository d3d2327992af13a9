//! Moldau operator: runs Moldau clusters and their topics on Kubernetes.
//!
//! Layout: `crd` (resource types and CRD YAML), `cluster` (the KafkaCluster
//! reconciler: pure builders, status logic, rollout planner, async edge),
//! `topic` (the KafkaTopic reconciler), `kafka` (a small Kafka admin client),
//! `leader` (Lease-based leader election), `telemetry` (metrics and the HTTP
//! endpoints), `events` (Kubernetes Events). Decisions are pure functions; the
//! async code only reads, applies and reports.

pub mod cluster;
pub mod crd;
pub mod error;
pub mod events;
pub mod kafka;
pub mod telemetry;
pub mod topic;

pub use error::{Error, Result};
pub mod context;
pub mod leader;
