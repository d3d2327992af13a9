//! End to end on the real control plane of `e2e/` with the pod runner: the
//! CRDs are applied, the operator binary runs as a host process against the
//! admin kubeconfig, and real `moldau-broker` processes run the pods.
//!
//! Covered: a KafkaCluster gets its ServiceAccount/Role/RoleBinding, Services,
//! ConfigMap, StatefulSet and PDB and becomes Ready — which means its brokers
//! run in cluster mode (`MOLDAU_CLUSTER=kubernetes`) and are registered with
//! one controller, as `status.controller`, `controllerEpoch` and
//! `registeredBrokers` report from the brokers' `MetadataShard`; so these
//! tests need a broker binary with the Kubernetes cluster mode and the
//! MetadataShard CRD in `crds/`; a KafkaCluster of 3 is one Kafka cluster to
//! `kcat` (the Debian package): all brokers and one controller listed by each,
//! partition leaders spread over all three, records produced through one
//! broker consumed through another, a controller that moves when its pod is
//! deleted; topics are created,
//! grown, repaired after drift and deleted through the finalizer; impossible
//! specs become conditions; the scale subresource works under the operator's
//! own ClusterRole; a config change rolls the brokers highest ordinal first,
//! and a new value of a dynamic broker config reaches every broker without
//! any pod restarting;
//! the shipped Deployment runs two operator
//! pods that fail over; a leader that loses its Lease stops;
//! `manifests/examples/kafkacluster-production.yaml` applied as written
//! gives 3 in-sync replicas to an auto-created topic and to a KafkaTopic
//! without a replication factor; a `KafkaRebalance` goes proposal →
//! approve → Ready and drains a broker; scaling 3 → 5 → 3 → 1 moves the
//! data onto the new brokers, drains them before their pods go, and refuses
//! to go below a topic's replication factor, while a group member reads
//! every record exactly once; a rolling restart under `acks=all` load waits
//! for every ISR and reports itself stalled, and a broker config the broker
//! would refuse is refused before any roll; a `KafkaRetentionPolicy` governs
//! the `retention.ms` of 20 topics (applications' and KafkaTopics'), a
//! topic created later, follows its changes (default, enforce, bounds),
//! undoes drift, and gives every topic its own value back when deleted.
//! Skipped with `MOLDAU_E2E=0`.

mod support;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, ResourceQuota, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use moldau_e2e::{ensure_pod_runner, kubectl_ok, paths, pod_is_ready, wait_for, TestNamespace};
use moldau_operator::crd::{
    find_condition, KafkaCluster, KafkaRebalance, KafkaRebalanceStatus, KafkaRetentionPolicy,
    KafkaRetentionPolicyStatus, KafkaTopic, RebalancePhase,
};
use moldau_operator::kafka::{AdminClient, ConfigOp};
use serde_json::json;

const LONG: Duration = Duration::from_secs(180);
const SHORT: Duration = Duration::from_secs(60);

fn enabled() -> bool {
    if !paths::e2e_enabled() {
        eprintln!("MOLDAU_E2E=0: skipping");
        return false;
    }
    true
}

fn apply_crds() -> Result<()> {
    moldau_e2e::apply_repo_crds()
}

fn pod_runner() -> Result<u32> {
    let runner = support::workspace_bin("moldau-e2e", "moldau-podrunner");
    let broker = support::workspace_bin("moldau-broker", "moldau-broker");
    let operator = PathBuf::from(env!("CARGO_BIN_EXE_moldau-operator"));
    // The runner is started once per test process: map every image any test uses.
    ensure_pod_runner(
        &runner,
        &[
            ("moldau/broker", broker.as_path()),
            ("moldau/operator", operator.as_path()),
        ],
    )
}

fn free_port() -> u16 {
    moldau_e2e::ports::unused_loopback_port()
}

/// A `moldau-operator` process; SIGTERM then kill on drop.
struct Operator {
    child: Child,
    http: SocketAddr,
    log: PathBuf,
}

impl Operator {
    /// Short lease timings (seconds): duration, renew deadline, retry period.
    const FAST_LEASE: [&'static str; 3] = ["6", "4", "1"];

    fn start(namespace: &str, identity: &str) -> Result<Operator> {
        Self::start_with(namespace, identity, &paths::kubeconfig(), Self::FAST_LEASE)
    }

    fn start_with(
        namespace: &str,
        identity: &str,
        kubeconfig: &Path,
        lease: [&str; 3],
    ) -> Result<Operator> {
        let http: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
        let logs = paths::state_dir().join("logs");
        std::fs::create_dir_all(&logs)?;
        let log = logs.join(format!("operator-{namespace}-{identity}.log"));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_moldau-operator"))
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,kube=warn,moldau_operator=debug")
            .args([
                "--namespace",
                namespace,
                "--watch-namespace",
                namespace,
                "--identity",
                identity,
            ])
            .args(["--http-listen", &http.to_string()])
            .args([
                "--topic-resync",
                "3",
                "--cluster-resync",
                "5",
                "--retry",
                "2",
                "--kafka-timeout",
                "5",
            ])
            .args([
                "--lease-duration",
                lease[0],
                "--lease-renew-deadline",
                lease[1],
            ])
            .args(["--lease-retry-period", lease[2]])
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .context("spawning moldau-operator")?;
        Ok(Operator { child, http, log })
    }

    fn terminate(&mut self) {
        // SAFETY: a plain signal to our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
    }

    async fn metrics(&self) -> Result<String> {
        let (code, body) = moldau_e2e::http("GET", self.http, "/metrics", b"").await?;
        anyhow::ensure!(code == 200, "/metrics answered {code}");
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.terminate();
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("operator log: {}", self.log.display());
    }
}

fn condition(conds: &[moldau_operator::crd::Condition], t: &str) -> Option<(String, String)> {
    find_condition(conds, t).map(|c| (c.status.clone(), c.reason.clone()))
}

async fn cluster_condition(
    api: &Api<KafkaCluster>,
    name: &str,
    t: &str,
    status: &str,
) -> Result<KafkaCluster> {
    let what = format!("KafkaCluster {name} {t}={status}");
    wait_for(LONG, &what, || async {
        let kc = api.get(name).await?;
        let ok = kc
            .status
            .as_ref()
            .and_then(|s| condition(&s.conditions, t))
            .is_some_and(|(s, _)| s == status)
            && kc.status.as_ref().and_then(|s| s.observed_generation) == kc.metadata.generation;
        Ok(ok.then_some(kc))
    })
    .await
}

async fn topic_where(
    api: &Api<KafkaTopic>,
    name: &str,
    what: &str,
    f: impl Fn(&KafkaTopic) -> bool,
) -> Result<KafkaTopic> {
    wait_for(LONG, what, || async {
        let kt = api.get(name).await?;
        Ok(f(&kt).then_some(kt))
    })
    .await
}

fn has_condition(kt: &KafkaTopic, t: &str, status: &str, reason: Option<&str>) -> bool {
    kt.status
        .as_ref()
        .and_then(|s| condition(&s.conditions, t))
        .is_some_and(|(s, r)| s == status && reason.is_none_or(|want| want == r))
}

/// Waits (up to [`SHORT`]) until object `name` exists, and returns it.
async fn wait_exists<K>(api: &Api<K>, name: &str) -> Result<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{} {name}", K::kind(&()));
    wait_for(SHORT, &what, || async { Ok(api.get_opt(name).await?) }).await
}

async fn broker_addr(pods: &Api<Pod>, name: &str) -> Result<SocketAddr> {
    let pod = pods.get(name).await?;
    let ip: IpAddr = pod
        .status
        .and_then(|s| s.pod_ip)
        .ok_or_else(|| anyhow!("pod {name} has no IP"))?
        .parse()?;
    anyhow::ensure!(ip.is_loopback(), "pod IP {ip} outside 127.0.0.0/8");
    Ok(SocketAddr::new(ip, 9092))
}

/// The pod address of each broker of cluster `cluster` (id = ordinal).
async fn broker_addrs(pods: &Api<Pod>, cluster: &str, n: i64) -> Result<BTreeMap<i64, SocketAddr>> {
    let mut addrs = BTreeMap::new();
    for id in 0..n {
        addrs.insert(id, broker_addr(pods, &format!("{cluster}-{id}")).await?);
    }
    Ok(addrs)
}

/// Waits (up to [`LONG`]) until KafkaCluster `name` has `n` Ready pods, all
/// `n` brokers registered with one controller and `Ready=True`
/// (`AllBrokersRegistered`) for its current generation.
async fn all_brokers_registered(
    api: &Api<KafkaCluster>,
    name: &str,
    n: i32,
) -> Result<KafkaCluster> {
    let ids: Vec<i32> = (0..n).collect();
    wait_for(LONG, &format!("{name}: {n} brokers registered"), || async {
        let kc = api.get(name).await?;
        let ok = kc.status.as_ref().is_some_and(|s| {
            s.observed_generation == kc.metadata.generation
                && s.ready_replicas == n
                && s.registered_brokers == ids
                && s.controller.is_some()
                && condition(&s.conditions, "Ready")
                    == Some(("True".into(), "AllBrokersRegistered".into()))
        });
        Ok(ok.then_some(kc))
    })
    .await
}

async fn events_with_reason(ns: &TestNamespace, reason: &str) -> Result<usize> {
    let events: Api<Event> = ns.api();
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .count())
}

fn topic(
    name: &str,
    cluster: &str,
    partitions: i32,
    rf: i32,
    config: serde_json::Value,
) -> Result<KafkaTopic> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaTopic",
        "metadata": {"name": name},
        "spec": {"clusterRef": cluster, "partitions": partitions, "replicationFactor": rf, "config": config},
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_and_topic_lifecycle() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    apply_crds()?;
    pod_runner()?;
    let ns = TestNamespace::new("op-e2e").await?;
    let _release = ReleaseTopics(ns.name.clone());
    let _op = Operator::start(&ns.name, "op-lifecycle")?;
    let clusters: Api<KafkaCluster> = ns.api();
    let topics: Api<KafkaTopic> = ns.api();
    let pods: Api<Pod> = ns.api();
    let pp = PostParams::default();

    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "demo"},
        "spec": {
            "replicas": 1,
            "image": "moldau/broker:e2e",
            "storage": {"size": "1Gi", "deleteClaim": true},
            "config": {"auto.create.topics.enable": "false"},
        },
    }))?;
    clusters.create(&pp, &kc).await?;

    // Children exist with the expected shape.
    let sts: Api<StatefulSet> = ns.api();
    let s = wait_for(SHORT, "StatefulSet demo", || async {
        Ok(sts.get_opt("demo").await?)
    })
    .await?;
    let spec = s.spec.clone().unwrap();
    assert_eq!(
        spec.update_strategy.unwrap().type_.as_deref(),
        Some("OnDelete")
    );
    assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
    // Every other child is waited for too: the operator applies them one
    // after another, and under load those after the StatefulSet (the PDB)
    // can still be missing when it appears.
    let svc: Api<Service> = ns.api();
    let headless = wait_exists(&svc, "demo-brokers").await?;
    assert_eq!(
        headless.spec.unwrap().publish_not_ready_addresses,
        Some(true)
    );
    wait_exists(&svc, "demo-bootstrap").await?;
    let cm: Api<ConfigMap> = ns.api();
    let props = wait_exists(&cm, "demo-config")
        .await?
        .data
        .unwrap_or_default();
    assert!(props["server.properties"].contains("auto.create.topics.enable=false"));
    wait_exists(&ns.api::<PodDisruptionBudget>(), "demo").await?;
    wait_exists(&ns.api::<ServiceAccount>(), "demo-broker").await?;
    let role = wait_exists(&ns.api::<Role>(), "demo-broker").await?;
    let rules = role.rules.unwrap_or_default();
    assert!(
        rules
            .iter()
            .any(|r| r.resource_names.as_deref() == Some(&["demo-controller".to_string()][..])),
        "{rules:?}"
    );
    assert!(
        rules.iter().all(|r| !r
            .resources
            .iter()
            .flatten()
            .any(|res| res == "configmaps" || res == "secrets")),
        "{rules:?}"
    );
    wait_exists(&ns.api::<RoleBinding>(), "demo-broker").await?;
    let env = s.spec.clone().unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default();
    assert!(env
        .iter()
        .any(|e| e.name == "MOLDAU_CLUSTER" && e.value.as_deref() == Some("kubernetes")));

    let kc = cluster_condition(&clusters, "demo", "Ready", "True").await?;
    let status = kc.status.unwrap();
    assert_eq!((status.replicas, status.ready_replicas), (1, 1));
    let ready = find_condition(&status.conditions, "Ready").unwrap();
    assert_eq!(ready.reason, "AllBrokersRegistered", "{ready:?}");
    assert_eq!(status.controller, Some(0));
    assert!(
        status.controller_epoch.is_some_and(|e| e >= 1),
        "{status:?}"
    );
    assert_eq!(status.registered_brokers, vec![0]);
    assert!(status.selector.unwrap().contains("moldau.io/cluster=demo"));
    assert_eq!(
        status.bootstrap_servers.as_deref(),
        Some(format!("demo-bootstrap.{}.svc:9092", ns.name).as_str())
    );
    assert!(events_with_reason(&ns, "ClusterCreated").await? >= 1);

    // A topic is created through the admin API on the broker's pod IP.
    topics
        .create(
            &pp,
            &topic("orders", "demo", 2, 1, json!({"retention.ms": "3600000"}))?,
        )
        .await?;
    let kt = topic_where(&topics, "orders", "topic orders Ready", |kt| {
        has_condition(kt, "Ready", "True", None)
    })
    .await?;
    let st = kt.status.unwrap();
    assert!(st.topic_id.is_some());
    assert_eq!(st.partitions, Some(2));
    assert_eq!(
        st.config.get("retention.ms").map(String::as_str),
        Some("3600000")
    );
    let mut admin =
        AdminClient::connect(broker_addr(&pods, "demo-0").await?, Duration::from_secs(10)).await?;
    let md = admin.metadata(Some(&["orders".to_string()])).await?;
    assert_eq!(md.topics[0].partitions, 2);

    // Drift behind the operator's back is repaired by the periodic resync.
    admin
        .alter_topic_config(
            "orders",
            &[ConfigOp::Set("retention.ms".into(), "1000".into())],
        )
        .await?;
    wait_for(SHORT, "retention.ms restored", || async {
        let mut a =
            AdminClient::connect(broker_addr(&pods, "demo-0").await?, Duration::from_secs(10))
                .await?;
        let entries = a.describe_topic_config("orders").await?;
        Ok(entries
            .iter()
            .any(|e| e.name == "retention.ms" && e.value.as_deref() == Some("3600000"))
            .then_some(()))
    })
    .await?;

    // Partitions grow.
    topics
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"partitions": 3}})),
        )
        .await?;
    topic_where(&topics, "orders", "orders with 3 partitions", |kt| {
        kt.status.as_ref().and_then(|s| s.partitions) == Some(3)
    })
    .await?;

    // Impossible specs become conditions, not crashes.
    topics
        .create(&pp, &topic("wide", "demo", 1, 3, json!({}))?)
        .await?;
    topics
        .create(&pp, &topic("orphan", "no-such-cluster", 1, 1, json!({}))?)
        .await?;
    topic_where(&topics, "wide", "wide Degraded", |kt| {
        has_condition(kt, "Degraded", "True", Some("ReplicationFactorTooHigh"))
    })
    .await?;
    topic_where(&topics, "orphan", "orphan ClusterNotFound", |kt| {
        has_condition(kt, "Degraded", "True", Some("ClusterNotFound"))
    })
    .await?;
    assert!(events_with_reason(&ns, "ReplicationFactorTooHigh").await? >= 1);

    // A second KafkaTopic naming the same Kafka topic is refused, and deleting
    // it leaves the topic alone.
    let mut dup = topic("orders-dup", "demo", 3, 1, json!({}))?;
    dup.spec.topic_name = Some("orders".into());
    topics.create(&pp, &dup).await?;
    topic_where(
        &topics,
        "orders-dup",
        "orders-dup TopicNameConflict",
        |kt| has_condition(kt, "Degraded", "True", Some("TopicNameConflict")),
    )
    .await?;
    topics
        .delete("orders-dup", &DeleteParams::default())
        .await?;
    wait_for(SHORT, "orders-dup gone", || async {
        Ok(topics.get_opt("orders-dup").await?.is_none().then_some(()))
    })
    .await?;
    let mut admin =
        AdminClient::connect(broker_addr(&pods, "demo-0").await?, Duration::from_secs(10)).await?;
    assert_eq!(
        admin
            .metadata(Some(&["orders".to_string()]))
            .await?
            .topics
            .len(),
        1
    );

    // deletionPolicy Retain: the KafkaTopic goes, the Kafka topic stays.
    let mut kept = topic("kept", "demo", 1, 1, json!({}))?;
    kept.spec.deletion_policy = moldau_operator::crd::DeletionPolicy::Retain;
    topics.create(&pp, &kept).await?;
    let kt = topic_where(&topics, "kept", "topic kept Ready", |kt| {
        has_condition(kt, "Ready", "True", None)
    })
    .await?;
    // its deletion has nothing to do: no finalizer to wait on
    assert!(
        kt.metadata
            .finalizers
            .as_deref()
            .unwrap_or_default()
            .is_empty(),
        "{:?}",
        kt.metadata.finalizers
    );
    topics.delete("kept", &DeleteParams::default()).await?;
    wait_for(SHORT, "KafkaTopic kept gone", || async {
        Ok(topics.get_opt("kept").await?.is_none().then_some(()))
    })
    .await?;
    let mut admin =
        AdminClient::connect(broker_addr(&pods, "demo-0").await?, Duration::from_secs(10)).await?;
    assert_eq!(
        admin
            .metadata(Some(&["kept".to_string()]))
            .await?
            .topics
            .len(),
        1
    );

    // A cluster whose config the operator must refuse: a condition, no StatefulSet.
    let bad: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "bad"},
        "spec": {"replicas": 1, "image": "moldau/broker:e2e", "storage": {"size": "1Gi"},
                 "config": {"listeners": "PLAINTEXT://0.0.0.0:1"}},
    }))?;
    clusters.create(&pp, &bad).await?;
    let kc = cluster_condition(&clusters, "bad", "Degraded", "True").await?;
    let reason = kc
        .status
        .and_then(|s| condition(&s.conditions, "Degraded"))
        .map(|(_, r)| r);
    assert_eq!(reason.as_deref(), Some("InvalidConfig"));
    assert!(sts.get_opt("bad").await?.is_none());

    // (Rolling restarts: `scale_then_roll_one_broker_at_a_time`.)

    // Deleting topics: Delete removes it from Kafka; an orphan is released.
    topics.delete("orders", &DeleteParams::default()).await?;
    topics.delete("orphan", &DeleteParams::default()).await?;
    topics.delete("wide", &DeleteParams::default()).await?;
    for name in ["orders", "orphan", "wide"] {
        wait_for(SHORT, &format!("KafkaTopic {name} gone"), || async {
            Ok(topics.get_opt(name).await?.is_none().then_some(()))
        })
        .await?;
    }
    let mut admin =
        AdminClient::connect(broker_addr(&pods, "demo-0").await?, Duration::from_secs(10)).await?;
    assert!(admin
        .metadata(Some(&["orders".to_string()]))
        .await?
        .topics
        .is_empty());

    let metrics = _op.metrics().await?;
    assert!(metrics.contains("moldau_operator_reconciliations_total{kind=\"KafkaCluster\"}"));
    assert!(metrics.contains("moldau_operator_reconciliations_total{kind=\"KafkaTopic\"}"));
    Ok(())
}

/// What a test sees of a rolling restart: the pods replaced (uid changed
/// from `original`), in order, and the most brokers unavailable at once.
struct RollWatch {
    original: BTreeMap<String, String>,
    order: Vec<String>,
    max_unavailable: usize,
}

impl RollWatch {
    fn new(original: BTreeMap<String, String>) -> Self {
        RollWatch {
            original,
            order: Vec::new(),
            max_unavailable: 0,
        }
    }

    /// Notes one listing of the cluster's pods; true once every pod was
    /// replaced and all are Ready again.
    fn observe(&mut self, pods: &[Pod]) -> bool {
        let ready = pods
            .iter()
            .filter(|p| pod_is_ready(p) && p.metadata.deletion_timestamp.is_none())
            .count();
        let expected = self.original.len();
        self.max_unavailable = self.max_unavailable.max(expected - ready.min(expected));
        for p in pods {
            let name = p.metadata.name.clone().unwrap_or_default();
            let uid = p.metadata.uid.clone().unwrap_or_default();
            if self.original.get(&name) != Some(&uid) && !self.order.contains(&name) {
                self.order.push(name);
            }
        }
        self.order.len() == expected && ready == expected
    }
}

/// Runs `kcat` (the Debian package) with `args`, killed after 30 s; its stdout.
async fn kcat(args: &[&str]) -> Result<String> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out =
            moldau_e2e::run_with_timeout(Command::new("kcat").args(&args), Duration::from_secs(30))
                .context("kcat (Debian package kcat)")?;
        anyhow::ensure!(
            out.status.success(),
            "kcat {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    })
    .await?
}

/// One broker's answer to `kcat -L -J`: its brokers (id to advertised
/// address), the controller id and, for `topic`, each partition.
struct KcatView {
    brokers: BTreeMap<i64, String>,
    controller: i64,
    partitions: BTreeMap<i64, KcatPartition>,
}

/// A partition as `kcat -L -J` lists it.
#[derive(Debug)]
struct KcatPartition {
    /// Leader broker id (-1: none).
    leader: i64,
    /// Size of the replica set.
    replicas: usize,
    /// Size of the ISR.
    isrs: usize,
}

async fn kcat_metadata(bootstrap: SocketAddr, topic: Option<&str>) -> Result<KcatView> {
    let bootstrap = bootstrap.to_string();
    let mut args = vec!["-L", "-J", "-m", "5", "-b", &bootstrap];
    if let Some(t) = topic {
        args.extend(["-t", t]);
    }
    let md: serde_json::Value = serde_json::from_str(&kcat(&args).await?)?;
    let brokers = md["brokers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| Some((b["id"].as_i64()?, b["name"].as_str()?.to_string())))
        .collect();
    let mut partitions = BTreeMap::new();
    for t in md["topics"].as_array().into_iter().flatten() {
        if topic.is_some_and(|want| t["topic"] == want) {
            for p in t["partitions"].as_array().into_iter().flatten() {
                partitions.insert(
                    p["partition"].as_i64().unwrap_or(-1),
                    KcatPartition {
                        leader: p["leader"].as_i64().unwrap_or(-1),
                        replicas: p["replicas"].as_array().map_or(0, Vec::len),
                        isrs: p["isrs"].as_array().map_or(0, Vec::len),
                    },
                );
            }
        }
    }
    Ok(KcatView {
        brokers,
        controller: md["controllerid"].as_i64().unwrap_or(-1),
        partitions,
    })
}

/// Issue #11 through the operator: a KafkaCluster of 3 is one Kafka cluster.
/// Every broker lists all three and the controller the status names; a
/// topic's 12 partitions are led by all three; a record to every partition
/// produced through one broker comes back consumed through another; a
/// replication factor of 3 is accepted; deleting the controller's pod (its
/// replacement held back by a ResourceQuota) moves the controller, at a
/// higher epoch, to another broker, and the replacement then registers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_brokers_are_one_kafka_cluster() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    let t0 = std::time::Instant::now();
    apply_crds()?;
    pod_runner()?;
    let ns = TestNamespace::new("op-three").await?;
    let _release = ReleaseTopics(ns.name.clone());
    let _op = Operator::start(&ns.name, "op-three")?;
    let clusters: Api<KafkaCluster> = ns.api();
    let topics: Api<KafkaTopic> = ns.api();
    let pods: Api<Pod> = ns.api();
    let pp = PostParams::default();

    // Short heartbeats, session and controller lease: a failover in seconds.
    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "trio"},
        "spec": {
            "replicas": 3,
            "image": "moldau/broker:e2e",
            "storage": {"size": "1Gi", "deleteClaim": true},
            "config": {
                "auto.create.topics.enable": "false",
                "broker.heartbeat.interval.ms": "200",
                "broker.session.timeout.ms": "6000",
                "controller.lease.duration.ms": "4000",
                "controller.lease.retry.ms": "500",
            },
        },
    }))?;
    clusters.create(&pp, &kc).await?;
    let kc = all_brokers_registered(&clusters, "trio", 3).await?;
    let status = kc.status.unwrap();
    let controller = status.controller.unwrap();
    let epoch = status.controller_epoch.unwrap_or(0);
    assert!((0..3).contains(&controller), "{status:?}");
    assert!(epoch >= 1, "{status:?}");
    eprintln!(
        "3 brokers registered with controller {controller} (epoch {epoch}) after {:?}",
        t0.elapsed()
    );

    // Every broker, asked on its own pod IP, lists all three (each at its
    // pod's address) and the controller the status reports.
    let addrs = broker_addrs(&pods, "trio", 3).await?;
    let advertised: BTreeMap<i64, String> =
        addrs.iter().map(|(id, a)| (*id, a.to_string())).collect();
    for (id, addr) in &addrs {
        let view = wait_for(SHORT, &format!("trio-{id} lists 3 brokers"), || async {
            let v = kcat_metadata(*addr, None).await?;
            Ok((v.brokers.len() == 3).then_some(v))
        })
        .await?;
        assert_eq!(view.brokers, advertised, "brokers as trio-{id} lists them");
        assert_eq!(
            view.controller,
            i64::from(controller),
            "controller as trio-{id} reports it"
        );
    }

    // 12 partitions, replication factor 1: led by all three brokers, 4 each,
    // and every broker says so.
    topics
        .create(&pp, &topic("spread", "trio", 12, 1, json!({}))?)
        .await?;
    topic_where(&topics, "spread", "topic spread Ready", |kt| {
        has_condition(kt, "Ready", "True", None)
    })
    .await?;
    let mut leaders: Option<BTreeMap<i64, i64>> = None;
    for (id, addr) in &addrs {
        let view = wait_for(SHORT, &format!("trio-{id}: spread led"), || async {
            let v = kcat_metadata(*addr, Some("spread")).await?;
            let led = v.partitions.len() == 12 && v.partitions.values().all(|p| p.leader >= 0);
            Ok(led.then_some(v))
        })
        .await?;
        let here: BTreeMap<i64, i64> = view
            .partitions
            .iter()
            .map(|(i, p)| (*i, p.leader))
            .collect();
        match &leaders {
            None => leaders = Some(here),
            Some(first) => assert_eq!(&here, first, "leaders as trio-{id} reports them"),
        }
    }
    let leaders = leaders.unwrap();
    let mut per_broker: BTreeMap<i64, usize> = BTreeMap::new();
    for l in leaders.values() {
        *per_broker.entry(*l).or_default() += 1;
    }
    assert_eq!(
        per_broker,
        BTreeMap::from([(0, 4), (1, 4), (2, 4)]),
        "leaders {leaders:?}"
    );

    // One record to each partition through trio-0, all consumed through
    // trio-1: kcat reaches every leader from one bootstrap address.
    let (producer, consumer) = (addrs[&0].to_string(), addrs[&1].to_string());
    let dir = tempfile::tempdir()?;
    for p in 0..12 {
        let file = dir.path().join(format!("r{p}"));
        std::fs::write(&file, format!("r{p}\n"))?;
        kcat(&[
            "-P",
            "-b",
            &producer,
            "-t",
            "spread",
            "-p",
            &p.to_string(),
            "-l",
            &file.to_string_lossy(),
        ])
        .await?;
    }
    let consumed = kcat(&[
        "-C",
        "-b",
        &consumer,
        "-t",
        "spread",
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%p %s\n",
    ])
    .await?;
    let mut got: Vec<String> = consumed.lines().map(str::to_string).collect();
    got.sort();
    let mut want: Vec<String> = (0..12).map(|p| format!("{p} r{p}")).collect();
    want.sort();
    assert_eq!(got, want, "one record back from every partition");

    // With three brokers registered a replication factor of 3 is accepted.
    topics
        .create(&pp, &topic("replicated", "trio", 3, 3, json!({}))?)
        .await?;
    topic_where(&topics, "replicated", "topic replicated Ready", |kt| {
        has_condition(kt, "Ready", "True", None)
    })
    .await?;
    let view = wait_for(SHORT, "replicated: 3 partitions", || async {
        let v = kcat_metadata(addrs[&2], Some("replicated")).await?;
        Ok((v.partitions.len() == 3).then_some(v))
    })
    .await?;
    assert!(
        view.partitions.values().all(|p| p.replicas == 3),
        "{:?}",
        view.partitions
    );
    eprintln!("topics checked after {:?}", t0.elapsed());

    // The controller's pod goes. Its replacement (same ordinal, same node id)
    // would start within a second and could win the released Lease itself,
    // so a ResourceQuota of 2 pods holds it back until another broker has
    // taken over at a higher epoch; then the replacement rejoins.
    let quotas: Api<ResourceQuota> = ns.api();
    let quota: ResourceQuota = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "hold-replacement"},
        "spec": {"hard": {"pods": "2"}},
    }))?;
    quotas.create(&pp, &quota).await?;
    wait_for(SHORT, "the pod quota in force", || async {
        let q = quotas.get("hold-replacement").await?;
        Ok(q.status
            .and_then(|s| s.used)
            .is_some_and(|used| used.contains_key("pods"))
            .then_some(()))
    })
    .await?;
    let deleted_at = std::time::Instant::now();
    pods.delete(&format!("trio-{controller}"), &DeleteParams::default())
        .await?;
    let (next, next_epoch) = wait_for(SHORT, "a new controller in the status", || async {
        let s = clusters.get("trio").await?.status.unwrap_or_default();
        Ok(match (s.controller, s.controller_epoch) {
            (Some(c), Some(e)) if c != controller && e > epoch => Some((c, e)),
            _ => None,
        })
    })
    .await?;
    eprintln!(
        "controller {controller} (epoch {epoch}) -> {next} (epoch {next_epoch}) {:?} after its pod's deletion",
        deleted_at.elapsed()
    );
    // The new controller's own broker shows itself as controller once its
    // session has re-registered (metadata propagates; clients retry).
    wait_for(
        SHORT,
        "the new controller in its broker's Metadata",
        || async {
            let view = kcat_metadata(addrs[&i64::from(next)], None).await?;
            Ok((view.controller == i64::from(next)).then_some(()))
        },
    )
    .await?;
    quotas
        .delete("hold-replacement", &DeleteParams::default())
        .await?;
    let kc = wait_for(LONG, "trio: the replacement registered again", || async {
        let kc = clusters.get("trio").await?;
        let ok = kc.status.as_ref().is_some_and(|s| {
            s.registered_brokers == vec![0, 1, 2]
                && condition(&s.conditions, "Ready")
                    == Some(("True".into(), "AllBrokersRegistered".into()))
        });
        Ok(ok.then_some(kc))
    })
    .await?;
    let status = kc.status.unwrap();
    assert_eq!(status.controller, Some(next), "{status:?}");
    assert!(
        status.controller_epoch.is_some_and(|e| e >= next_epoch),
        "{status:?}"
    );
    eprintln!(
        "all 3 registered again {:?} after the deletion",
        deleted_at.elapsed()
    );
    restart_and_crash_loop(&ns, &clusters, &pods, next).await?;
    eprintln!("total {:?}", t0.elapsed());
    Ok(())
}

/// The broker container's process id (the runner's `moldau://<pid>`
/// container id) and restart count in pod `name`.
async fn broker_container(pods: &Api<Pod>, name: &str) -> Result<(Option<i32>, i32)> {
    let pod = pods.get(name).await?;
    let status = pod
        .status
        .and_then(|s| s.container_statuses)
        .into_iter()
        .flatten()
        .find(|c| c.name == "broker")
        .ok_or_else(|| anyhow!("pod {name}: no broker container status"))?;
    let pid = status
        .container_id
        .as_deref()
        .and_then(|id| id.strip_prefix("moldau://"))
        .and_then(|pid| pid.parse().ok());
    Ok((pid, status.restart_count))
}

/// Issue 40 on the control plane, items 4 and 7, on the running trio
/// (`controller` its controller now):
///
/// - A broker's process killed (kill -9) and started again in its pod on
///   the same volume presents its data directory's succession token: the
///   controller replaces the old incarnation at once instead of waiting a
///   session timeout, and while the new process starts it never answers
///   as a cluster of its own (every Metadata it gives lists all three
///   brokers and the cluster's controller).
/// - Then its data directory's lock is held by another process (a stuck
///   process on a shared volume): the broker exits at every start and
///   crash-loops. The status says so — `Degraded=True BrokerCrashLooping`
///   with the container's last termination message (its log's tail, the
///   broker's `terminationMessagePolicy: FallbackToLogsOnError`), `Ready`
///   naming the broker, an Event — and clears once the broker is Ready.
async fn restart_and_crash_loop(
    ns: &TestNamespace,
    clusters: &Api<KafkaCluster>,
    pods: &Api<Pod>,
    controller: i32,
) -> Result<()> {
    let session = Duration::from_millis(6000);
    let victim: i64 = (0..3).find(|b| *b != i64::from(controller)).unwrap();
    let victim_pod = format!("trio-{victim}");
    // (a pod replaced earlier in the test has a new address)
    let victim_addr = broker_addr(pods, &victim_pod).await?;
    let (pid, restarts) = broker_container(pods, &victim_pod).await?;
    let pid = pid.context("the broker's process id")?;
    let killed_at = std::time::Instant::now();
    // SAFETY: kill(2) of the container's process group.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let foreign = std::sync::Mutex::new(Vec::new());
    let back = wait_for(SHORT, "the killed broker back in service", || {
        let (foreign, victim_pod) = (&foreign, &victim_pod);
        async move {
            let (_, now) = broker_container(pods, victim_pod).await?;
            let Ok(view) = kcat_metadata(victim_addr, None).await else {
                return Ok(None);
            };
            if view.brokers.len() != 3 || view.controller != i64::from(controller) {
                foreign.lock().unwrap().push(format!(
                    "brokers {:?}, controller {}",
                    view.brokers.keys().collect::<Vec<_>>(),
                    view.controller
                ));
            }
            Ok((now > restarts && view.brokers.len() == 3).then(|| killed_at.elapsed()))
        }
    })
    .await?;
    eprintln!("broker {victim} killed and restarted in its pod: serving again after {back:?}");
    let foreign = foreign.into_inner().unwrap();
    assert!(
        foreign.is_empty(),
        "the restarting broker answered Metadata other than the cluster's: {foreign:?}"
    );
    let controller_log = ns.kubectl_ok(&["logs", &format!("trio-{controller}")])?;
    assert!(
        controller_log.contains("replaces its previous incarnation at once"),
        "the controller replaced the old incarnation by its succession token"
    );
    assert!(
        back < session,
        "back after {back:?}: not sooner than the old incarnation's session ({session:?})"
    );
    let kc = clusters.get("trio").await?;
    let degraded = condition(&kc.status.unwrap_or_default().conditions, "Degraded");
    assert_ne!(
        degraded.map(|(_, r)| r).as_deref(),
        Some("BrokerCrashLooping"),
        "one restart is not a crash loop"
    );

    // Another process takes the data directory's lock the moment the
    // broker's process dies (a blocking flock, queued before the kill).
    let lock_path = ns.pvc_dir(&format!("data-{victim_pod}")).join(".lock");
    let holder = tokio::task::spawn_blocking(move || -> Result<std::fs::File> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new().write(true).open(&lock_path)?;
        // SAFETY: flock on a descriptor we own; blocks until the broker dies.
        anyhow::ensure!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0);
        Ok(f)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (pid, _) = broker_container(pods, &victim_pod).await?;
    // SAFETY: as above.
    unsafe { libc::kill(-pid.context("the broker's process id")?, libc::SIGKILL) };
    let lock = tokio::time::timeout(SHORT, holder).await???;
    let kc = wait_for(LONG, "Degraded=True BrokerCrashLooping", || async {
        let kc = clusters.get("trio").await?;
        let looping = kc.status.as_ref().is_some_and(|s| {
            condition(&s.conditions, "Degraded")
                == Some(("True".into(), "BrokerCrashLooping".into()))
        });
        Ok(looping.then_some(kc))
    })
    .await?;
    let conditions = kc.status.unwrap().conditions;
    let degraded = find_condition(&conditions, "Degraded").unwrap();
    assert!(
        degraded
            .message
            .contains(&format!("broker {victim} (pod {victim_pod})"))
            && degraded
                .message
                .contains("another process holds the data directory"),
        "Degraded names the broker and its last termination message: {}",
        degraded.message
    );
    let ready = find_condition(&conditions, "Ready").unwrap();
    assert_eq!(ready.status, "False", "{ready:?}");
    assert!(
        ready.message.contains(&format!("broker {victim}")),
        "Ready says which broker is missing: {}",
        ready.message
    );
    wait_for(SHORT, "a BrokerCrashLooping Event", || async {
        Ok((events_with_reason(ns, "BrokerCrashLooping").await? > 0).then_some(()))
    })
    .await?;

    // The lock let go: the broker starts at its next back-off and the
    // status recovers at once (Ready again ends the crash loop).
    drop(lock);
    all_brokers_registered(clusters, "trio", 3).await?;
    cluster_condition(clusters, "trio", "Degraded", "False").await?;
    Ok(())
}

/// Sets a label on the pod runner's Node for a test; removes it on drop.
struct NodeLabel(&'static str);

impl NodeLabel {
    fn set(key: &'static str, value: &str) -> Result<NodeLabel> {
        let label = format!("{key}={value}");
        kubectl_ok(&[
            "label",
            "node",
            moldau_e2e::NODE_NAME,
            &label,
            "--overwrite",
        ])?;
        Ok(NodeLabel(key))
    }
}

impl Drop for NodeLabel {
    fn drop(&mut self) {
        let unset = format!("{}-", self.0);
        let _ = moldau_e2e::kubectl(&["label", "node", moldau_e2e::NODE_NAME, &unset]);
    }
}

/// A broker's `/metrics` (Prometheus text).
async fn broker_metrics(broker: SocketAddr) -> Result<String> {
    let port = u16::try_from(moldau_operator::cluster::builders::BROKER_HTTP_PORT)?;
    let http = SocketAddr::new(broker.ip(), port);
    let (code, body) = moldau_e2e::http("GET", http, "/metrics", b"").await?;
    anyhow::ensure!(code == 200, "{http}/metrics answered {code}");
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The samples of metric `name` in a `/metrics` text: (labels, value),
/// labels as written between the braces (empty when there are none).
fn samples(metrics: &str, name: &str) -> Vec<(String, f64)> {
    metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            Some((labels.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Issue #12: `manifests/examples/kafkacluster-production.yaml`, applied
/// with `kubectl apply` as written (`default.replication.factor: 3`,
/// `min.insync.replicas: 2`), replicates every topic three times. A topic
/// a client auto-creates by producing to one broker (kcat, `acks=all`) and
/// a KafkaTopic without `replicationFactor` both get 3 replicas, all 3 in
/// the ISR, as another broker lists them (`kcat -L`); the KafkaTopic is
/// Ready, not Degraded, with replication factor 3 and `min.insync.replicas`
/// 2 in its status; records produced with `acks=all` come back through a
/// third broker; every follower reaches the leader's log end
/// (`moldau_follower_lag_offsets` 0) and no broker reports an
/// under-replicated, under-min-ISR or offline partition (the metrics the
/// chart's alerts use).
///
/// Only what the test environment forces is adapted: the manifest names no
/// namespace and goes into the test's; its `nodeSelector`
/// (`node-role/kafka: "true"`) needs that label on the pod runner's one
/// Node, set for the test and removed after. Everything else holds as
/// written: the runner maps `moldau/broker:0.1.0` to the built broker by
/// image name, binds the `fast-ssd` claims of 100Gi to its hostPath volumes
/// (it provisions claims of any class), does not enforce resources (the
/// 2-CPU requests fit its Node), ignores the `dedicated` toleration, and the
/// zone spread of `rackTopologyKey` is `ScheduleAnyway`. The cluster runs
/// with the broker's default heartbeat, session and lease timings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn production_example_replicates_every_topic_three_times() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    let t0 = std::time::Instant::now();
    apply_crds()?;
    pod_runner()?;
    let _node_label = NodeLabel::set("node-role/kafka", "true")?;
    let ns = TestNamespace::new("op-prod").await?;
    let _release = ReleaseTopics(ns.name.clone());
    let _op = Operator::start(&ns.name, "op-prod")?;
    let clusters: Api<KafkaCluster> = ns.api();
    let topics: Api<KafkaTopic> = ns.api();
    let pods: Api<Pod> = ns.api();

    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests/examples/kafkacluster-production.yaml");
    let applied = std::time::Instant::now();
    ns.kubectl_ok(&["apply", "-f", &manifest.to_string_lossy()])?;
    let kc = all_brokers_registered(&clusters, "prod", 3).await?;
    assert_eq!(
        kc.spec
            .config
            .get("default.replication.factor")
            .map(String::as_str),
        Some("3")
    );
    eprintln!(
        "prod: 3 brokers registered {:?} after kubectl apply ({:?} after the test's start)",
        applied.elapsed(),
        t0.elapsed()
    );
    let addrs = broker_addrs(&pods, "prod", 3).await?;
    let dir = tempfile::tempdir()?;
    let records = dir.path().join("records");
    std::fs::write(&records, "r0\nr1\nr2\n")?;
    let records = records.to_string_lossy().into_owned();

    // A client's auto-created topic: kcat produces to a topic nobody
    // created, through prod-0 only.
    let t = std::time::Instant::now();
    let producer = addrs[&0].to_string();
    kcat(&[
        "-P",
        "-b",
        &producer,
        "-t",
        "auto-events",
        "-X",
        "acks=all",
        "-l",
        &records,
    ])
    .await?;
    eprintln!(
        "auto-events: kcat created it and produced (acks=all) in {:?}",
        t.elapsed()
    );

    // A KafkaTopic without a replication factor.
    let kt: KafkaTopic = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaTopic",
        "metadata": {"name": "payments"},
        "spec": {"clusterRef": "prod", "partitions": 3},
    }))?;
    assert_eq!(kt.spec.replication_factor, None);
    topics.create(&PostParams::default(), &kt).await?;
    let kt = topic_where(&topics, "payments", "payments Ready", |kt| {
        has_condition(kt, "Ready", "True", None)
    })
    .await?;
    assert!(
        !has_condition(&kt, "Degraded", "True", None),
        "{:?}",
        kt.status
    );
    let st = kt.status.unwrap();
    assert_eq!(st.replication_factor, Some(3), "{st:?}");
    assert_eq!(st.partitions, Some(3), "{st:?}");
    assert_eq!(
        st.config.get("min.insync.replicas").map(String::as_str),
        Some("2"),
        "{st:?}"
    );
    kcat(&[
        "-P", "-b", &producer, "-t", "payments", "-X", "acks=all", "-l", &records,
    ])
    .await?;

    // Both: every partition has 3 replicas, and once the followers caught
    // up all 3 are in the ISR, as prod-1 lists them.
    for (topic, partitions) in [("auto-events", 1), ("payments", 3)] {
        let t = std::time::Instant::now();
        let view = wait_for(SHORT, &format!("{topic}: 3 in-sync replicas"), || async {
            let v = kcat_metadata(addrs[&1], Some(topic)).await?;
            let synced = v.partitions.len() == partitions
                && v.partitions
                    .values()
                    .all(|p| p.leader >= 0 && p.replicas == 3 && p.isrs == 3);
            Ok(synced.then_some(v))
        })
        .await?;
        eprintln!("{topic}: {:?} ({:?} waiting)", view.partitions, t.elapsed());
        // What was acknowledged comes back through prod-2.
        let consumed = kcat(&[
            "-C",
            "-b",
            &addrs[&2].to_string(),
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
        ])
        .await?;
        let mut got: Vec<&str> = consumed.lines().collect();
        got.sort();
        assert_eq!(got, ["r0", "r1", "r2"], "{topic} consumed");
    }

    // The brokers' metrics agree: every follower of the 4 partitions has
    // fetched the leader's log end (lag 0, 2 followers each), and nothing
    // is under-replicated, under min.insync.replicas or offline.
    wait_for(
        SHORT,
        "followers caught up, nothing under-replicated",
        || async {
            let (mut caught_up, mut led) = (0, 0.0);
            for addr in addrs.values() {
                let m = broker_metrics(*addr).await?;
                for metric in [
                    "moldau_under_replicated_partitions",
                    "moldau_under_min_isr_partitions",
                    "moldau_offline_partitions",
                ] {
                    if samples(&m, metric) != [(String::new(), 0.0)] {
                        return Ok(None);
                    }
                }
                led += samples(&m, "moldau_leader_count")
                    .first()
                    .map_or(0.0, |s| s.1);
                caught_up += samples(&m, "moldau_follower_lag_offsets")
                    .iter()
                    .filter(|(labels, lag)| {
                        *lag == 0.0
                            && (labels.contains("topic=\"auto-events\"")
                                || labels.contains("topic=\"payments\""))
                    })
                    .count();
            }
            Ok((caught_up == 8 && led >= 4.0).then_some(()))
        },
    )
    .await?;
    eprintln!(
        "both topics in sync {:?} after kubectl apply; total {:?}",
        applied.elapsed(),
        t0.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_fails_over() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    apply_crds()?;
    let ns = TestNamespace::new("op-lease").await?;
    let leases: Api<Lease> = ns.api();
    let holder = || async {
        Ok::<_, anyhow::Error>(
            leases
                .get_opt("moldau-operator")
                .await?
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity),
        )
    };
    // A long lease: a takeover well within it can only come from the release.
    let lease = ["30", "20", "1"];
    let mut a = Operator::start_with(&ns.name, "op-a", &paths::kubeconfig(), lease)?;
    wait_for(SHORT, "op-a leads", || async {
        Ok((holder().await?.as_deref() == Some("op-a")).then_some(()))
    })
    .await?;
    let b = Operator::start_with(&ns.name, "op-b", &paths::kubeconfig(), lease)?;
    wait_for(SHORT, "op-b serving", || async {
        Ok(b.metrics().await.ok().map(|_| ()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(holder().await?.as_deref(), Some("op-a"));
    assert!(a.metrics().await?.contains("moldau_operator_leader 1"));
    assert!(b.metrics().await?.contains("moldau_operator_leader 0"));

    // SIGTERM: op-a releases the Lease and exits cleanly; op-b takes over well
    // before the lease duration would have expired it.
    let t = std::time::Instant::now();
    a.terminate();
    let deadline = std::time::Instant::now() + SHORT;
    let status = loop {
        if let Some(status) = a.child.try_wait()? {
            break status;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "op-a did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "op-a exited with {status}");
    wait_for(SHORT, "op-b leads", || async {
        Ok((holder().await?.as_deref() == Some("op-b")).then_some(()))
    })
    .await?;
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "takeover took {:?}",
        t.elapsed()
    );
    wait_for(SHORT, "op-b leader metric", || async {
        Ok(b.metrics()
            .await?
            .contains("moldau_operator_leader 1")
            .then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_stops_when_it_loses_the_lease() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    apply_crds()?;
    let ns = TestNamespace::new("op-steal").await?;
    let leases: Api<Lease> = ns.api();
    let mut op = Operator::start(&ns.name, "op-x")?;
    wait_for(SHORT, "op-x leads", || async {
        let holder = leases
            .get_opt("moldau-operator")
            .await?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity);
        Ok((holder.as_deref() == Some("op-x")).then_some(()))
    })
    .await?;
    // Someone else takes the Lease (as after a partition): op-x must stop at
    // its next renewal instead of reconciling on.
    let now = serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ))?;
    leases
        .patch(
            "moldau-operator",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "intruder", "renewTime": now, "leaseDurationSeconds": 60}})),
        )
        .await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = op.child.try_wait()? {
            break status;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "op-x kept running after losing the lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        !status.success(),
        "losing leadership must exit non-zero, got {status}"
    );
    let holder = leases
        .get("moldau-operator")
        .await?
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(
        holder.as_deref(),
        Some("intruder"),
        "the deposed leader must not overwrite the Lease"
    );
    Ok(())
}

/// Removes the finalizers of every KafkaTopic in a namespace on drop, so a
/// failed test (whose operator is gone) cannot leave its namespace stuck in
/// Terminating. Declare it after the `TestNamespace` so it drops first.
struct ReleaseTopics(String);

impl Drop for ReleaseTopics {
    fn drop(&mut self) {
        // and the other kinds with finalizers that need a broker
        let Ok(names) = moldau_e2e::kubectl_ok(&[
            "-n",
            &self.0,
            "get",
            "kafkatopics,kafkaretentionpolicies",
            "-o",
            "name",
        ]) else {
            return;
        };
        for name in names.lines().filter(|l| !l.is_empty()) {
            let _ = moldau_e2e::kubectl(&[
                "-n",
                &self.0,
                "patch",
                name,
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ]);
        }
    }
}

/// Deletes a cluster-scoped object on drop.
struct ClusterScoped(&'static str, String);

impl Drop for ClusterScoped {
    fn drop(&mut self) {
        let _ = moldau_e2e::kubectl(&["delete", self.0, &self.1, "--wait=false"]);
    }
}

/// A kubeconfig for the admin's server and CA, authenticated with `token`.
fn kubeconfig_with_token(token: &str, out: &Path) -> Result<()> {
    let text = std::fs::read_to_string(paths::kubeconfig())?;
    let mut kc: serde_yaml::Value = serde_yaml::from_str(&text)?;
    let users = kc
        .get_mut("users")
        .and_then(|u| u.as_sequence_mut())
        .ok_or_else(|| anyhow!("kubeconfig has no users"))?;
    for user in users.iter_mut() {
        user["user"] = serde_yaml::to_value(BTreeMap::from([("token", token.trim())]))?;
    }
    std::fs::write(out, serde_yaml::to_string(&kc)?)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_runs_with_only_its_clusterrole() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    apply_crds()?;
    pod_runner()?;
    let ns = TestNamespace::new("op-rbac").await?;
    let _release = ReleaseTopics(ns.name.clone());
    let role = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/clusterrole.yaml");
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &role.to_string_lossy(),
    ])?;
    ns.kubectl_ok(&["create", "serviceaccount", "moldau-operator"])?;
    let binding = format!("moldau-operator-{}", ns.name);
    let _binding = ClusterScoped("clusterrolebinding", binding.clone());
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=moldau-operator",
        &format!("--serviceaccount={}:moldau-operator", ns.name),
    ])?;
    let token = ns.kubectl_ok(&["create", "token", "moldau-operator", "--duration=1h"])?;
    let kubeconfig = paths::state_dir().join(format!("{}.kubeconfig", ns.name));
    kubeconfig_with_token(&token, &kubeconfig)?;
    let op = Operator::start_with(&ns.name, "op-rbac", &kubeconfig, Operator::FAST_LEASE)?;

    let clusters: Api<KafkaCluster> = ns.api();
    let topics: Api<KafkaTopic> = ns.api();
    let pp = PostParams::default();
    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "rb"},
        "spec": {"replicas": 1, "image": "moldau/broker:e2e", "storage": {"size": "1Gi", "deleteClaim": true}},
    }))?;
    clusters.create(&pp, &kc).await?;
    cluster_condition(&clusters, "rb", "Ready", "True").await?;

    // The scale subresource drives spec.replicas and reports status.replicas
    // and the pod selector.
    ns.kubectl_ok(&["scale", "kafkacluster/rb", "--replicas=2"])?;
    // Ready again only when both brokers are registered with one controller.
    let kc = wait_for(LONG, "rb scaled to 2 registered brokers", || async {
        let kc = clusters.get("rb").await?;
        let ok = kc.status.as_ref().is_some_and(|s| {
            s.ready_replicas == 2
                && s.registered_brokers == vec![0, 1]
                && condition(&s.conditions, "Ready")
                    == Some(("True".into(), "AllBrokersRegistered".into()))
        });
        Ok(ok.then_some(kc))
    })
    .await?;
    let status = kc.status.unwrap();
    assert!(
        status.controller.is_some_and(|c| c == 0 || c == 1),
        "{status:?}"
    );
    assert!(status.controller_epoch.is_some(), "{status:?}");
    let scale = ns.kubectl_ok(&[
        "get",
        "--raw",
        &format!(
            "/apis/moldau.io/v1alpha1/namespaces/{}/kafkaclusters/rb/scale",
            ns.name
        ),
    ])?;
    let scale: serde_json::Value = serde_json::from_str(&scale)?;
    assert_eq!(scale["spec"]["replicas"], 2);
    assert_eq!(scale["status"]["replicas"], 2);
    assert!(scale["status"]["selector"]
        .as_str()
        .unwrap_or_default()
        .contains("moldau.io/cluster=rb"));
    assert!(events_with_reason(&ns, "ClusterScaled").await? >= 1);
    // The replication factor is checked against the registered brokers
    // (two), not against one broker's view of itself.
    topics
        .create(&pp, &topic("wide", "rb", 1, 3, json!({}))?)
        .await?;
    topic_where(
        &topics,
        "wide",
        "topic wide refused: RF 3 > 2 brokers",
        |kt| has_condition(kt, "Degraded", "True", Some("ReplicationFactorTooHigh")),
    )
    .await?;
    let kt = topics.get("wide").await?;
    let degraded = find_condition(&kt.status.unwrap().conditions, "Degraded")
        .unwrap()
        .clone();
    assert!(degraded.message.contains("has 2"), "{degraded:?}");
    topics.delete("wide", &DeleteParams::default()).await?;
    topics
        .create(&pp, &topic("events", "rb", 1, 1, json!({}))?)
        .await?;
    topic_where(&topics, "events", "topic events Ready", |kt| {
        has_condition(kt, "Ready", "True", None)
    })
    .await?;
    topics.delete("events", &DeleteParams::default()).await?;
    wait_for(SHORT, "KafkaTopic events gone", || async {
        Ok(topics.get_opt("events").await?.is_none().then_some(()))
    })
    .await?;
    assert!(events_with_reason(&ns, "TopicDeleted").await? >= 1);
    let log = std::fs::read_to_string(&op.log)?;
    assert!(
        !log.contains("forbidden"),
        "the operator hit a permission error; see {}",
        op.log.display()
    );
    let _ = std::fs::remove_file(&kubeconfig);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_then_roll_one_broker_at_a_time() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    apply_crds()?;
    pod_runner()?;
    let ns = TestNamespace::new("op-roll").await?;
    let _op = Operator::start(&ns.name, "op-roll")?;
    let clusters: Api<KafkaCluster> = ns.api();
    let pods: Api<Pod> = ns.api();
    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "roll"},
        "spec": {"replicas": 2, "image": "moldau/broker:e2e", "storage": {"size": "1Gi", "deleteClaim": true}},
    }))?;
    clusters.create(&PostParams::default(), &kc).await?;
    cluster_condition(&clusters, "roll", "Ready", "True").await?;

    // The scale subresource drives spec.replicas.
    ns.kubectl_ok(&["scale", "kafkacluster/roll", "--replicas=3"])?;
    let kc = cluster_condition(&clusters, "roll", "Ready", "True").await?;
    assert_eq!(kc.spec.replicas, 3);
    assert_eq!(kc.status.as_ref().map(|s| s.ready_replicas), Some(3));
    let scale = ns.kubectl_ok(&[
        "get",
        "--raw",
        &format!(
            "/apis/moldau.io/v1alpha1/namespaces/{}/kafkaclusters/roll/scale",
            ns.name
        ),
    ])?;
    let scale: serde_json::Value = serde_json::from_str(&scale)?;
    assert_eq!(scale["status"]["replicas"], 3);
    assert!(scale["status"]["selector"]
        .as_str()
        .unwrap_or_default()
        .contains("moldau.io/cluster=roll"));
    assert!(events_with_reason(&ns, "ClusterScaled").await? >= 1);

    // A config change: pods are replaced highest ordinal first, one at a time.
    let uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
    let list = pods
        .list(&ListParams::default().labels("moldau.io/cluster=roll"))
        .await?;
    let original: BTreeMap<String, String> = list
        .items
        .iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), uid(p)))
        .collect();
    clusters
        .patch(
            "roll",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"log.retention.ms": "7200000"}}})),
        )
        .await?;
    let mut watch = RollWatch::new(original);
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let list = pods
            .list(&ListParams::default().labels("moldau.io/cluster=roll"))
            .await?;
        if watch.observe(&list.items) {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "rolling restart incomplete: replaced {:?}",
            watch.order
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(watch.order, vec!["roll-2", "roll-1", "roll-0"]);
    assert!(
        watch.max_unavailable <= 1,
        "{} brokers were unavailable at once",
        watch.max_unavailable
    );
    cluster_condition(&clusters, "roll", "Ready", "True").await?;
    assert!(events_with_reason(&ns, "RollingRestart").await? >= 1);

    // A new value of a dynamic broker config: no pod is replaced, every
    // broker takes it at run time (DescribeConfigs of each broker shows it
    // as the cluster-wide dynamic default).
    let list = pods
        .list(&ListParams::default().labels("moldau.io/cluster=roll"))
        .await?;
    let before: BTreeMap<String, (String, Option<String>)> = list
        .items
        .iter()
        .map(|p| {
            let started = p
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0.to_string());
            (
                p.metadata.name.clone().unwrap_or_default(),
                (uid(p), started),
            )
        })
        .collect();
    assert_eq!(before.len(), 3);
    clusters
        .patch(
            "roll",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"log.retention.ms": "3600000"}}})),
        )
        .await?;
    let addrs = broker_addrs(&pods, "roll", 3).await?;
    wait_for(LONG, "every broker with the new default", || async {
        for addr in addrs.values() {
            let mut admin = AdminClient::connect(*addr, Duration::from_secs(10)).await?;
            let defaults = admin.describe_broker_defaults().await?;
            if defaults.get("log.retention.ms").map(String::as_str) != Some("3600000") {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;
    event_seen(&ns, "DynamicConfigUpdated").await?;
    // what the roll above took, and more: nothing is restarted
    tokio::time::sleep(Duration::from_secs(5)).await;
    let list = pods
        .list(&ListParams::default().labels("moldau.io/cluster=roll"))
        .await?;
    for p in &list.items {
        let name = p.metadata.name.clone().unwrap_or_default();
        let started = p
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.to_string());
        assert_eq!(
            before.get(&name),
            Some(&(uid(p), started)),
            "{name} was replaced or restarted for a dynamic config"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_deployment_fails_over_between_pods() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    apply_crds()?;
    pod_runner()?;
    let ns = TestNamespace::new("op-deploy").await?;
    let _release = ReleaseTopics(ns.name.clone());
    let deploy_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    kubectl_ok(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &deploy_dir.join("clusterrole.yaml").to_string_lossy(),
    ])?;
    let binding = format!("moldau-operator-{}", ns.name);
    let _binding = ClusterScoped("clusterrolebinding", binding.clone());
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=moldau-operator",
        &format!("--serviceaccount={}:moldau-operator", ns.name),
    ])?;

    // operator.yaml as shipped, confined to this namespace (the control plane
    // is shared with other tests) and with short lease timings.
    let text = std::fs::read_to_string(deploy_dir.join("operator.yaml"))?;
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(serde::Deserialize::deserialize)
        .collect::<std::result::Result<_, _>>()?;
    let sa: ServiceAccount = serde_yaml::from_value(docs[0].clone())?;
    ns.api::<ServiceAccount>()
        .create(&PostParams::default(), &sa)
        .await?;
    let mut deployment: k8s_openapi::api::apps::v1::Deployment =
        serde_yaml::from_value(docs[1].clone())?;
    let container = &mut deployment
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0];
    let env = container.env.get_or_insert_with(Vec::new);
    for (k, v) in [
        ("MOLDAU_WATCH_NAMESPACE", ns.name.as_str()),
        ("MOLDAU_LEASE_DURATION", "6"),
        ("MOLDAU_LEASE_RENEW_DEADLINE", "4"),
        ("MOLDAU_LEASE_RETRY_PERIOD", "1"),
        ("MOLDAU_RETRY", "2"),
        ("RUST_LOG", "info,kube=warn"),
    ] {
        env.push(k8s_openapi::api::core::v1::EnvVar {
            name: k.into(),
            value: Some(v.into()),
            ..Default::default()
        });
    }
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = ns.api();
    deployments
        .create(&PostParams::default(), &deployment)
        .await?;

    let pods: Api<Pod> = ns.api();
    let leases: Api<Lease> = ns.api();
    let operator_pods = ListParams::default().labels("app.kubernetes.io/name=moldau-operator");
    wait_for(LONG, "two Ready operator pods", || async {
        let list = pods.list(&operator_pods).await?;
        Ok((list.items.iter().filter(|p| pod_is_ready(p)).count() == 2).then_some(()))
    })
    .await?;
    let holder = || async {
        Ok::<_, anyhow::Error>(
            leases
                .get_opt("moldau-operator")
                .await?
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity),
        )
    };
    let leader = wait_for(SHORT, "an operator pod leads", || async { holder().await }).await?;
    let names: Vec<String> = pods
        .list(&operator_pods)
        .await?
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert!(
        names.contains(&leader),
        "lease holder {leader} is not one of {names:?}"
    );

    // The leader pod reconciles a cluster.
    let clusters: Api<KafkaCluster> = ns.api();
    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "dep"},
        "spec": {"replicas": 1, "image": "moldau/broker:e2e", "storage": {"size": "1Gi", "deleteClaim": true}},
    }))?;
    clusters.create(&PostParams::default(), &kc).await?;
    cluster_condition(&clusters, "dep", "Ready", "True").await?;

    // Deleting the leader pod hands the Lease to the other one, which goes on
    // reconciling.
    pods.delete(&leader, &DeleteParams::default()).await?;
    let new_leader = wait_for(SHORT, "a new leader", || async {
        Ok(holder().await?.filter(|h| *h != leader))
    })
    .await?;
    // The standby or the leader's replacement pod: either way a live replica.
    let live: Vec<String> = pods
        .list(&operator_pods)
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert!(
        live.contains(&new_leader),
        "new holder {new_leader} is not one of the live pods {live:?}"
    );
    let topics: Api<KafkaTopic> = ns.api();
    topics
        .create(
            &PostParams::default(),
            &topic("after-failover", "dep", 1, 1, json!({}))?,
        )
        .await?;
    topic_where(
        &topics,
        "after-failover",
        "topic Ready after failover",
        |kt| has_condition(kt, "Ready", "True", None),
    )
    .await?;
    // Release the finalizer while an operator still runs.
    topics
        .delete("after-failover", &DeleteParams::default())
        .await?;
    wait_for(SHORT, "topic gone", || async {
        Ok(topics
            .get_opt("after-failover")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_enforces_the_crd_validation() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    apply_crds()?;
    let ns = TestNamespace::new("op-crd").await?;
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/examples");
    for entry in std::fs::read_dir(&examples)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("yaml") {
            ns.kubectl_ok(&["apply", "--dry-run=server", "-f", &path.to_string_lossy()])
                .with_context(|| format!("{} must be accepted", path.display()))?;
        }
    }
    for entry in std::fs::read_dir(examples.join("invalid"))? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("yaml") {
            let out = ns.kubectl(&["apply", "--dry-run=server", "-f", &path.to_string_lossy()])?;
            assert!(!out.status.success(), "{} was accepted", path.display());
        }
    }

    // Transition rules need an existing object.
    let topics: Api<KafkaTopic> = ns.api();
    topics
        .create(&PostParams::default(), &topic("t", "c", 3, 1, json!({}))?)
        .await?;
    let clusters: Api<KafkaCluster> = ns.api();
    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "c"},
        "spec": {"replicas": 1, "image": "i", "storage": {"size": "1Gi"}},
    }))?;
    clusters.create(&PostParams::default(), &kc).await?;
    let pp = PatchParams::default();
    let rejected = [
        ("partitions decrease", json!({"spec": {"partitions": 2}})),
        (
            "clusterRef change",
            json!({"spec": {"clusterRef": "other"}}),
        ),
        ("topicName added", json!({"spec": {"topicName": "x"}})),
    ];
    for (what, patch) in rejected {
        let err = topics.patch("t", &pp, &Patch::Merge(&patch)).await;
        assert!(err.is_err(), "{what} was accepted");
    }
    topics
        .patch("t", &pp, &Patch::Merge(json!({"spec": {"partitions": 4}})))
        .await?;
    for (what, patch) in [
        (
            "storage size change",
            json!({"spec": {"storage": {"size": "2Gi"}}}),
        ),
        (
            "storage class added",
            json!({"spec": {"storage": {"storageClassName": "fast"}}}),
        ),
    ] {
        let err = clusters.patch("c", &pp, &Patch::Merge(&patch)).await;
        assert!(err.is_err(), "{what} was accepted");
    }
    clusters
        .patch("c", &pp, &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await?;
    // No operator runs here: drop the finalizer-free objects with the namespace.
    Ok(())
}

/// The phase of KafkaRebalance `name` once `ok` holds for its status.
async fn policy_where(
    api: &Api<KafkaRetentionPolicy>,
    name: &str,
    what: &str,
    f: impl Fn(&KafkaRetentionPolicyStatus) -> bool,
) -> Result<KafkaRetentionPolicyStatus> {
    wait_for(LONG, what, || async {
        let kp = api.get(name).await?;
        Ok(kp.status.filter(|s| f(s)))
    })
    .await
}

/// `retention.ms` of `topics` as the broker reports their overrides
/// (absent: no override, the broker default).
async fn retention_of(
    addr: SocketAddr,
    topics: &[String],
) -> Result<BTreeMap<String, Option<String>>> {
    let mut admin = AdminClient::connect(addr, Duration::from_secs(10)).await?;
    let overrides = admin.describe_topics_overrides(topics).await?;
    Ok(topics
        .iter()
        .map(|t| {
            let v = overrides
                .get(t)
                .and_then(|o| o.get("retention.ms"))
                .cloned();
            (t.clone(), v)
        })
        .collect())
}

/// Waits until every topic's `retention.ms` override is `want(topic)`.
async fn retention_becomes(
    addr: SocketAddr,
    topics: &[String],
    what: &str,
    want: impl Fn(&str) -> Option<String>,
) -> Result<()> {
    let last = std::sync::Mutex::new(BTreeMap::new());
    let outcome = wait_for(LONG, what, || async {
        let got = retention_of(addr, topics).await?;
        let ok = got.iter().all(|(t, v)| *v == want(t));
        *last.lock().unwrap() = got;
        Ok(ok.then_some(()))
    })
    .await;
    outcome.with_context(|| format!("last seen: {:?}", last.lock().unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_policy_governs_every_matching_topic() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    apply_crds()?;
    pod_runner()?;
    let ns = TestNamespace::new("op-retention").await?;
    let _release = ReleaseTopics(ns.name.clone());
    let _op = Operator::start(&ns.name, "op-retention")?;
    let clusters: Api<KafkaCluster> = ns.api();
    let topics: Api<KafkaTopic> = ns.api();
    let policies: Api<KafkaRetentionPolicy> = ns.api();
    let pods: Api<Pod> = ns.api();
    let configmaps: Api<ConfigMap> = ns.api();
    let pp = PostParams::default();

    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "pol"},
        "spec": {
            "replicas": 1,
            "image": "moldau/broker:e2e",
            "storage": {"size": "1Gi", "deleteClaim": true},
            "config": {"auto.create.topics.enable": "false"},
        },
    }))?;
    clusters.create(&pp, &kc).await?;
    all_brokers_registered(&clusters, "pol", 1).await?;
    let addr = broker_addr(&pods, "pol-0").await?;

    // 18 topics created by applications (one with its own retention), two
    // KafkaTopics (one with its own), and one topic no selector matches
    let mut admin = AdminClient::connect(addr, Duration::from_secs(10)).await?;
    let own = |v: &str| BTreeMap::from([("retention.ms".to_string(), v.to_string())]);
    for i in 0..18 {
        let config = if i == 0 { own("1000") } else { BTreeMap::new() };
        admin
            .create_topic(&format!("logs-{i}"), 1, 1, &config)
            .await?;
    }
    admin.create_topic("orders", 1, 1, &BTreeMap::new()).await?;
    let mut kt_a = topic("logs-kt-a", "pol", 1, 1, json!({}))?;
    kt_a.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
    topics.create(&pp, &kt_a).await?;
    topics
        .create(
            &pp,
            &topic("logs-kt-b", "pol", 1, 1, json!({"retention.ms": "7200000"}))?,
        )
        .await?;
    for name in ["logs-kt-a", "logs-kt-b"] {
        topic_where(&topics, name, "KafkaTopic Ready", |kt| {
            has_condition(kt, "Ready", "True", None)
        })
        .await?;
    }
    let mut matched: Vec<String> = (0..18).map(|i| format!("logs-{i}")).collect();
    matched.extend(["logs-kt-a".to_string(), "logs-kt-b".to_string()]);

    // mode default: fills in where the topic sets nothing itself
    let week = "604800000";
    let policy: KafkaRetentionPolicy = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaRetentionPolicy",
        "metadata": {"name": "logs"},
        "spec": {"clusterRef": "pol", "selector": {"topicNames": ["logs-*"]},
                 "config": {"retention.ms": week}},
    }))?;
    policies.create(&pp, &policy).await?;
    let own_or = |fallback: &'static str| {
        move |t: &str| match t {
            "logs-0" => Some("1000".to_string()),
            "logs-kt-b" => Some("7200000".to_string()),
            _ => Some(fallback.to_string()),
        }
    };
    retention_becomes(
        addr,
        &matched,
        "the policy's retention on 20 topics",
        own_or(week),
    )
    .await?;
    assert_eq!(
        retention_of(addr, &["orders".into()]).await?["orders"],
        None
    );
    let status = policy_where(&policies, "logs", "20 matched and conforming", |s| {
        s.matched_topics == 20 && s.conforming_topics == 20
    })
    .await?;
    assert_eq!(
        condition(&status.conditions, "Ready"),
        Some(("True".into(), "Applied".into()))
    );
    let kt = topic_where(&topics, "logs-kt-a", "policyConfig shown", |kt| {
        kt.status
            .as_ref()
            .is_some_and(|s| !s.policy_config.is_empty())
    })
    .await?;
    assert_eq!(
        kt.status.unwrap().policy_config,
        BTreeMap::from([("retention.ms".to_string(), "logs".to_string())])
    );
    let kt_b = topics.get("logs-kt-b").await?;
    assert!(
        kt_b.status.unwrap().policy_config.is_empty(),
        "its own value stands in mode default"
    );

    // a topic an application creates later is brought into line
    admin
        .create_topic("logs-late", 1, 1, &BTreeMap::new())
        .await?;
    matched.push("logs-late".into());
    retention_becomes(
        addr,
        &["logs-late".into()],
        "the late topic governed",
        |_| Some(week.to_string()),
    )
    .await?;
    policy_where(&policies, "logs", "21 matched", |s| {
        s.matched_topics == 21 && s.conforming_topics == 21
    })
    .await?;

    // a change behind the operator's back is undone
    admin
        .alter_topic_config(
            "logs-1",
            &[ConfigOp::Set("retention.ms".into(), "5".into())],
        )
        .await?;
    retention_becomes(addr, &["logs-1".into()], "drift undone", |_| {
        Some(week.to_string())
    })
    .await?;

    // changing the policy changes every topic; enforce overrides own values
    let day = "86400000";
    policies
        .patch(
            "logs",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"retention.ms": day}}})),
        )
        .await?;
    retention_becomes(addr, &matched, "the new retention everywhere", own_or(day)).await?;
    policies
        .patch(
            "logs",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "enforce"}})),
        )
        .await?;
    retention_becomes(addr, &matched, "enforce overrides own values", |_| {
        Some(day.to_string())
    })
    .await?;
    // with bounds, an own value is clamped into them instead
    policies
        .patch(
            "logs",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"bounds": {"retention.ms": {"min": 3600000, "max": 172800000}}}}),
            ),
        )
        .await?;
    retention_becomes(addr, &matched, "own values clamped into the bounds", |t| {
        Some(
            match t {
                "logs-0" => "3600000",
                "logs-kt-b" => "7200000",
                _ => day,
            }
            .to_string(),
        )
    })
    .await?;

    // a policy with an unknown config is refused with a reason and changes nothing
    let bad: KafkaRetentionPolicy = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaRetentionPolicy",
        "metadata": {"name": "bad"},
        "spec": {"clusterRef": "pol", "selector": {"topicNames": ["orders"]}, "priority": 5,
                 "config": {"retention.msx": "1"}},
    }))?;
    policies.create(&pp, &bad).await?;
    let status = policy_where(&policies, "bad", "InvalidPolicy", |s| {
        condition(&s.conditions, "Ready").is_some_and(|(_, r)| r == "InvalidPolicy")
    })
    .await?;
    let ready = find_condition(&status.conditions, "Ready").unwrap();
    assert!(ready.message.contains("retention.msx"), "{}", ready.message);
    policies.delete("bad", &DeleteParams::default()).await?;

    // deleting the policy gives every topic its own settings back
    let records = configmaps.get("pol-policy-records").await?;
    assert!(
        records.data.unwrap_or_default()["records.json"].contains("logs-late"),
        "the previous values are recorded"
    );
    policies.delete("logs", &DeleteParams::default()).await?;
    wait_for(LONG, "the policy gone (finalizer released)", || async {
        Ok(policies.get_opt("logs").await?.is_none().then_some(()))
    })
    .await?;
    let restored = retention_of(addr, &matched).await?;
    for (t, v) in &restored {
        let want = match t.as_str() {
            "logs-0" => Some("1000".to_string()),
            "logs-kt-b" => Some("7200000".to_string()),
            _ => None,
        };
        assert_eq!(v, &want, "{t} restored (all: {restored:?})");
    }
    topic_where(&topics, "logs-kt-a", "policyConfig cleared", |kt| {
        kt.status
            .as_ref()
            .is_some_and(|s| s.policy_config.is_empty())
    })
    .await?;
    let records = configmaps.get("pol-policy-records").await?;
    assert_eq!(
        records.data.unwrap_or_default()["records.json"].trim(),
        "[]"
    );
    Ok(())
}

async fn rebalance_where(
    api: &Api<KafkaRebalance>,
    name: &str,
    what: &str,
    ok: impl Fn(&KafkaRebalanceStatus) -> bool,
) -> Result<KafkaRebalanceStatus> {
    wait_for(LONG, what, || async {
        let kr = api.get(name).await?;
        Ok(kr.status.filter(|s| ok(s)))
    })
    .await
}

/// A `KafkaRebalance` through the operator on the real control plane: a
/// cluster of 3 with an RF=2 topic holding records; `remove-brokers [2]`
/// gives a proposal and waits; the approve annotation runs it to `Ready`;
/// then no broker lists a replica on broker 2 and every record is read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_removes_a_broker_after_approval() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    let t0 = std::time::Instant::now();
    apply_crds()?;
    pod_runner()?;
    let ns = TestNamespace::new("op-rebalance").await?;
    let _release = ReleaseTopics(ns.name.clone());
    let _op = Operator::start(&ns.name, "op-rebalance")?;
    let clusters: Api<KafkaCluster> = ns.api();
    let topics: Api<KafkaTopic> = ns.api();
    let rebalances: Api<KafkaRebalance> = ns.api();
    let pods: Api<Pod> = ns.api();
    let pp = PostParams::default();

    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "reb"},
        "spec": {
            "replicas": 3,
            "image": "moldau/broker:e2e",
            "storage": {"size": "1Gi", "deleteClaim": true},
            "config": {
                "auto.create.topics.enable": "false",
                "broker.heartbeat.interval.ms": "200",
                "broker.session.timeout.ms": "6000",
                "replica.fetch.wait.max.ms": "100",
            },
        },
    }))?;
    clusters.create(&pp, &kc).await?;
    all_brokers_registered(&clusters, "reb", 3).await?;
    topics
        .create(&pp, &topic("moving", "reb", 6, 2, json!({}))?)
        .await?;
    topic_where(&topics, "moving", "topic moving Ready", |kt| {
        has_condition(kt, "Ready", "True", None)
    })
    .await?;
    let addrs = broker_addrs(&pods, "reb", 3).await?;
    let bootstrap = addrs[&0].to_string();
    for p in 0..6 {
        let payload = format!("p{p}-a\np{p}-b\n");
        let path = std::env::temp_dir().join(format!("{}-p{p}.txt", ns.name));
        std::fs::write(&path, payload)?;
        let part = p.to_string();
        kcat(&[
            "-b",
            &bootstrap,
            "-P",
            "-t",
            "moving",
            "-p",
            &part,
            "-X",
            "acks=all",
            "-l",
            path.to_str().unwrap(),
        ])
        .await?;
    }

    let kr: KafkaRebalance = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaRebalance",
        "metadata": {"name": "drain"},
        "spec": {"cluster": "reb", "mode": "remove-brokers", "brokers": [2], "maxConcurrentMoves": 2},
    }))?;
    rebalances.create(&pp, &kr).await?;
    let proposal = rebalance_where(&rebalances, "drain", "a proposal", |s| {
        s.phase == Some(RebalancePhase::ProposalReady)
    })
    .await?;
    let moves = proposal.proposal.as_ref().map(|p| p.moves).unwrap_or(0);
    assert!(moves >= 4, "4 of 12 replicas are on broker 2: {proposal:?}");
    // Unapproved, it stays a proposal.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let still = rebalances.get("drain").await?.status.unwrap();
    assert_eq!(still.phase, Some(RebalancePhase::ProposalReady));
    assert_eq!(still.session_id, proposal.session_id);

    rebalances
        .patch(
            "drain",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"moldau.io/rebalance-approve": "true"}}}),
            ),
        )
        .await?;
    let done = rebalance_where(&rebalances, "drain", "rebalance Ready", |s| {
        s.phase == Some(RebalancePhase::Ready) || s.phase == Some(RebalancePhase::Failed)
    })
    .await?;
    assert_eq!(done.phase, Some(RebalancePhase::Ready), "{done:?}");
    let progress = done.progress.clone().unwrap();
    assert_eq!(progress.partitions_done, progress.partitions_total);
    assert_eq!(
        condition(&done.conditions, "Ready"),
        Some(("True".into(), "RebalanceComplete".into()))
    );
    eprintln!("rebalance Ready after {:?}: {progress:?}", t0.elapsed());

    for (id, addr) in &addrs {
        let mut admin = AdminClient::connect(*addr, Duration::from_secs(5)).await?;
        let md = admin.metadata(Some(&["moving".to_string()])).await?;
        for p in md.topics.iter().flat_map(|t| t.partition_details.iter()) {
            assert!(
                !p.replicas.contains(&2) && p.replicas.len() == 2,
                "reb-{id} lists moving-{} on {:?}",
                p.partition,
                p.replicas
            );
        }
    }
    for p in 0..6 {
        let part = p.to_string();
        let got = wait_for(SHORT, &format!("moving-{p} readable"), || async {
            let out = kcat(&[
                "-b",
                &bootstrap,
                "-C",
                "-t",
                "moving",
                "-p",
                &part,
                "-o",
                "beginning",
                "-e",
                "-q",
            ])
            .await;
            Ok(out.ok().filter(|o| o.lines().count() >= 2))
        })
        .await?;
        assert_eq!(
            got.lines().collect::<Vec<_>>(),
            vec![format!("p{p}-a"), format!("p{p}-b")]
        );
    }
    assert!(events_with_reason(&ns, "RebalanceComplete").await? >= 1);
    Ok(())
}

/// Replica count per broker of `topic`, as broker `addr` reports it.
async fn replicas_per_broker(addr: SocketAddr, topic: &str) -> Result<BTreeMap<i32, usize>> {
    let mut admin = AdminClient::connect(addr, Duration::from_secs(5)).await?;
    let md = admin.metadata(Some(&[topic.to_string()])).await?;
    let mut counts = BTreeMap::new();
    for p in md.topics.iter().flat_map(|t| t.partition_details.iter()) {
        for b in &p.replicas {
            *counts.entry(*b).or_insert(0) += 1;
        }
    }
    Ok(counts)
}

/// Waits (up to [`SHORT`]) for an Event with `reason` in the namespace.
async fn event_seen(ns: &TestNamespace, reason: &str) -> Result<()> {
    wait_for(SHORT, &format!("an Event {reason}"), || async {
        Ok((events_with_reason(ns, reason).await? >= 1).then_some(()))
    })
    .await
}

/// The StatefulSet's replicas of cluster `name`.
async fn sts_replicas(sets: &Api<StatefulSet>, name: &str) -> Result<i32> {
    Ok(sets
        .get(name)
        .await?
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or_default())
}

/// A `kcat` member of consumer group `group` reading `topic` from the
/// beginning, its records collected until [`finish`]ed.
struct GroupReader {
    child: tokio::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl GroupReader {
    fn start(bootstrap: &str, group: &str, topic: &str) -> Result<GroupReader> {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new("kcat")
            .args([
                "-b",
                bootstrap,
                "-G",
                group,
                "-X",
                "auto.offset.reset=earliest",
                // see NumberedProducer: not terminated by "all brokers down"
                "-E",
                "-q",
                "-u",
                topic,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("kcat (Debian package kcat)")?;
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        let stdout = child.stdout.take().expect("piped");
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        Ok(GroupReader { child, lines })
    }

    /// How many records were read so far.
    fn seen(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// Waits until the member has read `expected` records (or [`LONG`]
    /// passed), stops it and returns what it read.
    async fn finish(mut self, expected: usize) -> Result<Vec<String>> {
        let deadline = std::time::Instant::now() + LONG;
        while self.seen() < expected && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.child.kill().await?;
        let lines = self.lines.lock().unwrap().clone();
        Ok(lines)
    }
}

/// Messages of the Events with `reason` in the namespace.
async fn event_messages(ns: &TestNamespace, reason: &str) -> Result<Vec<String>> {
    let events: Api<Event> = ns.api();
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect())
}

/// Automatic rebalance on scaling, through the operator on the real control
/// plane (issue #13): a cluster of 3 with an RF=2 topic of 24 partitions
/// holding records, a producer (`acks=all`, idempotent) writing and a
/// consumer-group member reading throughout. `kubectl scale` to 5 → the
/// operator's `add-brokers` rebalance fills brokers 3 and 4 (every broker
/// within ±1 replica of the others; the topic's status shows its partitions
/// moving meanwhile; time, moves and bytes are printed for the README);
/// scaled back to 3 → brokers 3 and 4 are drained before the StatefulSet
/// goes to 3, and their claims are deleted (`deleteClaim: true`), with no
/// under-replicated partition at the end; scaled to 1 → refused (RF 2) with
/// a condition and an Event, the StatefulSet stays at 3. The group member
/// read every record exactly once; each scale has its own Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_moves_the_data() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    let t0 = std::time::Instant::now();
    apply_crds()?;
    pod_runner()?;
    let ns = TestNamespace::new("op-autoscale").await?;
    let _release = ReleaseTopics(ns.name.clone());
    let _op = Operator::start(&ns.name, "op-autoscale")?;
    let clusters: Api<KafkaCluster> = ns.api();
    let topics: Api<KafkaTopic> = ns.api();
    let sets: Api<StatefulSet> = ns.api();
    let rebalances: Api<KafkaRebalance> = ns.api();
    let pods: Api<Pod> = ns.api();
    let pp = PostParams::default();
    const PARTITIONS: i32 = 24;
    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "auto"},
        "spec": {
            "replicas": 3,
            "image": "moldau/broker:e2e",
            "storage": {"size": "1Gi", "deleteClaim": true},
            "config": {
                "auto.create.topics.enable": "false",
                "broker.heartbeat.interval.ms": "200",
                "broker.session.timeout.ms": "6000",
                "replica.fetch.wait.max.ms": "100",
            },
            "rebalance": {"maxConcurrentMoves": 4, "throttleBytesPerSecond": 10000000},
        },
    }))?;
    clusters.create(&pp, &kc).await?;
    all_brokers_registered(&clusters, "auto", 3).await?;
    topics
        .create(&pp, &topic("scaled", "auto", PARTITIONS, 2, json!({}))?)
        .await?;
    topic_where(&topics, "scaled", "topic scaled Ready", |kt| {
        has_condition(kt, "Ready", "True", None)
    })
    .await?;
    let addrs = broker_addrs(&pods, "auto", 3).await?;
    let bootstrap = addrs
        .values()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    // Data in every partition before the scale: 200 records of 1 KB each.
    let filler = "x".repeat(1000);
    for p in 0..PARTITIONS {
        let path = std::env::temp_dir().join(format!("{}-p{p}.txt", ns.name));
        let lines: String = (0..200).map(|i| format!("p{p}-{i}-{filler}\n")).collect();
        std::fs::write(&path, lines)?;
        let part = p.to_string();
        kcat(&[
            "-b",
            &bootstrap,
            "-P",
            "-t",
            "scaled",
            "-p",
            &part,
            "-X",
            "acks=all",
            "-l",
            path.to_str().unwrap(),
        ])
        .await?;
    }
    let prefilled = (PARTITIONS * 200) as usize;
    let reader = GroupReader::start(&bootstrap, "scale-watchers", "scaled")?;
    let producer = NumberedProducer::start(&bootstrap, "scaled", 50)?;

    // Scale out: brokers 3 and 4 receive their share.
    let scale_out = std::time::Instant::now();
    ns.kubectl_ok(&["scale", "kafkacluster/auto", "--replicas=5"])?;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let saw_progress = AtomicBool::new(false);
    let saw_pending = AtomicBool::new(false);
    let plan = std::sync::Mutex::new(None::<KafkaRebalanceStatus>);
    wait_for(LONG + LONG, "the scale-out's rebalance done", || async {
        let kt = topics.get("scaled").await?;
        if let Some(r) = kt.status.and_then(|s| s.reassignment) {
            if r.rebalance.as_deref() == Some("auto-auto-rebalance") && r.partitions_total > 0 {
                saw_progress.store(true, Relaxed);
            }
        }
        if let Some(kr) = rebalances.get_opt("auto-auto-rebalance").await? {
            if let Some(s) = kr.status.filter(|s| s.proposal.is_some()) {
                *plan.lock().unwrap() = Some(s);
            }
        }
        let kc = clusters.get("auto").await?;
        let s = kc.status.unwrap_or_default();
        if s.auto_rebalance.is_some() {
            saw_pending.store(true, Relaxed);
        }
        let done = saw_pending.load(Relaxed)
            && s.auto_rebalance.is_none()
            && s.registered_brokers == vec![0, 1, 2, 3, 4]
            && sts_replicas(&sets, "auto").await? == 5;
        Ok(done.then_some(()))
    })
    .await?;
    let took = scale_out.elapsed();
    assert!(
        saw_progress.load(Relaxed),
        "KafkaTopic scaled showed its partitions moving"
    );
    let counts = replicas_per_broker(addrs[&0], "scaled").await?;
    assert_eq!(
        counts.keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    let (lo, hi) = (
        counts.values().min().unwrap(),
        counts.values().max().unwrap(),
    );
    assert!(hi - lo <= 1, "replica counts within ±1: {counts:?}");
    let plan = plan
        .into_inner()
        .unwrap()
        .expect("the rebalance's proposal");
    let proposal = plan.proposal.clone().unwrap();
    let progress = plan.progress.clone().unwrap_or_default();
    eprintln!(
        "MEASURE 3 -> 5: {:.1} s from kubectl scale to done; {} moves in {} batches, {} bytes planned, {} moved; replicas per broker after {counts:?}",
        took.as_secs_f64(),
        proposal.moves,
        proposal.batches,
        proposal.bytes_to_move,
        progress.bytes_moved,
    );
    for b in &proposal.brokers {
        eprintln!(
            "MEASURE broker {}: replicas {} -> {}, leaders {} -> {}, bytes {} -> {}",
            b.broker,
            b.before.replicas,
            b.after.replicas,
            b.before.leaders,
            b.after.leaders,
            b.before.bytes,
            b.after.bytes
        );
    }
    event_seen(&ns, "ScaleOutRebalanced").await?;
    wait_for(SHORT, "the scale's rebalance deleted", || async {
        Ok(rebalances
            .get_opt("auto-auto-rebalance")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    topic_where(
        &topics,
        "scaled",
        "no reassignment in the topic's status",
        |kt| kt.status.as_ref().is_some_and(|s| s.reassignment.is_none()),
    )
    .await?;

    // Scale down: brokers 3 and 4 are drained before their pods go.
    ns.kubectl_ok(&["scale", "kafkacluster/auto", "--replicas=3"])?;
    let deadline = std::time::Instant::now() + LONG + LONG;
    let mut saw_draining = false;
    loop {
        let replicas = sts_replicas(&sets, "auto").await?;
        if replicas == 3 {
            // Lowered: brokers 3 and 4 held nothing at that moment and hold
            // nothing now.
            let counts = replicas_per_broker(addrs[&0], "scaled").await?;
            assert!(
                !counts.contains_key(&3) && !counts.contains_key(&4),
                "brokers 3 and 4 drained: {counts:?}"
            );
            break;
        }
        assert_eq!(replicas, 5);
        let kc = clusters.get("auto").await?;
        if let Some(p) = kc.status.and_then(|s| s.auto_rebalance) {
            saw_draining |= p.brokers == vec![3, 4];
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "brokers 3 and 4 were not drained"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(saw_draining, "status.autoRebalance showed the drain");
    event_seen(&ns, "DrainStarted").await?;
    event_seen(&ns, "BrokersDrained").await?;
    wait_for(LONG, "3 brokers, pods auto-3 and auto-4 gone", || async {
        let gone =
            pods.get_opt("auto-3").await?.is_none() && pods.get_opt("auto-4").await?.is_none();
        let kc = clusters.get("auto").await?;
        Ok((gone
            && kc
                .status
                .is_some_and(|s| s.replicas == 3 && s.auto_rebalance.is_none()))
        .then_some(()))
    })
    .await?;
    eprintln!("after 5 -> 3: {:?}", t0.elapsed());
    // storage.deleteClaim: the removed brokers' claims go with them.
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> = ns.api();
    wait_for(SHORT, "claims data-auto-3 and -4 deleted", || async {
        Ok((claims.get_opt("data-auto-3").await?.is_none()
            && claims.get_opt("data-auto-4").await?.is_none())
        .then_some(()))
    })
    .await?;
    assert!(claims.get_opt("data-auto-2").await?.is_some());
    wait_for(SHORT, "no partition under-replicated", || async {
        Ok(isr_gaps(&addrs, "scaled")
            .await
            .ok()
            .filter(|g| g.is_empty())
            .map(|_| ()))
    })
    .await?;

    // Below the replication factor: refused, the StatefulSet stays.
    ns.kubectl_ok(&["scale", "kafkacluster/auto", "--replicas=1"])?;
    let kc = wait_for(LONG, "scale-down to 1 refused", || async {
        let kc = clusters.get("auto").await?;
        let refused = kc.status.as_ref().is_some_and(|s| {
            condition(&s.conditions, "Degraded") == Some(("True".into(), "ScaleDownRefused".into()))
                && s.observed_generation == kc.metadata.generation
        });
        Ok(refused.then_some(kc))
    })
    .await?;
    let message = find_condition(&kc.status.unwrap().conditions, "Degraded")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    // the group's offsets topic (RF 3) or the topic (RF 2) is named
    assert!(
        message.contains("topic __consumer_offsets has replication factor 3")
            || message.contains("topic scaled has replication factor 2"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        sts_replicas(&sets, "auto").await?,
        3,
        "StatefulSet unchanged"
    );
    event_seen(&ns, "ScaleDownRefused").await?;
    assert!(rebalances.get_opt("auto-auto-rebalance").await?.is_none());
    // each scale its own Event, not a repeat count on the first
    let scaled = event_messages(&ns, "ClusterScaled").await?;
    for want in ["from 3 to 5", "from 5 to 3"] {
        assert!(
            scaled.iter().any(|m| m.contains(want)),
            "no ClusterScaled Event {want}: {scaled:?}"
        );
    }

    // The group member read everything exactly once, through both moves.
    let written = producer.stop().await?;
    let read = reader.finish(prefilled + written as usize).await?;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for line in &read {
        *counts.entry(line.as_str()).or_insert(0) += 1;
    }
    let doubled: Vec<_> = counts.iter().filter(|(_, c)| **c > 1).take(10).collect();
    assert!(doubled.is_empty(), "read twice: {doubled:?}");
    let missing: Vec<u64> = (0..written)
        .filter(|n| !counts.contains_key(n.to_string().as_str()))
        .take(20)
        .collect();
    assert!(missing.is_empty(), "never read: {missing:?}");
    assert_eq!(
        read.len(),
        prefilled + written as usize,
        "the group member read {} records, {prefilled} + {written} were written",
        read.len()
    );
    eprintln!("scaling_moves_the_data took {:?}", t0.elapsed());
    Ok(())
}

/// Removes the finalizers of every KafkaQuota in a namespace on drop (see
/// [`ReleaseTopics`]). Declare it after the `TestNamespace`.
struct ReleaseQuotas(String);

impl Drop for ReleaseQuotas {
    fn drop(&mut self) {
        let Ok(names) =
            moldau_e2e::kubectl_ok(&["-n", &self.0, "get", "kafkaquotas", "-o", "name"])
        else {
            return;
        };
        for name in names.lines().filter(|l| !l.is_empty()) {
            let _ = moldau_e2e::kubectl(&[
                "-n",
                &self.0,
                "patch",
                name,
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ]);
        }
    }
}

/// Produces `bytes` (records of 10 000 bytes) to partition 0 of `topic`
/// with `kcat` as client id `client_id`, as fast as the broker lets it
/// (`acks=1`, every record delivered before kcat exits); returns the rate
/// in bytes per second. Batches are kept to two records: the throttle a
/// broker imposes after the last request is never waited for (KIP-219
/// answers first, then mutes), so a batch of librdkafka's default 1 MB
/// would make a few seconds' quota look free.
async fn kcat_produce_rate(
    bootstrap: SocketAddr,
    topic: &str,
    client_id: &str,
    bytes: usize,
) -> Result<f64> {
    const RECORD: usize = 10_000;
    let records = bytes / RECORD;
    let line = "q".repeat(RECORD - 1) + "\n";
    let path = std::env::temp_dir().join(format!("quota-{client_id}-{}.txt", std::process::id()));
    std::fs::write(&path, line.repeat(records))?;
    let client = format!("client.id={client_id}");
    let start = std::time::Instant::now();
    kcat(&[
        "-b",
        &bootstrap.to_string(),
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-X",
        &client,
        "-X",
        "acks=1",
        "-X",
        "batch.size=20000",
        "-l",
        path.to_str().unwrap(),
    ])
    .await?;
    let secs = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    Ok((records * RECORD) as f64 / secs)
}

/// Issue #14: a `KafkaQuota` on the real control plane. A KafkaCluster of
/// one broker; a quota set by hand (the operator's AdminClient, as
/// `kafka-configs` would) for another client id; a KafkaQuota with a
/// producer byte rate for the exact client id `metered-app` and the
/// client-id prefix `batch-` (Moldau's extension) becomes Ready with both
/// entities in `status.applied`, and the broker's DescribeClientQuotas shows
/// them. `kcat` producing as `metered-app` keeps to the rate within ±30 %
/// over ~12 s and the broker's `moldau_quota_throttle_time_ms_total` counts
/// its throttling; `batch-7` is throttled through the prefix; `free-app`
/// (no quota) is not slowed. Deleting the KafkaQuota removes exactly its
/// quotas — the hand-set one stays — and `metered-app` is fast again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_quota_throttles_a_client_and_is_removed_cleanly() -> Result<()> {
    use moldau_operator::crd::KafkaQuota;
    use moldau_operator::kafka::quota::{EntityName, QuotaAlteration, QuotaEntity};

    if !enabled() {
        return Ok(());
    }
    const RATE: f64 = 256.0 * 1024.0;
    apply_crds()?;
    pod_runner()?;
    let ns = TestNamespace::new("op-quota").await?;
    let _release_topics = ReleaseTopics(ns.name.clone());
    let _release_quotas = ReleaseQuotas(ns.name.clone());
    let _op = Operator::start(&ns.name, "op-quota")?;
    let clusters: Api<KafkaCluster> = ns.api();
    let topics: Api<KafkaTopic> = ns.api();
    let kquotas: Api<KafkaQuota> = ns.api();
    let pods: Api<Pod> = ns.api();
    let pp = PostParams::default();

    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "quo"},
        "spec": {
            "replicas": 1,
            "image": "moldau/broker:e2e",
            "storage": {"size": "1Gi", "deleteClaim": true},
            "config": {"auto.create.topics.enable": "false"},
        },
    }))?;
    clusters.create(&pp, &kc).await?;
    all_brokers_registered(&clusters, "quo", 1).await?;
    topics
        .create(&pp, &topic("metered", "quo", 1, 1, json!({}))?)
        .await?;
    topic_where(&topics, "metered", "topic metered Ready", |kt| {
        has_condition(kt, "Ready", "True", None)
    })
    .await?;
    let addr = broker_addr(&pods, "quo-0").await?;
    let mut admin = AdminClient::connect(addr, Duration::from_secs(5)).await?;

    let client = |n: &str| QuotaEntity {
        user: None,
        client_id: Some(EntityName::Name(n.into())),
    };
    let prefix = QuotaEntity {
        user: None,
        client_id: Some(EntityName::Prefix("batch-".into())),
    };
    let by_hand = BTreeMap::from([("consumer_byte_rate".to_string(), 4096.0)]);
    let results = admin
        .alter_client_quotas(&[QuotaAlteration {
            entity: client("by-hand"),
            ops: by_hand.iter().map(|(k, v)| (k.clone(), Some(*v))).collect(),
        }])
        .await?;
    assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");

    let kq: KafkaQuota = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaQuota",
        "metadata": {"name": "limit"},
        "spec": {
            "clusterRef": "quo",
            "entities": [{"clientId": "metered-app"}, {"clientIdPrefix": "batch-"}],
            "producerByteRate": RATE as i64,
        },
    }))?;
    kquotas.create(&pp, &kq).await?;
    let applied = wait_for(LONG, "KafkaQuota limit Ready", || async {
        let kq = kquotas.get("limit").await?;
        Ok(kq.status.filter(|s| {
            condition(&s.conditions, "Ready") == Some(("True".into(), "Applied".into()))
                && s.observed_generation == kq.metadata.generation
        }))
    })
    .await?;
    let mut entities: Vec<_> = applied
        .applied
        .iter()
        .map(|a| {
            (
                a.entity.client_id.clone(),
                a.entity.client_id_prefix.clone(),
            )
        })
        .collect();
    entities.sort();
    assert_eq!(
        entities,
        vec![
            (None, Some("batch-".to_string())),
            (Some("metered-app".to_string()), None)
        ],
        "{applied:?}"
    );
    assert!(applied.refused.is_empty(), "{applied:?}");
    let rate = BTreeMap::from([("producer_byte_rate".to_string(), RATE)]);
    assert_eq!(
        admin.describe_client_quotas().await?,
        BTreeMap::from([
            (client("by-hand"), by_hand.clone()),
            (client("metered-app"), rate.clone()),
            (prefix.clone(), rate.clone()),
        ])
    );

    // the quota'd client keeps to its rate; one without a quota does not
    let metered = kcat_produce_rate(addr, "metered", "metered-app", 12 * RATE as usize).await?;
    eprintln!(
        "metered-app: {:.0} KiB/s against {:.0}",
        metered / 1024.0,
        RATE / 1024.0
    );
    assert!(
        (0.7 * RATE..=1.3 * RATE).contains(&metered),
        "metered-app produced {:.0} KiB/s against a quota of {:.0} KiB/s",
        metered / 1024.0,
        RATE / 1024.0
    );
    let batch = kcat_produce_rate(addr, "metered", "batch-7", 6 * RATE as usize).await?;
    eprintln!("batch-7: {:.0} KiB/s", batch / 1024.0);
    assert!(
        batch < 1.5 * RATE,
        "batch-7 is under the batch- prefix: {:.0} KiB/s",
        batch / 1024.0
    );
    let free = kcat_produce_rate(addr, "metered", "free-app", 4 * RATE as usize).await?;
    eprintln!("free-app: {:.0} KiB/s", free / 1024.0);
    assert!(
        free > 3.0 * RATE,
        "free-app has no quota but produced only {:.0} KiB/s",
        free / 1024.0
    );
    let metrics = broker_metrics(addr).await?;
    let throttled = |client: &str| -> f64 {
        samples(&metrics, "moldau_quota_throttle_time_ms_total")
            .iter()
            .filter(|(l, _)| {
                l.contains(&format!("client_id=\"{client}\"")) && l.contains("kind=\"produce\"")
            })
            .map(|(_, v)| v)
            .sum()
    };
    // 12 s worth of quota sent in ~1 s of wire time: most of it waited
    assert!(
        throttled("metered-app") > 5_000.0,
        "metered-app throttle time {} ms",
        throttled("metered-app")
    );
    assert!(throttled("batch-7") > 0.0, "batch-7 was never throttled");
    assert_eq!(throttled("free-app"), 0.0, "free-app was throttled");

    // deleting the KafkaQuota removes exactly what it set
    kquotas.delete("limit", &DeleteParams::default()).await?;
    wait_for(SHORT, "KafkaQuota limit gone", || async {
        Ok(kquotas.get_opt("limit").await?.is_none().then_some(()))
    })
    .await?;
    assert_eq!(
        admin.describe_client_quotas().await?,
        BTreeMap::from([(client("by-hand"), by_hand)])
    );
    let after = kcat_produce_rate(addr, "metered", "metered-app", 4 * RATE as usize).await?;
    assert!(
        after > 3.0 * RATE,
        "metered-app is still slow without its quota: {:.0} KiB/s",
        after / 1024.0
    );
    Ok(())
}

/// The brokers that are in some partition's replica set but not in its ISR,
/// as a live broker of `addrs` answers Metadata for `topic`.
async fn isr_gaps(
    addrs: &BTreeMap<i64, SocketAddr>,
    topic: &str,
) -> Result<std::collections::BTreeSet<i32>> {
    for addr in addrs.values() {
        let Ok(mut admin) = AdminClient::connect(*addr, Duration::from_secs(2)).await else {
            continue;
        };
        let Ok(md) = admin.metadata(Some(&[topic.to_string()])).await else {
            continue;
        };
        let parts: Vec<_> = md
            .topics
            .iter()
            .flat_map(|t| t.partition_details.iter())
            .collect();
        if parts.is_empty() {
            continue;
        }
        return Ok(parts
            .iter()
            .flat_map(|p| p.replicas.iter().filter(|r| !p.isr.contains(r)).copied())
            .collect());
    }
    Err(anyhow!("no broker answered Metadata for {topic}"))
}

/// iptables rules dropping the packets from one loopback address to others'
/// port, removed on drop. Only 127.0.0.0/8 addresses (the pods' IPs under
/// the pod runner) are ever named.
struct Cut(Vec<Vec<String>>);

impl Cut {
    fn install(from: IpAddr, to: &[IpAddr], port: u16) -> Result<Cut> {
        anyhow::ensure!(from.is_loopback() && to.iter().all(|a| a.is_loopback()));
        let mut cut = Cut(Vec::new());
        for dst in to {
            let rule: Vec<String> = [
                "OUTPUT",
                "-s",
                &from.to_string(),
                "-d",
                &dst.to_string(),
                "-p",
                "tcp",
                "--dport",
                &port.to_string(),
                "-j",
                "DROP",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let out = Command::new("iptables")
                .args(["-w", "-I"])
                .args(&rule)
                .output()
                .context("iptables (Debian package iptables, as root)")?;
            anyhow::ensure!(
                out.status.success(),
                "iptables -I {rule:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            cut.0.push(rule);
        }
        Ok(cut)
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        for rule in self.0.drain(..) {
            let _ = Command::new("iptables")
                .args(["-w", "-D"])
                .args(&rule)
                .output();
        }
    }
}

/// A `kcat` producer (acks=all, idempotent) writing the numbers 0, 1, … as
/// records of `topic`, about `per_second` a second, until [`stop`]ped.
struct NumberedProducer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Result<u64>>,
}

impl NumberedProducer {
    fn start(bootstrap: &str, topic: &str, per_second: u64) -> Result<NumberedProducer> {
        use tokio::io::AsyncWriteExt;
        // librdkafka's log goes to a file, not a pipe nobody reads until the
        // end (a full pipe would stall kcat), with the contexts that explain
        // an idempotent producer's fatal error.
        //
        // `-E`: kcat otherwise exits on librdkafka's informational "all
        // broker connections are down", which a rolling restart can raise
        // with two brokers up: a broker whose connection dropped counts as
        // down until librdkafka reconnects to it, and librdkafka reconnects
        // only when it has something to send there, so three restarts a few
        // seconds apart can leave all three "down" (seen in about one run in
        // four: kcat exit 1 after "3/3 brokers are down: terminating").
        // librdkafka itself retries on; a record it finally fails to deliver
        // still makes kcat exit 1 at the end (its delivery report count).
        let log_path = std::env::temp_dir().join(format!(
            "moldau-e2e-producer-{topic}-{}-{}.log",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or_default()
        ));
        let log = std::fs::File::create(&log_path)?;
        let mut child = tokio::process::Command::new("kcat")
            .args([
                "-b",
                bootstrap,
                "-P",
                "-t",
                topic,
                "-X",
                "acks=all",
                "-X",
                "enable.idempotence=true",
                "-X",
                "linger.ms=5",
                "-d",
                "eos,topic,broker",
                "-E",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("kcat (Debian package kcat)")?;
        let mut stdin = child.stdin.take().expect("piped");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let log_file = log_path.clone();
        let log_tail = move || {
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let errors: Vec<&str> = lines
                .iter()
                .copied()
                .filter(|l| l.contains("ERROR") || l.contains("FATAL") || l.contains("fatal"))
                .take(20)
                .collect();
            format!(
                "first error lines:\n{}\n--- last 150 lines of {} ---\n{}",
                errors.join("\n"),
                log_path.display(),
                lines[lines.len().saturating_sub(150)..].join("\n")
            )
        };
        let task = tokio::spawn(async move {
            let mut n = 0u64;
            let pause = Duration::from_millis(1000 / per_second.max(1));
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                if let Err(e) = stdin.write_all(format!("{n}\n").as_bytes()).await {
                    // kcat exited (a broken pipe): say why
                    drop(stdin);
                    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
                        .await
                        .context("kcat producer did not exit")??;
                    anyhow::bail!(
                        "kcat producer exited ({status}) after {n} numbers, writing to it failed ({e}): {}",
                        log_tail()
                    );
                }
                n += 1;
                tokio::time::sleep(pause).await;
            }
            drop(stdin);
            // kcat flushes what it holds on EOF (librdkafka retries through
            // leader changes) and exits
            let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
                .await
                .context("kcat producer did not exit")??;
            anyhow::ensure!(status.success(), "kcat producer: {status}: {}", log_tail());
            let _ = std::fs::remove_file(&log_file);
            Ok(n)
        });
        Ok(NumberedProducer { stop, task })
    }

    /// Stops writing; how many numbers were written (and delivered: kcat
    /// exited cleanly).
    async fn stop(self) -> Result<u64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await?
    }
}

/// Every record of `topic` (all partitions, from the beginning) as read by
/// `kcat -C` through `bootstrap`, counted by value.
async fn record_counts(bootstrap: &str, topic: &str) -> Result<BTreeMap<String, usize>> {
    let out = kcat(&[
        "-b",
        bootstrap,
        "-C",
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-q",
    ])
    .await?;
    let mut counts = BTreeMap::new();
    for line in out.lines() {
        *counts.entry(line.to_string()).or_insert(0) += 1;
    }
    Ok(counts)
}

/// Issue #13 item 5: a rolling restart behind health gates, under
/// `acks=all` load. A broker config the broker would refuse (`num.partitions:
/// abc`) or a misspelled key is refused before any pod is touched
/// (`Degraded` InvalidConfig, a Warning Event). With broker 0's replica
/// fetches cut (iptables, loopback only) it leaves the ISRs; a static config
/// change then must not restart anyone: the roll is held
/// (`status.rolloutHold` PartitionsUnderReplicated) and reported stalled
/// after `spec.rollout.stallTimeoutSeconds` (`Degraded`
/// RollingRestartStalled, Warning Event), every pod the same. Once the cut
/// is lifted the roll goes 2 → 1 → 0, and at no sample of Metadata are two
/// brokers out of sync at once (never a second broker restarted while a
/// partition is under-replicated); every record the producer wrote is read
/// back exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_waits_for_every_isr_under_load() -> Result<()> {
    if !enabled() {
        return Ok(());
    }
    apply_crds()?;
    pod_runner()?;
    let ns = TestNamespace::new("op-gated").await?;
    let _release = ReleaseTopics(ns.name.clone());
    let _op = Operator::start(&ns.name, "op-gated")?;
    let clusters: Api<KafkaCluster> = ns.api();
    let topics: Api<KafkaTopic> = ns.api();
    let pods: Api<Pod> = ns.api();
    let pp = PostParams::default();
    let kc: KafkaCluster = serde_json::from_value(json!({
        "apiVersion": "moldau.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "gated"},
        "spec": {
            "replicas": 3,
            "image": "moldau/broker:e2e",
            "storage": {"size": "1Gi", "deleteClaim": true},
            "config": {
                "auto.create.topics.enable": "false",
                "replica.lag.time.max.ms": "3000",
                "replica.fetch.wait.max.ms": "100",
                "broker.heartbeat.interval.ms": "200",
                "broker.session.timeout.ms": "6000",
            },
            "rollout": {"stallTimeoutSeconds": 6},
        },
    }))?;
    clusters.create(&pp, &kc).await?;
    all_brokers_registered(&clusters, "gated", 3).await?;
    topics
        .create(
            &pp,
            &topic("load", "gated", 6, 3, json!({"min.insync.replicas": "2"}))?,
        )
        .await?;
    topic_where(&topics, "load", "topic load Ready", |kt| {
        has_condition(kt, "Ready", "True", None)
    })
    .await?;
    let addrs = broker_addrs(&pods, "gated", 3).await?;
    let bootstrap = addrs
        .values()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
    let pod_uids = || async {
        let list = pods
            .list(&ListParams::default().labels("moldau.io/cluster=gated"))
            .await?;
        anyhow::Ok(
            list.items
                .iter()
                .map(|p| (p.metadata.name.clone().unwrap_or_default(), uid(p)))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    let original = pod_uids().await?;
    assert_eq!(original.len(), 3);

    // Refused before any broker is touched.
    for (refusals, (bad, expect)) in (1..).zip([
        (json!({"num.partitions": "abc"}), "\"abc\""),
        (
            json!({"log.retention.msx": "1000"}),
            "did you mean log.retention.ms?",
        ),
    ]) {
        clusters
            .patch(
                "gated",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"config": bad}})),
            )
            .await?;
        let kc = cluster_condition(&clusters, "gated", "Degraded", "True").await?;
        let c = find_condition(&kc.status.as_ref().unwrap().conditions, "Degraded")
            .cloned()
            .unwrap();
        assert_eq!(c.reason, "InvalidConfig");
        assert!(c.message.contains(expect), "{}", c.message);
        // The refusal has its own condition; Ready stays about serving
        // (every broker still serves the config it had).
        let conditions = kc.status.as_ref().unwrap().conditions.clone();
        assert_eq!(
            condition(&conditions, "ConfigAccepted"),
            Some(("False".into(), "ConfigRefused".into()))
        );
        assert_eq!(
            condition(&conditions, "Ready").map(|(s, _)| s).as_deref(),
            Some("True"),
            "a refused config does not make a serving cluster not Ready"
        );
        // Each distinct refusal is told by its own Event.
        wait_for(SHORT, "an Event for this refusal", || async {
            Ok((events_with_reason(&ns, "InvalidConfig").await? >= refusals).then_some(()))
        })
        .await?;
        clusters
            .patch(
                "gated",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"config": {"num.partitions": null, "log.retention.msx": null}}}),
                ),
            )
            .await?;
        cluster_condition(&clusters, "gated", "Degraded", "False").await?;
        let kc = cluster_condition(&clusters, "gated", "ConfigAccepted", "True").await?;
        assert!(kc.status.is_some());
    }
    assert_eq!(
        pod_uids().await?,
        original,
        "a refused config restarted a pod"
    );

    let producer = NumberedProducer::start(&bootstrap, "load", 100)?;
    // Broker 0 stops replicating: it leaves the ISRs of the partitions it
    // follows, and stays Ready.
    let ip = |n: i64| addrs[&n].ip();
    let cut = Cut::install(ip(0), &[ip(1), ip(2)], addrs[&1].port())?;
    wait_for(SHORT, "broker 0 out of an ISR", || async {
        Ok(isr_gaps(&addrs, "load")
            .await
            .ok()
            .filter(|g| g.contains(&0))
            .map(|_| ()))
    })
    .await?;
    // A static change (num.partitions is read-only in Kafka): a roll is due.
    clusters
        .patch(
            "gated",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"num.partitions": "2"}}})),
        )
        .await?;
    let kc = cluster_condition(&clusters, "gated", "Degraded", "True").await?;
    let status = kc.status.unwrap();
    let d = find_condition(&status.conditions, "Degraded")
        .cloned()
        .unwrap();
    assert_eq!(d.reason, "RollingRestartStalled", "{}", d.message);
    assert!(d.message.contains("under-replicated"), "{}", d.message);
    let hold = status.rollout_hold.expect("status.rolloutHold");
    assert_eq!(hold.reason, "PartitionsUnderReplicated");
    event_seen(&ns, "RollingRestartStalled").await?;
    assert_eq!(
        pod_uids().await?,
        original,
        "a broker was restarted while broker 0 was out of the ISRs"
    );
    drop(cut);

    // The roll goes on once broker 0 is back in sync; never two brokers out
    // of sync at once.
    let mut watch = RollWatch::new(original.clone());
    let mut worst = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + LONG + LONG;
    loop {
        let list = pods
            .list(&ListParams::default().labels("moldau.io/cluster=gated"))
            .await?;
        // a restarted pod may come back on another IP: ask the live ones
        let live: BTreeMap<i64, SocketAddr> = list
            .items
            .iter()
            .filter(|p| pod_is_ready(p) && p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| {
                let ip: IpAddr = p.status.as_ref()?.pod_ip.as_ref()?.parse().ok()?;
                let ordinal = p.metadata.name.as_ref()?.rsplit('-').next()?.parse().ok()?;
                ip.is_loopback()
                    .then(|| (ordinal, SocketAddr::new(ip, 9092)))
            })
            .collect();
        if let Ok(gaps) = isr_gaps(&live, "load").await {
            if gaps.len() > worst.len() {
                worst = gaps;
            }
        }
        if watch.observe(&list.items) {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "rolling restart incomplete: replaced {:?}",
            watch.order
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(watch.order, vec!["gated-2", "gated-1", "gated-0"]);
    assert!(
        watch.max_unavailable <= 1,
        "{} brokers down at once",
        watch.max_unavailable
    );
    assert!(
        worst.len() <= 1,
        "brokers {worst:?} were out of sync at the same time"
    );
    cluster_condition(&clusters, "gated", "Ready", "True").await?;
    cluster_condition(&clusters, "gated", "Degraded", "False").await?;

    let written = producer.stop().await?;
    assert!(written > 100, "only {written} records written");
    let bootstrap = broker_addrs(&pods, "gated", 3)
        .await?
        .values()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let counts = wait_for(SHORT, "every record readable", || async {
        let counts = record_counts(&bootstrap, "load").await?;
        Ok((counts.len() as u64 >= written).then_some(counts))
    })
    .await?;
    let missing: Vec<u64> = (0..written)
        .filter(|n| !counts.contains_key(&n.to_string()))
        .collect();
    assert!(missing.is_empty(), "lost records: {missing:?}");
    let doubled: Vec<&String> = counts
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(v, _)| v)
        .collect();
    assert!(doubled.is_empty(), "records read twice: {doubled:?}");
    eprintln!("rolling restart under load: {written} records, each read once");
    Ok(())
}
