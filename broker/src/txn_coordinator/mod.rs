//! The transaction coordinator's runtime (issue 37): the state machine of
//! [`crate::txn::state`] put to work on the `__transaction_state`
//! partitions this broker leads.
//!
//! Shaped like Kafka's `TransactionStateManager` and Moldau's group
//! coordinator: one shard per `__transaction_state` partition, holding
//! one [`TransactionMetadata`] per transactional id that hashes to it
//! ([`partition_for`]). A shard is loaded when this broker becomes the
//! partition's leader (`COORDINATOR_LOAD_IN_PROGRESS` while its log is
//! read, see [`load`]), and dropped when it stops leading
//! (`NOT_COORDINATOR`). Its coordinator epoch is the partition's leader
//! epoch, as in Kafka, so markers from a deposed coordinator are refused
//! by the partitions.
//!
//! A change is written before it is believed: decide (pure), `begin` the
//! transit (the id is pending: other requests for it get
//! `CONCURRENT_TRANSACTIONS`), append its `TransactionLogValue` (or a
//! tombstone) to the shard's partition with acks=all (the topic's
//! `min.insync.replicas`, then every in-sync replica), then `apply` it, or
//! `abandon` it and answer the append's error as Kafka maps it. Each shard
//! has two locks, as the group coordinator's: `ids` (held briefly, never
//! across an append) and `writes` (orders appends with leadership
//! changes, so no append of a deposed coordinator is applied).
//!
//! A prepared transaction (PrepareCommit/PrepareAbort, after EndTxn, a
//! fence or a timeout, or found in the log by a new leader) is completed
//! by [`TxnCoordinator::complete`]: its markers go out through a
//! [`MarkerSender`] (WriteTxnMarkers to each partition's leader), each
//! partition acknowledged (or gone) leaves the set, and once none is left
//! the CompleteCommit/CompleteAbort is written. Partitions that did not
//! answer stay for the next try ([`TxnCoordinator::complete_prepared`],
//! which the broker calls every 200 ms); [`TxnCoordinator::tick`] also
//! aborts transactions past their timeout and tombstones transactional
//! ids idle for `transactional.id.expiration.ms`.
//!
//! Everything here blocks (log reads, appends, waits for replicas, marker
//! round trips): callers run it on the blocking pool (`offload`,
//! `spawn_blocking`). Producer ids come from the caller's
//! [`ProducerIdSource`] (the controller's allocator in the broker).
//!
//! What it must not touch: partitions' data (markers are written by the
//! partition leaders' WriteTxnMarkers handler), and the wire format of the
//! transaction APIs (their handlers). It sits on the coordinators' floor
//! next to `group`, uses `topics` and `partition`, and nothing below it
//! imports it.
//!
//! Who drives it: the handlers of `handlers::transactions` (and
//! InitProducerId's transactional form), the broker's periodic task (the
//! tick), and the controller session (`follow_leadership` after each
//! image). Its markers go out through `replication::markers`.
//!
//! Not yet: transaction version 2 (EndTxn v5 and the implicit partition
//! adds of KIP-890 part 2; the cluster's version is `V0`), and the group
//! side (TxnOffsetCommit, offsets committed with the transaction).

pub mod load;

use std::collections::{BTreeSet, HashMap};

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::TopicError;
use crate::topics::TopicManager;
use crate::txn::census::{Census, EndCause, TxnEnd};
use crate::txn::log_record::encode_key;
use crate::txn::state::{
    self, AddPartitions, AfterPersist, Decision, EndTxn, InitProducerId, InitReply, MarkerPlan,
    PartitionLoad, ProducerIdSource, TransactionMetadata, Transit, TxnState,
};
use crate::txn::vocab::{
    partition_for, ProducerIdAndEpoch, TopicPartition, TransactionVersion, TRANSACTION_STATE_TOPIC,
};

/// The runtime's settings (Kafka broker config names in comments).
#[derive(Debug, Clone)]
pub struct TxnSettings {
    /// `transaction.state.log.num.partitions`
    pub partitions: i32,
    /// `transaction.state.log.replication.factor`
    pub replication_factor: i16,
    /// `transaction.state.log.min.isr`
    pub min_isr: i32,
    /// `transaction.state.log.segment.bytes`
    pub segment_bytes: i64,
    /// `transaction.max.timeout.ms`
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`
    pub expiration_ms: i64,
    /// How long a write waits for the in-sync replicas (Kafka's
    /// `request.timeout.ms` for the coordinator's appends).
    pub write_timeout_ms: i64,
    /// The cluster's finalized `transaction.version` (the broker config of
    /// that name): the record version written and how the coordinator's
    /// own aborts bump.
    pub cluster_tv: TransactionVersion,
}

impl Default for TxnSettings {
    fn default() -> Self {
        Self {
            partitions: 50,
            replication_factor: 3,
            min_isr: 2,
            segment_bytes: 100 * 1024 * 1024,
            max_timeout_ms: 900_000,
            expiration_ms: 604_800_000,
            write_timeout_ms: 30_000,
            cluster_tv: TransactionVersion::V0,
        }
    }
}

impl TxnSettings {
    /// The settings a broker config gives.
    pub fn from_config(c: &crate::config::BrokerConfig) -> Self {
        Self {
            partitions: c.transaction_state_log_num_partitions,
            replication_factor: c.transaction_state_log_replication_factor,
            min_isr: c.transaction_state_log_min_isr,
            segment_bytes: c.transaction_state_log_segment_bytes,
            max_timeout_ms: c.transaction_max_timeout_ms,
            expiration_ms: c.transactional_id_expiration_ms,
            cluster_tv: TransactionVersion::from_feature_level(c.transaction_version)
                .unwrap_or_default(),
            ..Self::default()
        }
    }

    /// The configs `__transaction_state` is created with, for a topic of
    /// `replication_factor` replicas (its min ISR capped to that).
    pub fn topic_configs(
        &self,
        replication_factor: i16,
    ) -> std::collections::BTreeMap<String, String> {
        let min_isr = self.min_isr.clamp(1, i32::from(replication_factor.max(1)));
        [
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("segment.bytes".to_string(), self.segment_bytes.to_string()),
            ("min.insync.replicas".to_string(), min_isr.to_string()),
            // as Kafka: the coordinator's records are not compressed
            ("compression.type".to_string(), "uncompressed".to_string()),
        ]
        .into()
    }
}

/// Writes a prepared transaction's markers: WriteTxnMarkers to each
/// partition's leader at `coordinator_epoch`. Returns the partitions that
/// are done (the marker acknowledged, or the partition gone); the others
/// are tried again later.
pub trait MarkerSender: Send + Sync + std::fmt::Debug {
    fn write_markers(
        &self,
        transactional_id: &str,
        coordinator_epoch: i32,
        plan: &MarkerPlan,
    ) -> Vec<TopicPartition>;
}

/// Asks another broker's transaction coordinator whether partitions are
/// in a transaction, or to add them: an AddPartitionsToTxn v5 request
/// (KIP-890; verify-only for part 1's question, not for part 2's add),
/// sent to `coordinator` (node id, `host:port`). Blocking.
pub trait VerifyChannel: Send + Sync + std::fmt::Debug {
    fn verify(
        &self,
        coordinator: &(i32, String),
        request: kafka_protocol::messages::AddPartitionsToTxnRequest,
    ) -> std::io::Result<kafka_protocol::messages::AddPartitionsToTxnResponse>;
}

/// The transactional ids of one `__transaction_state` partition.
struct Shard {
    load: Mutex<PartitionLoad>,
    ids: Mutex<HashMap<String, TransactionMetadata>>,
    /// Held across "append, then apply", and by loads and unloads.
    writes: Mutex<()>,
}

impl Default for Shard {
    fn default() -> Self {
        Self {
            load: Mutex::new(PartitionLoad::NotOwned),
            ids: Mutex::default(),
            writes: Mutex::default(),
        }
    }
}

/// A transaction as DescribeTransactions and ListTransactions show it.
pub type TxnView = TransactionMetadata;

pub struct TxnCoordinator {
    settings: TxnSettings,
    shards: Vec<Shard>,
    /// Transactions ended here since the start, by [`TxnEnd::index`]:
    /// counted once the PrepareCommit/PrepareAbort is durable and applied
    /// (a failed write ends nothing), for `/metrics`.
    ended: [AtomicU64; TxnEnd::ALL.len()],
}

impl std::fmt::Debug for TxnCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnCoordinator")
            .field("settings", &self.settings)
            .finish()
    }
}

fn now_ms() -> i64 {
    crate::clock::now_ms()
}

impl TxnCoordinator {
    pub fn new(settings: TxnSettings) -> Self {
        let shards = (0..settings.partitions.max(1))
            .map(|_| Shard::default())
            .collect();
        Self {
            settings,
            shards,
            ended: Default::default(),
        }
    }

    /// Counts the end a durable plan of `cause` made, if it made one.
    fn count_end(&self, cause: EndCause, then: AfterPersist) {
        if let Some(end) = TxnEnd::after(cause, then) {
            self.ended[end.index()].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Transactions ended here since the start, by how they ended.
    pub fn ended(&self) -> [(TxnEnd, u64); TxnEnd::ALL.len()] {
        TxnEnd::ALL.map(|e| (e, self.ended[e.index()].load(Ordering::Relaxed)))
    }

    /// The transactional ids of the loaded shards by state, and the
    /// markers their prepared transactions owe: counted under each shard's
    /// `ids` lock in turn (nothing cloned), so the same ids as
    /// [`list`](Self::list) shows.
    pub fn census(&self) -> Census {
        let mut census = Census::default();
        for shard in &self.shards {
            if !matches!(*shard.load.lock(), PartitionLoad::Loaded { .. }) {
                continue;
            }
            for m in shard.ids.lock().values() {
                census.add(m);
            }
        }
        census
    }

    pub fn settings(&self) -> &TxnSettings {
        &self.settings
    }

    /// The `__transaction_state` partition of `transactional_id`.
    pub fn partition_of(&self, transactional_id: &str) -> i32 {
        partition_for(transactional_id, self.shards.len() as i32)
    }

    fn shard(&self, index: i32) -> &Shard {
        let i = usize::try_from(index).unwrap_or(0);
        &self.shards[i.min(self.shards.len() - 1)]
    }

    /// Where `transactional_id`'s partition stands on this broker.
    pub fn partition_load(&self, transactional_id: &str) -> PartitionLoad {
        *self.shard(self.partition_of(transactional_id)).load.lock()
    }

    /// Forgets every shard (cluster mode at start: nothing is coordinated
    /// until [`follow_leadership`](Self::follow_leadership) loads it).
    pub fn start_unowned(&self) {
        for shard in &self.shards {
            let _w = shard.writes.lock();
            *shard.load.lock() = PartitionLoad::NotOwned;
            shard.ids.lock().clear();
        }
    }

    /// Standalone: creates `__transaction_state` if need be (one replica)
    /// and loads every partition. Returns the records read.
    pub fn load_all(&self, topics: &TopicManager) -> Result<usize, TopicError> {
        if topics.get(TRANSACTION_STATE_TOPIC).is_none() {
            topics.create(
                TRANSACTION_STATE_TOPIC,
                self.settings.partitions,
                1,
                self.settings.topic_configs(1),
            )?;
        }
        let led: BTreeSet<i32> = (0..self.shards.len() as i32).collect();
        Ok(self.follow_leadership(topics, self.settings.partitions, &led))
    }

    /// Loads the shards of the partitions this broker now leads (`led`;
    /// `partitions` is the topic's partition count) and drops the others.
    /// A count other than `transaction.state.log.num.partitions` here
    /// coordinates nothing, loudly (ids would hash elsewhere). Returns the
    /// records read. Blocking.
    pub fn follow_leadership(
        &self,
        topics: &TopicManager,
        partitions: i32,
        led: &BTreeSet<i32>,
    ) -> usize {
        if usize::try_from(partitions).ok() != Some(self.shards.len()) {
            tracing::error!(
                topic_partitions = partitions,
                configured = self.shards.len(),
                "__transaction_state has a partition count other than transaction.state.log.num.partitions on this broker; coordinating no transactions"
            );
            self.start_unowned();
            return 0;
        }
        let mut records = 0;
        for (index, shard) in self.shards.iter().enumerate() {
            let index = index as i32;
            let partition = topics.partition(TRANSACTION_STATE_TOPIC, index);
            let epoch = partition.as_ref().and_then(|p| p.leader_epoch());
            let leads = led.contains(&index) && epoch.is_some();
            let current = *shard.load.lock();
            match (leads, current) {
                (true, PartitionLoad::Loaded { coordinator_epoch })
                    if Some(coordinator_epoch) == epoch => {}
                (true, _) => {
                    let (Some(p), Some(epoch)) = (partition, epoch) else {
                        continue;
                    };
                    let _w = shard.writes.lock();
                    *shard.load.lock() = PartitionLoad::Loading;
                    match load::read_partition(&p) {
                        Ok((ids, stats)) => {
                            records += stats.records;
                            let prepared = ids.values().filter(|m| m.state().is_prepare()).count();
                            *shard.ids.lock() = ids;
                            *shard.load.lock() = PartitionLoad::Loaded {
                                coordinator_epoch: epoch,
                            };
                            tracing::info!(
                                partition = index,
                                coordinator_epoch = epoch,
                                records = stats.records,
                                skipped = stats.skipped,
                                prepared,
                                "coordinating the transactions of a __transaction_state partition"
                            );
                        }
                        Err(e) => {
                            *shard.load.lock() = PartitionLoad::NotOwned;
                            shard.ids.lock().clear();
                            tracing::error!(partition = index, error = %e.message, "cannot load a __transaction_state partition; retried at the next metadata change");
                        }
                    }
                }
                (false, PartitionLoad::NotOwned) => {}
                (false, _) => {
                    let _w = shard.writes.lock();
                    *shard.load.lock() = PartitionLoad::NotOwned;
                    shard.ids.lock().clear();
                    tracing::info!(
                        partition = index,
                        "no longer coordinating the transactions of a __transaction_state partition"
                    );
                }
            }
        }
        records
    }

    /// Appends `t` (its value, or a tombstone) to partition `index` with
    /// acks=all, as coordinator epoch `epoch`.
    fn write(
        &self,
        topics: &TopicManager,
        index: i32,
        epoch: i32,
        id: &str,
        t: &Transit,
    ) -> Result<(), TopicError> {
        let shard = self.shard(index);
        let _w = shard.writes.lock();
        if *shard.load.lock()
            != (PartitionLoad::Loaded {
                coordinator_epoch: epoch,
            })
        {
            return Err(TopicError::new(
                ResponseError::NotCoordinator,
                "the __transaction_state partition changed hands",
            ));
        }
        let partition = topics
            .partition(TRANSACTION_STATE_TOPIC, index)
            .ok_or_else(|| {
                TopicError::new(
                    ResponseError::NotCoordinator,
                    "the __transaction_state partition is not held here",
                )
            })?;
        let internal = |e: &dyn std::fmt::Display| {
            TopicError::new(ResponseError::UnknownServerError, e.to_string())
        };
        let key = encode_key(id).map_err(|e| internal(&e))?;
        let value = match t.log_value() {
            Some(v) => Some(
                v.encode(self.settings.cluster_tv.log_value_version())
                    .map_err(|e| internal(&e))?,
            ),
            None => None,
        };
        let buf = encode_batch(key, value).map_err(|e| internal(&e))?;
        let headers = crate::storage::batch::validate_batches(&buf, usize::MAX)?;
        let min_isr = topics.get(TRANSACTION_STATE_TOPIC).map_or(1, |topic| {
            crate::topic_config::min_insync_replicas(&topic.meta.configs, &topics.broker_config())
        });
        let led = partition.leader_epoch();
        if led != Some(epoch) {
            return Err(TopicError::new(
                ResponseError::NotCoordinator,
                "this broker no longer leads the __transaction_state partition",
            ));
        }
        let required = match partition.append(&buf, &headers, Some(min_isr))? {
            crate::partition::Appended::New(r) => r.last_offset + 1,
            crate::partition::Appended::Duplicate { base_offset, .. } => base_offset + 1,
        };
        let timeout =
            std::time::Duration::from_millis(self.settings.write_timeout_ms.max(1) as u64);
        match crate::offload::blocking(|| partition.wait_replicated(required, epoch, timeout)) {
            crate::partition::AckState::Done => Ok(()),
            crate::partition::AckState::Failed(code) => Err(TopicError::new(
                code,
                "the __transaction_state partition's in-sync replicas did not confirm the write",
            )),
            crate::partition::AckState::Waiting => Err(TopicError::new(
                ResponseError::RequestTimedOut,
                "still waiting for the in-sync replicas",
            )),
        }
    }

    /// The coordinator epoch of `id`'s partition, or the error a request
    /// for it gets.
    fn epoch_of(&self, id: &str) -> Result<(i32, i32), ResponseError> {
        let index = self.partition_of(id);
        let epoch = state::coordinator_epoch(*self.shard(index).load.lock())?;
        Ok((index, epoch))
    }

    /// Persists a plan's transit for `id` (already begun) and applies it,
    /// or abandons it and answers the append's error.
    fn persist(
        &self,
        topics: &TopicManager,
        index: i32,
        epoch: i32,
        id: &str,
        t: &Transit,
    ) -> Result<(), ResponseError> {
        let written = self.write(topics, index, epoch, id, t);
        let shard = self.shard(index);
        let mut ids = shard.ids.lock();
        let Some(meta) = ids.get_mut(id) else {
            // unloaded meanwhile: the next coordinator has the log
            return Err(ResponseError::NotCoordinator);
        };
        match written {
            Ok(()) if t.is_tombstone() => {
                if meta.tombstone_written(t) {
                    ids.remove(id);
                } else {
                    meta.abandon(t);
                }
                Ok(())
            }
            Ok(()) => meta.apply(t).map_err(|e| {
                tracing::error!(error = %e, "applying a durable transaction transit");
                e.code()
            }),
            Err(e) => {
                meta.abandon(t);
                tracing::warn!(transactional_id = id, error = %e.message, "writing transaction metadata failed");
                Err(state::append_error(e.code))
            }
        }
    }

    /// Decides on `id`'s metadata under the `ids` lock; a plan is begun
    /// there, then persisted and applied. Returns the reply and what
    /// follows.
    fn decide_and_persist<R>(
        &self,
        topics: &TopicManager,
        id: &str,
        decide: impl FnOnce(Option<&TransactionMetadata>) -> Result<Decision<R>, ResponseError>,
    ) -> Result<(R, AfterPersist), ResponseError> {
        let (index, epoch) = self.epoch_of(id)?;
        let plan = {
            let mut ids = self.shard(index).ids.lock();
            match decide(ids.get(id))? {
                Decision::Done(r) => return Ok((r, AfterPersist::Reply)),
                Decision::Persist(plan) => {
                    let meta = ids.get_mut(id).ok_or(ResponseError::UnknownServerError)?;
                    meta.begin(&plan.transit).map_err(|e| e.code())?;
                    plan
                }
            }
        };
        self.persist(topics, index, epoch, id, &plan.transit)?;
        Ok((plan.reply, plan.then))
    }

    /// A transactional InitProducerId (the request's checks included):
    /// the producer id and epoch, or the error. Fencing an ongoing
    /// transaction answers `CONCURRENT_TRANSACTIONS` once its abort is
    /// prepared; the abort is then completed by [`complete`](Self::complete).
    pub fn init_producer_id(
        &self,
        topics: &TopicManager,
        ids: &mut impl ProducerIdSource,
        transactional_id: &str,
        timeout_ms: i32,
        producer: ProducerIdAndEpoch,
    ) -> Result<(InitReply, bool), ResponseError> {
        let expected = state::check_init_producer_id(
            transactional_id,
            timeout_ms,
            self.settings.max_timeout_ms,
            producer,
        )?;
        let (index, _) = self.epoch_of(transactional_id)?;
        let known = self.shard(index).ids.lock().contains_key(transactional_id);
        if !known {
            // A new id gets its producer id before the write, cached so a
            // retry after a failed write reuses it.
            let pid = ids.next_producer_id()?;
            self.shard(index)
                .ids
                .lock()
                .entry(transactional_id.to_string())
                .or_insert_with(|| {
                    TransactionMetadata::new(transactional_id, pid, timeout_ms, now_ms())
                });
        }
        let req = InitProducerId {
            timeout_ms,
            expected,
        };
        let tv = self.settings.cluster_tv;
        let (reply, then) = self.decide_and_persist(topics, transactional_id, |meta| {
            let meta = meta.ok_or(ResponseError::NotCoordinator)?;
            state::init_producer_id(meta, &req, tv, now_ms(), ids)
        })?;
        // an ongoing transaction fenced: its abort is durable
        self.count_end(EndCause::Fence, then);
        Ok((reply, matches!(then, AfterPersist::SendMarkers(_))))
    }

    /// AddPartitionsToTxn (not verify-only).
    pub fn add_partitions(
        &self,
        topics: &TopicManager,
        transactional_id: &str,
        req: &AddPartitions,
    ) -> Result<(), ResponseError> {
        self.decide_and_persist(topics, transactional_id, |meta| {
            state::add_partitions(meta, req, now_ms())
        })
        .map(drop)
    }

    /// AddPartitionsToTxn v4+ verify-only: per partition, whether it is in
    /// the transaction.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Result<Vec<(TopicPartition, Option<ResponseError>)>, ResponseError> {
        let (index, _) = self.epoch_of(transactional_id)?;
        let ids = self.shard(index).ids.lock();
        state::verify_partitions(ids.get(transactional_id), producer, partitions)
    }

    /// AddOffsetsToTxn: `offsets_partition` is the group's
    /// `__consumer_offsets` partition.
    pub fn add_offsets(
        &self,
        topics: &TopicManager,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        offsets_partition: i32,
        client_tv: TransactionVersion,
    ) -> Result<(), ResponseError> {
        self.decide_and_persist(topics, transactional_id, |meta| {
            state::add_offsets(meta, producer, offsets_partition, client_tv, now_ms())
        })
        .map(drop)
    }

    /// EndTxn: the reply (EndTxn v5+'s producer id and epoch) once the
    /// prepare is durable, and whether markers are to be sent (then call
    /// [`complete`](Self::complete)).
    pub fn end_txn(
        &self,
        topics: &TopicManager,
        ids: &mut impl ProducerIdSource,
        transactional_id: &str,
        req: &EndTxn,
    ) -> Result<(ProducerIdAndEpoch, bool), ResponseError> {
        let (reply, then) = self.decide_and_persist(topics, transactional_id, |meta| {
            state::end_txn(meta, req, now_ms(), ids)
        })?;
        self.count_end(EndCause::EndTxn, then);
        Ok((reply, matches!(then, AfterPersist::SendMarkers(_))))
    }

    /// Drives `id`'s prepared transaction towards completion: sends the
    /// markers still owed, and once every partition is done writes the
    /// CompleteCommit/CompleteAbort. `Ok(true)` when the transaction is
    /// complete (or was not prepared), `Ok(false)` when markers remain
    /// (try again later).
    pub fn complete(
        &self,
        topics: &TopicManager,
        markers: &dyn MarkerSender,
        transactional_id: &str,
    ) -> Result<bool, ResponseError> {
        let (index, epoch) = self.epoch_of(transactional_id)?;
        let shard = self.shard(index);
        let (plan, completion) = {
            let mut ids = shard.ids.lock();
            let Some(meta) = ids.get_mut(transactional_id) else {
                return Ok(true);
            };
            if meta.pending().is_some() {
                return Ok(false);
            }
            let Some(plan) = meta.marker_plan() else {
                return Ok(true);
            };
            let completion = meta.begin_completion(now_ms()).map_err(|e| e.code())?;
            (plan, completion)
        };
        let done = if plan.partitions.is_empty() {
            Vec::new()
        } else {
            markers.write_markers(transactional_id, epoch, &plan)
        };
        {
            let mut ids = shard.ids.lock();
            let Some(meta) = ids.get_mut(transactional_id) else {
                return Err(ResponseError::NotCoordinator);
            };
            let mut all = plan.partitions.is_empty();
            for tp in &done {
                all = meta.marker_written(tp);
            }
            if !all {
                meta.abandon(&completion);
                return Ok(false);
            }
        }
        self.persist(topics, index, epoch, transactional_id, &completion)?;
        Ok(true)
    }

    /// Drives every prepared transaction of the loaded shards that nothing
    /// else is driving (markers owed after a failed send, or found by a
    /// new leader): the broker calls it often, so a transaction whose
    /// markers failed does not wait for the next [`tick`](Self::tick).
    /// Returns how many completed. Blocking.
    pub fn complete_prepared(&self, topics: &TopicManager, markers: &dyn MarkerSender) -> usize {
        let mut completed = 0;
        for shard in &self.shards {
            if !matches!(*shard.load.lock(), PartitionLoad::Loaded { .. }) {
                continue;
            }
            let prepared: Vec<String> = shard
                .ids
                .lock()
                .values()
                .filter(|m| m.state().is_prepare() && m.pending().is_none())
                .map(|m| m.transactional_id().to_string())
                .collect();
            for id in prepared {
                if self.complete(topics, markers, &id) == Ok(true) {
                    completed += 1;
                }
            }
        }
        completed
    }

    /// The periodic work of every loaded shard at `now`: aborts the
    /// transactions past their timeout, tombstones ids idle for
    /// `transactional.id.expiration.ms`, and drives every prepared
    /// transaction (its markers, then its completion). Returns how many
    /// transactions were aborted, expired and completed. Blocking.
    pub fn tick(
        &self,
        topics: &TopicManager,
        ids: &mut impl ProducerIdSource,
        markers: &dyn MarkerSender,
        now: i64,
    ) -> TickReport {
        let mut report = TickReport::default();
        for shard in &self.shards {
            if !matches!(*shard.load.lock(), PartitionLoad::Loaded { .. }) {
                continue;
            }
            let candidates: Vec<(String, bool, bool)> = shard
                .ids
                .lock()
                .values()
                .map(|m| {
                    (
                        m.transactional_id().to_string(),
                        state::timed_out(m, now),
                        state::should_expire(m, now, self.settings.expiration_ms),
                    )
                })
                .collect();
            for (id, timed_out, expired) in candidates {
                let tv = self.settings.cluster_tv;
                if timed_out {
                    let aborted = self.decide_and_persist(topics, &id, |meta| {
                        let meta = meta.ok_or(ResponseError::NotCoordinator)?;
                        Ok(match state::abort_timed_out(meta, tv, now, ids)? {
                            Some(plan) => Decision::Persist(plan),
                            None => Decision::Done(()),
                        })
                    });
                    match aborted {
                        Ok((_, then @ AfterPersist::SendMarkers(_))) => {
                            tracing::info!(transactional_id = %id, "aborting a transaction past its timeout");
                            self.count_end(EndCause::Timeout, then);
                            report.aborted += 1;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(transactional_id = %id, error = ?e, "aborting a timed-out transaction failed")
                        }
                    }
                }
                if expired {
                    let expiration = self.settings.expiration_ms;
                    let gone = self.decide_and_persist(topics, &id, |meta| {
                        let meta = meta.ok_or(ResponseError::NotCoordinator)?;
                        Ok(match state::expire(meta, now, expiration) {
                            Some(transit) => Decision::Persist(state::Plan {
                                transit,
                                reply: (),
                                then: AfterPersist::Reply,
                            }),
                            None => Decision::Done(()),
                        })
                    });
                    if gone.is_ok() && !shard.ids.lock().contains_key(&id) {
                        report.expired += 1;
                    }
                }
                let prepared = shard
                    .ids
                    .lock()
                    .get(&id)
                    .is_some_and(|m| m.state().is_prepare());
                if prepared && self.complete(topics, markers, &id) == Ok(true) {
                    report.completed += 1;
                }
            }
        }
        report
    }

    /// DescribeTransactions for one id.
    pub fn describe(&self, transactional_id: &str) -> Result<TxnView, ResponseError> {
        let (index, _) = self.epoch_of(transactional_id)?;
        let ids = self.shard(index).ids.lock();
        state::describe(ids.get(transactional_id)).cloned()
    }

    /// ListTransactions: every id of the loaded shards, filtered by state
    /// names and producer ids (empty filters match all), as (id, producer
    /// id, state, start time).
    pub fn list(
        &self,
        states: &[String],
        producer_ids: &[i64],
    ) -> Vec<(String, i64, TxnState, i64)> {
        let mut out = Vec::new();
        for shard in &self.shards {
            if !matches!(*shard.load.lock(), PartitionLoad::Loaded { .. }) {
                continue;
            }
            for m in shard.ids.lock().values() {
                if m.state() == TxnState::Dead {
                    continue;
                }
                if !states.is_empty() && !states.iter().any(|s| s == m.state().name()) {
                    continue;
                }
                if !producer_ids.is_empty() && !producer_ids.contains(&m.producer_id()) {
                    continue;
                }
                out.push((
                    m.transactional_id().to_string(),
                    m.producer_id(),
                    m.state(),
                    m.start_ms(),
                ));
            }
        }
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        out
    }
}

/// What a [`TxnCoordinator::tick`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TickReport {
    pub aborted: usize,
    pub expired: usize,
    pub completed: usize,
}

/// One uncompressed v2 batch of one record (no producer id: the
/// coordinator's records are not idempotent, as in Kafka).
fn encode_batch(key: Vec<u8>, value: Option<Vec<u8>>) -> Result<BytesMut, String> {
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: now_ms(),
        key: Some(Bytes::from(key)),
        value: value.map(Bytes::from),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &vec![record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(buf)
}

#[cfg(test)]
mod tests;
