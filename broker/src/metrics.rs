//! Prometheus metrics of the broker, rendered in the text exposition format
//! by the HTTP endpoint. Counters are updated by the handlers; per-partition
//! log sizes are read at scrape time.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabel {
    pub topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabel {
    pub api: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaLabel {
    pub topic: String,
    pub partition: String,
    pub replica: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabel {
    pub topic: String,
    pub partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

/// One value a client pushed (KIP-714): the client instance, its client
/// id, the OTLP metric name and the data point's attributes (`k=v,…`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientMetricLabel {
    pub client_instance_id: String,
    pub client_id: String,
    pub name: String,
    pub attributes: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TxnEndLabel {
    pub result: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabel {
    pub version: String,
    pub revision: String,
}

fn new_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupPartitionLabel {
    pub group: String,
    pub topic: String,
    pub partition: String,
}

#[derive(Debug)]
pub struct Metrics {
    pub bytes_in: Family<TopicLabel, Counter>,
    pub bytes_out: Family<TopicLabel, Counter>,
    pub records_in: Family<TopicLabel, Counter>,
    /// Produced batches the leader recompressed to the topic's
    /// `compression.type` (never counted with `producer`).
    pub produce_recompressed_batches: Family<TopicLabel, Counter>,
    /// Partitions of produce requests whose batches were checked before
    /// their turn, as the connection read them, and whose check the
    /// handler used (`protocol::connection` reads ahead).
    pub produce_checked_ahead: Counter,
    /// Such checks thrown away because the partition's rules changed
    /// before its turn came (checked again with the new ones).
    pub produce_checked_again: Counter,
    pub requests: Family<ApiLabel, Counter>,
    pub request_errors: Family<ApiLabel, Counter>,
    pub request_seconds: Family<ApiLabel, Histogram, fn() -> Histogram>,
    pub log_size_bytes: Family<PartitionLabel, Gauge>,
    pub log_end_offset: Family<PartitionLabel, Gauge>,
    pub log_start_offset: Family<PartitionLabel, Gauge>,
    /// High watermark minus last stable offset (records held back from
    /// read_committed consumers by open transactions).
    pub partition_lso_lag: Family<PartitionLabel, Gauge>,
    pub group_committed_offset: Family<GroupPartitionLabel, Gauge>,
    pub group_lag: Family<GroupPartitionLabel, Gauge>,
    /// Partitions led here whose ISR is smaller than their replica set.
    pub under_replicated_partitions: Gauge,
    /// Partitions led here whose ISR is smaller than `min.insync.replicas`.
    pub under_min_isr_partitions: Gauge,
    /// The active controller only: partitions without a leader.
    pub offline_partitions: Gauge,
    /// Requests in flight past their own timeout plus a grace, at the
    /// scrape (see `protocol::in_flight`): always 0 unless a bug holds one.
    pub requests_overdue: Gauge,
    /// Requests answered past their own timeout plus a grace, by API.
    pub requests_answered_overdue: Family<ApiLabel, Counter>,
    /// Partitions led here.
    pub leader_count: Gauge,
    /// ISR changes this broker's leaderships had committed.
    pub isr_shrinks: Counter,
    pub isr_expands: Counter,
    /// Per partition led here and follower: offsets behind the log end.
    pub follower_lag: Family<ReplicaLabel, Gauge>,
    pub connections: Gauge,
    pub closed_bad_connections: Counter,
    /// New connections closed at once by a connection limit, per limit.
    pub connections_refused: Family<ReasonLabel, Counter>,
    /// Connections closed after `connections.max.idle.ms` without a request.
    pub connections_closed_idle: Counter,
    /// Connections closed because a request did not arrive in time.
    pub requests_read_timed_out: Counter,
    /// Request bytes reserved right now, and the budget (set at scrape).
    pub request_bytes_in_flight: Gauge,
    pub request_bytes_budget: Gauge,
    /// Open file descriptors of the process (counted at scrape).
    pub open_fds: Gauge,
    /// The soft RLIMIT_NOFILE (read at scrape).
    pub max_fds: Gauge,
    /// What the last start had to recover (set once at start): partitions
    /// found without a clean-shutdown marker, and segments re-validated
    /// with their indexes rebuilt. Both 0 after a clean stop.
    pub recovery_unclean_partitions: Gauge,
    pub recovery_segments_recovered: Gauge,
    /// Bytes of segment data read at start to re-validate segments and to
    /// rebuild the producer state (0 after a clean stop), and partitions
    /// whose producer state started from a snapshot.
    pub recovery_bytes_read: Counter,
    pub producer_snapshots_loaded: Counter,
    /// Client quotas: throttle time given, by quota kind and client id.
    pub quota_throttle_time_ms: Family<crate::quota::manager::QuotaLabels, Counter>,
    /// Client quotas: bytes (or handling ms) counted, by kind and client id.
    pub quota_recorded: Family<crate::quota::manager::QuotaLabels, Counter>,
    /// Fetch sessions (KIP-227) in the cache.
    pub fetch_sessions: Gauge,
    /// Fetches of the session protocol, by kind: `full` (asking for a new
    /// session) and `incremental` (accepted on a session).
    pub fetch_session_requests: Family<KindLabel, Counter>,
    /// Fetch sessions evicted to admit new ones.
    pub fetch_session_evictions: Counter,
    /// Incremental fetches refused, by error
    /// (`fetch_session_id_not_found`, `invalid_fetch_session_epoch`).
    pub fetch_session_errors: Family<ErrorLabel, Counter>,
    /// `moldau_transactions{state}`: the transactional ids this broker
    /// coordinates, by their transaction's state (Kafka's names: Empty,
    /// Ongoing, PrepareCommit, PrepareAbort, CompleteCommit,
    /// CompleteAbort), counted at scrape. Named for what ListTransactions
    /// (`kafka-transactions.sh list`) shows, one row per id with its
    /// state: the sum is that list's length on this broker, and
    /// `state="Ongoing"` is the open transactions.
    pub transactions: Family<StateLabel, Gauge>,
    /// `moldau_transactions_ended_total{result,reason}`: transactions this
    /// broker ended as coordinator since it started, once the decision
    /// (PrepareCommit/PrepareAbort) was durable: `commit`/`client`,
    /// `abort`/`client` (EndTxn), `abort`/`timeout` (past
    /// `transaction.timeout.ms`), `abort`/`fenced` (a new producer
    /// instance's InitProducerId). Mirrored at scrape from the
    /// coordinator's own counts (`TxnCoordinator::ended`).
    pub transactions_ended: Family<TxnEndLabel, Counter>,
    /// `moldau_transaction_markers_pending`: partitions of prepared
    /// transactions whose COMMIT/ABORT marker is not written yet (retried
    /// every 200 ms), counted at scrape.
    pub transaction_markers_pending: Gauge,
    /// `moldau_client_metric{client_instance_id,client_id,name,attributes}`:
    /// the last value each client pushed of each metric (KIP-714 client
    /// telemetry), within `crate::telemetry`'s caps; mirrored at scrape.
    pub client_metric: Family<ClientMetricLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// `moldau_client_telemetry_dropped_total{reason}`: pushed values not
    /// shown for a cap (`clients`, `series`); mirrored at scrape.
    pub client_telemetry_dropped: Family<ReasonLabel, Counter>,
    /// `moldau_client_telemetry_instances`: client instances tracked.
    pub client_telemetry_instances: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            bytes_in: Family::default(),
            bytes_out: Family::default(),
            records_in: Family::default(),
            produce_recompressed_batches: Family::default(),
            produce_checked_ahead: Counter::default(),
            produce_checked_again: Counter::default(),
            requests: Family::default(),
            request_errors: Family::default(),
            request_seconds: Family::new_with_constructor(new_histogram),
            log_size_bytes: Family::default(),
            log_end_offset: Family::default(),
            log_start_offset: Family::default(),
            partition_lso_lag: Family::default(),
            group_committed_offset: Family::default(),
            group_lag: Family::default(),
            under_replicated_partitions: Gauge::default(),
            under_min_isr_partitions: Gauge::default(),
            offline_partitions: Gauge::default(),
            requests_overdue: Gauge::default(),
            requests_answered_overdue: Family::default(),
            leader_count: Gauge::default(),
            isr_shrinks: Counter::default(),
            isr_expands: Counter::default(),
            follower_lag: Family::default(),
            connections: Gauge::default(),
            closed_bad_connections: Counter::default(),
            connections_refused: Family::default(),
            connections_closed_idle: Counter::default(),
            requests_read_timed_out: Counter::default(),
            request_bytes_in_flight: Gauge::default(),
            request_bytes_budget: Gauge::default(),
            open_fds: Gauge::default(),
            max_fds: Gauge::default(),
            recovery_unclean_partitions: Gauge::default(),
            recovery_segments_recovered: Gauge::default(),
            recovery_bytes_read: Counter::default(),
            producer_snapshots_loaded: Counter::default(),
            quota_throttle_time_ms: Family::default(),
            quota_recorded: Family::default(),
            fetch_sessions: Gauge::default(),
            fetch_session_requests: Family::default(),
            fetch_session_evictions: Counter::default(),
            fetch_session_errors: Family::default(),
            transactions: Family::default(),
            transactions_ended: Family::default(),
            transaction_markers_pending: Gauge::default(),
            client_metric: Family::default(),
            client_telemetry_dropped: Family::default(),
            client_telemetry_instances: Gauge::default(),
        }
    }
}

impl Metrics {
    pub fn topic(topic: &str) -> TopicLabel {
        TopicLabel {
            topic: topic.to_string(),
        }
    }

    /// Renders every metric in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut registry = Registry::with_prefix("moldau");
        // An info metric as a gauge of 1 (the classic text format has no
        // info type): `moldau_build_info{version,revision} 1`.
        let build_info = Family::<BuildLabel, Gauge>::default();
        build_info
            .get_or_create(&BuildLabel {
                version: crate::build_info::VERSION.to_string(),
                revision: crate::build_info::REVISION.to_string(),
            })
            .set(1);
        registry.register(
            "build_info",
            "The broker's version and source revision (always 1)",
            build_info,
        );
        registry.register(
            "bytes_in",
            "Record bytes appended, per topic",
            self.bytes_in.clone(),
        );
        registry.register(
            "bytes_out",
            "Record bytes sent to fetchers, per topic",
            self.bytes_out.clone(),
        );
        registry.register(
            "records_in",
            "Records appended, per topic",
            self.records_in.clone(),
        );
        registry.register(
            "produce_recompressed_batches",
            "Produced batches recompressed to the topic's compression.type, per topic",
            self.produce_recompressed_batches.clone(),
        );
        registry.register(
            "produce_checked_ahead",
            "Produce partitions whose batches were checked before their turn, as the connection read them",
            self.produce_checked_ahead.clone(),
        );
        registry.register(
            "produce_checked_again",
            "Produce partitions checked ahead whose check was redone because the partition's rules changed",
            self.produce_checked_again.clone(),
        );
        registry.register(
            "requests",
            "Requests handled, per API",
            self.requests.clone(),
        );
        registry.register(
            "request_errors",
            "Requests answered with an error, per API",
            self.request_errors.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Request handling time, per API",
            self.request_seconds.clone(),
        );
        registry.register(
            "log_size_bytes",
            "Bytes of all segments, per partition",
            self.log_size_bytes.clone(),
        );
        registry.register(
            "log_end_offset",
            "Next offset to be written, per partition",
            self.log_end_offset.clone(),
        );
        registry.register(
            "log_start_offset",
            "First offset kept, per partition",
            self.log_start_offset.clone(),
        );
        registry.register(
            "partition_lso_lag",
            "High watermark minus last stable offset (held back by open transactions), per partition",
            self.partition_lso_lag.clone(),
        );
        registry.register(
            "group_committed_offset",
            "Committed offset per consumer group and partition",
            self.group_committed_offset.clone(),
        );
        registry.register(
            "group_lag",
            "High watermark minus committed offset, per consumer group and partition",
            self.group_lag.clone(),
        );
        registry.register(
            "under_replicated_partitions",
            "Partitions led by this broker whose in-sync replicas are fewer than their replicas",
            self.under_replicated_partitions.clone(),
        );
        registry.register(
            "under_min_isr_partitions",
            "Partitions led by this broker whose in-sync replicas are fewer than min.insync.replicas (acks=all is refused)",
            self.under_min_isr_partitions.clone(),
        );
        registry.register(
            "requests_overdue",
            "Requests in flight longer than their own timeout (or 30 s) plus 5 s; a broker never holds one that long, so anything but 0 is a bug",
            self.requests_overdue.clone(),
        );
        registry.register(
            "requests_answered_overdue",
            "Requests answered later than their own timeout (or 30 s) plus 5 s, by API",
            self.requests_answered_overdue.clone(),
        );
        registry.register(
            "offline_partitions",
            "Partitions without a leader (reported by the active controller's broker only, so sums count each once)",
            self.offline_partitions.clone(),
        );
        registry.register(
            "leader_count",
            "Partitions led by this broker",
            self.leader_count.clone(),
        );
        registry.register(
            "isr_shrinks",
            "ISR shrinks committed for partitions led by this broker",
            self.isr_shrinks.clone(),
        );
        registry.register(
            "isr_expands",
            "ISR expansions committed for partitions led by this broker",
            self.isr_expands.clone(),
        );
        registry.register(
            "follower_lag_offsets",
            "Per partition led here and follower: offsets the follower is behind the leader's log end",
            self.follower_lag.clone(),
        );
        registry.register(
            "connections",
            "Open client connections",
            self.connections.clone(),
        );
        registry.register(
            "closed_bad_connections",
            "Connections closed because of malformed or unsupported requests",
            self.closed_bad_connections.clone(),
        );
        registry.register(
            "connections_refused",
            "New connections closed at once by a connection limit, per limit",
            self.connections_refused.clone(),
        );
        registry.register(
            "connections_closed_idle",
            "Connections closed after connections.max.idle.ms without a request",
            self.connections_closed_idle.clone(),
        );
        registry.register(
            "requests_read_timed_out",
            "Connections closed because a request did not arrive within socket.request.read.timeout.ms",
            self.requests_read_timed_out.clone(),
        );
        registry.register(
            "request_bytes_in_flight",
            "Bytes of requests being read or handled (queued.max.request.bytes budget in use)",
            self.request_bytes_in_flight.clone(),
        );
        registry.register(
            "request_bytes_budget",
            "The queued.max.request.bytes budget in effect",
            self.request_bytes_budget.clone(),
        );
        if let Some(n) = crate::resources::open_fds() {
            self.open_fds.set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        if let Ok((soft, _)) = crate::resources::nofile_limits() {
            self.max_fds.set(i64::try_from(soft).unwrap_or(i64::MAX));
        }
        registry.register(
            "open_fds",
            "Open file descriptors of the broker process",
            self.open_fds.clone(),
        );
        registry.register(
            "max_fds",
            "The broker's open file limit (soft RLIMIT_NOFILE)",
            self.max_fds.clone(),
        );
        registry.register(
            "log_recovery_unclean_partitions",
            "Partitions the last start found without a clean-shutdown marker",
            self.recovery_unclean_partitions.clone(),
        );
        registry.register(
            "log_recovery_segments_recovered",
            "Segments the last start re-validated (CRC) and re-indexed",
            self.recovery_segments_recovered.clone(),
        );
        registry.register(
            "log_recovery_bytes_read",
            "Bytes of segment data the start read to re-validate segments and rebuild idempotent producer state (0 after a clean stop)",
            self.recovery_bytes_read.clone(),
        );
        registry.register(
            "log_producer_snapshots_loaded",
            "Partitions whose idempotent producer state the start loaded from a snapshot",
            self.producer_snapshots_loaded.clone(),
        );
        registry.register(
            "quota_throttle_time_ms",
            "Throttle time given to clients over a quota (KIP-219), by quota kind (produce, fetch, request) and client id",
            self.quota_throttle_time_ms.clone(),
        );
        registry.register(
            "quota_recorded",
            "Amounts counted against client quotas: bytes for produce and fetch, handling milliseconds for request; rate() of it is the client's rate",
            self.quota_recorded.clone(),
        );
        registry.register(
            "fetch_sessions",
            "Incremental fetch sessions (KIP-227) in the broker's cache",
            self.fetch_sessions.clone(),
        );
        registry.register(
            "fetch_session_requests",
            "Fetches of the session protocol, by kind: full (asking for a new session) and incremental (served on a session)",
            self.fetch_session_requests.clone(),
        );
        registry.register(
            "fetch_session_evictions",
            "Fetch sessions evicted from a full cache (max.incremental.fetch.session.cache.slots) to admit new ones",
            self.fetch_session_evictions.clone(),
        );
        registry.register(
            "fetch_session_errors",
            "Incremental fetches refused, by error (fetch_session_id_not_found, invalid_fetch_session_epoch)",
            self.fetch_session_errors.clone(),
        );
        registry.register(
            "transactions",
            "Transactional ids this broker coordinates, by the state of their transaction (Ongoing: open transactions)",
            self.transactions.clone(),
        );
        registry.register(
            "transactions_ended",
            "Transactions this broker ended as coordinator, by result (commit, abort) and reason (client: EndTxn, timeout: past transaction.timeout.ms, fenced: a new producer instance)",
            self.transactions_ended.clone(),
        );
        registry.register(
            "transaction_markers_pending",
            "Partitions of prepared transactions coordinated here still awaiting their COMMIT/ABORT marker",
            self.transaction_markers_pending.clone(),
        );
        registry.register(
            "client_metric",
            "The last value a client pushed of a metric (KIP-714 client telemetry), by client instance, client id, OTLP metric name and data point attributes",
            self.client_metric.clone(),
        );
        registry.register(
            "client_telemetry_dropped",
            "Client telemetry values not shown for a cap (clients: over the clients shown, series: over the series per client or in all)",
            self.client_telemetry_dropped.clone(),
        );
        registry.register(
            "client_telemetry_instances",
            "Client instances (KIP-714) the broker tracks",
            self.client_telemetry_instances.clone(),
        );
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        out
    }
}
