//! The `KafkaCluster` resource: a set of Moldau brokers run by a StatefulSet.
//!
//! Validation the API server enforces (OpenAPI bounds + CEL): the name fits the
//! child objects' name limits, `replicas >= 1`, `storage.size` is a positive
//! quantity, storage size and class are immutable (a StatefulSet cannot change
//! its volume claim templates), the listener and controller ports are ports
//! and differ from each other and from the broker's HTTP port, and the broker
//! config cannot override the keys the operator owns (`node.id`, listeners,
//! log directories; checked by the operator, since CEL over map keys of
//! unbounded length exceeds the API server's rule cost budget).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, ResourceRequirements, Toleration};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    CertificateAuthoritySpec, ClusterAuthorization, Condition, ListenerSpec, RebalanceMode,
};

/// Broker config keys the operator sets itself; `spec.config` may not override them.
pub const RESERVED_BROKER_CONFIG: &[&str] = &[
    "node.id",
    "broker.id",
    "listeners",
    "advertised.listeners",
    "log.dir",
    "log.dirs",
    "listener.security.protocol.map",
    "inter.broker.listener.name",
    "security.inter.broker.protocol",
    "authorizer.class.name",
    "super.users",
];

/// Desired state of a Moldau cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "moldau.io",
    version = "v1alpha1",
    kind = "KafkaCluster",
    plural = "kafkaclusters",
    shortname = "kc",
    namespaced,
    status = "KafkaClusterStatus",
    derive = "PartialEq",
    doc = "A Kafka-compatible Moldau cluster: brokers in a StatefulSet with their Services, config and PodDisruptionBudget.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Controller", type_ = "integer", json_path = ".status.controller"),
    printcolumn(name = "Epoch", type_ = "integer", json_path = ".status.controllerEpoch", priority = 1),
    printcolumn(name = "Registered", type_ = "string", json_path = ".status.registeredBrokers", priority = 1),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(name = "Bootstrap", type_ = "string", json_path = ".status.bootstrapServers", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 52").message("metadata.name must be at most 52 characters (StatefulSet and Service names derive from it)"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name must be a DNS-1035 label (lower case letters, digits, '-', starting with a letter)"),
    validation = Rule::new("self.spec.controllerPort != self.spec.listenerPort").message("spec.controllerPort must differ from spec.listenerPort"),
    validation = Rule::new("self.spec.controllerPort != 9644 && self.spec.listenerPort != 9644").message("spec.listenerPort and spec.controllerPort must differ from the broker's HTTP port 9644"),
    validation = Rule::new("!has(self.spec.listeners) || self.spec.listeners.all(l, l.port != self.spec.controllerPort && l.port != 9644 && l.port != 9090)").message("spec.listeners ports must differ from spec.controllerPort, the broker's HTTP port 9644 and the replication listener's port 9090"),
    validation = Rule::new("!has(self.spec.listeners) || self.spec.listeners.all(l, self.spec.listeners.exists_one(m, m.name == l.name) && self.spec.listeners.exists_one(m, m.port == l.port))").message("spec.listeners names and ports must be unique"),
    validation = Rule::new("!has(self.spec.advertisedAddress) || self.spec.advertisedAddress != 'PodIP' || !has(self.spec.listeners) || !self.spec.listeners.exists(l, l.tls)").message("TLS listeners advertise the pods' DNS names (the names their certificate carries): spec.advertisedAddress cannot be PodIP")
)]
#[serde(rename_all = "camelCase")]
pub struct KafkaClusterSpec {
    /// Number of brokers.
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// Broker container image, e.g. `moldau/broker:0.1.0`.
    #[schemars(length(min = 1))]
    pub image: String,
    /// Compute resources of the broker container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Persistent storage of each broker.
    pub storage: StorageSpec,
    /// Broker config overrides, with Kafka config names (e.g. `log.retention.ms`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// Kafka listener port of every broker when `listeners` is not given
    /// (one PLAINTEXT listener).
    #[serde(default = "default_listener_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub listener_port: i32,
    /// Port of the controller's gRPC endpoint, served by the broker while it
    /// is the elected controller; the other brokers dial it at the pod IP.
    #[serde(default = "default_controller_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub controller_port: i32,
    /// The address each broker advertises to clients and to the other
    /// brokers. `PodIP`: the pod's IP, which changes when the pod is
    /// recreated. `PodDNS`: its stable name through the headless Service,
    /// `<pod>.<cluster>-brokers.<namespace>.svc`, the name a certificate
    /// can carry; needs cluster DNS (a cluster's DNS add-on). Default:
    /// `PodDNS` when a listener has TLS, else `PodIP` (for now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertised_address: Option<AdvertisedAddress>,
    /// Client listeners (at most 8). Absent: one PLAINTEXT listener on
    /// `listenerPort`. With a TLS or authenticated listener, or with
    /// `authorization`, the brokers also serve `replication` on port 9090:
    /// mutual TLS with certificates the cluster CA signs, which brokers and
    /// the operator use and nothing else can.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub listeners: Vec<ListenerSpec>,
    /// ACL authorization; absent: every client may do everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<ClusterAuthorization>,
    /// The cluster CA, which signs the brokers' certificates (and the
    /// operator's): its validity and renewal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ca: Option<CertificateAuthoritySpec>,
    /// The clients CA, which signs `KafkaUser` certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients_ca: Option<CertificateAuthoritySpec>,
    /// Node label that names a broker's rack, e.g. `topology.kubernetes.io/zone`.
    /// Brokers are spread evenly across its values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack_topology_key: Option<String>,
    /// Overrides merged into the broker pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<PodTemplateOverrides>,
    /// Partition moves when `replicas` changes.
    #[serde(default)]
    pub rebalance: ClusterRebalanceSpec,
    /// How rolling restarts proceed.
    #[serde(default)]
    pub rollout: RolloutSpec,
}

/// What a broker advertises (`spec.advertisedAddress`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum AdvertisedAddress {
    /// The pod's IP.
    #[default]
    #[serde(rename = "PodIP")]
    PodIp,
    /// `<pod>.<cluster>-brokers.<namespace>.svc` through the headless Service.
    #[serde(rename = "PodDNS")]
    PodDns,
}

/// Rolling restarts: one broker at a time, highest ordinal first, each only
/// when every broker is Ready and no partition is under-replicated or
/// offline (so the previous broker is back in every ISR it left).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Seconds a roll may wait at one gate (a restarted broker not Ready,
    /// partitions not back in sync) before the cluster reports it stalled:
    /// `Degraded=True` with reason `RollingRestartStalled`, naming the
    /// broker and what is waited for, and a Warning Event. A roll is never
    /// forced on; it goes on by itself once the gate opens. Default 300.
    #[serde(default = "default_stall_timeout_seconds")]
    #[schemars(range(min = 1, max = 86400))]
    pub stall_timeout_seconds: i64,
}

impl Default for RolloutSpec {
    fn default() -> Self {
        Self {
            stall_timeout_seconds: default_stall_timeout_seconds(),
        }
    }
}

fn default_stall_timeout_seconds() -> i64 {
    300
}

/// What the operator does with partitions when the cluster scales.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRebalanceSpec {
    /// Move data when `replicas` changes (default true): a scale-out ends
    /// with an `add-brokers` KafkaRebalance onto the new brokers once they
    /// are Ready; a scale-down first drains the highest ordinals with a
    /// `remove-brokers` KafkaRebalance and lowers the StatefulSet only when
    /// they hold no replica, and is refused while some topic's replication
    /// factor exceeds the new broker count. Both rebalances are named
    /// `<cluster>-auto-rebalance`, owned by this cluster, and approved by
    /// the operator. When false, `replicas` goes to the StatefulSet as is.
    #[serde(default = "default_true")]
    pub auto_on_scale: bool,
    /// Replication throttle (bytes/s) of those rebalances; unthrottled
    /// when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub throttle_bytes_per_second: Option<i64>,
    /// Most partition moves in flight at once; the planner's default when
    /// unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_concurrent_moves: Option<i32>,
}

impl Default for ClusterRebalanceSpec {
    fn default() -> Self {
        Self {
            auto_on_scale: true,
            throttle_bytes_per_second: None,
            max_concurrent_moves: None,
        }
    }
}

fn default_true() -> bool {
    true
}

/// Default Kafka listener port.
pub fn default_listener_port() -> i32 {
    9092
}

/// Default port of the controller's gRPC endpoint.
pub fn default_controller_port() -> i32 {
    9091
}

/// Persistent storage of each broker (one PersistentVolumeClaim per broker).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.size == oldSelf.size").message("storage.size is immutable"))]
#[x_kube(validation = Rule::new("has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)").message("storage.storageClassName is immutable"))]
pub struct StorageSpec {
    /// Size of each broker's volume, a Kubernetes quantity such as `10Gi`.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))").message("storage.size must be a positive quantity such as 10Gi"))]
    pub size: String,
    /// StorageClass of the volumes; the cluster default when unset.
    #[schemars(length(min = 1, max = 253))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Delete the PersistentVolumeClaims when the KafkaCluster is deleted
    /// (default false: data outlives the cluster).
    #[serde(default)]
    pub delete_claim: bool,
}

/// Overrides of the broker pod template.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateOverrides {
    /// Extra pod labels (the operator's own selector labels win).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra pod annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Node selector of the broker pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the broker pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Affinity of the broker pods (replaces the operator's default anti-affinity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
}

/// Observed state of a Moldau cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaClusterStatus {
    /// `Ready`, `Progressing` and `Degraded`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Broker pods that exist.
    #[serde(default)]
    pub replicas: i32,
    /// Broker pods that are Ready.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Broker pods running the current revision of the pod template.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Label selector of the broker pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Comma-separated `host:port` list for clients inside the cluster
    /// (the first listener's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_servers: Option<String>,
    /// Each client listener: its bootstrap address and security protocol.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerStatus>,
    /// Node id of the active controller, as the brokers' cluster record
    /// names it; absent while no controller has been elected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<i32>,
    /// Epoch of the active controller's term (grows with every election).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_epoch: Option<i64>,
    /// Node ids of the brokers registered with the controller and not
    /// fenced, ascending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registered_brokers: Vec<i32>,
    /// The partition move a scale is waiting for (`spec.rebalance.autoOnScale`);
    /// absent when none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_rebalance: Option<AutoRebalanceStatus>,
    /// The rolling restart's wait at a health gate; absent when no roll is
    /// held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_hold: Option<RolloutHoldStatus>,
}

/// A client listener as clients in the cluster reach it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListenerStatus {
    /// The listener's name (`spec.listeners[].name`; `kafka` without them).
    pub name: String,
    /// `host:port` through the bootstrap Service.
    pub bootstrap_servers: String,
    /// Kafka's security protocol: `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or
    /// `SASL_SSL`.
    pub security_protocol: String,
}

/// A rolling restart waiting at a health gate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutHoldStatus {
    /// `BrokerNotReady`, `PartitionsUnderReplicated` or
    /// `ReplicaHealthUnknown`.
    pub reason: String,
    /// The broker waited for, when one is (the one not Ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker: Option<i32>,
    /// What is waited for.
    pub message: String,
    /// Since when (RFC 3339) the roll waits at this gate.
    pub since: String,
}

/// A scale's partition move in progress.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoRebalanceStatus {
    /// `add-brokers` (scale-out) or `remove-brokers` (drain before a
    /// scale-down).
    pub mode: RebalanceMode,
    /// The brokers being filled or drained.
    pub brokers: Vec<i32>,
    /// The `KafkaRebalance` that moves the partitions.
    pub rebalance: String,
}
