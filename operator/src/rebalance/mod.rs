//! Partition reassignment: the planner that decides which replicas move where
//! when a cluster is rebalanced, scaled out (`AddBrokers`) or drained before
//! a scale-down (`RemoveBrokers`).
//!
//! [`lifecycle`] is the `KafkaRebalance` resource's lifecycle as a pure step
//! function over the planner; [`execute`] reads the cluster and performs a
//! step through the admin client; [`controller`] is the thin async edge
//! that runs it for each resource.
//!
//! [`plan::plan`] is a pure function of
//! the brokers (ids, racks), the partitions (replicas, leaders, sizes,
//! `min.insync.replicas`), a [`model::Goal`] and [`model::Options`]; it returns
//! a [`model::Plan`] (moves in bounded batches, bytes to move, load per broker
//! before and after, and what it could not achieve) or a typed
//! [`model::PlanError`]. Reading the cluster (Metadata, DescribeLogDirs) and
//! executing the moves (AlterPartitionReassignments with a throttle, one
//! batch at a time, then preferred leader elections) belong to a controller.
//!
//! Layout: `lifecycle` (the resource's phases, pure), `throttle` (the
//! replication throttle of the batch in flight, pure), `execute` (admin
//! client edge), `controller` (Kubernetes edge), `model` (the planner's input
//! and output types), `plan` (validation, the entry point),
//! `state` (the working assignment and per-broker load), `phases` (drain,
//! rack repair, replica and leader balance), `bytes` (byte balance).

mod bytes;
pub mod controller;
pub mod execute;
pub mod lifecycle;
pub mod model;
mod phases;
pub mod plan;
mod state;
pub mod throttle;

#[cfg(test)]
mod lifecycle_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

pub use model::{
    Broker, BrokerId, BrokerLoad, Caveat, Goal, Move, Options, Partition, Plan, PlanError, Steps,
};
pub use plan::plan;
