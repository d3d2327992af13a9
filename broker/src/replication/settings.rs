//! How followers fetch: the `replica.fetch.*` configs, `replica.lag.time.max.ms`,
//! and the meters of the replication throttles every fetch shares. Plain
//! settings, read by the replica manager and its fetchers alike (so neither
//! imports the other for them).

use std::sync::Arc;
use std::time::Duration;

use super::throttle::RateQuota;

/// How followers fetch (the `replica.fetch.*` configs) and the broker's
/// replication throttles.
#[derive(Debug, Clone)]
pub struct FetchSettings {
    pub wait_ms: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
    pub backoff: Duration,
    /// `replica.lag.time.max.ms`.
    pub lag_max_ms: i64,
    /// `leader.replication.throttled.rate`, shared by every fetch served.
    pub leader_quota: Arc<RateQuota>,
    /// `follower.replication.throttled.rate`, shared by every fetcher.
    pub follower_quota: Arc<RateQuota>,
    /// The static rates (properties), when no dynamic config sets them.
    pub leader_rate: u64,
    pub follower_rate: u64,
}

impl FetchSettings {
    pub fn from_config(c: &crate::config::BrokerConfig) -> Self {
        Self {
            wait_ms: c.replica_fetch_wait_max_ms.clamp(0, 30_000),
            max_bytes: c.replica_fetch_response_max_bytes.max(1),
            partition_max_bytes: c.replica_fetch_max_bytes.max(1),
            backoff: Duration::from_millis(c.replica_fetch_backoff_ms.clamp(10, 60_000) as u64),
            lag_max_ms: c.replica_lag_time_max_ms.max(1),
            leader_quota: Arc::new(RateQuota::new(c.leader_replication_throttled_rate)),
            follower_quota: Arc::new(RateQuota::new(c.follower_replication_throttled_rate)),
            leader_rate: c.leader_replication_throttled_rate,
            follower_rate: c.follower_replication_throttled_rate,
        }
    }
}
