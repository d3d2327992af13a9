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
//! the controller, for every reconciler), `certs` (the cluster and clients
//! CAs, the brokers' certificate, the operator's client identity), `user` (the KafkaUser reconciler:
//! pure planner of SCRAM credentials and ACLs, async edge), `context` (what reconcilers
//! share), `reconcile` (the finalizer, metrics and requeue edge the finalized
//! reconcilers share), `error`.
//! Decisions are pure functions; the async code only reads, applies and
//! reports. The operator talks to brokers only through the wire protocol
//! and their flag/env contract; of the broker crate it uses pure tables
//! and checks (`config_check`, `dynamic_config`, `topic_config`), so a
//! spec is judged by the code the broker starts with, never the broker's
//! runtime.

pub mod brokers;
pub mod certs;
pub mod cluster;
pub mod context;
pub mod crd;
pub mod error;
pub mod events;
pub mod kafka;
pub mod leader;
pub mod quota;
pub mod rebalance;
pub mod reconcile;
pub mod retention;
pub mod telemetry;
pub mod topic;
pub mod user;

pub use error::{Error, Result};
