//! The fetch path: consumers read up to the high watermark (read_committed
//! ones up to the last stable offset, with the aborted transactions of
//! the range), a state loader
//! up to the log end, and a follower's fetch served by the leader records
//! the follower's progress, detects a diverged log (KIP-279), and may
//! propose the follower back into the ISR.

use kafka_protocol::error::ResponseError;

use super::role::{IsrProposal, Role};
use super::state::{offsets_of, Partition, PartitionOffsets};
use crate::clock::now_ms;
use crate::replication::progress::{self, FollowerProgress};
use crate::storage::{self, FetchSlice};

impl Partition {
    /// Reads whole batches from `offset` for a consumer: never past the
    /// high watermark.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: u64,
    ) -> storage::Result<(FetchSlice, PartitionOffsets)> {
        let state = self.lock();
        let hw = state.log.high_watermark();
        let slice = state.log.read(offset, max_bytes, hw)?;
        Ok((slice, offsets_of(&state)))
    }

    /// Reads whole batches from `offset` for a read_committed consumer
    /// (isolation level 1): never past the last stable offset; with the
    /// `(producer id, first offset)` of every aborted transaction the
    /// fetched range `[offset, last stable offset)` overlaps, so the
    /// consumer can drop their records (Kafka's `aborted_transactions`).
    pub fn read_committed(&self, offset: i64, max_bytes: u64) -> storage::Result<CommittedRead> {
        let state = self.lock();
        let offsets = offsets_of(&state);
        let records = state.log.read(offset, max_bytes, offsets.last_stable)?;
        let aborted = if records.is_empty() {
            Vec::new()
        } else {
            state.aborted.overlapping(offset, offsets.last_stable)
        };
        Ok(CommittedRead {
            records,
            offsets,
            aborted,
        })
    }

    /// Reads whole batches from `offset` up to the log end, past the high
    /// watermark: for a state loader on a broker that has just become
    /// leader (the group coordinator taking a shard over). What this log
    /// holds above its high watermark is what the new leader's epoch keeps
    /// — followers truncate to it — so it is committed once they fetch it;
    /// a loader stopping at the high watermark would miss what the old
    /// leader acknowledged just before dying, when this broker had the
    /// records but not yet the high watermark that covers them.
    pub fn read_to_log_end(&self, offset: i64, max_bytes: u64) -> storage::Result<FetchSlice> {
        let state = self.lock();
        let end = state.log.log_end_offset();
        state.log.read(offset, max_bytes, end)
    }

    /// Serves a follower's fetch as leader: records its progress (its
    /// fetch offset is its log end), moves the high watermark, and reads
    /// up to the log end. `last_fetched_epoch` (≥ 0) is the epoch of the
    /// follower's last record: when the leader's history of that epoch
    /// ends before `offset`, the follower's log diverged and the answer is
    /// the diverging `(epoch, end offset)` instead of records. Also returns
    /// an ISR expansion to propose when the follower has caught up.
    pub fn read_for_follower(
        &self,
        replica: i32,
        offset: i64,
        last_fetched_epoch: i32,
        max_bytes: u64,
    ) -> Result<FollowerRead, ResponseError> {
        let now = now_ms();
        let mut state = self.lock();
        let diverging = if last_fetched_epoch >= 0 {
            match state.log.end_offset_for_epoch(last_fetched_epoch) {
                Some((epoch, end)) if epoch == last_fetched_epoch && end >= offset => None,
                Some((epoch, end)) => Some((epoch, end)),
                // an epoch this leader never had: back to what is committed
                None => Some((-1, state.log.high_watermark())),
            }
        } else {
            None
        };
        let end = state.log.log_end_offset();
        let current_hw = state.log.high_watermark();
        let mut proposal = None;
        let hw = {
            let Role::Leader(l) = &mut state.role else {
                return Err(ResponseError::NotLeaderOrFollower);
            };
            if !l.replicas.contains(&replica) {
                return Err(ResponseError::NotLeaderOrFollower);
            }
            // a diverged follower's offset says nothing of what it holds
            if diverging.is_none() {
                l.followers
                    .entry(replica)
                    .or_insert_with(|| FollowerProgress::new(now))
                    .on_fetch(offset, end, now);
            }
            let joins = !l.isr.is_empty()
                && !l.isr.contains(&replica)
                && l.pending_isr.is_none()
                && l.followers
                    .get(&replica)
                    .is_some_and(|f| progress::may_join(f, current_hw, l.epoch_start_offset));
            if joins {
                let mut isr = l.isr.clone();
                isr.push(replica);
                proposal = Some(l.propose(&self.topic, self.index, isr, false));
            }
            Self::advance_high_watermark(&mut state)
        };
        let records = match diverging {
            Some(_) => None,
            None => Some(
                state
                    .log
                    .read(offset, max_bytes, i64::MAX)
                    .map_err(|e| crate::error::storage_error_code(&e))?,
            ),
        };
        let offsets = offsets_of(&state);
        if let Some(hw) = hw {
            self.publish_hw(hw);
        }
        drop(state);
        Ok(FollowerRead {
            records,
            offsets,
            diverging,
            isr_expansion: proposal,
        })
    }

    /// `(epoch, end offset)` of the log's history for `epoch`
    /// (OffsetsForLeaderEpoch, KIP-101/KIP-279).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.lock().log.end_offset_for_epoch(epoch)
    }
}

/// What a read_committed consumer's fetch gets.
#[derive(Debug)]
pub struct CommittedRead {
    pub records: FetchSlice,
    pub offsets: PartitionOffsets,
    /// `(producer id, first offset)` of the aborted transactions the
    /// records overlap (empty when nothing was read).
    pub aborted: Vec<(i64, i64)>,
}

/// What a follower's fetch gets from the leader.
#[derive(Debug)]
pub struct FollowerRead {
    pub records: Option<FetchSlice>,
    pub offsets: PartitionOffsets,
    /// The follower's log diverged: the leader's `(epoch, end offset)`.
    pub diverging: Option<(i32, i64)>,
    /// An ISR expansion to send to the controller.
    pub isr_expansion: Option<IsrProposal>,
}
