//! The broker's shared state: identity (node id, advertised address,
//! cluster id), the current metadata image, the topic manager (the
//! partitions this broker holds), metrics and readiness. Handlers get a
//! `&Broker`; nothing here does network I/O. Metadata changes go through
//! [`Broker::controller`], which publishes a new image.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::group::GroupCoordinator;
use crate::image::{BrokerImage, MetadataImage, TopicFacts};
use crate::metrics::Metrics;
use crate::protocol::limits::{ConnectionLimitSettings, ConnectionLimiter, RequestBudget};
use crate::topics::TopicManager;

#[derive(Debug)]
pub struct Broker {
    pub node_id: i32,
    /// The inter-broker listener's advertised host and port (where other
    /// brokers dial this one).
    pub advertised_host: String,
    pub advertised_port: i32,
    /// Every advertised listener, inter-broker one included, in
    /// `listeners` order: registered with the controller and shown in
    /// this broker's own image.
    pub advertised_endpoints: Vec<crate::image::ListenerEndpoint>,
    /// `broker.rack`.
    pub rack: Option<String>,
    pub topics: TopicManager,
    pub groups: GroupCoordinator,
    /// The transaction coordinator (the `__transaction_state` partitions
    /// this broker leads).
    pub txns: crate::txn_coordinator::TxnCoordinator,
    /// Where the transaction coordinator's markers go (set at start:
    /// `replication::markers`, over the brokers' own connections).
    markers: std::sync::OnceLock<Arc<dyn crate::txn_coordinator::MarkerSender>>,
    /// The same channel, for a partition leader's verification calls to
    /// transaction coordinators (set at start with `markers`).
    txn_channel: std::sync::OnceLock<Arc<dyn crate::txn_coordinator::VerifyChannel>>,
    pub metrics: Metrics,
    /// Connection slots (`max.connections`, `max.connections.per.ip`).
    pub connection_limits: Arc<ConnectionLimiter>,
    /// Request bytes in flight (`queued.max.request.bytes`).
    pub request_budget: RequestBudget,
    /// The current metadata image; replaced whole, never changed in place.
    image: RwLock<Arc<MetadataImage>>,
    /// Whether the image comes from a remote controller (cluster mode)
    /// rather than from this broker's own metadata (standalone).
    remote_image: AtomicBool,
    /// Cluster mode: an image from the controller showing this broker in
    /// service was installed.
    has_controller_image: AtomicBool,
    /// Standalone mode: images published since start (the first is 1),
    /// the metadata offset DescribeQuorum reports.
    images_published: std::sync::atomic::AtomicI64,
    ready: AtomicBool,
    /// Cluster mode: the link to the active controller.
    link: std::sync::OnceLock<Arc<crate::controller::link::ControllerLink>>,
    /// Roles of the partitions held here, and the follower fetchers.
    pub replicas: crate::replication::ReplicaManager,
    /// Standalone mode: the dynamic broker configs (the controller keeps a
    /// cluster's).
    pub dynamic_configs: crate::local_store::JsonFile<crate::config_values::BrokerConfigs>,
    /// Standalone mode: the client quotas (the controller keeps a
    /// cluster's).
    pub client_quotas: crate::local_store::JsonFile<Vec<crate::quota::ClientQuotaRecord>>,
    /// Standalone mode: the users' SCRAM credentials (the controller keeps
    /// a cluster's).
    pub scram_credentials:
        crate::local_store::JsonFile<Vec<moldau_coordination::records::ScramCredentialRecord>>,
    /// Standalone mode: the ACL bindings (the controller keeps a
    /// cluster's).
    pub acls: crate::local_store::JsonFile<Vec<moldau_coordination::records::AclRecord>>,
    /// The authorizer's configuration (`authorizer.class.name`,
    /// `super.users`, `allow.everyone.if.no.acl.found`); `None` without an
    /// authorizer. Read at start.
    authorizer_config: Option<Arc<crate::security::acl::AuthorizerConfig>>,
    /// Enforcement of the client quotas on this broker's traffic.
    pub quotas: crate::quota::QuotaManager,
    /// Fetch sessions (KIP-227) of all connections; held only to look up,
    /// create or update a session, never across a read or a wait.
    pub fetch_sessions: parking_lot::Mutex<crate::fetch_session::SessionCache>,
    /// Requests being handled, with their deadlines (overdue ones are a
    /// bug, reported on `/metrics`).
    pub in_flight: crate::protocol::in_flight::InFlight,
    /// Client telemetry (KIP-714): instances and what they pushed.
    pub telemetry: crate::telemetry::ClientTelemetry,
}

impl Broker {
    pub fn new(
        node_id: i32,
        advertised_host: String,
        advertised_port: i32,
        advertised_endpoints: Vec<crate::image::ListenerEndpoint>,
        topics: TopicManager,
        groups: GroupCoordinator,
        connection_limits: ConnectionLimitSettings,
    ) -> Self {
        let config = topics.broker_config();
        let budget = match usize::try_from(config.queued_max_request_bytes) {
            Ok(bytes) => bytes,
            Err(_) => usize::MAX, // -1: unbounded, as Kafka's default
        };
        let request_budget = RequestBudget::new(budget, config.socket_request_max_bytes);
        let replicas = crate::replication::ReplicaManager::new(
            node_id,
            crate::replication::FetchSettings::from_config(&config),
        );
        let dynamic_configs =
            crate::local_store::JsonFile::open(topics.data_dir(), "dynamic-broker-configs.json");
        let client_quotas: crate::local_store::JsonFile<Vec<crate::quota::ClientQuotaRecord>> =
            crate::local_store::JsonFile::open(topics.data_dir(), "client-quotas.json");
        let scram_credentials: crate::local_store::JsonFile<
            Vec<moldau_coordination::records::ScramCredentialRecord>,
        > = crate::local_store::JsonFile::open(topics.data_dir(), "scram-credentials.json");
        let acls: crate::local_store::JsonFile<Vec<moldau_coordination::records::AclRecord>> =
            crate::local_store::JsonFile::open(topics.data_dir(), "acls.json");
        let authorizer_config = config.authorizer.clone().map(Arc::new);
        let image = standalone_image(
            node_id,
            &advertised_host,
            advertised_port,
            &advertised_endpoints,
            &topics,
            dynamic_configs.get(),
            &client_quotas.get(),
            &scram_credentials.get(),
            &acls.get(),
        );
        replicas.apply_dynamic_configs(&image);
        let image = RwLock::new(Arc::new(image));
        let metrics = Metrics::default();
        let quotas = crate::quota::QuotaManager::with_metrics(
            metrics.quota_throttle_time_ms.clone(),
            metrics.quota_recorded.clone(),
        );
        Self {
            image,
            remote_image: AtomicBool::new(false),
            has_controller_image: AtomicBool::new(false),
            images_published: std::sync::atomic::AtomicI64::new(1),
            connection_limits: ConnectionLimiter::new(connection_limits),
            request_budget,
            node_id,
            advertised_host,
            advertised_port,
            advertised_endpoints,
            rack: config.broker_rack.clone(),
            txns: crate::txn_coordinator::TxnCoordinator::new(
                crate::txn_coordinator::TxnSettings::from_config(&config),
            ),
            markers: std::sync::OnceLock::new(),
            txn_channel: std::sync::OnceLock::new(),
            topics,
            groups,
            metrics,
            quotas,
            ready: AtomicBool::new(false),
            link: std::sync::OnceLock::new(),
            replicas,
            dynamic_configs,
            client_quotas,
            scram_credentials,
            acls,
            authorizer_config,
            in_flight: Default::default(),
            telemetry: Default::default(),
            fetch_sessions: parking_lot::Mutex::new(crate::fetch_session::SessionCache::new(
                config.max_incremental_fetch_session_cache_slots,
                config.min_incremental_fetch_session_eviction_ms,
            )),
        }
    }

    /// Sets where transaction markers go (once, at start).
    pub fn set_marker_sender(&self, sender: Arc<dyn crate::txn_coordinator::MarkerSender>) {
        let _ = self.markers.set(sender);
    }

    /// Sets the brokers' transaction channel: markers to partition
    /// leaders, verifications to transaction coordinators.
    pub fn set_txn_channel<C>(&self, channel: Arc<C>)
    where
        C: crate::txn_coordinator::MarkerSender + crate::txn_coordinator::VerifyChannel + 'static,
    {
        let _ = self.txn_channel.set(channel.clone());
        self.set_marker_sender(channel);
    }

    /// The brokers' transaction channel (verifications), once set.
    pub fn txn_channel(&self) -> Option<&Arc<dyn crate::txn_coordinator::VerifyChannel>> {
        self.txn_channel.get()
    }

    /// Where transaction markers go, once set.
    pub fn marker_sender(&self) -> Option<&Arc<dyn crate::txn_coordinator::MarkerSender>> {
        self.markers.get()
    }

    /// The current metadata image (cheap: a shared pointer).
    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.read().clone()
    }

    /// The authorizer's configuration; `None` when no authorizer is
    /// configured (`authorizer.class.name` unset or empty).
    pub fn authorizer_config(&self) -> Option<&crate::security::acl::AuthorizerConfig> {
        self.authorizer_config.as_deref()
    }

    /// The authorizer to ask about a request: this broker's configuration
    /// over the current image's ACLs (cheap: two shared pointers); `None`
    /// without an authorizer, when Kafka allows everything. The handlers
    /// ask it through `handlers::access`.
    pub fn authorizer(&self) -> Option<crate::security::acl::Authorizer> {
        let config = self.authorizer_config.clone()?;
        Some(crate::security::acl::Authorizer::shared(
            config,
            self.image().acls.clone(),
        ))
    }

    /// Counts `amount` of `kind` for `client` (its user and client id)
    /// against its quota (if it has one); the time to throttle it, in ms.
    pub fn record_quota(
        &self,
        client: crate::quota::entity::QuotaClient<'_>,
        kind: crate::quota::QuotaKind,
        amount: usize,
    ) -> i32 {
        let image = self.image();
        self.quotas.record(
            &image.client_quotas,
            client,
            kind,
            amount as f64,
            crate::clock::now_ms(),
        )
    }

    /// Rebuilds the image from the metadata this broker keeps and makes it
    /// current (standalone mode: the broker is its own controller).
    pub(crate) fn publish_image(&self) {
        if self.remote_image.load(Ordering::SeqCst) {
            // cluster mode: only the controller's images are installed
            return;
        }
        let image = standalone_image(
            self.node_id,
            &self.advertised_host,
            self.advertised_port,
            &self.advertised_endpoints,
            &self.topics,
            self.dynamic_configs.get(),
            &self.client_quotas.get(),
            &self.scram_credentials.get(),
            &self.acls.get(),
        );
        self.replicas.apply_dynamic_configs(&image);
        self.topics
            .apply_dynamic_broker_configs(&image.broker_configs, self.node_id);
        self.apply_connection_limits();
        *self.image.write() = Arc::new(image);
        self.images_published.fetch_add(1, Ordering::SeqCst);
    }

    /// Standalone mode: how many metadata images this broker has published
    /// since it started (its first, built at start, is 1).
    pub fn images_published(&self) -> i64 {
        self.images_published.load(Ordering::SeqCst)
    }

    /// Installs an image received from the controller (cluster mode); from
    /// then on this broker's own metadata no longer makes images.
    pub fn install_image(&self, image: MetadataImage) {
        self.remote_image.store(true, Ordering::SeqCst);
        // Serving starts once the controller shows this very process in
        // service (as a Kafka broker enables its request processing only
        // once unfenced): an image from before that lacks this broker, and
        // clients would be told a cluster without it.
        let in_service = image.broker(self.node_id).is_some_and(|b| {
            b.incarnation.is_none() || b.incarnation == self.replicas.incarnation()
        });
        if in_service {
            self.has_controller_image.store(true, Ordering::SeqCst);
        }
        self.topics
            .apply_dynamic_broker_configs(&image.broker_configs, self.node_id);
        self.apply_connection_limits();
        *self.image.write() = Arc::new(image);
    }

    /// Brings the connection limits to the effective broker config
    /// (`max.connections*` are dynamic broker configs, as in Kafka).
    fn apply_connection_limits(&self) {
        match ConnectionLimitSettings::from_config(&self.topics.broker_config()) {
            Ok(limits) => {
                let (total, per_ip) = (limits.max_connections, limits.max_connections_per_ip);
                if self.connection_limits.set_settings(limits) {
                    tracing::info!(
                        max_connections = total,
                        max_connections_per_ip = per_ip,
                        "connection limits changed"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "dynamic connection limits do not apply; keeping the last ones")
            }
        }
    }

    /// Puts the broker in cluster mode: metadata changes go to the
    /// controller over `link`, and only its images are installed.
    pub fn join_cluster(&self, link: Arc<crate::controller::link::ControllerLink>) {
        self.remote_image.store(true, Ordering::SeqCst);
        let _ = self.link.set(link);
    }

    /// The link to the active controller (cluster mode only).
    pub fn controller_link(&self) -> Option<&Arc<crate::controller::link::ControllerLink>> {
        self.link.get()
    }

    /// The cluster id: the controller's in cluster mode, else this broker's.
    pub fn cluster_id(&self) -> String {
        if self.link.get().is_some() {
            return self.image().cluster_id.clone();
        }
        self.topics.cluster_id().to_string()
    }
    pub fn socket_request_max_bytes(&self) -> usize {
        self.topics.broker_config().socket_request_max_bytes
    }
    /// Ready once logs are recovered and the listener is bound.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }
    /// Ready to serve: logs recovered and listener bound, and in cluster
    /// mode also an image from the controller installed that shows this
    /// broker (this incarnation) in service (after that the broker stays
    /// ready while the controller is unreachable: the data plane does not
    /// wait for it).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
            && (self.link.get().is_none() || self.has_controller_image.load(Ordering::SeqCst))
    }
}

/// The image of a standalone broker over the topics it keeps.
#[allow(clippy::too_many_arguments)]
fn standalone_image(
    node_id: i32,
    host: &str,
    port: i32,
    endpoints: &[crate::image::ListenerEndpoint],
    topics: &TopicManager,
    broker_configs: crate::config_values::BrokerConfigs,
    client_quotas: &[crate::quota::ClientQuotaRecord],
    scram_credentials: &[moldau_coordination::records::ScramCredentialRecord],
    acls: &[moldau_coordination::records::AclRecord],
) -> MetadataImage {
    let this = BrokerImage {
        id: node_id,
        host: host.to_string(),
        port,
        rack: None,
        endpoints: endpoints.to_vec(),
        incarnation: None,
    };
    let facts = topics.all().into_iter().map(|t| TopicFacts {
        name: t.meta.name.clone(),
        id: t.meta.id,
        partitions: t.meta.partitions,
    });
    let mut image = MetadataImage::standalone(topics.cluster_id(), this, facts);
    image.broker_configs = broker_configs;
    image.client_quotas = crate::quota::from_records(client_quotas);
    let (credentials, skipped) =
        crate::security::credentials::ScramCredentials::from_records(scram_credentials);
    for why in skipped {
        tracing::warn!("scram-credentials.json: {why}; left out");
    }
    image.scram_credentials = credentials;
    let (acls, skipped) = crate::security::acl_admin::from_records(acls);
    for why in skipped {
        tracing::warn!("acls.json: {why}; left out");
    }
    image.acls = Arc::new(acls);
    image
}
