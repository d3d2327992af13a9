//! One partition this broker holds (Kafka's `Partition`): its log, the
//! idempotent producers' sequence state, and its replica role — leader or
//! follower in a leader epoch — behind one lock, so checking a batch,
//! appending it and moving the high watermark are one step.
//!
//! As leader it tracks each follower's progress from their fetches and
//! keeps the high watermark at the smallest log end of the in-sync
//! replicas (`replication::progress` decides), proposes ISR changes (the
//! controller commits them), and stamps its leader epoch into appended
//! batches and the log's epoch history. As follower it appends the
//! leader's batches as they are, keeps the producers' state from them (so
//! it can deduplicate retries once it leads), takes the leader's high
//! watermark, and truncates where its log diverged from the leader's.
//!
//! Watches let waiters sleep until something moves: consumers' fetches and
//! `acks=all` produces on the high watermark, followers' fetches on the log
//! end.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use tokio::sync::watch;
use uuid::Uuid;

use crate::clock::now_ms;
use crate::error::TopicError;
use crate::image::PartitionImage;
use crate::metadata::TopicMeta;
use crate::producer::state::{last_sequence as producer_last_sequence, ProducerStates, SeqCheck};
use crate::replication::progress::{self, FollowerProgress};
use crate::storage::batch::{BatchHeader, BATCH_HEADER_LEN};
use crate::storage::high_watermarks::{self, HighWatermarks, PartitionKey};
use crate::storage::{self, AppendResult, FetchSlice, PartitionLog};

/// What is guarded by a partition's lock: the log and the producer
/// sequence state, so checking a batch and appending it are one step.
#[derive(Debug)]
struct PartitionState {
    log: PartitionLog,
    producers: ProducerStates,
    role: Role,
}

/// How long a runtime worker may wait for a partition's lock before the
/// wait is moved off the worker (`block_in_place`): longer than any append
/// into the page cache, far shorter than a segment roll or an fsync.
const LOCK_WAIT_ON_WORKER: std::time::Duration = std::time::Duration::from_micros(500);

/// A test hook: called (off the runtime's workers) right before an append
/// that will do blocking file work (a roll, an index growth, an fsync),
/// with the partition's lock held. Lets a test hold such an append in
/// progress and prove other requests are served meanwhile.
#[doc(hidden)]
pub static BLOCKING_APPEND_HOOK: std::sync::OnceLock<BlockingAppendHook> =
    std::sync::OnceLock::new();

/// The type of [`BLOCKING_APPEND_HOOK`]: called with the topic and partition.
#[doc(hidden)]
pub type BlockingAppendHook = Box<dyn Fn(&str, i32) + Send + Sync>;

/// One partition this broker hosts: its log and role behind a lock, and
/// watches of its high watermark and log end that waiters sleep on.
#[derive(Debug)]
pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    state: Mutex<PartitionState>,
    high_watermark: watch::Sender<i64>,
    log_end: watch::Sender<i64>,
    /// What `acks=all` waiters check without the partition's lock (an
    /// append holding it may wait on file work): the leader epoch led in
    /// (-1: following) and the committed ISR's size. Written under the lock.
    led_epoch: AtomicI32,
    isr_size: AtomicUsize,
    /// Notified with every high watermark or role change, for waiters off
    /// the async runtime (the group coordinator's writes).
    hw_moved: (Mutex<()>, parking_lot::Condvar),
    /// Follower: the high watermark its leader last reported (-1: none
    /// yet), for DescribeLogDirs' offset lag.
    leader_high_watermark: AtomicI64,
    /// What rebuilding the producer state cost when the partition opened.
    producer_load: ProducerStateLoad,
    /// The data directory's high watermark checkpoint, which a truncation
    /// rewrites at once.
    high_watermarks: Arc<HighWatermarks>,
}

/// The outcome of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    New(AppendResult),
    /// A retried idempotent batch already in the log, at `base_offset`.
    Duplicate {
        base_offset: i64,
        log_start_offset: i64,
    },
}

/// What this broker is for the partition.
#[derive(Debug, Clone)]
enum Role {
    Leader(LeaderState),
    /// Follows `leader` (-1: none now) in leader epoch `epoch`.
    Follower {
        leader: i32,
        epoch: i32,
    },
}

/// A leader's view of its replicas.
#[derive(Debug, Clone)]
struct LeaderState {
    /// This broker's node id (-1 until an image names it: a partition just
    /// opened leads alone in epoch 0, which is what a standalone broker is).
    node: i32,
    epoch: i32,
    partition_epoch: i32,
    replicas: Vec<i32>,
    /// The committed ISR (the leader included); empty means the leader alone.
    isr: Vec<i32>,
    /// An ISR change sent to the controller and not yet committed.
    pending_isr: Option<Vec<i32>>,
    /// The log end when this leadership began: a follower must hold it to
    /// join the ISR.
    epoch_start_offset: i64,
    followers: progress::Followers,
}

impl LeaderState {
    fn alone() -> Self {
        Self {
            node: -1,
            epoch: 0,
            partition_epoch: 0,
            replicas: Vec::new(),
            isr: Vec::new(),
            pending_isr: None,
            epoch_start_offset: 0,
            followers: Default::default(),
        }
    }

    /// The ISR the high watermark must wait for: the committed one and any
    /// member a pending change adds (Kafka's "maximal ISR"), so a record
    /// counts as committed only once every replica that may be in the ISR
    /// has it.
    fn maximal_isr(&self) -> Vec<i32> {
        let mut isr = self.isr.clone();
        if let Some(pending) = &self.pending_isr {
            for r in pending {
                if !isr.contains(r) {
                    isr.push(*r);
                }
            }
        }
        isr
    }

    /// Proposes `isr` for `partition` (pending until the controller answers).
    fn propose(&mut self, partition: &Partition, isr: Vec<i32>, shrink: bool) -> IsrProposal {
        self.pending_isr = Some(isr.clone());
        IsrProposal {
            topic: partition.topic.clone(),
            index: partition.index,
            leader: self.node,
            leader_epoch: self.epoch,
            partition_epoch: self.partition_epoch,
            isr,
            shrink,
        }
    }

    /// The number of in-sync replicas `min.insync.replicas` counts.
    fn isr_size(&self) -> usize {
        self.isr.len().max(1)
    }
}

/// An ISR change a leader proposes; the controller commits it (or not)
/// with the partition epoch as a compare-and-swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub topic: String,
    pub index: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
    /// It removes replicas (else it adds one).
    pub shrink: bool,
}

/// A leader's replication state, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSummary {
    pub replicas: usize,
    pub isr: usize,
    /// Each follower's distance behind the leader's log end, in offsets
    /// (the whole log end when it has not fetched yet).
    pub follower_lag: Vec<(i32, i64)>,
}

/// Where an `acks=all` produce stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckState {
    /// The in-sync replicas have it.
    Done,
    /// Not yet replicated to every in-sync replica.
    Waiting,
    Failed(ResponseError),
}

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

/// What rebuilding a partition's producer state cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProducerStateLoad {
    /// A snapshot was loaded (else the scan started at the log start).
    pub snapshot_loaded: bool,
    /// Bytes of batch headers read after the snapshot.
    pub bytes_read: u64,
}

/// Rebuilds producer sequence state: loads the newest usable snapshot (see
/// `storage::producer_snapshot` and [`PartitionLog::latest_producer_snapshot`])
/// and replays the headers of the batches after it (headers only, one
/// `pread` each); without one, replays every batch of the log.
fn load_producers(log: &PartitionLog) -> storage::Result<(ProducerStates, ProducerStateLoad)> {
    if log.log_start_offset() == log.log_end_offset() {
        return Ok((ProducerStates::default(), ProducerStateLoad::default()));
    }
    let (mut states, from, snapshot_loaded) = match log.latest_producer_snapshot()? {
        Some((offset, entries)) => (ProducerStates::from_snapshot(entries), offset, true),
        None => (ProducerStates::default(), log.log_start_offset(), false),
    };
    let bytes_read = log.for_each_header_from(from, |h| states.replay(h))?;
    Ok((
        states,
        ProducerStateLoad {
            snapshot_loaded,
            bytes_read,
        },
    ))
}

/// Writes a producer state snapshot when the log rolled during an append
/// (the active segment changed). Failing (a full disk) only costs a longer
/// rebuild at the next start, so it is logged, not returned.
fn snapshot_if_rolled(state: &mut PartitionState, active_before: i64) {
    if state.log.active_base_offset() != active_before {
        let entries = state.producers.to_snapshot();
        if let Err(e) = state.log.write_producer_snapshot(&entries) {
            tracing::warn!(dir = %state.log.dir().display(), error = %e, "cannot write a producer state snapshot");
        }
    }
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
        let (producers, producer_load) = load_producers(&log)?;
        Ok(Self {
            producer_load,
            topic: topic.name.clone(),
            topic_id: topic.id,
            index,
            state: Mutex::new(PartitionState {
                log,
                producers,
                role: Role::Leader(LeaderState::alone()),
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

    /// Appends validated batches (`headers` are theirs, in order) as the
    /// leader, stamping its leader epoch. Batches of idempotent producers
    /// are checked against the producer state first: a retry of a batch
    /// already in the log is reported as [`Appended::Duplicate`] and not
    /// written again. With `min_isr` (acks=all) the append is refused with
    /// `NOT_ENOUGH_REPLICAS` while the ISR is smaller. The high watermark
    /// moves at once when this broker is the only in-sync replica; else
    /// once the followers have fetched the batches.
    ///
    /// An append into the page cache runs inline (the hot path). One that
    /// will roll the segment, grow an index or fsync (flush policy, high
    /// watermark checkpoint) runs through [`crate::offload::blocking`], and so does
    /// waiting for the lock while another request holds it longer than
    /// an append takes.
    pub fn append(
        &self,
        batches: &[u8],
        headers: &[BatchHeader],
        min_isr: Option<usize>,
    ) -> Result<Appended, TopicError> {
        let now = now_ms();
        let records: i64 = headers
            .iter()
            .map(|h| i64::from(h.last_offset_delta) + 1)
            .sum();
        let mut state = self.lock();
        let epoch = match &state.role {
            Role::Leader(l) => {
                if let Some(min) = min_isr {
                    if l.isr_size() < min {
                        return Err(TopicError::new(
                            ResponseError::NotEnoughReplicas,
                            format!(
                                "{} in-sync replicas, min.insync.replicas is {min}",
                                l.isr_size()
                            ),
                        ));
                    }
                }
                l.epoch
            }
            Role::Follower { .. } => {
                return Err(TopicError::new(
                    ResponseError::NotLeaderOrFollower,
                    "this broker follows the partition",
                ))
            }
        };
        let blocking =
            state
                .log
                .append_may_block(batches.len() as u64, headers.len(), records, now);
        let result = if blocking {
            crate::offload::blocking(|| {
                if let Some(hook) = BLOCKING_APPEND_HOOK.get() {
                    hook(&self.topic, self.index);
                }
                Self::append_locked(&mut state, batches, headers, epoch, now)
            })
        } else {
            Self::append_locked(&mut state, batches, headers, epoch, now)
        };
        let hw = result
            .as_ref()
            .ok()
            .and_then(|_| Self::advance_high_watermark(&mut state));
        let end = state.log.log_end_offset();
        // Published under the lock, so the watches never go back.
        self.log_end.send_replace(end);
        if let Some(hw) = hw {
            self.publish_hw(hw);
        }
        drop(state);
        result
    }

    /// The partition's lock: waits on the calling thread only briefly, then
    /// off the runtime's worker (the holder may be rolling or fsyncing).
    fn lock(&self) -> parking_lot::MutexGuard<'_, PartitionState> {
        match self.state.try_lock_for(LOCK_WAIT_ON_WORKER) {
            Some(guard) => guard,
            None => crate::offload::blocking(|| self.state.lock()),
        }
    }

    fn append_locked(
        state: &mut PartitionState,
        batches: &[u8],
        headers: &[BatchHeader],
        leader_epoch: i32,
        now: i64,
    ) -> Result<Appended, TopicError> {
        let mut duplicate = None;
        let mut fresh = 0;
        // Later batches of one request may follow earlier ones of the
        // same producer: check against a scratch copy of just this
        // request's producers as we go (not the whole table: this is
        // the produce hot path).
        let mut scratch: Option<ProducerStates> = None;
        let request_pids = || {
            headers
                .iter()
                .map(|h| h.producer_id)
                .filter(|pid| *pid >= 0)
        };
        for h in headers.iter().filter(|h| h.producer_id >= 0) {
            if h.is_transactional() {
                return Err(TopicError::new(
                    ResponseError::InvalidRecord,
                    "transactional batches are not supported yet",
                ));
            }
            let view = scratch.as_ref().unwrap_or(&state.producers);
            let last_seq = producer_last_sequence(h);
            match view.check(h.producer_id, h.producer_epoch, h.base_sequence, last_seq) {
                SeqCheck::Append => {
                    fresh += 1;
                    let s = scratch.get_or_insert_with(|| state.producers.subset(request_pids()));
                    s.record(
                        h.producer_id,
                        h.producer_epoch,
                        h.base_sequence,
                        last_seq,
                        -1,
                    );
                }
                SeqCheck::Duplicate { first_offset } => {
                    duplicate.get_or_insert(first_offset);
                }
                SeqCheck::Reject(code) => {
                    return Err(TopicError::new(
                        code,
                        format!(
                            "producer {} epoch {} sequences {}..={}",
                            h.producer_id, h.producer_epoch, h.base_sequence, last_seq
                        ),
                    ))
                }
            }
        }
        if let Some(base_offset) = duplicate {
            if fresh > 0 {
                return Err(TopicError::new(
                    ResponseError::OutOfOrderSequenceNumber,
                    "a request mixing retried and new batches of one producer",
                ));
            }
            return Ok(Appended::Duplicate {
                base_offset,
                log_start_offset: state.log.log_start_offset(),
            });
        }
        let active_before = state.log.active_base_offset();
        let result = state.log.append(batches, leader_epoch, now)?;
        let mut offset = result.base_offset;
        for h in headers {
            if h.producer_id >= 0 {
                let last_seq = producer_last_sequence(h);
                state.producers.record(
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    last_seq,
                    offset,
                );
            }
            offset += h.last_offset_delta as i64 + 1;
        }
        snapshot_if_rolled(state, active_before);
        state.log.maybe_flush(now)?;
        Ok(Appended::New(result))
    }

    /// Leader: moves the high watermark to what the ISR holds; returns it
    /// when it moved.
    fn advance_high_watermark(state: &mut PartitionState) -> Option<i64> {
        let Role::Leader(l) = &state.role else {
            return None;
        };
        let end = state.log.log_end_offset();
        let current = state.log.high_watermark();
        let hw =
            progress::high_watermark(l.node, end, &l.maximal_isr(), &l.followers, current).min(end);
        (hw != current).then(|| {
            state.log.set_high_watermark(hw);
            hw
        })
    }

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
        Ok((slice, offsets_of(&state.log)))
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
                proposal = Some(l.propose(self, isr, false));
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
        let offsets = offsets_of(&state.log);
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
    fn publish_hw(&self, hw: i64) {
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
    fn publish_role(&self, role: &Role) {
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
        Some(l.propose(self, isr, true))
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
            let mut pos = 0usize;
            while let Some(rest) = batches.get(pos..).filter(|r| r.len() >= BATCH_HEADER_LEN) {
                let h = BatchHeader::parse(rest)?;
                if h.producer_id >= 0 {
                    state.producers.replay(&h);
                }
                pos += h.total_size();
            }
            snapshot_if_rolled(&mut state, active_before);
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
        let (producers, _) = load_producers(&state.log)?;
        state.producers = producers;
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

    /// `(epoch, end offset)` of the log's history for `epoch`
    /// (OffsetsForLeaderEpoch, KIP-101/KIP-279).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.lock().log.end_offset_for_epoch(epoch)
    }

    pub fn offsets(&self) -> PartitionOffsets {
        offsets_of(&self.lock().log)
    }

    /// The high watermark's watch (consumers' fetches and acks=all wait on it).
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// The log end's watch (followers' fetches wait on it).
    pub fn subscribe_log_end(&self) -> watch::Receiver<i64> {
        self.log_end.subscribe()
    }

    /// Runs `f` with the log locked (for operations other modules own).
    /// Waiting for the lock moves off a runtime worker after a moment;
    /// `f` itself runs where the caller is (callers doing file work call
    /// from the blocking pool).
    /// What rebuilding the producer state cost when the partition opened.
    pub fn producer_state_load(&self) -> ProducerStateLoad {
        self.producer_load
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

    pub fn size_bytes(&self) -> u64 {
        self.lock().log.size_bytes()
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

/// Offsets of a partition at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub log_start: i64,
    pub log_end: i64,
    pub high_watermark: i64,
}

fn offsets_of(log: &PartitionLog) -> PartitionOffsets {
    PartitionOffsets {
        log_start: log.log_start_offset(),
        log_end: log.log_end_offset(),
        high_watermark: log.high_watermark(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn batch(values: usize) -> Vec<u8> {
        crate::storage::test_batches::batch_of(values, 1_000, |i| {
            (None, Some(Bytes::from(format!("v{i}"))))
        })
    }

    fn append(p: &Partition, records: usize, min_isr: Option<usize>) -> Result<i64, TopicError> {
        let b = batch(records);
        let headers = crate::storage::batch::validate_batches(&b, 1 << 20).unwrap();
        match p.append(&b, &headers, min_isr)? {
            Appended::New(r) => Ok(r.last_offset + 1),
            Appended::Duplicate { .. } => panic!("no producer ids here"),
        }
    }

    fn high_watermarks_of(dir: &std::path::Path) -> Arc<HighWatermarks> {
        Arc::new(HighWatermarks::open(dir).unwrap())
    }

    fn open(dir: &std::path::Path) -> Partition {
        let meta = TopicMeta {
            name: "t".into(),
            id: Uuid::new_v4(),
            partitions: 1,
            replication_factor: 3,
            configs: Default::default(),
            held: None,
        };
        Partition::open(
            &meta,
            0,
            dir.join("t-0"),
            storage::LogConfig::default(),
            high_watermarks_of(dir),
        )
        .unwrap()
    }

    /// One batch of `n` records of idempotent producer `pid` in `epoch`,
    /// sequences `seq..seq + n`.
    fn idempotent(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
        crate::storage::test_batches::idempotent_batch_of(pid, epoch, seq, n, 1_000, |_| {
            (None, Some(Bytes::from(vec![b'v'; 30])))
        })
    }

    fn produce(p: &Partition, pid: i64, seq: i32, n: usize) -> Result<Appended, TopicError> {
        let b = idempotent(pid, 0, seq, n);
        let headers = crate::storage::batch::validate_batches(&b, 1 << 20).unwrap();
        p.append(&b, &headers, None)
    }

    /// A partition of a replication factor 1 topic with small segments.
    fn open_small(dir: &std::path::Path) -> Partition {
        let meta = TopicMeta {
            name: "t".into(),
            id: Uuid::nil(),
            partitions: 1,
            replication_factor: 1,
            configs: Default::default(),
            held: None,
        };
        let config = storage::LogConfig {
            segment_bytes: 600,
            ..storage::LogConfig::default()
        };
        Partition::open(&meta, 0, dir.join("t-0"), config, high_watermarks_of(dir)).unwrap()
    }

    /// Producer 1 writes `rounds` batches of 2 records from sequence
    /// `from`, producer 2 one record each; returns the next sequences.
    fn write_rounds(p: &Partition, rounds: i32, from: (i32, i32)) -> (i32, i32) {
        let (mut s1, mut s2) = from;
        for _ in 0..rounds {
            assert!(matches!(produce(p, 1, s1, 2).unwrap(), Appended::New(_)));
            assert!(matches!(produce(p, 2, s2, 1).unwrap(), Appended::New(_)));
            s1 += 2;
            s2 += 1;
        }
        (s1, s2)
    }

    fn producers_of(p: &Partition) -> Vec<crate::storage::producer_snapshot::SnapshotEntry> {
        p.lock().producers.to_snapshot()
    }

    /// The answers the restored state gives: a retry of producer 1's last
    /// batch is a duplicate at its first offset (nothing appended), a gap
    /// is OUT_OF_ORDER_SEQUENCE, the next sequence appends.
    fn assert_deduplicates(p: &Partition, next1: i32, last_batch_offset: i64) {
        let end = p.offsets().log_end;
        match produce(p, 1, next1 - 2, 2).unwrap() {
            Appended::Duplicate { base_offset, .. } => assert_eq!(base_offset, last_batch_offset),
            other => panic!("a retry was appended: {other:?}"),
        }
        assert_eq!(p.offsets().log_end, end, "no second copy");
        assert_eq!(
            produce(p, 1, next1 + 1, 1).unwrap_err().code,
            ResponseError::OutOfOrderSequenceNumber
        );
        assert!(matches!(produce(p, 1, next1, 1).unwrap(), Appended::New(_)));
    }

    fn last_batch_of_producer_1(p: &Partition) -> i64 {
        let entries = producers_of(p);
        entries[0].batches.last().unwrap().first_offset
    }

    #[test]
    fn producer_state_survives_a_clean_restart_without_reading_batches() {
        let dir = tempfile::tempdir().unwrap();
        let p = open_small(dir.path());
        let (s1, _) = write_rounds(&p, 20, (0, 0));
        assert!(p.with_log(|l| l.segment_count()) > 2);
        let before = producers_of(&p);
        let last = last_batch_of_producer_1(&p);
        let end = p.offsets().log_end;
        p.close_log().unwrap();
        drop(p);
        let snapshots = crate::storage::producer_snapshot::list(&dir.path().join("t-0")).unwrap();
        assert_eq!(snapshots.len(), 2, "{snapshots:?}");
        assert_eq!(snapshots.last(), Some(&end));

        let p = open_small(dir.path());
        assert_eq!(
            p.producer_state_load(),
            ProducerStateLoad {
                snapshot_loaded: true,
                bytes_read: 0
            }
        );
        let report = p.with_log(|l| l.open_report());
        assert!(!report.unclean);
        assert_eq!(report.bytes_read, 0);
        assert_eq!(producers_of(&p), before);
        assert_deduplicates(&p, s1, last);
    }

    #[test]
    fn producer_state_survives_an_unclean_restart_reading_only_after_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let pdir = dir.path().join("t-0");
        let p = open_small(dir.path());
        let next = write_rounds(&p, 10, (0, 0));
        p.with_log(|l| l.flush()).unwrap();
        let recovery_point = p.offsets().log_end;
        let (s1, _) = write_rounds(&p, 10, next);
        let before = producers_of(&p);
        let last = last_batch_of_producer_1(&p);
        drop(p); // kill -9: no snapshot at the end, no clean-shutdown marker
        let snapshots = crate::storage::producer_snapshot::list(&pdir).unwrap();
        let usable = *snapshots
            .iter()
            .rev()
            .find(|&&o| o <= recovery_point)
            .expect("a snapshot at or below the recovery point is kept");
        assert!(usable > 0);

        // What a full scan reads: a header per batch.
        let total_batches = 40;
        let header = crate::storage::batch::BATCH_HEADER_LEN as u64;
        let p = open_small(dir.path());
        let load = p.producer_state_load();
        assert!(load.snapshot_loaded);
        let after = p.with_log(|l| {
            let mut n = 0u64;
            l.for_each_header_from(usable, |_| n += 1).unwrap();
            n
        });
        assert_eq!(load.bytes_read, after * header);
        assert!(after > 0 && after < total_batches, "{after}");
        assert!(p.with_log(|l| l.open_report()).unclean);
        assert_eq!(producers_of(&p), before);
        assert_deduplicates(&p, s1, last);
        let state = producers_of(&p);
        drop(p);

        // Every snapshot unusable (bad CRC): a full scan gives the same state.
        for o in crate::storage::producer_snapshot::list(&pdir).unwrap() {
            let path = pdir.join(crate::storage::producer_snapshot::file_name(o));
            let mut b = std::fs::read(&path).unwrap();
            let n = b.len();
            b[n - 1] ^= 1;
            std::fs::write(&path, b).unwrap();
        }
        let p = open_small(dir.path());
        assert!(!p.producer_state_load().snapshot_loaded);
        assert!(p.producer_state_load().bytes_read > after * header);
        assert_eq!(producers_of(&p), state);
    }

    fn image(leader: i32, epoch: i32, isr: &[i32], partition_epoch: i32) -> PartitionImage {
        PartitionImage {
            index: 0,
            replicas: vec![1, 2, 3],
            leader,
            leader_epoch: epoch,
            isr: isr.to_vec(),
            partition_epoch,
            adding_replicas: vec![],
            removing_replicas: vec![],
        }
    }

    /// A replicated leader with two batches of `records` records, all
    /// committed.
    fn open_committed(dir: &std::path::Path, records: usize) -> Partition {
        let p = open(dir);
        p.apply_image(1, &image(1, 0, &[1], 1)).unwrap();
        append(&p, records, None).unwrap();
        append(&p, records, None).unwrap();
        p
    }

    #[test]
    fn a_replica_opens_at_the_data_directorys_checkpoint_before_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = open_committed(dir.path(), 3);
        assert_eq!(p.offsets().high_watermark, 6);
        let key = p.key();
        p.close_log().unwrap();
        drop(p);
        let part_dir = dir.path().join("t-0");
        // an older broker's file, and no entry in the directory's file
        storage::checkpoint::write_checkpoint(&part_dir, high_watermarks::LEGACY_FILE, 2).unwrap();
        let hws = high_watermarks_of(dir.path());
        assert_eq!(hws.checkpointed(key), None);
        let meta = TopicMeta {
            name: "t".into(),
            id: key.topic_id,
            partitions: 1,
            replication_factor: 3,
            configs: Default::default(),
            held: None,
        };
        let reopen = |hws: Arc<HighWatermarks>| {
            Partition::open(&meta, 0, part_dir.clone(), Default::default(), hws).unwrap()
        };
        let p = reopen(hws);
        assert_eq!(p.offsets().high_watermark, 2, "the old file's value");
        p.close_log().unwrap();
        drop(p);
        // the directory's entry wins, and the old file goes
        let hws = high_watermarks_of(dir.path());
        hws.write_one(key, p_entry(4)).unwrap();
        let p = reopen(high_watermarks_of(dir.path()));
        assert_eq!(p.offsets().high_watermark, 4);
        assert!(!part_dir.join(high_watermarks::LEGACY_FILE).exists());
        p.close_log().unwrap();
        drop(p);
        // clamped to the log end, whatever the file says
        high_watermarks_of(dir.path())
            .write_one(key, p_entry(60))
            .unwrap();
        let p = reopen(high_watermarks_of(dir.path()));
        assert_eq!(p.offsets().high_watermark, 6);
    }

    fn p_entry(high_watermark: i64) -> high_watermarks::Entry {
        high_watermarks::Entry {
            topic: "t".into(),
            high_watermark,
        }
    }

    #[test]
    fn a_truncation_rewrites_the_high_watermark_checkpoint_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = open_committed(dir.path(), 3);
        let key = p.key();
        let hws = Arc::clone(&p.high_watermarks);
        let since = hws.generation();
        let gathered = high_watermarks::Entries::from([(key, p_entry(6))]);
        // it becomes a follower whose log diverged after offset 3
        p.apply_image(1, &image(2, 1, &[2], 2)).unwrap();
        p.truncate_to(3).unwrap();
        assert_eq!(p.offsets().high_watermark, 3);
        assert_eq!(high_watermarks_of(dir.path()).checkpointed(key), Some(3));
        // the 6 gathered before the truncation is not written over it
        assert_eq!(
            hws.write_all(since, gathered).unwrap(),
            high_watermarks::WriteOutcome::Superseded
        );
        assert_eq!(high_watermarks_of(dir.path()).checkpointed(key), Some(3));
    }

    #[test]
    fn a_leader_commits_what_every_in_sync_replica_has() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        p.apply_image(1, &image(1, 4, &[1, 2, 3], 7)).unwrap();
        let end = append(&p, 3, Some(2)).unwrap();
        assert_eq!(end, 3);
        assert_eq!(p.offsets().high_watermark, 0, "no follower has it yet");
        assert_eq!(p.ack_state(end, 4, 2), AckState::Waiting);
        // follower 2 has it all, follower 3 nothing yet
        let read = p.read_for_follower(2, 3, -1, 1 << 20).unwrap();
        assert!(read.isr_expansion.is_none());
        assert_eq!(p.offsets().high_watermark, 0);
        p.read_for_follower(3, 1, -1, 1 << 20).unwrap();
        assert_eq!(p.offsets().high_watermark, 1, "the slowest in-sync replica");
        p.read_for_follower(3, 3, -1, 1 << 20).unwrap();
        assert_eq!(p.offsets().high_watermark, 3);
        assert_eq!(p.ack_state(end, 4, 2), AckState::Done);
        // consumers see only what is committed; followers read past it
        let more = append(&p, 2, None).unwrap();
        assert_eq!(more, 5);
        let (consumer, _) = p.read(3, 1 << 20).unwrap();
        assert!(consumer.is_empty(), "nothing above the high watermark");
        let loader = p.read_to_log_end(3, 1 << 20).unwrap();
        assert!(!loader.is_empty(), "a state loader reads to the log end");
        let follower = p.read_for_follower(2, 3, -1, 1 << 20).unwrap();
        assert!(follower.records.is_some_and(|r| !r.is_empty()));
        // a replica id that is not a replica is refused
        assert_eq!(
            p.read_for_follower(9, 0, -1, 1 << 20).err(),
            Some(ResponseError::NotLeaderOrFollower)
        );
    }

    #[test]
    fn acks_all_needs_min_insync_replicas_before_and_after_the_append() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        p.apply_image(1, &image(1, 0, &[1], 3)).unwrap();
        let refused = append(&p, 1, Some(2)).unwrap_err();
        assert_eq!(refused.code, ResponseError::NotEnoughReplicas);
        // acks=1 is not held to the minimum; alone, the leader commits at once
        let end = append(&p, 1, None).unwrap();
        assert_eq!(p.offsets().high_watermark, end);
        assert_eq!(p.ack_state(end, 0, 1), AckState::Done);
        assert_eq!(
            p.ack_state(end, 0, 2),
            AckState::Failed(ResponseError::NotEnoughReplicasAfterAppend)
        );
        // leadership moved: waiters fail, appends are refused
        p.apply_image(1, &image(2, 1, &[2], 4)).unwrap();
        assert_eq!(
            p.ack_state(end, 0, 1),
            AckState::Failed(ResponseError::NotLeaderOrFollower)
        );
        assert_eq!(
            append(&p, 1, None).unwrap_err().code,
            ResponseError::NotLeaderOrFollower
        );
    }

    #[test]
    fn a_caught_up_follower_is_proposed_for_the_isr_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        p.apply_image(1, &image(1, 2, &[1, 2], 5)).unwrap();
        let end = append(&p, 4, None).unwrap();
        p.read_for_follower(2, end, -1, 1 << 20).unwrap();
        assert_eq!(p.offsets().high_watermark, end);
        // 3 is behind: not yet
        let behind = p.read_for_follower(3, 1, -1, 1 << 20).unwrap();
        assert!(behind.isr_expansion.is_none());
        let caught_up = p.read_for_follower(3, end, -1, 1 << 20).unwrap();
        let proposal = caught_up.isr_expansion.expect("proposed");
        assert_eq!(
            (
                proposal.isr.clone(),
                proposal.leader_epoch,
                proposal.partition_epoch
            ),
            (vec![1, 2, 3], 2, 5)
        );
        // pending: not proposed twice
        let again = p.read_for_follower(3, end, -1, 1 << 20).unwrap();
        assert!(again.isr_expansion.is_none());
        p.isr_answered(&proposal, Some((vec![1, 2, 3], 6)));
        // committed: the ISR counts 3 for min.insync.replicas
        assert!(append(&p, 1, Some(3)).is_ok());
    }

    #[test]
    fn a_follower_that_stops_fetching_is_proposed_out_of_the_isr() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path());
        p.apply_image(1, &image(1, 0, &[1, 2, 3], 1)).unwrap();
        let end = append(&p, 1, None).unwrap();
        p.read_for_follower(2, end, -1, 1 << 20).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        p.read_for_follower(2, end, -1, 1 << 20).unwrap();
        let shrink = p.isr_shrink(20).expect("3 lags");
        assert_eq!(shrink.isr, vec![1, 2]);
        assert!(p.isr_shrink(20).is_none(), "one change pending at a time");
        // refused (a newer partition epoch exists): the next image decides
        p.isr_answered(&shrink, None);
        p.apply_image(1, &image(1, 0, &[1, 2], 2)).unwrap();
        assert_eq!(p.offsets().high_watermark, end, "2 alone holds it back");
    }

    #[test]
    fn a_follower_copies_the_leaders_bytes_and_its_high_watermark_and_log_start() {
        let dir = tempfile::tempdir().unwrap();
        let leader = open(&dir.path().join("leader"));
        let follower = open(&dir.path().join("follower"));
        leader.apply_image(1, &image(1, 3, &[1, 2], 1)).unwrap();
        follower.apply_image(2, &image(1, 3, &[1, 2], 1)).unwrap();
        let end = append(&leader, 4, None).unwrap();
        let read = leader.read_for_follower(2, 0, -1, 1 << 20).unwrap();
        let slice = read.records.unwrap();
        let mut bytes = vec![0u8; slice.len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&*slice.file, &mut bytes, slice.position)
            .unwrap();
        follower
            .append_from_leader(&bytes, 3, read.offsets.high_watermark, 0)
            .unwrap();
        assert_eq!(follower.offsets().log_end, end);
        assert_eq!(
            follower.offsets().high_watermark,
            0,
            "the leader's, not yet moved"
        );
        // its next fetch moves the leader's high watermark, then its own
        let next = leader.read_for_follower(2, end, -1, 1 << 20).unwrap();
        assert_eq!(next.offsets.high_watermark, end);
        follower.append_from_leader(&[], 3, end, 2).unwrap();
        let offsets = follower.offsets();
        assert_eq!((offsets.high_watermark, offsets.log_start), (end, 2));
        // the leader's epoch history came with the batches
        assert_eq!(follower.fetch_position().last_epoch, 3);
        // appends of another epoch are refused
        assert_eq!(
            follower
                .append_from_leader(&[], 4, end, 2)
                .unwrap_err()
                .code,
            ResponseError::FencedLeaderEpoch
        );
    }

    #[test]
    fn a_followers_offset_lag_is_what_it_lacks_of_the_leaders_high_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let leader = open(&dir.path().join("leader"));
        let follower = open(&dir.path().join("follower"));
        leader.apply_image(1, &image(1, 3, &[1, 2], 1)).unwrap();
        follower.apply_image(2, &image(1, 3, &[1, 2], 1)).unwrap();
        assert_eq!(follower.offset_lag(), 0, "no word from the leader yet");
        let end = append(&leader, 4, None).unwrap();
        follower.append_from_leader(&[], 3, end, 0).unwrap();
        assert_eq!(follower.offset_lag(), end, "it has none of the 4 records");
        let read = leader.read_for_follower(2, 0, -1, 1 << 20).unwrap();
        let slice = read.records.unwrap();
        let mut bytes = vec![0u8; slice.len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&*slice.file, &mut bytes, slice.position)
            .unwrap();
        follower.append_from_leader(&bytes, 3, end, 0).unwrap();
        assert_eq!(follower.offset_lag(), 0, "caught up");
        assert_eq!(leader.offset_lag(), 0, "a leader lags nobody");
        assert!(follower.size_bytes() > 0);
        assert_eq!(follower.size_bytes(), leader.size_bytes(), "byte for byte");
    }
}
