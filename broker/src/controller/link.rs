//! A cluster-mode broker's link to the active controller: where it is
//! (set by the [`super::session`] once registered), how far this broker
//! has applied the controller's metadata, and the calls the
//! [`super::Controller`] facade forwards — admin changes and producer-id
//! blocks. Admin calls come from handlers running on the blocking pool, so
//! they block on the runtime here; a change is answered once this broker's
//! own image shows it (bounded), so a client that creates a topic and then
//! asks this broker for metadata finds it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};

use super::rpc::pb::controller_client::ControllerClient;
use super::rpc::pb::{
    AdminResponse, AllocateProducerIdsRequest, AlterReassignmentsRequest, DescribeQuorumRequest,
    DescribeQuorumResponse, ReassignmentResult,
};
use crate::error::TopicError;
use crate::security::tls::TlsState;

/// The registered session with the active controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub address: String,
    pub node_id: i32,
    pub incarnation: String,
    pub broker_epoch: i64,
}

/// How long a forwarded change may take, and how long its answer waits
/// for this broker's image to show it.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const SHOW_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct ControllerLink {
    session: watch::Sender<Option<Session>>,
    /// `(controller epoch, metadata offset)` this broker has applied:
    /// offsets restart with every controller term, so they compare only
    /// together with their epoch.
    applied: watch::Sender<(i64, i64)>,
    /// The current producer-id block: `(next, end)`.
    producer_ids: Mutex<(i64, i64)>,
    runtime: tokio::runtime::Handle,
    /// The inter-broker listener's TLS: what this broker dials a
    /// controller serving `https://` with.
    tls: Option<Arc<TlsState>>,
}

fn not_controller(message: impl Into<String>) -> TopicError {
    // Retriable: Kafka clients refresh metadata and send again.
    TopicError::new(ResponseError::NotController, message)
}

impl ControllerLink {
    pub fn new(runtime: tokio::runtime::Handle, tls: Option<Arc<TlsState>>) -> Self {
        Self {
            session: watch::channel(None).0,
            applied: watch::channel((0, 0)).0,
            producer_ids: Mutex::new((0, 0)),
            runtime,
            tls,
        }
    }

    /// The TLS this broker dials the controller with, if any.
    pub fn tls(&self) -> Option<&Arc<TlsState>> {
        self.tls.as_ref()
    }

    /// The session sets (or clears) where the controller is.
    pub fn set_session(&self, session: Option<Session>) {
        self.session.send_replace(session);
    }

    /// The session reports the metadata this broker has applied.
    pub fn set_applied(&self, controller_epoch: i64, offset: i64) {
        self.applied.send_replace((controller_epoch, offset));
    }

    /// `(controller epoch, metadata offset)` this broker has applied.
    pub fn applied(&self) -> (i64, i64) {
        *self.applied.borrow()
    }

    /// The controller's view of its quorum (blocking: called from the
    /// blocking pool), for DescribeQuorum.
    pub fn describe_quorum(&self) -> Result<DescribeQuorumResponse, TopicError> {
        self.runtime.block_on(async {
            let (mut client, _) = self.client().await?;
            client
                .describe_quorum(DescribeQuorumRequest {})
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| not_controller(format!("the controller refused: {}", s.message())))
        })
    }

    async fn client(&self) -> Result<(ControllerClient<Channel>, Session), TopicError> {
        let mut rx = self.session.subscribe();
        let session = tokio::time::timeout(SHOW_TIMEOUT, rx.wait_for(Option::is_some))
            .await
            .map_err(|_| not_controller("no controller session yet"))?
            .map_err(|_| not_controller("shutting down"))?
            .clone()
            .expect("waited for a session");
        let endpoint = Endpoint::from_shared(session.address.clone())
            .map_err(|e| not_controller(e.to_string()))?
            .connect_timeout(Duration::from_secs(2))
            .timeout(CALL_TIMEOUT);
        let channel = super::transport::connect(endpoint, &session.address, self.tls.as_ref())
            .await
            .map_err(|e| not_controller(format!("cannot reach the controller: {e}")))?;
        Ok((ControllerClient::new(channel), session))
    }

    /// Forwards one admin change (blocking: called from the blocking pool)
    /// and returns the topic id it names, once this broker shows it.
    pub fn admin<F, Fut>(&self, call: F) -> Result<String, TopicError>
    where
        F: FnOnce(ControllerClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<AdminResponse>, tonic::Status>>,
    {
        self.runtime.block_on(async {
            let (client, _) = self.client().await?;
            let r = call(client)
                .await
                .map_err(|s| not_controller(format!("the controller refused: {}", s.message())))?
                .into_inner();
            if r.error_code != 0 {
                let code = i16::try_from(r.error_code)
                    .ok()
                    .and_then(ResponseError::try_from_code)
                    .unwrap_or(ResponseError::UnknownServerError);
                return Err(TopicError::new(code, r.message));
            }
            self.wait_shown(r.controller_epoch, r.metadata_offset).await;
            Ok(r.topic_id)
        })
    }

    /// Until this broker's image shows `(controller epoch, offset)`
    /// (bounded: logged when it does not in time).
    async fn wait_shown(&self, controller_epoch: i64, offset: i64) {
        if offset <= 0 {
            return;
        }
        let wanted = (controller_epoch, offset);
        let mut applied = self.applied.subscribe();
        let shown = applied.wait_for(|have| *have >= wanted);
        if tokio::time::timeout(SHOW_TIMEOUT, shown).await.is_err() {
            tracing::warn!(
                offset,
                "a forwarded change is not in this broker's image yet"
            );
        }
    }

    /// Forwards partition reassignments (blocking, as [`admin`](Self::admin))
    /// and returns the controller's answer per partition once this broker
    /// shows the changes.
    pub fn alter_reassignments(
        &self,
        request: AlterReassignmentsRequest,
    ) -> Result<Vec<ReassignmentResult>, TopicError> {
        self.runtime.block_on(async {
            let (mut client, _) = self.client().await?;
            let r = client
                .alter_reassignments(request)
                .await
                .map_err(|s| not_controller(format!("the controller refused: {}", s.message())))?
                .into_inner();
            self.wait_shown(r.controller_epoch, r.metadata_offset).await;
            Ok(r.results)
        })
    }

    /// Forwards an AlterUserScramCredentials (blocking, as
    /// [`admin`](Self::admin)) and returns the controller's answer per user
    /// once this broker shows the changes.
    pub fn alter_scram_credentials(
        &self,
        request: super::rpc::pb::AlterScramCredentialsRequest,
    ) -> Result<super::rpc::pb::AlterScramCredentialsResponse, TopicError> {
        self.runtime.block_on(async {
            let (mut client, _) = self.client().await?;
            let r = client
                .alter_scram_credentials(request)
                .await
                .map_err(|s| not_controller(format!("the controller refused: {}", s.message())))?
                .into_inner();
            self.wait_shown(r.controller_epoch, r.metadata_offset).await;
            Ok(r)
        })
    }

    /// Forwards a CreateAcls (blocking, as [`admin`](Self::admin)) and
    /// returns the controller's answer per creation once this broker shows
    /// the changes.
    pub fn create_acls(
        &self,
        request: super::rpc::pb::CreateAclsRequest,
    ) -> Result<super::rpc::pb::CreateAclsResponse, TopicError> {
        self.runtime.block_on(async {
            let (mut client, _) = self.client().await?;
            let r = client
                .create_acls(request)
                .await
                .map_err(|s| not_controller(format!("the controller refused: {}", s.message())))?
                .into_inner();
            self.wait_shown(r.controller_epoch, r.metadata_offset).await;
            Ok(r)
        })
    }

    /// Forwards a DeleteAcls (blocking) and returns the controller's answer
    /// per filter once this broker shows the changes.
    pub fn delete_acls(
        &self,
        request: super::rpc::pb::DeleteAclsRequest,
    ) -> Result<super::rpc::pb::DeleteAclsResponse, TopicError> {
        self.runtime.block_on(async {
            let (mut client, _) = self.client().await?;
            let r = client
                .delete_acls(request)
                .await
                .map_err(|s| not_controller(format!("the controller refused: {}", s.message())))?
                .into_inner();
            self.wait_shown(r.controller_epoch, r.metadata_offset).await;
            Ok(r)
        })
    }

    /// A producer id from this broker's current block, asking the
    /// controller for a new block when it runs out.
    pub fn producer_id(&self) -> Result<i64, TopicError> {
        let mut ids = self.producer_ids.lock();
        if ids.0 >= ids.1 {
            let block = self.runtime.block_on(async {
                let (mut client, session) = self.client().await?;
                client
                    .allocate_producer_ids(AllocateProducerIdsRequest {
                        node_id: session.node_id,
                        broker_epoch: session.broker_epoch,
                    })
                    .await
                    .map(|r| r.into_inner())
                    .map_err(|s| not_controller(s.message().to_string()))
            })?;
            *ids = (block.first, block.first + block.count);
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }

    /// Controlled shutdown: tells the controller this broker is stopping,
    /// so it is fenced (its leaderships move) at once rather than after
    /// the session timeout. Best effort, bounded.
    pub async fn unregister(&self) {
        let Some(session) = self.session.borrow().clone() else {
            return;
        };
        let call = async {
            let (mut client, _) = self.client().await?;
            client
                .unregister(super::rpc::pb::UnregisterRequest {
                    node_id: session.node_id,
                    incarnation: session.incarnation.clone(),
                    broker_epoch: session.broker_epoch,
                })
                .await
                .map_err(|s| not_controller(s.message().to_string()))
        };
        match tokio::time::timeout(Duration::from_secs(3), call).await {
            Ok(Ok(_)) => tracing::info!("unregistered from the controller"),
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot unregister; the controller fences this broker after the session timeout"),
            Err(_) => tracing::warn!("unregistering timed out; the controller fences this broker after the session timeout"),
        }
    }

    /// Sends a leader's ISR change; `Ok(Some((isr, partition epoch)))`
    /// when committed, `Ok(None)` when refused (a stale epoch: the next
    /// image tells the leader the truth).
    pub async fn alter_partition(
        &self,
        p: &crate::partition::IsrProposal,
    ) -> Result<Option<(Vec<i32>, i32)>, TopicError> {
        let (mut client, session) = self.client().await?;
        let r = client
            .alter_partition(super::rpc::pb::AlterPartitionRequest {
                node_id: session.node_id,
                broker_epoch: session.broker_epoch,
                topic: p.topic.clone(),
                index: p.index,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                isr: p.isr.clone(),
            })
            .await
            .map_err(|s| not_controller(s.message().to_string()))?
            .into_inner();
        if r.error_code != 0 {
            tracing::info!(topic = %p.topic, partition = p.index, error = %r.message, "ISR change refused");
            return Ok(None);
        }
        Ok(Some((r.isr, r.partition_epoch)))
    }

    /// Whether `id` came from this broker's current block.
    pub fn issued_here(&self, id: i64) -> bool {
        let ids = self.producer_ids.lock();
        id >= ids.1 - super::cluster::PRODUCER_ID_BLOCK && id < ids.0
    }

    /// Forwards an ElectLeaders request (blocking: called from the
    /// blocking pool); once the controller answers, waits (bounded) until
    /// this broker's image shows the new leaders, so a client that asks
    /// this broker for metadata next sees them.
    pub fn elect_leaders(
        &self,
        request: super::rpc::pb::ElectLeadersRequest,
    ) -> Result<super::rpc::pb::ElectLeadersResponse, TopicError> {
        self.runtime.block_on(async {
            let (mut client, _) = self.client().await?;
            let r = client
                .elect_leaders(request)
                .await
                .map_err(|s| not_controller(format!("the controller refused: {}", s.message())))?
                .into_inner();
            self.wait_shown(r.controller_epoch, r.metadata_offset).await;
            Ok(r)
        })
    }
}
