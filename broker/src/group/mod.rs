//! The group coordinator: consumer groups ([`state`]) and their committed
//! offsets ([`offsets`]), persisted in the compacted internal topic
//! `__consumer_offsets` and loaded from it at start, with each settled
//! generation's metadata ([`metadata`]) so a coordinator that takes a group
//! over keeps its members, and offsets committed inside transactions
//! ([`txn_offsets`]), pending until the transaction's marker.
//!
//! KIP-848 consumer groups ([`consumer`]) live next to the classic ones
//! in the same shards (`consumer_shard`), and a group converts online
//! from one type to the other (`conversion_shard`).
//!
//! This module owns the groups' in-memory state and the waiting
//! JoinGroup/SyncGroup requests; the offsets topic's log is reached only
//! through [`TopicManager`]. The wire format of the group APIs belongs to
//! `handlers::groups`.
//!
//! The state is sharded as Kafka shards it: one shard per
//! `__consumer_offsets` partition, holding the groups that hash to it. In
//! cluster mode a broker coordinates a shard's groups only while it leads
//! that partition (loaded when it becomes leader, unloaded when it stops;
//! `NOT_COORDINATOR` / `COORDINATOR_LOAD_IN_PROGRESS` otherwise). Each shard has two
//! locks: `state` (groups, offsets, waiters), taken briefly by every group
//! request, and `writes`, which orders the shard's appends to its offsets
//! partition with their application to `state`. No append ever runs while
//! `state` is held, so heartbeats and joins never wait on the log.

pub mod consumer;
mod consumer_shard;
mod conversion_shard;
pub mod metadata;
pub mod offsets;
pub mod state;
pub mod txn_offsets;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU8, Ordering};

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::clock::now_ms;
use crate::error::TopicError;
use crate::storage::batch::{BatchHeader, BATCH_HEADER_LEN};
use crate::topics::TopicManager;
use crate::txn::marker::TxnResult;
use offsets::{CommittedOffset, OffsetTable, OFFSETS_TOPIC};
use state::{Effect, Group, GroupSettings, GroupState, JoinRequest, JoinResult, Reply, SyncResult};

/// Coordinator settings (Kafka broker config names in comments).
#[derive(Debug, Clone)]
pub struct CoordinatorSettings {
    pub group: GroupSettings,
    /// `offsets.topic.num.partitions`
    pub offsets_partitions: i32,
    /// `offsets.retention.minutes`, in ms
    pub offsets_retention_ms: i64,
    /// `offset.metadata.max.bytes`
    pub offset_metadata_max_bytes: usize,
    /// `offsets.commit.timeout.ms`: how long a write waits for the ISR.
    pub commit_timeout_ms: i64,
    /// KIP-848 consumer groups (`group.consumer.*`).
    pub consumer: consumer::ConsumerSettings,
}

impl Default for CoordinatorSettings {
    fn default() -> Self {
        Self {
            group: GroupSettings::default(),
            offsets_partitions: 50,
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
            offset_metadata_max_bytes: 4096,
            commit_timeout_ms: 5_000,
            consumer: consumer::ConsumerSettings::default(),
        }
    }
}

#[derive(Default)]
struct Inner {
    groups: HashMap<String, Group>,
    offsets: OffsetTable,
    /// Per group, the (generation, member count) of the metadata record
    /// last stored, so one settled generation is written once.
    stored: HashMap<String, (i32, usize)>,
    join_waiters: HashMap<(String, String), oneshot::Sender<JoinResult>>,
    sync_waiters: HashMap<(String, String), oneshot::Sender<SyncResult>>,
    /// KIP-848 consumer groups (no id is both one of these and a classic
    /// group with members).
    consumer: HashMap<String, consumer::ConsumerGroup>,
}

impl Inner {
    /// The shard's state read from its offsets partition: the offsets, and
    /// every group whose metadata was stored, restored at `now` (members
    /// keep their generation and get a fresh session).
    fn restored(
        mut offsets: OffsetTable,
        now: i64,
        consumer_settings: &consumer::ConsumerSettings,
    ) -> Inner {
        let snapshots = offsets.take_snapshots();
        let consumer = offsets
            .take_consumer()
            .into_groups()
            .into_iter()
            .map(|(id, g)| (id, g.restored(now, consumer_settings)))
            .collect();
        let mut inner = Inner {
            offsets,
            consumer,
            ..Default::default()
        };
        for (id, snapshot) in snapshots {
            inner
                .stored
                .insert(id.clone(), (snapshot.generation, snapshot.members.len()));
            inner
                .groups
                .insert(id.clone(), Group::restore(&id, &snapshot, now));
        }
        inner
    }

    fn deliver(&mut self, group: &str, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Join { member_id, result } => {
                    if result.error == 0 && result.leader == member_id {
                        tracing::info!(
                            group,
                            generation = result.generation_id,
                            members = result.members.len(),
                            protocol = result.protocol_name.as_deref().unwrap_or(""),
                            leader = %member_id,
                            "group rebalanced"
                        );
                    }
                    if let Some(tx) = self.join_waiters.remove(&(group.to_string(), member_id)) {
                        let _ = tx.send(result);
                    }
                }
                Effect::Sync { member_id, result } => {
                    if let Some(tx) = self.sync_waiters.remove(&(group.to_string(), member_id)) {
                        let _ = tx.send(result);
                    }
                }
            }
        }
    }
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<state::Member>,
}

/// One partition's committed offset as OffsetFetch answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedOffset {
    pub partition: i32,
    pub committed: Option<CommittedOffset>,
    /// An open transaction holds an offset for it: an OffsetFetch that
    /// requires stable offsets gets UNSTABLE_OFFSET_COMMIT.
    pub pending_transaction: bool,
}

/// Committed offsets per topic.
pub type FetchedOffsets = Vec<(String, Vec<FetchedOffset>)>;
/// Error codes per topic: `(topic, [(partition, error code)])`.
pub type PartitionCodes = Vec<(String, Vec<(i32, i16)>)>;

/// A commit ready to write: one error code per item, the records, and
/// the accepted items as (index in `codes`, key, offset).
#[derive(Default)]
struct PreparedCommit {
    codes: Vec<i16>,
    records: Vec<(Bytes, Option<Bytes>)>,
    accepted: Vec<(usize, offsets::OffsetKey, CommittedOffset)>,
}

/// One committed offset to write, and the error for it if any.
#[derive(Debug, Clone)]
pub struct CommitItem {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// Whether this broker coordinates a shard's groups (cluster mode: it
/// does while it leads the shard's `__consumer_offsets` partition).
const OWNED: u8 = 0;
const LOADING: u8 = 1;
const NOT_OWNED: u8 = 2;

/// The groups of one `__consumer_offsets` partition.
#[derive(Default)]
struct Shard {
    /// [`OWNED`] (standalone: always), [`LOADING`] or [`NOT_OWNED`].
    owner: AtomicU8,
    state: Mutex<Inner>,
    /// Held across "append to the log, then apply to `state`", so the
    /// in-memory offsets follow the log's order; never taken while `state`
    /// is held.
    writes: Mutex<()>,
}

pub struct GroupCoordinator {
    settings: CoordinatorSettings,
    shards: Vec<Shard>,
}

impl std::fmt::Debug for GroupCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCoordinator")
            .field("settings", &self.settings)
            .finish()
    }
}

/// Applies the whole batches at the start of `bytes` (read from an offsets
/// partition at `offset`) to `table`, skipping batches whose records do
/// not decode (logged). A transactional batch's offsets are pending until
/// a COMMIT or ABORT marker of its producer follows
/// ([`txn_offsets`]); other control records are skipped. Returns the records applied and
/// the offset after the last whole batch (`offset` if none was whole). The
/// coordinator's load and the `group_codecs` fuzz target share it.
pub fn apply_offsets_batches(
    bytes: &[u8],
    offset: i64,
    table: &mut OffsetTable,
    partition: i32,
) -> Result<(usize, i64), TopicError> {
    let mut records = 0usize;
    let mut pos = 0usize;
    let mut next = offset;
    while pos + BATCH_HEADER_LEN <= bytes.len() {
        let header = BatchHeader::parse(&bytes[pos..])?;
        let end = pos + header.total_size();
        if end > bytes.len() {
            break;
        }
        match crate::storage::batch::decode_records(&bytes[pos..end]) {
            Ok(records_of_batch) => {
                for r in records_of_batch {
                    if r.control {
                        let result = r
                            .key
                            .as_deref()
                            .and_then(|k| crate::txn::marker::decode_control_key(k).ok())
                            .and_then(|kind| kind.txn_result());
                        if let Some(result) = result {
                            table.complete_txn(r.producer_id, result == TxnResult::Commit);
                        }
                        continue;
                    }
                    records += 1;
                    if r.transactional && r.producer_id >= 0 {
                        table.apply_txn_record(r.producer_id, r.key, r.value);
                    } else {
                        table.apply_record(r.key, r.value);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(partition, error = %e, "skipping undecodable offsets batch")
            }
        }
        next = header.last_offset().saturating_add(1);
        pos = end;
    }
    Ok((records, next))
}

/// Topics named in a consumer-protocol subscription (`ConsumerProtocolSubscription`).
/// Public for the fuzz target `group_codecs` (it parses client-supplied bytes).
pub fn subscribed_topics(metadata: &[u8]) -> Vec<String> {
    let mut buf = Bytes::copy_from_slice(metadata);
    let mut out = Vec::new();
    use bytes::Buf;
    if buf.remaining() < 6 {
        return out;
    }
    let _version = buf.get_i16();
    let count = buf.get_i32();
    for _ in 0..count.max(0) {
        if buf.remaining() < 2 {
            break;
        }
        let len = buf.get_i16();
        if len < 0 || buf.remaining() < len as usize {
            break;
        }
        out.push(String::from_utf8_lossy(&buf.split_to(len as usize)).to_string());
    }
    out
}

/// Every committed offset in one offsets partition's log, to its end (a
/// coordinator taking a shard over serves what the old leader acknowledged
/// even before this broker's high watermark covers it; see
/// [`Partition::read_to_log_end`](crate::topics::Partition::read_to_log_end)):
/// the table and the number of records applied.
fn read_offsets(p: &crate::topics::Partition) -> Result<(OffsetTable, usize), TopicError> {
    let mut table = OffsetTable::default();
    let mut records = 0usize;
    let mut offset = p.offsets().log_start;
    loop {
        let slice = p.read_to_log_end(offset, 1024 * 1024)?;
        if slice.is_empty() {
            break;
        }
        let mut bytes = vec![0u8; slice.len as usize];
        slice
            .file
            .read_exact_at(&mut bytes, slice.position)
            .map_err(TopicError::from_io)?;
        let (applied, next) = apply_offsets_batches(&bytes, offset, &mut table, p.index)?;
        records += applied;
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok((table, records))
}

impl GroupCoordinator {
    pub fn new(settings: CoordinatorSettings) -> Self {
        let shards = (0..settings.offsets_partitions.max(1))
            .map(|_| Shard::default())
            .collect();
        Self { settings, shards }
    }

    /// The shard of `group`: the one of its `__consumer_offsets` partition.
    fn shard(&self, group: &str) -> &Shard {
        let index = offsets::partition_for(group, self.shards.len() as i32);
        let index = usize::try_from(index).unwrap_or(0);
        &self.shards[index.min(self.shards.len() - 1)]
    }

    pub fn settings(&self) -> &CoordinatorSettings {
        &self.settings
    }

    /// Cluster mode: this broker coordinates no group until it leads the
    /// group's offsets partition ([`follow_leadership`](Self::follow_leadership)).
    pub fn start_unowned(&self) {
        for shard in &self.shards {
            shard.owner.store(NOT_OWNED, Ordering::SeqCst);
        }
    }

    /// Whether this broker coordinates `group` now: `NOT_COORDINATOR` when
    /// another broker does, `COORDINATOR_LOAD_IN_PROGRESS` while its
    /// offsets are being loaded (both make clients look again).
    pub fn coordinates(&self, group: &str) -> Result<(), ResponseError> {
        match self.shard(group).owner.load(Ordering::SeqCst) {
            OWNED => Ok(()),
            LOADING => Err(ResponseError::CoordinatorLoadInProgress),
            _ => Err(ResponseError::NotCoordinator),
        }
    }

    /// Cluster mode: loads the shards of the offsets partitions this broker
    /// now leads (`led`; `partitions` is the offsets topic's partition
    /// count) and unloads the others, so each group has one coordinator.
    /// A count that differs from `offsets.topic.num.partitions` here (a
    /// misconfigured broker) coordinates nothing, loudly. Blocking: reads
    /// the partitions' logs.
    pub fn follow_leadership(&self, topics: &TopicManager, partitions: i32, led: &BTreeSet<i32>) {
        if usize::try_from(partitions).ok() != Some(self.shards.len()) {
            tracing::error!(
                topic_partitions = partitions,
                configured = self.shards.len(),
                "__consumer_offsets has a partition count other than offsets.topic.num.partitions on this broker; coordinating no groups"
            );
            self.start_unowned();
            return;
        }
        for (index, shard) in self.shards.iter().enumerate() {
            let leads = i32::try_from(index).is_ok_and(|i| led.contains(&i));
            let owner = shard.owner.load(Ordering::SeqCst);
            if leads && owner == NOT_OWNED {
                shard.owner.store(LOADING, Ordering::SeqCst);
                let _writes = shard.writes.lock();
                let loaded = topics
                    .partition(OFFSETS_TOPIC, index as i32)
                    .ok_or_else(|| {
                        TopicError::new(ResponseError::CoordinatorNotAvailable, "not held here")
                    })
                    .and_then(|p| read_offsets(&p));
                match loaded {
                    Ok((table, records)) => {
                        *shard.state.lock() =
                            Inner::restored(table, now_ms(), &self.settings.consumer);
                        shard.owner.store(OWNED, Ordering::SeqCst);
                        tracing::info!(
                            partition = index,
                            records,
                            "coordinating the groups of an offsets partition"
                        );
                    }
                    Err(e) => {
                        shard.owner.store(NOT_OWNED, Ordering::SeqCst);
                        tracing::error!(partition = index, error = %e.message, "cannot load an offsets partition; retried at the next metadata change");
                    }
                }
            } else if !leads && owner != NOT_OWNED {
                shard.owner.store(NOT_OWNED, Ordering::SeqCst);
                let _writes = shard.writes.lock();
                // Dropping the waiters answers their joins and syncs with an
                // error; members find the new coordinator.
                *shard.state.lock() = Inner::default();
                tracing::info!(
                    partition = index,
                    "no longer coordinating the groups of an offsets partition"
                );
            }
        }
    }

    /// Creates `__consumer_offsets` if needed and loads every committed
    /// offset from it.
    pub fn load(&self, topics: &TopicManager) -> Result<usize, TopicError> {
        let topic = match topics.get(OFFSETS_TOPIC) {
            Some(t) => t,
            None => topics.create(
                OFFSETS_TOPIC,
                self.settings.offsets_partitions,
                1,
                [
                    ("cleanup.policy".to_string(), "compact".to_string()),
                    ("segment.bytes".to_string(), (100 * 1024 * 1024).to_string()),
                ]
                .into(),
            )?,
        };
        let mut table = OffsetTable::default();
        let mut records = 0usize;
        for p in &topic.partitions {
            let (part, applied) = read_offsets(p)?;
            records += applied;
            table.merge(part);
        }
        let mut per_shard: Vec<OffsetTable> = (0..self.shards.len())
            .map(|_| OffsetTable::default())
            .collect();
        for group in table.groups() {
            let index = offsets::partition_for(group, self.shards.len() as i32);
            let target = &mut per_shard[usize::try_from(index).unwrap_or(0)];
            for ((topic, partition), c) in table.group(group) {
                target.put(group, topic, *partition, c.clone());
            }
        }
        for (group, snapshot) in table.take_snapshots() {
            let index = offsets::partition_for(&group, self.shards.len() as i32);
            per_shard[usize::try_from(index).unwrap_or(0)].put_snapshot(&group, snapshot);
        }
        for (producer_id, key, c) in table.pending().entries() {
            let index = offsets::partition_for(&key.0, self.shards.len() as i32);
            per_shard[usize::try_from(index).unwrap_or(0)].put_pending(
                producer_id,
                key.clone(),
                c.clone(),
            );
        }
        let mut replay = table.take_consumer();
        let ids: Vec<String> = replay.group_ids().cloned().collect();
        for group in ids {
            let index = offsets::partition_for(&group, self.shards.len() as i32);
            replay.move_group(
                &group,
                per_shard[usize::try_from(index).unwrap_or(0)].consumer_mut(),
            );
        }
        let now = now_ms();
        for (shard, offsets) in self.shards.iter().zip(per_shard) {
            *shard.state.lock() = Inner::restored(offsets, now, &self.settings.consumer);
        }
        Ok(records)
    }

    fn persist(
        &self,
        topics: &TopicManager,
        group: &str,
        records: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<(), TopicError> {
        self.persist_for(topics, group, records, None)
    }

    /// Writes `records` to `group`'s offsets partition and waits for its
    /// in-sync replicas; with `producer` `(id, epoch)`, as that producer's
    /// transactional batch (no sequence, as Kafka's coordinator writes
    /// them; an epoch older than the partition has seen is refused).
    fn persist_for(
        &self,
        topics: &TopicManager,
        group: &str,
        records: Vec<(Bytes, Option<Bytes>)>,
        producer: Option<(i64, i16)>,
    ) -> Result<(), TopicError> {
        if records.is_empty() {
            return Ok(());
        }
        let partition_index = offsets::partition_for(group, self.settings.offsets_partitions);
        let partition = topics
            .partition(OFFSETS_TOPIC, partition_index)
            .ok_or_else(|| {
                TopicError::new(
                    ResponseError::CoordinatorNotAvailable,
                    "the offsets topic is not loaded",
                )
            })?;
        let now = now_ms();
        let recs: Vec<Record> = records
            .into_iter()
            .enumerate()
            .map(|(i, (key, value))| Record {
                transactional: producer.is_some(),
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: producer.map_or(-1, |p| p.0),
                producer_epoch: producer.map_or(-1, |p| p.1),
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: -1,
                timestamp: now,
                key: Some(key),
                value,
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &recs,
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .map_err(|e| TopicError::new(ResponseError::UnknownServerError, e.to_string()))?;
        let headers = crate::storage::batch::validate_batches(&buf, usize::MAX)?;
        let epoch = partition.leader_epoch().ok_or_else(|| {
            TopicError::new(
                ResponseError::NotCoordinator,
                "this broker no longer leads the group's offsets partition",
            )
        })?;
        let appended = match producer {
            Some(_) => partition.append_as_coordinator(&buf, &headers)?,
            None => partition.append(&buf, &headers, None)?,
        };
        let required = match appended {
            crate::partition::Appended::New(r) => r.last_offset + 1,
            crate::partition::Appended::Duplicate { base_offset, .. } => base_offset + 1,
        };
        // As Kafka's coordinator (acks=all): a write counts once every
        // in-sync replica of the offsets partition has it, so a new
        // coordinator after a failover serves it.
        let timeout =
            std::time::Duration::from_millis(self.settings.commit_timeout_ms.max(1) as u64);
        match crate::offload::blocking(|| partition.wait_replicated(required, epoch, timeout)) {
            crate::partition::AckState::Done => Ok(()),
            crate::partition::AckState::Failed(code) => Err(TopicError::new(
                code,
                "the offsets partition's in-sync replicas did not confirm the write",
            )),
            crate::partition::AckState::Waiting => unreachable!("waited until done or failed"),
        }
    }

    fn validate_group_id(group: &str) -> Result<(), ResponseError> {
        if group.is_empty() {
            Err(ResponseError::InvalidGroupId)
        } else {
            Ok(())
        }
    }

    /// JoinGroup: answers at once or when the rebalance completes.
    pub async fn join(&self, group_id: &str, req: JoinRequest) -> JoinResult {
        if let Err(e) = Self::validate_group_id(group_id) {
            return JoinResult::error(e, &req.member_id);
        }
        let rx = {
            let mut inner = self.shard(group_id).state.lock();
            if inner.consumer.contains_key(group_id) {
                // taken by `classic_join_consumer`; a consumer group that
                // appeared since: the member retries
                return JoinResult::error(ResponseError::RebalanceInProgress, &req.member_id);
            }
            let group = inner
                .groups
                .entry(group_id.to_string())
                .or_insert_with(|| Group::new(group_id));
            if group.state == GroupState::Dead {
                *group = Group::new(group_id);
            }
            let instance = req.group_instance_id.clone();
            let (reply, effects) = group.join(req, now_ms(), &self.settings.group);
            match reply {
                Reply::Now(r) => {
                    if r.error == 0 {
                        tracing::info!(
                            group = group_id,
                            member = %r.member_id,
                            instance = instance.as_deref().unwrap_or(""),
                            generation = r.generation_id,
                            skip_assignment = r.skip_assignment,
                            "member rejoined a stable group without a rebalance"
                        );
                    }
                    inner.deliver(group_id, effects);
                    return r;
                }
                Reply::Later(member_id) => {
                    let (tx, rx) = oneshot::channel();
                    inner
                        .join_waiters
                        .insert((group_id.to_string(), member_id), tx);
                    inner.deliver(group_id, effects);
                    rx
                }
            }
        };
        rx.await
            .unwrap_or_else(|_| JoinResult::error(ResponseError::UnknownMemberId, ""))
    }

    /// Stores `group_id`'s metadata when it has settled on a generation (or
    /// emptied) since it was last stored, so a coordinator that takes the
    /// group over keeps its members (see [`metadata`]). Called after a
    /// SyncGroup or LeaveGroup; blocking (waits for the offsets partition's
    /// ISR). A failed write is logged: the group works on, and a take-over
    /// before the next store makes its members rejoin.
    pub fn store_group(&self, topics: &TopicManager, group_id: &str) {
        let shard = self.shard(group_id);
        let _writes = shard.writes.lock();
        let (snapshot, mark) = {
            let inner = shard.state.lock();
            let Some(snapshot) = inner
                .groups
                .get(group_id)
                .and_then(|g| g.snapshot(now_ms()))
            else {
                return;
            };
            let mark = (snapshot.generation, snapshot.members.len());
            if inner.stored.get(group_id) == Some(&mark) {
                return;
            }
            (snapshot, mark)
        };
        let record = (
            metadata::encode_key(group_id),
            Some(metadata::encode_value(&snapshot)),
        );
        match self.persist(topics, group_id, vec![record]) {
            Ok(()) => {
                shard.state.lock().stored.insert(group_id.to_string(), mark);
            }
            Err(e) => {
                tracing::warn!(group = group_id, error = %e.message, "could not store the group's metadata")
            }
        }
    }

    /// SyncGroup: the leader's call hands out assignments; followers wait for it.
    #[allow(clippy::too_many_arguments)]
    pub async fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResult {
        let rx = {
            let mut inner = self.shard(group_id).state.lock();
            let Some(group) = inner.groups.get_mut(group_id) else {
                return SyncResult::error(ResponseError::UnknownMemberId);
            };
            let (reply, effects) = group.sync(
                member_id,
                instance,
                generation_id,
                protocol_type,
                protocol_name,
                assignments,
                now_ms(),
            );
            match reply {
                Reply::Now(r) => {
                    inner.deliver(group_id, effects);
                    return r;
                }
                Reply::Later(waiting) => {
                    let (tx, rx) = oneshot::channel();
                    inner
                        .sync_waiters
                        .insert((group_id.to_string(), waiting), tx);
                    inner.deliver(group_id, effects);
                    rx
                }
            }
        };
        rx.await
            .unwrap_or_else(|_| SyncResult::error(ResponseError::RebalanceInProgress))
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
    ) -> i16 {
        let mut inner = self.shard(group_id).state.lock();
        if let Some(g) = inner.consumer.get_mut(group_id) {
            // a classic member of a consumer group
            return match g.classic_heartbeat(member_id, instance, generation_id, now_ms()) {
                Ok(()) => 0,
                Err(e) => e.code(),
            };
        }
        match inner.groups.get_mut(group_id) {
            Some(g) => g.heartbeat(member_id, instance, generation_id, now_ms()),
            None => ResponseError::UnknownMemberId.code(),
        }
    }

    pub fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<i16>, ResponseError> {
        let mut inner = self.shard(group_id).state.lock();
        let Some(group) = inner.groups.get_mut(group_id) else {
            return Err(ResponseError::UnknownMemberId);
        };
        let (codes, effects) = group.leave(members, now_ms(), &self.settings.group);
        inner.deliver(group_id, effects);
        Ok(codes)
    }

    /// Expires sessions, completes due rebalances; call periodically.
    pub fn tick(&self) {
        let now = now_ms();
        for shard in &self.shards {
            let mut inner = shard.state.lock();
            let ids: Vec<String> = inner.groups.keys().cloned().collect();
            for id in ids {
                let effects = match inner.groups.get_mut(&id) {
                    Some(g) => g.tick(now, &self.settings.group),
                    None => continue,
                };
                inner.deliver(&id, effects);
            }
            // Forget empty groups without offsets.
            let Inner {
                groups, offsets, ..
            } = &mut *inner;
            groups.retain(|id, g| {
                !(g.is_empty()
                    && g.state != GroupState::PreparingRebalance
                    && !offsets.has_group(id))
            });
        }
    }

    /// Removes offsets of groups without members that nobody committed for
    /// `offsets.retention.minutes`; returns how many were removed.
    pub fn expire_offsets(&self, topics: &TopicManager) -> usize {
        let cutoff = now_ms() - self.settings.offsets_retention_ms;
        let mut removed = 0;
        for shard in &self.shards {
            let _writes = shard.writes.lock();
            let expired: Vec<(String, Vec<(String, i32)>)> = {
                let inner = shard.state.lock();
                inner
                    .offsets
                    .groups()
                    .filter(|g| {
                        inner
                            .groups
                            .get(*g)
                            .is_none_or(|grp| grp.members.is_empty())
                            && inner
                                .consumer
                                .get(*g)
                                .is_none_or(|grp| grp.members.is_empty())
                    })
                    .map(|g| (g.clone(), inner.offsets.expired(g, cutoff)))
                    .filter(|(_, expired)| !expired.is_empty())
                    .collect()
            };
            for (group, expired) in expired {
                let tombstones = expired
                    .iter()
                    .map(|(t, p)| (offsets::encode_key(&group, t, *p), None))
                    .collect();
                if let Err(e) = self.persist(topics, &group, tombstones) {
                    tracing::warn!(group, error = %e.message, "could not write offset tombstones");
                    continue;
                }
                let mut inner = shard.state.lock();
                for (t, p) in expired {
                    inner.offsets.remove(&group, &t, p);
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Whether `member_id` (of `instance`, at `generation_id`) may commit
    /// offsets for `group_id` now. A commit without a generation and a
    /// member id is an admin's (or a simple consumer's): allowed only for
    /// a group without members, except inside a transaction, where Kafka
    /// takes it from producers that predate KIP-447's group metadata.
    /// A transactional commit is not held back by a rebalance in progress.
    fn check_committer(
        inner: &Inner,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
        transactional: bool,
    ) -> Result<(), ResponseError> {
        let anonymous = generation_id < 0 && member_id.is_empty() && instance.is_none();
        if let Some(g) = inner.consumer.get(group_id) {
            // Kafka's rule for consumer groups: an anonymous commit only
            // to an empty group (or inside a transaction), else the
            // member's current epoch
            if anonymous && (g.members.is_empty() || transactional) {
                return Ok(());
            }
            return g.check_commit(member_id, generation_id);
        }
        match inner.groups.get(group_id) {
            Some(g) if !g.members.is_empty() => {
                if transactional && anonymous {
                    return Ok(());
                }
                g.check_member(member_id, instance, generation_id)?;
                if !transactional && g.state == GroupState::CompletingRebalance {
                    return Err(ResponseError::RebalanceInProgress);
                }
                Ok(())
            }
            _ if generation_id >= 0 || !member_id.is_empty() => Err(if member_id.is_empty() {
                ResponseError::IllegalGeneration
            } else {
                ResponseError::UnknownMemberId
            }),
            _ => Ok(()),
        }
    }

    /// The records of a commit of `items` at `now`: one error code per
    /// item, the records to write, and the accepted items (their index in
    /// the codes, the key, the offset).
    fn commit_records(
        &self,
        partition_exists: &dyn Fn(&str, i32) -> bool,
        group_id: &str,
        items: &[CommitItem],
        now: i64,
    ) -> PreparedCommit {
        let mut prepared = PreparedCommit::default();
        for item in items {
            let metadata = item.metadata.clone().unwrap_or_default();
            let code = if !partition_exists(&item.topic, item.partition) {
                ResponseError::UnknownTopicOrPartition.code()
            } else if metadata.len() > self.settings.offset_metadata_max_bytes {
                ResponseError::OffsetMetadataTooLarge.code()
            } else {
                let c = CommittedOffset {
                    offset: item.offset,
                    leader_epoch: item.leader_epoch,
                    metadata,
                    commit_timestamp: now,
                };
                prepared.records.push((
                    offsets::encode_key(group_id, &item.topic, item.partition),
                    Some(offsets::encode_value(&c)),
                ));
                let key = (group_id.to_string(), item.topic.clone(), item.partition);
                prepared.accepted.push((prepared.codes.len(), key, c));
                0
            };
            prepared.codes.push(code);
        }
        prepared
    }

    /// The code every accepted item of a commit gets when its write
    /// failed, as Kafka maps a failed coordinator write (both retriable).
    fn write_failure(e: &TopicError) -> ResponseError {
        match e.code {
            ResponseError::NotLeaderOrFollower | ResponseError::NotCoordinator => {
                ResponseError::NotCoordinator
            }
            _ => ResponseError::CoordinatorNotAvailable,
        }
    }

    /// OffsetCommit: checks membership, then persists and applies. Returns
    /// one error code per item, or a group-level error for all of them.
    /// `partition_exists` says whether the cluster has a partition (this
    /// broker may hold none of a topic's replicas).
    #[allow(clippy::too_many_arguments)]
    pub fn commit(
        &self,
        topics: &TopicManager,
        partition_exists: &dyn Fn(&str, i32) -> bool,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
        items: &[CommitItem],
    ) -> Vec<i16> {
        let committer = (member_id, instance, generation_id);
        self.commit_for(topics, partition_exists, group_id, committer, None, items)
    }

    /// TxnOffsetCommit: `producer`'s (id, epoch) transaction commits
    /// `items` for `group_id`. Checked as an OffsetCommit (see
    /// [`check_committer`](Self::check_committer)), written to the group's
    /// offsets partition as the producer's transactional batch, and held
    /// pending until the transaction's marker reaches that partition
    /// ([`complete_transaction`](Self::complete_transaction)). A producer
    /// epoch older than the partition has seen gets PRODUCER_FENCED.
    #[allow(clippy::too_many_arguments)]
    pub fn commit_transactional(
        &self,
        topics: &TopicManager,
        partition_exists: &dyn Fn(&str, i32) -> bool,
        group_id: &str,
        producer: (i64, i16),
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
        items: &[CommitItem],
    ) -> Vec<i16> {
        let committer = (member_id, instance, generation_id);
        self.commit_for(
            topics,
            partition_exists,
            group_id,
            committer,
            Some(producer),
            items,
        )
    }

    /// A commit by `committer` (member id, instance id, generation), plain
    /// or, with `producer`, inside that producer's transaction.
    fn commit_for(
        &self,
        topics: &TopicManager,
        partition_exists: &dyn Fn(&str, i32) -> bool,
        group_id: &str,
        (member_id, instance, generation_id): (&str, Option<&str>, i32),
        producer: Option<(i64, i16)>,
        items: &[CommitItem],
    ) -> Vec<i16> {
        let all = |e: ResponseError| vec![e.code(); items.len()];
        if let Err(e) = Self::validate_group_id(group_id) {
            return all(e);
        }
        let shard = self.shard(group_id);
        let _writes = shard.writes.lock();
        let checked = Self::check_committer(
            &shard.state.lock(),
            group_id,
            member_id,
            instance,
            generation_id,
            producer.is_some(),
        );
        if let Err(e) = checked {
            return all(e);
        }
        let PreparedCommit {
            mut codes,
            records,
            accepted,
        } = self.commit_records(partition_exists, group_id, items, now_ms());
        if let Err(e) = self.persist_for(topics, group_id, records, producer) {
            let code = match e.code {
                ResponseError::InvalidProducerEpoch => ResponseError::ProducerFenced,
                _ => Self::write_failure(&e),
            };
            tracing::warn!(group = group_id, producer_id = producer.map_or(-1, |p| p.0), error = %e.message, answer = ?code, "could not persist committed offsets");
            for (i, _, _) in &accepted {
                codes[*i] = code.code();
            }
            return codes;
        }
        let mut inner = shard.state.lock();
        for (_, key, c) in accepted {
            match producer {
                Some((producer_id, _)) => inner.offsets.put_pending(producer_id, key, c),
                None => inner.offsets.commit(group_id, &key.1, key.2, c),
            }
        }
        codes
    }

    /// A COMMIT or ABORT marker of `producer_id` was written to offsets
    /// partition `partition` and replicated: its pending offsets there
    /// become committed ones, or vanish. Returns how many were pending
    /// (none on a broker that does not coordinate that partition's groups:
    /// its next coordinator reads the marker from the log).
    pub fn complete_transaction(
        &self,
        partition: i32,
        producer_id: i64,
        result: TxnResult,
    ) -> usize {
        let Some(shard) = usize::try_from(partition)
            .ok()
            .and_then(|i| self.shards.get(i))
        else {
            return 0;
        };
        let _writes = shard.writes.lock();
        if shard.owner.load(Ordering::SeqCst) != OWNED {
            return 0;
        }
        let n = shard
            .state
            .lock()
            .offsets
            .complete_txn(producer_id, result == TxnResult::Commit);
        if n > 0 {
            tracing::debug!(
                partition,
                producer_id,
                offsets = n,
                ?result,
                "transactional offsets completed"
            );
        }
        n
    }

    /// OffsetFetch: the committed offset of each asked partition (or of all
    /// partitions the group committed, for `None`), and whether an open
    /// transaction holds one for it.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        wanted: Option<Vec<(String, Vec<i32>)>>,
    ) -> FetchedOffsets {
        let inner = self.shard(group_id).state.lock();
        let fetched =
            |topic: &str, partition: i32, committed: Option<CommittedOffset>| FetchedOffset {
                partition,
                committed,
                pending_transaction: inner
                    .offsets
                    .pending()
                    .is_pending(group_id, topic, partition),
            };
        match wanted {
            Some(list) => list
                .into_iter()
                .map(|(topic, parts)| {
                    let found = parts
                        .into_iter()
                        .map(|p| {
                            fetched(&topic, p, inner.offsets.get(group_id, &topic, p).cloned())
                        })
                        .collect();
                    (topic, found)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<FetchedOffset>> = BTreeMap::new();
                for ((topic, p), c) in inner.offsets.group(group_id) {
                    by_topic.entry(topic.clone()).or_default().push(fetched(
                        topic,
                        *p,
                        Some(c.clone()),
                    ));
                }
                by_topic.into_iter().collect()
            }
        }
    }

    /// OffsetDelete: removes a group's offsets for partitions of topics
    /// its members are not subscribed to.
    pub fn delete_offsets(
        &self,
        topics: &TopicManager,
        group_id: &str,
        wanted: &[(String, Vec<i32>)],
    ) -> Result<PartitionCodes, ResponseError> {
        let shard = self.shard(group_id);
        let _writes = shard.writes.lock();
        let inner = shard.state.lock();
        let group = inner.groups.get(group_id);
        let consumer_group = inner.consumer.get(group_id);
        if group.is_none() && consumer_group.is_none() && !inner.offsets.has_group(group_id) {
            return Err(ResponseError::GroupIdNotFound);
        }
        let mut subscribed: Vec<String> = group
            .filter(|g| g.protocol_type.as_deref() == Some("consumer"))
            .map(|g| {
                let protocol = g.protocol_name.clone().unwrap_or_default();
                g.members
                    .values()
                    .flat_map(|m| {
                        m.protocols
                            .iter()
                            .filter(|(n, _)| *n == protocol)
                            .flat_map(|(_, meta)| subscribed_topics(meta))
                            .collect::<Vec<_>>()
                    })
                    .collect()
            })
            .unwrap_or_default();
        if let Some(g) = consumer_group {
            // the topics its members subscribe to, by name or regex
            subscribed.extend(g.subscribed.keys().cloned());
            subscribed.extend(
                g.members
                    .values()
                    .flat_map(|m| m.subscribed_names.iter().cloned()),
            );
        }
        let mut result = Vec::new();
        let mut tombstones = Vec::new();
        let mut to_remove = Vec::new();
        for (topic, parts) in wanted {
            let codes = parts
                .iter()
                .map(|p| {
                    if subscribed.contains(topic) {
                        (*p, ResponseError::GroupSubscribedToTopic.code())
                    } else if topics
                        .get(topic)
                        .is_none_or(|t| *p < 0 || *p >= t.meta.partitions)
                    {
                        (*p, ResponseError::UnknownTopicOrPartition.code())
                    } else {
                        if inner.offsets.get(group_id, topic, *p).is_some() {
                            tombstones.push((offsets::encode_key(group_id, topic, *p), None));
                            to_remove.push((topic.clone(), *p));
                        }
                        (*p, 0)
                    }
                })
                .collect();
            result.push((topic.clone(), codes));
        }
        drop(inner);
        self.persist(topics, group_id, tombstones)
            .map_err(|e| e.code)?;
        let mut inner = shard.state.lock();
        for (t, p) in to_remove {
            inner.offsets.remove(group_id, &t, p);
        }
        Ok(result)
    }

    /// DeleteGroups: an empty group and its offsets are removed.
    pub fn delete_group(&self, topics: &TopicManager, group_id: &str) -> Result<(), ResponseError> {
        let shard = self.shard(group_id);
        let _writes = shard.writes.lock();
        let mut inner = shard.state.lock();
        let consumer_group = inner.consumer.get(group_id).cloned();
        if consumer_group
            .as_ref()
            .is_some_and(|g| !g.members.is_empty())
        {
            return Err(ResponseError::NonEmptyGroup);
        }
        let exists = consumer_group.is_some()
            || inner
                .groups
                .get(group_id)
                .is_some_and(|g| g.state != GroupState::Dead);
        if !exists && !inner.offsets.has_group(group_id) {
            return Err(ResponseError::GroupIdNotFound);
        }
        if let Some(g) = inner.groups.get_mut(group_id) {
            g.delete()?;
        }
        let keys: Vec<(String, i32)> = inner
            .offsets
            .group(group_id)
            .map(|(k, _)| k.clone())
            .collect();
        let tombstones = keys
            .iter()
            .map(|(t, p)| (offsets::encode_key(group_id, t, *p), None))
            .chain(
                inner
                    .stored
                    .contains_key(group_id)
                    .then(|| (metadata::encode_key(group_id), None)),
            )
            .chain(consumer::records::diff(
                group_id,
                consumer_group.as_ref(),
                None,
            ))
            .collect();
        drop(inner);
        self.persist(topics, group_id, tombstones)
            .map_err(|e| e.code)?;
        let mut inner = shard.state.lock();
        for (t, p) in keys {
            inner.offsets.remove(group_id, &t, p);
        }
        inner.groups.remove(group_id);
        inner.stored.remove(group_id);
        inner.consumer.remove(group_id);
        Ok(())
    }

    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        let inner = self.shard(group_id).state.lock();
        match inner.groups.get(group_id) {
            Some(g) => Some(GroupDescription {
                state: g.state.name(),
                protocol_type: g.protocol_type.clone().unwrap_or_default(),
                protocol: if g.state == GroupState::Stable
                    || g.state == GroupState::CompletingRebalance
                {
                    g.protocol_name.clone().unwrap_or_default()
                } else {
                    String::new()
                },
                members: g.members.values().cloned().collect(),
            }),
            None if inner.offsets.has_group(group_id) => Some(GroupDescription {
                state: "Empty",
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            }),
            None => None,
        }
    }

    /// Every known group: `(id, protocol type, state, group type)`, the
    /// type `classic` or `consumer`.
    pub fn list(&self) -> Vec<(String, String, &'static str, &'static str)> {
        let mut out: BTreeMap<String, (String, &'static str, &'static str)> = BTreeMap::new();
        for shard in self
            .shards
            .iter()
            .filter(|s| s.owner.load(Ordering::SeqCst) == OWNED)
        {
            let inner = shard.state.lock();
            for id in inner.offsets.groups() {
                out.insert(id.clone(), (String::new(), "Empty", "classic"));
            }
            for (id, g) in &inner.groups {
                if g.state != GroupState::Dead {
                    out.insert(
                        id.clone(),
                        (
                            g.protocol_type.clone().unwrap_or_default(),
                            g.state.name(),
                            "classic",
                        ),
                    );
                }
            }
            for (id, g) in &inner.consumer {
                out.insert(
                    id.clone(),
                    (
                        "consumer".to_string(),
                        consumer::machine::state_name(g),
                        "consumer",
                    ),
                );
            }
        }
        out.into_iter()
            .map(|(id, (t, s, k))| (id, t, s, k))
            .collect()
    }

    /// `(group, topic, partition, committed offset)` for the lag metrics.
    pub fn committed(&self) -> Vec<(String, String, i32, i64)> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let inner = shard.state.lock();
            for g in inner.offsets.groups() {
                for ((t, p), c) in inner.offsets.group(g) {
                    out.push((g.clone(), t.clone(), *p, c.offset));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_topics_are_parsed_and_garbage_is_tolerated() {
        let mut meta = vec![0u8, 1, 0, 0, 0, 2];
        for t in ["a", "bc"] {
            meta.extend_from_slice(&(t.len() as i16).to_be_bytes());
            meta.extend_from_slice(t.as_bytes());
        }
        assert_eq!(
            subscribed_topics(&meta),
            vec!["a".to_string(), "bc".to_string()]
        );
        assert!(subscribed_topics(&[1, 2]).is_empty());
        assert_eq!(
            subscribed_topics(&[0, 1, 0, 0, 0, 9, 0, 50]),
            Vec::<String>::new()
        );
    }

    /// Runs `f` on another thread and says whether it finished in time
    /// (a generous bound: a deadlock never finishes).
    fn finishes<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> bool {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok()
    }

    fn coordinator(partitions: i32) -> std::sync::Arc<GroupCoordinator> {
        std::sync::Arc::new(GroupCoordinator::new(CoordinatorSettings {
            offsets_partitions: partitions,
            ..CoordinatorSettings::default()
        }))
    }

    #[test]
    fn heartbeats_never_wait_for_a_shard_write_in_progress() {
        let c = coordinator(4);
        // A commit, delete or expiry of this shard holds `writes` across its
        // append to the log; heartbeats of the same shard must not wait.
        let _append_in_progress = c.shard("g").writes.lock();
        let c2 = c.clone();
        assert!(finishes(move || c2.heartbeat("g", "m", None, 1)));
        let c3 = c.clone();
        assert!(finishes(move || c3.describe("g").is_none()));
        let c4 = c.clone();
        assert!(finishes(move || c4.fetch_offsets("g", None).len()));
    }

    #[test]
    fn groups_of_other_shards_are_independent() {
        let c = coordinator(8);
        let a = "group-a";
        let b = (0..100)
            .map(|i| format!("group-{i}"))
            .find(|g| offsets::partition_for(g, 8) != offsets::partition_for(a, 8))
            .expect("some group hashes elsewhere");
        let _busy = c.shard(a).state.lock();
        let c2 = c.clone();
        assert!(finishes(move || c2.heartbeat(&b, "m", None, 1)));
        assert_eq!(c.shards.len(), 8, "one shard per offsets partition");
    }
}
