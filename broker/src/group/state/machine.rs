//! The classic consumer-group state machine, as pure logic: members join,
//! a generation is formed, the leader's assignment is handed out, members
//! heartbeat, leave or expire. Time is a parameter (`now`, in ms), so every
//! transition is unit-tested with a controllable clock.
//!
//! Responses that must wait (a JoinGroup until the rebalance completes, a
//! follower's SyncGroup until the leader syncs) are returned later as
//! [`Effect`]s; the async coordinator delivers them.
//!
//! This module owns the transitions between [`GroupState`]s; it works on
//! the group's record through `state::members` and answers with the
//! values of `state::messages`, importing nothing else of the coordinator.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

use crate::group::state::members::{Group, GroupState, Member};
use crate::group::state::messages::{
    Effect, GroupSettings, JoinMember, JoinRequest, JoinResult, Reply, SyncResult,
};

fn ok() -> i16 {
    0
}

impl Group {
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

    /// Starts a rebalance of a settled group (one converted from a
    /// consumer group: its members must rejoin); the answers to deliver.
    pub fn rebalance(&mut self, now: i64, settings: &GroupSettings) -> Vec<Effect> {
        let mut effects = self.prepare_rebalance(now, settings);
        effects.extend(self.try_complete_join(now));
        effects
    }

    /// The answers owed to the members waiting in a rebalance that will
    /// not complete (the group is converted to a consumer group): `code`
    /// to each.
    pub fn abandon_rebalance(&self, code: ResponseError) -> Vec<Effect> {
        let mut effects = Vec::new();
        for m in self.members.values() {
            if m.awaiting_join {
                effects.push(Effect::Join {
                    member_id: m.id.clone(),
                    result: JoinResult::error(code, &m.id),
                });
            }
            if m.awaiting_sync {
                effects.push(Effect::Sync {
                    member_id: m.id.clone(),
                    result: SyncResult::error(code),
                });
            }
        }
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
        if self.members.len() == 1 {
            // The group's first member (or its only one, rejoining) sets
            // its protocol type, which then outlives the members: an
            // empty group keeps the type of the members it had, as
            // Kafka's does (ListGroups and DescribeGroups report it).
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
            // empty: no protocol, but the protocol type stays (Kafka's)
            self.state = GroupState::Empty;
            self.generation_id += 1;
            self.protocol_name = None;
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
                // the protocol type stays, as in Kafka
                self.state = GroupState::Empty;
                self.generation_id += 1;
                self.protocol_name = None;
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
