//! State shared by the reconcilers: the Kubernetes client, metrics, Events,
//! and tunables. Owns nothing else.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;

use crate::events::Events;
use crate::telemetry::Metrics;

/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "moldau-operator";

/// Reconciler tunables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// Periodic resync of a healthy KafkaCluster.
    pub cluster_resync: Duration,
    /// Periodic resync of a KafkaTopic (drift repair).
    pub topic_resync: Duration,
    /// Requeue while something is in progress or failing.
    pub retry: Duration,
    /// Timeout of each Kafka admin network step.
    pub kafka_timeout: Duration,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            cluster_resync: Duration::from_secs(60),
            topic_resync: Duration::from_secs(45),
            retry: Duration::from_secs(10),
            kafka_timeout: Duration::from_secs(10),
        }
    }
}

/// What every reconcile gets.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Event publisher.
    pub events: Events,
    /// Tunables.
    pub tunables: Tunables,
}

impl Context {
    /// The API of kind `K` a controller watches: in `namespace` when the
    /// operator is confined to one, else in every namespace.
    pub fn watched_api<K>(&self, namespace: &Option<String>) -> kube::Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        match namespace {
            Some(ns) => kube::Api::namespaced(self.client.clone(), ns),
            None => kube::Api::all(self.client.clone()),
        }
    }
}

/// Logs what a controller stream yields: reconcile failures are already
/// logged by the error policies; watch and queue failures are logged here.
pub fn log_controller_error<E: std::fmt::Display>(kind: &str, err: &E, reconciler_failed: bool) {
    if reconciler_failed {
        tracing::debug!(kind, error = %err, "reconcile failed");
    } else {
        tracing::warn!(kind, error = %err, "controller watch or queue error");
    }
}
