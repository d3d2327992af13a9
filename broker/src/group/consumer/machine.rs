//! One KIP-848 consumer group's state machine (Kafka's `ConsumerGroup`
//! and the heartbeat logic of its `GroupMetadataManager`): the group
//! epoch (bumped by every change of membership, subscriptions or
//! subscribed topics' metadata), the target assignment and its epoch
//! (recomputed by the assignor whenever it lags the group epoch), and each
//! member's epoch and current assignment, moved towards its target by
//! [`super::reconcile`]. Pure: requests, the topics' metadata and the time
//! come in; the new state and the answer go out. The coordinator persists
//! the difference ([`super::records`]) before it installs the new state.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::assignor::{self, Assignment, AssignorMember};
use super::metadata_hash;
use super::migration::{ClassicMetadata, MigrationPolicy};
use super::rack_aware;
use super::racks::Racks;
use super::reconcile::{self, CurrentAssignment, MemberState};

/// The epoch a member joins (or rejoins) with.
pub const JOIN_EPOCH: i32 = 0;
/// The epoch a member leaves with.
pub const LEAVE_EPOCH: i32 = -1;
/// The epoch a static member leaves with, meaning to come back (its
/// partitions wait for it for a session timeout).
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// Consumer group settings (Kafka broker config names in comments).
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// `group.consumer.session.timeout.ms`
    pub session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`
    pub heartbeat_interval_ms: i32,
    /// `group.consumer.max.size`
    pub max_size: usize,
    /// `group.consumer.assignors`; the first is the default.
    pub assignors: Vec<String>,
    /// `group.consumer.migration.policy`: which online conversions
    /// between classic and consumer groups are allowed.
    pub migration_policy: MigrationPolicy,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        Self {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: i32::MAX as usize,
            assignors: vec![assignor::UNIFORM.into(), assignor::RANGE.into()],
            migration_policy: MigrationPolicy::Bidirectional,
        }
    }
}

/// A topic as the group sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    pub id: Uuid,
    pub partitions: i32,
    /// Its KIP-1101 hash (id, name, partitions and the replicas' racks).
    pub hash: i64,
    /// Per partition, its replicas' racks (shared: the group keeps a copy
    /// of its subscribed topics at every heartbeat); empty when no replica
    /// has a rack.
    pub racks: Arc<[Vec<String>]>,
}

impl TopicMeta {
    /// `racks(p)`: the racks of partition `p`'s replicas.
    pub fn new(name: &str, id: Uuid, partitions: i32, racks: impl Fn(i32) -> Vec<String>) -> Self {
        let mut per_partition: Vec<Vec<String>> = (0..partitions.max(0)).map(racks).collect();
        if per_partition.iter().all(Vec::is_empty) {
            per_partition.clear();
        }
        let hash = metadata_hash::topic_hash(id, name, partitions, |p| {
            usize::try_from(p)
                .ok()
                .and_then(|i| per_partition.get(i))
                .cloned()
                .unwrap_or_default()
        });
        Self {
            id,
            partitions,
            hash,
            racks: per_partition.into(),
        }
    }
}

/// The cluster's (non-internal) topics by name.
pub type Topics = BTreeMap<String, TopicMeta>;

/// A ConsumerGroupHeartbeat, decoded (`None`: "unchanged since the last
/// heartbeat", as the protocol's nullable fields mean).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's assigned partitions, when it sent a full request or
    /// they changed.
    pub assignment: Option<Assignment>,
}

/// A member: what is persisted (its metadata and current assignment) and
/// its timers (not persisted: a coordinator that loads the group gives
/// every member a fresh session).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_names: Vec<String>,
    pub regex: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    pub current: CurrentAssignment,
    /// The session ends at this time unless the member heartbeats.
    pub session_deadline_ms: i64,
    /// The member is fenced at this time unless it has revoked.
    pub revoke_deadline_ms: Option<i64>,
    /// A classic member told to rejoin (REBALANCE_IN_PROGRESS) is removed
    /// at this time unless it has (Kafka's join timeout: its rebalance
    /// timeout).
    pub join_deadline_ms: Option<i64>,
    /// A classic member that joined is removed at this time unless it has
    /// synced (Kafka's sync timeout).
    pub sync_deadline_ms: Option<i64>,
    /// Set for a member that speaks the classic protocol (JoinGroup,
    /// SyncGroup, Heartbeat) inside this group: its session timeout and
    /// the protocols it joined with (Kafka's `ClassicMemberMetadata`).
    pub classic: Option<ClassicMetadata>,
}

impl Member {
    /// Whether two members hold the same persisted state.
    pub fn same_metadata(&self, other: &Member) -> bool {
        (
            &self.instance_id,
            &self.rack_id,
            &self.client_id,
            &self.client_host,
            &self.subscribed_names,
            &self.regex,
            self.rebalance_timeout_ms,
            &self.server_assignor,
            &self.classic,
        ) == (
            &other.instance_id,
            &other.rack_id,
            &other.client_id,
            &other.client_host,
            &other.subscribed_names,
            &other.regex,
            other.rebalance_timeout_ms,
            &other.server_assignor,
            &other.classic,
        )
    }

    /// Whether one of the member's times has run out at `now`: its
    /// session, its revocation, or (classic) its rejoin or sync.
    pub fn is_due(&self, now: i64) -> bool {
        self.session_deadline_ms <= now
            || [
                self.revoke_deadline_ms,
                self.join_deadline_ms,
                self.sync_deadline_ms,
            ]
            .iter()
            .any(|d| d.is_some_and(|d| d <= now))
    }

    /// The session timeout that applies to this member: its own if it
    /// speaks the classic protocol, else the group's.
    pub fn session_timeout_ms(&self, settings: &ConsumerSettings) -> i32 {
        self.classic
            .as_ref()
            .map_or(settings.session_timeout_ms, |c| c.session_timeout_ms)
    }
}

/// A consumer group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerGroup {
    pub id: String,
    /// The group epoch.
    pub epoch: i32,
    /// The epoch of the target assignment.
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, Member>,
    /// Each member's target assignment.
    pub target: BTreeMap<String, Assignment>,
    /// The subscribed topics' metadata the target was computed for (not
    /// stored: rebuilt from the cluster at the first refresh after a load).
    pub subscribed: Topics,
    /// The KIP-1101 hash of `subscribed`, stored in the group's record: a
    /// refresh that computes another bumps the epoch.
    pub metadata_hash: i64,
    /// The log holds a ConsumerGroupPartitionMetadata record (type 4, from
    /// before KIP-1101) for this group: the next write deletes it.
    pub legacy_partition_metadata: bool,
}

/// Kafka's `ConsumerGroup.ConsumerGroupState` names.
pub fn state_name(g: &ConsumerGroup) -> &'static str {
    if g.members.is_empty() {
        "Empty"
    } else if g.assignment_epoch < g.epoch {
        "Assigning"
    } else if g
        .members
        .values()
        .any(|m| m.current.epoch != g.assignment_epoch || m.current.state != MemberState::Stable)
    {
        "Reconciling"
    } else {
        "Stable"
    }
}

/// Compiles a subscription regex with RE2-like semantics: the `regex`
/// crate (no backreferences or look-around, as RE2), matched against the
/// whole topic name as Kafka's `Pattern.matcher(..).matches()`.
pub fn compile_regex(re: &str) -> Result<regex::Regex, ResponseError> {
    regex::Regex::new(&format!("^(?:{re})$")).map_err(|_| ResponseError::InvalidRegularExpression)
}

impl ConsumerGroup {
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_string(),
            ..Default::default()
        }
    }

    /// The topics `m` subscribes to that exist, by name.
    pub(super) fn member_topics(m: &Member, topics: &Topics) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = m
            .subscribed_names
            .iter()
            .filter(|n| topics.contains_key(*n))
            .cloned()
            .collect();
        if let Some(re) = m.regex.as_deref().and_then(|r| compile_regex(r).ok()) {
            out.extend(topics.keys().filter(|n| re.is_match(n)).cloned());
        }
        out
    }

    /// The metadata of every topic some member subscribes to.
    fn subscribed_metadata(&self, topics: &Topics) -> Topics {
        self.members
            .values()
            .flat_map(|m| Self::member_topics(m, topics))
            .filter_map(|n| topics.get(&n).map(|t| (n, t.clone())))
            .collect()
    }

    /// The assignor the group uses: the one most members ask for, else
    /// the first configured.
    pub fn assignor(&self, settings: &ConsumerSettings) -> String {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.server_assignor.as_deref() {
                *votes.entry(a).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|(name, n)| (*n, std::cmp::Reverse(*name)))
            .map(|(name, _)| name.to_string())
            .or_else(|| settings.assignors.first().cloned())
            .unwrap_or_else(|| assignor::UNIFORM.to_string())
    }

    /// Recomputes the subscribed metadata (bumping the epoch when it
    /// changed: topics created, deleted or grown) and, when the target
    /// lags the group epoch, the target assignment.
    /// `bump`: the membership or a subscription changed too (one bump
    /// for both).
    pub(super) fn refresh(&mut self, topics: &Topics, settings: &ConsumerSettings, bump: bool) {
        let subscribed = self.subscribed_metadata(topics);
        let hash = metadata_hash::group_hash(subscribed.values().map(|t| t.hash));
        if hash != self.metadata_hash || bump {
            self.epoch += 1;
        }
        self.subscribed = subscribed;
        self.metadata_hash = hash;
        self.legacy_partition_metadata = false;
        if self.assignment_epoch >= self.epoch {
            return;
        }
        let inputs: BTreeMap<String, AssignorMember> = self
            .members
            .values()
            .map(|m| {
                let subscribed = Self::member_topics(m, &self.subscribed)
                    .iter()
                    .filter_map(|n| self.subscribed.get(n).map(|t| t.id))
                    .collect();
                let current = self.target.get(&m.id).cloned().unwrap_or_default();
                (
                    m.id.clone(),
                    AssignorMember {
                        subscribed,
                        current,
                    },
                )
            })
            .collect();
        let partitions = self
            .subscribed
            .values()
            .map(|t| (t.id, t.partitions))
            .collect();
        let racks = self.racks();
        self.target = rack_aware::assign(&self.assignor(settings), &inputs, &partitions, &racks);
        self.assignment_epoch = self.epoch;
    }

    /// The members' racks and the subscribed partitions' replica racks
    /// (none of the latter when no member has a rack: nothing to match).
    fn racks(&self) -> Racks {
        let members: BTreeMap<String, String> = self
            .members
            .values()
            .filter_map(|m| Some((m.id.clone(), m.rack_id.clone()?)))
            .collect();
        let partitions = if members.is_empty() {
            BTreeMap::new()
        } else {
            self.subscribed
                .values()
                .filter(|t| !t.racks.is_empty())
                .map(|t| {
                    let sets = t
                        .racks
                        .iter()
                        .map(|r| r.iter().cloned().collect())
                        .collect();
                    (t.id, sets)
                })
                .collect()
        };
        Racks {
            members,
            partitions,
        }
    }

    /// Whether no member but `except` holds (or still revokes) `(t, p)`.
    pub(super) fn is_free(&self, except: &str, t: Uuid, p: i32) -> bool {
        !self.members.values().any(|m| {
            m.id != except
                && [&m.current.assigned, &m.current.revoking]
                    .iter()
                    .any(|a| a.get(&t).is_some_and(|ps| ps.contains(&p)))
        })
    }

    /// Moves `member_id` towards its target, with what it reported owning.
    pub(super) fn reconcile_member(
        &mut self,
        member_id: &str,
        owned: Option<&Assignment>,
        now: i64,
    ) {
        let Some(m) = self.members.get(member_id) else {
            return;
        };
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let next = reconcile::reconcile(
            &m.current,
            self.assignment_epoch,
            &target,
            owned,
            &|t, p| self.is_free(member_id, t, p),
        );
        let rebalance_timeout = i64::from(m.rebalance_timeout_ms.max(0));
        let m = self.members.get_mut(member_id).expect("looked up above");
        m.revoke_deadline_ms = match (next.state, m.revoke_deadline_ms) {
            (MemberState::UnrevokedPartitions, Some(d)) if next.epoch == m.current.epoch => Some(d),
            (MemberState::UnrevokedPartitions, _) => Some(now + rebalance_timeout),
            _ => None,
        };
        m.current = next;
    }

    /// Removes a member (left, fenced or expired); bumps the epoch (and
    /// recomputes the target at once, as Kafka does).
    pub fn remove_member(&mut self, member_id: &str, topics: &Topics, settings: &ConsumerSettings) {
        if self.members.remove(member_id).is_some() {
            self.target.remove(member_id);
            self.refresh(topics, settings, true);
        }
    }

    /// One heartbeat at `now`. On an error the caller drops this (cloned)
    /// state; on success it persists and installs it.
    pub fn heartbeat(
        &mut self,
        req: Heartbeat,
        topics: &Topics,
        settings: &ConsumerSettings,
        now: i64,
    ) -> Result<HeartbeatAnswer, ResponseError> {
        let session = i64::from(settings.session_timeout_ms);
        if req.member_epoch == LEAVE_EPOCH || req.member_epoch == STATIC_LEAVE_EPOCH {
            return self.leave(&req, topics, now, session, settings);
        }
        if let Some(re) = &req.subscribed_topic_regex {
            compile_regex(re)?;
        }
        let full = req.member_epoch == JOIN_EPOCH
            || (req.rebalance_timeout_ms != -1
                && req.subscribed_topic_names.is_some()
                && req.owned.is_some());
        let before = self.members.get(&req.member_id).cloned();
        let mut member = self.member_for(&req, settings)?;
        // the rack is an assignor input too (unlike on Kafka, whose
        // server-side assignors ignore it): a member moving rebalances
        let subscription_changed = before.as_ref().is_none_or(|b| {
            (
                &b.subscribed_names,
                &b.regex,
                &b.server_assignor,
                &b.rack_id,
            ) != (
                &member.subscribed_names,
                &member.regex,
                &member.server_assignor,
                &member.rack_id,
            )
        });
        member.session_deadline_ms = now + session;
        let member_id = member.id.clone();
        self.members.insert(member_id.clone(), member);
        self.refresh(topics, settings, subscription_changed);
        self.reconcile_member(&member_id, req.owned.as_ref(), now);
        let m = &self.members[&member_id];
        let changed = before
            .as_ref()
            .is_none_or(|b| b.current.assigned != m.current.assigned);
        Ok(HeartbeatAnswer {
            member_id: member_id.clone(),
            member_epoch: m.current.epoch,
            heartbeat_interval_ms: settings.heartbeat_interval_ms,
            assignment: (full || changed).then(|| m.current.assigned.clone()),
        })
    }

    /// The member a (non-leaving) heartbeat speaks for, updated with the
    /// request's fields; checks its epoch and instance.
    fn member_for(
        &mut self,
        req: &Heartbeat,
        settings: &ConsumerSettings,
    ) -> Result<Member, ResponseError> {
        let mut member = match self.members.get(&req.member_id) {
            Some(m) if req.member_epoch == JOIN_EPOCH => {
                // a rejoin (after a fencing): it owns nothing any more
                let mut m = m.clone();
                m.current.epoch = JOIN_EPOCH;
                m.current.state = MemberState::Stable;
                m.current.assigned.clear();
                m.current.revoking.clear();
                m
            }
            Some(m) => {
                if m.instance_id.is_some()
                    && req.instance_id.is_some()
                    && m.instance_id != req.instance_id
                {
                    return Err(ResponseError::FencedInstanceId);
                }
                check_epoch(m, req.member_epoch, req.owned.as_ref())?;
                m.clone()
            }
            None if req.member_epoch != JOIN_EPOCH => return Err(ResponseError::UnknownMemberId),
            None => self.new_member(req, settings)?,
        };
        if let Some(names) = &req.subscribed_topic_names {
            let mut names = names.clone();
            names.sort();
            names.dedup();
            member.subscribed_names = names;
        }
        if let Some(re) = &req.subscribed_topic_regex {
            member.regex = (!re.is_empty()).then(|| re.clone());
        }
        if req.server_assignor.is_some() {
            member.server_assignor = req.server_assignor.clone();
        }
        if req.rack_id.is_some() {
            member.rack_id = req.rack_id.clone();
        }
        if req.rebalance_timeout_ms != -1 {
            member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        // a member heartbeating with ConsumerGroupHeartbeat speaks the
        // consumer protocol, whatever it joined with before
        member.classic = None;
        Ok(member)
    }

    /// A joining member that is not in the group: a new one, or a static
    /// member coming back (it replaces its previous incarnation, which
    /// must have left with [`STATIC_LEAVE_EPOCH`], and takes over its
    /// assignment and epoch).
    fn new_member(
        &mut self,
        req: &Heartbeat,
        settings: &ConsumerSettings,
    ) -> Result<Member, ResponseError> {
        let previous = req.instance_id.as_ref().and_then(|i| {
            self.members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(i))
                .cloned()
        });
        if let Some(prev) = previous {
            if prev.current.epoch != STATIC_LEAVE_EPOCH {
                return Err(ResponseError::UnreleasedInstanceId);
            }
            // the old incarnation's assignment moves to the new member id
            self.members.remove(&prev.id);
            let target = self.target.remove(&prev.id).unwrap_or_default();
            self.target.insert(req.member_id.clone(), target);
            let mut m = prev;
            m.id = req.member_id.clone();
            m.current.epoch = m.current.previous_epoch.max(0);
            m.revoke_deadline_ms = None;
            return Ok(m);
        }
        if self.members.len() >= settings.max_size {
            return Err(ResponseError::GroupMaxSizeReached);
        }
        Ok(Member {
            id: req.member_id.clone(),
            instance_id: req.instance_id.clone(),
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            ..Default::default()
        })
    }

    fn leave(
        &mut self,
        req: &Heartbeat,
        topics: &Topics,
        now: i64,
        session: i64,
        settings: &ConsumerSettings,
    ) -> Result<HeartbeatAnswer, ResponseError> {
        let member_id = match (req.member_epoch, &req.instance_id) {
            (STATIC_LEAVE_EPOCH, Some(instance)) => self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(instance))
                .map(|m| m.id.clone())
                .ok_or(ResponseError::UnknownMemberId)?,
            _ => {
                if !self.members.contains_key(&req.member_id) {
                    return Err(ResponseError::UnknownMemberId);
                }
                req.member_id.clone()
            }
        };
        if member_id != req.member_id {
            return Err(ResponseError::FencedInstanceId);
        }
        if req.member_epoch == STATIC_LEAVE_EPOCH {
            // kept, partitions and all, for a session timeout
            let m = self.members.get_mut(&member_id).expect("found above");
            m.current.previous_epoch = m.current.epoch;
            m.current.epoch = STATIC_LEAVE_EPOCH;
            m.session_deadline_ms = now + session;
            m.revoke_deadline_ms = None;
        } else {
            self.remove_member(&member_id, topics, settings);
        }
        Ok(HeartbeatAnswer {
            member_id,
            member_epoch: req.member_epoch,
            heartbeat_interval_ms: settings.heartbeat_interval_ms,
            assignment: None,
        })
    }

    /// Members whose session ended, who did not revoke within their
    /// rebalance timeout, or (classic members) did not rejoin or sync in
    /// time, at `now`: removed (the group epoch bumps, the
    /// next heartbeat recomputes the target). Returns their ids.
    pub fn expire(
        &mut self,
        now: i64,
        topics: &Topics,
        settings: &ConsumerSettings,
    ) -> Vec<String> {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.is_due(now))
            .map(|m| m.id.clone())
            .collect();
        for id in &expired {
            self.remove_member(id, topics, settings);
        }
        expired
    }

    /// Whether a member's session or revocation time has run out at `now`.
    pub fn has_due_member(&self, now: i64) -> bool {
        self.members.values().any(|m| m.is_due(now))
    }

    /// A group restored at `now`: every member gets a fresh session.
    pub fn restored(mut self, now: i64, settings: &ConsumerSettings) -> Self {
        for m in self.members.values_mut() {
            m.session_deadline_ms = now + i64::from(m.session_timeout_ms(settings));
            m.revoke_deadline_ms = (m.current.state == MemberState::UnrevokedPartitions)
                .then(|| now + i64::from(m.rebalance_timeout_ms.max(0)));
        }
        self
    }

    /// The member epoch an OffsetCommit must carry: `Err` with Kafka's
    /// answer otherwise (UNKNOWN_MEMBER_ID; STALE_MEMBER_EPOCH, or
    /// ILLEGAL_GENERATION for a member of the classic protocol, whose
    /// generation is its epoch).
    pub fn check_commit(&self, member_id: &str, epoch: i32) -> Result<(), ResponseError> {
        let m = self
            .members
            .get(member_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        if epoch != m.current.epoch {
            return Err(if m.classic.is_some() {
                ResponseError::IllegalGeneration
            } else {
                ResponseError::StaleMemberEpoch
            });
        }
        Ok(())
    }
}

/// Kafka's fencing rule: an epoch ahead of the member's is fenced; one
/// behind is accepted only if it is the previous epoch and the member
/// owns no more than its current assignment (the answer with the bump
/// was lost).
fn check_epoch(m: &Member, received: i32, owned: Option<&Assignment>) -> Result<(), ResponseError> {
    let current = m.current.epoch;
    if received > current {
        return Err(ResponseError::FencedMemberEpoch);
    }
    if received < current {
        let subset = owned.is_some_and(|o| reconcile::is_subset(o, &m.current.assigned));
        if received != m.current.previous_epoch || !subset {
            return Err(ResponseError::FencedMemberEpoch);
        }
    }
    Ok(())
}
