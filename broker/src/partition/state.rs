//! The [`Partition`] itself: what its lock guards (log, producers' state,
//! role), the watches waiters sleep on, opening it, taking its lock, and
//! the accessors other modules read it through (offsets, checkpoint
//! entries, `with_log`, the clean close).

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicUsize};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;
use uuid::Uuid;

use super::producers::ProducerStateLoad;
use super::role::{LeaderState, Role};
use super::txns::{self, AbortedTxns, Unreplicated};
use crate::clock::now_ms;
use crate::metadata::TopicMeta;
use crate::producer::state::ProducerStates;
use crate::storage::high_watermarks::{self, HighWatermarks, PartitionKey};
use crate::storage::{self, PartitionLog};

/// What is guarded by a partition's lock: the log and the producer
/// sequence state, so checking a batch and appending it are one step.
#[derive(Debug)]
pub(super) struct PartitionState {
    pub(super) log: PartitionLog,
    pub(super) producers: ProducerStates,
    /// The aborted transactions of the log (`txns`).
    pub(super) aborted: AbortedTxns,
    /// Transactions whose marker the high watermark has not passed yet.
    pub(super) unreplicated: Unreplicated,
    pub(super) role: Role,
    /// Producers (id → epoch) whose transaction's coordinator confirmed
    /// this partition is in it, before their first transactional batch
    /// here (KIP-890 verification; see [`Partition::verified`]). Cleared
    /// by that batch, or by a marker of the producer (a transaction that
    /// ended in between must be verified again).
    pub(super) verified: std::collections::HashMap<i64, i16>,
}

impl PartitionState {
    /// Forgets the ended transactions the high watermark has passed.
    pub(super) fn prune_unreplicated(&mut self) {
        let hw = self.log.high_watermark();
        self.unreplicated.prune(hw);
    }
}

/// How long a runtime worker may wait for a partition's lock before the
/// wait is moved off the worker (`block_in_place`): longer than any append
/// into the page cache, far shorter than a segment roll or an fsync.
const LOCK_WAIT_ON_WORKER: std::time::Duration = std::time::Duration::from_micros(500);

/// One partition this broker hosts: its log and role behind a lock, and
/// watches of its high watermark and log end that waiters sleep on.
#[derive(Debug)]
pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    pub(super) state: Mutex<PartitionState>,
    pub(super) high_watermark: watch::Sender<i64>,
    pub(super) log_end: watch::Sender<i64>,
    /// What `acks=all` waiters check without the partition's lock (an
    /// append holding it may wait on file work): the leader epoch led in
    /// (-1: following) and the committed ISR's size. Written under the lock.
    pub(super) led_epoch: AtomicI32,
    pub(super) isr_size: AtomicUsize,
    /// Notified with every high watermark or role change, for waiters off
    /// the async runtime (the group coordinator's writes).
    pub(super) hw_moved: (Mutex<()>, parking_lot::Condvar),
    /// Follower: the high watermark its leader last reported (-1: none
    /// yet), for DescribeLogDirs' offset lag.
    pub(super) leader_high_watermark: AtomicI64,
    /// What rebuilding the producer state cost when the partition opened.
    pub(super) producer_load: ProducerStateLoad,
    /// The data directory's high watermark checkpoint, which a truncation
    /// rewrites at once.
    pub(super) high_watermarks: Arc<HighWatermarks>,
}

impl Partition {
    /// Opens the partition's log. The sole replica of a partition
    /// (replication factor 1) holds nothing any other replica could lack,
    /// so its high watermark is its log end (the checkpoint may lag after
    /// an unclean stop); a replicated partition keeps the checkpointed high
    /// watermark (`high_watermarks`' entry, else the partition's own file
    /// of older brokers) until its leader says more.
    pub(crate) fn open(
        topic: &TopicMeta,
        index: i32,
        dir: PathBuf,
        config: storage::LogConfig,
        high_watermarks: Arc<HighWatermarks>,
    ) -> storage::Result<Self> {
        let mut log = PartitionLog::open(&dir, config, now_ms())?;
        log.defer_file_removal();
        let end = log.log_end_offset();
        let key = PartitionKey {
            topic_id: topic.id,
            index,
        };
        let checkpointed = match high_watermarks.checkpointed(key) {
            Some(hw) => {
                // the data directory's file has it: the old one is stale
                storage::checkpoint::remove_checkpoint(&dir, high_watermarks::LEGACY_FILE)?;
                hw
            }
            None => log.high_watermark(),
        };
        let hw = if topic.replication_factor > 1 {
            checkpointed.clamp(log.log_start_offset(), end)
        } else {
            end
        };
        log.set_high_watermark(hw);
        let loaded = txns::load(&log)?;
        Ok(Self {
            producer_load: loaded.cost,
            topic: topic.name.clone(),
            topic_id: topic.id,
            index,
            state: Mutex::new(PartitionState {
                log,
                producers: loaded.producers,
                aborted: loaded.aborted,
                unreplicated: loaded.unreplicated,
                role: Role::Leader(LeaderState::alone()),
                verified: Default::default(),
            }),
            high_watermark: watch::channel(hw).0,
            log_end: watch::channel(end).0,
            led_epoch: AtomicI32::new(0),
            isr_size: AtomicUsize::new(1),
            hw_moved: (Mutex::new(()), parking_lot::Condvar::new()),
            leader_high_watermark: AtomicI64::new(-1),
            high_watermarks,
        })
    }

    /// The partition's lock: waits on the calling thread only briefly, then
    /// off the runtime's worker (the holder may be rolling or fsyncing).
    pub(super) fn lock(&self) -> parking_lot::MutexGuard<'_, PartitionState> {
        match self.state.try_lock_for(LOCK_WAIT_ON_WORKER) {
            Some(guard) => guard,
            None => crate::offload::blocking(|| self.state.lock()),
        }
    }

    pub fn offsets(&self) -> PartitionOffsets {
        offsets_of(&self.lock())
    }

    /// The high watermark's watch (consumers' fetches and acks=all wait on it).
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// The log end's watch (followers' fetches wait on it).
    pub fn subscribe_log_end(&self) -> watch::Receiver<i64> {
        self.log_end.subscribe()
    }

    /// What rebuilding the producer state cost when the partition opened.
    pub fn producer_state_load(&self) -> ProducerStateLoad {
        self.producer_load
    }

    /// The active producers, sorted by producer id (DescribeProducers).
    pub fn active_producers(&self) -> Vec<crate::producer::state::ActiveProducer> {
        self.lock().producers.active()
    }

    /// Clean shutdown: writes a producer state snapshot at the log end
    /// (so the next start reads no batch header), then
    /// [`PartitionLog::close_in_place`]. A snapshot that cannot be written
    /// (a full disk) is logged: the next start then scans the batches.
    pub fn close_log(&self) -> storage::Result<()> {
        let mut state = self.lock();
        if state.log.is_closed() {
            return Ok(());
        }
        let entries = state.producers.to_snapshot();
        if let Err(e) = state.log.write_producer_snapshot(&entries) {
            tracing::warn!(topic = %self.topic, partition = self.index, error = %e, "cannot write a producer state snapshot at shutdown");
        }
        state.log.close_in_place()
    }

    /// The partition as the data directory's high watermark checkpoint
    /// names it.
    pub fn key(&self) -> PartitionKey {
        PartitionKey {
            topic_id: self.topic_id,
            index: self.index,
        }
    }

    /// The partition's entry in the high watermark checkpoint, holding
    /// `high_watermark`.
    pub fn checkpoint_entry(&self, high_watermark: i64) -> high_watermarks::Entry {
        high_watermarks::Entry {
            topic: self.topic.clone(),
            high_watermark,
        }
    }

    /// The high watermark as last published to waiters (no lock taken).
    pub fn published_high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    /// Runs `f` on the log under the partition's lock. Files `f` took out
    /// of the log (retention, DeleteRecords, compaction) are removed after
    /// the lock is released (see `storage::RetiredFiles`).
    pub fn with_log<T>(&self, f: impl FnOnce(&mut PartitionLog) -> T) -> T {
        let (out, retired) = {
            let mut state = self.lock();
            let out = f(&mut state.log);
            (out, state.log.take_retired())
        };
        drop(retired);
        out
    }

    /// The first phase of a compaction pass
    /// (`PartitionLog::plan_compaction_below`), bounded by the last stable
    /// offset: a pass never cleans records of a transaction still open.
    pub fn plan_compaction(
        &self,
        now_ms: i64,
    ) -> crate::storage::Result<crate::storage::CompactionPlan> {
        let (out, retired) = {
            let mut state = self.lock();
            let stable = last_stable_offset(&state);
            let out = state.log.plan_compaction_below(now_ms, stable);
            (out, state.log.take_retired())
        };
        drop(retired);
        out
    }

    pub fn size_bytes(&self) -> u64 {
        self.lock().log.size_bytes()
    }
}

/// Offsets of a partition at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub log_start: i64,
    pub log_end: i64,
    pub high_watermark: i64,
    /// The last stable offset: the high watermark, or the first offset of
    /// the earliest open transaction when that is lower (issue 37).
    pub last_stable: i64,
}

pub(super) fn offsets_of(state: &PartitionState) -> PartitionOffsets {
    let log = &state.log;
    let hw = log.high_watermark();
    PartitionOffsets {
        log_start: log.log_start_offset(),
        log_end: log.log_end_offset(),
        high_watermark: hw,
        last_stable: last_stable_offset(state),
    }
}

/// The last stable offset of the partition (see [`PartitionOffsets`]):
/// also held at the first offset of a transaction whose marker the high
/// watermark has not passed yet (Kafka's unreplicated transactions);
/// never below the log start.
pub(super) fn last_stable_offset(state: &PartitionState) -> i64 {
    let hw = state.log.high_watermark();
    let open = state.producers.first_unstable_offset();
    let unreplicated = state.unreplicated.first_unstable(hw);
    [open, unreplicated]
        .into_iter()
        .flatten()
        .fold(hw, i64::min)
        .max(state.log.log_start_offset())
}
