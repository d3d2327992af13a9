//! The broker's shared state: identity (node id, advertised address,
//! cluster id), the topic manager, metrics and readiness. Handlers get a
//! `&Broker`; nothing here does network I/O.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::group::GroupCoordinator;
use crate::metrics::Metrics;
use crate::topics::TopicManager;

#[derive(Debug)]
pub struct Broker {
    pub node_id: i32,
    pub advertised_host: String,
    pub advertised_port: i32,
    pub topics: TopicManager,
    pub groups: GroupCoordinator,
    pub metrics: Metrics,
    ready: AtomicBool,
}

impl Broker {
    pub fn new(
        node_id: i32,
        advertised_host: String,
        advertised_port: i32,
        topics: TopicManager,
        groups: GroupCoordinator,
    ) -> Self {
        Self {
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
