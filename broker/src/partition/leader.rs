//! Leadership and the high watermark: taking the role an image gives,
//! moving the high watermark to what the (maximal) ISR holds and
//! publishing it to waiters, `acks=all` waits, and the ISR's shrinking and
//! the controller's answers to proposals.

use std::sync::atomic::Ordering;

use kafka_protocol::error::ResponseError;

use super::role::{AckState, IsrProposal, LeaderState, ReplicaSummary, Role};
use super::state::{Partition, PartitionState};
use crate::clock::now_ms;
use crate::error::TopicError;
use crate::image::PartitionImage;
use crate::replication::progress::{self, FollowerProgress};

impl Partition {
    /// Leader: moves the high watermark to what the ISR holds; returns it
    /// when it moved.
    pub(super) fn advance_high_watermark(state: &mut PartitionState) -> Option<i64> {
        let Role::Leader(l) = &state.role else {
            return None;
        };
        let end = state.log.log_end_offset();
        let current = state.log.high_watermark();
        let hw =
            progress::high_watermark(l.node, end, &l.maximal_isr(), &l.followers, current).min(end);
        (hw != current).then(|| {
            state.log.set_high_watermark(hw);
            state.prune_unreplicated();
            hw
        })
    }

    /// Whether the records before `required` are replicated to the ISR
    /// (an `acks=all` produce of leader epoch `epoch` waits for it). Takes
    /// no lock: an append holding it may be rolling or fsyncing.
    pub fn ack_state(&self, required: i64, epoch: i32, min_isr: usize) -> AckState {
        if self.led_epoch.load(Ordering::Acquire) != epoch {
            return AckState::Failed(ResponseError::NotLeaderOrFollower);
        }
        if *self.high_watermark.borrow() < required {
            AckState::Waiting
        } else if self.isr_size.load(Ordering::Acquire) < min_isr {
            AckState::Failed(ResponseError::NotEnoughReplicasAfterAppend)
        } else {
            AckState::Done
        }
    }

    /// Publishes a high watermark (or wakes waiters when the role changed).
    pub(super) fn publish_hw(&self, hw: i64) {
        self.high_watermark.send_replace(hw);
        let _waiters = self.hw_moved.0.lock();
        self.hw_moved.1.notify_all();
    }

    /// [`ack_state`](Self::ack_state) waited for on this thread (not a
    /// runtime worker's: callers go through `offload::blocking`), up to
    /// `timeout`; still waiting then is `REQUEST_TIMED_OUT`.
    pub fn wait_replicated(
        &self,
        required: i64,
        epoch: i32,
        timeout: std::time::Duration,
    ) -> AckState {
        let deadline = std::time::Instant::now() + timeout;
        let mut waiters = self.hw_moved.0.lock();
        loop {
            match self.ack_state(required, epoch, 1) {
                AckState::Waiting => {}
                done => return done,
            }
            if self
                .hw_moved
                .1
                .wait_until(&mut waiters, deadline)
                .timed_out()
            {
                return match self.ack_state(required, epoch, 1) {
                    AckState::Waiting => AckState::Failed(ResponseError::RequestTimedOut),
                    done => done,
                };
            }
        }
    }

    /// Publishes the role for lock-free readers (call with the lock held).
    pub(super) fn publish_role(&self, role: &Role) {
        let (epoch, isr) = match role {
            Role::Leader(l) => (l.epoch, l.isr_size()),
            Role::Follower { .. } => (-1, 0),
        };
        self.isr_size.store(isr, Ordering::Release);
        self.led_epoch.store(epoch, Ordering::Release);
    }

    /// The leader epoch this broker leads the partition in, if it does.
    pub fn leader_epoch(&self) -> Option<i32> {
        match &self.lock().role {
            Role::Leader(l) => Some(l.epoch),
            Role::Follower { .. } => None,
        }
    }

    /// Takes the role the image gives broker `node`. Becoming leader in a
    /// new epoch starts the epoch at the log end in the log's epoch
    /// history and restarts the followers' progress; staying leader adopts
    /// a newer ISR; becoming follower wakes `acks=all` waiters (they fail
    /// with NOT_LEADER_OR_FOLLOWER).
    pub fn apply_image(&self, node: i32, image: &PartitionImage) -> Result<(), TopicError> {
        let now = now_ms();
        let mut state = self.lock();
        let end = state.log.log_end_offset();
        if image.leader == node {
            let same = matches!(&state.role, Role::Leader(l) if l.epoch == image.leader_epoch && l.node == node);
            if same {
                if let Role::Leader(l) = &mut state.role {
                    // a newer partition epoch settles any pending change
                    if image.partition_epoch > l.partition_epoch {
                        l.partition_epoch = image.partition_epoch;
                        l.isr = image.isr.clone();
                        l.replicas = image.replicas.clone();
                        l.pending_isr = None;
                        for r in image.replicas.iter().filter(|r| **r != node) {
                            l.followers
                                .entry(*r)
                                .or_insert_with(|| FollowerProgress::new(now));
                        }
                    }
                }
            } else {
                if state
                    .log
                    .latest_leader_epoch()
                    .is_none_or(|e| e < image.leader_epoch)
                {
                    state.log.assign_leader_epoch(image.leader_epoch, end)?;
                }
                let followers = image
                    .replicas
                    .iter()
                    .filter(|r| **r != node)
                    .map(|r| (*r, FollowerProgress::new(now)))
                    .collect();
                // verifications were a previous leadership's
                state.verified.clear();
                state.role = Role::Leader(LeaderState {
                    node,
                    epoch: image.leader_epoch,
                    partition_epoch: image.partition_epoch,
                    replicas: image.replicas.clone(),
                    isr: image.isr.clone(),
                    pending_isr: None,
                    epoch_start_offset: end,
                    followers,
                });
                tracing::info!(topic = %self.topic, partition = self.index, epoch = image.leader_epoch, log_end = end, "leading the partition");
            }
        } else {
            let was_leader = matches!(state.role, Role::Leader(_));
            state.role = Role::Follower {
                leader: image.leader,
                epoch: image.leader_epoch,
            };
            if was_leader {
                tracing::info!(topic = %self.topic, partition = self.index, leader = image.leader, epoch = image.leader_epoch, "following the partition");
            }
        }
        self.publish_role(&state.role);
        let hw = Self::advance_high_watermark(&mut state);
        let current = state.log.high_watermark();
        // wakes waiters even when nothing moved: their role may have
        self.publish_hw(hw.unwrap_or(current));
        drop(state);
        Ok(())
    }

    /// Leader: the followers not caught up for `lag_max_ms`, as an ISR
    /// shrink to propose (none while another change is pending).
    pub fn isr_shrink(&self, lag_max_ms: i64) -> Option<IsrProposal> {
        let now = now_ms();
        let mut state = self.lock();
        let Role::Leader(l) = &mut state.role else {
            return None;
        };
        if l.pending_isr.is_some() || l.isr.len() <= 1 {
            return None;
        }
        let out = progress::lagging(l.node, &l.isr, &l.followers, now, lag_max_ms);
        if out.is_empty() {
            return None;
        }
        let isr: Vec<i32> = l.isr.iter().copied().filter(|r| !out.contains(r)).collect();
        Some(l.propose(&self.topic, self.index, isr, true))
    }

    /// The leader's view of its replicas (`None` when following).
    pub fn leader_summary(&self) -> Option<ReplicaSummary> {
        let state = self.lock();
        let Role::Leader(l) = &state.role else {
            return None;
        };
        let end = state.log.log_end_offset();
        let mut follower_lag: Vec<(i32, i64)> = l
            .followers
            .iter()
            .map(|(r, f)| (*r, end - f.log_end.max(0)))
            .collect();
        follower_lag.sort_unstable();
        Some(ReplicaSummary {
            replicas: l.replicas.len().max(1),
            isr: l.isr_size(),
            follower_lag,
        })
    }

    /// The controller's answer to a proposal: the committed ISR and
    /// partition epoch (`None`: refused; the next image tells the truth).
    pub fn isr_answered(&self, proposal: &IsrProposal, committed: Option<(Vec<i32>, i32)>) {
        let mut state = self.lock();
        let Role::Leader(l) = &mut state.role else {
            return;
        };
        if l.epoch != proposal.leader_epoch {
            return;
        }
        l.pending_isr = None;
        if let Some((isr, partition_epoch)) = committed {
            if partition_epoch > l.partition_epoch {
                l.isr = isr;
                l.partition_epoch = partition_epoch;
            }
        }
        self.publish_role(&state.role);
        let hw = Self::advance_high_watermark(&mut state);
        // wakes waiters: the ISR's size may have changed
        let current = state.log.high_watermark();
        self.publish_hw(hw.unwrap_or(current));
        drop(state);
    }
}
