//! The broker's side of the controller protocol (cluster mode, in
//! progress): register with the controller, heartbeat, and install every
//! newer metadata image it publishes. Handlers then answer Metadata,
//! DescribeCluster and FindCoordinator from the controller's view, and
//! serve only the partitions the image says this broker leads.
//!
//! The session re-registers (with its incarnation) when the controller
//! says its heartbeats are stale, and retries with a capped backoff while
//! the controller cannot be reached; meanwhile the broker keeps serving
//! with the image it has (the data plane never waits for the controller).
//!
//! Not yet: opening and closing local partition logs as roles change, and
//! finding the controller through the Kubernetes Lease.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use uuid::Uuid;

use super::rpc::pb::controller_client::ControllerClient;
use super::rpc::pb::{self, FetchMetadataRequest, HeartbeatRequest, RegisterRequest};
use crate::broker::Broker;
use crate::image::{BrokerImage, MetadataImage, PartitionImage};

/// Where the controller is and how often to heartbeat.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// `http://host:port` of the controller's gRPC endpoint.
    pub controller: String,
    pub heartbeat: Duration,
}

/// The image a controller's metadata answer describes.
pub fn image_from(m: &pb::FetchMetadataResponse) -> MetadataImage {
    let brokers = m
        .brokers
        .iter()
        .map(|b| BrokerImage {
            id: b.node_id,
            host: b.host.clone(),
            port: b.port,
            rack: (!b.rack.is_empty()).then(|| b.rack.clone()),
        })
        .collect();
    let mut topics: BTreeMap<String, (Uuid, Vec<PartitionImage>)> = BTreeMap::new();
    for p in &m.partitions {
        let entry = topics.entry(p.topic.clone()).or_insert_with(|| {
            (
                Uuid::parse_str(&p.topic_id).unwrap_or(Uuid::nil()),
                Vec::new(),
            )
        });
        entry.1.push(PartitionImage {
            index: p.index,
            replicas: p.replicas.clone(),
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            isr: p.isr.clone(),
        });
    }
    let topics = topics.into_iter().map(|(name, (id, mut partitions))| {
        partitions.sort_by_key(|p| p.index);
        (name, id, partitions)
    });
    MetadataImage::new(&m.cluster_id, m.controller_id, brokers, topics)
}

/// Runs the session until `shutdown` turns true.
pub async fn run(broker: Arc<Broker>, config: SessionConfig, mut shutdown: watch::Receiver<bool>) {
    let incarnation = Uuid::new_v4();
    let mut backoff = Duration::from_millis(100);
    loop {
        let attempt = session(&broker, &config, incarnation, &mut shutdown).await;
        if *shutdown.borrow() {
            return;
        }
        if let Err(e) = attempt {
            tracing::warn!(controller = %config.controller, error = %e, "controller session interrupted; retrying");
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// One registration and its heartbeats, until an error or shutdown.
async fn session(
    broker: &Broker,
    config: &SessionConfig,
    incarnation: Uuid,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), tonic::Status> {
    let mut client = ControllerClient::connect(config.controller.clone())
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let registered = client
        .register(RegisterRequest {
            node_id: broker.node_id,
            incarnation: incarnation.to_string(),
            host: broker.advertised_host.clone(),
            port: broker.advertised_port,
            rack: String::new(),
        })
        .await?
        .into_inner();
    tracing::info!(
        broker_epoch = registered.broker_epoch,
        controller_epoch = registered.controller_epoch,
        "registered with the controller"
    );
    let mut fence = super::fencing::EpochFence::default();
    let mut offset = 0i64;
    let mut wanted = 1i64;
    loop {
        if wanted > offset {
            let m = client
                .fetch_metadata(FetchMetadataRequest {
                    node_id: broker.node_id,
                    metadata_offset: offset,
                })
                .await?
                .into_inner();
            if fence.admit(m.controller_epoch).is_err() {
                return Err(tonic::Status::aborted("answer from an older controller"));
            }
            if m.changed {
                broker.install_image(image_from(&m));
            }
            offset = m.metadata_offset;
        }
        let beat = client
            .heartbeat(HeartbeatRequest {
                node_id: broker.node_id,
                incarnation: incarnation.to_string(),
                broker_epoch: registered.broker_epoch,
                metadata_offset: offset,
            })
            .await?
            .into_inner();
        if fence.admit(beat.controller_epoch).is_err() {
            return Err(tonic::Status::aborted("answer from an older controller"));
        }
        wanted = beat.metadata_offset;
        tokio::select! {
            _ = tokio::time::sleep(config.heartbeat) => {}
            _ = shutdown.changed() => return Ok(()),
        }
    }
}
