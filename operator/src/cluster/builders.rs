//! Desired Kubernetes objects of a `KafkaCluster`, as pure functions of the
//! resource (spec + name/namespace/uid for owner references).
//!
//! Owns object names, labels, the broker pod template (env contract with the
//! broker binary, probes, security context, volumes), the brokers' RBAC and
//! the rendering of `server.properties`. Must not talk to the API server.
//!
//! Cluster mode: every broker runs with `MOLDAU_CLUSTER=kubernetes` in its
//! pod's namespace, contends for the Lease [`Names::controller_lease`] and,
//! while it holds it, serves the controller's gRPC on
//! `$(POD_IP):spec.controllerPort` and keeps the cluster metadata in
//! `MetadataShard` objects ([`Names::cluster_shard`] and one per topic). The
//! brokers' Role grants exactly that, through the pod's ServiceAccount.
//!
//! `broker.rack` is not passed: `spec.rackTopologyKey` names a node label,
//! and the downward API exposes no node labels to a pod, so the rack value
//! is not known when the pod template is built. Brokers run without a rack
//! (rack-unaware assignment) until the broker can read its Node's label.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort,
    EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm, PodAntiAffinity,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, SeccompProfile, SecretVolumeSource,
    SecurityContext, Service, ServiceAccount, ServicePort, ServiceSpec, TopologySpreadConstraint,
    Volume, VolumeMount, VolumeResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use super::listeners::{self, Layout, Listener};
use crate::crd::{
    AdvertisedAddress, KafkaCluster, KafkaRebalance, KafkaRebalanceSpec, RebalanceMode,
};

/// Port of the broker's HTTP endpoints (`/metrics`, `/healthz`, `/readyz`).
pub const BROKER_HTTP_PORT: i32 = 9644;
/// Mount path of each broker's data volume.
pub const DATA_DIR: &str = "/var/lib/moldau";
/// Mount path of the broker config ConfigMap.
pub const CONFIG_DIR: &str = "/etc/moldau";
/// Key of the broker config in the ConfigMap.
pub const CONFIG_KEY: &str = "server.properties";
/// Pod template annotation carrying the checksum of `server.properties`.
pub const CONFIG_HASH_ANNOTATION: &str = "moldau.io/config-hash";
/// Pod template annotation carrying the digest of the certificates a
/// secured cluster's brokers mount: a renewal changes it and so rolls the
/// brokers, one at a time behind the rollout's health gates.
pub const CERTS_DIGEST_ANNOTATION: &str = "moldau.io/certs-digest";
/// Label naming the cluster on every child object.
pub const CLUSTER_LABEL: &str = "moldau.io/cluster";
/// The volume of the broker certificate Secret (secured clusters).
const CERTS_VOLUME: &str = "broker-certs";
/// User (and group) id the broker runs as: the images' non-root user
/// (`USER 65532:65532` in the Dockerfile, the distroless `nonroot` convention).
pub const BROKER_UID: i64 = 65532;

/// Why desired objects could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// The resource lacks a field the API server always sets.
    #[error("KafkaCluster has no {0}")]
    MissingMetadata(&'static str),
}

/// Names of the child objects of one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// The KafkaCluster's name.
    pub cluster: String,
    /// Its namespace.
    pub namespace: String,
}

impl Names {
    /// Names for a cluster resource.
    pub fn of(kc: &KafkaCluster) -> Result<Self, BuildError> {
        Ok(Names {
            cluster: kc
                .metadata
                .name
                .clone()
                .ok_or(BuildError::MissingMetadata("metadata.name"))?,
            namespace: kc
                .metadata
                .namespace
                .clone()
                .ok_or(BuildError::MissingMetadata("metadata.namespace"))?,
        })
    }
    /// StatefulSet (and pod name prefix).
    pub fn stateful_set(&self) -> String {
        self.cluster.clone()
    }
    /// Headless Service giving each broker a stable DNS name.
    pub fn headless_service(&self) -> String {
        format!("{}-brokers", self.cluster)
    }
    /// Bootstrap Service for clients.
    pub fn bootstrap_service(&self) -> String {
        format!("{}-bootstrap", self.cluster)
    }
    /// ConfigMap holding `server.properties`.
    pub fn config_map(&self) -> String {
        format!("{}-config", self.cluster)
    }
    /// ServiceAccount, Role and RoleBinding of the brokers.
    pub fn broker_identity(&self) -> String {
        format!("{}-broker", self.cluster)
    }
    /// The Lease the brokers contend for; its holder is the controller.
    pub fn controller_lease(&self) -> String {
        format!("{}-controller", self.cluster)
    }
    /// The `MetadataShard` holding the cluster record (controller, epoch,
    /// registered brokers), written by the controller.
    pub fn cluster_shard(&self) -> String {
        moldau_coordination::store::cluster_object_name(&self.cluster)
    }
    /// PodDisruptionBudget.
    pub fn pdb(&self) -> String {
        self.cluster.clone()
    }
    /// Name of the broker pod with `ordinal`.
    pub fn pod(&self, ordinal: i32) -> String {
        format!("{}-{}", self.cluster, ordinal)
    }
    /// The `KafkaRebalance` the operator runs when the cluster scales.
    pub fn auto_rebalance(&self) -> String {
        format!("{}-auto-rebalance", self.cluster)
    }
}

/// Labels selecting the broker pods of a cluster.
pub fn selector_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "moldau-broker".to_string(),
        ),
        (
            "app.kubernetes.io/instance".to_string(),
            cluster.to_string(),
        ),
        (CLUSTER_LABEL.to_string(), cluster.to_string()),
    ])
}

/// The selector labels as a label-selector string (`status.selector`).
pub fn selector_string(cluster: &str) -> String {
    selector_labels(cluster)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Labels of every child object.
pub fn common_labels(cluster: &str) -> BTreeMap<String, String> {
    let mut labels = selector_labels(cluster);
    labels.insert(
        "app.kubernetes.io/managed-by".into(),
        "moldau-operator".into(),
    );
    labels.insert("app.kubernetes.io/component".into(), "broker".into());
    labels
}

/// All desired children of a cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterObjects {
    /// Identity of the broker pods.
    pub service_account: ServiceAccount,
    /// The controller Lease, MetadataShards and Events, for the brokers.
    pub role: Role,
    /// Binds `role` to `service_account`.
    pub role_binding: RoleBinding,
    /// Headless Service (per-broker DNS, not-ready addresses published).
    pub headless_service: Service,
    /// Bootstrap Service for clients.
    pub bootstrap_service: Service,
    /// `server.properties`.
    pub config_map: ConfigMap,
    /// The brokers.
    pub stateful_set: StatefulSet,
    /// At most one broker voluntarily down.
    pub pdb: PodDisruptionBudget,
}

/// Builds every desired child of `kc`, the StatefulSet with
/// `spec.replicas` brokers.
pub fn desired_objects(kc: &KafkaCluster) -> Result<ClusterObjects, BuildError> {
    desired_objects_scaled(kc, kc.spec.replicas, None)
}

/// Builds every desired child of `kc`, the StatefulSet with `replicas`
/// brokers (what `scaling::decide` says while a scale waits for data to
/// move).
pub fn desired_objects_scaled(
    kc: &KafkaCluster,
    replicas: i32,
    certs_digest: Option<&str>,
) -> Result<ClusterObjects, BuildError> {
    let names = Names::of(kc)?;
    let owner = owner_reference(kc)?;
    let layout = listeners::layout(&kc.spec);
    let mut config = kc.spec.config.clone();
    // Configs naming a file of a mounted volume go on the command line
    // (`broker_args`), in the pod spec beside the mount they name.
    let (mounted, listener_config): (BTreeMap<_, _>, BTreeMap<_, _>) = layout
        .broker_properties(&names.cluster)
        .into_iter()
        .partition(|(_, v)| v.starts_with(listeners::TLS_DIR));
    config.extend(listener_config);
    let properties = render_properties(&config);
    // a new value of a dynamic key is applied at run time, not by a roll
    let config_hash = config_hash(&render_properties(&super::dynamic::hash_input(&config)));
    Ok(ClusterObjects {
        service_account: ServiceAccount {
            metadata: meta(&names, names.broker_identity(), &owner),
            automount_service_account_token: Some(true),
            ..Default::default()
        },
        role: broker_role(&names, &owner),
        role_binding: broker_role_binding(&names, &owner),
        headless_service: headless_service(&layout, &names, &owner),
        bootstrap_service: bootstrap_service(&layout, &names, &owner),
        config_map: ConfigMap {
            metadata: meta(&names, names.config_map(), &owner),
            data: Some(BTreeMap::from([(CONFIG_KEY.to_string(), properties)])),
            ..Default::default()
        },
        stateful_set: stateful_set(
            kc,
            &names,
            &owner,
            Template {
                config_hash: &config_hash,
                certs_digest,
                layout: &layout,
                mounted: &mounted,
            },
            replicas,
        ),
        pdb: PodDisruptionBudget {
            metadata: meta(&names, names.pdb(), &owner),
            spec: Some(PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(1)),
                selector: Some(label_selector(&names.cluster)),
                ..Default::default()
            }),
            ..Default::default()
        },
    })
}

/// The `KafkaRebalance` the operator runs for a scale of `kc`: approved
/// (the scale is the approval), owned by `kc`, with the cluster's
/// `spec.rebalance` throttle and batch size.
pub fn auto_rebalance(
    kc: &KafkaCluster,
    mode: RebalanceMode,
    brokers: &[i32],
) -> Result<KafkaRebalance, BuildError> {
    let names = Names::of(kc)?;
    let owner = owner_reference(kc)?;
    let mut kr = KafkaRebalance::new(
        &names.auto_rebalance(),
        KafkaRebalanceSpec {
            cluster: names.cluster.clone(),
            mode,
            brokers: brokers.to_vec(),
            throttle_bytes_per_second: kc.spec.rebalance.throttle_bytes_per_second,
            topics: None,
            max_concurrent_moves: kc.spec.rebalance.max_concurrent_moves,
            approved: true,
        },
    );
    kr.metadata = meta(&names, names.auto_rebalance(), &owner);
    Ok(kr)
}

/// The controller owner reference pointing at `kc`.
pub fn owner_reference(kc: &KafkaCluster) -> Result<OwnerReference, BuildError> {
    if kc.metadata.uid.is_none() {
        return Err(BuildError::MissingMetadata("metadata.uid"));
    }
    kc.controller_owner_ref(&())
        .ok_or(BuildError::MissingMetadata("metadata.name"))
}

fn meta(names: &Names, name: String, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(names.namespace.clone()),
        labels: Some(common_labels(&names.cluster)),
        owner_references: Some(vec![owner.clone()]),
        ..Default::default()
    }
}

fn label_selector(cluster: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(selector_labels(cluster)),
        ..Default::default()
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// API group of Moldau's resources (the brokers' `MetadataShard`s included).
pub const MOLDAU_GROUP: &str = "moldau.io";
/// Plural of the brokers' metadata kind.
pub const METADATA_SHARDS: &str = "metadatashards";

/// The brokers' permissions, exactly what cluster mode needs: the controller
/// Lease (read and renew it; create it when absent), the cluster's metadata
/// objects, and Events about them. Nothing else of the namespace.
pub fn broker_rules(names: &Names) -> Vec<PolicyRule> {
    vec![
        PolicyRule {
            api_groups: Some(strings(&["coordination.k8s.io"])),
            resources: Some(strings(&["leases"])),
            resource_names: Some(vec![names.controller_lease()]),
            verbs: strings(&["get", "update", "patch"]),
            ..Default::default()
        },
        // RBAC cannot restrict `create` by resourceNames (the name is not
        // known when a create is authorized), so this rule allows creating
        // any Lease in the namespace; reading or changing one afterwards is
        // limited to the controller Lease by the rule above.
        PolicyRule {
            api_groups: Some(strings(&["coordination.k8s.io"])),
            resources: Some(strings(&["leases"])),
            verbs: strings(&["create"]),
            ..Default::default()
        },
        PolicyRule {
            api_groups: Some(strings(&[MOLDAU_GROUP])),
            resources: Some(strings(&[METADATA_SHARDS])),
            verbs: strings(&[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ]),
            ..Default::default()
        },
        PolicyRule {
            api_groups: Some(strings(&["", "events.k8s.io"])),
            resources: Some(strings(&["events"])),
            verbs: strings(&["create", "patch"]),
            ..Default::default()
        },
    ]
}

fn broker_role(names: &Names, owner: &OwnerReference) -> Role {
    Role {
        metadata: meta(names, names.broker_identity(), owner),
        rules: Some(broker_rules(names)),
    }
}

fn broker_role_binding(names: &Names, owner: &OwnerReference) -> RoleBinding {
    RoleBinding {
        metadata: meta(names, names.broker_identity(), owner),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: names.broker_identity(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: names.broker_identity(),
            namespace: Some(names.namespace.clone()),
            ..Default::default()
        }]),
    }
}

/// The Service port of a listener, named (and targeting the container port
/// named) as the listener.
fn listener_port(listener: &Listener) -> ServicePort {
    ServicePort {
        name: Some(listener.port_name.clone()),
        port: listener.port,
        target_port: Some(IntOrString::String(listener.port_name.clone())),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn headless_service(layout: &Layout, names: &Names, owner: &OwnerReference) -> Service {
    Service {
        metadata: meta(names, names.headless_service(), owner),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector_labels(&names.cluster)),
            ports: Some(
                layout
                    .all()
                    .map(listener_port)
                    .chain([ServicePort {
                        name: Some("http".into()),
                        port: BROKER_HTTP_PORT,
                        target_port: Some(IntOrString::String("http".into())),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    }])
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The bootstrap Service: the client listeners only (`REPLICATION` is the
/// brokers', dialed per pod).
fn bootstrap_service(layout: &Layout, names: &Names, owner: &OwnerReference) -> Service {
    Service {
        metadata: meta(names, names.bootstrap_service(), owner),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(selector_labels(&names.cluster)),
            ports: Some(layout.clients.iter().map(listener_port).collect()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The bootstrap address clients inside the Kubernetes cluster use.
pub fn bootstrap_servers(names: &Names, port: i32) -> String {
    format!(
        "{}.{}.svc:{}",
        names.bootstrap_service(),
        names.namespace,
        port
    )
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn value_env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// Environment of the broker container, per the broker's flag/env contract.
/// `POD_IP` comes first so later values can expand `$(POD_IP)`.
///
/// The listeners bind the pod IP only (no wildcard address). On an IPv6 pod
/// `$(POD_IP):port` expands to an unbracketed `fd00::5:9093`: the broker
/// accepts that form for `--listen`/`--http-listen` and the advertised
/// listener (the text after the last `:` is the port), since Kubernetes env
/// expansion cannot add brackets for one family only.
///
/// Cluster mode: `MOLDAU_CLUSTER=kubernetes`, the pod's namespace as
/// `MOLDAU_NAMESPACE`, and the controller's gRPC listener on the pod IP
/// (advertised, by the broker's default, as the advertised host and that
/// port).
///
/// The advertised host is `advertised_host(...)`: the pod IP, or the pod's
/// name through the headless Service, which stays the same when the pod is
/// recreated elsewhere with another IP.
pub fn broker_env(
    names: &Names,
    advertised: AdvertisedAddress,
    listener_port: i32,
    controller_port: i32,
) -> Vec<EnvVar> {
    let cluster = names.cluster.as_str();
    let advertised_host = advertised_host(names, advertised);
    vec![
        field_env("POD_IP", "status.podIP"),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env(
            "MOLDAU_NODE_ID",
            "metadata.labels['apps.kubernetes.io/pod-index']",
        ),
        value_env("MOLDAU_CLUSTER", "kubernetes"),
        value_env("MOLDAU_CLUSTER_NAME", cluster),
        field_env("MOLDAU_NAMESPACE", "metadata.namespace"),
        value_env(
            "MOLDAU_CONTROLLER_LISTEN",
            format!("$(POD_IP):{controller_port}"),
        ),
        value_env("MOLDAU_LISTEN", format!("$(POD_IP):{listener_port}")),
        value_env(
            "MOLDAU_ADVERTISED_LISTENER",
            format!("{advertised_host}:{listener_port}"),
        ),
        value_env(
            "MOLDAU_HTTP_LISTEN",
            format!("$(POD_IP):{BROKER_HTTP_PORT}"),
        ),
        value_env("MOLDAU_DATA_DIR", DATA_DIR),
        value_env("MOLDAU_CONFIG_FILE", format!("{CONFIG_DIR}/{CONFIG_KEY}")),
    ]
}

/// The host part a broker advertises, in `$(VAR)` form for the container's
/// environment: `$(POD_IP)`, or `$(POD_NAME).<cluster>-brokers.$(POD_NAMESPACE).svc`
/// (Strimzi's form, without the cluster domain, which the pods' resolver
/// search path supplies).
pub fn advertised_host(names: &Names, advertised: AdvertisedAddress) -> String {
    match advertised {
        AdvertisedAddress::PodIp => "$(POD_IP)".into(),
        AdvertisedAddress::PodDns => {
            format!(
                "$(POD_NAME).{}.$(POD_NAMESPACE).svc",
                names.headless_service()
            )
        }
    }
}

fn http_probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            scheme: Some("HTTP".into()),
            ..Default::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(3),
        failure_threshold: Some(failures),
        ..Default::default()
    }
}

fn default_affinity(cluster: &str) -> Affinity {
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: PodAffinityTerm {
                        label_selector: Some(label_selector(cluster)),
                        topology_key: "kubernetes.io/hostname".into(),
                        ..Default::default()
                    },
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What the pod template carries besides the spec.
struct Template<'a> {
    /// [`config_hash`] of the restart-needing configs.
    config_hash: &'a str,
    /// Digest of the mounted certificates (secured clusters).
    certs_digest: Option<&'a str>,
    layout: &'a Layout,
    /// Configs naming mounted files.
    mounted: &'a BTreeMap<String, String>,
}

/// The broker's command-line arguments: the listeners, when the cluster
/// names them (the pod IP and name are only known to the container's
/// environment, so they cannot be in the ConfigMap), and the configs that
/// name files of the certificate volume (`mounted`).
fn broker_args(
    names: &Names,
    layout: &Layout,
    advertised: AdvertisedAddress,
    mounted: &BTreeMap<String, String>,
) -> Vec<String> {
    if !layout.needs_listener_configs() {
        return Vec::new();
    }
    let files = mounted.iter().map(|(k, v)| format!("--set={k}={v}"));
    vec![
        format!("--set=listeners={}", layout.listeners_config()),
        format!(
            "--set=advertised.listeners={}",
            layout.advertised_config(
                &advertised_host(names, advertised),
                &advertised_host(names, AdvertisedAddress::PodDns)
            )
        ),
    ]
    .into_iter()
    .chain(files)
    .collect()
}

fn stateful_set(
    kc: &KafkaCluster,
    names: &Names,
    owner: &OwnerReference,
    template: Template<'_>,
    replicas: i32,
) -> StatefulSet {
    let layout = template.layout;
    let overrides = kc.spec.pod_template.clone().unwrap_or_default();
    let mut pod_labels = overrides.labels.clone();
    pod_labels.extend(common_labels(&names.cluster));
    let mut pod_annotations = overrides.annotations.clone();
    pod_annotations.insert(
        CONFIG_HASH_ANNOTATION.into(),
        template.config_hash.to_string(),
    );
    if let Some(digest) = template.certs_digest {
        pod_annotations.insert(CERTS_DIGEST_ANNOTATION.into(), digest.to_string());
    }
    let advertised = listeners::advertised_address(&kc.spec);
    let args = broker_args(names, layout, advertised, template.mounted);
    let mut volume_mounts = vec![
        VolumeMount {
            name: "data".into(),
            mount_path: DATA_DIR.into(),
            ..Default::default()
        },
        VolumeMount {
            name: "config".into(),
            mount_path: CONFIG_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        },
        VolumeMount {
            name: "tmp".into(),
            mount_path: "/tmp".into(),
            ..Default::default()
        },
    ];
    let mut volumes = vec![
        Volume {
            name: "config".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: names.config_map(),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ];
    if layout.secured() {
        volume_mounts.push(VolumeMount {
            name: CERTS_VOLUME.into(),
            mount_path: listeners::TLS_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
        volumes.push(Volume {
            name: CERTS_VOLUME.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(crate::certs::broker_certs_secret(&names.cluster)),
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    let mut ports: Vec<ContainerPort> = layout
        .all()
        .map(|l| ContainerPort {
            name: Some(l.port_name.clone()),
            container_port: l.port,
            protocol: Some("TCP".into()),
            ..Default::default()
        })
        .collect();
    ports.extend([
        ContainerPort {
            name: Some("controller".into()),
            container_port: kc.spec.controller_port,
            protocol: Some("TCP".into()),
            ..Default::default()
        },
        ContainerPort {
            name: Some("http".into()),
            container_port: BROKER_HTTP_PORT,
            protocol: Some("TCP".into()),
            ..Default::default()
        },
    ]);

    let container = Container {
        name: "broker".into(),
        image: Some(kc.spec.image.clone()),
        env: Some(broker_env(
            names,
            advertised,
            layout.clients[0].port,
            kc.spec.controller_port,
        )),
        args: (!args.is_empty()).then_some(args),
        ports: Some(ports),
        resources: kc.spec.resources.clone(),
        // A broker that exits on an error says why in its log, not in a
        // termination-log file: the log's tail becomes the container's
        // last termination message, which the cluster's status reports for
        // a crash loop (`restarts`).
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        readiness_probe: Some(http_probe("/readyz", 5, 3)),
        liveness_probe: Some(Probe {
            initial_delay_seconds: Some(10),
            ..http_probe("/healthz", 10, 6)
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(BROKER_UID),
            run_as_group: Some(BROKER_UID),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        volume_mounts: Some(volume_mounts),
        ..Default::default()
    };

    let topology_spread_constraints = kc.spec.rack_topology_key.as_ref().map(|key| {
        vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.clone(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(label_selector(&names.cluster)),
            ..Default::default()
        }]
    });

    let pod_spec = PodSpec {
        service_account_name: Some(names.broker_identity()),
        termination_grace_period_seconds: Some(60),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(BROKER_UID),
            run_as_group: Some(BROKER_UID),
            fs_group: Some(BROKER_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        containers: vec![container],
        volumes: Some(volumes),
        node_selector: (!overrides.node_selector.is_empty())
            .then(|| overrides.node_selector.clone()),
        tolerations: (!overrides.tolerations.is_empty()).then(|| overrides.tolerations.clone()),
        affinity: Some(
            overrides
                .affinity
                .clone()
                .unwrap_or_else(|| default_affinity(&names.cluster)),
        ),
        topology_spread_constraints,
        ..Default::default()
    };

    let storage = &kc.spec.storage;
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            labels: Some(common_labels(&names.cluster)),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(storage.size.clone()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };

    StatefulSet {
        metadata: meta(names, names.stateful_set(), owner),
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            selector: label_selector(&names.cluster),
            service_name: Some(names.headless_service()),
            pod_management_policy: Some("Parallel".into()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".into()),
                ..Default::default()
            }),
            // A removed broker's claim goes the way all claims go when the
            // cluster is deleted: storage.deleteClaim decides both.
            persistent_volume_claim_retention_policy: Some({
                let policy = if storage.delete_claim {
                    "Delete"
                } else {
                    "Retain"
                };
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some(policy.into()),
                    when_scaled: Some(policy.into()),
                }
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: Some(pod_annotations),
                    ..Default::default()
                }),
                spec: Some(pod_spec),
            },
            volume_claim_templates: Some(vec![claim]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Renders broker config overrides as a Java properties file, sorted by key.
///
/// Escaped as `java.util.Properties.store` does, so that `Properties.load`
/// (and the broker's parser, which implements it) gives back exactly the
/// map: `\\`, `\t`, `\n`, `\r`, `\f`; in keys also `=`, `:`, `#`, `!` and
/// spaces; in values a leading space; every other control or non-ASCII
/// character as `\uXXXX` (UTF-16 units), so the file is plain ASCII and reads
/// the same whatever charset a reader assumes (Kafka's own loader reads
/// ISO-8859-1). Characters that need no escape are left alone, so ordinary
/// configs render as they are written.
pub fn render_properties(config: &BTreeMap<String, String>) -> String {
    let mut out = String::from("# Managed by moldau-operator from KafkaCluster spec.config\n");
    for (key, value) in config {
        escape_properties(&mut out, key, true);
        out.push('=');
        escape_properties(&mut out, value, false);
        out.push('\n');
    }
    out
}

fn escape_properties(out: &mut String, s: &str, is_key: bool) {
    for (i, c) in s.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\x0c' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' if is_key => {
                out.push('\\');
                out.push(c);
            }
            ' ' if is_key || i == 0 => out.push_str("\\ "),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        }
    }
}

/// Hex SHA-256 of the rendered config (the pod template annotation).
pub fn config_hash(properties: &str) -> String {
    Sha256::digest(properties.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `namespace/name` of a cluster, for logs.
pub fn object_key(kc: &KafkaCluster) -> String {
    format!("{}/{}", kc.namespace().unwrap_or_default(), kc.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{KafkaClusterSpec, PodTemplateOverrides, StorageSpec};

    fn cluster(replicas: i32) -> KafkaCluster {
        let mut kc = KafkaCluster::new(
            "demo",
            KafkaClusterSpec {
                replicas,
                image: "moldau/broker:test".into(),
                resources: None,
                storage: StorageSpec {
                    size: "1Gi".into(),
                    storage_class_name: Some("fast".into()),
                    delete_claim: false,
                },
                config: BTreeMap::from([("log.retention.ms".into(), "1000".into())]),
                listener_port: 9092,
                controller_port: 9091,
                advertised_address: None,
                listeners: Vec::new(),
                authorization: None,
                cluster_ca: None,
                clients_ca: None,
                rack_topology_key: None,
                pod_template: None,
                rebalance: Default::default(),
                rollout: Default::default(),
            },
        );
        kc.metadata.namespace = Some("ns".into());
        kc.metadata.uid = Some("uid-1".into());
        kc
    }

    fn sts_spec(objs: &ClusterObjects) -> &StatefulSetSpec {
        objs.stateful_set.spec.as_ref().unwrap()
    }

    fn container(objs: &ClusterObjects) -> &Container {
        &sts_spec(objs).template.spec.as_ref().unwrap().containers[0]
    }

    #[test]
    fn a_crashing_broker_leaves_its_log_tail_as_termination_message() {
        let objs = desired_objects(&cluster(1)).unwrap();
        assert_eq!(
            container(&objs).termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
    }

    #[test]
    fn missing_uid_is_an_error_not_a_panic() {
        let mut kc = cluster(1);
        kc.metadata.uid = None;
        assert_eq!(
            desired_objects(&kc),
            Err(BuildError::MissingMetadata("metadata.uid"))
        );
        kc.metadata.namespace = None;
        assert!(desired_objects(&kc).is_err());
    }

    #[test]
    fn every_object_is_owned_by_the_cluster_and_labelled() {
        let objs = desired_objects(&cluster(3)).unwrap();
        let metas = [
            &objs.service_account.metadata,
            &objs.role.metadata,
            &objs.role_binding.metadata,
            &objs.headless_service.metadata,
            &objs.bootstrap_service.metadata,
            &objs.config_map.metadata,
            &objs.stateful_set.metadata,
            &objs.pdb.metadata,
        ];
        for m in metas {
            let owners = m.owner_references.as_ref().unwrap();
            assert_eq!(owners.len(), 1);
            assert_eq!(owners[0].kind, "KafkaCluster");
            assert_eq!(owners[0].uid, "uid-1");
            assert_eq!(owners[0].controller, Some(true));
            assert_eq!(m.namespace.as_deref(), Some("ns"));
            assert_eq!(m.labels.as_ref().unwrap()[CLUSTER_LABEL], "demo");
        }
    }

    #[test]
    fn statefulset_shape() {
        let objs = desired_objects(&cluster(3)).unwrap();
        let spec = sts_spec(&objs);
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
        assert_eq!(
            spec.update_strategy.as_ref().unwrap().type_.as_deref(),
            Some("OnDelete")
        );
        assert_eq!(spec.service_name.as_deref(), Some("demo-brokers"));
        let vct = &spec.volume_claim_templates.as_ref().unwrap()[0];
        let pvc = vct.spec.as_ref().unwrap();
        assert_eq!(pvc.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            pvc.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"],
            Quantity("1Gi".into())
        );
        let retention = spec
            .persistent_volume_claim_retention_policy
            .as_ref()
            .unwrap();
        assert_eq!(retention.when_deleted.as_deref(), Some("Retain"));
        assert_eq!(retention.when_scaled.as_deref(), Some("Retain"));
        // selector labels are a subset of the pod labels
        let pod_labels = spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        for (k, v) in spec.selector.match_labels.as_ref().unwrap() {
            assert_eq!(pod_labels.get(k), Some(v));
        }
    }

    #[test]
    fn delete_claim_sets_retention_policy() {
        let mut kc = cluster(1);
        kc.spec.storage.delete_claim = true;
        let objs = desired_objects(&kc).unwrap();
        let retention = sts_spec(&objs)
            .persistent_volume_claim_retention_policy
            .as_ref()
            .unwrap();
        assert_eq!(retention.when_deleted.as_deref(), Some("Delete"));
        assert_eq!(retention.when_scaled.as_deref(), Some("Delete"));
    }

    #[test]
    fn the_statefulset_runs_the_replicas_the_scale_decides() {
        let objs = desired_objects_scaled(&cluster(3), 5, None).unwrap();
        assert_eq!(sts_spec(&objs).replicas, Some(5));
    }

    #[test]
    fn the_auto_rebalance_is_approved_owned_and_carries_the_cluster_settings() {
        let mut kc = cluster(3);
        kc.spec.rebalance.throttle_bytes_per_second = Some(1000);
        kc.spec.rebalance.max_concurrent_moves = Some(4);
        let kr = auto_rebalance(&kc, RebalanceMode::RemoveBrokers, &[2]).unwrap();
        assert_eq!(kr.metadata.name.as_deref(), Some("demo-auto-rebalance"));
        assert_eq!(kr.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(
            kr.metadata.owner_references.as_ref().unwrap()[0].name,
            "demo"
        );
        assert_eq!(kr.metadata.labels.as_ref().unwrap()[CLUSTER_LABEL], "demo");
        assert_eq!(kr.spec.cluster, "demo");
        assert_eq!(kr.spec.mode, RebalanceMode::RemoveBrokers);
        assert_eq!(kr.spec.brokers, vec![2]);
        assert!(kr.spec.approved);
        assert_eq!(kr.spec.throttle_bytes_per_second, Some(1000));
        assert_eq!(kr.spec.max_concurrent_moves, Some(4));
    }

    #[test]
    fn container_is_locked_down_and_probed() {
        let objs = desired_objects(&cluster(1)).unwrap();
        let c = container(&objs);
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_ref().unwrap(),
            &vec!["ALL".to_string()]
        );
        let ready = c
            .readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(ready.path.as_deref(), Some("/readyz"));
        let live = c
            .liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap();
        assert_eq!(live.path.as_deref(), Some("/healthz"));
        let http = c
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .find(|p| p.name.as_deref() == Some("http"))
            .unwrap();
        assert_eq!(http.container_port, BROKER_HTTP_PORT);
    }

    #[test]
    fn pod_dns_advertises_the_pods_name_through_the_headless_service() {
        let names = Names {
            cluster: "demo".into(),
            namespace: "kafka".into(),
        };
        let env = broker_env(&names, AdvertisedAddress::PodDns, 9093, 9091);
        let get = |n: &str| env.iter().find(|e| e.name == n).unwrap().clone();
        assert_eq!(
            get("MOLDAU_ADVERTISED_LISTENER").value.as_deref(),
            Some("$(POD_NAME).demo-brokers.$(POD_NAMESPACE).svc:9093")
        );
        // Still bound to the pod IP; only what is advertised changes.
        assert_eq!(
            get("MOLDAU_LISTEN").value.as_deref(),
            Some("$(POD_IP):9093")
        );
        let at = |n: &str| env.iter().position(|e| e.name == n).unwrap();
        assert!(at("POD_NAME") < at("MOLDAU_ADVERTISED_LISTENER"));
        assert!(at("POD_NAMESPACE") < at("MOLDAU_ADVERTISED_LISTENER"));
    }

    #[test]
    fn env_follows_the_broker_contract() {
        let names = Names {
            cluster: "demo".into(),
            namespace: "kafka".into(),
        };
        let env = broker_env(&names, AdvertisedAddress::PodIp, 9093, 9091);
        let get = |n: &str| env.iter().find(|e| e.name == n).unwrap().clone();
        assert_eq!(env[0].name, "POD_IP", "POD_IP must precede its uses");
        // Kubernetes expands $(VAR) only from variables defined earlier.
        for (i, e) in env.iter().enumerate() {
            for (j, other) in env.iter().enumerate() {
                let used = e
                    .value
                    .as_deref()
                    .is_some_and(|v| v.contains(&format!("$({})", other.name)));
                assert!(
                    !used || j < i,
                    "{} uses {} before it is set",
                    e.name,
                    other.name
                );
            }
        }
        assert_eq!(get("MOLDAU_CLUSTER").value.as_deref(), Some("kubernetes"));
        assert_eq!(
            get("MOLDAU_NAMESPACE")
                .value_from
                .unwrap()
                .field_ref
                .unwrap()
                .field_path,
            "metadata.namespace"
        );
        assert_eq!(
            get("MOLDAU_CONTROLLER_LISTEN").value.as_deref(),
            Some("$(POD_IP):9091")
        );
        assert!(
            env.iter().all(|e| e.name != "MOLDAU_CONTROLLER_ADVERTISED"),
            "the broker's default (pod IP + controller port) is the right one"
        );
        assert_eq!(
            get("MOLDAU_LISTEN").value.as_deref(),
            Some("$(POD_IP):9093")
        );
        assert_eq!(
            get("MOLDAU_ADVERTISED_LISTENER").value.as_deref(),
            Some("$(POD_IP):9093")
        );
        assert_eq!(
            get("MOLDAU_HTTP_LISTEN").value.as_deref(),
            Some("$(POD_IP):9644")
        );
        assert_eq!(get("MOLDAU_DATA_DIR").value.as_deref(), Some(DATA_DIR));
        assert_eq!(
            get("MOLDAU_CONFIG_FILE").value.as_deref(),
            Some("/etc/moldau/server.properties")
        );
        assert_eq!(get("MOLDAU_CLUSTER_NAME").value.as_deref(), Some("demo"));
        let node = get("MOLDAU_NODE_ID").value_from.unwrap().field_ref.unwrap();
        assert_eq!(
            node.field_path,
            "metadata.labels['apps.kubernetes.io/pod-index']"
        );
        for n in ["POD_NAME", "POD_NAMESPACE"] {
            assert!(get(n).value_from.is_some());
        }
    }

    #[test]
    fn config_change_changes_the_pod_template() {
        let a = desired_objects(&cluster(1)).unwrap();
        let mut kc = cluster(1);
        kc.spec.config.insert("num.partitions".into(), "3".into());
        let b = desired_objects(&kc).unwrap();
        assert_ne!(sts_spec(&a).template, sts_spec(&b).template);
        // and the same spec always gives the same template
        assert_eq!(
            sts_spec(&a).template,
            sts_spec(&desired_objects(&cluster(1)).unwrap()).template
        );
        let data = b.config_map.data.as_ref().unwrap();
        assert!(data[CONFIG_KEY].contains("num.partitions=3\n"));
    }

    #[test]
    fn properties_are_escaped_and_sorted() {
        let cfg = BTreeMap::from([
            ("b".to_string(), "x\ny".to_string()),
            ("a=b".to_string(), " lead".to_string()),
        ]);
        let text = render_properties(&cfg);
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(lines, vec!["a\\=b=\\ lead", "b=x\\ny"]);
    }

    #[test]
    fn properties_escaping_is_java_store_escaping() {
        let cases = [
            // (key, value, line) with the line as Java's Properties.store
            // writes it (checked with Java 17), except that `=`, `:`, `#` and
            // `!` in values and spaces after the first are left alone.
            ("plain.key", "plain value", "plain.key=plain value"),
            ("k", "C:\\dir\\", "k=C:\\\\dir\\\\"),
            ("k", "  two", "k=\\  two"),
            ("k", "trail  ", "k=trail  "),
            ("k", "\t\x0c\r\n", "k=\\t\\f\\r\\n"),
            ("k", "a=b:c#d!e", "k=a=b:c#d!e"),
            ("k", "#!", "k=#!"),
            ("k", "", "k="),
            ("a key:x=y", "v", "a\\ key\\:x\\=y=v"),
            ("#k", "v", "\\#k=v"),
            ("!k", "v", "\\!k=v"),
            ("", "v", "=v"),
            (
                "k",
                "\u{e9}\u{20ac}\u{1F600}",
                "k=\\u00E9\\u20AC\\uD83D\\uDE00",
            ),
            ("k", "\u{0}\u{1b}\u{7f}", "k=\\u0000\\u001B\\u007F"),
        ];
        for (key, value, line) in cases {
            let text = render_properties(&BTreeMap::from([(key.to_string(), value.to_string())]));
            assert_eq!(text.lines().nth(1), Some(line), "{key:?}={value:?}");
            assert!(text.is_ascii());
        }
    }

    #[test]
    fn services() {
        let objs = desired_objects(&cluster(1)).unwrap();
        let headless = objs.headless_service.spec.as_ref().unwrap();
        assert_eq!(headless.cluster_ip.as_deref(), Some("None"));
        assert_eq!(headless.publish_not_ready_addresses, Some(true));
        let boot = objs.bootstrap_service.spec.as_ref().unwrap();
        assert_eq!(boot.ports.as_ref().unwrap()[0].port, 9092);
        assert_eq!(
            objs.bootstrap_service.metadata.name.as_deref(),
            Some("demo-bootstrap")
        );
        assert_eq!(
            bootstrap_servers(&Names::of(&cluster(1)).unwrap(), 9092),
            "demo-bootstrap.ns.svc:9092"
        );
    }

    #[test]
    fn pdb_and_rbac() {
        let objs = desired_objects(&cluster(3)).unwrap();
        let pdb = objs.pdb.spec.as_ref().unwrap();
        assert_eq!(pdb.max_unavailable, Some(IntOrString::Int(1)));
        let subject = &objs.role_binding.subjects.as_ref().unwrap()[0];
        assert_eq!(
            subject.name,
            objs.service_account.metadata.name.clone().unwrap()
        );
        assert_eq!(subject.namespace.as_deref(), Some("ns"));
        assert_eq!(
            objs.role_binding.role_ref.name,
            objs.role.metadata.name.clone().unwrap()
        );
        assert_eq!(objs.role_binding.role_ref.kind, "Role");
        let pod = sts_spec(&objs).template.spec.as_ref().unwrap();
        assert_eq!(pod.service_account_name, objs.service_account.metadata.name);
        assert_eq!(
            objs.service_account.automount_service_account_token,
            Some(true)
        );
    }

    /// `(group, resource, resourceNames, verbs)` of every rule, flattened.
    fn grants(role: &Role) -> Vec<(String, String, Vec<String>, Vec<String>)> {
        let mut out = Vec::new();
        for r in role.rules.as_ref().unwrap() {
            for g in r.api_groups.as_ref().unwrap() {
                for res in r.resources.as_ref().unwrap() {
                    out.push((
                        g.clone(),
                        res.clone(),
                        r.resource_names.clone().unwrap_or_default(),
                        r.verbs.clone(),
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn broker_role_grants_exactly_what_cluster_mode_needs() {
        let objs = desired_objects(&cluster(3)).unwrap();
        let v = |vs: &[&str]| vs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            grants(&objs.role),
            vec![
                (
                    "coordination.k8s.io".into(),
                    "leases".into(),
                    v(&["demo-controller"]),
                    v(&["get", "update", "patch"])
                ),
                (
                    "coordination.k8s.io".into(),
                    "leases".into(),
                    vec![],
                    v(&["create"])
                ),
                (
                    "moldau.io".into(),
                    "metadatashards".into(),
                    vec![],
                    v(&["get", "list", "watch", "create", "update", "patch", "delete"])
                ),
                ("".into(), "events".into(), vec![], v(&["create", "patch"])),
                (
                    "events.k8s.io".into(),
                    "events".into(),
                    vec![],
                    v(&["create", "patch"])
                ),
            ]
        );
        // No wildcard, no Secrets, no ConfigMaps, no Pods.
        for (g, res, _, verbs) in grants(&objs.role) {
            assert!(g != "*" && res != "*" && !verbs.contains(&"*".to_string()));
            assert!(!["secrets", "configmaps", "pods"].contains(&res.as_str()));
        }
        let names = Names::of(&cluster(1)).unwrap();
        assert_eq!(names.controller_lease(), "demo-controller");
        assert_eq!(names.cluster_shard(), "demo-cluster");
    }

    #[test]
    fn controller_port_is_a_container_port() {
        let mut kc = cluster(1);
        kc.spec.controller_port = 9300;
        let objs = desired_objects(&kc).unwrap();
        let c = container(&objs);
        let port = c
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .find(|p| p.name.as_deref() == Some("controller"))
            .unwrap();
        assert_eq!(port.container_port, 9300);
        let listen = c
            .env
            .as_ref()
            .unwrap()
            .iter()
            .find(|e| e.name == "MOLDAU_CONTROLLER_LISTEN")
            .unwrap();
        assert_eq!(listen.value.as_deref(), Some("$(POD_IP):9300"));
    }

    #[test]
    fn pod_template_overrides_apply_but_selector_labels_win() {
        let mut kc = cluster(1);
        kc.spec.rack_topology_key = Some("topology.kubernetes.io/zone".into());
        kc.spec.pod_template = Some(PodTemplateOverrides {
            labels: BTreeMap::from([
                ("team".to_string(), "data".to_string()),
                (CLUSTER_LABEL.to_string(), "evil".to_string()),
            ]),
            annotations: BTreeMap::from([("a".to_string(), "b".to_string())]),
            node_selector: BTreeMap::from([("disk".to_string(), "ssd".to_string())]),
            tolerations: vec![Default::default()],
            affinity: Some(Affinity::default()),
        });
        let objs = desired_objects(&kc).unwrap();
        let tpl = &sts_spec(&objs).template;
        let meta = tpl.metadata.as_ref().unwrap();
        assert_eq!(meta.labels.as_ref().unwrap()["team"], "data");
        assert_eq!(meta.labels.as_ref().unwrap()[CLUSTER_LABEL], "demo");
        assert_eq!(meta.annotations.as_ref().unwrap()["a"], "b");
        assert!(meta
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(CONFIG_HASH_ANNOTATION));
        let pod = tpl.spec.as_ref().unwrap();
        assert_eq!(pod.node_selector.as_ref().unwrap()["disk"], "ssd");
        assert_eq!(pod.tolerations.as_ref().unwrap().len(), 1);
        assert_eq!(pod.affinity, Some(Affinity::default()));
        let tsc = &pod.topology_spread_constraints.as_ref().unwrap()[0];
        assert_eq!(tsc.topology_key, "topology.kubernetes.io/zone");
    }

    #[test]
    fn a_secured_cluster_mounts_its_certificates_and_names_its_listeners() {
        let mut kc = cluster(3);
        kc.spec.listeners = serde_json::from_value(serde_json::json!([
            {"name": "plain", "port": 9092},
            {"name": "tls", "port": 9093, "tls": true, "authentication": {"type": "scram-sha-512"}}
        ]))
        .unwrap();
        let objs = desired_objects_scaled(&kc, 3, Some("digest-1")).unwrap();
        let c = container(&objs);
        let args = c.args.clone().unwrap();
        assert_eq!(
            args[0],
            "--set=listeners=PLAIN://$(POD_IP):9092,TLS://$(POD_IP):9093,REPLICATION://$(POD_IP):9090"
        );
        // a TLS listener makes the pods advertise their DNS names
        assert_eq!(
            args[1],
            "--set=advertised.listeners=PLAIN://$(POD_NAME).demo-brokers.$(POD_NAMESPACE).svc:9092,TLS://$(POD_NAME).demo-brokers.$(POD_NAMESPACE).svc:9093,REPLICATION://$(POD_NAME).demo-brokers.$(POD_NAMESPACE).svc:9090"
        );
        let ports: Vec<(String, i32)> = c
            .ports
            .clone()
            .unwrap()
            .into_iter()
            .map(|p| (p.name.unwrap(), p.container_port))
            .collect();
        assert_eq!(
            ports,
            [
                ("plain".to_string(), 9092),
                ("tls".into(), 9093),
                ("replication".into(), 9090),
                ("controller".into(), 9091),
                ("http".into(), 9644)
            ]
        );
        let mount = c
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .find(|m| m.mount_path == listeners::TLS_DIR)
            .expect("the certificates are mounted");
        let pod = sts_spec(&objs).template.spec.as_ref().unwrap();
        let volume = pod
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .find(|v| v.name == mount.name)
            .unwrap();
        assert_eq!(
            volume.secret.as_ref().unwrap().secret_name.as_deref(),
            Some("demo-broker-certs")
        );
        let annotations = sts_spec(&objs)
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .clone()
            .unwrap();
        assert_eq!(annotations[CERTS_DIGEST_ANNOTATION], "digest-1");
        let properties = &objs.config_map.data.as_ref().unwrap()[CONFIG_KEY];
        assert!(properties.contains("inter.broker.listener.name=REPLICATION"));
        // file paths are in the pod spec, beside the mount they name
        assert!(!properties.contains(listeners::TLS_DIR));
        assert!(args.contains(
            &"--set=listener.name.tls.ssl.keystore.location=/etc/moldau-tls/broker.pem".to_string()
        ));
        assert!(properties.contains("log.retention.ms=1000"));
        let bootstrap: Vec<i32> = objs
            .bootstrap_service
            .spec
            .as_ref()
            .unwrap()
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| p.port)
            .collect();
        assert_eq!(bootstrap, [9092, 9093], "REPLICATION is not a client's");
        let headless: Vec<i32> = objs
            .headless_service
            .spec
            .as_ref()
            .unwrap()
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .map(|p| p.port)
            .collect();
        assert_eq!(headless, [9092, 9093, 9090, 9644]);
        // a renewed certificate changes the template, which rolls the brokers
        let renewed = desired_objects_scaled(&kc, 3, Some("digest-2")).unwrap();
        assert_ne!(sts_spec(&objs).template, sts_spec(&renewed).template);
    }

    #[test]
    fn an_unsecured_cluster_has_no_listener_arguments() {
        let objs = desired_objects(&cluster(1)).unwrap();
        let c = container(&objs);
        assert_eq!(c.args, None);
        assert!(c
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .all(|m| m.mount_path != listeners::TLS_DIR));
    }
}
