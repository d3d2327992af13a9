//! Starts a broker's cluster-mode tasks: the election, the controller host
//! (serving while this broker leads) and the session to the active
//! controller. Standalone mode starts none of them.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use moldau_coordination::lease::{Elector, LeaseConfig};
use moldau_coordination::store::KubeMetadataStore;

use super::cluster::CreateDefaults;
use super::host::{Backend, HostConfig};
use super::link::ControllerLink;
use super::rpc::{system_clock, ControllerSettings};
use super::session::SessionConfig;
use crate::broker::Broker;
use crate::config::Cli;
use crate::security::tls::TlsState;

/// Whether `cli` asks for cluster mode.
pub fn is_cluster(cli: &Cli) -> bool {
    cli.cluster != "standalone"
}

/// The controller's gRPC address others dial: `http://host:port`, or
/// `https://host:port` when it serves TLS.
fn controller_address(
    cli: &Cli,
    broker: &Broker,
    bound: std::net::SocketAddr,
    tls: bool,
) -> String {
    let hostport = cli.controller_advertised.clone().unwrap_or_else(|| {
        let host = &broker.advertised_host;
        if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{}", bound.port())
        } else {
            format!("{host}:{}", bound.port())
        }
    });
    super::transport::address(&hostport, tls)
}

/// The Kubernetes backend: the cluster's Lease and metadata objects in
/// `--namespace`, with in-cluster credentials or `KUBECONFIG`.
async fn kubernetes(broker: &Broker, cli: &Cli) -> anyhow::Result<Backend> {
    let namespace = cli
        .namespace
        .clone()
        .context("--cluster kubernetes needs --namespace (MOLDAU_NAMESPACE)")?;
    let mut kube_config = kube::Config::infer()
        .await
        .context("no Kubernetes credentials (in-cluster or KUBECONFIG)")?;
    // Lease and metadata calls are small: an API server that stops
    // answering is noticed in seconds, not after the default 295 s (the
    // data plane never waits for these calls either way).
    kube_config.connect_timeout = Some(Duration::from_secs(5));
    kube_config.read_timeout = Some(Duration::from_secs(10));
    kube_config.write_timeout = Some(Duration::from_secs(10));
    let client = kube::Client::try_from(kube_config).context("Kubernetes client")?;
    let identity = format!(
        "{}-broker-{}-{}",
        cli.cluster_name,
        broker.node_id,
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let store = KubeMetadataStore::new(client.clone(), &namespace, &cli.cluster_name)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .with_event_instance(client.clone(), identity.clone());
    let config = broker.topics.broker_config();
    let lease = LeaseConfig::new(
        namespace.clone(),
        format!("{}-controller", cli.cluster_name),
        identity,
        Duration::from_millis(config.controller_lease_duration_ms.max(1) as u64),
        Duration::from_millis(config.controller_lease_retry_ms.max(1) as u64),
    );
    lease
        .validate()
        .map_err(|e| anyhow::anyhow!("controller.lease.*: {e}"))?;
    let elector = Elector::start(client, lease);
    Ok(Backend::Kube {
        store: Arc::new(store),
        elector: Arc::new(elector),
    })
}

/// How long the previous controller's broker has to check in with a new
/// controller: at least a second (a live broker whose controller lost the
/// lease finds the new one that fast), and no less than what is left of a
/// session timeout after the lease duration it has been silent.
pub fn takeover_grace_ms(session_timeout_ms: i64, lease_duration_ms: i64) -> i64 {
    session_timeout_ms
        .saturating_sub(lease_duration_ms)
        .max(1_000)
}

/// A running cluster mode: its tasks, and the Lease to give up on a clean
/// shutdown.
pub struct ClusterMode {
    tasks: Vec<JoinHandle<()>>,
    elector: Option<Arc<Elector>>,
    link: Arc<ControllerLink>,
}

impl ClusterMode {
    /// Stops the controller and the session, then releases the controller
    /// Lease if this broker holds it, so another broker takes over at once
    /// rather than after the lease duration (a rolling restart does not
    /// leave the cluster without a controller for that long).
    pub async fn stop(self) {
        // Controlled shutdown first, while the controller (perhaps this
        // broker) still serves.
        self.link.unregister().await;
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(elector) = self.elector {
            match tokio::time::timeout(Duration::from_secs(3), elector.release()).await {
                Ok(Ok(true)) => tracing::info!("released the controller Lease"),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot release the controller Lease; it expires by itself")
                }
                Err(_) => {
                    tracing::warn!("releasing the controller Lease timed out; it expires by itself")
                }
            }
        }
    }
}

/// Puts `broker` in cluster mode and starts its tasks. `inter_broker_tls`:
/// the inter-broker listener's TLS, which the controller endpoint then
/// serves and brokers dial it with ([`super::transport`]).
pub async fn start(
    broker: &Arc<Broker>,
    cli: &Cli,
    succession_token: String,
    inter_broker_tls: Option<Arc<TlsState>>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<ClusterMode> {
    let backend = match cli.cluster.as_str() {
        "dir" => Backend::Dir(
            cli.cluster_dir
                .clone()
                .context("--cluster dir needs --cluster-dir")?,
        ),
        "kubernetes" => kubernetes(broker, cli).await?,
        other => bail!("unknown cluster mode {other:?}"),
    };
    let config = broker.topics.broker_config();
    let listener = std::net::TcpListener::bind(cli.controller_listen).with_context(|| {
        format!(
            "binding the controller listener on {}",
            cli.controller_listen
        )
    })?;
    // TLS needs a truststore to verify brokers with; without one the
    // inter-broker listener's TLS cannot authenticate brokers, and the
    // endpoint stays in the clear (said at start).
    let tls = inter_broker_tls.filter(|t| {
        let usable = t.controller_server_config().is_some();
        if !usable {
            tracing::warn!("the inter-broker listener has TLS but no ssl.truststore: the controller endpoint serves in the clear");
        }
        usable
    });
    let address = controller_address(cli, broker, listener.local_addr()?, tls.is_some());
    let link = Arc::new(ControllerLink::new(
        tokio::runtime::Handle::current(),
        tls.clone(),
    ));
    broker.join_cluster(link.clone());
    broker.groups.start_unowned();
    broker.txns.start_unowned();
    let leading = match &backend {
        Backend::Dir(dir) => super::election::file_lease(
            dir.clone(),
            format!("{}-{}", broker.node_id, uuid::Uuid::new_v4().simple()),
            super::election::LeaseTimings::new(
                Duration::from_millis(config.controller_lease_duration_ms.max(1) as u64),
                Duration::from_millis(config.controller_lease_retry_ms.max(1) as u64),
            ),
            shutdown.clone(),
        ),
        Backend::Kube { elector, .. } => super::kube_store::leadership(elector.clone()),
    };
    let host = HostConfig {
        backend: backend.clone(),
        listener,
        address: address.clone(),
        tls,
        settings: ControllerSettings {
            controller_id: broker.node_id,
            session_timeout_ms: config.broker_session_timeout_ms.max(1),
            takeover_grace_ms: takeover_grace_ms(
                config.broker_session_timeout_ms,
                config.controller_lease_duration_ms,
            ),
            clock: system_clock(),
            defaults: CreateDefaults {
                num_partitions: config.num_partitions,
                replication_factor: config.default_replication_factor,
            },
            delete_topic_enable: config.delete_topic_enable,
            leader_rebalance_interval_ms: config
                .auto_leader_rebalance_enable
                .then(|| config.leader_imbalance_check_interval_seconds.max(1) * 1000),
        },
        tick: Duration::from_millis(500),
    };
    let heartbeat =
        Duration::from_millis(config.broker_heartbeat_interval_ms.clamp(10, 60_000) as u64);
    tracing::info!(mode = %cli.cluster, controller_address = %address, "cluster mode");
    let elector = match &backend {
        Backend::Kube { elector, .. } => Some(elector.clone()),
        Backend::Dir(_) => None,
    };
    let tasks = vec![
        tokio::spawn(super::host::run(host, leading, shutdown.clone())),
        tokio::spawn(super::session::run(
            broker.clone(),
            SessionConfig {
                backend,
                heartbeat,
                link: link.clone(),
                succession_token,
            },
            shutdown.clone(),
        )),
        tokio::spawn(crate::replication::manager::run_isr_changes(
            broker.clone(),
            link.clone(),
            shutdown,
        )),
    ];
    Ok(ClusterMode {
        tasks,
        elector,
        link,
    })
}
