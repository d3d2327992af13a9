//! Prometheus metrics (reconciliations, errors and durations per kind,
//! leadership) and the operator's HTTP endpoints: `/metrics`, `/healthz`,
//! `/readyz`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Label set: the resource kind reconciled.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `KafkaCluster` or `KafkaTopic`.
    pub kind: String,
}

type HistogramFamily = Family<KindLabel, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// The operator's metrics and health flags.
pub struct Metrics {
    registry: Registry,
    reconciliations: Family<KindLabel, Counter>,
    errors: Family<KindLabel, Counter>,
    durations: HistogramFamily,
    leader: Gauge,
    ready: AtomicBool,
    healthy: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered under the `moldau_operator` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("moldau_operator");
        let reconciliations = Family::<KindLabel, Counter>::default();
        let errors = Family::<KindLabel, Counter>::default();
        let durations: HistogramFamily = Family::new_with_constructor(duration_histogram);
        let leader = Gauge::default();
        registry.register(
            "reconciliations",
            "Reconciliations started, per kind",
            reconciliations.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciliations that failed, per kind",
            errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of reconciliations, per kind",
            durations.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease",
            leader.clone(),
        );
        Metrics {
            registry,
            reconciliations,
            errors,
            durations,
            leader,
            ready: AtomicBool::new(false),
            healthy: AtomicBool::new(true),
        }
    }

    fn label(kind: &str) -> KindLabel {
        KindLabel {
            kind: kind.to_string(),
        }
    }

    /// Counts a reconciliation of `kind` that took `elapsed`.
    pub fn reconciled(&self, kind: &str, elapsed: Duration) {
        self.reconciliations.get_or_create(&Self::label(kind)).inc();
        self.durations
            .get_or_create(&Self::label(kind))
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a failed reconciliation of `kind`.
    pub fn failed(&self, kind: &str) {
        self.errors.get_or_create(&Self::label(kind)).inc();
    }

    /// Records whether this replica leads.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Marks the process ready (`/readyz` answers 200).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Marks the process unhealthy (`/healthz` answers 503).
    pub fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::Relaxed);
    }

    /// The metrics in Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

async fn metrics(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.render(),
    )
}

async fn healthz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.healthy.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "unhealthy")
    }
}

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// The HTTP routes.
pub fn router(metrics_state: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(metrics_state)
}

/// Parses a listen address given as `ip:port`, `[ipv6]:port` or an
/// unbracketed `ipv6:port`. The last form is what `$(POD_IP):8080` expands to
/// on an IPv6 pod (Kubernetes env expansion cannot add brackets); since a port
/// is required, the text after the last `:` is always the port, so the form is
/// unambiguous. Host names are refused: the endpoint binds one address.
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let unbracketed = s.rsplit_once(':').and_then(|(host, port)| {
        let ip = host.parse::<std::net::Ipv6Addr>().ok()?;
        Some(SocketAddr::new(ip.into(), port.parse().ok()?))
    });
    unbracketed.ok_or_else(|| format!("{s:?} is not ip:port, [ipv6]:port or ipv6:port"))
}

/// Binds `addr` and serves the routes until the task is dropped. Returns the
/// bound address (useful with port 0) and the server future.
pub async fn serve(
    addr: SocketAddr,
    metrics_state: Arc<Metrics>,
) -> std::io::Result<(
    SocketAddr,
    impl std::future::Future<Output = std::io::Result<()>>,
)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(metrics_state);
    Ok((bound, async move { axum::serve(listener, app).await }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_of_both_families_with_or_without_brackets() {
        let ok = |s: &str| parse_listen_addr(s).unwrap().to_string();
        assert_eq!(ok("127.1.2.3:8080"), "127.1.2.3:8080");
        assert_eq!(ok("0.0.0.0:8080"), "0.0.0.0:8080");
        assert_eq!(ok("[fd00::5]:8080"), "[fd00::5]:8080");
        // `$(POD_IP):8080` on an IPv6 pod.
        assert_eq!(ok("fd00::5:8080"), "[fd00::5]:8080");
        assert_eq!(ok("fd00:1:2:3:4:5:6:7:8080"), "[fd00:1:2:3:4:5:6:7]:8080");
        assert_eq!(ok("::1:8080"), "[::1]:8080");
        assert_eq!(ok("::ffff:127.1.2.3:8080"), "[::ffff:127.1.2.3]:8080");
        for bad in [
            "127.1.2.3",
            "fd00::5",
            "localhost:8080",
            "127.1.2.3:http",
            "[fd00::5]",
            "",
        ] {
            assert!(parse_listen_addr(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn metrics_render_with_kind_labels() {
        let m = Metrics::new();
        m.reconciled("KafkaTopic", Duration::from_millis(20));
        m.failed("KafkaTopic");
        m.set_leader(true);
        let text = m.render();
        assert!(
            text.contains("moldau_operator_reconciliations_total{kind=\"KafkaTopic\"} 1"),
            "{text}"
        );
        assert!(text.contains("moldau_operator_reconcile_errors_total{kind=\"KafkaTopic\"} 1"));
        assert!(text
            .contains("moldau_operator_reconcile_duration_seconds_count{kind=\"KafkaTopic\"} 1"));
        assert!(text.contains("moldau_operator_leader 1"));
    }

    #[tokio::test]
    async fn http_endpoints() {
        let m = Arc::new(Metrics::new());
        let (addr, server) = serve("127.0.0.1:0".parse().unwrap(), m.clone())
            .await
            .unwrap();
        let task = tokio::spawn(server);
        let get = |path: &'static str| async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
        m.set_ready(true);
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/metrics").await.contains("moldau_operator_leader"));
        task.abort();
    }
}
