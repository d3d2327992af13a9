//! `moldau-operator`: runs the KafkaCluster, KafkaTopic and KafkaRebalance
//! controllers behind Lease-based leader election, with `/metrics`,
//! `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use moldau_operator::context::{Context, Tunables};
use moldau_operator::events::Events;
use moldau_operator::leader::{ElectionConfig, LeaderElector};
use moldau_operator::telemetry::{self, Metrics};
use moldau_operator::{cluster, quota, rebalance, retention, topic, user};

/// The Moldau Kubernetes operator.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Address of the HTTP endpoints (/metrics, /healthz, /readyz): `ip:port`,
    /// `[ipv6]:port` or `ipv6:port` (so `$(POD_IP):8080` works on IPv6 pods).
    /// The chart binds the pod IP only, never a wildcard address.
    #[arg(
        long,
        env = "MOLDAU_OPERATOR_HTTP_LISTEN",
        default_value = "0.0.0.0:8080",
        value_parser = telemetry::parse_listen_addr
    )]
    http_listen: SocketAddr,
    /// The operator's own namespace (holds the leader Lease).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    namespace: String,
    /// This replica's identity in the Lease (the pod name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Only watch resources in this namespace (all namespaces when unset).
    #[arg(long, env = "MOLDAU_WATCH_NAMESPACE")]
    watch_namespace: Option<String>,
    /// Contend for the leader Lease before reconciling.
    #[arg(long, env = "MOLDAU_LEADER_ELECTION", default_value_t = true, action = clap::ArgAction::Set)]
    leader_election: bool,
    /// Name of the leader Lease.
    #[arg(long, default_value = "moldau-operator")]
    lease_name: String,
    /// Seconds a Lease stays valid without renewal.
    #[arg(long, env = "MOLDAU_LEASE_DURATION", default_value_t = 15)]
    lease_duration: u64,
    /// Seconds the leader keeps trying to renew before it stops reconciling.
    #[arg(long, env = "MOLDAU_LEASE_RENEW_DEADLINE", default_value_t = 10)]
    lease_renew_deadline: u64,
    /// Seconds between leader election attempts.
    #[arg(long, env = "MOLDAU_LEASE_RETRY_PERIOD", default_value_t = 2)]
    lease_retry_period: u64,
    /// Seconds between periodic reconciles of a topic (drift repair).
    #[arg(long, env = "MOLDAU_TOPIC_RESYNC", default_value_t = 45)]
    topic_resync: u64,
    /// Seconds between periodic reconciles of a settled cluster.
    #[arg(long, env = "MOLDAU_CLUSTER_RESYNC", default_value_t = 60)]
    cluster_resync: u64,
    /// Seconds before retrying something in progress or failing.
    #[arg(long, env = "MOLDAU_RETRY", default_value_t = 10)]
    retry: u64,
    /// Seconds allowed for each Kafka admin network step.
    #[arg(long, env = "MOLDAU_KAFKA_TIMEOUT", default_value_t = 10)]
    kafka_timeout: u64,
    /// Log as JSON lines.
    #[arg(long, env = "MOLDAU_LOG_JSON")]
    log_json: bool,
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

async fn run_controllers(ctx: Arc<Context>, namespace: Option<String>) {
    tokio::join!(
        cluster::controller::run(ctx.clone(), namespace.clone()),
        topic::controller::run(ctx.clone(), namespace.clone()),
        quota::controller::run(ctx.clone(), namespace.clone()),
        retention::controller::run(ctx.clone(), namespace.clone()),
        user::controller::run(ctx.clone(), namespace.clone()),
        rebalance::controller::run(ctx, namespace),
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if args.log_json {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .json()
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }

    let identity = match args.identity.clone() {
        Some(id) if !id.is_empty() => id,
        _ => format!("moldau-operator-{}", uuid::Uuid::new_v4()),
    };
    let election = ElectionConfig {
        lease_name: args.lease_name.clone(),
        namespace: args.namespace.clone(),
        identity: identity.clone(),
        lease_duration: Duration::from_secs(args.lease_duration),
        renew_deadline: Duration::from_secs(args.lease_renew_deadline),
        retry_period: Duration::from_secs(args.lease_retry_period),
    };
    if args.leader_election {
        election
            .validate()
            .map_err(anyhow::Error::msg)
            .context("invalid leader election flags")?;
    }

    let metrics = Arc::new(Metrics::new());
    let (bound, server) = telemetry::serve(args.http_listen, metrics.clone())
        .await
        .with_context(|| format!("binding {}", args.http_listen))?;
    tokio::spawn(async move {
        if let Err(e) = server.await {
            tracing::error!(error = %e, "HTTP server failed");
        }
    });
    tracing::info!(%bound, %identity, "moldau-operator starting");

    let client = kube::Client::try_default()
        .await
        .context("building the Kubernetes client")?;
    let ctx = Arc::new(Context {
        client: client.clone(),
        metrics: metrics.clone(),
        events: Events::new(client.clone(), Some(identity.clone())),
        tunables: Tunables {
            cluster_resync: Duration::from_secs(args.cluster_resync),
            topic_resync: Duration::from_secs(args.topic_resync),
            retry: Duration::from_secs(args.retry),
            kafka_timeout: Duration::from_secs(args.kafka_timeout),
        },
    });
    metrics.set_ready(true);

    if !args.leader_election {
        metrics.set_leader(true);
        tokio::select! {
            _ = run_controllers(ctx, args.watch_namespace.clone()) => anyhow::bail!("controllers stopped"),
            _ = shutdown_signal() => {
                tracing::info!("shutting down");
                return Ok(());
            }
        }
    }

    let mut elector = LeaderElector::new(client, election);
    tracing::info!(lease = %args.lease_name, namespace = %args.namespace, "waiting for leadership");
    tokio::select! {
        _ = elector.acquire() => {}
        _ = shutdown_signal() => {
            tracing::info!("shutting down before becoming leader");
            return Ok(());
        }
    }
    metrics.set_leader(true);
    let mut controllers = tokio::spawn(run_controllers(ctx, args.watch_namespace.clone()));
    let abort = controllers.abort_handle();
    tokio::select! {
        lost = elector.hold() => {
            abort.abort();
            metrics.set_leader(false);
            metrics.set_healthy(false);
            tracing::error!(reason = %lost.0, "lost leadership; stopped reconciling");
            anyhow::bail!("lost leadership: {}", lost.0);
        }
        _ = shutdown_signal() => {
            abort.abort();
            metrics.set_leader(false);
            let _ = controllers.await;
            if let Err(e) = elector.release().await {
                tracing::warn!(error = %e, "could not release the lease");
            } else {
                tracing::info!("released the lease");
            }
            Ok(())
        }
        res = &mut controllers => {
            metrics.set_leader(false);
            let _ = elector.release().await;
            anyhow::bail!("controllers stopped: {res:?}");
        }
    }
}
