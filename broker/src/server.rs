//! Starting and stopping a broker: open the data directory, bind the
//! listeners (a TLS listener's key and certificates read first, and read
//! again when their files change), run housekeeping, and on SIGTERM/SIGINT
//! stop accepting, let in-flight requests finish briefly, and close every
//! log cleanly.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::Broker;
use crate::config::{BrokerConfig, Cli};
use crate::group::state::GroupSettings;
use crate::group::{CoordinatorSettings, GroupCoordinator};
use crate::protocol::limits::ConnectionLimitSettings;
use crate::topics::TopicManager;

fn coordinator_settings(c: &BrokerConfig) -> CoordinatorSettings {
    CoordinatorSettings {
        group: GroupSettings {
            min_session_timeout_ms: c.group_min_session_timeout_ms,
            max_session_timeout_ms: c.group_max_session_timeout_ms,
            initial_rebalance_delay_ms: c.group_initial_rebalance_delay_ms,
            max_size: usize::try_from(c.group_max_size).unwrap_or(usize::MAX),
            ..GroupSettings::default()
        },
        offsets_partitions: c.offsets_topic_num_partitions,
        offsets_retention_ms: c.offsets_retention_minutes.saturating_mul(60_000),
        offset_metadata_max_bytes: usize::try_from(c.offset_metadata_max_bytes).unwrap_or(4096),
        commit_timeout_ms: c.offsets_commit_timeout_ms,
        consumer: crate::group::consumer::ConsumerSettings {
            session_timeout_ms: c.group_consumer_session_timeout_ms,
            heartbeat_interval_ms: c.group_consumer_heartbeat_interval_ms,
            max_size: usize::try_from(c.group_consumer_max_size).unwrap_or(usize::MAX),
            assignors: c
                .group_consumer_assignors
                .split(',')
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty())
                .collect(),
            migration_policy: c.group_consumer_migration_policy,
        },
    }
}

/// The addresses a started broker listens on (useful with port 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundAddresses {
    /// The first listener's (the only one's, without `listeners`).
    pub kafka: std::net::SocketAddr,
    pub http: std::net::SocketAddr,
    /// Every listener's, by name, in `listeners` order.
    pub listeners: Vec<(String, std::net::SocketAddr)>,
}

impl BoundAddresses {
    /// Where listener `name` (upper-case) is bound.
    pub fn listener(&self, name: &str) -> Option<std::net::SocketAddr> {
        self.listeners
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| *a)
    }
}

/// Runs a broker until `shutdown` turns true (or a signal arrives when
/// `handle_signals`). Returns after logs are closed.
pub async fn run(
    cli: Cli,
    shutdown: watch::Receiver<bool>,
    handle_signals: bool,
) -> anyhow::Result<()> {
    run_reporting(cli, shutdown, handle_signals, None).await
}

/// [`run`], telling `bound` where the listeners are once the broker is ready.
pub async fn run_reporting(
    cli: Cli,
    mut shutdown: watch::Receiver<bool>,
    handle_signals: bool,
    report_to: Option<tokio::sync::oneshot::Sender<BoundAddresses>>,
) -> anyhow::Result<()> {
    let broker_config = BrokerConfig::load(cli.config_file.as_deref(), &cli.overrides)?;
    crate::topic_config::validate_broker_keys(&broker_config)
        .map_err(|e| anyhow::anyhow!("invalid broker config {e}"))?;
    // As Kafka: a key nobody knows is kept and reported, not fatal
    // (`--check-config` and the operator refuse it).
    for key in broker_config.raw.keys() {
        if !crate::config_check::is_known(key) {
            tracing::warn!(%key, "the broker config {key} is not a Moldau or Kafka config name; ignored");
        }
    }
    crate::resources::raise_nofile_limit();
    // `listeners` (a Kafka config) names the listeners and their
    // addresses; without it the command line's `--listen` is the one
    // PLAINTEXT listener. A TLS listener's key, certificates and CAs are
    // read before anything binds.
    let listeners = broker_config.listeners.clone();
    let bound_listeners = crate::acceptor::bind_all(
        &listeners,
        cli.listen,
        cli.advertised_listener.as_deref(),
        crate::controller::mode::is_cluster(&cli),
    )
    .await?;
    let inter_broker = bound_listeners
        .iter()
        .find(|l| l.config.name == listeners.inter_broker)
        .unwrap_or(&bound_listeners[0]);
    let (host, port) = inter_broker.advertised.clone();
    let inter_broker_ip = inter_broker.bound.ip();
    let inter_broker_tls = inter_broker.tls.clone();
    let endpoints: Vec<_> = bound_listeners.iter().map(|l| l.endpoint()).collect();
    let http_listener = TcpListener::bind(cli.http_listen)
        .await
        .with_context(|| format!("binding the HTTP listener on {}", cli.http_listen))?;
    let http_addr = http_listener.local_addr()?;

    // Before anything reads the logs: no second process on this directory.
    let owned_data_dir = crate::data_dir::own(&cli.data_dir)?;
    let data_dir = cli.data_dir.clone();
    let started = std::time::Instant::now();
    let settings = coordinator_settings(&broker_config);
    let standalone = !crate::controller::mode::is_cluster(&cli);
    let (topics, groups) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let topics = TopicManager::open(&data_dir, broker_config)?;
        let groups = GroupCoordinator::new(settings);
        // Cluster mode: the coordinator serves only the offsets partitions
        // this broker leads (not yet: see the README's cluster section).
        if standalone {
            let loaded = groups.load(&topics)?;
            tracing::info!(records = loaded, "committed offsets loaded");
        }
        Ok((topics, groups))
    })
    .await??;
    let recovery = topics.recovery_stats();
    tracing::info!(
        data_dir = %cli.data_dir.display(),
        topics = topics.all().len(),
        partitions = recovery.partitions,
        unclean_partitions = recovery.unclean_partitions,
        segments_recovered = recovery.segments_recovered,
        bytes_read = recovery.bytes_read,
        producer_snapshots_loaded = recovery.producer_snapshots_loaded,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "logs recovered"
    );
    let limits = ConnectionLimitSettings::from_config(&topics.broker_config())
        .map_err(anyhow::Error::msg)?;
    tracing::info!(
        max_connections = limits.max_connections,
        max_connections_per_ip = limits.max_connections_per_ip,
        "connection limits"
    );
    let broker = Arc::new(Broker::new(
        cli.node_id,
        host,
        port,
        endpoints,
        topics,
        groups,
        limits,
    ));
    // Brokers dial each other from and to the inter-broker listener
    broker.replicas.bind_to(inter_broker_ip);
    if let Some(tls) = &inter_broker_tls {
        broker.replicas.use_tls(tls.clone());
    }
    broker
        .metrics
        .recovery_unclean_partitions
        .set(i64::try_from(recovery.unclean_partitions).unwrap_or(i64::MAX));
    broker
        .metrics
        .recovery_segments_recovered
        .set(i64::try_from(recovery.segments_recovered).unwrap_or(i64::MAX));
    broker
        .metrics
        .recovery_bytes_read
        .inc_by(recovery.bytes_read);
    broker
        .metrics
        .producer_snapshots_loaded
        .inc_by(recovery.producer_snapshots_loaded as u64);

    // Standalone: the transaction coordinator leads every partition of
    // `__transaction_state`, once the topic exists (it is created with the
    // first transactional request, as in Kafka).
    if standalone
        && broker
            .topics
            .get(crate::txn::vocab::TRANSACTION_STATE_TOPIC)
            .is_some()
    {
        let b = broker.clone();
        let loaded = tokio::task::spawn_blocking(move || b.txns.load_all(&b.topics)).await??;
        tracing::info!(records = loaded, "transaction metadata loaded");
    }

    // The transaction coordinator: markers go to partition leaders over
    // the brokers' own connections; a periodic tick aborts transactions
    // past their timeout, expires idle transactional ids and finishes
    // prepared transactions (retrying markers not yet acknowledged).
    let weak = Arc::downgrade(&broker);
    let identity_of = Arc::downgrade(&broker);
    let local_of = Arc::downgrade(&broker);
    let tls_of = Arc::downgrade(&broker);
    broker.set_txn_channel(Arc::new(crate::replication::markers::MarkerChannel::new(
        broker.node_id,
        tokio::runtime::Handle::current(),
        Arc::new(move || weak.upgrade().map(|b| b.image()).unwrap_or_default()),
        Arc::new(move || {
            identity_of.upgrade().map_or((None, None), |b| {
                (b.replicas.bind_address(), b.replicas.incarnation())
            })
        }),
        Arc::new(move || tls_of.upgrade().and_then(|b| b.replicas.tls())),
        Arc::new(move |req| match local_of.upgrade() {
            Some(b) => crate::handlers::write_markers_locally(&b, req),
            // shutting down: nothing is acknowledged, the next leader retries
            None => Default::default(),
        }),
    )));
    let txn_broker = broker.clone();
    let mut txn_shutdown = shutdown.clone();
    let txn_interval = Duration::from_millis(
        broker
            .topics
            .broker_config()
            .transaction_abort_timed_out_transaction_cleanup_interval_ms
            .clamp(100, 3_600_000) as u64,
    );
    // markers owed (a failed send, a new leader's prepared transactions)
    // are retried this often, not only at the timeout check
    let marker_retry = txn_interval.min(Duration::from_millis(200));
    let txn_task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(marker_retry);
        let mut last_check = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let b = txn_broker.clone();
                    let full = last_check.elapsed() >= txn_interval;
                    if full {
                        last_check = tokio::time::Instant::now();
                    }
                    let _ = tokio::task::spawn_blocking(move || {
                        let Some(markers) = b.marker_sender().cloned() else { return };
                        if !full {
                            b.txns.complete_prepared(&b.topics, markers.as_ref());
                            return;
                        }
                        let controller = crate::controller::Controller::new(&b);
                        let mut ids = || controller.allocate_producer_id().map_err(|e| e.code);
                        let report = b.txns.tick(&b.topics, &mut ids, markers.as_ref(), crate::clock::now_ms());
                        if report != crate::txn_coordinator::TickReport::default() {
                            tracing::info!(aborted = report.aborted, expired = report.expired, completed = report.completed, "transaction coordinator tick");
                        }
                    }).await;
                }
                r = txn_shutdown.changed() => if r.is_err() || *txn_shutdown.borrow() { break },
            }
        }
    });

    let group_broker = broker.clone();
    let mut group_shutdown = shutdown.clone();
    let offsets_check = Duration::from_millis(
        broker
            .topics
            .broker_config()
            .offsets_retention_check_interval_ms
            .clamp(1_000, 86_400_000) as u64,
    );
    let group_task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let mut last_expiry = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    group_broker.groups.tick();
                    if group_broker.groups.has_due_consumer_member() {
                        let b = group_broker.clone();
                        let _ = tokio::task::spawn_blocking(move || {
                            let view = crate::handlers::consumer_groups::topics_view(&b);
                            b.groups.expire_consumer_members(&b.topics, &view)
                        }).await;
                    }
                    if last_expiry.elapsed() >= offsets_check {
                        last_expiry = tokio::time::Instant::now();
                        let b = group_broker.clone();
                        let _ = tokio::task::spawn_blocking(move || {
                            let n = b.groups.expire_offsets(&b.topics);
                            if n > 0 {
                                tracing::info!(offsets = n, "expired committed offsets of empty groups");
                            }
                            let n = b.groups.delete_empty_consumer_groups(&b.topics);
                            if n > 0 {
                                tracing::info!(groups = n, "deleted empty consumer groups without offsets");
                            }
                        }).await;
                    }
                }
                r = group_shutdown.changed() => if r.is_err() || *group_shutdown.borrow() { break },
            }
        }
    });

    let http = axum::serve(http_listener, crate::http::router(broker.clone()));
    let mut http_shutdown = shutdown.clone();
    let http_task = tokio::spawn(async move {
        let _ = http
            .with_graceful_shutdown(async move {
                let _ = http_shutdown.wait_for(|s| *s).await;
            })
            .await;
    });

    let cluster_mode = if crate::controller::mode::is_cluster(&cli) {
        Some(
            crate::controller::mode::start(
                &broker,
                &cli,
                owned_data_dir.succession_token().to_string(),
                inter_broker_tls.clone(),
                shutdown.clone(),
            )
            .await?,
        )
    } else {
        None
    };

    let config = broker.topics.broker_config();
    // Like Kafka, the first retention pass waits a little after start (30 s,
    // or the check interval if shorter), so a restart does not race clients
    // that are about to read.
    let housekeeping = spawn_periodic(
        &broker,
        config.log_retention_check_interval_ms,
        shutdown.clone(),
        RunsOn::BlockingPool,
        |b| b.topics.housekeeping(),
    );
    // Changed high watermarks are checkpointed every 5 s, in one file of
    // the data directory, off the request path.
    let hw_checkpoints = spawn_periodic(
        &broker,
        crate::storage::high_watermarks::CHECKPOINT_INTERVAL_MS,
        shutdown.clone(),
        RunsOn::BlockingPool,
        |b| b.topics.checkpoint_high_watermarks(),
    );
    // The log cleaner: compaction passes every log.cleaner.backoff.ms, on
    // its own cadence (Kafka's cleaner threads do the same), not the
    // retention check's (5 minutes by default), on a thread of its own at
    // background priority so that a pass yields the CPU to requests.
    let cleaner = config.log_cleaner_enable.then(|| {
        spawn_periodic(
            &broker,
            config.log_cleaner_backoff_ms,
            shutdown.clone(),
            RunsOn::LowPriorityThread("moldau-cleaner"),
            |b| b.topics.clean(),
        )
    });

    // Rotation without a restart: each TLS listener's PEM files are
    // checked every `ssl.reload.interval.ms`; new connections get what
    // they hold now.
    let tls_reloads: Vec<_> = bound_listeners
        .iter()
        .filter_map(|l| Some((l.config.name.clone(), l.tls.clone()?)))
        .map(|(name, tls)| {
        let mut reload_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let every = Duration::from_millis(tls.settings().reload_interval_ms);
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let state = tls.clone();
                        let outcome = tokio::task::spawn_blocking(move || state.reload_if_changed()).await;
                        match outcome {
                            Ok(crate::security::tls::Reload::Reloaded) => {
                                tracing::info!(listener = %name, "TLS key, certificates and CAs reloaded; new connections use them");
                            }
                            Ok(crate::security::tls::Reload::Failed(e)) => {
                                tracing::error!(listener = %name, error = %e, "TLS files changed but cannot be used; keeping the previous ones");
                            }
                            Ok(crate::security::tls::Reload::Unchanged) | Err(_) => {}
                        }
                    }
                    r = reload_shutdown.changed() => if r.is_err() || *reload_shutdown.borrow() { break },
                }
            }
        })
    })
    .collect();

    // OAUTHBEARER's JWKS, per listener: a file is read now, then kept fresh
    let mut jwks_refresh = Vec::new();
    for l in &bound_listeners {
        let task =
            crate::security::jwks::start(&l.config.name, l.config.oauth.as_ref(), shutdown.clone())
                .map_err(|e| anyhow::anyhow!("listener {}: {e}", l.config.name))?;
        jwks_refresh.extend(task);
    }

    broker.set_ready(true);
    let bound_names: Vec<(String, std::net::SocketAddr)> = bound_listeners
        .iter()
        .map(|l| (l.config.name.clone(), l.bound))
        .collect();
    if let Some(tx) = report_to {
        let _ = tx.send(BoundAddresses {
            kafka: bound_names[0].1,
            http: http_addr,
            listeners: bound_names.clone(),
        });
    }
    for l in &bound_listeners {
        tracing::info!(listener = %l.config.name, listen = %l.bound, advertised = %format!("{}:{}", l.advertised.0, l.advertised.1), security_protocol = l.config.protocol.name(), inter_broker = l.config.name == listeners.inter_broker, "listener bound");
    }
    tracing::info!(listeners = bound_listeners.len(), http = %cli.http_listen, node_id = cli.node_id, "broker ready");

    let signals = async {
        if handle_signals {
            wait_for_signal().await
        } else {
            std::future::pending::<()>().await
        }
    };
    tokio::pin!(signals);
    let mut stopping = false;
    if cluster_mode.is_some() && !broker.is_ready() {
        // A broker serves clients only with the cluster's metadata: until
        // it is registered and has the controller's image, connections
        // wait in the listeners' backlogs (as a Kafka broker's acceptors
        // start only once the broker has caught up), rather than being
        // answered as a one-broker cluster with this directory's own id.
        tracing::info!("waiting for the controller's metadata before serving clients");
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => if broker.is_ready() { break },
                r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { stopping = true; break },
                _ = &mut signals => { stopping = true; break },
            }
        }
        if !stopping {
            tracing::info!("serving clients");
        }
    }
    // One accept loop per listener, all stopped together.
    let (stop_accepting, accepting) = watch::channel(false);
    // a flood of refused connections must not flood the log too
    let refusal_log = Arc::new(crate::protocol::connection::LogRate::new(10_000));
    let accept_loops: Vec<_> = if stopping {
        Vec::new()
    } else {
        bound_listeners
            .into_iter()
            .map(|l| {
                tokio::spawn(crate::acceptor::accept_loop(
                    broker.clone(),
                    l,
                    accepting.clone(),
                    refusal_log.clone(),
                ))
            })
            .collect()
    };
    if !stopping {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => {}
            _ = &mut signals => {}
        }
    }
    tracing::info!("shutting down");
    broker.set_ready(false);
    let _ = stop_accepting.send(true);
    for accepting in accept_loops {
        let _ = accepting.await;
    }
    housekeeping.abort();
    hw_checkpoints.abort();
    for task in tls_reloads {
        task.abort();
    }
    for task in jwks_refresh {
        task.abort();
    }
    if let Some(cleaner) = cleaner {
        cleaner.abort();
    }
    if let Some(mode) = cluster_mode {
        mode.stop().await;
    }
    broker.replicas.stop();
    group_task.abort();
    txn_task.abort();
    http_task.abort();
    let b = broker.clone();
    let closing = std::time::Instant::now();
    tokio::task::spawn_blocking(move || b.topics.close()).await?;
    tracing::info!(
        elapsed_ms = closing.elapsed().as_millis() as u64,
        "logs closed; bye"
    );
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending::<()>().await,
    }
}

/// Where a periodic job runs.
#[derive(Clone, Copy)]
enum RunsOn {
    /// tokio's blocking pool.
    BlockingPool,
    /// A thread of its own with this name, at [`crate::resources::BACKGROUND_NICE`]:
    /// for work that may keep a core busy for seconds (compaction).
    LowPriorityThread(&'static str),
}

/// Runs `work` every `interval_ms` (clamped to 100 ms..1 h), the first
/// time after the interval or 30 s, whichever is shorter, until shutdown.
/// A run longer than the interval delays the next one rather than piling
/// runs up; shutdown waits for a run in progress.
fn spawn_periodic(
    broker: &Arc<Broker>,
    interval_ms: i64,
    mut shutdown: watch::Receiver<bool>,
    runs_on: RunsOn,
    work: fn(&Broker),
) -> tokio::task::JoinHandle<()> {
    let broker = broker.clone();
    let interval = Duration::from_millis(interval_ms.clamp(100, 3_600_000) as u64);
    let thread = match runs_on {
        RunsOn::BlockingPool => None,
        RunsOn::LowPriorityThread(name) => low_priority_thread(name, &broker, work),
    };
    tokio::spawn(async move {
        let first = tokio::time::Instant::now() + interval.min(Duration::from_secs(30));
        let mut tick = tokio::time::interval_at(first, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => match &thread {
                    Some(runs) => {
                        let (done, finished) = tokio::sync::oneshot::channel();
                        if runs.send(done).is_ok() {
                            let _ = finished.await;
                        }
                    }
                    None => {
                        let b = broker.clone();
                        let _ = tokio::task::spawn_blocking(move || work(&b)).await;
                    }
                },
                r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { break },
            }
        }
        // dropping `thread` ends the thread once its run (if any) is over
    })
}

/// A thread that runs `work` at background priority each time it is sent
/// a completion sender, until the sending side is dropped. `None` (the
/// blocking pool is used instead) if the thread cannot be started.
fn low_priority_thread(
    name: &'static str,
    broker: &Arc<Broker>,
    work: fn(&Broker),
) -> Option<std::sync::mpsc::Sender<tokio::sync::oneshot::Sender<()>>> {
    let (runs, requests) = std::sync::mpsc::channel::<tokio::sync::oneshot::Sender<()>>();
    let broker = broker.clone();
    let spawned = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            crate::resources::lower_this_threads_priority(crate::resources::BACKGROUND_NICE);
            while let Ok(done) = requests.recv() {
                work(&broker);
                let _ = done.send(());
            }
        });
    match spawned {
        Ok(_) => Some(runs),
        Err(e) => {
            tracing::warn!(thread = name, error = %e, "cannot start a background thread; using the blocking pool");
            None
        }
    }
}
