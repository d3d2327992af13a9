//! The broker's side of the controller protocol (cluster mode): find the
//! controller in the cluster record, register, heartbeat, and long-poll its
//! metadata; every newer image is applied to the local logs (partitions
//! placed here are created or opened, topics gone are deleted), installed,
//! and followed by the group coordinator (offsets partitions led here are
//! loaded, the others unloaded). Handlers then answer from the
//! controller's view and serve only the partitions this broker leads.
//!
//! A broken session (controller gone, paused or deposed) is retried with a
//! capped backoff, finding the controller again each time; meanwhile the
//! broker keeps serving with the image it has (the data plane never waits
//! for the controller). Answers of an older controller epoch are refused.
//!
//! In Kubernetes mode the broker's own elector reads the controller Lease
//! every renewal period, so a session also ends the moment another broker
//! holds the Lease: it does not wait for a call to the old controller (a
//! paused one accepts connections and answers nothing) to time out, and
//! it dials the new one once the cluster record names it (a new holder
//! writes the record at its take-over, moments after winning the Lease).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use moldau_coordination::lease::LeaderState;
use tokio::sync::watch;
use uuid::Uuid;

use super::host::Backend;
use super::link::{ControllerLink, Session};
use super::rpc::pb::controller_client::ControllerClient;
use super::rpc::pb::{self, FetchMetadataRequest, HeartbeatRequest, RegisterRequest};
use crate::broker::Broker;
use crate::image::{BrokerImage, MetadataImage, PartitionImage};

/// How the session finds the controller and how often it heartbeats.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The controller's address is read from the cluster record here.
    pub backend: Backend,
    pub heartbeat: Duration,
    pub link: Arc<ControllerLink>,
    /// The data directory's succession token (see [`crate::data_dir`]).
    pub succession_token: String,
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
            endpoints: b
                .endpoints
                .iter()
                .map(super::rpc::endpoint_from_pb)
                .collect(),
            incarnation: Uuid::parse_str(&b.incarnation).ok(),
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
            partition_epoch: p.partition_epoch,
            adding_replicas: p.adding_replicas.clone(),
            removing_replicas: p.removing_replicas.clone(),
        });
    }
    let topics = topics.into_iter().map(|(name, (id, mut partitions))| {
        partitions.sort_by_key(|p| p.index);
        (name, id, partitions)
    });
    let mut image = MetadataImage::new(&m.cluster_id, m.controller_id, brokers, topics);
    for c in &m.topic_configs {
        image.set_configs(&c.topic, c.configs.clone().into_iter().collect());
    }
    image.client_quotas = m
        .client_quotas
        .iter()
        .map(|q| {
            let entity = crate::quota::QuotaEntity {
                user: super::rpc::quota_part_from_pb(q.user.as_ref()),
                client_id: super::rpc::quota_part_from_pb(q.client_id.as_ref()),
            };
            (entity, q.values.clone().into_iter().collect())
        })
        .collect();
    image.scram_credentials = super::rpc::scram_credentials_from_pb(&m.scram_credentials);
    image.acls = std::sync::Arc::new(super::rpc::acls_from_pb(&m.acls));
    image.broker_configs = m
        .broker_configs
        .iter()
        .map(|b| (b.entity.clone(), b.configs.clone().into_iter().collect()))
        .collect();
    image.deleted_topic_ids = m
        .deleted_topic_ids
        .iter()
        .filter_map(|id| Uuid::parse_str(id).ok())
        .collect();
    image
}

/// How long a call to the controller may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a metadata fetch waits for a change (below the call timeout).
const METADATA_POLL_MS: i32 = 2_000;

/// Runs the session until `shutdown` turns true.
pub async fn run(broker: Arc<Broker>, config: SessionConfig, mut shutdown: watch::Receiver<bool>) {
    let incarnation = Uuid::new_v4();
    broker.replicas.set_incarnation(incarnation);
    let mut applied = Applied::default();
    let mut backoff = Duration::from_millis(100);
    loop {
        let attempt = session(&broker, &config, incarnation, &mut applied, &mut shutdown).await;
        config.link.set_session(None);
        if *shutdown.borrow() {
            return;
        }
        match attempt {
            // a session that ran for a while starts the backoff over
            Err(e) if e.code() != tonic::Code::Ok => {
                tracing::warn!(error = %e.message(), "controller session interrupted; finding the controller again")
            }
            _ => backoff = Duration::from_millis(100),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// What this broker has applied, kept across sessions: a new controller
/// answers with its own offsets, so only the epoch fence carries over.
#[derive(Default)]
struct Applied {
    fence: super::fencing::EpochFence,
}

/// Makes the local logs match an image and gives each partition its role
/// (on the blocking pool: it creates and opens files).
async fn apply(broker: &Arc<Broker>, image: &MetadataImage) -> Result<(), tonic::Status> {
    let assigned = image.assigned_to(broker.node_id);
    let deleted: std::collections::HashSet<Uuid> =
        image.deleted_topic_ids.iter().copied().collect();
    let b = broker.clone();
    let image = image.clone();
    tokio::task::spawn_blocking(move || {
        let applied = b.topics.apply_assignment(&assigned, &deleted);
        // roles even when some partition could not be opened
        b.replicas.apply_image(&b.topics, &image);
        applied
    })
    .await
    .map_err(|e| tonic::Status::internal(e.to_string()))?
    .map(drop)
    .map_err(|e| tonic::Status::internal(format!("applying the metadata: {}", e.message)))
}

/// A coordinator topic's partition count and the partitions `node` leads
/// in `image` (None while the topic does not exist).
fn led_partitions(
    image: &MetadataImage,
    topic: &str,
    node: i32,
) -> Option<(i32, std::collections::BTreeSet<i32>)> {
    let t = image.topic(topic)?;
    let partitions = i32::try_from(t.partitions.len()).unwrap_or(i32::MAX);
    let led = t
        .partitions
        .iter()
        .filter(|p| p.leader == node)
        .map(|p| p.index)
        .collect();
    Some((partitions, led))
}

/// Loads the groups of the offsets partitions this broker now leads and
/// unloads the rest (after the image is installed, so a moved group's
/// clients are already sent to its new coordinator).
async fn follow_coordinators(broker: &Arc<Broker>, image: &MetadataImage) {
    follow_transaction_coordinator(broker, image).await;
    let Some((partitions, led)) =
        led_partitions(image, crate::group::offsets::OFFSETS_TOPIC, broker.node_id)
    else {
        return;
    };
    let b = broker.clone();
    let _ = tokio::task::spawn_blocking(move || {
        b.groups.follow_leadership(&b.topics, partitions, &led)
    })
    .await;
}

/// Loads the transactional ids of the `__transaction_state` partitions
/// this broker now leads (in their new leader epoch: the coordinator
/// epoch) and drops the rest.
async fn follow_transaction_coordinator(broker: &Arc<Broker>, image: &MetadataImage) {
    let Some((partitions, led)) = led_partitions(
        image,
        crate::txn::vocab::TRANSACTION_STATE_TOPIC,
        broker.node_id,
    ) else {
        return;
    };
    let b = broker.clone();
    let _ =
        tokio::task::spawn_blocking(move || b.txns.follow_leadership(&b.topics, partitions, &led))
            .await;
}

/// The node id in a controller Lease holder's identity
/// (`<cluster>-broker-<node id>-<incarnation>`).
fn holder_node(identity: &str) -> Option<i32> {
    let mut parts = identity.rsplitn(3, '-');
    let _incarnation = parts.next()?;
    let node = parts.next()?.parse().ok()?;
    parts.next()?.ends_with("broker").then_some(node)
}

/// The broker holding the controller Lease, as `state` says (None:
/// unknown).
fn lease_holder_node(state: &LeaderState, own: i32) -> Option<i32> {
    match state {
        LeaderState::Leading { .. } => Some(own),
        LeaderState::Following { holder } => holder.as_deref().and_then(holder_node),
    }
}

/// Returns once the Lease is held by a broker other than `controller`
/// (never without a Lease to watch).
async fn lease_moved(holder: Option<watch::Receiver<LeaderState>>, controller: i32, own: i32) {
    let Some(mut holder) = holder else {
        return std::future::pending().await;
    };
    loop {
        let now = lease_holder_node(&holder.borrow_and_update(), own);
        if now.is_some_and(|n| n != controller) {
            return;
        }
        if holder.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// How long a session waits before reading the cluster record again when
/// the Lease's new holder has not taken it over yet.
const TAKEOVER_POLL: Duration = Duration::from_millis(50);

/// One registration and its heartbeats, until an error or shutdown.
async fn session(
    broker: &Arc<Broker>,
    config: &SessionConfig,
    incarnation: Uuid,
    applied: &mut Applied,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), tonic::Status> {
    let mut holder = config.backend.lease_holder();
    let lease_node = holder
        .as_mut()
        .and_then(|h| lease_holder_node(&h.borrow_and_update(), broker.node_id));
    let (controller_id, address) = config
        .backend
        .controller_address()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?
        .ok_or_else(|| tonic::Status::unavailable("no controller elected yet"))?;
    if lease_node.is_some_and(|n| n != controller_id) {
        // The record still names the previous controller, which may be
        // paused: wait for the Lease holder's take-over instead of dialing.
        tracing::debug!(
            lease_holder = ?lease_node,
            controller_id,
            "the new controller has not taken over yet"
        );
        tokio::time::sleep(TAKEOVER_POLL).await;
        return Ok(());
    }
    // Every step with the controller, from the connection on, gives way
    // to a new Lease holder (a paused controller accepts connections and
    // answers nothing until a call times out).
    let moved = lease_moved(holder, controller_id, broker.node_id);
    tokio::pin!(moved);
    let connect_and_register = async {
        let endpoint = tonic::transport::Endpoint::from_shared(address.clone())
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?
            // Short: a controller that stopped answering (paused, or its host
            // gone) must not hold this broker past its own session timeout.
            .connect_timeout(Duration::from_secs(1))
            .timeout(CALL_TIMEOUT);
        let channel = super::transport::connect(endpoint, &address, config.link.tls())
            .await
            .map_err(|e| tonic::Status::unavailable(format!("{address}: {e}")))?;
        let mut client = ControllerClient::new(channel);
        let registered = client
            .register(RegisterRequest {
                node_id: broker.node_id,
                incarnation: incarnation.to_string(),
                host: broker.advertised_host.clone(),
                port: broker.advertised_port,
                rack: broker.rack.clone().unwrap_or_default(),
                succession_token: config.succession_token.clone(),
                endpoints: broker
                    .advertised_endpoints
                    .iter()
                    .map(super::rpc::endpoint_to_pb)
                    .collect(),
            })
            .await?
            .into_inner();
        Ok::<_, tonic::Status>((client, registered))
    };
    let (client, registered) = tokio::select! {
        r = connect_and_register => r?,
        _ = &mut moved => {
            tracing::info!(%address, "another broker holds the controller Lease; finding the new controller");
            return Ok(());
        }
    };
    if applied.fence.admit(registered.controller_epoch).is_err() {
        return Err(tonic::Status::aborted("answer from an older controller"));
    }
    tracing::info!(
        %address,
        broker_epoch = registered.broker_epoch,
        controller_epoch = registered.controller_epoch,
        "registered with the controller"
    );
    config.link.set_session(Some(Session {
        address: address.clone(),
        node_id: broker.node_id,
        incarnation: incarnation.to_string(),
        broker_epoch: registered.broker_epoch,
    }));
    // Metadata arrives by long polling (at once after every change);
    // heartbeats report how far this broker has applied it.
    let applied_offset = std::sync::atomic::AtomicI64::new(0);
    let fence = parking_lot::Mutex::new(&mut applied.fence);
    let admit = |epoch: i64| {
        fence
            .lock()
            .admit(epoch)
            .map_err(|_| tonic::Status::aborted("answer from an older controller"))
    };
    let metadata = async {
        let mut client = client.clone();
        loop {
            let have = applied_offset.load(std::sync::atomic::Ordering::SeqCst);
            let m = client
                .fetch_metadata(FetchMetadataRequest {
                    node_id: broker.node_id,
                    metadata_offset: have,
                    wait_ms: METADATA_POLL_MS,
                })
                .await?
                .into_inner();
            admit(m.controller_epoch)?;
            if m.changed {
                let image = image_from(&m);
                apply(broker, &image).await?;
                broker.install_image(image.clone());
                follow_coordinators(broker, &image).await;
            }
            applied_offset.store(m.metadata_offset, std::sync::atomic::Ordering::SeqCst);
            config
                .link
                .set_applied(m.controller_epoch, m.metadata_offset);
        }
    };
    let heartbeats = async {
        let mut client = client.clone();
        loop {
            let beat = client
                .heartbeat(HeartbeatRequest {
                    node_id: broker.node_id,
                    incarnation: incarnation.to_string(),
                    broker_epoch: registered.broker_epoch,
                    metadata_offset: applied_offset.load(std::sync::atomic::Ordering::SeqCst),
                })
                .await?
                .into_inner();
            admit(beat.controller_epoch)?;
            tokio::time::sleep(config.heartbeat).await;
        }
    };
    tokio::select! {
        r = metadata => r,
        r = heartbeats => r,
        _ = &mut moved => {
            tracing::info!(%address, "another broker holds the controller Lease; finding the new controller");
            Ok(())
        }
        _ = shutdown.changed() => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_holder_is_read_from_its_identity() {
        assert_eq!(holder_node("kc-broker-2-0a1b2c3d"), Some(2));
        assert_eq!(
            holder_node("my-broker-cluster-broker-11-0a1b2c3d"),
            Some(11)
        );
        assert_eq!(holder_node("kc-broker-x-0a1b2c3d"), None);
        assert_eq!(holder_node("operator-7-abc"), None);
        assert_eq!(holder_node("nonsense"), None);
        let following = |h: &str| LeaderState::Following {
            holder: Some(h.into()),
        };
        assert_eq!(lease_holder_node(&following("kc-broker-1-ab"), 0), Some(1));
        assert_eq!(
            lease_holder_node(&LeaderState::Following { holder: None }, 0),
            None
        );
        let leading = LeaderState::Leading {
            until: std::time::Instant::now(),
            transitions: 3,
        };
        assert_eq!(lease_holder_node(&leading, 4), Some(4));
    }

    #[tokio::test]
    async fn a_session_ends_when_another_broker_takes_the_lease() {
        let (tx, rx) = watch::channel(LeaderState::Following {
            holder: Some("kc-broker-1-ab".into()),
        });
        let moved = tokio::spawn(lease_moved(Some(rx), 1, 0));
        // renewals by the same holder, and an unknown holder, change nothing
        tx.send_replace(LeaderState::Following {
            holder: Some("kc-broker-1-ab".into()),
        });
        tx.send_replace(LeaderState::Following { holder: None });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!moved.is_finished());
        tx.send_replace(LeaderState::Following {
            holder: Some("kc-broker-2-cd".into()),
        });
        tokio::time::timeout(Duration::from_secs(5), moved)
            .await
            .expect("ends at the new holder")
            .unwrap();
        // this broker winning the Lease ends a session with another one too
        let (tx, rx) = watch::channel(LeaderState::Following {
            holder: Some("kc-broker-1-ab".into()),
        });
        let moved = tokio::spawn(lease_moved(Some(rx), 1, 0));
        tx.send_replace(LeaderState::Leading {
            until: std::time::Instant::now(),
            transitions: 2,
        });
        tokio::time::timeout(Duration::from_secs(5), moved)
            .await
            .expect("ends when this broker leads")
            .unwrap();
    }
}
