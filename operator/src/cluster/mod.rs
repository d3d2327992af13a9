//! The `KafkaCluster` reconciler: `builders` (desired objects), `rollout`
//! (rolling-restart planner), `scaling` (how many brokers run and which
//! partition move a scale waits for), `status` (conditions), `restarts`
//! (which broker containers crash-loop), `dynamic` (which config changes
//! need no roll), `validate` (which specs are refused) and `pods` (a broker
//! pod as all of them see it) are pure; `membership` parses the brokers'
//! cluster record (and reads it); `controller` is the thin async edge that
//! reads, applies and reports.

pub mod builders;
pub mod controller;
pub mod dynamic;
pub mod health;
pub mod listeners;
pub mod membership;
pub mod pods;
pub mod restarts;
pub mod rollout;
pub mod scaling;
pub mod status;
pub mod validate;
