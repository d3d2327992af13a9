//! The active controller's gRPC edge (`proto/controller.proto`): brokers
//! register, heartbeat and fetch metadata; any broker forwards the admin
//! operations Kafka clients send it. A thin layer over the pure decisions
//! of [`super::registry`], [`super::leadership`] and [`super::cluster`]:
//! each call takes the state lock, decides, **persists** what changed
//! through the term's [`ClusterStore`] (one object per changed topic, and
//! the cluster record for registrations and producer-id blocks), and only
//! then makes it current and bumps the metadata offset.
//!
//! A store that answers [`StoreError::Fenced`] (a newer controller has
//! written) or loses a compare-and-swap deposes this controller: from then
//! on every call is refused and [`ControllerService::deposed`] turns true,
//! so its owner stops serving. [`ControllerService::tick`] fences silent
//! brokers and moves their leaderships; it also retries a registration
//! write the store could not take (the API server down must not stop
//! heartbeats, so registrations are persisted best-effort).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use tokio::sync::{watch, Mutex};
use tonic::{Request, Response, Status};
use uuid::Uuid;

use super::assignment::{BrokerSlot, Seeds};
use super::cluster::{ClusterState, CreateDefaults, NewTopic, PRODUCER_ID_BLOCK};
use super::elect;
use super::leadership::{self, Change, Election};
use super::reassignment;
use super::registry::{Registration, Registry, RegistryError};
use super::store::{ClusterStore, Resumed, StoreError};
use crate::error::TopicError;
use moldau_coordination::records::TopicRecord;

/// The generated protocol types and service traits.
pub mod pb {
    tonic::include_proto!("moldau.controller.v1");
}

/// Milliseconds since the epoch; tests pass a clock they move by hand.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The wall clock, in milliseconds since the epoch.
pub fn system_clock() -> Clock {
    Arc::new(crate::clock::now_ms)
}

/// Ticks further apart than this mean the controller itself was away:
/// stopped (SIGSTOP, a VM pause), starved of CPU, or blocked behind a slow
/// store write while holding its state. Ticks are 500 ms apart.
pub const SELF_GAP_MS: i64 = 2_000;

/// Settings of the controller (the same for every term).
#[derive(Clone)]
pub struct ControllerSettings {
    pub controller_id: i32,
    /// A broker silent for this long is fenced.
    pub session_timeout_ms: i64,
    /// At a take-over, how long the previous controller's broker has to
    /// check in before it is fenced (see [`ControllerService::resume`]).
    pub takeover_grace_ms: i64,
    pub clock: Clock,
    /// `num.partitions` and `default.replication.factor`.
    pub defaults: CreateDefaults,
    /// `delete.topic.enable`.
    pub delete_topic_enable: bool,
    /// `auto.leader.rebalance.enable` with
    /// `leader.imbalance.check.interval.seconds`: how often leaderships go
    /// back to preferred replicas that are in sync (`None`: never).
    pub leader_rebalance_interval_ms: Option<i64>,
}

struct State {
    epoch: i64,
    cluster_id: String,
    registry: Registry,
    metadata: ClusterState,
    /// Each topic object's version, for the next compare-and-swap.
    versions: HashMap<String, String>,
    cluster_version: String,
    metadata_offset: i64,
    /// When preferred leaders were last given back (auto leader rebalance).
    last_rebalance_ms: i64,
    /// When the last tick ran (monotonic: a stopped process sees it jump,
    /// whatever clock the settings give): a longer gap than
    /// [`SELF_GAP_MS`] means the controller itself was away (see
    /// [`ControllerService::tick`]).
    last_tick: std::time::Instant,
    /// Registrations changed since the cluster record was last written.
    registry_dirty: bool,
    /// What each broker's heartbeats reported in this term, for
    /// DescribeQuorum: not persisted (a new term has heard no one yet).
    heard: HashMap<i32, Heard>,
}

/// A broker's last heartbeat in this term.
#[derive(Debug, Clone, Copy)]
struct Heard {
    metadata_offset: i64,
    at_ms: i64,
    /// The last heartbeat at which it had applied all the metadata (-1:
    /// none yet).
    caught_up_ms: i64,
}

/// The controller's service: one per controller term.
#[derive(Clone)]
pub struct ControllerService {
    settings: ControllerSettings,
    store: Arc<dyn ClusterStore>,
    state: Arc<Mutex<State>>,
    deposed: Arc<watch::Sender<bool>>,
    /// The newest metadata offset, for long-polling fetches.
    published: Arc<watch::Sender<i64>>,
}

fn registry_status(e: RegistryError) -> Status {
    match e {
        RegistryError::DuplicateNodeId { .. } => Status::already_exists(e.to_string()),
        RegistryError::StaleBroker { .. } => Status::failed_precondition(e.to_string()),
        RegistryError::BadNodeId(_) => Status::invalid_argument(e.to_string()),
    }
}

fn admin_error(e: TopicError) -> pb::AdminResponse {
    pb::AdminResponse {
        error_code: i32::from(e.code.code()),
        message: e.message,
        ..Default::default()
    }
}

/// An AlterUserScramCredentials request as a broker forwards it.
pub fn scram_alterations_to_pb(
    deletions: &[crate::security::credentials::Deletion],
    upsertions: &[crate::security::credentials::Upsertion],
) -> pb::AlterScramCredentialsRequest {
    pb::AlterScramCredentialsRequest {
        deletions: deletions
            .iter()
            .map(|d| pb::ScramDeletion {
                user: d.user.clone(),
                mechanism: i32::from(d.mechanism),
            })
            .collect(),
        upsertions: upsertions
            .iter()
            .map(|u| pb::ScramUpsertion {
                user: u.user.clone(),
                mechanism: i32::from(u.mechanism),
                iterations: u.iterations,
                salt: u.salt.clone(),
                salted_password: u.salted_password.clone(),
            })
            .collect(),
    }
}

/// A wire mechanism id back to Kafka's `int8` (anything else: 0, UNKNOWN).
fn mechanism_id(id: i32) -> i8 {
    i8::try_from(id).unwrap_or(0)
}

/// The alterations a broker forwarded.
pub fn scram_alterations_from_pb(
    r: pb::AlterScramCredentialsRequest,
) -> (
    Vec<crate::security::credentials::Deletion>,
    Vec<crate::security::credentials::Upsertion>,
) {
    use crate::security::credentials::{Deletion, Upsertion};
    let deletions = r
        .deletions
        .into_iter()
        .map(|d| Deletion {
            user: d.user,
            mechanism: mechanism_id(d.mechanism),
        })
        .collect();
    let upsertions = r
        .upsertions
        .into_iter()
        .map(|u| Upsertion {
            user: u.user,
            mechanism: mechanism_id(u.mechanism),
            iterations: u.iterations,
            salt: u.salt,
            salted_password: u.salted_password,
        })
        .collect();
    (deletions, upsertions)
}

/// The SCRAM credentials as the controller sends them to brokers.
pub fn scram_credentials_to_pb(
    credentials: &crate::security::credentials::ScramCredentials,
) -> Vec<pb::ScramCredential> {
    credentials
        .iter()
        .map(|(user, mechanism, c)| pb::ScramCredential {
            user: user.to_string(),
            mechanism: i32::from(mechanism.id()),
            salt: c.salt.clone(),
            stored_key: c.stored_key.clone(),
            server_key: c.server_key.clone(),
            iterations: i32::try_from(c.iterations).unwrap_or(i32::MAX),
        })
        .collect()
}

/// The SCRAM credentials a broker received (unusable entries left out).
pub fn scram_credentials_from_pb(
    credentials: &[pb::ScramCredential],
) -> crate::security::credentials::ScramCredentials {
    use crate::security::scram::{ScramCredential, ScramMechanism};
    let mut out = crate::security::credentials::ScramCredentials::default();
    for c in credentials {
        let mechanism = ScramMechanism::from_id(mechanism_id(c.mechanism));
        let iterations = u32::try_from(c.iterations).ok();
        if let (Some(mechanism), Some(iterations), false) =
            (mechanism, iterations, c.user.is_empty())
        {
            let credential = ScramCredential {
                salt: c.salt.clone(),
                stored_key: c.stored_key.clone(),
                server_key: c.server_key.clone(),
                iterations,
            };
            out.insert(&c.user, mechanism, credential);
        }
    }
    out
}

/// An ACL binding on the wire between brokers and controller.
pub fn acl_to_pb(b: &crate::security::acl::AclBinding) -> pb::Acl {
    pb::Acl {
        resource_type: i32::from(b.resource_type.code()),
        resource_name: b.resource_name.clone(),
        pattern_type: i32::from(b.pattern_type.code()),
        principal: b.principal.clone(),
        host: b.host.clone(),
        operation: i32::from(b.operation.code()),
        permission: i32::from(b.permission.code()),
    }
}

/// An advertised listener on the wire between brokers and controller.
pub fn endpoint_to_pb(e: &crate::image::ListenerEndpoint) -> pb::ListenerEndpoint {
    pb::ListenerEndpoint {
        name: e.name.clone(),
        host: e.host.clone(),
        port: e.port,
        security_protocol: e.security_protocol.clone(),
    }
}

/// An advertised listener received.
pub fn endpoint_from_pb(e: &pb::ListenerEndpoint) -> crate::image::ListenerEndpoint {
    crate::image::ListenerEndpoint {
        name: e.name.clone(),
        host: e.host.clone(),
        port: e.port,
        security_protocol: e.security_protocol.clone(),
    }
}

/// A wire enum code back to Kafka's `int8` (out of range: -1, which no
/// ACL enum defines, so it is refused as an unknown code).
fn acl_code(code: i32) -> i8 {
    i8::try_from(code).unwrap_or(-1)
}

/// An ACL binding received (not validated; an undefined code refused).
pub fn acl_from_pb(
    a: &pb::Acl,
) -> Result<crate::security::acl::AclBinding, crate::security::acl_admin::AclFailure> {
    crate::security::acl_admin::binding_from_wire(
        acl_code(a.resource_type),
        &a.resource_name,
        acl_code(a.pattern_type),
        &a.principal,
        &a.host,
        acl_code(a.operation),
        acl_code(a.permission),
    )
}

/// An ACL filter on the wire between brokers and controller.
pub fn acl_filter_to_pb(f: &crate::security::acl::AclBindingFilter) -> pb::AclFilter {
    pb::AclFilter {
        resource_type: i32::from(f.resource_type.code()),
        resource_name: f.resource_name.clone(),
        pattern_type: i32::from(f.pattern_type.code()),
        principal: f.principal.clone(),
        host: f.host.clone(),
        operation: i32::from(f.operation.code()),
        permission: i32::from(f.permission.code()),
    }
}

/// An ACL filter received, validated.
pub fn acl_filter_from_pb(
    f: &pb::AclFilter,
) -> Result<crate::security::acl::AclBindingFilter, crate::security::acl_admin::AclFailure> {
    crate::security::acl_admin::filter_from_wire(
        acl_code(f.resource_type),
        f.resource_name.as_deref(),
        acl_code(f.pattern_type),
        f.principal.as_deref(),
        f.host.as_deref(),
        acl_code(f.operation),
        acl_code(f.permission),
    )
}

/// The ACL set a broker received (unusable entries left out).
pub fn acls_from_pb(acls: &[pb::Acl]) -> crate::security::acl::AclSet {
    let mut set = crate::security::acl::AclSet::new();
    for binding in acls.iter().filter_map(|a| acl_from_pb(a).ok()) {
        // an invalid binding is left out, as in a record
        let _ = set.insert(binding);
    }
    set
}

/// One creation's or filter's outcome on the wire.
pub fn acl_outcome_to_pb(
    r: &Result<Vec<crate::security::acl::AclBinding>, crate::security::acl_admin::AclFailure>,
) -> pb::AclOutcome {
    match r {
        Ok(matching) => pb::AclOutcome {
            matching: matching.iter().map(acl_to_pb).collect(),
            ..Default::default()
        },
        Err(f) => pb::AclOutcome {
            error_code: i32::from(f.code),
            message: f.message.clone(),
            matching: Vec::new(),
        },
    }
}

/// One creation's or filter's outcome received.
pub fn acl_outcome_from_pb(
    o: pb::AclOutcome,
) -> Result<Vec<crate::security::acl::AclBinding>, crate::security::acl_admin::AclFailure> {
    if o.error_code != 0 {
        return Err(crate::security::acl_admin::AclFailure {
            code: i16::try_from(o.error_code).unwrap_or(-1),
            message: o.message,
        });
    }
    Ok(o.matching
        .iter()
        .filter_map(|a| acl_from_pb(a).ok())
        .collect())
}

/// A client-quota entity part on the wire between brokers and controller.
pub fn quota_part_to_pb(part: &Option<crate::quota::QuotaName>) -> pb::QuotaEntityPart {
    use crate::quota::QuotaName;
    match part {
        None => pb::QuotaEntityPart::default(),
        Some(QuotaName::Default) => pb::QuotaEntityPart {
            present: true,
            is_default: true,
            name: String::new(),
            is_prefix: false,
        },
        Some(QuotaName::Name(n)) => pb::QuotaEntityPart {
            present: true,
            is_default: false,
            name: n.clone(),
            is_prefix: false,
        },
        Some(QuotaName::Prefix(p)) => pb::QuotaEntityPart {
            present: true,
            is_default: false,
            name: p.clone(),
            is_prefix: true,
        },
    }
}

pub fn quota_part_from_pb(part: Option<&pb::QuotaEntityPart>) -> Option<crate::quota::QuotaName> {
    use crate::quota::QuotaName;
    let p = part.filter(|p| p.present)?;
    Some(if p.is_default {
        QuotaName::Default
    } else if p.is_prefix {
        QuotaName::Prefix(p.name.clone())
    } else {
        QuotaName::Name(p.name.clone())
    })
}

fn random_seeds() -> Seeds {
    let r = Uuid::new_v4().as_u128();
    Seeds {
        start: (r & 0xffff) as usize,
        shift: ((r >> 16) & 0xffff) as usize,
    }
}

impl ControllerService {
    /// The controller of a term that has taken the store over.
    pub fn resume(settings: ControllerSettings, store: Arc<dyn ClusterStore>, r: Resumed) -> Self {
        let now = (settings.clock)();
        let mut metadata = ClusterState {
            cluster: r.cluster,
            topics: Default::default(),
        };
        let mut versions = HashMap::new();
        for (t, v) in r.topics {
            versions.insert(t.name.clone(), v);
            metadata.topics.insert(t.name.clone(), t);
        }
        let mut registry = Registry::restore(&metadata.cluster.brokers, now);
        // Every session restarts at the take-over: the new controller has
        // not heard anyone yet, and brokers need a moment to find it. Not
        // so the previous controller's broker: this term began because its
        // Lease went unrenewed for a whole lease duration (or it let go),
        // so it has been silent that long already. It gets a short grace
        // to check in (a live one whose controller merely lost the Lease
        // re-registers within a second), so losing the controller's
        // process costs clients the lease duration plus this grace, not
        // the lease duration plus a whole session timeout.
        if let Some(previous) = r
            .previous_controller
            .filter(|p| *p != settings.controller_id)
        {
            registry.shorten_session(
                previous,
                now,
                settings.takeover_grace_ms,
                settings.session_timeout_ms,
            );
        }
        let (deposed, _) = watch::channel(false);
        Self {
            settings,
            store,
            state: Arc::new(Mutex::new(State {
                epoch: r.epoch,
                cluster_id: metadata.cluster.cluster_id.clone(),
                registry,
                metadata,
                versions,
                cluster_version: r.cluster_version,
                metadata_offset: 1,
                last_rebalance_ms: now,
                last_tick: std::time::Instant::now(),
                registry_dirty: false,
                heard: HashMap::new(),
            })),
            deposed: Arc::new(deposed),
            published: Arc::new(watch::channel(1).0),
        }
    }

    /// The metadata changed: a new offset, and waiting fetches answered.
    fn bump(&self, state: &mut State) {
        state.metadata_offset += 1;
        self.published.send_replace(state.metadata_offset);
    }

    fn now(&self) -> i64 {
        (self.settings.clock)()
    }

    /// Turns true when a newer controller has written: stop serving.
    pub fn deposed(&self) -> watch::Receiver<bool> {
        self.deposed.subscribe()
    }

    fn check_active(&self) -> Result<(), Status> {
        if *self.deposed.borrow() {
            return Err(Status::failed_precondition(
                "this controller was deposed by a newer one",
            ));
        }
        Ok(())
    }

    /// Classifies a store failure; a fencing or a lost compare-and-swap
    /// (someone else writes our objects) deposes this controller.
    fn store_failed(&self, e: StoreError) -> Status {
        match e {
            StoreError::Fenced(_) | StoreError::Conflict(_) => {
                tracing::error!(error = %e, "a newer controller has written the metadata; stepping down");
                self.deposed.send_replace(true);
                Status::failed_precondition(e.to_string())
            }
            StoreError::Unavailable(_) => Status::unavailable(e.to_string()),
        }
    }

    fn admin_store_failed(&self, e: StoreError) -> pb::AdminResponse {
        let status = self.store_failed(e);
        pb::AdminResponse {
            error_code: i32::from(ResponseError::RequestTimedOut.code()),
            message: format!(
                "the controller could not persist the change: {}",
                status.message()
            ),
            ..Default::default()
        }
    }

    /// Persists topic records (one write each), then makes them current.
    async fn put_topics(
        &self,
        state: &mut State,
        records: Vec<TopicRecord>,
    ) -> Result<(), StoreError> {
        for t in records {
            let expected = state.versions.get(&t.name).cloned();
            let version = self.store.put_topic(&t, expected.as_deref()).await?;
            state.versions.insert(t.name.clone(), version);
            state.metadata.topics.insert(t.name.clone(), t);
        }
        Ok(())
    }

    /// Persists and applies decided leadership changes.
    async fn apply_changes(
        &self,
        state: &mut State,
        changes: Vec<Change>,
    ) -> Result<bool, StoreError> {
        for c in changes.iter().filter(|c| c.election == Election::Unclean) {
            tracing::warn!(
                topic = %c.state.topic,
                partition = c.state.index,
                leader = c.state.leader,
                "unclean leader election: acknowledged records may be lost"
            );
        }
        let records = state.metadata.topics_changed_by(&changes);
        let any = !records.is_empty();
        self.put_topics(state, records).await?;
        Ok(any)
    }

    /// Writes the cluster record (registrations included).
    async fn put_registrations(&self, state: &mut State) -> Result<(), StoreError> {
        let mut record = state.metadata.cluster.clone();
        record.brokers = state.registry.to_records();
        let version = self
            .store
            .put_cluster(&record, &state.cluster_version)
            .await?;
        state.cluster_version = version;
        state.metadata.cluster = record;
        state.registry_dirty = false;
        Ok(())
    }

    /// Best-effort: a store that is down only delays the write to the next tick.
    async fn persist_cluster_record(&self, state: &mut State) {
        state.registry_dirty = true;
        if let Err(e) = self.put_registrations(state).await {
            if !matches!(e, StoreError::Unavailable(_)) {
                self.store_failed(e);
            } else {
                tracing::warn!(error = %e, "cannot persist broker registrations yet");
            }
        }
    }

    fn live(state: &State) -> BTreeSet<i32> {
        state
            .registry
            .live()
            .map(|b| b.registration.node_id)
            .collect()
    }

    /// Every registered broker (fenced ones included), by node id.
    fn registered(state: &State) -> BTreeSet<i32> {
        state
            .registry
            .to_records()
            .iter()
            .map(|b| b.node_id)
            .collect()
    }

    fn live_slots(state: &State) -> Vec<BrokerSlot> {
        state
            .registry
            .live()
            .map(|b| BrokerSlot {
                id: b.registration.node_id,
                rack: b.registration.rack.clone(),
            })
            .collect()
    }

    /// Moves leaderships and ISR places off brokers just taken out of
    /// service (`fenced`), as [`leadership::on_brokers_fenced`] decides.
    async fn move_off(&self, state: &mut State, fenced: &[i32]) -> Result<(), StoreError> {
        let gone: BTreeSet<i32> = fenced.iter().copied().collect();
        let live: BTreeSet<i32> = Self::live(state).difference(&gone).copied().collect();
        let unclean = state.metadata.unclean_topics();
        let changes =
            leadership::on_brokers_fenced(&state.metadata.partition_states(), &gone, &live, |t| {
                unclean.contains(t)
            });
        self.apply_changes(state, changes).await.map(drop)
    }

    /// Fences brokers whose heartbeats stopped and moves what they led;
    /// retries unpersisted registrations. Returns the fenced node ids.
    /// Call it periodically.
    pub async fn tick(&self) -> Vec<i32> {
        if self.check_active().is_err() {
            return Vec::new();
        }
        let now = self.now();
        let mut state = self.state.lock().await;
        // The heartbeats sent while the controller was away are queued,
        // unread: blaming brokers for that time would fence every one of
        // them (itself included) the moment it resumes. Sessions stop with
        // the controller's clock, as Kafka's heartbeat manager measures
        // contact by what the controller has been able to process.
        let ticked = std::time::Instant::now();
        let gap =
            i64::try_from(ticked.duration_since(state.last_tick).as_millis()).unwrap_or(i64::MAX);
        state.last_tick = ticked;
        if gap > SELF_GAP_MS {
            tracing::warn!(
                gap_ms = gap,
                "the controller was away; broker sessions are extended by the gap"
            );
            state.registry.excuse_gap(gap, now);
        }
        let fenced = state.registry.expire(now, self.settings.session_timeout_ms);
        if !fenced.is_empty() {
            tracing::warn!(?fenced, "brokers fenced after missing heartbeats");
            if let Err(e) = self.move_off(&mut state, &fenced).await {
                // undone: the fencing is decided again at the next tick
                for id in &fenced {
                    state.registry.unexpire(*id);
                }
                tracing::warn!(error = %e, "cannot persist leadership changes yet");
                self.store_failed(e);
                return Vec::new();
            }
            self.bump(&mut state);
            state.registry_dirty = true;
        }
        if state.registry_dirty {
            self.persist_cluster_record(&mut state).await;
        }
        self.complete_reassignments(&mut state).await;
        if let Some(interval) = self.settings.leader_rebalance_interval_ms {
            if now - state.last_rebalance_ms >= interval {
                state.last_rebalance_ms = now;
                self.rebalance_leaders(&mut state).await;
            }
        }
        fenced
    }

    /// Completes the running reassignments whose target replicas are all
    /// in sync (normally done by the ISR change that made them so; this
    /// catches those a controller take-over or a leader change left).
    async fn complete_reassignments(&self, state: &mut State) {
        let live = Self::live(state);
        let done: Vec<Change> = state
            .metadata
            .partition_states()
            .iter()
            .filter_map(|p| reassignment::complete(p, &live))
            .map(|state| Change {
                state,
                election: Election::Clean,
            })
            .collect();
        if done.is_empty() {
            return;
        }
        let count = done.len();
        match self.apply_changes(state, done).await {
            Ok(_) => {
                self.bump(state);
                tracing::info!(partitions = count, "reassignments completed");
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot complete reassignments yet");
                self.store_failed(e);
            }
        }
    }

    /// Auto leader rebalance: each partition whose preferred replica is
    /// live and in sync but does not lead gets it back as leader.
    async fn rebalance_leaders(&self, state: &mut State) {
        let live = Self::live(state);
        let moves = leadership::preferred_leader_moves(&state.metadata.partition_states(), &live);
        if moves.is_empty() {
            return;
        }
        let count = moves.len();
        match self.apply_changes(state, moves).await {
            Ok(_) => {
                self.bump(state);
                tracing::info!(partitions = count, "preferred leaders restored");
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot restore preferred leaders yet");
                self.store_failed(e);
            }
        }
    }

    /// The current partition states (for tests and the status report).
    pub async fn topics(&self) -> Vec<TopicRecord> {
        self.state
            .lock()
            .await
            .metadata
            .topics
            .values()
            .cloned()
            .collect()
    }

    /// The controller epoch of this term.
    pub async fn epoch(&self) -> i64 {
        self.state.lock().await.epoch
    }

    /// Answers a successful admin change: the offset that shows it.
    fn done(&self, state: &mut State, topic_id: String) -> pb::AdminResponse {
        self.bump(state);
        pb::AdminResponse {
            metadata_offset: state.metadata_offset,
            controller_epoch: state.epoch,
            topic_id,
            ..Default::default()
        }
    }

    /// Stores the cluster's ACLs after a CreateAcls/DeleteAcls (nothing
    /// when `changed` is false): the offset and epoch that show them
    /// (`(0, 0)` when nothing changed), or the store's failure.
    async fn store_acls(
        &self,
        state: &mut State,
        acls: &crate::security::acl::AclSet,
        changed: bool,
    ) -> Result<(i64, i64), pb::AdminResponse> {
        if !changed {
            return Ok((0, 0));
        }
        let previous = std::mem::replace(
            &mut state.metadata.cluster.acls,
            crate::security::acl_admin::to_records(acls),
        );
        if let Err(e) = self.put_registrations(state).await {
            state.metadata.cluster.acls = previous;
            return Err(self.admin_store_failed(e));
        }
        tracing::info!(acls = acls.len(), "stored the cluster's ACLs");
        let done = self.done(state, String::new());
        Ok((done.metadata_offset, done.controller_epoch))
    }
}

/// The cluster record's ACLs as a set; bindings that cannot be read are
/// logged and left out.
fn cluster_acls(state: &State) -> crate::security::acl::AclSet {
    let (acls, skipped) = crate::security::acl_admin::from_records(&state.metadata.cluster.acls);
    for why in skipped {
        tracing::warn!("the cluster record's {why}; left out");
    }
    acls
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
        self.check_active()?;
        let r = request.into_inner();
        let registration = Registration {
            node_id: r.node_id,
            incarnation: parse_incarnation(&r.incarnation)?,
            host: r.host,
            port: r.port,
            rack: (!r.rack.is_empty()).then_some(r.rack),
            succession_hash: (!r.succession_token.is_empty())
                .then(|| crate::data_dir::token_hash(&r.succession_token)),
            endpoints: r.endpoints.iter().map(endpoint_from_pb).collect(),
        };
        let now = self.now();
        let mut state = self.state.lock().await;
        let replacing =
            state
                .registry
                .replaces_live(&registration, now, self.settings.session_timeout_ms);
        if replacing {
            // A proven restart: the old incarnation is gone now, not a
            // session timeout from now. What it led moves first, as if it
            // had been fenced (refused, and nothing registered, if that
            // cannot be persisted); the new one leads again once in service.
            tracing::info!(
                node_id = r.node_id,
                "a restart on the same data directory replaces its previous incarnation at once"
            );
            if let Err(e) = self.move_off(&mut state, &[r.node_id]).await {
                tracing::warn!(error = %e, "cannot persist leadership changes yet");
                return Err(self.store_failed(e));
            }
        }
        let broker_epoch = state
            .registry
            .register(registration, now, self.settings.session_timeout_ms)
            .map_err(|e| {
                tracing::warn!(node_id = r.node_id, error = %e, "registration refused");
                registry_status(e)
            })?;
        tracing::info!(node_id = r.node_id, broker_epoch, "broker registered");
        if replacing {
            self.bump(&mut state);
        }
        self.persist_cluster_record(&mut state).await;
        Ok(Response::new(pb::RegisterResponse {
            broker_epoch,
            controller_epoch: state.epoch,
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        let incarnation = parse_incarnation(&r.incarnation)?;
        let now = self.now();
        let mut state = self.state.lock().await;
        // Ready once it has applied the current metadata.
        let ready = r.metadata_offset >= state.metadata_offset;
        let unfenced = state
            .registry
            .heartbeat(r.node_id, incarnation, r.broker_epoch, ready, now)
            .map_err(registry_status)?;
        let caught_up_ms = match state.heard.get(&r.node_id) {
            _ if ready => now,
            Some(h) => h.caught_up_ms,
            None => -1,
        };
        state.heard.insert(
            r.node_id,
            Heard {
                metadata_offset: r.metadata_offset,
                at_ms: now,
                caught_up_ms,
            },
        );
        if unfenced {
            let live = Self::live(&state);
            let unclean = state.metadata.unclean_topics();
            let partitions = state.metadata.partition_states();
            let mut changes =
                leadership::on_broker_returned(&partitions, &live, |t| unclean.contains(t));
            if changes.is_empty() && self.settings.leader_rebalance_interval_ms.is_some() {
                // auto leader rebalance (when enabled): give preferred
                // leaders back
                changes = leadership::preferred_leader_moves(&partitions, &live);
            }
            if let Err(e) = self.apply_changes(&mut state, changes).await {
                state.registry.fence(r.node_id);
                return Err(self.store_failed(e));
            }
            // the broker set changed even when no leadership did
            self.bump(&mut state);
            tracing::info!(node_id = r.node_id, "broker in service");
            self.persist_cluster_record(&mut state).await;
        }
        Ok(Response::new(pb::HeartbeatResponse {
            controller_epoch: state.epoch,
            metadata_offset: state.metadata_offset,
            fenced: !state.registry.is_live(r.node_id),
        }))
    }

    async fn describe_quorum(
        &self,
        _request: Request<pb::DescribeQuorumRequest>,
    ) -> Result<Response<pb::DescribeQuorumResponse>, Status> {
        self.check_active()?;
        let state = self.state.lock().await;
        let members = state
            .registry
            .all()
            .map(|b| {
                let id = b.registration.node_id;
                let heard = state.heard.get(&id);
                pb::QuorumMember {
                    node_id: id,
                    metadata_offset: heard.map_or(-1, |h| h.metadata_offset),
                    last_heartbeat_ms: heard.map_or(-1, |h| h.at_ms),
                    last_caught_up_ms: heard.map_or(-1, |h| h.caught_up_ms),
                    fenced: b.fenced,
                }
            })
            .collect();
        Ok(Response::new(pb::DescribeQuorumResponse {
            controller_id: self.settings.controller_id,
            controller_epoch: state.epoch,
            metadata_offset: state.metadata_offset,
            members,
            now_ms: self.now(),
        }))
    }

    async fn fetch_metadata(
        &self,
        request: Request<pb::FetchMetadataRequest>,
    ) -> Result<Response<pb::FetchMetadataResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        if r.wait_ms > 0 && *self.published.borrow() <= r.metadata_offset {
            let mut changes = self.published.subscribe();
            let wait = Duration::from_millis(r.wait_ms.clamp(0, 30_000) as u64);
            let _ = tokio::time::timeout(wait, changes.wait_for(|o| *o > r.metadata_offset)).await;
        }
        let state = self.state.lock().await;
        let mut out = pb::FetchMetadataResponse {
            controller_epoch: state.epoch,
            metadata_offset: state.metadata_offset,
            controller_id: self.settings.controller_id,
            cluster_id: state.cluster_id.clone(),
            ..Default::default()
        };
        if r.metadata_offset >= state.metadata_offset {
            return Ok(Response::new(out));
        }
        out.changed = true;
        out.deleted_topic_ids = state.metadata.cluster.deleted_topics.clone();
        out.client_quotas = crate::quota::from_records(&state.metadata.cluster.client_quotas)
            .iter()
            .map(|(e, values)| pb::ClientQuota {
                user: Some(quota_part_to_pb(&e.user)),
                client_id: Some(quota_part_to_pb(&e.client_id)),
                values: values.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            })
            .collect();
        let (scram, _) = crate::security::credentials::ScramCredentials::from_records(
            &state.metadata.cluster.scram_credentials,
        );
        out.scram_credentials = scram_credentials_to_pb(&scram);
        let (acls, _) = crate::security::acl_admin::from_records(&state.metadata.cluster.acls);
        out.acls = acls.iter().map(|b| acl_to_pb(&b)).collect();
        out.broker_configs = state
            .metadata
            .cluster
            .broker_configs
            .iter()
            .map(|(entity, configs)| pb::BrokerConfigs {
                entity: entity.clone(),
                configs: configs.clone().into_iter().collect(),
            })
            .collect();
        out.brokers = state
            .registry
            .live()
            .map(|b| pb::Broker {
                node_id: b.registration.node_id,
                host: b.registration.host.clone(),
                port: b.registration.port,
                rack: b.registration.rack.clone().unwrap_or_default(),
                incarnation: b.registration.incarnation.to_string(),
                endpoints: b
                    .registration
                    .endpoints
                    .iter()
                    .map(endpoint_to_pb)
                    .collect(),
            })
            .collect();
        for t in state.metadata.topics.values() {
            for p in &t.partitions {
                out.partitions.push(pb::Partition {
                    topic: t.name.clone(),
                    index: p.index,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    topic_id: t.topic_id.clone(),
                    adding_replicas: p.adding_replicas.clone(),
                    removing_replicas: p.removing_replicas.clone(),
                });
            }
            if !t.configs.is_empty() {
                out.topic_configs.push(pb::TopicConfigs {
                    topic: t.name.clone(),
                    configs: t.configs.clone().into_iter().collect(),
                });
            }
        }
        Ok(Response::new(out))
    }

    async fn create_topic(
        &self,
        request: Request<pb::CreateTopicRequest>,
    ) -> Result<Response<pb::AdminResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        let mut state = self.state.lock().await;
        let brokers = Self::live_slots(&state);
        let registered = Self::registered(&state);
        let planned = state.metadata.plan_create(
            NewTopic {
                name: r.name.clone(),
                partitions: r.partitions,
                replication_factor: i16::try_from(r.replication_factor).unwrap_or(i16::MAX),
                configs: r.configs.into_iter().collect(),
                assignments: r
                    .assignments
                    .into_iter()
                    .map(|a| (a.partition, a.replicas))
                    .collect(),
            },
            self.settings.defaults,
            &brokers,
            &registered,
            random_seeds(),
            Uuid::new_v4(),
        );
        let topic = match planned {
            Ok(t) => t,
            Err(e) => return Ok(Response::new(admin_error(e))),
        };
        if r.validate_only {
            return Ok(Response::new(pb::AdminResponse::default()));
        }
        let id = topic.topic_id.clone();
        match self.store.put_topic(&topic, None).await {
            Ok(version) => {
                state.versions.insert(topic.name.clone(), version);
                state.metadata.topics.insert(topic.name.clone(), topic);
            }
            // An object of that name exists, yet this controller has no
            // such topic: it was found invalid at take-over (edited by
            // hand) and is left for a human to fix, never overwritten.
            Err(StoreError::Conflict(detail)) => {
                tracing::error!(topic = %r.name, %detail, "a metadata object for this topic exists but is not valid");
                return Ok(Response::new(admin_error(TopicError::new(
                    ResponseError::TopicAlreadyExists,
                    format!(
                        "a metadata object for topic {} exists but is not valid; see the controller's log and Events",
                        r.name
                    ),
                ))));
            }
            Err(e) => return Ok(Response::new(self.admin_store_failed(e))),
        }
        tracing::info!(topic = %r.name, %id, "created topic");
        Ok(Response::new(self.done(&mut state, id)))
    }

    async fn delete_topic(
        &self,
        request: Request<pb::DeleteTopicRequest>,
    ) -> Result<Response<pb::AdminResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        if !self.settings.delete_topic_enable {
            return Ok(Response::new(admin_error(TopicError::new(
                ResponseError::TopicDeletionDisabled,
                "delete.topic.enable is false",
            ))));
        }
        let mut state = self.state.lock().await;
        let (Some(topic), Some(version)) = (
            state.metadata.topics.get(&r.name).cloned(),
            state.versions.get(&r.name).cloned(),
        ) else {
            return Ok(Response::new(admin_error(TopicError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {} does not exist", r.name),
            ))));
        };
        if let Err(e) = self.store.delete_topic(&r.name, &version).await {
            return Ok(Response::new(self.admin_store_failed(e)));
        }
        state.metadata.topics.remove(&r.name);
        state.versions.remove(&r.name);
        // Brokers delete the data of deleted ids only (a second write,
        // best-effort like registrations: retried at the next tick).
        state.metadata.cluster.remember_deleted(&topic.topic_id);
        self.persist_cluster_record(&mut state).await;
        tracing::info!(topic = %r.name, "deleted topic");
        Ok(Response::new(self.done(&mut state, topic.topic_id)))
    }

    async fn create_partitions(
        &self,
        request: Request<pb::CreatePartitionsRequest>,
    ) -> Result<Response<pb::AdminResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        let mut state = self.state.lock().await;
        let brokers = Self::live_slots(&state);
        let registered = Self::registered(&state);
        let assignments: Vec<Vec<i32>> = r.assignments.into_iter().map(|a| a.replicas).collect();
        let grown = match state.metadata.plan_create_partitions(
            &r.name,
            r.count,
            &assignments,
            &brokers,
            &registered,
            random_seeds(),
        ) {
            Ok(t) => t,
            Err(e) => return Ok(Response::new(admin_error(e))),
        };
        if r.validate_only {
            return Ok(Response::new(pb::AdminResponse::default()));
        }
        let id = grown.topic_id.clone();
        if let Err(e) = self.put_topics(&mut state, vec![grown]).await {
            return Ok(Response::new(self.admin_store_failed(e)));
        }
        tracing::info!(topic = %r.name, partitions = r.count, "added partitions");
        Ok(Response::new(self.done(&mut state, id)))
    }

    async fn alter_topic_configs(
        &self,
        request: Request<pb::AlterTopicConfigsRequest>,
    ) -> Result<Response<pb::AdminResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        let mut state = self.state.lock().await;
        let altered = match state.metadata.plan_alter_configs(&r.name, |c| {
            *c = r.configs.into_iter().collect();
            Ok(())
        }) {
            Ok(t) => t,
            Err(e) => return Ok(Response::new(admin_error(e))),
        };
        if r.validate_only {
            return Ok(Response::new(pb::AdminResponse::default()));
        }
        let id = altered.topic_id.clone();
        if let Err(e) = self.put_topics(&mut state, vec![altered]).await {
            return Ok(Response::new(self.admin_store_failed(e)));
        }
        tracing::info!(topic = %r.name, "altered topic configs");
        Ok(Response::new(self.done(&mut state, id)))
    }

    async fn alter_client_quotas(
        &self,
        request: Request<pb::AlterClientQuotasRequest>,
    ) -> Result<Response<pb::AdminResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        let entity = crate::quota::QuotaEntity {
            user: quota_part_from_pb(r.user.as_ref()),
            client_id: quota_part_from_pb(r.client_id.as_ref()),
        };
        let ops: Vec<(String, Option<f64>)> = r
            .set
            .iter()
            .map(|(k, v)| (k.clone(), Some(*v)))
            .chain(r.remove.iter().map(|k| (k.clone(), None)))
            .collect();
        let mut state = self.state.lock().await;
        let mut quotas = crate::quota::from_records(&state.metadata.cluster.client_quotas);
        if let Err(e) = crate::quota::entity::apply(&mut quotas, &[(entity.clone(), ops)]) {
            return Ok(Response::new(admin_error(e)));
        }
        if r.validate_only {
            return Ok(Response::new(pb::AdminResponse::default()));
        }
        let previous = std::mem::replace(
            &mut state.metadata.cluster.client_quotas,
            crate::quota::to_records(&quotas),
        );
        if let Err(e) = self.put_registrations(&mut state).await {
            state.metadata.cluster.client_quotas = previous;
            return Ok(Response::new(self.admin_store_failed(e)));
        }
        tracing::info!(?entity, set = ?r.set, remove = ?r.remove, "altered client quotas");
        Ok(Response::new(self.done(&mut state, String::new())))
    }

    async fn alter_scram_credentials(
        &self,
        request: Request<pb::AlterScramCredentialsRequest>,
    ) -> Result<Response<pb::AlterScramCredentialsResponse>, Status> {
        use crate::security::credentials::{plan_alter, ScramCredentials};
        self.check_active()?;
        let (deletions, upsertions) = scram_alterations_from_pb(request.into_inner());
        let mut state = self.state.lock().await;
        let (mut credentials, skipped) =
            ScramCredentials::from_records(&state.metadata.cluster.scram_credentials);
        for why in skipped {
            tracing::warn!("the cluster record's {why}; left out");
        }
        let plan = plan_alter(&credentials, &deletions, &upsertions);
        let results = plan
            .results
            .iter()
            .map(|r| pb::ScramUserResult {
                user: r.user.clone(),
                error_code: r.error.as_ref().map_or(0, |(c, _)| i32::from(c.code())),
                message: r.error.as_ref().map(|(_, m)| m.clone()).unwrap_or_default(),
            })
            .collect();
        if plan.changes.is_empty() {
            return Ok(Response::new(pb::AlterScramCredentialsResponse {
                results,
                ..Default::default()
            }));
        }
        credentials.apply(&plan.changes);
        let previous = std::mem::replace(
            &mut state.metadata.cluster.scram_credentials,
            credentials.to_records(),
        );
        if let Err(e) = self.put_registrations(&mut state).await {
            state.metadata.cluster.scram_credentials = previous;
            let failed = self.admin_store_failed(e);
            return Ok(Response::new(pb::AlterScramCredentialsResponse {
                error_code: failed.error_code,
                message: failed.message,
                ..Default::default()
            }));
        }
        tracing::info!(changes = plan.changes.len(), "altered SCRAM credentials");
        let done = self.done(&mut state, String::new());
        Ok(Response::new(pb::AlterScramCredentialsResponse {
            metadata_offset: done.metadata_offset,
            controller_epoch: done.controller_epoch,
            results,
            ..Default::default()
        }))
    }

    async fn create_acls(
        &self,
        request: Request<pb::CreateAclsRequest>,
    ) -> Result<Response<pb::CreateAclsResponse>, Status> {
        self.check_active()?;
        let creations: Vec<_> = request
            .into_inner()
            .creations
            .iter()
            .map(acl_from_pb)
            .collect();
        let mut state = self.state.lock().await;
        let mut acls = cluster_acls(&state);
        let (outcomes, changed) = crate::security::acl_admin::create(&mut acls, &creations);
        let results = outcomes
            .into_iter()
            .map(|r| acl_outcome_to_pb(&r.map(|()| Vec::new())))
            .collect();
        let (metadata_offset, controller_epoch) =
            match self.store_acls(&mut state, &acls, changed).await {
                Ok(shown) => shown,
                Err(failed) => {
                    return Ok(Response::new(pb::CreateAclsResponse {
                        error_code: failed.error_code,
                        message: failed.message,
                        ..Default::default()
                    }))
                }
            };
        Ok(Response::new(pb::CreateAclsResponse {
            metadata_offset,
            controller_epoch,
            results,
            ..Default::default()
        }))
    }

    async fn delete_acls(
        &self,
        request: Request<pb::DeleteAclsRequest>,
    ) -> Result<Response<pb::DeleteAclsResponse>, Status> {
        self.check_active()?;
        let filters: Vec<_> = request
            .into_inner()
            .filters
            .iter()
            .map(acl_filter_from_pb)
            .collect();
        let mut state = self.state.lock().await;
        let mut acls = cluster_acls(&state);
        let (outcomes, changed) = crate::security::acl_admin::delete(&mut acls, &filters);
        let results = outcomes.iter().map(acl_outcome_to_pb).collect();
        let (metadata_offset, controller_epoch) =
            match self.store_acls(&mut state, &acls, changed).await {
                Ok(shown) => shown,
                Err(failed) => {
                    return Ok(Response::new(pb::DeleteAclsResponse {
                        error_code: failed.error_code,
                        message: failed.message,
                        ..Default::default()
                    }))
                }
            };
        Ok(Response::new(pb::DeleteAclsResponse {
            metadata_offset,
            controller_epoch,
            results,
            ..Default::default()
        }))
    }

    async fn alter_broker_configs(
        &self,
        request: Request<pb::AlterBrokerConfigsRequest>,
    ) -> Result<Response<pb::AdminResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        let valid = crate::dynamic_config::validate_entity_configs(
            &r.entity,
            &r.configs.clone().into_iter().collect(),
        );
        if let Err(e) = valid {
            return Ok(Response::new(admin_error(e)));
        }
        if r.validate_only {
            return Ok(Response::new(pb::AdminResponse::default()));
        }
        let mut state = self.state.lock().await;
        let previous = state.metadata.cluster.broker_configs.clone();
        let configs = &mut state.metadata.cluster.broker_configs;
        if r.configs.is_empty() {
            configs.remove(&r.entity);
        } else {
            configs.insert(r.entity.clone(), r.configs.clone().into_iter().collect());
        }
        if let Err(e) = self.put_registrations(&mut state).await {
            state.metadata.cluster.broker_configs = previous;
            return Ok(Response::new(self.admin_store_failed(e)));
        }
        tracing::info!(entity = %r.entity, configs = ?r.configs, "altered dynamic broker configs");
        Ok(Response::new(self.done(&mut state, String::new())))
    }

    async fn unregister(
        &self,
        request: Request<pb::UnregisterRequest>,
    ) -> Result<Response<pb::UnregisterResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        let incarnation = parse_incarnation(&r.incarnation)?;
        let mut state = self.state.lock().await;
        let current = state.registry.get(r.node_id).is_some_and(|b| {
            b.registration.incarnation == incarnation && b.broker_epoch == r.broker_epoch
        });
        if !current || !state.registry.is_live(r.node_id) {
            return Ok(Response::new(pb::UnregisterResponse {}));
        }
        state.registry.shut_down(r.node_id);
        let live = Self::live(&state);
        let unclean = state.metadata.unclean_topics();
        let changes = leadership::on_brokers_fenced(
            &state.metadata.partition_states(),
            &[r.node_id].into(),
            &live,
            |t| unclean.contains(t),
        );
        if let Err(e) = self.apply_changes(&mut state, changes).await {
            state.registry.unexpire(r.node_id);
            return Err(self.store_failed(e));
        }
        self.bump(&mut state);
        tracing::info!(node_id = r.node_id, "broker shut down cleanly; fenced");
        self.persist_cluster_record(&mut state).await;
        Ok(Response::new(pb::UnregisterResponse {}))
    }

    async fn allocate_producer_ids(
        &self,
        request: Request<pb::AllocateProducerIdsRequest>,
    ) -> Result<Response<pb::AllocateProducerIdsResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        let mut state = self.state.lock().await;
        if state
            .registry
            .get(r.node_id)
            .is_none_or(|b| b.broker_epoch != r.broker_epoch)
        {
            return Err(Status::failed_precondition(
                "unknown broker or stale broker epoch: register again",
            ));
        }
        let (first, mut record) = state.metadata.plan_producer_block();
        record.brokers = state.registry.to_records();
        let version = self
            .store
            .put_cluster(&record, &state.cluster_version)
            .await
            .map_err(|e| self.store_failed(e))?;
        state.cluster_version = version;
        state.metadata.cluster = record;
        Ok(Response::new(pb::AllocateProducerIdsResponse {
            first,
            count: PRODUCER_ID_BLOCK,
        }))
    }

    async fn alter_partition(
        &self,
        request: Request<pb::AlterPartitionRequest>,
    ) -> Result<Response<pb::AlterPartitionResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        let refuse = |code: ResponseError, message: String| {
            Ok(Response::new(pb::AlterPartitionResponse {
                error_code: i32::from(code.code()),
                message,
                ..Default::default()
            }))
        };
        let mut state = self.state.lock().await;
        let current_broker = state
            .registry
            .get(r.node_id)
            .is_some_and(|b| b.broker_epoch == r.broker_epoch);
        if !current_broker || !state.registry.is_live(r.node_id) {
            return refuse(
                ResponseError::StaleBrokerEpoch,
                format!(
                    "broker {} epoch {} is not in service",
                    r.node_id, r.broker_epoch
                ),
            );
        }
        let Some(current) = state
            .metadata
            .topics
            .get(&r.topic)
            .map(super::cluster::partition_states)
            .and_then(|ps| ps.into_iter().find(|p| p.index == r.index))
        else {
            return refuse(
                ResponseError::UnknownTopicOrPartition,
                format!("{}-{} does not exist", r.topic, r.index),
            );
        };
        let change = leadership::IsrChange {
            leader: r.node_id,
            leader_epoch: r.leader_epoch,
            partition_epoch: r.partition_epoch,
            isr: r.isr.clone(),
        };
        let next = match leadership::alter_isr(&current, &change, &Self::live(&state)) {
            Ok(next) => next,
            Err(e) => {
                let code = match &e {
                    leadership::IsrError::NotLeader(_) => ResponseError::NotLeaderOrFollower,
                    leadership::IsrError::FencedLeaderEpoch { .. } => {
                        ResponseError::FencedLeaderEpoch
                    }
                    leadership::IsrError::InvalidUpdateVersion { .. } => {
                        ResponseError::InvalidUpdateVersion
                    }
                    leadership::IsrError::InvalidIsr(_) => ResponseError::IneligibleReplica,
                };
                tracing::debug!(topic = %r.topic, partition = r.index, error = %e, "ISR change refused");
                return refuse(code, e.to_string());
            }
        };
        // the ISR change that brings a reassignment's last target replica
        // in sync completes it in the same write
        let next = reassignment::complete(&next, &Self::live(&state)).unwrap_or(next);
        let (isr, partition_epoch) = (next.isr.clone(), next.partition_epoch);
        let change = Change {
            state: next,
            election: Election::Clean,
        };
        if let Err(e) = self.apply_changes(&mut state, vec![change]).await {
            return Err(self.store_failed(e));
        }
        self.bump(&mut state);
        tracing::info!(topic = %r.topic, partition = r.index, ?isr, partition_epoch, "ISR changed");
        Ok(Response::new(pb::AlterPartitionResponse {
            isr,
            partition_epoch,
            ..Default::default()
        }))
    }

    async fn alter_reassignments(
        &self,
        request: Request<pb::AlterReassignmentsRequest>,
    ) -> Result<Response<pb::AlterReassignmentsResponse>, Status> {
        self.check_active()?;
        let r = request.into_inner();
        let mut state = self.state.lock().await;
        let live = Self::live(&state);
        let registered = Self::registered(&state);
        let mut results = Vec::with_capacity(r.reassignments.len());
        let mut changes = Vec::new();
        for a in &r.reassignments {
            let decided = state
                .metadata
                .topics
                .get(&a.topic)
                .map(super::cluster::partition_states)
                .and_then(|ps| ps.into_iter().find(|p| p.index == a.index))
                .ok_or_else(|| {
                    TopicError::new(
                        ResponseError::UnknownTopicOrPartition,
                        format!("{}-{} does not exist", a.topic, a.index),
                    )
                })
                .and_then(|current| {
                    let next = if a.cancel {
                        reassignment::cancel(&current, &live).map(Some)
                    } else {
                        reassignment::start(
                            &current,
                            &a.target,
                            &registered,
                            &live,
                            r.allow_replication_factor_change,
                        )
                    };
                    next.map_err(|e| TopicError::new(e.code(), e.to_string()))
                });
            let mut result = pb::ReassignmentResult {
                topic: a.topic.clone(),
                index: a.index,
                ..Default::default()
            };
            match decided {
                Ok(Some(next)) => {
                    // a target already in sync completes at once
                    let next = reassignment::complete(&next, &live).unwrap_or(next);
                    tracing::info!(topic = %a.topic, partition = a.index, replicas = ?next.replicas, adding = ?next.adding, removing = ?next.removing, cancel = a.cancel, "reassignment");
                    changes.push(Change {
                        state: next,
                        election: Election::Clean,
                    });
                }
                Ok(None) => {}
                Err(e) => {
                    result.error_code = i32::from(e.code.code());
                    result.message = e.message;
                }
            }
            results.push(result);
        }
        if !changes.is_empty() {
            if let Err(e) = self.apply_changes(&mut state, changes).await {
                return Err(self.store_failed(e));
            }
            self.bump(&mut state);
        }
        Ok(Response::new(pb::AlterReassignmentsResponse {
            results,
            metadata_offset: state.metadata_offset,
            controller_epoch: state.epoch,
        }))
    }

    async fn elect_leaders(
        &self,
        request: Request<pb::ElectLeadersRequest>,
    ) -> Result<Response<pb::ElectLeadersResponse>, Status> {
        self.check_active()?;
        Ok(Response::new(self.elect(request.into_inner()).await))
    }
}

// ElectLeaders: decided by `super::elect`, applied as the auto leader
// rebalance applies its moves.

/// A whole ElectLeaders request refused with `code`.
fn elect_refused(code: ResponseError, message: String) -> pb::ElectLeadersResponse {
    pb::ElectLeadersResponse {
        error_code: i32::from(code.code()),
        message,
        ..Default::default()
    }
}

/// The partitions a request names, each once.
fn elect_targets(topics: &[pb::ElectTopicPartitions]) -> BTreeMap<String, BTreeSet<i32>> {
    let mut targets: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for t in topics {
        targets
            .entry(t.topic.clone())
            .or_default()
            .extend(t.partitions.iter().copied());
    }
    targets
}

fn elect_result(o: &elect::PartitionOutcome) -> pb::ElectPartitionResult {
    let (code, message) = match &o.error {
        Some((code, message)) => (i32::from(code.code()), message.clone()),
        None => (0, String::new()),
    };
    pb::ElectPartitionResult {
        topic: o.topic.clone(),
        index: o.index,
        error_code: code,
        message,
    }
}

impl ControllerService {
    /// Decides an ElectLeaders request over the live brokers and persists
    /// the new leaders (each with a leader epoch bump; unclean ones are
    /// logged as possible data loss by `apply_changes`).
    async fn elect(&self, r: pb::ElectLeadersRequest) -> pb::ElectLeadersResponse {
        let Some(kind) = elect::ElectionType::from_code(r.election_type) else {
            return elect_refused(
                ResponseError::InvalidRequest,
                format!("unknown election type {}", r.election_type),
            );
        };
        let targets = (!r.all_partitions).then(|| elect_targets(&r.topics));
        let mut state = self.state.lock().await;
        let live = Self::live(&state);
        let partitions = state.metadata.partition_states();
        let decision = elect::decide(&partitions, kind, targets.as_ref(), &live);
        let mut out = pb::ElectLeadersResponse {
            controller_epoch: state.epoch,
            results: decision.outcomes.iter().map(elect_result).collect(),
            ..Default::default()
        };
        if decision.changes.is_empty() {
            return out;
        }
        let count = decision.changes.len();
        let applied = self.apply_changes(&mut state, decision.changes).await;
        // Some topics may be persisted even when a later one failed:
        // brokers must see what is.
        self.bump(&mut state);
        if let Err(e) = applied {
            let status = self.store_failed(e);
            return elect_refused(
                ResponseError::RequestTimedOut,
                format!(
                    "the controller could not persist the elections: {}",
                    status.message()
                ),
            );
        }
        tracing::info!(partitions = count, election = ?kind, "leaders elected on request");
        out.metadata_offset = state.metadata_offset;
        out
    }
}

#[cfg(test)]
mod quota_part_tests {
    use super::*;
    use crate::quota::QuotaName;

    #[test]
    fn quota_entity_parts_round_trip_between_brokers_and_controller() {
        for part in [
            None,
            Some(QuotaName::Default),
            Some(QuotaName::Name("app".into())),
            Some(QuotaName::Prefix("batch-".into())),
        ] {
            let pb = quota_part_to_pb(&part);
            assert_eq!(quota_part_from_pb(Some(&pb)), part);
        }
        // a part from a broker that knows no prefixes is a name
        let old = pb::QuotaEntityPart {
            present: true,
            is_default: false,
            name: "app".into(),
            ..Default::default()
        };
        assert_eq!(
            quota_part_from_pb(Some(&old)),
            Some(QuotaName::Name("app".into()))
        );
    }
}
