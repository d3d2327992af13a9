//! Runs the controller on this broker while it wins the election
//! ([`super::election`]): each term takes the metadata store over (a new
//! epoch, every object stamped), resumes the controller from what it finds,
//! publishes its gRPC address in the cluster record, serves brokers, and
//! ticks (fencing silent brokers). A term ends when leadership is lost, the
//! store deposes it (a newer controller wrote), or the broker shuts down.
//!
//! The gRPC listener is bound once at start and only served during a term,
//! so the address in the cluster record is the same for every term.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use moldau_coordination::lease::{Elector, LeaderState};
use moldau_coordination::store::KubeMetadataStore;

use super::kube_store::KubeTerm;
use super::rpc::pb::controller_server::ControllerServer;
use super::rpc::{ControllerService, ControllerSettings};
use super::store::{ClusterStore, DirStore, Resumed, StoreError};
use crate::security::tls::TlsState;

/// Where the cluster keeps its metadata.
#[derive(Clone)]
pub enum Backend {
    /// Files in a directory the brokers share (one host).
    Dir(PathBuf),
    /// `MetadataShard` objects, the controller elected by a Lease.
    Kube {
        store: Arc<KubeMetadataStore>,
        elector: Arc<Elector>,
    },
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Dir(d) => write!(f, "Dir({})", d.display()),
            Backend::Kube { .. } => write!(f, "Kube"),
        }
    }
}

impl Backend {
    /// Takes the store over for a new term.
    pub async fn take_over(
        &self,
        node_id: i32,
        address: &str,
    ) -> Result<(Arc<dyn ClusterStore>, Resumed), StoreError> {
        match self {
            Backend::Dir(dir) => {
                let (dir, address) = (dir.clone(), address.to_string());
                let (store, resumed) = tokio::task::spawn_blocking(move || {
                    DirStore::take_over(&dir, node_id, &address)
                })
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))??;
                Ok((Arc::new(store) as Arc<dyn ClusterStore>, resumed))
            }
            Backend::Kube { store, elector } => {
                let snapshot = store
                    .take_over(node_id, address)
                    .await
                    .map_err(|e| StoreError::Unavailable(e.to_string()))?;
                for (object, epoch) in &snapshot.adopted {
                    tracing::warn!(%object, epoch, "adopted a metadata object written outside the known controller terms");
                }
                let term = KubeTerm {
                    store: store.clone(),
                    elector: elector.clone(),
                    epoch: snapshot.epoch,
                    writer: node_id,
                };
                let resumed = Resumed {
                    epoch: snapshot.epoch,
                    cluster: snapshot.cluster,
                    previous_controller: snapshot.previous_controller,
                    cluster_version: snapshot.cluster_resource_version,
                    topics: snapshot.topics,
                    invalid: snapshot.invalid,
                };
                Ok((Arc::new(term) as Arc<dyn ClusterStore>, resumed))
            }
        }
    }

    /// Where the active controller is, from the cluster record: its node id
    /// and address.
    pub async fn controller_address(&self) -> Result<Option<(i32, String)>, StoreError> {
        let record = match self {
            Backend::Dir(dir) => {
                let dir = dir.clone();
                tokio::task::spawn_blocking(move || DirStore::read_cluster(&dir))
                    .await
                    .map_err(|e| StoreError::Unavailable(e.to_string()))??
                    .map(|(_, c)| c)
            }
            Backend::Kube { store, .. } => store
                .read_cluster()
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))?
                .map(|s| s.record),
        };
        Ok(record
            .filter(|c| !c.controller_address.is_empty())
            .map(|c| (c.controller_id, c.controller_address)))
    }

    /// Who holds the controller Lease, as this broker's elector last saw
    /// it, and its changes (Kubernetes mode; the directory's file lease
    /// has no watch, so a session there learns of a new controller when a
    /// call to the old one fails).
    pub fn lease_holder(&self) -> Option<watch::Receiver<LeaderState>> {
        match self {
            Backend::Dir(_) => None,
            Backend::Kube { elector, .. } => Some(elector.subscribe()),
        }
    }
}

/// The controller's endpoint and settings.
pub struct HostConfig {
    pub backend: Backend,
    /// Bound at start; served during terms.
    pub listener: std::net::TcpListener,
    /// `http://host:port` or `https://host:port` brokers dial.
    pub address: String,
    /// The inter-broker listener's TLS, when it has one: the endpoint then
    /// serves TLS and requires brokers' certificates
    /// ([`super::transport`]).
    pub tls: Option<Arc<TlsState>>,
    pub settings: ControllerSettings,
    /// How often to check broker sessions.
    pub tick: Duration,
}

/// Runs controller terms while `leading` is true, until `shutdown`.
pub async fn run(
    cfg: HostConfig,
    mut leading: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    if let Err(e) = cfg.listener.set_nonblocking(true) {
        tracing::error!(error = %e, "controller listener unusable; this broker cannot be controller");
        return;
    }
    loop {
        tokio::select! {
            r = leading.wait_for(|l| *l) => if r.is_err() { return },
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let node_id = cfg.settings.controller_id;
        let (store, resumed) = match cfg.backend.take_over(node_id, &cfg.address).await {
            Ok(taken) => taken,
            Err(e) => {
                tracing::error!(error = %e, "cannot take the metadata store over; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        for (object, reason) in &resumed.invalid {
            tracing::error!(%object, %reason, "a metadata object is invalid; it is left as it is and ignored until fixed");
        }
        let epoch = resumed.epoch;
        tracing::info!(epoch, topics = resumed.topics.len(), address = %cfg.address, "controller term begins");
        let service = ControllerService::resume(cfg.settings.clone(), store, resumed);
        let deposed = service.deposed();
        let term = serve_term(
            &cfg,
            service,
            deposed.clone(),
            leading.clone(),
            shutdown.clone(),
        );
        term.await;
        tracing::warn!(epoch, "controller term ended");
        if *deposed.borrow() {
            // Another controller wrote: let it lead rather than take over
            // again at once.
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
}

async fn serve_term(
    cfg: &HostConfig,
    service: ControllerService,
    mut deposed: watch::Receiver<bool>,
    mut leading: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let listener = match cfg
        .listener
        .try_clone()
        .and_then(tokio::net::TcpListener::from_std)
    {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot serve the controller listener");
            return;
        }
    };
    let ended = async move {
        tokio::select! {
            _ = leading.wait_for(|l| !*l) => {}
            _ = deposed.wait_for(|d| *d) => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
    };
    let router =
        tonic::transport::Server::builder().add_service(ControllerServer::new(service.clone()));
    let server = async move {
        match &cfg.tls {
            None => {
                router
                    .serve_with_incoming_shutdown(
                        tonic::transport::server::TcpIncoming::from(listener),
                        ended,
                    )
                    .await
            }
            Some(tls) => {
                router
                    .serve_with_incoming_shutdown(
                        super::transport::tls_incoming(listener, tls.clone()),
                        ended,
                    )
                    .await
            }
        }
    };
    let ticker = async {
        let mut every = tokio::time::interval(cfg.tick);
        loop {
            every.tick().await;
            service.tick().await;
        }
    };
    tokio::select! {
        r = server => if let Err(e) = r { tracing::error!(error = %e, "controller endpoint failed") },
        _ = ticker => {}
    }
}
