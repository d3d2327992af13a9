//! The `KafkaCluster` reconciler: `builders` (desired objects), `rollout`
//! (rolling-restart planner), `scaling` (how many brokers run and which
//! partition move a scale waits for), `status` (conditions), `restarts`
//! (which broker containers crash-loop), `dynamic` (which config changes
//! need no roll) and `validate` (which specs are refused) are pure; `membership`
//! parses the brokers' cluster record (and reads it); `controller` is the
//! thin async edge that reads, applies and reports.

pub mod builders;
pub mod controller;
pub mod dynamic;
pub mod health;
pub mod membership;
pub mod restarts;
pub mod rollout;
pub mod scaling;
pub mod status;
pub mod validate;
