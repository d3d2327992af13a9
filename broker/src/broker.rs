//! The broker's shared state: identity (node id, advertised address,
//! cluster id), the topic manager, metrics and readiness. Handlers get a
//! `&Broker`; nothing here does network I/O.

use std::sync::atomic::{AtomicBool, Ordering};

use std::sync::Arc;

use crate::group::GroupCoordinator;
use crate::metrics::Metrics;
use crate::protocol::limits::{ConnectionLimitSettings, ConnectionLimiter, RequestBudget};
use crate::topics::TopicManager;

#[derive(Debug)]
pub struct Broker {
    pub node_id: i32,
    pub advertised_host: String,
    pub advertised_port: i32,
    pub topics: TopicManager,
    pub groups: GroupCoordinator,
    pub metrics: Metrics,
    /// Connection slots (`max.connections`, `max.connections.per.ip`).
    pub connection_limits: Arc<ConnectionLimiter>,
    /// Request bytes in flight (`queued.max.request.bytes`).
    pub request_budget: RequestBudget,
    ready: AtomicBool,
}

impl Broker {
    pub fn new(
        node_id: i32,
        advertised_host: String,
        advertised_port: i32,
        topics: TopicManager,
        groups: GroupCoordinator,
        connection_limits: ConnectionLimitSettings,
    ) -> Self {
        let config = topics.broker_config();
        let budget = match usize::try_from(config.queued_max_request_bytes) {
            Ok(bytes) => bytes,
            Err(_) => usize::MAX, // -1: unbounded, as Kafka's default
        };
        let request_budget = RequestBudget::new(budget, config.socket_request_max_bytes);
        Self {
            connection_limits: ConnectionLimiter::new(connection_limits),
            request_budget,
            node_id,
            advertised_host,
            advertised_port,
            topics,
            groups,
            metrics: Metrics::default(),
            ready: AtomicBool::new(false),
        }
    }

    pub fn cluster_id(&self) -> &str {
        self.topics.cluster_id()
    }
    pub fn socket_request_max_bytes(&self) -> usize {
        self.topics.broker_config().socket_request_max_bytes
    }
    /// Ready once logs are recovered and the listener is bound.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}
