//! Starts a broker's cluster-mode tasks: the election, the controller host
//! (serving while this broker leads) and the session to the active
//! controller. Standalone mode starts none of them.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::cluster::CreateDefaults;
use super::host::{Backend, HostConfig};
use super::link::ControllerLink;
use super::rpc::{system_clock, ControllerSettings};
use super::session::SessionConfig;
use crate::broker::Broker;
use crate::config::Cli;

/// Whether `cli` asks for cluster mode.
pub fn is_cluster(cli: &Cli) -> bool {
    cli.cluster != "standalone"
}

/// The controller's gRPC address others dial: `http://host:port`.
fn controller_address(cli: &Cli, broker: &Broker, bound: std::net::SocketAddr) -> String {
    let hostport = cli.controller_advertised.clone().unwrap_or_else(|| {
        let host = &broker.advertised_host;
        if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{}", bound.port())
        } else {
            format!("{host}:{}", bound.port())
        }
    });
    format!("http://{hostport}")
}

/// Puts `broker` in cluster mode and starts its tasks.
pub fn start(
    broker: &Arc<Broker>,
    cli: &Cli,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let backend = match cli.cluster.as_str() {
        "dir" => Backend::Dir(
            cli.cluster_dir
                .clone()
                .context("--cluster dir needs --cluster-dir")?,
        ),
        other => bail!("cluster mode {other:?} is not available in this build yet"),
    };
    let config = broker.topics.broker_config();
    let listener = std::net::TcpListener::bind(cli.controller_listen).with_context(|| {
        format!(
            "binding the controller listener on {}",
            cli.controller_listen
        )
    })?;
    let address = controller_address(cli, broker, listener.local_addr()?);
    let link = Arc::new(ControllerLink::new(tokio::runtime::Handle::current()));
    broker.join_cluster(link.clone());
    broker.groups.start_unowned();
    let leading = match &backend {
        Backend::Dir(dir) => super::election::file_lock(dir.clone(), shutdown.clone()),
    };
    let host = HostConfig {
        backend: backend.clone(),
        listener,
        address: address.clone(),
        settings: ControllerSettings {
            controller_id: broker.node_id,
            session_timeout_ms: config.broker_session_timeout_ms.max(1),
            clock: system_clock(),
            defaults: CreateDefaults {
                num_partitions: config.num_partitions,
                replication_factor: config.default_replication_factor,
            },
            delete_topic_enable: config.delete_topic_enable,
        },
        tick: Duration::from_millis(500),
    };
    let heartbeat =
        Duration::from_millis(config.broker_heartbeat_interval_ms.clamp(10, 60_000) as u64);
    tracing::info!(mode = %cli.cluster, controller_address = %address, "cluster mode");
    Ok(vec![
        tokio::spawn(super::host::run(host, leading, shutdown.clone())),
        tokio::spawn(super::session::run(
            broker.clone(),
            SessionConfig {
                backend,
                heartbeat,
                link,
            },
            shutdown,
        )),
    ])
}
