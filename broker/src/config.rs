//! Broker configuration: command-line flags (with environment fallbacks) and
//! the Kafka-named broker properties (`num.partitions`, `log.retention.ms`, …)
//! read from an optional properties file and `--set key=value` overrides.
//!
//! This module only parses and validates; it does not open sockets or files
//! other than the properties file.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::Parser;

/// Command-line interface of `moldau-broker`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "moldau-broker",
    version = crate::build_info::VERSION_LINE,
    about = "Moldau: a Kafka-compatible streaming log broker"
)]
pub struct Cli {
    /// Address the Kafka listener binds: `ip:port`, `[ipv6]:port` or
    /// `ipv6:port` (what `$(POD_IP):9092` expands to on an IPv6 pod).
    /// The broker config `listeners` replaces it.
    #[arg(long, env = "MOLDAU_LISTEN", default_value = "127.0.0.1:9092", value_parser = parse_listen_addr)]
    pub listen: SocketAddr,
    /// host:port clients are told to connect to (defaults to the listen
    /// address); with several `listeners`, `advertised.listeners` says it
    /// per listener instead.
    #[arg(long, env = "MOLDAU_ADVERTISED_LISTENER")]
    pub advertised_listener: Option<String>,
    /// Address of the HTTP endpoint serving /metrics, /healthz and /readyz
    /// (same forms as `--listen`).
    #[arg(long, env = "MOLDAU_HTTP_LISTEN", default_value = "127.0.0.1:9644", value_parser = parse_listen_addr)]
    pub http_listen: SocketAddr,
    /// Directory holding the partitions' logs and the broker's metadata.
    #[arg(long, env = "MOLDAU_DATA_DIR", default_value = "moldau-data")]
    pub data_dir: PathBuf,
    /// This broker's node id.
    #[arg(long, env = "MOLDAU_NODE_ID", default_value_t = 0)]
    pub node_id: i32,
    /// Java properties file with Kafka broker config names.
    #[arg(long, env = "MOLDAU_CONFIG_FILE")]
    pub config_file: Option<PathBuf>,
    /// A broker property override, `key=value`; may be repeated; wins over the file.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// How this broker finds its cluster: `standalone` (the default: a
    /// cluster of one that keeps its metadata in its data directory),
    /// `dir` (brokers on one host sharing `--cluster-dir`), or `kubernetes`
    /// (brokers of `--cluster-name` in `--namespace`, a Lease electing the
    /// controller, metadata in `MetadataShard` objects).
    #[arg(long, env = "MOLDAU_CLUSTER", default_value = "standalone", value_parser = ["standalone", "dir", "kubernetes"])]
    pub cluster: String,
    /// `--cluster dir`: the directory the brokers share (metadata, and the
    /// lock that elects the controller).
    #[arg(long, env = "MOLDAU_CLUSTER_DIR")]
    pub cluster_dir: Option<PathBuf>,
    /// Name of the cluster this broker belongs to (its `KafkaCluster`).
    #[arg(long, env = "MOLDAU_CLUSTER_NAME", default_value = "moldau")]
    pub cluster_name: String,
    /// `--cluster kubernetes`: the namespace of the cluster's Lease and
    /// metadata objects (credentials: in-cluster, or `KUBECONFIG`).
    #[arg(long, env = "MOLDAU_NAMESPACE")]
    pub namespace: Option<String>,
    /// Cluster mode: where this broker serves the controller's gRPC
    /// endpoint when it is the active controller.
    #[arg(long, env = "MOLDAU_CONTROLLER_LISTEN", default_value = "127.0.0.1:9093", value_parser = parse_listen_addr)]
    pub controller_listen: SocketAddr,
    /// Cluster mode: the address other brokers dial for the controller
    /// (`host:port`); default: the advertised host with the controller
    /// listener's port.
    #[arg(long, env = "MOLDAU_CONTROLLER_ADVERTISED")]
    pub controller_advertised: Option<String>,
    /// Log filter (tracing `EnvFilter` syntax).
    #[arg(long, env = "MOLDAU_LOG", default_value = "info")]
    pub log: String,
    /// Check the broker properties (file and `--set`) and exit: 0 when the
    /// broker would start with them, 1 with each problem printed (a bad
    /// value, or a key neither Moldau nor Kafka knows). Starts nothing.
    #[arg(long)]
    pub check_config: bool,
    /// Log format: `text` or `json`.
    #[arg(long, env = "MOLDAU_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

/// A broker property that could not be understood.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("line {line} of the properties is not `key=value`: {text}")]
    Syntax { line: usize, text: String },
    #[error("invalid value {value:?} for {key}: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
}

/// Broker-wide settings, named after Kafka's broker configs.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerConfig {
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub delete_topic_enable: bool,
    pub socket_request_max_bytes: usize,
    pub message_max_bytes: i64,
    pub log_segment_bytes: i64,
    pub log_roll_ms: i64,
    pub log_retention_ms: i64,
    pub log_retention_bytes: i64,
    pub log_retention_check_interval_ms: i64,
    pub log_flush_interval_messages: i64,
    pub log_flush_interval_ms: i64,
    pub log_index_interval_bytes: i64,
    pub log_index_size_max_bytes: i64,
    pub log_message_timestamp_type: String,
    pub log_segment_delete_delay_ms: i64,
    pub log_cleanup_policy: String,
    /// `log.cleaner.io.max.bytes.per.second`: bytes the cleaner reads and
    /// writes per second, all compacted partitions together (Kafka's
    /// default, `Double.MAX_VALUE`, is no limit). Read at start.
    pub log_cleaner_io_max_bytes_per_second: f64,
    /// `log.cleaner.enable`: whether compacted topics are cleaned at all.
    pub log_cleaner_enable: bool,
    /// `log.cleaner.backoff.ms`: how often the cleaner looks for compacted
    /// partitions due for a pass (Kafka: 15 s).
    pub log_cleaner_backoff_ms: i64,
    pub group_initial_rebalance_delay_ms: i64,
    pub group_min_session_timeout_ms: i32,
    pub group_max_session_timeout_ms: i32,
    pub group_max_size: i32,
    /// `group.consumer.session.timeout.ms` (KIP-848 consumer groups)
    pub group_consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`
    pub group_consumer_heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`
    pub group_consumer_max_size: i32,
    /// `group.consumer.assignors`: `uniform`, `range` (the first is the
    /// default); Kafka also takes class names, which Moldau refuses.
    pub group_consumer_assignors: String,
    /// `group.consumer.migration.policy`: `bidirectional` (Kafka 4.x's
    /// default), `upgrade`, `downgrade` or `disabled` — the online
    /// conversions between classic and consumer groups allowed.
    pub group_consumer_migration_policy: crate::group::consumer::migration::MigrationPolicy,
    pub offsets_topic_num_partitions: i32,
    pub offsets_retention_minutes: i64,
    pub offset_metadata_max_bytes: i32,
    pub offsets_retention_check_interval_ms: i64,
    /// `max.connections`: open client connections in all (Kafka's default,
    /// unlimited, is further capped at start to half the process's file
    /// descriptor limit, so connections can never starve the logs).
    pub max_connections: usize,
    /// `max.connections.per.ip` and `max.connections.per.ip.overrides`.
    pub max_connections_per_ip: usize,
    pub max_connections_per_ip_overrides: String,
    /// `connections.max.idle.ms`: a connection with no request for this
    /// long is closed.
    pub connections_max_idle_ms: i64,
    /// `queued.max.request.bytes`: request bytes in flight across the
    /// broker; `-1` is unbounded (Kafka's default). Moldau's default is
    /// 256 MiB, raised to `socket.request.max.bytes` when that is larger.
    pub queued_max_request_bytes: i64,
    /// `socket.request.read.timeout.ms` (Moldau's own; Kafka has none): a
    /// request whose bytes do not all arrive within this time of its first
    /// byte closes the connection (slow or stalled senders).
    pub socket_request_read_timeout_ms: i64,
    /// `max.incremental.fetch.session.cache.slots`: fetch sessions (KIP-227)
    /// the broker keeps (0: none, every fetch is a full fetch).
    pub max_incremental_fetch_session_cache_slots: usize,
    /// `min.incremental.fetch.session.eviction.ms` (a constant in Kafka,
    /// a config here so tests can shorten it): a fetch session unused this
    /// long may be evicted, and one younger than this is only evicted by a
    /// follower's (see `fetch_session`).
    pub min_incremental_fetch_session_eviction_ms: u64,
    /// `broker.heartbeat.interval.ms` (cluster mode): how often this broker
    /// heartbeats to the controller (KRaft's name and default).
    pub broker_heartbeat_interval_ms: i64,
    /// `broker.session.timeout.ms` (cluster mode, KRaft's name and
    /// default): the controller fences a broker silent for this long.
    pub broker_session_timeout_ms: i64,
    /// `broker.rack`: replicas of a partition are spread over racks.
    pub broker_rack: Option<String>,
    /// `controller.lease.duration.ms` (Moldau's own): how long the
    /// controller's lease (a Kubernetes Lease, or the lease file of `dir`
    /// mode) stays valid without renewal, so about how long a failover
    /// takes when the controller's process stops answering. 8 s with a
    /// 1 s renewal: a lost controller costs clients the lease plus a 1 s
    /// grace (see `controller::rpc`), within Kafka's bound of a session
    /// timeout (9 s) plus a heartbeat (2 s), for one Lease write a second
    /// per cluster.
    pub controller_lease_duration_ms: i64,
    /// `controller.lease.retry.ms` (Moldau's own): how often the holder
    /// renews the lease and the others look at it.
    pub controller_lease_retry_ms: i64,
    /// `auto.leader.rebalance.enable`: give leaderships back to preferred
    /// replicas once they are in sync again.
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.check.interval.seconds`: how often.
    pub leader_imbalance_check_interval_seconds: i64,
    /// `offsets.topic.replication.factor` (cluster mode): replicas of each
    /// `__consumer_offsets` partition. As in Kafka, the topic is not
    /// created (FindCoordinator answers COORDINATOR_NOT_AVAILABLE, which
    /// clients retry) until that many brokers are in service. A standalone
    /// broker is its only replica whatever this says.
    pub offsets_topic_replication_factor: i16,
    /// `offsets.commit.timeout.ms`: how long a coordinator write waits for
    /// the offsets partition's in-sync replicas.
    pub offsets_commit_timeout_ms: i64,
    /// `transaction.state.log.num.partitions`: partitions of
    /// `__transaction_state` (Kafka: 50); a transactional id's coordinator
    /// is the leader of the partition it hashes to.
    pub transaction_state_log_num_partitions: i32,
    /// `transaction.state.log.replication.factor` (cluster mode; capped to
    /// the brokers in service, as the offsets topic's is not: see
    /// `Controller::ensure_transaction_topic`).
    pub transaction_state_log_replication_factor: i16,
    /// `transaction.state.log.min.isr`: the topic's `min.insync.replicas`
    /// (capped to its replication factor).
    pub transaction_state_log_min_isr: i32,
    /// `transaction.state.log.segment.bytes`.
    pub transaction_state_log_segment_bytes: i64,
    /// `transaction.max.timeout.ms`: the longest transaction timeout a
    /// producer may ask for (longer: INVALID_TRANSACTION_TIMEOUT).
    pub transaction_max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an idle transactional id is
    /// forgotten (tombstoned) after this long.
    pub transactional_id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`: how
    /// often the coordinator looks for transactions past their timeout.
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: i64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`: how
    /// often it looks for expired transactional ids.
    pub transaction_remove_expired_transaction_cleanup_interval_ms: i64,
    /// `transaction.partition.verification.enable` (KIP-890 part 1): a
    /// partition leader asks the transaction's coordinator whether a
    /// partition was added before it takes the first transactional batch
    /// of a transaction there (default true, as Kafka). Read at start.
    pub transaction_partition_verification_enable: bool,
    /// `transaction.version` (Moldau's own name for the finalized level
    /// of Kafka's `transaction.version` feature, which Kafka sets with
    /// `kafka-storage format --feature` or `kafka-features upgrade`): 2
    /// (the default, as a new Kafka 4 cluster) turns on KIP-890 part 2 for
    /// clients that follow it; 0 keeps every client on the older rules.
    /// Give every broker of a cluster the same level. Read at start.
    pub transaction_version: i16,
    /// The listeners and their security (issue 38): `listeners`,
    /// `advertised.listeners`, `listener.security.protocol.map`,
    /// `inter.broker.listener.name`, `sasl.enabled.mechanisms`, PLAIN's
    /// JAAS users, the `ssl.*` configs and
    /// `connection.failed.authentication.delay.ms`, each with Kafka's
    /// `listener.name.<name>.` prefix where Kafka has one (see
    /// `security::listener`). Without `listeners`: Kafka's PLAINTEXT,
    /// bound and advertised as the command line says. Read at start.
    pub listeners: crate::security::listener::Listeners,
    /// `authorizer.class.name` (Kafka's StandardAuthorizer, or empty for
    /// none), `super.users`, `allow.everyone.if.no.acl.found`: `None`
    /// without an authorizer (see `security::acl_admin`). Read at start.
    pub authorizer: Option<crate::security::acl::AuthorizerConfig>,
    /// `replica.selector.class`: empty (the leader serves every consumer)
    /// or Kafka's `RackAwareReplicaSelector` (consumers giving
    /// `client.rack` read from an in-sync replica in their rack, KIP-392).
    pub replica_selector_class: String,
    /// `min.insync.replicas`: the broker default of the topic config.
    pub min_insync_replicas: i32,
    /// `replica.lag.time.max.ms`: a follower not caught up for this long
    /// leaves the ISR.
    pub replica_lag_time_max_ms: i64,
    /// `replica.fetch.wait.max.ms`: how long a follower's fetch waits at
    /// the leader for new records.
    pub replica_fetch_wait_max_ms: i32,
    /// `replica.fetch.max.bytes`: per partition in a follower's fetch.
    pub replica_fetch_max_bytes: i32,
    /// `replica.fetch.response.max.bytes`: per follower fetch.
    pub replica_fetch_response_max_bytes: i32,
    /// `replica.fetch.backoff.ms`: a follower's pause after a failed fetch.
    pub replica_fetch_backoff_ms: i64,
    /// `num.recovery.threads.per.data.dir`: how many threads open (and,
    /// after an unclean stop, recover) partitions at start. Kafka 4's
    /// default, 2 (KIP-1030); at least 1.
    pub num_recovery_threads_per_data_dir: usize,
    /// `leader.replication.throttled.rate`: bytes/s a leader sends to
    /// throttled followers (`u64::MAX`: no limit, Kafka's default).
    pub leader_replication_throttled_rate: u64,
    /// `follower.replication.throttled.rate`: bytes/s a follower fetches
    /// for its throttled replicas.
    pub follower_replication_throttled_rate: u64,
    /// Every property as given (file, then overrides), for DescribeConfigs.
    pub raw: BTreeMap<String, String>,
    /// Dynamic broker configs laid over `raw` (see
    /// `crate::dynamic_config::effective`): key → value and source, most
    /// specific first (this broker's own, then the cluster default).
    pub dynamic: BTreeMap<String, Vec<(String, crate::config_values::ConfigSource)>>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            num_partitions: 1,
            default_replication_factor: 1,
            auto_create_topics_enable: true,
            delete_topic_enable: true,
            socket_request_max_bytes: 100 * 1024 * 1024,
            message_max_bytes: 1024 * 1024 + 12,
            log_segment_bytes: 1024 * 1024 * 1024,
            log_roll_ms: 7 * 24 * 3600 * 1000,
            log_retention_ms: 7 * 24 * 3600 * 1000,
            log_retention_bytes: -1,
            log_retention_check_interval_ms: 5 * 60 * 1000,
            log_flush_interval_messages: i64::MAX,
            log_flush_interval_ms: i64::MAX,
            log_index_interval_bytes: 4096,
            log_index_size_max_bytes: 10 * 1024 * 1024,
            log_message_timestamp_type: "CreateTime".into(),
            log_segment_delete_delay_ms: 60_000,
            log_cleanup_policy: "delete".into(),
            log_cleaner_io_max_bytes_per_second: f64::MAX,
            log_cleaner_enable: true,
            log_cleaner_backoff_ms: 15_000,
            group_initial_rebalance_delay_ms: 3_000,
            group_min_session_timeout_ms: 6_000,
            group_max_session_timeout_ms: 1_800_000,
            group_max_size: i32::MAX,
            group_consumer_session_timeout_ms: 45_000,
            group_consumer_heartbeat_interval_ms: 5_000,
            group_consumer_max_size: i32::MAX,
            group_consumer_assignors: "uniform,range".into(),
            group_consumer_migration_policy: Default::default(),
            offsets_topic_num_partitions: 50,
            offsets_retention_minutes: 7 * 24 * 60,
            offset_metadata_max_bytes: 4096,
            offsets_retention_check_interval_ms: 600_000,
            max_connections: i32::MAX as usize,
            max_connections_per_ip: i32::MAX as usize,
            max_connections_per_ip_overrides: String::new(),
            connections_max_idle_ms: 600_000,
            queued_max_request_bytes: 256 * 1024 * 1024,
            socket_request_read_timeout_ms: 60_000,
            max_incremental_fetch_session_cache_slots: crate::fetch_session::DEFAULT_CACHE_SLOTS,
            min_incremental_fetch_session_eviction_ms: crate::fetch_session::DEFAULT_EVICTION_MS,
            broker_heartbeat_interval_ms: 2_000,
            broker_session_timeout_ms: 9_000,
            broker_rack: None,
            controller_lease_duration_ms: 8_000,
            controller_lease_retry_ms: 1_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_seconds: 300,
            offsets_topic_replication_factor: 3,
            offsets_commit_timeout_ms: 5_000,
            transaction_state_log_num_partitions: 50,
            transaction_state_log_replication_factor: 3,
            transaction_state_log_min_isr: 2,
            transaction_state_log_segment_bytes: 100 * 1024 * 1024,
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 604_800_000,
            transaction_abort_timed_out_transaction_cleanup_interval_ms: 10_000,
            transaction_remove_expired_transaction_cleanup_interval_ms: 3_600_000,
            transaction_partition_verification_enable: true,
            transaction_version: 2,
            listeners: Default::default(),
            authorizer: None,
            replica_selector_class: String::new(),
            min_insync_replicas: 1,
            replica_lag_time_max_ms: 30_000,
            replica_fetch_wait_max_ms: 500,
            replica_fetch_max_bytes: 1024 * 1024,
            replica_fetch_response_max_bytes: 10 * 1024 * 1024,
            replica_fetch_backoff_ms: 1_000,
            num_recovery_threads_per_data_dir: 2,
            leader_replication_throttled_rate: u64::MAX,
            follower_replication_throttled_rate: u64::MAX,
            raw: BTreeMap::new(),
            dynamic: BTreeMap::new(),
        }
    }
}

/// Parses Java-properties text with the semantics of `java.util.Properties.load`:
///
/// - natural lines end at `\n`, `\r` or `\r\n`; leading whitespace (space,
///   tab, form feed) of each line is skipped, and lines that are then empty
///   or start with `#` or `!` are comments (a comment never continues);
/// - a line ending in an odd number of backslashes continues on the next
///   line, whose leading whitespace is dropped (the last backslash goes);
/// - the key ends at the first unescaped `=`, `:` or whitespace; whitespace
///   around the separator is skipped, and a key alone on its line has the
///   empty value;
/// - in keys and values `\t`, `\n`, `\r`, `\f` and `\uXXXX` (UTF-16 code
///   units; a surrogate pair makes one character) are decoded and any other
///   escaped character stands for itself (`\\`, `\=`, `\:`, `\ `, `\#`, …),
///   so an escaped leading space of a value is kept. Trailing whitespace of a
///   value is part of it, as in Java.
///
/// A later duplicate key wins. Errors only on a malformed `\uXXXX` escape or
/// an unpaired surrogate, which Java would reject or could not hand over as a
/// string either.
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    fn is_ws(c: char) -> bool {
        matches!(c, ' ' | '\t' | '\x0c')
    }
    // Natural lines with their 1-based numbers; `\r\n`, `\r` and `\n` end
    // one. Whether the text ends in `\r\n` matters for one Java quirk below.
    let mut natural: Vec<(usize, &str)> = Vec::new();
    let ends_in_crlf = text.ends_with("\r\n");
    let mut rest = text;
    let mut number = 1;
    while !rest.is_empty() {
        let (line, next) = match rest.find(['\r', '\n']) {
            Some(i) if rest[i..].starts_with("\r\n") => (&rest[..i], &rest[i + 2..]),
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        natural.push((number, line));
        number += 1;
        rest = next;
    }

    let mut out = BTreeMap::new();
    let mut next = 0;
    'lines: while let Some(&(first, line)) = natural.get(next) {
        next += 1;
        let line = line.trim_start_matches(is_ws);
        if line.is_empty() || line.starts_with(['#', '!']) {
            continue;
        }
        // Join continuation lines into one logical line.
        let mut logical = String::from(line);
        while ends_in_odd_backslashes(&logical) {
            logical.pop();
            match natural.get(next) {
                // As in Java, a logical line still empty after its
                // continuation starts afresh on the next line (which may be
                // blank or a comment)…
                Some(_) if logical.is_empty() => continue 'lines,
                Some((_, more)) => {
                    next += 1;
                    logical.push_str(more.trim_start_matches(is_ws));
                }
                // … and at the end of the input it is the empty key, unless
                // that last line ended in `\r\n` (Java's LineReader then
                // sees the end of input before it returns the line).
                None if logical.is_empty() && ends_in_crlf => continue 'lines,
                None => break,
            }
        }
        let syntax = |what: &str| ConfigError::Syntax {
            line: first,
            text: format!("{what} in {logical:?}"),
        };
        let (key, value) = split_key_value(&logical);
        let key = unescape_properties(key).map_err(syntax)?;
        let value = unescape_properties(value).map_err(syntax)?;
        out.insert(key, value);
    }
    Ok(out)
}

fn ends_in_odd_backslashes(s: &str) -> bool {
    s.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

/// Splits a logical line (leading whitespace already gone) into the raw,
/// still escaped key and value, as `Properties.load` does.
fn split_key_value(line: &str) -> (&str, &str) {
    let is_ws = |c: char| matches!(c, ' ' | '\t' | '\x0c');
    let mut escaped = false;
    let mut key_end = line.len();
    let mut has_separator = false;
    for (i, c) in line.char_indices() {
        if !escaped && (c == '=' || c == ':' || is_ws(c)) {
            key_end = i;
            has_separator = c == '=' || c == ':';
            break;
        }
        escaped = c == '\\' && !escaped;
    }
    let key = &line[..key_end];
    // Skip the terminator, then whitespace, then at most one `=`/`:` (when
    // the key ended at whitespace), then whitespace.
    let mut value = line[key_end..].get(1..).unwrap_or("");
    value = value.trim_start_matches(is_ws);
    if !has_separator {
        if let Some(v) = value.strip_prefix(['=', ':']) {
            value = v.trim_start_matches(is_ws);
        }
    }
    (key, value)
}

/// Undoes the escapes of a properties key or value.
fn unescape_properties(s: &str) -> Result<String, &'static str> {
    let mut units: Vec<u16> = Vec::with_capacity(s.len());
    let mut chars = s.chars();
    let mut buf = [0u16; 2];
    while let Some(c) = chars.next() {
        let c = if c == '\\' {
            match chars.next() {
                // A lone trailing backslash (only at the very end of input).
                None => break,
                Some('t') => '\t',
                Some('n') => '\n',
                Some('r') => '\r',
                Some('f') => '\x0c',
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).collect();
                    if hex.len() != 4 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err("malformed \\uXXXX escape");
                    }
                    units.push(u16::from_str_radix(&hex, 16).map_err(|_| "bad \\uXXXX")?);
                    continue;
                }
                Some(other) => other,
            }
        } else {
            c
        };
        units.extend_from_slice(c.encode_utf16(&mut buf));
    }
    String::from_utf16(&units).map_err(|_| "unpaired UTF-16 surrogate in a \\uXXXX escape")
}

/// Parses a listen address given as `ip:port`, `[ipv6]:port` or an
/// unbracketed `ipv6:port`. The last form is what the operator's
/// `$(POD_IP):port` expands to on an IPv6 pod (Kubernetes env expansion cannot
/// add brackets); since a port is required, the text after the last `:` is
/// always the port, so the form is unambiguous.
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

/// Kafka 4's minimum `segment.bytes` and `log.segment.bytes` (KIP-1030).
pub const MIN_SEGMENT_BYTES: i64 = 1024 * 1024;

/// Kafka's `RackAwareReplicaSelector` class name, the one value
/// `replica.selector.class` accepts besides empty (the leader serves
/// everyone, Kafka's default); `replication::selector` implements it.
pub const RACK_AWARE_SELECTOR: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";

/// Parses `max.connections.per.ip.overrides` (`host:count,host:count`,
/// hosts as IP literals; Kafka also allows names, which a broker without
/// DNS lookups on this path refuses).
pub fn parse_per_ip_overrides(text: &str) -> Result<HashMap<IpAddr, usize>, String> {
    let mut out = HashMap::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (host, count) = item
            .rsplit_once(':')
            .ok_or_else(|| format!("{item:?} is not host:count"))?;
        let ip: IpAddr = host
            .trim_matches(['[', ']'])
            .parse()
            .map_err(|_| format!("{host:?} is not an IP address"))?;
        let count: usize = count
            .parse()
            .map_err(|_| format!("{count:?} is not a connection count"))?;
        out.insert(ip, count);
    }
    Ok(out)
}

fn parse_num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    // Kafka's ConfigDef trims typed values (Java properties keep trailing
    // whitespace).
    value.trim().parse::<T>().map_err(|e| ConfigError::Invalid {
        key: key.into(),
        value: value.into(),
        reason: e.to_string(),
    })
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::Invalid {
            key: key.into(),
            value: value.into(),
            reason: "expected true or false".into(),
        }),
    }
}

impl BrokerConfig {
    /// Builds the config from properties; unknown keys are kept (and shown by
    /// DescribeConfigs) but otherwise ignored, as Kafka does.
    pub fn from_properties(props: BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let mut c = BrokerConfig::default();
        // Kafka's precedence: ms over minutes over hours.
        if let Some(v) = props.get("log.retention.hours") {
            c.log_retention_ms = parse_num::<i64>("log.retention.hours", v)? * 3_600_000;
        }
        if let Some(v) = props.get("log.retention.minutes") {
            c.log_retention_ms = parse_num::<i64>("log.retention.minutes", v)? * 60_000;
        }
        if let Some(v) = props.get("log.roll.hours") {
            c.log_roll_ms = parse_num::<i64>("log.roll.hours", v)? * 3_600_000;
        }
        for (k, v) in &props {
            match k.as_str() {
                "num.partitions" => c.num_partitions = parse_num(k, v)?,
                "default.replication.factor" => c.default_replication_factor = parse_num(k, v)?,
                "auto.create.topics.enable" => c.auto_create_topics_enable = parse_bool(k, v)?,
                "delete.topic.enable" => c.delete_topic_enable = parse_bool(k, v)?,
                "socket.request.max.bytes" => c.socket_request_max_bytes = parse_num(k, v)?,
                "message.max.bytes" => c.message_max_bytes = parse_num(k, v)?,
                "log.segment.bytes" => {
                    c.log_segment_bytes = parse_num(k, v)?;
                    // Kafka 4's range (KIP-1030): an int of at least 1 MiB
                    let min = MIN_SEGMENT_BYTES;
                    if c.log_segment_bytes < min || c.log_segment_bytes > i64::from(i32::MAX) {
                        return Err(ConfigError::Invalid {
                            key: k.clone(),
                            value: v.clone(),
                            reason: format!("must be an int of at least {min} (1 MiB)"),
                        });
                    }
                }
                "log.roll.ms" => c.log_roll_ms = parse_num(k, v)?,
                "log.retention.ms" => c.log_retention_ms = parse_num(k, v)?,
                "log.retention.bytes" => c.log_retention_bytes = parse_num(k, v)?,
                "log.retention.check.interval.ms" => {
                    c.log_retention_check_interval_ms = parse_num(k, v)?
                }
                "log.flush.interval.messages" => c.log_flush_interval_messages = parse_num(k, v)?,
                "log.flush.interval.ms" => c.log_flush_interval_ms = parse_num(k, v)?,
                "log.index.interval.bytes" => c.log_index_interval_bytes = parse_num(k, v)?,
                "log.index.size.max.bytes" => c.log_index_size_max_bytes = parse_num(k, v)?,
                "log.segment.delete.delay.ms" => c.log_segment_delete_delay_ms = parse_num(k, v)?,
                "log.cleanup.policy" => c.log_cleanup_policy = v.trim().to_string(),
                "log.cleaner.enable" => c.log_cleaner_enable = parse_bool(k, v)?,
                "log.cleaner.backoff.ms" => {
                    c.log_cleaner_backoff_ms = parse_num(k, v)?;
                    if c.log_cleaner_backoff_ms < 0 {
                        return Err(ConfigError::Invalid {
                            key: k.clone(),
                            value: v.clone(),
                            reason: "must be at least 0".into(),
                        });
                    }
                }
                "log.cleaner.io.max.bytes.per.second" => {
                    let rate: f64 = parse_num(k, v)?;
                    if rate.is_nan() || rate <= 0.0 {
                        return Err(ConfigError::Invalid {
                            key: k.clone(),
                            value: v.clone(),
                            reason: "must be a positive number of bytes per second".into(),
                        });
                    }
                    c.log_cleaner_io_max_bytes_per_second = rate;
                }
                "group.initial.rebalance.delay.ms" => {
                    c.group_initial_rebalance_delay_ms = parse_num(k, v)?
                }
                "group.min.session.timeout.ms" => c.group_min_session_timeout_ms = parse_num(k, v)?,
                "group.max.session.timeout.ms" => c.group_max_session_timeout_ms = parse_num(k, v)?,
                "group.max.size" => c.group_max_size = parse_num(k, v)?,
                "group.consumer.session.timeout.ms" => {
                    c.group_consumer_session_timeout_ms = parse_num(k, v)?
                }
                "group.consumer.heartbeat.interval.ms" => {
                    c.group_consumer_heartbeat_interval_ms = parse_num(k, v)?
                }
                "group.consumer.max.size" => c.group_consumer_max_size = parse_num(k, v)?,
                "group.consumer.assignors" => {
                    let names: Vec<&str> = v.split(',').map(str::trim).collect();
                    if names.is_empty() || names.iter().any(|n| !matches!(*n, "uniform" | "range"))
                    {
                        return Err(ConfigError::Invalid {
                            key: k.clone(),
                            value: v.clone(),
                            reason: "Moldau's assignors are uniform and range".into(),
                        });
                    }
                    c.group_consumer_assignors = names.join(",");
                }
                "group.consumer.migration.policy" => {
                    c.group_consumer_migration_policy =
                        crate::group::consumer::migration::MigrationPolicy::parse(v.trim())
                            .ok_or_else(|| ConfigError::Invalid {
                                key: k.clone(),
                                value: v.clone(),
                                reason: "one of bidirectional, upgrade, downgrade, disabled".into(),
                            })?
                }
                "offsets.topic.num.partitions" => c.offsets_topic_num_partitions = parse_num(k, v)?,
                "offsets.retention.minutes" => c.offsets_retention_minutes = parse_num(k, v)?,
                "offset.metadata.max.bytes" => c.offset_metadata_max_bytes = parse_num(k, v)?,
                "offsets.retention.check.interval.ms" => {
                    c.offsets_retention_check_interval_ms = parse_num(k, v)?
                }
                "max.connections" => c.max_connections = parse_num(k, v)?,
                "max.connections.per.ip" => c.max_connections_per_ip = parse_num(k, v)?,
                "max.connections.per.ip.overrides" => {
                    parse_per_ip_overrides(v).map_err(|reason| ConfigError::Invalid {
                        key: k.clone(),
                        value: v.clone(),
                        reason,
                    })?;
                    c.max_connections_per_ip_overrides = v.clone()
                }
                "connections.max.idle.ms" => c.connections_max_idle_ms = parse_num(k, v)?,
                "queued.max.request.bytes" => c.queued_max_request_bytes = parse_num(k, v)?,
                "socket.request.read.timeout.ms" => {
                    c.socket_request_read_timeout_ms = parse_num(k, v)?
                }
                "max.incremental.fetch.session.cache.slots" => {
                    c.max_incremental_fetch_session_cache_slots = parse_num(k, v)?
                }
                "min.incremental.fetch.session.eviction.ms" => {
                    c.min_incremental_fetch_session_eviction_ms = parse_num(k, v)?
                }
                "broker.heartbeat.interval.ms" => c.broker_heartbeat_interval_ms = parse_num(k, v)?,
                "broker.session.timeout.ms" => c.broker_session_timeout_ms = parse_num(k, v)?,
                "controller.lease.duration.ms" => c.controller_lease_duration_ms = parse_num(k, v)?,
                "controller.lease.retry.ms" => c.controller_lease_retry_ms = parse_num(k, v)?,
                "min.insync.replicas" => c.min_insync_replicas = parse_num(k, v)?,
                "replica.selector.class" => {
                    let v = v.trim();
                    if !v.is_empty() && v != RACK_AWARE_SELECTOR {
                        return Err(ConfigError::Invalid {
                            key: k.clone(),
                            value: v.to_string(),
                            reason: format!("only {RACK_AWARE_SELECTOR} is available"),
                        });
                    }
                    c.replica_selector_class = v.to_string()
                }
                "offsets.topic.replication.factor" => {
                    c.offsets_topic_replication_factor = parse_num(k, v)?
                }
                "offsets.commit.timeout.ms" => c.offsets_commit_timeout_ms = parse_num(k, v)?,
                "transaction.state.log.num.partitions" => {
                    c.transaction_state_log_num_partitions = parse_num(k, v)?
                }
                "transaction.state.log.replication.factor" => {
                    c.transaction_state_log_replication_factor = parse_num(k, v)?
                }
                "transaction.state.log.min.isr" => {
                    c.transaction_state_log_min_isr = parse_num(k, v)?
                }
                "transaction.state.log.segment.bytes" => {
                    c.transaction_state_log_segment_bytes = parse_num(k, v)?
                }
                "transaction.max.timeout.ms" => c.transaction_max_timeout_ms = parse_num(k, v)?,
                "transactional.id.expiration.ms" => {
                    c.transactional_id_expiration_ms = parse_num(k, v)?
                }
                "transaction.abort.timed.out.transaction.cleanup.interval.ms" => {
                    c.transaction_abort_timed_out_transaction_cleanup_interval_ms = parse_num(k, v)?
                }
                "transaction.remove.expired.transaction.cleanup.interval.ms" => {
                    c.transaction_remove_expired_transaction_cleanup_interval_ms = parse_num(k, v)?
                }
                "transaction.version" => {
                    let level: i16 = parse_num(k, v)?;
                    if !(0..=2).contains(&level) {
                        return Err(ConfigError::Invalid {
                            key: k.to_string(),
                            value: v.to_string(),
                            reason: "the levels are 0, 1 and 2".into(),
                        });
                    }
                    c.transaction_version = level;
                }
                "transaction.partition.verification.enable" => {
                    c.transaction_partition_verification_enable = parse_bool(k, v)?
                }
                "auto.leader.rebalance.enable" => c.auto_leader_rebalance_enable = parse_num(k, v)?,
                "leader.imbalance.check.interval.seconds" => {
                    c.leader_imbalance_check_interval_seconds = parse_num(k, v)?
                }
                "replica.lag.time.max.ms" => c.replica_lag_time_max_ms = parse_num(k, v)?,
                "replica.fetch.wait.max.ms" => c.replica_fetch_wait_max_ms = parse_num(k, v)?,
                "replica.fetch.max.bytes" => c.replica_fetch_max_bytes = parse_num(k, v)?,
                "replica.fetch.response.max.bytes" => {
                    c.replica_fetch_response_max_bytes = parse_num(k, v)?
                }
                "replica.fetch.backoff.ms" => c.replica_fetch_backoff_ms = parse_num(k, v)?,
                "num.recovery.threads.per.data.dir" => {
                    let n: i32 = parse_num(k, v)?;
                    if n < 1 {
                        return Err(ConfigError::Invalid {
                            key: k.clone(),
                            value: v.clone(),
                            reason: "must be at least 1".into(),
                        });
                    }
                    c.num_recovery_threads_per_data_dir = n as usize;
                }
                // Kafka's type is a non-negative long; its maximum means no limit
                "leader.replication.throttled.rate" => {
                    c.leader_replication_throttled_rate = parse_num::<i64>(k, v)?
                        .try_into()
                        .map_err(|_| ConfigError::Invalid {
                            key: k.into(),
                            value: v.into(),
                            reason: "must be at least 0".into(),
                        })?
                }
                "follower.replication.throttled.rate" => {
                    c.follower_replication_throttled_rate = parse_num::<i64>(k, v)?
                        .try_into()
                        .map_err(|_| ConfigError::Invalid {
                            key: k.into(),
                            value: v.into(),
                            reason: "must be at least 0".into(),
                        })?
                }
                "broker.rack" => {
                    c.broker_rack = (!v.trim().is_empty()).then(|| v.trim().to_string())
                }
                "log.message.timestamp.type" => {
                    let v = v.trim();
                    if v != "CreateTime" && v != "LogAppendTime" {
                        return Err(ConfigError::Invalid {
                            key: k.clone(),
                            value: v.to_string(),
                            reason: "expected CreateTime or LogAppendTime".into(),
                        });
                    }
                    c.log_message_timestamp_type = v.to_string();
                }
                _ => {}
            }
        }
        if c.num_partitions < 1 {
            return Err(ConfigError::Invalid {
                key: "num.partitions".into(),
                value: c.num_partitions.to_string(),
                reason: "must be at least 1".into(),
            });
        }
        if c.offsets_topic_num_partitions < 1 {
            return Err(ConfigError::Invalid {
                key: "offsets.topic.num.partitions".into(),
                value: c.offsets_topic_num_partitions.to_string(),
                reason: "must be at least 1".into(),
            });
        }
        for (key, value) in [
            (
                "transaction.state.log.num.partitions",
                i64::from(c.transaction_state_log_num_partitions),
            ),
            (
                "transaction.state.log.replication.factor",
                i64::from(c.transaction_state_log_replication_factor),
            ),
            (
                "transaction.state.log.min.isr",
                i64::from(c.transaction_state_log_min_isr),
            ),
            (
                "transaction.max.timeout.ms",
                i64::from(c.transaction_max_timeout_ms),
            ),
            (
                "transactional.id.expiration.ms",
                c.transactional_id_expiration_ms,
            ),
        ] {
            if value < 1 {
                return Err(ConfigError::Invalid {
                    key: key.into(),
                    value: value.to_string(),
                    reason: "must be at least 1".into(),
                });
            }
        }
        c.listeners = crate::security::listener::listeners(&props).map_err(|reason| {
            ConfigError::Invalid {
                key: "listeners".into(),
                value: props.get("listeners").cloned().unwrap_or_default(),
                reason,
            }
        })?;
        c.authorizer = crate::security::acl_admin::authorizer_from_configs(
            props.get("authorizer.class.name").map(String::as_str),
            props.get("super.users").map(String::as_str),
            props
                .get("allow.everyone.if.no.acl.found")
                .map(String::as_str),
        )
        .map_err(|(key, reason)| ConfigError::Invalid {
            key: key.into(),
            value: props.get(key).cloned().unwrap_or_default(),
            reason,
        })?;
        c.raw = props;
        Ok(c)
    }

    /// Reads the properties file (if any) and applies `key=value` overrides.
    pub fn load(file: Option<&std::path::Path>, overrides: &[String]) -> Result<Self, ConfigError> {
        Self::from_properties(load_properties(file, overrides)?)
    }
}

/// The properties of the file (if any) with the `key=value` overrides
/// applied, unparsed.
pub fn load_properties(
    file: Option<&std::path::Path>,
    overrides: &[String],
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut props = match file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            parse_properties(&text)?
        }
        None => BTreeMap::new(),
    };
    for (i, o) in overrides.iter().enumerate() {
        let (k, v) = o.split_once('=').ok_or_else(|| ConfigError::Syntax {
            line: i + 1,
            text: o.clone(),
        })?;
        props.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(props)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_parse_with_comments_and_both_separators() {
        let p =
            parse_properties("# c\n! c\n\nnum.partitions=3\nlog.retention.ms : 1000\n").unwrap();
        assert_eq!(p["num.partitions"], "3");
        assert_eq!(p["log.retention.ms"], "1000");
        // As in Java, a key alone on its line has the empty value.
        assert_eq!(parse_properties("novalue\n").unwrap()["novalue"], "");
    }

    fn props(text: &str) -> Vec<(String, String)> {
        parse_properties(text).unwrap().into_iter().collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = list
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn properties_separators_and_whitespace_as_in_java() {
        assert_eq!(
            props("a=1\nb = 2\n  c:3\nd : 4\ne 5\nf\t\x0c=  6\ng   :7\nh==8\ni::9\nj = 10  \n"),
            pairs(&[
                ("a", "1"),
                ("b", "2"),
                ("c", "3"),
                ("d", "4"),
                ("e", "5"),
                ("f", "6"),
                ("g", "7"),
                ("h", "=8"),
                ("i", ":9"),
                // trailing whitespace is part of a value, as in Java
                ("j", "10  "),
            ])
        );
        // Blank and whitespace-only lines, both comment markers after
        // indentation, and every line terminator.
        assert_eq!(
            props("\n   \n\t# c\n  ! c\r\nk=v\rl=w\r\n#x=y"),
            pairs(&[("k", "v"), ("l", "w")])
        );
        assert_eq!(props("=empty key\n"), pairs(&[("", "empty key")]));
        // A later duplicate wins.
        assert_eq!(props("k=1\nk=2\n"), pairs(&[("k", "2")]));
    }

    #[test]
    fn properties_escapes_as_in_java() {
        assert_eq!(
            props(concat!(
                r"back\\slash=C:\\dir\\x",
                "\n",
                r"key\=with\:seps\ and\ space=v",
                "\n",
                r"lead=\  two spaces",
                "\n",
                r"ctl=a\tb\nc\rd\fe",
                "\n",
                r"other=\q\#\!\=\:",
                "\n",
                r"\#hash=1",
                "\n",
                r"\!bang=2",
                "\n",
                r"uni=\u00e9\u20AC\ud83d\ude00",
                "\n",
                "raw=\u{e9}\u{1F600}\n",
            )),
            pairs(&[
                ("back\\slash", "C:\\dir\\x"),
                ("key=with:seps and space", "v"),
                ("lead", "  two spaces"),
                ("ctl", "a\tb\nc\rd\x0ce"),
                ("other", "q#!=:"),
                ("#hash", "1"),
                ("!bang", "2"),
                ("uni", "\u{e9}\u{20ac}\u{1F600}"),
                ("raw", "\u{e9}\u{1F600}"),
            ])
        );
    }

    #[test]
    fn properties_line_continuations_as_in_java() {
        // Odd backslashes continue; the continuation's indentation goes.
        assert_eq!(
            props("list=a,\\\n    b,\\\n\tc\nnext=1\n"),
            pairs(&[("list", "a,b,c"), ("next", "1")])
        );
        // Even backslashes are an escaped backslash, no continuation.
        assert_eq!(props("p=x\\\\\nq=y\n"), pairs(&[("p", "x\\"), ("q", "y")]));
        // Three: an escaped backslash, then a continuation.
        assert_eq!(props("p=x\\\\\\\n  y\n"), pairs(&[("p", "x\\y")]));
        // A continued key; a continuation line is never a comment.
        assert_eq!(
            props("lo\\\n  ng=v\\\n  # not a comment\n"),
            pairs(&[("long", "v# not a comment")])
        );
        // A comment does not continue; an empty continuation line ends the
        // value; a backslash at the end of input is dropped.
        assert_eq!(
            props("# c \\\nk=v\\\n\nm=w\\"),
            pairs(&[("k", "v"), ("m", "w")])
        );
        // Windows line ends.
        assert_eq!(props("k=a\\\r\n  b\r\n"), pairs(&[("k", "ab")]));
        // Java's LineReader quirks (checked against Java 17): a line that is
        // only a continuation leaves the next line a new one (here a comment),
        // and at the end of input it is the empty key unless ended by CRLF.
        assert_eq!(props("  \\\n# c\nk=v\n"), pairs(&[("k", "v")]));
        assert_eq!(props("k=v\n\\\n"), pairs(&[("", ""), ("k", "v")]));
        assert_eq!(props("k=v\n\\\r\n"), pairs(&[("k", "v")]));
    }

    #[test]
    fn properties_reject_malformed_unicode_escapes() {
        for bad in [
            r"k=\u12",
            r"k=\u12g4",
            r"k=\uD800",
            r"k=\uDC00x",
            r"\u+123=v",
        ] {
            let err = parse_properties(&format!("a=1\n{bad}\n")).unwrap_err();
            assert!(
                matches!(err, ConfigError::Syntax { line: 2, .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn broker_config_applies_kafka_names_and_precedence() {
        let c = BrokerConfig::load(
            None,
            &[
                "log.retention.hours=2".into(),
                "log.retention.ms=5000".into(),
                "num.partitions=4".into(),
                "auto.create.topics.enable=false".into(),
            ],
        )
        .unwrap();
        assert_eq!(c.log_retention_ms, 5000);
        assert_eq!(c.num_partitions, 4);
        assert!(!c.auto_create_topics_enable);
        let hours = BrokerConfig::load(None, &["log.retention.hours=2".into()]).unwrap();
        assert_eq!(hours.log_retention_ms, 7_200_000);
    }

    #[test]
    fn cleaner_settings_parse_with_kafkas_defaults() {
        assert_eq!(
            BrokerConfig::default().log_cleaner_io_max_bytes_per_second,
            f64::MAX
        );
        let c = BrokerConfig::load(
            None,
            &["log.cleaner.io.max.bytes.per.second=1048576".into()],
        )
        .unwrap();
        assert_eq!(c.log_cleaner_io_max_bytes_per_second, 1_048_576.0);
        // Kafka's default written out is accepted too
        let c = BrokerConfig::load(
            None,
            &["log.cleaner.io.max.bytes.per.second=1.7976931348623157E308".into()],
        )
        .unwrap();
        assert_eq!(c.log_cleaner_io_max_bytes_per_second, f64::MAX);
        let c = BrokerConfig::load(
            None,
            &[
                "log.cleaner.enable=false".into(),
                "log.cleaner.backoff.ms=500".into(),
            ],
        )
        .unwrap();
        assert!(!c.log_cleaner_enable);
        assert_eq!(c.log_cleaner_backoff_ms, 500);
        assert!(BrokerConfig::default().log_cleaner_enable);
        assert_eq!(BrokerConfig::default().log_cleaner_backoff_ms, 15_000);
        assert!(BrokerConfig::load(None, &["log.cleaner.backoff.ms=-1".into()]).is_err());
        for bad in ["0", "-5", "NaN", "fast"] {
            let err = BrokerConfig::load(
                None,
                &[format!("log.cleaner.io.max.bytes.per.second={bad}")],
            );
            assert!(err.is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn typed_values_are_trimmed_as_kafka_does() {
        let p = parse_properties(
            "num.partitions = 4 \nauto.create.topics.enable=false\t\nlog.cleanup.policy=compact \nlog.message.timestamp.type=LogAppendTime \nx=y \n",
        )
        .unwrap();
        let c = BrokerConfig::from_properties(p).unwrap();
        assert_eq!(c.num_partitions, 4);
        assert!(!c.auto_create_topics_enable);
        assert_eq!(c.log_cleanup_policy, "compact");
        assert_eq!(c.log_message_timestamp_type, "LogAppendTime");
        // Shown as given.
        assert_eq!(c.raw["x"], "y ");
    }

    #[test]
    fn listen_addresses_of_both_families_with_or_without_brackets() {
        let ok = |s: &str| parse_listen_addr(s).unwrap().to_string();
        assert_eq!(ok("127.1.2.3:9092"), "127.1.2.3:9092");
        assert_eq!(ok("[fd00::5]:9092"), "[fd00::5]:9092");
        // `$(POD_IP):9092` on an IPv6 pod.
        assert_eq!(ok("fd00::5:9092"), "[fd00::5]:9092");
        assert_eq!(ok("::1:9092"), "[::1]:9092");
        for bad in ["127.1.2.3", "fd00::5", "localhost:9092", "[fd00::5]", ""] {
            assert!(parse_listen_addr(bad).is_err(), "{bad}");
        }
        let cli = Cli::try_parse_from([
            "moldau-broker",
            "--listen",
            "fd00::5:9093",
            "--http-listen",
            "fd00::5:9644",
        ])
        .unwrap();
        assert_eq!(cli.listen.to_string(), "[fd00::5]:9093");
        assert_eq!(cli.http_listen.to_string(), "[fd00::5]:9644");
    }

    #[test]
    fn broker_config_rejects_bad_values() {
        assert!(BrokerConfig::load(None, &["num.partitions=0".into()]).is_err());
        assert!(BrokerConfig::load(None, &["num.partitions=x".into()]).is_err());
        for bad in ["0", "-1", "two"] {
            let o = format!("num.recovery.threads.per.data.dir={bad}");
            assert!(BrokerConfig::load(None, &[o]).is_err(), "{bad}");
        }
        assert_eq!(BrokerConfig::default().num_recovery_threads_per_data_dir, 2);
        let c = BrokerConfig::load(None, &["num.recovery.threads.per.data.dir=8".into()]).unwrap();
        assert_eq!(c.num_recovery_threads_per_data_dir, 8);
        assert!(BrokerConfig::load(None, &["auto.create.topics.enable=maybe".into()]).is_err());
        assert!(BrokerConfig::load(None, &["log.message.timestamp.type=Now".into()]).is_err());
    }
}
