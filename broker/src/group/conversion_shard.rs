//! The coordinator's edge for online conversion between classic and
//! consumer groups ([`super::consumer::conversion`]): the classic
//! protocol's JoinGroup, SyncGroup, Heartbeat and LeaveGroup for the
//! members of a consumer group, and the downgrade of a consumer group
//! whose last member of the consumer protocol left or was replaced by a
//! classic static member (the upgrade runs in
//! [`super::consumer_shard`]'s heartbeat). As there, decisions run on a
//! copy under the shard's locks, their records are written first, and
//! the new state is installed only once the write succeeded.
//!
//! Records: a downgrade writes the consumer group's tombstones, then the
//! classic group's GroupMetadata record (`Stable` at the group epoch with
//! each member's target assignment), as Kafka does; a coordinator that
//! loads the shard replays either type.

use kafka_protocol::error::ResponseError;

use super::consumer::records;
use super::consumer::{ConsumerGroup, Topics};
use super::state::{Group, JoinRequest, JoinResult, SyncResult};
use super::{metadata, now_ms, GroupCoordinator, Shard};
use crate::topics::TopicManager;

impl GroupCoordinator {
    /// JoinGroup for a consumer group: `None` when `group_id` is no
    /// consumer group (the classic path takes the request; an empty
    /// consumer group is deleted first, giving way to a classic group, as
    /// in Kafka). Blocking (a change waits for the offsets partition's ISR).
    pub fn classic_join_consumer(
        &self,
        topics: &TopicManager,
        view: &Topics,
        group_id: &str,
        req: JoinRequest,
    ) -> Option<JoinResult> {
        Self::validate_group_id(group_id).ok()?;
        let shard = self.shard(group_id);
        let _writes = shard.writes.lock();
        let old = shard.state.lock().consumer.get(group_id).cloned()?;
        if old.members.is_empty() {
            let tombstones = records::diff(group_id, Some(&old), None);
            if let Err(e) = self.persist(topics, group_id, tombstones) {
                return Some(JoinResult::error(Self::write_failure(&e), &req.member_id));
            }
            shard.state.lock().consumer.remove(group_id);
            tracing::info!(
                group = group_id,
                "empty consumer group deleted: a classic member joins"
            );
            return None;
        }
        let g = &self.settings.group;
        if !(g.min_session_timeout_ms..=g.max_session_timeout_ms).contains(&req.session_timeout_ms)
        {
            return Some(JoinResult::error(
                ResponseError::InvalidSessionTimeout,
                &req.member_id,
            ));
        }
        let mut new = old.clone();
        let now = now_ms();
        let answer = match new.classic_join(&req, view, &self.settings.consumer, now) {
            Ok(a) => a,
            Err((e, member_id)) => return Some(JoinResult::error(e, &member_id)),
        };
        // a classic static member replacing the last member of the
        // consumer protocol: the group is classic again at once
        let replaced = req
            .group_instance_id
            .as_deref()
            .and_then(|i| old.static_member(i))
            .map(|m| m.id.clone())
            .filter(|id| *id != answer.member_id);
        if let Some(replaced) = replaced.filter(|r| {
            old.downgrades_replacing(r, &self.settings.consumer, self.settings.group.max_size)
        }) {
            if let Some(classic) = new.to_classic("", view, now) {
                return Some(
                    match self.install_downgrade(topics, shard, &old, classic, None) {
                        Ok(()) => {
                            tracing::info!(group = group_id, replaced = %replaced, member = %answer.member_id, "consumer group converted to a classic group: a classic static member replaced its last member of the consumer protocol");
                            answer
                        }
                        Err(e) => JoinResult::error(e, &req.member_id),
                    },
                );
            }
        }
        let writes = records::diff(group_id, Some(&old), Some(&new));
        if let Err(e) = self.persist(topics, group_id, writes) {
            tracing::warn!(group = group_id, error = %e.message, "could not write a classic member's join of a consumer group");
            return Some(JoinResult::error(Self::write_failure(&e), &req.member_id));
        }
        if new.epoch != old.epoch {
            tracing::info!(
                group = group_id,
                epoch = new.epoch,
                member = %answer.member_id,
                "consumer group epoch bumped by a classic member's join"
            );
        }
        shard
            .state
            .lock()
            .consumer
            .insert(group_id.to_string(), new);
        Some(answer)
    }

    /// SyncGroup of a classic member of a consumer group (`None`: not a
    /// consumer group). Writes nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn classic_sync_consumer(
        &self,
        view: &Topics,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
    ) -> Option<SyncResult> {
        let mut inner = self.shard(group_id).state.lock();
        let g = inner.consumer.get_mut(group_id)?;
        let answer = g.classic_sync(
            member_id,
            instance,
            generation_id,
            protocol_type,
            protocol_name,
            view,
            now_ms(),
        );
        Some(match answer {
            Ok((protocol, assignment)) => SyncResult {
                error: 0,
                protocol_type: protocol_type.map(str::to_string),
                protocol_name: protocol_name.map(str::to_string).or(Some(protocol)),
                assignment,
            },
            Err(e) => SyncResult::error(e),
        })
    }

    /// LeaveGroup of classic members of a consumer group (`None`: not a
    /// consumer group): one code per member. Blocking.
    pub fn classic_leave_consumer(
        &self,
        topics: &TopicManager,
        view: &Topics,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Option<Result<Vec<i16>, ResponseError>> {
        let shard = self.shard(group_id);
        let _writes = shard.writes.lock();
        let old = shard.state.lock().consumer.get(group_id).cloned()?;
        let mut new = old.clone();
        let codes = new.classic_leave(members, view, &self.settings.consumer);
        let writes = records::diff(group_id, Some(&old), Some(&new));
        if let Err(e) = self.persist(topics, group_id, writes) {
            tracing::warn!(group = group_id, error = %e.message, "could not write a classic member's leave of a consumer group");
            return Some(Err(Self::write_failure(&e)));
        }
        shard
            .state
            .lock()
            .consumer
            .insert(group_id.to_string(), new);
        Some(Ok(codes))
    }

    /// If removing `leaving` from `old` downgrades it (see
    /// [`ConsumerGroup::downgrades_without`]), writes the conversion and
    /// installs the classic group, rebalancing; `Some` with the outcome
    /// then, `None` when the group stays a consumer group. The caller
    /// holds the shard's `writes` lock.
    pub(super) fn maybe_downgrade(
        &self,
        topics: &TopicManager,
        shard: &Shard,
        view: &Topics,
        old: &ConsumerGroup,
        leaving: &str,
    ) -> Option<Result<(), ResponseError>> {
        if !old.downgrades_without(
            leaving,
            &self.settings.consumer,
            self.settings.group.max_size,
        ) {
            return None;
        }
        let now = now_ms();
        let classic: Group = old.to_classic(leaving, view, now)?;
        let done = self.install_downgrade(topics, shard, old, classic, Some(now));
        if done.is_ok() {
            tracing::info!(
                group = %old.id,
                left = leaving,
                "consumer group converted to a classic group: its last member of the consumer protocol left"
            );
        }
        Some(done)
    }

    /// Writes the downgrade of `old` to `classic` (the consumer group's
    /// tombstones, then the classic group's record) and installs it,
    /// rebalancing it at `rebalance_at` if given. The caller holds the
    /// shard's `writes` lock.
    fn install_downgrade(
        &self,
        topics: &TopicManager,
        shard: &Shard,
        old: &ConsumerGroup,
        mut classic: Group,
        rebalance_at: Option<i64>,
    ) -> Result<(), ResponseError> {
        let snapshot = classic
            .snapshot(now_ms())
            .expect("a converted group is stable");
        let mut writes = records::diff(&old.id, Some(old), None);
        writes.push((
            metadata::encode_key(&old.id),
            Some(metadata::encode_value(&snapshot)),
        ));
        if let Err(e) = self.persist(topics, &old.id, writes) {
            tracing::warn!(group = %old.id, error = %e.message, "could not write a consumer group's downgrade");
            return Err(Self::write_failure(&e));
        }
        let mut inner = shard.state.lock();
        inner.consumer.remove(&old.id);
        inner.stored.insert(
            old.id.clone(),
            (snapshot.generation, snapshot.members.len()),
        );
        let effects = match rebalance_at {
            Some(now) => classic.rebalance(now, &self.settings.group),
            None => Vec::new(),
        };
        inner.groups.insert(old.id.clone(), classic);
        inner.deliver(&old.id, effects);
        Ok(())
    }
}
