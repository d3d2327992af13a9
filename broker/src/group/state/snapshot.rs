//! A settled group as the coordinator stores it in `__consumer_offsets`
//! ([`Group::snapshot`]) and as a coordinator that takes the group over
//! restores it ([`Group::restore`]), or as a consumer group converts
//! into it ([`Group::converted`]): the mapping between the group's
//! record and `group::metadata`'s `GroupSnapshot`. The record codec is
//! `group::metadata`'s; this module imports nothing else of the
//! coordinator.

use crate::group::metadata::{GroupSnapshot, MemberSnapshot};
use crate::group::state::members::{Group, GroupState, Member};

impl Group {
    /// What the coordinator stores of a settled group (`Stable`, or `Empty`
    /// with its generation); `None` in the states between (a rebalance is
    /// not stored: a new coordinator lets its members rejoin).
    pub fn snapshot(&self, now_ms: i64) -> Option<GroupSnapshot> {
        if !matches!(self.state, GroupState::Stable | GroupState::Empty) {
            return None;
        }
        let protocol = self.protocol_name.clone();
        let members = self
            .members
            .values()
            .map(|m| MemberSnapshot {
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
        Some(GroupSnapshot {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation_id,
            protocol,
            leader: self.leader.clone(),
            timestamp_ms: now_ms,
            members,
        })
    }

    /// A group converted from a consumer group (an online downgrade):
    /// `Stable` in `generation` with `members`, on the protocol they all
    /// support (`None` if there is none), without a leader until the
    /// rebalance the coordinator starts next.
    pub fn converted(
        id: &str,
        generation: i32,
        protocol_type: &str,
        members: Vec<Member>,
    ) -> Option<Self> {
        let mut g = Group::new(id);
        g.generation_id = generation;
        g.protocol_type = Some(protocol_type.to_string());
        g.state = GroupState::Stable;
        for m in members {
            if let Some(instance) = &m.group_instance_id {
                g.static_members.insert(instance.clone(), m.id.clone());
            }
            g.members.insert(m.id.clone(), m);
        }
        g.protocol_name = Some(g.select_protocol()?);
        Some(g)
    }

    /// A group as a stored snapshot describes it, taken over at `now_ms`:
    /// `Stable` in the stored generation with its members (each with a
    /// fresh session, as Kafka's coordinator does on load), or `Empty`.
    pub fn restore(id: &str, snapshot: &GroupSnapshot, now_ms: i64) -> Self {
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
}
