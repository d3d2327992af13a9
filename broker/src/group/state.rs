//! The classic consumer-group state machine, as pure logic: members join,
//! a generation is formed, the leader's assignment is handed out, members
//! heartbeat, leave or expire. Time is a parameter (`now`, in ms), so every
//! transition is unit-tested with a controllable clock.
//!
//! Responses that must wait (a JoinGroup until the rebalance completes, a
//! follower's SyncGroup until the leader syncs) are returned later as
//! [`Effect`]s; the async coordinator delivers them.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

/// Group-wide settings (Kafka broker config names in comments).
#[derive(Debug, Clone)]
pub struct GroupSettings {
    /// `group.min.session.timeout.ms`
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`
    pub initial_rebalance_delay_ms: i64,
    /// `group.max.size`
    pub max_size: usize,
    /// Largest protocol metadata a member may send (bytes).
    pub max_member_metadata_bytes: usize,
}

impl Default for GroupSettings {
    fn default() -> Self {
        Self {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: usize::MAX,
            max_member_metadata_bytes: 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name DescribeGroups and ListGroups report.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub last_heartbeat_ms: i64,
    /// Waiting for its JoinGroup response.
    pub awaiting_join: bool,
    /// Waiting for its SyncGroup response.
    pub awaiting_sync: bool,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// A JoinGroup request, decoded.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: an unknown member must first get its id (MEMBER_ID_REQUIRED).
    pub require_known_member_id: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JoinMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

/// A JoinGroup response.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinResult {
    pub error: i16,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only.
    pub members: Vec<JoinMember>,
    /// KIP-814: a restarted static leader gets the members but must not
    /// compute a new assignment (the group keeps its generation).
    pub skip_assignment: bool,
}

impl JoinResult {
    fn error(code: ResponseError, member_id: &str) -> Self {
        Self {
            error: code.code(),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

/// A SyncGroup response.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncResult {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    fn error(code: ResponseError) -> Self {
        Self {
            error: code.code(),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// Either an answer now, or "later, as an [`Effect`]" for the named member.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply<T> {
    Now(T),
    Later(String),
}

/// A delayed response to deliver to a waiting member.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Join {
        member_id: String,
        result: JoinResult,
    },
    Sync {
        member_id: String,
        result: SyncResult,
    },
}

/// One consumer group.
#[derive(Debug, Clone)]
pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with their expiry.
    pub pending: BTreeMap<String, i64>,
    /// group.instance.id → member id.
    pub static_members: BTreeMap<String, String>,
    rebalance_deadline_ms: i64,
    initial_delay_until_ms: i64,
    next_member_seq: u64,
}

fn ok() -> i16 {
    0
}

impl Group {
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            static_members: BTreeMap::new(),
            rebalance_deadline_ms: 0,
            initial_delay_until_ms: 0,
            next_member_seq: 0,
        }
    }

    /// What the coordinator stores of a settled group (`Stable`, or `Empty`
    /// with its generation); `None` in the states between (a rebalance is
    /// not stored: a new coordinator lets its members rejoin).
    pub fn snapshot(&self, now_ms: i64) -> Option<super::metadata::GroupSnapshot> {
        if !matches!(self.state, GroupState::Stable | GroupState::Empty) {
            return None;
        }
        let protocol = self.protocol_name.clone();
        let members = self
            .members
            .values()
            .map(|m| super::metadata::MemberSnapshot {
                member_id: m.id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                subscription: protocol
                    .as_deref()
                    .map(|p| m.metadata_for(p))
                    .unwrap_or_default(),
                assignment: m.assignment.clone(),
            })
            .collect();
        Some(super::metadata::GroupSnapshot {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation_id,
            protocol,
            leader: self.leader.clone(),
            timestamp_ms: now_ms,
            members,
        })
    }

    /// A group as a stored snapshot describes it, taken over at `now_ms`:
    /// `Stable` in the stored generation with its members (each with a
    /// fresh session, as Kafka's coordinator does on load), or `Empty`.
    pub fn restore(id: &str, snapshot: &super::metadata::GroupSnapshot, now_ms: i64) -> Self {
        let mut g = Group::new(id);
        g.generation_id = snapshot.generation;
        g.protocol_type =
            (!snapshot.protocol_type.is_empty()).then(|| snapshot.protocol_type.clone());
        g.protocol_name = snapshot.protocol.clone();
        if snapshot.members.is_empty() {
            return g;
        }
        g.state = GroupState::Stable;
        g.leader = snapshot.leader.clone();
        for m in &snapshot.members {
            if let Some(instance) = &m.group_instance_id {
                g.static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            g.members.insert(
                m.member_id.clone(),
                Member {
                    id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocol_type: snapshot.protocol_type.clone(),
                    protocols: snapshot
                        .protocol
                        .iter()
                        .map(|p| (p.clone(), m.subscription.clone()))
                        .collect(),
                    assignment: m.assignment.clone(),
                    last_heartbeat_ms: now_ms,
                    awaiting_join: false,
                    awaiting_sync: false,
                },
            );
        }
        g
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pending.is_empty()
    }

    fn new_member_id(&mut self, client_id: &str, instance: Option<&str>) -> String {
        self.next_member_seq += 1;
        let prefix = instance.unwrap_or(client_id);
        format!(
            "{prefix}-{}-{}",
            uuid::Uuid::new_v4().simple(),
            self.next_member_seq
        )
    }

    /// Protocols every member supports, picked by the members' preferences.
    fn select_protocol(&self) -> Option<String> {
        let mut candidates: Option<BTreeSet<&str>> = None;
        for m in self.members.values() {
            let theirs: BTreeSet<&str> = m.protocols.iter().map(|(n, _)| n.as_str()).collect();
            candidates = Some(match candidates {
                None => theirs,
                Some(c) => c.intersection(&theirs).copied().collect(),
            });
        }
        let candidates = candidates?;
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((n, _)) = m
                .protocols
                .iter()
                .find(|(n, _)| candidates.contains(n.as_str()))
            {
                *votes.entry(n.as_str()).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
            .map(|(n, _)| n.to_string())
    }

    /// Whether `protocols` fit the group's current type and protocols.
    fn protocols_compatible(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocols.is_empty() || protocol_type.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        if self
            .protocol_type
            .as_deref()
            .is_some_and(|t| t != protocol_type)
        {
            return false;
        }
        // Some protocol must be supported by everyone, the newcomer included.
        self.members.values().all(|m| {
            m.protocols
                .iter()
                .any(|(n, _)| protocols.iter().any(|(p, _)| p == n))
        })
    }

    fn prepare_rebalance(&mut self, now: i64, settings: &GroupSettings) -> Vec<Effect> {
        let mut effects = Vec::new();
        // Followers waiting for an assignment of a generation that will not
        // complete must rejoin.
        for m in self.members.values_mut() {
            if m.awaiting_sync {
                m.awaiting_sync = false;
                effects.push(Effect::Sync {
                    member_id: m.id.clone(),
                    result: SyncResult::error(ResponseError::RebalanceInProgress),
                });
            }
        }
        let was_empty = self.state == GroupState::Empty;
        self.state = GroupState::PreparingRebalance;
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms as i64)
            .max()
            .unwrap_or(0);
        self.rebalance_deadline_ms = now + timeout;
        self.initial_delay_until_ms = if was_empty {
            now + settings.initial_rebalance_delay_ms.min(timeout)
        } else {
            now
        };
        effects
    }

    fn validate_session_timeout(req: &JoinRequest, settings: &GroupSettings) -> bool {
        (settings.min_session_timeout_ms..=settings.max_session_timeout_ms)
            .contains(&req.session_timeout_ms)
    }

    /// JoinGroup.
    pub fn join(
        &mut self,
        req: JoinRequest,
        now: i64,
        settings: &GroupSettings,
    ) -> (Reply<JoinResult>, Vec<Effect>) {
        let mut effects = Vec::new();
        if self.state == GroupState::Dead {
            return (
                Reply::Now(JoinResult::error(
                    ResponseError::CoordinatorNotAvailable,
                    &req.member_id,
                )),
                effects,
            );
        }
        if !Self::validate_session_timeout(&req, settings) {
            return (
                Reply::Now(JoinResult::error(
                    ResponseError::InvalidSessionTimeout,
                    &req.member_id,
                )),
                effects,
            );
        }
        if req
            .protocols
            .iter()
            .any(|(_, m)| m.len() > settings.max_member_metadata_bytes)
        {
            return (
                Reply::Now(JoinResult::error(
                    ResponseError::InvalidRequest,
                    &req.member_id,
                )),
                effects,
            );
        }
        if !self.protocols_compatible(&req.protocol_type, &req.protocols) {
            return (
                Reply::Now(JoinResult::error(
                    ResponseError::InconsistentGroupProtocol,
                    &req.member_id,
                )),
                effects,
            );
        }

        let mut member_id = req.member_id.clone();
        let mut replaced_static = false;
        if let Some(instance) = &req.group_instance_id {
            match self.static_members.get(instance).cloned() {
                Some(existing) if !member_id.is_empty() && member_id != existing => {
                    return (
                        Reply::Now(JoinResult::error(
                            ResponseError::FencedInstanceId,
                            &member_id,
                        )),
                        effects,
                    );
                }
                Some(existing) if member_id.is_empty() => {
                    // A restarted static member: it takes over its old
                    // identity under a new member id.
                    let new_id = self.new_member_id(&req.client_id, Some(instance));
                    if let Some(mut old) = self.members.remove(&existing) {
                        if old.awaiting_join {
                            effects.push(Effect::Join {
                                member_id: existing.clone(),
                                result: JoinResult::error(
                                    ResponseError::FencedInstanceId,
                                    &existing,
                                ),
                            });
                        }
                        if old.awaiting_sync {
                            effects.push(Effect::Sync {
                                member_id: existing.clone(),
                                result: SyncResult::error(ResponseError::FencedInstanceId),
                            });
                        }
                        old.id = new_id.clone();
                        old.awaiting_join = false;
                        old.awaiting_sync = false;
                        self.members.insert(new_id.clone(), old);
                    }
                    if self.leader.as_deref() == Some(existing.as_str()) {
                        self.leader = Some(new_id.clone());
                    }
                    self.static_members.insert(instance.clone(), new_id.clone());
                    member_id = new_id;
                    replaced_static = true;
                }
                Some(_) => {}
                None => {
                    if member_id.is_empty() {
                        member_id = self.new_member_id(&req.client_id, Some(instance));
                    }
                    self.static_members
                        .insert(instance.clone(), member_id.clone());
                }
            }
        } else if member_id.is_empty() {
            let id = self.new_member_id(&req.client_id, None);
            if req.require_known_member_id {
                let expiry = now + req.session_timeout_ms as i64;
                self.pending.insert(id.clone(), expiry);
                return (
                    Reply::Now(JoinResult::error(ResponseError::MemberIdRequired, &id)),
                    effects,
                );
            }
            member_id = id;
        } else if !self.members.contains_key(&member_id) && !self.pending.contains_key(&member_id) {
            return (
                Reply::Now(JoinResult::error(
                    ResponseError::UnknownMemberId,
                    &member_id,
                )),
                effects,
            );
        }
        self.pending.remove(&member_id);

        let is_new = !self.members.contains_key(&member_id);
        if is_new && self.members.len() >= settings.max_size {
            if let Some(instance) = &req.group_instance_id {
                self.static_members.remove(instance);
            }
            return (
                Reply::Now(JoinResult::error(
                    ResponseError::GroupMaxSizeReached,
                    &member_id,
                )),
                effects,
            );
        }
        let protocols_changed = self
            .members
            .get(&member_id)
            .is_some_and(|m| m.protocols != req.protocols);

        // A static member coming back into a stable group with the same
        // subscription gets its old assignment without a rebalance.
        // Kafka checks only that the group would select the same protocol,
        // not the metadata bytes: a restarted consumer's subscription no
        // longer lists its owned partitions.
        let same_selection = replaced_static && self.state == GroupState::Stable && {
            let mut trial = self.clone();
            if let Some(m) = trial.members.get_mut(&member_id) {
                m.protocols = req.protocols.clone();
            }
            trial.select_protocol() == self.protocol_name
        };
        if same_selection {
            let m = self.members.get_mut(&member_id).expect("inserted above");
            m.protocols = req.protocols.clone();
            m.last_heartbeat_ms = now;
            m.session_timeout_ms = req.session_timeout_ms;
            m.rebalance_timeout_ms = req.rebalance_timeout_ms;
            m.client_id = req.client_id.clone();
            m.client_host = req.client_host.clone();
            // The restarted leader learns the members but keeps the
            // group's assignment (KIP-814); followers just learn the leader.
            let is_leader = self.leader.as_deref() == Some(member_id.as_str());
            let members = if is_leader {
                let protocol = self.protocol_name.clone().unwrap_or_default();
                self.members
                    .values()
                    .map(|m| JoinMember {
                        member_id: m.id.clone(),
                        group_instance_id: m.group_instance_id.clone(),
                        metadata: m.metadata_for(&protocol),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let result = JoinResult {
                error: ok(),
                generation_id: self.generation_id,
                protocol_type: self.protocol_type.clone(),
                protocol_name: self.protocol_name.clone(),
                leader: self.leader.clone().unwrap_or_default(),
                member_id: member_id.clone(),
                members,
                skip_assignment: is_leader,
            };
            return (Reply::Now(result), effects);
        }

        // A known follower rejoining a stable group unchanged: answer now.
        if !is_new
            && !replaced_static
            && self.state == GroupState::Stable
            && !protocols_changed
            && self.leader.as_deref() != Some(member_id.as_str())
        {
            if let Some(m) = self.members.get_mut(&member_id) {
                m.last_heartbeat_ms = now;
            }
            return (
                Reply::Now(JoinResult {
                    error: ok(),
                    generation_id: self.generation_id,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    leader: self.leader.clone().unwrap_or_default(),
                    member_id,
                    members: Vec::new(),
                    skip_assignment: false,
                }),
                effects,
            );
        }

        let previous = self.members.remove(&member_id);
        let member = Member {
            id: member_id.clone(),
            group_instance_id: req.group_instance_id.clone(),
            client_id: req.client_id,
            client_host: req.client_host,
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocol_type: req.protocol_type.clone(),
            protocols: req.protocols,
            assignment: previous
                .as_ref()
                .map(|p| p.assignment.clone())
                .unwrap_or_default(),
            last_heartbeat_ms: now,
            awaiting_join: true,
            awaiting_sync: false,
        };
        if let Some(p) = previous.filter(|p| p.awaiting_join) {
            // The same member joined twice; the older request is superseded.
            effects.push(Effect::Join {
                member_id: p.id.clone(),
                result: JoinResult::error(ResponseError::UnknownMemberId, &p.id),
            });
        }
        self.members.insert(member_id.clone(), member);
        if self.protocol_type.is_none() {
            self.protocol_type = Some(req.protocol_type);
        }
        if self.state != GroupState::PreparingRebalance {
            effects.extend(self.prepare_rebalance(now, settings));
        }
        effects.extend(self.try_complete_join(now));
        (Reply::Later(member_id), effects)
    }

    /// Completes the join phase when every member has rejoined (after the
    /// initial delay) or the rebalance timeout has passed.
    fn try_complete_join(&mut self, now: i64) -> Vec<Effect> {
        if self.state != GroupState::PreparingRebalance {
            return Vec::new();
        }
        let all_joined = self.members.values().all(|m| m.awaiting_join) && self.pending.is_empty();
        let timed_out = now >= self.rebalance_deadline_ms;
        if !(timed_out || (all_joined && now >= self.initial_delay_until_ms)) {
            return Vec::new();
        }
        // Members that did not rejoin in time are out.
        let laggards: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join)
            .map(|m| m.id.clone())
            .collect();
        for id in laggards {
            self.remove_member(&id);
        }
        self.pending.clear();
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.generation_id += 1;
            self.protocol_name = None;
            self.protocol_type = None;
            self.leader = None;
            return Vec::new();
        }
        self.generation_id += 1;
        self.protocol_name = self.select_protocol();
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = GroupState::CompletingRebalance;
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let leader = self.leader.clone().unwrap_or_default();
        let all: Vec<JoinMember> = self
            .members
            .values()
            .map(|m| JoinMember {
                member_id: m.id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                metadata: m.metadata_for(&protocol),
            })
            .collect();
        let mut effects = Vec::new();
        for m in self.members.values_mut() {
            m.awaiting_join = false;
            m.last_heartbeat_ms = now;
            effects.push(Effect::Join {
                member_id: m.id.clone(),
                result: JoinResult {
                    error: ok(),
                    generation_id: self.generation_id,
                    protocol_type: self.protocol_type.clone(),
                    protocol_name: self.protocol_name.clone(),
                    leader: leader.clone(),
                    member_id: m.id.clone(),
                    members: if m.id == leader {
                        all.clone()
                    } else {
                        Vec::new()
                    },
                    skip_assignment: false,
                },
            });
        }
        effects
    }

    fn remove_member(&mut self, id: &str) -> Option<Member> {
        let m = self.members.remove(id)?;
        if let Some(instance) = &m.group_instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(id) {
                self.static_members.remove(instance);
            }
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = None;
        }
        Some(m)
    }

    /// Checks member identity and generation for SyncGroup, Heartbeat and
    /// OffsetCommit.
    pub fn check_member(
        &self,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
    ) -> Result<(), ResponseError> {
        if let Some(instance) = instance {
            if let Some(current) = self.static_members.get(instance) {
                if current != member_id {
                    return Err(ResponseError::FencedInstanceId);
                }
            }
        }
        if !self.members.contains_key(member_id) {
            return Err(ResponseError::UnknownMemberId);
        }
        if generation_id != self.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        Ok(())
    }

    /// SyncGroup.
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
        now: i64,
    ) -> (Reply<SyncResult>, Vec<Effect>) {
        if let Err(e) = self.check_member(member_id, instance, generation_id) {
            return (Reply::Now(SyncResult::error(e)), Vec::new());
        }
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || protocol_name.is_some_and(|n| Some(n) != self.protocol_name.as_deref())
        {
            return (
                Reply::Now(SyncResult::error(ResponseError::InconsistentGroupProtocol)),
                Vec::new(),
            );
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_heartbeat_ms = now;
        }
        let result_for = |g: &Group, assignment: Bytes| SyncResult {
            error: ok(),
            protocol_type: g.protocol_type.clone(),
            protocol_name: g.protocol_name.clone(),
            assignment,
        };
        match self.state {
            GroupState::PreparingRebalance => (
                Reply::Now(SyncResult::error(ResponseError::RebalanceInProgress)),
                Vec::new(),
            ),
            GroupState::Stable => {
                let a = self
                    .members
                    .get(member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                (Reply::Now(result_for(self, a)), Vec::new())
            }
            GroupState::CompletingRebalance => {
                if self.leader.as_deref() != Some(member_id) {
                    if let Some(m) = self.members.get_mut(member_id) {
                        m.awaiting_sync = true;
                    }
                    return (Reply::Later(member_id.to_string()), Vec::new());
                }
                let given: BTreeMap<String, Bytes> = assignments.into_iter().collect();
                let mut effects = Vec::new();
                let ids: Vec<String> = self.members.keys().cloned().collect();
                for id in ids {
                    let a = given.get(&id).cloned().unwrap_or_default();
                    let waiting = {
                        let m = self.members.get_mut(&id).expect("listed above");
                        m.assignment = a.clone();
                        std::mem::take(&mut m.awaiting_sync)
                    };
                    if waiting {
                        effects.push(Effect::Sync {
                            member_id: id.clone(),
                            result: result_for(self, a),
                        });
                    }
                }
                self.state = GroupState::Stable;
                let a = self
                    .members
                    .get(member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                (Reply::Now(result_for(self, a)), effects)
            }
            GroupState::Empty | GroupState::Dead => (
                Reply::Now(SyncResult::error(ResponseError::UnknownMemberId)),
                Vec::new(),
            ),
        }
    }

    /// Heartbeat: refreshes the session; tells members to rejoin while a
    /// rebalance is being prepared.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
        now: i64,
    ) -> i16 {
        if self.state == GroupState::Dead {
            return ResponseError::CoordinatorNotAvailable.code();
        }
        if let Err(e) = self.check_member(member_id, instance, generation_id) {
            return e.code();
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_heartbeat_ms = now;
        }
        match self.state {
            GroupState::PreparingRebalance => ResponseError::RebalanceInProgress.code(),
            _ => ok(),
        }
    }

    /// LeaveGroup for each `(member id, group instance id)`; returns the
    /// per-member error codes.
    pub fn leave(
        &mut self,
        leaving: &[(String, Option<String>)],
        now: i64,
        settings: &GroupSettings,
    ) -> (Vec<i16>, Vec<Effect>) {
        let mut codes = Vec::with_capacity(leaving.len());
        let mut effects = Vec::new();
        let mut removed_any = false;
        for (member_id, instance) in leaving {
            let id = match instance {
                Some(i) => match self.static_members.get(i) {
                    Some(current) if member_id.is_empty() || member_id == current => {
                        current.clone()
                    }
                    Some(_) => {
                        codes.push(ResponseError::FencedInstanceId.code());
                        continue;
                    }
                    None => {
                        codes.push(ResponseError::UnknownMemberId.code());
                        continue;
                    }
                },
                None => member_id.clone(),
            };
            if self.pending.remove(&id).is_some() {
                codes.push(ok());
                continue;
            }
            match self.remove_member(&id) {
                Some(m) => {
                    if m.awaiting_join {
                        effects.push(Effect::Join {
                            member_id: m.id.clone(),
                            result: JoinResult::error(ResponseError::UnknownMemberId, &m.id),
                        });
                    }
                    removed_any = true;
                    codes.push(ok());
                }
                None => codes.push(ResponseError::UnknownMemberId.code()),
            }
        }
        if removed_any {
            effects.extend(self.after_membership_loss(now, settings));
        }
        (codes, effects)
    }

    fn after_membership_loss(&mut self, now: i64, settings: &GroupSettings) -> Vec<Effect> {
        let mut effects = Vec::new();
        if self.members.is_empty() {
            if self.state != GroupState::Dead {
                self.state = GroupState::Empty;
                self.generation_id += 1;
                self.protocol_name = None;
                self.protocol_type = None;
                self.leader = None;
            }
        } else if self.state != GroupState::PreparingRebalance {
            effects.extend(self.prepare_rebalance(now, settings));
        }
        effects.extend(self.try_complete_join(now));
        effects
    }

    /// Expires members whose session ran out and pending ids never used,
    /// and completes a join phase whose time has come.
    pub fn tick(&mut self, now: i64, settings: &GroupSettings) -> Vec<Effect> {
        self.pending.retain(|_, expiry| *expiry > now);
        let expired: Vec<String> = self
            .members
            .values()
            // A member waiting for its join response is covered by the
            // rebalance timeout instead.
            .filter(|m| {
                !m.awaiting_join && m.last_heartbeat_ms + m.session_timeout_ms as i64 <= now
            })
            .map(|m| m.id.clone())
            .collect();
        let mut effects = Vec::new();
        if !expired.is_empty() {
            for id in &expired {
                if let Some(m) = self.remove_member(id) {
                    if m.awaiting_sync {
                        effects.push(Effect::Sync {
                            member_id: m.id.clone(),
                            result: SyncResult::error(ResponseError::UnknownMemberId),
                        });
                    }
                }
            }
            effects.extend(self.after_membership_loss(now, settings));
        } else {
            effects.extend(self.try_complete_join(now));
        }
        effects
    }

    /// Marks the group deleted (DeleteGroups); only empty groups may go.
    pub fn delete(&mut self) -> Result<(), ResponseError> {
        if !self.members.is_empty() {
            return Err(ResponseError::NonEmptyGroup);
        }
        self.state = GroupState::Dead;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> GroupSettings {
        GroupSettings {
            initial_rebalance_delay_ms: 0,
            ..GroupSettings::default()
        }
    }

    fn join_req(member: &str, instance: Option<&str>, protocols: &[&str]) -> JoinRequest {
        JoinRequest {
            member_id: member.into(),
            group_instance_id: instance.map(String::from),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}"))))
                .collect(),
            require_known_member_id: true,
        }
    }

    fn joined(effects: &[Effect]) -> Vec<JoinResult> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Join { result, .. } => Some(result.clone()),
                _ => None,
            })
            .collect()
    }

    /// Runs the two-step join of a new dynamic member; returns its id.
    fn join_new(g: &mut Group, now: i64) -> (String, Vec<Effect>) {
        let (r, _) = g.join(join_req("", None, &["range"]), now, &settings());
        let Reply::Now(first) = r else {
            panic!("expected MEMBER_ID_REQUIRED")
        };
        assert_eq!(first.error, ResponseError::MemberIdRequired.code());
        let id = first.member_id.clone();
        let (r, effects) = g.join(join_req(&id, None, &["range"]), now, &settings());
        assert!(matches!(r, Reply::Later(_)));
        (id, effects)
    }

    #[test]
    fn single_member_forms_a_generation_and_syncs() {
        let mut g = Group::new("g");
        let (id, effects) = join_new(&mut g, 0);
        let results = joined(&effects);
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].generation_id, 1);
        assert_eq!(results[0].leader, id);
        assert_eq!(results[0].members.len(), 1);
        assert_eq!(results[0].protocol_name.as_deref(), Some("range"));
        assert_eq!(g.state, GroupState::CompletingRebalance);
        let (r, _) = g.sync(
            &id,
            None,
            1,
            Some("consumer"),
            Some("range"),
            vec![(id.clone(), Bytes::from_static(b"A"))],
            1,
        );
        let Reply::Now(s) = r else { panic!() };
        assert_eq!(s.error, 0);
        assert_eq!(&s.assignment[..], b"A");
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(g.heartbeat(&id, None, 1, 2), 0);
    }

    #[test]
    fn a_settled_group_is_restored_with_its_members_in_the_same_generation() {
        let mut g = Group::new("g");
        let (id, _) = join_new(&mut g, 0);
        assert_eq!(g.snapshot(0), None, "a rebalance is not stored");
        g.sync(
            &id,
            None,
            1,
            Some("consumer"),
            Some("range"),
            vec![(id.clone(), Bytes::from_static(b"A"))],
            1,
        );
        let stored = g.snapshot(5).expect("a stable group is stored");
        assert_eq!((stored.generation, stored.members.len()), (1, 1));
        assert_eq!(&stored.members[0].subscription[..], b"meta-range");
        // through the record codec, as a new coordinator reads it
        let read =
            super::super::metadata::decode_value(super::super::metadata::encode_value(&stored))
                .unwrap();
        let mut r = Group::restore("g", &read, 1_000);
        assert_eq!(r.state, GroupState::Stable);
        assert_eq!(r.leader.as_deref(), Some(id.as_str()));
        // the member goes on in its generation: no rejoin, commits accepted
        assert_eq!(r.heartbeat(&id, None, 1, 1_001), 0);
        assert!(r.check_member(&id, None, 1).is_ok());
        assert_eq!(
            r.heartbeat("someone-else", None, 1, 1_001),
            ResponseError::UnknownMemberId.code()
        );
        // its session starts at the take-over
        r.tick(1_000 + 9_999, &settings());
        assert_eq!(r.state, GroupState::Stable);
        r.tick(1_000 + 10_001, &settings());
        assert_ne!(r.state, GroupState::Stable, "the session expired");
        // a rejoin of the restored member with its protocol keeps the group
        let mut r = Group::restore("g", &read, 0);
        let (reply, _) = r.join(join_req(&id, None, &["range"]), 1, &settings());
        assert!(matches!(reply, Reply::Now(_)) || matches!(reply, Reply::Later(_)));
        // an empty group keeps its generation
        let empty = super::super::metadata::GroupSnapshot {
            members: vec![],
            ..read
        };
        let e = Group::restore("g", &empty, 0);
        assert_eq!((e.state, e.generation_id), (GroupState::Empty, 1));
    }

    #[test]
    fn second_member_triggers_rebalance_and_follower_waits_for_leader() {
        let mut g = Group::new("g");
        let (a, _) = join_new(&mut g, 0);
        g.sync(
            &a,
            None,
            1,
            None,
            None,
            vec![(a.clone(), Bytes::from_static(b"all"))],
            0,
        );
        let (b, effects) = join_new(&mut g, 10);
        assert!(joined(&effects).is_empty(), "a has not rejoined yet");
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert_eq!(
            g.heartbeat(&a, None, 1, 11),
            ResponseError::RebalanceInProgress.code()
        );
        let (r, effects) = g.join(join_req(&a, None, &["range"]), 12, &settings());
        assert!(matches!(r, Reply::Later(_)));
        let results = joined(&effects);
        assert_eq!(results.len(), 2);
        assert!(results.iter().all(|r| r.generation_id == 2));
        let leader = results[0].leader.clone();
        assert_eq!(leader, a, "the leader is kept across generations");
        let follower = b.clone();
        let (r, _) = g.sync(&follower, None, 2, None, None, vec![], 13);
        assert!(matches!(r, Reply::Later(_)));
        let (r, effects) = g.sync(
            &leader,
            None,
            2,
            None,
            None,
            vec![
                (a.clone(), Bytes::from_static(b"p0")),
                (b.clone(), Bytes::from_static(b"p1")),
            ],
            14,
        );
        assert!(matches!(r, Reply::Now(SyncResult { error: 0, .. })));
        assert_eq!(
            effects,
            vec![Effect::Sync {
                member_id: b.clone(),
                result: SyncResult {
                    error: 0,
                    protocol_type: Some("consumer".into()),
                    protocol_name: Some("range".into()),
                    assignment: Bytes::from_static(b"p1")
                }
            }]
        );
    }

    #[test]
    fn errors_for_unknown_member_illegal_generation_and_inconsistent_protocol() {
        let mut g = Group::new("g");
        let (a, _) = join_new(&mut g, 0);
        assert_eq!(
            g.heartbeat("nobody", None, 1, 1),
            ResponseError::UnknownMemberId.code()
        );
        assert_eq!(
            g.heartbeat(&a, None, 7, 1),
            ResponseError::IllegalGeneration.code()
        );
        let (r, _) = g.join(join_req("ghost", None, &["range"]), 1, &settings());
        assert!(
            matches!(r, Reply::Now(JoinResult { error, .. }) if error == ResponseError::UnknownMemberId.code())
        );
        let mut other = join_req("", None, &["roundrobin"]);
        other.require_known_member_id = false;
        let (r, _) = g.join(other, 1, &settings());
        assert!(
            matches!(r, Reply::Now(JoinResult { error, .. }) if error == ResponseError::InconsistentGroupProtocol.code())
        );
        let mut wrong_type = join_req("", None, &["range"]);
        wrong_type.protocol_type = "connect".into();
        let (r, _) = g.join(wrong_type, 1, &settings());
        assert!(
            matches!(r, Reply::Now(JoinResult { error, .. }) if error == ResponseError::InconsistentGroupProtocol.code())
        );
        let mut bad_timeout = join_req("", None, &["range"]);
        bad_timeout.session_timeout_ms = 10;
        let (r, _) = g.join(bad_timeout, 1, &settings());
        assert!(
            matches!(r, Reply::Now(JoinResult { error, .. }) if error == ResponseError::InvalidSessionTimeout.code())
        );
        let mut huge = join_req("", None, &["range"]);
        huge.protocols = vec![("range".into(), Bytes::from(vec![0u8; 2 * 1024 * 1024]))];
        let (r, _) = g.join(huge, 1, &settings());
        assert!(
            matches!(r, Reply::Now(JoinResult { error, .. }) if error == ResponseError::InvalidRequest.code())
        );
    }

    #[test]
    fn session_expiry_removes_member_and_rebalances_the_rest() {
        let mut g = Group::new("g");
        let (a, _) = join_new(&mut g, 0);
        let (b, _) = join_new(&mut g, 0);
        let (_, effects) = g.join(join_req(&a, None, &["range"]), 0, &settings());
        let leader = joined(&effects)[0].leader.clone();
        let gen = g.generation_id;
        g.sync(&leader, None, gen, None, None, vec![], 1);
        assert_eq!(g.state, GroupState::Stable);
        // Only a heartbeats; b's session (10 s) runs out.
        assert_eq!(g.heartbeat(&a, None, gen, 9_000), 0);
        assert!(g.tick(9_999, &settings()).is_empty());
        let effects = g.tick(10_001, &settings());
        assert!(!g.members.contains_key(&b));
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert!(joined(&effects).is_empty());
        let (_, effects) = g.join(join_req(&a, None, &["range"]), 10_002, &settings());
        let results = joined(&effects);
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].generation_id, gen + 1);
    }

    #[test]
    fn member_crashing_mid_rebalance_is_dropped_at_the_rebalance_timeout() {
        let mut g = Group::new("g");
        let (a, _) = join_new(&mut g, 0);
        let (b, _) = join_new(&mut g, 0);
        let (_, effects) = g.join(join_req(&a, None, &["range"]), 0, &settings());
        assert_eq!(joined(&effects).len(), 2);
        let gen = g.generation_id;
        let leader = g.leader.clone().unwrap();
        g.sync(&leader, None, gen, None, None, vec![], 1);
        // A third member joins; b never rejoins (crashed).
        let (c, _) = join_new(&mut g, 100);
        let _ = c;
        let (_, effects) = g.join(join_req(&a, None, &["range"]), 101, &settings());
        assert!(joined(&effects).is_empty(), "still waiting for b");
        let effects = g.tick(100 + 30_000, &settings());
        let results = joined(&effects);
        assert_eq!(
            results.len(),
            2,
            "a and c complete the generation without b"
        );
        assert!(!g.members.contains_key(&b));
    }

    #[test]
    fn leave_group_batch_and_empty_group() {
        let mut g = Group::new("g");
        let (a, _) = join_new(&mut g, 0);
        let (codes, _) = g.leave(
            &[(a.clone(), None), ("nobody".into(), None)],
            1,
            &settings(),
        );
        assert_eq!(codes, vec![0, ResponseError::UnknownMemberId.code()]);
        assert_eq!(g.state, GroupState::Empty);
        assert!(g.delete().is_ok());
        assert_eq!(g.state, GroupState::Dead);
    }

    #[test]
    fn delete_refuses_non_empty_group() {
        let mut g = Group::new("g");
        join_new(&mut g, 0);
        assert_eq!(g.delete(), Err(ResponseError::NonEmptyGroup));
    }

    #[test]
    fn static_member_rejoins_without_rebalance_and_old_id_is_fenced() {
        let mut g = Group::new("g");
        let (r, effects) = g.join(join_req("", Some("pod-0"), &["range"]), 0, &settings());
        assert!(matches!(r, Reply::Later(_)));
        let first = joined(&effects)[0].clone();
        let old_id = first.member_id.clone();
        g.sync(
            &old_id,
            Some("pod-0"),
            1,
            None,
            None,
            vec![(old_id.clone(), Bytes::from_static(b"mine"))],
            1,
        );
        assert_eq!(g.state, GroupState::Stable);
        // The pod restarts: same instance id, empty member id.
        let (r, effects) = g.join(join_req("", Some("pod-0"), &["range"]), 5, &settings());
        let Reply::Now(again) = r else {
            panic!("expected an immediate answer")
        };
        assert!(effects.is_empty());
        assert_eq!(again.error, 0);
        assert_eq!(again.generation_id, 1, "no new generation");
        assert!(
            again.skip_assignment,
            "the restarted leader keeps the assignment (KIP-814)"
        );
        assert_eq!(again.members.len(), 1, "but learns the members");
        assert_ne!(again.member_id, old_id);
        assert_eq!(g.state, GroupState::Stable);
        let (r, _) = g.sync(&again.member_id, Some("pod-0"), 1, None, None, vec![], 6);
        assert!(
            matches!(r, Reply::Now(SyncResult { ref assignment, .. }) if &assignment[..] == b"mine")
        );
        assert_eq!(
            g.heartbeat(&old_id, Some("pod-0"), 1, 7),
            ResponseError::FencedInstanceId.code()
        );
    }

    #[test]
    fn static_rejoin_with_new_metadata_but_same_protocol_keeps_the_generation() {
        let mut g = Group::new("g");
        let (_, effects) = g.join(join_req("", Some("pod-0"), &["range"]), 0, &settings());
        let id = joined(&effects)[0].member_id.clone();
        g.sync(
            &id,
            Some("pod-0"),
            1,
            None,
            None,
            vec![(id.clone(), Bytes::from_static(b"a"))],
            1,
        );
        let mut again = join_req("", Some("pod-0"), &["range"]);
        again.protocols = vec![(
            "range".into(),
            Bytes::from_static(b"no owned partitions now"),
        )];
        let (r, _) = g.join(again, 2, &settings());
        assert!(matches!(
            r,
            Reply::Now(JoinResult {
                generation_id: 1,
                ..
            })
        ));
        assert_eq!(g.state, GroupState::Stable);
        // A protocol the group would not select any more forces a rebalance.
        let other = join_req("", Some("pod-0"), &["roundrobin", "range"]);
        let (r, _) = g.join(other, 3, &settings());
        assert!(matches!(r, Reply::Later(_)));
    }

    #[test]
    fn initial_rebalance_delay_waits_for_more_members() {
        let s = GroupSettings {
            initial_rebalance_delay_ms: 3_000,
            ..GroupSettings::default()
        };
        let mut g = Group::new("g");
        let mut req = join_req("", None, &["range"]);
        req.require_known_member_id = false;
        let (_, effects) = g.join(req.clone(), 0, &s);
        assert!(joined(&effects).is_empty());
        let (_, effects) = g.join(req, 1_000, &s);
        assert!(joined(&effects).is_empty());
        assert!(joined(&g.tick(2_999, &s)).is_empty());
        let results = joined(&g.tick(3_000, &s));
        assert_eq!(results.len(), 2);
    }

    #[test]
    fn protocol_selection_follows_member_preferences() {
        let mut g = Group::new("g");
        let mut r1 = join_req("", None, &["cooperative-sticky", "range"]);
        r1.require_known_member_id = false;
        let mut r2 = join_req("", None, &["range", "cooperative-sticky"]);
        r2.require_known_member_id = false;
        let mut r3 = join_req("", None, &["cooperative-sticky"]);
        r3.require_known_member_id = false;
        let s = GroupSettings {
            initial_rebalance_delay_ms: 100,
            ..GroupSettings::default()
        };
        g.join(r1, 0, &s);
        g.join(r2, 0, &s);
        g.join(r3, 0, &s);
        let results = joined(&g.tick(100, &s));
        assert_eq!(results.len(), 3);
        assert_eq!(
            results[0].protocol_name.as_deref(),
            Some("cooperative-sticky")
        );
    }
}
