//! The coordinator's edge for KIP-848 consumer groups ([`super::consumer`]):
//! runs a group's state machine on a copy under its shard's locks, writes
//! the records of the change ([`records::diff`]) through the shard's write
//! path, and installs the new state only once that write succeeded — so
//! what a member was told is always what a coordinator that takes the
//! shard over replays. Unlike classic heartbeats, a consumer group
//! heartbeat holds the shard's `writes` lock (its state changes are
//! written), so it waits for a write of the same shard in progress.
//!
//! A heartbeat that joins a classic group with members upgrades it
//! ([`ConsumerGroup::from_classic`]: the classic GroupMetadata tombstone,
//! then the consumer group's records); one that leaves, or an expiry that
//! removes, the last member of the consumer protocol while classic
//! members remain downgrades the group (`super::conversion_shard`).

use kafka_protocol::error::ResponseError;

use super::consumer::machine::JOIN_EPOCH;
use super::consumer::records;
use super::consumer::{ConsumerGroup, Heartbeat, HeartbeatAnswer, Topics};
use super::state::GroupState;
use super::{metadata, now_ms, GroupCoordinator, OWNED};
use crate::topics::TopicManager;
use std::sync::atomic::Ordering;

impl GroupCoordinator {
    /// ConsumerGroupHeartbeat for `group_id`, with the cluster's topics
    /// `view`. Blocking (a change waits for the offsets partition's ISR).
    pub fn consumer_heartbeat(
        &self,
        topics: &TopicManager,
        view: &Topics,
        group_id: &str,
        req: Heartbeat,
    ) -> Result<HeartbeatAnswer, ResponseError> {
        Self::validate_group_id(group_id)?;
        let shard = self.shard(group_id);
        let _writes = shard.writes.lock();
        let now = now_ms();
        // `base`: the group the heartbeat works on; `old`: what the log
        // holds of it as a consumer group (`None` for a new or an upgraded
        // group, whose records are all written)
        let (old, base, replaces_classic, upgraded, abandoned) = {
            let inner = shard.state.lock();
            let classic = inner
                .groups
                .get(group_id)
                .filter(|g| g.state != GroupState::Dead);
            if let Some(c) = classic.filter(|g| !g.is_empty()) {
                // online upgrade: a member of the consumer protocol joins
                // a classic group with members
                if req.member_epoch != JOIN_EPOCH {
                    return Err(ResponseError::GroupIdNotFound);
                }
                let converted = ConsumerGroup::from_classic(c, view, &self.settings.consumer, now)
                    .inspect_err(|_| {
                        tracing::info!(
                            group = group_id,
                            "a classic group cannot be upgraded to a consumer group"
                        )
                    })?;
                // a rebalance in progress will not complete: its waiting
                // members rejoin the consumer group
                let abandoned = c.abandon_rebalance(ResponseError::RebalanceInProgress);
                (None, Some(converted), true, true, abandoned)
            } else {
                let old = inner.consumer.get(group_id).cloned();
                if old.is_none() && req.member_epoch != JOIN_EPOCH {
                    return Err(ResponseError::GroupIdNotFound);
                }
                // an empty classic group gives way to the consumer group
                // (its offsets stay), as in Kafka
                let replaces_classic = old.is_none() && inner.stored.contains_key(group_id);
                (old.clone(), old, replaces_classic, false, Vec::new())
            }
        };
        let mut new = base.unwrap_or_else(|| ConsumerGroup::new(group_id));
        if let Some(leaving) = new.leaving_member(&req) {
            // the last member of the consumer protocol leaves classic ones
            if let Some(done) = self.maybe_downgrade(topics, shard, view, &new, &leaving) {
                done?;
                return Ok(HeartbeatAnswer {
                    member_id: leaving,
                    member_epoch: req.member_epoch,
                    heartbeat_interval_ms: self.settings.consumer.heartbeat_interval_ms,
                    assignment: None,
                });
            }
        }
        let answer = new.heartbeat(req, view, &self.settings.consumer, now)?;
        let mut writes = Vec::new();
        if replaces_classic || upgraded {
            writes.push((metadata::encode_key(group_id), None));
        }
        writes.extend(records::diff(group_id, old.as_ref(), Some(&new)));
        if let Err(e) = self.persist(topics, group_id, writes) {
            tracing::warn!(group = group_id, error = %e.message, "could not write a consumer group's records");
            return Err(Self::write_failure(&e));
        }
        let mut inner = shard.state.lock();
        inner.deliver(group_id, abandoned);
        if old.is_none() {
            inner.groups.remove(group_id);
            inner.stored.remove(group_id);
        }
        if upgraded {
            tracing::info!(
                group = group_id,
                epoch = new.epoch,
                members = new.members.len(),
                "classic group converted to a consumer group: a member of the consumer protocol joined"
            );
        } else if old.as_ref().map(|g| g.epoch) != Some(new.epoch) {
            tracing::info!(
                group = group_id,
                epoch = new.epoch,
                members = new.members.len(),
                "consumer group epoch bumped"
            );
        }
        inner.consumer.insert(group_id.to_string(), new);
        Ok(answer)
    }

    /// Removes the consumer group members whose session or revocation
    /// time ran out, writing their removal first. Returns how many.
    /// Blocking; call periodically.
    pub fn expire_consumer_members(&self, topics: &TopicManager, view: &Topics) -> usize {
        let mut removed = 0;
        for shard in self
            .shards
            .iter()
            .filter(|s| s.owner.load(Ordering::SeqCst) == OWNED)
        {
            let now = now_ms();
            let due: Vec<String> = shard
                .state
                .lock()
                .consumer
                .iter()
                .filter(|(_, g)| g.has_due_member(now))
                .map(|(id, _)| id.clone())
                .collect();
            if due.is_empty() {
                continue;
            }
            let _writes = shard.writes.lock();
            for id in due {
                let Some(old) = shard.state.lock().consumer.get(&id).cloned() else {
                    continue;
                };
                // the last member of the consumer protocol expires: the
                // classic members left make it a classic group again
                let downgrading = old
                    .members
                    .values()
                    .filter(|m| m.is_due(now))
                    .find_map(|m| {
                        self.maybe_downgrade(topics, shard, view, &old, &m.id)
                            .map(|r| (m.id.clone(), r))
                    });
                if let Some((member, result)) = downgrading {
                    if result.is_ok() {
                        tracing::info!(group = %id, member = %member, "consumer group member removed: session or rebalance timeout");
                        removed += 1;
                    }
                    continue;
                }
                let mut new = old.clone();
                let expired = new.expire(now, view, &self.settings.consumer);
                if expired.is_empty() {
                    continue;
                }
                let writes = records::diff(&id, Some(&old), Some(&new));
                if let Err(e) = self.persist(topics, &id, writes) {
                    tracing::warn!(group = %id, error = %e.message, "could not write a consumer group member's removal");
                    continue;
                }
                tracing::info!(group = %id, members = ?expired, epoch = new.epoch, "consumer group members removed: session or rebalance timeout");
                removed += expired.len();
                shard.state.lock().consumer.insert(id, new);
            }
        }
        removed
    }

    /// Whether a consumer group member's session or revocation time has
    /// run out (cheap: for the periodic task to call
    /// [`expire_consumer_members`](Self::expire_consumer_members) only then).
    pub fn has_due_consumer_member(&self) -> bool {
        let now = now_ms();
        self.shards.iter().any(|s| {
            s.owner.load(Ordering::SeqCst) == OWNED
                && s.state
                    .lock()
                    .consumer
                    .values()
                    .any(|g| g.has_due_member(now))
        })
    }

    /// Deletes the consumer groups without members or committed offsets
    /// (tombstones first), as Kafka's coordinator does in its offsets
    /// expiration cycle; returns how many. Blocking.
    pub fn delete_empty_consumer_groups(&self, topics: &TopicManager) -> usize {
        let mut deleted = 0;
        for shard in self
            .shards
            .iter()
            .filter(|s| s.owner.load(Ordering::SeqCst) == OWNED)
        {
            let _writes = shard.writes.lock();
            let empty: Vec<ConsumerGroup> = {
                let inner = shard.state.lock();
                inner
                    .consumer
                    .values()
                    .filter(|g| g.members.is_empty() && !inner.offsets.has_group(&g.id))
                    .cloned()
                    .collect()
            };
            for g in empty {
                if let Err(e) = self.persist(topics, &g.id, records::diff(&g.id, Some(&g), None)) {
                    tracing::warn!(group = %g.id, error = %e.message, "could not delete an empty consumer group");
                    continue;
                }
                shard.state.lock().consumer.remove(&g.id);
                deleted += 1;
            }
        }
        deleted
    }

    /// A consumer group, as ConsumerGroupDescribe shows it.
    pub fn consumer_group(&self, group_id: &str) -> Option<ConsumerGroup> {
        self.shard(group_id)
            .state
            .lock()
            .consumer
            .get(group_id)
            .cloned()
    }

    /// Whether `group_id` is a consumer group (not a classic one).
    pub fn is_consumer_group(&self, group_id: &str) -> bool {
        self.shard(group_id)
            .state
            .lock()
            .consumer
            .contains_key(group_id)
    }

    /// Whether `member_id` is a member of the consumer protocol in the
    /// consumer group `group_id`, whose OffsetCommit must be v9+ (as in
    /// Kafka, a classic member of a consumer group commits with any
    /// version; an unknown member gets UNKNOWN_MEMBER_ID instead).
    pub fn commit_requires_v9(&self, group_id: &str, member_id: &str) -> bool {
        self.shard(group_id)
            .state
            .lock()
            .consumer
            .get(group_id)
            .and_then(|g| g.members.get(member_id))
            .is_some_and(|m| m.classic.is_none())
    }

    /// OffsetFetch v9+ by a member of a consumer group: its epoch must be
    /// the member's (Kafka's STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID); an
    /// anonymous fetch (no member id, epoch -1) is an admin's.
    pub fn check_consumer_fetch(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        epoch: i32,
    ) -> Result<(), ResponseError> {
        let member_id = member_id.unwrap_or("");
        if epoch < 0 && member_id.is_empty() {
            return Ok(());
        }
        match self.shard(group_id).state.lock().consumer.get(group_id) {
            Some(g) => g.check_commit(member_id, epoch),
            None => Ok(()),
        }
    }
}
