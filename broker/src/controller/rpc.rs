//! The controller's gRPC edge (`proto/controller.proto`): brokers register,
//! heartbeat and fetch metadata. A thin layer over the pure decisions of
//! [`super::registry`] and [`super::leadership`]: each call takes the state
//! lock, applies one decision, and bumps the metadata offset when the
//! cluster changed; [`ControllerService::tick`] fences silent brokers and
//! moves their leaderships.
//!
//! What is not here yet: persisting the state (the Kubernetes metadata
//! store), electing this controller (the Lease), and the broker side that
//! applies fetched metadata to its image. This edge is complete for what it
//! does and tested over real gRPC on 127.0.0.1.

use std::collections::BTreeSet;
use std::sync::Arc;

use parking_lot::Mutex;
use tonic::{Request, Response, Status};
use uuid::Uuid;

use super::leadership::{self, Change, Election, PartitionState};
use super::registry::{Registration, Registry, RegistryError};

/// The generated protocol types and service traits.
pub mod pb {
    tonic::include_proto!("moldau.controller.v1");
}

/// Milliseconds since the epoch; tests pass a clock they move by hand.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Settings of one controller term.
#[derive(Clone)]
pub struct ControllerSettings {
    pub cluster_id: String,
    pub controller_id: i32,
    /// Grows with every term (from the Lease); carried by every answer.
    pub controller_epoch: i64,
    /// A broker silent for this long is fenced.
    pub session_timeout_ms: i64,
    pub clock: Clock,
    /// Topics that allow unclean leader election.
    pub unclean_topics: BTreeSet<String>,
}

struct State {
    registry: Registry,
    partitions: Vec<PartitionState>,
    metadata_offset: i64,
}

/// The controller's service: one per active controller term.
#[derive(Clone)]
pub struct ControllerService {
    settings: ControllerSettings,
    state: Arc<Mutex<State>>,
}

fn registry_status(e: RegistryError) -> Status {
    match e {
        RegistryError::DuplicateNodeId { .. } => Status::already_exists(e.to_string()),
        RegistryError::StaleBroker { .. } => Status::failed_precondition(e.to_string()),
        RegistryError::BadNodeId(_) => Status::invalid_argument(e.to_string()),
    }
}

impl ControllerService {
    pub fn new(settings: ControllerSettings, partitions: Vec<PartitionState>) -> Self {
        Self {
            settings,
            state: Arc::new(Mutex::new(State {
                registry: Registry::default(),
                partitions,
                metadata_offset: 1,
            })),
        }
    }

    fn now(&self) -> i64 {
        (self.settings.clock)()
    }

    /// Applies decided partition changes; returns whether any applied.
    fn apply(state: &mut State, changes: Vec<Change>) -> bool {
        let mut any = false;
        for c in changes {
            if c.election == Election::Unclean {
                tracing::warn!(
                    topic = %c.state.topic,
                    partition = c.state.index,
                    leader = c.state.leader,
                    "unclean leader election: acknowledged records may be lost"
                );
            }
            if let Some(p) = state
                .partitions
                .iter_mut()
                .find(|p| p.topic == c.state.topic && p.index == c.state.index)
            {
                *p = c.state;
                any = true;
            }
        }
        any
    }

    fn live(state: &State) -> BTreeSet<i32> {
        state
            .registry
            .live()
            .map(|b| b.registration.node_id)
            .collect()
    }

    /// Fences brokers whose heartbeats stopped and moves what they led.
    /// Returns the fenced node ids. Call it periodically.
    pub fn tick(&self) -> Vec<i32> {
        let now = self.now();
        let mut state = self.state.lock();
        let fenced = state.registry.expire(now, self.settings.session_timeout_ms);
        if fenced.is_empty() {
            return fenced;
        }
        let live = Self::live(&state);
        let gone: BTreeSet<i32> = fenced.iter().copied().collect();
        let unclean = &self.settings.unclean_topics;
        let changes =
            leadership::on_brokers_fenced(&state.partitions, &gone, &live, |t| unclean.contains(t));
        Self::apply(&mut state, changes);
        state.metadata_offset += 1;
        tracing::warn!(?fenced, "brokers fenced after missing heartbeats");
        fenced
    }

    /// The current partition states (for tests and the status report).
    pub fn partitions(&self) -> Vec<PartitionState> {
        self.state.lock().partitions.clone()
    }
}

fn parse_incarnation(s: &str) -> Result<Uuid, Status> {
    Uuid::parse_str(s).map_err(|_| Status::invalid_argument("incarnation must be a UUID"))
}

#[tonic::async_trait]
impl pb::controller_server::Controller for ControllerService {
    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        let r = request.into_inner();
        let registration = Registration {
            node_id: r.node_id,
            incarnation: parse_incarnation(&r.incarnation)?,
            host: r.host,
            port: r.port,
            rack: (!r.rack.is_empty()).then_some(r.rack),
        };
        let now = self.now();
        let mut state = self.state.lock();
        let broker_epoch = state
            .registry
            .register(registration, now, self.settings.session_timeout_ms)
            .map_err(registry_status)?;
        tracing::info!(node_id = r.node_id, broker_epoch, "broker registered");
        Ok(Response::new(pb::RegisterResponse {
            broker_epoch,
            controller_epoch: self.settings.controller_epoch,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let r = request.into_inner();
        let incarnation = parse_incarnation(&r.incarnation)?;
        let now = self.now();
        let mut state = self.state.lock();
        // Ready once it has applied the current metadata.
        let ready = r.metadata_offset >= state.metadata_offset;
        let unfenced = state
            .registry
            .heartbeat(r.node_id, incarnation, r.broker_epoch, ready, now)
            .map_err(registry_status)?;
        if unfenced {
            let live = Self::live(&state);
            let unclean = &self.settings.unclean_topics;
            let changes =
                leadership::on_broker_returned(&state.partitions, &live, |t| unclean.contains(t));
            Self::apply(&mut state, changes);
            // the broker set changed even when no leadership did
            state.metadata_offset += 1;
            tracing::info!(node_id = r.node_id, "broker in service");
        }
        Ok(Response::new(pb::HeartbeatResponse {
            controller_epoch: self.settings.controller_epoch,
            metadata_offset: state.metadata_offset,
            fenced: !state.registry.is_live(r.node_id),
        }))
    }

    async fn fetch_metadata(
        &self,
        request: Request<pb::FetchMetadataRequest>,
    ) -> Result<Response<pb::FetchMetadataResponse>, Status> {
        let r = request.into_inner();
        let state = self.state.lock();
        let mut out = pb::FetchMetadataResponse {
            controller_epoch: self.settings.controller_epoch,
            metadata_offset: state.metadata_offset,
            controller_id: self.settings.controller_id,
            cluster_id: self.settings.cluster_id.clone(),
            ..Default::default()
        };
        if r.metadata_offset >= state.metadata_offset {
            return Ok(Response::new(out));
        }
        out.changed = true;
        out.brokers = state
            .registry
            .live()
            .map(|b| pb::Broker {
                node_id: b.registration.node_id,
                host: b.registration.host.clone(),
                port: b.registration.port,
                rack: b.registration.rack.clone().unwrap_or_default(),
            })
            .collect();
        out.partitions = state
            .partitions
            .iter()
            .map(|p| pb::Partition {
                topic: p.topic.clone(),
                index: p.index,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                topic_id: p.topic_id.to_string(),
            })
            .collect();
        Ok(Response::new(out))
    }
}
