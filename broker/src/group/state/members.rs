//! One consumer group's record and the bookkeeping of its membership:
//! the group's state, generation, protocol and leader ([`Group`]), its
//! members with their subscriptions and assignments ([`Member`]), static
//! members by `group.instance.id`, member ids handed out and not yet
//! used; and the rules over them that no transition owns: new member
//! ids, identity and generation checks, removal, and the protocol every
//! member supports.
//!
//! The transitions that change the state (join, sync, heartbeat, leave,
//! expiry) are `state::machine`'s; this module imports nothing of the
//! group coordinator.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

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
    pub(super) fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// One consumer group.
#[derive(Debug, Clone)]
pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation_id: i32,
    /// Set by the member that joins an empty group and kept when the last
    /// member leaves (Kafka keeps it too: clients tell a consumer group
    /// that had members from a "simple" group, one only committed offsets
    /// to, by it); `None` only for a group that never had a member.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, with their expiry.
    pub pending: BTreeMap<String, i64>,
    /// group.instance.id → member id.
    pub static_members: BTreeMap<String, String>,
    /// When the join phase ends whoever has not rejoined.
    pub(super) rebalance_deadline_ms: i64,
    /// Before this the join phase of a group that was empty waits for
    /// more members (`group.initial.rebalance.delay.ms`).
    pub(super) initial_delay_until_ms: i64,
    pub(super) next_member_seq: u64,
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

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.pending.is_empty()
    }

    pub(super) fn new_member_id(&mut self, client_id: &str, instance: Option<&str>) -> String {
        self.next_member_seq += 1;
        let prefix = instance.unwrap_or(client_id);
        format!(
            "{prefix}-{}-{}",
            uuid::Uuid::new_v4().simple(),
            self.next_member_seq
        )
    }

    /// Protocols every member supports, picked by the members' preferences.
    pub(super) fn select_protocol(&self) -> Option<String> {
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
    pub(super) fn protocols_compatible(
        &self,
        protocol_type: &str,
        protocols: &[(String, Bytes)],
    ) -> bool {
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

    pub(super) fn remove_member(&mut self, id: &str) -> Option<Member> {
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
}
