//! The follower's side of replication: where its next fetch starts,
//! appending the leader's batches as they are (taking the leader's high
//! watermark and log start; control batches end transactions and index
//! aborts as on the leader, see `txns`), and truncating a diverged log.

use std::sync::atomic::Ordering;

use kafka_protocol::error::ResponseError;

use super::producers;
use super::role::Role;
use super::state::Partition;
use super::txns;
use crate::clock::now_ms;
use crate::error::TopicError;
use crate::storage;
use crate::storage::batch::BatchHeader;

/// What a follower needs to build its next fetch of this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchPosition {
    pub log_end: i64,
    pub log_start: i64,
    /// The epoch of the last record it holds (-1: none known).
    pub last_epoch: i32,
    /// The leader epoch it follows (or leads) in.
    pub leader_epoch: i32,
    pub leader: i32,
    /// This broker leads the partition now (nothing to fetch).
    pub leading: bool,
}

impl Partition {
    /// Where a follower's next fetch starts.
    pub fn fetch_position(&self) -> FetchPosition {
        let state = self.lock();
        let (leader, leader_epoch, leading) = match &state.role {
            Role::Leader(l) => (l.node, l.epoch, true),
            Role::Follower { leader, epoch } => (*leader, *epoch, false),
        };
        FetchPosition {
            log_end: state.log.log_end_offset(),
            log_start: state.log.log_start_offset(),
            last_epoch: state.log.latest_leader_epoch().unwrap_or(-1),
            leader_epoch,
            leader,
            leading,
        }
    }

    /// Follower: appends batches fetched from the leader as they are
    /// (offsets, epochs and producer sequences kept), then takes the
    /// leader's high watermark as far as its own log reaches, and its log
    /// start as far as that high watermark (records deleted on the leader,
    /// by DeleteRecords or retention, go here too, so they cannot come back
    /// after a failover). Refused unless this broker follows the partition
    /// in `leader_epoch`.
    pub fn append_from_leader(
        &self,
        batches: &[u8],
        leader_epoch: i32,
        leader_high_watermark: i64,
        leader_log_start: i64,
    ) -> Result<(), TopicError> {
        let now = now_ms();
        let mut state = self.lock();
        if !matches!(state.role, Role::Follower { epoch, .. } if epoch == leader_epoch) {
            return Err(TopicError::new(
                ResponseError::FencedLeaderEpoch,
                "no longer following in this leader epoch",
            ));
        }
        if !batches.is_empty() {
            // A log restarted at the leader's log start may begin inside a
            // batch, which the leader sends whole: start at the batch.
            let first = BatchHeader::parse(batches)?.base_offset;
            let end = state.log.log_end_offset();
            if first < end && state.log.log_start_offset() == end {
                state.log.truncate_fully_and_start_at(first)?;
            }
            let active_before = state.log.active_base_offset();
            let result = state.log.append_replicated(batches, now)?;
            let state = &mut *state;
            for ended in txns::apply_all(&mut state.producers, batches)? {
                state.unreplicated.push(&ended);
                if let Some(aborted) = ended.aborted {
                    state.aborted.record(&state.log, aborted)?;
                }
            }
            producers::snapshot_if_rolled(&mut state.log, &state.producers, active_before);
            debug_assert!(result.last_offset + 1 == state.log.log_end_offset());
            state.log.maybe_flush(now)?;
        }
        self.leader_high_watermark
            .store(leader_high_watermark, Ordering::Relaxed);
        let end = state.log.log_end_offset();
        let hw = leader_high_watermark
            .min(end)
            .max(state.log.log_start_offset());
        let moved = hw != state.log.high_watermark();
        if moved {
            state.log.set_high_watermark(hw);
            state.prune_unreplicated();
        }
        let start = leader_log_start.min(hw);
        if start > state.log.log_start_offset() {
            state.log.delete_records_before(start)?;
        }
        self.log_end.send_replace(end);
        if moved {
            self.publish_hw(hw);
        }
        let retired = state.log.take_retired();
        drop(state);
        drop(retired);
        Ok(())
    }

    /// Follower: the leader says this replica's log diverged after its
    /// history of `leader_epoch` ended at `leader_end_offset` (KIP-279);
    /// truncates to where both logs agree (`storage::epochs` decides; when
    /// this replica lacks that epoch, the next fetch asks again with its
    /// new latest epoch).
    pub fn truncate_diverged(
        &self,
        leader_epoch: i32,
        leader_end_offset: i64,
    ) -> Result<(), TopicError> {
        let to = self.with_log(|log| {
            storage::epochs::truncation_point(
                &log.leader_epoch_entries(),
                log.log_end_offset(),
                log.high_watermark(),
                leader_epoch,
                leader_end_offset,
            )
            .offset
        });
        self.truncate_to(to)
    }

    /// Follower: drops every record at or after `offset` (a divergence
    /// from the leader's log), then rebuilds the producers' state from
    /// what is left. Outside the log (below its start, or past its end),
    /// the log starts over empty at `offset`: the leader's log starts
    /// later than this one ends.
    pub fn truncate_to(&self, offset: i64) -> Result<(), TopicError> {
        let mut state = self.lock();
        if matches!(state.role, Role::Leader(_)) {
            return Err(TopicError::new(
                ResponseError::NotLeaderOrFollower,
                "a leader's log is never truncated",
            ));
        }
        let before = state.log.log_end_offset();
        if offset < state.log.log_start_offset() || offset > before {
            state.log.truncate_fully_and_start_at(offset)?;
        } else {
            state.log.truncate_to(offset)?;
        }
        let loaded = txns::load(&state.log)?;
        state.producers = loaded.producers;
        state.aborted = loaded.aborted;
        state.unreplicated = loaded.unreplicated;
        let end = state.log.log_end_offset();
        let hw = state.log.high_watermark().min(end);
        state.log.set_high_watermark(hw);
        self.log_end.send_replace(end);
        self.publish_hw(hw);
        // Before any append can follow: a crash must not bring back a
        // high watermark of the cut history over new records. Published
        // first: a checkpoint gathered after this write reads the new value.
        self.high_watermarks
            .write_one(self.key(), self.checkpoint_entry(hw))?;
        drop(state);
        tracing::warn!(topic = %self.topic, partition = self.index, from = before, to = end, "truncated a diverged replica");
        Ok(())
    }

    /// How many offsets this replica's log end is behind (DescribeLogDirs):
    /// 0 on a leader; on a follower, the high watermark its leader last
    /// reported minus its own log end (a fetch answer carries the leader's
    /// high watermark, not its log end), 0 before the first answer. A
    /// snapshot: a follower between fetches may show the lag of the last.
    pub fn offset_lag(&self) -> i64 {
        let state = self.lock();
        if matches!(state.role, Role::Leader(_)) {
            return 0;
        }
        let leader_hw = self.leader_high_watermark.load(Ordering::Relaxed);
        (leader_hw - state.log.log_end_offset()).max(0)
    }
}
