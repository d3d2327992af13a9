//! Online conversion between classic and consumer groups (KIP-848's
//! migration rules, as Kafka's group coordinator applies them under
//! `group.consumer.migration.policy`), and the classic members a consumer
//! group serves meanwhile.
//!
//! - Upgrade ([`ConsumerGroup::from_classic`]): a ConsumerGroupHeartbeat
//!   that joins a classic group with members of protocol type "consumer"
//!   turns it into a consumer group: each classic member becomes a member
//!   at the group's generation, with the subscription and the assignment
//!   decoded from its ConsumerProtocol bytes as its current and target
//!   assignment, and its session timeout and protocols kept as
//!   [`ClassicMetadata`]. Refused (GROUP_ID_NOT_FOUND, as Kafka answers)
//!   when the policy forbids upgrades, the group is not of type
//!   "consumer", is larger than `group.consumer.max.size`, or a member's
//!   subscription or assignment does not decode (a member that joined but
//!   has no assignment yet: the group is mid-rebalance).
//! - Classic members inside a consumer group: JoinGroup
//!   ([`ConsumerGroup::classic_join`]) answers at once with the member's
//!   epoch as its generation (no leader: the coordinator assigns);
//!   SyncGroup ([`ConsumerGroup::classic_sync`]) hands out the member's
//!   current assignment; Heartbeat ([`ConsumerGroup::classic_heartbeat`])
//!   answers REBALANCE_IN_PROGRESS while the member must rejoin to move on
//!   towards its target; LeaveGroup ([`ConsumerGroup::classic_leave`]).
//!   As in Kafka, a member told to rejoin that does not within its
//!   rebalance timeout, or that joins and does not sync within it, is
//!   removed (as a member whose session ends).
//! - Downgrade ([`ConsumerGroup::downgrades_without`],
//!   [`ConsumerGroup::to_classic`]): when the last member of the consumer
//!   protocol leaves or is fenced and classic members remain, the group
//!   becomes a classic one, `Stable` at the group epoch with each member's
//!   target assignment, which the coordinator then rebalances; when a
//!   classic static member replaces it
//!   ([`ConsumerGroup::downgrades_replacing`]), the same without a
//!   rebalance, the newcomer taking over its assignment.
//!
//! Pure: the coordinator (`group::conversion_shard`) writes the records
//! (the old type's tombstones, the new type's records) before it
//! installs the result.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::consumer_protocol as cp;
use super::machine::{ConsumerGroup, ConsumerSettings, Heartbeat, Member, Topics, LEAVE_EPOCH};
use super::migration::ClassicMetadata;
use super::reconcile::{CurrentAssignment, MemberState};
use crate::group::state::{
    Group as ClassicGroup, JoinRequest, JoinResult, Member as ClassicMember,
};

/// The protocol type of the groups that convert.
pub const PROTOCOL_TYPE: &str = "consumer";

impl ClassicMetadata {
    /// The protocol the member is told it uses: its first.
    fn protocol_name(&self) -> &str {
        self.protocols.first().map_or("", |(n, _)| n.as_str())
    }

    /// The ConsumerProtocol version its assignments are encoded in.
    fn version(&self) -> i16 {
        self.protocols
            .first()
            .and_then(|(_, m)| cp::version(m))
            .unwrap_or(0)
    }
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names.dedup();
    names
}

impl ConsumerGroup {
    /// The consumer group a classic group becomes when a
    /// ConsumerGroupHeartbeat joins it (upgrade); `Err(GROUP_ID_NOT_FOUND)`
    /// when it cannot (see the module doc). The group epoch and every
    /// member's epoch are the classic generation; each member's target is
    /// what it was assigned.
    pub fn from_classic(
        classic: &ClassicGroup,
        topics: &Topics,
        settings: &ConsumerSettings,
        now: i64,
    ) -> Result<ConsumerGroup, ResponseError> {
        if !settings.migration_policy.upgrade_enabled()
            || classic.protocol_type.as_deref() != Some(PROTOCOL_TYPE)
            || classic.members.len() > settings.max_size
        {
            return Err(ResponseError::GroupIdNotFound);
        }
        let protocol = classic
            .protocol_name
            .as_deref()
            .ok_or(ResponseError::GroupIdNotFound)?;
        let generation = classic.generation_id;
        let mut g = ConsumerGroup::new(&classic.id);
        g.epoch = generation;
        g.assignment_epoch = generation;
        for m in classic.members.values() {
            let metadata = m
                .protocols
                .iter()
                .find(|(n, _)| n == protocol)
                .map(|(_, b)| b.clone())
                .unwrap_or_default();
            let sub = cp::decode_subscription(&metadata).ok_or(ResponseError::GroupIdNotFound)?;
            let assigned = cp::decode_assignment(&m.assignment)
                .map(|a| cp::to_ids(&a, topics))
                .ok_or(ResponseError::GroupIdNotFound)?;
            g.target.insert(m.id.clone(), assigned.clone());
            g.members.insert(
                m.id.clone(),
                Member {
                    id: m.id.clone(),
                    instance_id: m.group_instance_id.clone(),
                    rack_id: sub.rack_id,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_names: sorted(sub.topics),
                    regex: None,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    server_assignor: None,
                    current: CurrentAssignment {
                        epoch: generation,
                        previous_epoch: generation,
                        state: MemberState::Stable,
                        assigned,
                        revoking: Default::default(),
                    },
                    session_deadline_ms: now + i64::from(m.session_timeout_ms),
                    revoke_deadline_ms: None,
                    join_deadline_ms: None,
                    sync_deadline_ms: None,
                    classic: Some(ClassicMetadata {
                        session_timeout_ms: m.session_timeout_ms,
                        protocols: m.protocols.clone(),
                    }),
                },
            );
        }
        Ok(g)
    }

    /// Whether a classic member of `protocol_type` with `protocols` may
    /// join: some protocol of its must be supported by every classic
    /// member.
    fn supports_classic(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if protocol_type != PROTOCOL_TYPE || protocols.is_empty() {
            return false;
        }
        protocols.iter().any(|(name, _)| {
            self.members
                .values()
                .filter_map(|m| m.classic.as_ref())
                .all(|c| c.protocols.iter().any(|(n, _)| n == name))
        })
    }

    /// The classic member a SyncGroup, Heartbeat or LeaveGroup names:
    /// by its instance id if it has one (FENCED_INSTANCE_ID when another
    /// member holds it), else by member id; UNKNOWN_MEMBER_ID when it is
    /// not a member or not one of the classic protocol.
    fn classic_member(
        &self,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<&Member, ResponseError> {
        let m = match instance {
            Some(i) => {
                let m = self
                    .members
                    .values()
                    .find(|m| m.instance_id.as_deref() == Some(i))
                    .ok_or(ResponseError::UnknownMemberId)?;
                if m.id != member_id {
                    return Err(ResponseError::FencedInstanceId);
                }
                m
            }
            None => self
                .members
                .get(member_id)
                .ok_or(ResponseError::UnknownMemberId)?,
        };
        if m.classic.is_none() {
            return Err(ResponseError::UnknownMemberId);
        }
        Ok(m)
    }

    /// A JoinGroup of a classic member at `now` (its session timeout
    /// checked by the caller). Answers at once: the member's epoch is the
    /// generation, and no member is the leader. `Err` carries the member
    /// id to answer with (MEMBER_ID_REQUIRED hands out a new one). On an
    /// error the caller drops this (cloned) state.
    pub fn classic_join(
        &mut self,
        req: &JoinRequest,
        topics: &Topics,
        settings: &ConsumerSettings,
        now: i64,
    ) -> Result<JoinResult, (ResponseError, String)> {
        let unknown = req.member_id.is_empty();
        let member_id = if unknown {
            Uuid::new_v4().to_string()
        } else {
            req.member_id.clone()
        };
        let fail = |e: ResponseError| Err((e, member_id.clone()));
        if !self.members.contains_key(&member_id) && self.members.len() >= settings.max_size {
            return fail(ResponseError::GroupMaxSizeReached);
        }
        if !self.supports_classic(&req.protocol_type, &req.protocols) {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        if req.require_known_member_id && unknown && req.group_instance_id.is_none() {
            return fail(ResponseError::MemberIdRequired);
        }
        let Some(sub) = cp::decode_subscription(&req.protocols[0].1) else {
            return fail(ResponseError::UnknownServerError);
        };
        let static_holder = req.group_instance_id.as_ref().and_then(|i| {
            self.members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(i))
                .cloned()
        });
        let before = match static_holder {
            // a restarted static member takes over its previous
            // incarnation: its assignment and its epoch
            Some(prev) if unknown => {
                self.members.remove(&prev.id);
                let target = self.target.remove(&prev.id).unwrap_or_default();
                self.target.insert(member_id.clone(), target);
                let mut m = prev;
                m.id = member_id.clone();
                if m.current.epoch < 0 {
                    m.current.epoch = m.current.previous_epoch.max(0);
                }
                Some(m)
            }
            Some(prev) if prev.id != member_id => return fail(ResponseError::FencedInstanceId),
            _ => self.members.get(&member_id).cloned(),
        };
        let mut member = before.clone().unwrap_or_else(|| Member {
            id: member_id.clone(),
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            ..Default::default()
        });
        if req.group_instance_id.is_some() {
            member.instance_id = req.group_instance_id.clone();
        }
        if sub.rack_id.is_some() {
            member.rack_id = sub.rack_id.clone();
        }
        if req.rebalance_timeout_ms != -1 {
            member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        member.subscribed_names = sorted(sub.topics.clone());
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        member.classic = Some(ClassicMetadata {
            session_timeout_ms: req.session_timeout_ms,
            protocols: req.protocols.clone(),
        });
        member.session_deadline_ms = now + i64::from(req.session_timeout_ms);
        let changed = before.as_ref().is_none_or(|b| {
            (&b.subscribed_names, &b.regex, &b.server_assignor)
                != (
                    &member.subscribed_names,
                    &member.regex,
                    &member.server_assignor,
                )
        });
        self.members.insert(member_id.clone(), member);
        self.refresh(topics, settings, changed);
        let owned = cp::to_ids(&sub.owned, topics);
        self.reconcile_member(&member_id, Some(&owned), now);
        let m = self.members.get_mut(&member_id).expect("inserted above");
        // it rejoined; now it must sync within its rebalance timeout
        m.join_deadline_ms = None;
        m.sync_deadline_ms = Some(now + i64::from(req.rebalance_timeout_ms.max(0)));
        let m = &self.members[&member_id];
        Ok(JoinResult {
            error: 0,
            generation_id: m.current.epoch,
            protocol_type: Some(PROTOCOL_TYPE.to_string()),
            protocol_name: Some(req.protocols[0].0.clone()),
            leader: String::new(),
            member_id,
            members: Vec::new(),
            skip_assignment: false,
        })
    }

    /// A SyncGroup of a classic member at `now`: its current assignment,
    /// encoded as its protocol's version (topic names from `topics`).
    /// REBALANCE_IN_PROGRESS when the group moved on since its join and it
    /// has nothing to revoke first.
    #[allow(clippy::too_many_arguments)]
    pub fn classic_sync(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        topics: &Topics,
        now: i64,
    ) -> Result<(String, Bytes), ResponseError> {
        let m = self.classic_member(member_id, instance)?;
        let classic = m.classic.as_ref().expect("a classic member");
        if generation != m.current.epoch {
            return Err(ResponseError::IllegalGeneration);
        }
        if protocol_type.is_some_and(|t| t != PROTOCOL_TYPE)
            || protocol_name.is_some_and(|n| n != classic.protocol_name())
        {
            return Err(ResponseError::InconsistentGroupProtocol);
        }
        if self.epoch > m.current.epoch && m.current.state != MemberState::UnrevokedPartitions {
            let id = m.id.clone();
            self.expect_rejoin(&id, now);
            return Err(ResponseError::RebalanceInProgress);
        }
        let answer = (
            classic.protocol_name().to_string(),
            cp::encode_assignment(&m.current.assigned, topics, classic.version()),
        );
        let timeout = i64::from(classic.session_timeout_ms);
        let id = m.id.clone();
        if let Some(m) = self.members.get_mut(&id) {
            m.session_deadline_ms = now + timeout;
            m.sync_deadline_ms = None;
        }
        Ok(answer)
    }

    /// A Heartbeat of a classic member at `now`: refreshes its session;
    /// REBALANCE_IN_PROGRESS when it must rejoin — the group epoch is
    /// ahead of its epoch, it has partitions to revoke, or partitions it
    /// waited for are free now.
    pub fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
        now: i64,
    ) -> Result<(), ResponseError> {
        let m = self.classic_member(member_id, instance)?;
        if generation != m.current.epoch {
            return Err(ResponseError::IllegalGeneration);
        }
        let rejoin = m.current.epoch < self.epoch
            || m.current.state == MemberState::UnrevokedPartitions
            || (m.current.state == MemberState::UnreleasedPartitions
                && !self.waits_on_unreleased(m));
        let id = m.id.clone();
        let timeout = m
            .classic
            .as_ref()
            .map_or(0, |c| i64::from(c.session_timeout_ms));
        if let Some(m) = self.members.get_mut(&id) {
            m.session_deadline_ms = now + timeout;
        }
        if rejoin {
            self.expect_rejoin(&id, now);
            Err(ResponseError::RebalanceInProgress)
        } else {
            Ok(())
        }
    }

    /// A classic member told to rejoin must do so within its rebalance
    /// timeout (the first such answer starts the clock).
    fn expect_rejoin(&mut self, member_id: &str, now: i64) {
        if let Some(m) = self.members.get_mut(member_id) {
            let timeout = i64::from(m.rebalance_timeout_ms.max(0));
            m.join_deadline_ms.get_or_insert(now + timeout);
        }
    }

    /// Whether some partition of `m`'s target it does not hold yet is
    /// still held by another member.
    fn waits_on_unreleased(&self, m: &Member) -> bool {
        self.target.get(&m.id).is_some_and(|target| {
            target.iter().any(|(t, ps)| {
                ps.iter().any(|p| {
                    !m.current.assigned.get(t).is_some_and(|a| a.contains(p))
                        && !self.is_free(&m.id, *t, *p)
                })
            })
        })
    }

    /// A LeaveGroup of classic members (`(member id, instance id)` each):
    /// one error code each; the members that left are removed with one
    /// epoch bump (the target recomputed at once).
    pub fn classic_leave(
        &mut self,
        leaving: &[(String, Option<String>)],
        topics: &Topics,
        settings: &ConsumerSettings,
    ) -> Vec<i16> {
        let mut removed = false;
        let codes = leaving
            .iter()
            .map(|(member_id, instance)| {
                let found = match instance {
                    // an admin removes a static member by its instance id alone
                    Some(i) if member_id.is_empty() => self
                        .members
                        .values()
                        .find(|m| m.instance_id.as_deref() == Some(i.as_str()))
                        .filter(|m| m.classic.is_some())
                        .map(|m| m.id.clone())
                        .ok_or(ResponseError::UnknownMemberId),
                    _ => self
                        .classic_member(member_id, instance.as_deref())
                        .map(|m| m.id.clone()),
                };
                match found {
                    Ok(id) => {
                        self.members.remove(&id);
                        self.target.remove(&id);
                        removed = true;
                        0
                    }
                    Err(e) => e.code(),
                }
            })
            .collect();
        if removed {
            self.refresh(topics, settings, true);
        }
        codes
    }

    /// The member a leaving ConsumerGroupHeartbeat (epoch -1) removes, if
    /// it names one.
    pub fn leaving_member(&self, req: &Heartbeat) -> Option<String> {
        if req.member_epoch != LEAVE_EPOCH {
            return None;
        }
        let m = match &req.instance_id {
            Some(i) => self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(i))?,
            None => self.members.get(&req.member_id)?,
        };
        (m.id == req.member_id).then(|| m.id.clone())
    }

    /// Whether removing `leaving` (it left or was fenced) downgrades the
    /// group: it is the last member of the consumer protocol, classic
    /// members remain, the policy allows downgrades, and they fit in
    /// `classic_max_size` (`group.max.size`).
    pub fn downgrades_without(
        &self,
        leaving: &str,
        settings: &ConsumerSettings,
        classic_max_size: usize,
    ) -> bool {
        self.members
            .get(leaving)
            .is_some_and(|l| l.classic.is_none())
            && self.members.len() > 1
            && self
                .members
                .values()
                .all(|m| m.id == leaving || m.classic.is_some())
            && settings.migration_policy.downgrade_enabled()
            && self.members.len() - 1 <= classic_max_size
    }

    /// Whether a classic static member replacing `replaced` (the member
    /// that held its instance id) downgrades the group: `replaced` is the
    /// last member of the consumer protocol, the policy allows downgrades,
    /// and the members fit in `classic_max_size`. The group then becomes
    /// classic at once, the newcomer with `replaced`'s assignment, without
    /// a rebalance (as in Kafka).
    pub fn downgrades_replacing(
        &self,
        replaced: &str,
        settings: &ConsumerSettings,
        classic_max_size: usize,
    ) -> bool {
        self.members
            .get(replaced)
            .is_some_and(|r| r.classic.is_none())
            && self
                .members
                .values()
                .all(|m| m.id == replaced || m.classic.is_some())
            && settings.migration_policy.downgrade_enabled()
            && self.members.len() <= classic_max_size
    }

    /// The member holding `instance`, if any.
    pub fn static_member(&self, instance: &str) -> Option<&Member> {
        self.members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(instance))
    }

    /// The classic group this one becomes without `leaving` (see
    /// [`downgrades_without`](Self::downgrades_without)): `Stable` at the
    /// group epoch, each member with its target assignment encoded in the
    /// version of its metadata for the protocol selected, their sessions
    /// starting at `now`. `None` when the members share no protocol.
    pub fn to_classic(&self, leaving: &str, topics: &Topics, now: i64) -> Option<ClassicGroup> {
        let members = self
            .members
            .values()
            .filter(|m| m.id != leaving)
            .map(|m| {
                let classic = m.classic.clone().unwrap_or_default();
                ClassicMember {
                    id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: classic.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocol_type: PROTOCOL_TYPE.to_string(),
                    protocols: classic.protocols,
                    assignment: Bytes::new(),
                    last_heartbeat_ms: now,
                    awaiting_join: false,
                    awaiting_sync: false,
                }
            })
            .collect();
        let mut g = ClassicGroup::converted(&self.id, self.epoch, PROTOCOL_TYPE, members)?;
        let protocol = g.protocol_name.clone().unwrap_or_default();
        for m in g.members.values_mut() {
            let version = m
                .protocols
                .iter()
                .find(|(n, _)| *n == protocol)
                .and_then(|(_, b)| cp::version(b))
                .unwrap_or(0);
            let target = self.target.get(&m.id).cloned().unwrap_or_default();
            m.assignment = cp::encode_assignment(&target, topics, version);
        }
        Some(g)
    }
}
