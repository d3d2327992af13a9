//! The topic manager: the live set of topics and their partitions' logs,
//! and the admin operations that change them (create, delete, add
//! partitions, alter configs). Every change is persisted through
//! [`MetadataFile`] before it becomes visible.
//!
//! It owns the mapping topic → partitions and each partition's lock; the
//! bytes inside a log belong to `storage`, the wire format to `protocol`.
//! In cluster mode the controller decides, and [`TopicManager::apply_assignment`]
//! makes the local logs match what it placed on this broker (a topic then
//! holds only some of its partitions).
//!
//! **Deleting a topic** (crash-safe, and possible on a full disk):
//! 1. every partition directory `<topic>-<p>` is renamed to
//!    `<topic>-<p>.<topic id>-delete` (a rename needs no free space). The
//!    first rename is the commit point: from then on the deletion completes
//!    even across a crash, because at start any topic whose id names a
//!    `-delete` directory is dropped from the metadata (roll forward), so a
//!    half-deleted topic never comes back, and other topics are untouched;
//! 2. the topic leaves the in-memory map and the metadata document is
//!    rewritten without it (temp file + rename, so a failure leaves the old
//!    document whole). If that fails (no space for the temp file), the
//!    files inside the `-delete` directories are removed first — freeing
//!    the space — and the rewrite is retried; the empty `-delete`
//!    directories stay as the record of the deletion until it succeeds;
//! 3. the `-delete` directories are removed by a background thread (and
//!    any left over are removed at the next start).
//!
//! Creating a topic or partitions that fails half-way (a full disk, no file
//! descriptors left) removes the partition directories it created, so the
//! request fails as a whole and can be retried.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::{Mutex, RwLock};
use uuid::Uuid;

use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::error::TopicError;
use crate::image::Assigned;
use crate::metadata::{validate_topic_name, MetadataDoc, MetadataFile, MetadataStore, TopicMeta};
pub use crate::partition::{
    Appended, BlockingAppendHook, Partition, PartitionOffsets, BLOCKING_APPEND_HOOK,
};
use crate::producer::ids::ProducerIdBlocks;
use crate::storage::cleaner::Throttle;
use crate::storage::high_watermarks::{self, HighWatermarks};
use crate::storage::{self, CompactionPlan, StorageError};
use crate::topic_config;

/// A topic and the partitions this broker holds, by index (all of them in
/// standalone mode; those the controller placed here in cluster mode).
#[derive(Debug)]
pub struct Topic {
    pub meta: TopicMeta,
    /// Sorted by index.
    pub partitions: Vec<Arc<Partition>>,
}

impl Topic {
    /// The partition with this index, if this broker holds it (any `i32`
    /// from the wire is fine, negative ones included).
    pub fn partition(&self, index: i32) -> Option<&Arc<Partition>> {
        let at = usize::try_from(index).ok()?;
        match self.partitions.get(at) {
            // every partition held (standalone): the index is the position
            Some(p) if p.index == index => Some(p),
            _ => self
                .partitions
                .binary_search_by_key(&index, |p| p.index)
                .ok()
                .map(|i| &self.partitions[i]),
        }
    }
}

/// How an IncrementalAlterConfigs entry changes a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterOp {
    Set,
    Delete,
    Append,
    Subtract,
}

/// The live topics of this broker.
#[derive(Debug)]
pub struct TopicManager {
    /// The broker's static properties, as loaded.
    broker: BrokerConfig,
    /// With the dynamic broker configs of the current image laid over them.
    effective: RwLock<Arc<BrokerConfig>>,
    data_dir: PathBuf,
    /// The controller's metadata store (standalone: the data directory's file).
    file: Box<dyn MetadataStore>,
    cluster_id: String,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Serialises admin changes so each persisted document is consistent.
    admin: Mutex<()>,
    /// Producer id blocks; its persisted end is part of the metadata document.
    producer_ids: Mutex<ProducerIdBlocks>,
    /// What opening the logs at start had to recover.
    recovery: RecoveryStats,
    /// `log.cleaner.io.max.bytes.per.second`, shared by every pass.
    cleaner_throttle: Throttle,
    /// The data directory's high watermark checkpoint.
    high_watermarks: Arc<HighWatermarks>,
}

/// What [`TopicManager::open`] found: after a clean stop, no partition is
/// unclean and no segment is recovered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    pub partitions: usize,
    /// Partitions with segments but no clean-shutdown marker.
    pub unclean_partitions: usize,
    /// Segments re-validated (CRC) with their indexes rebuilt.
    pub segments_recovered: usize,
    /// Bytes of segment data read to re-validate segments and to rebuild
    /// the producer state (0 after a clean stop).
    pub bytes_read: u64,
    /// Partitions whose producer state started from a snapshot.
    pub producer_snapshots_loaded: usize,
}

fn partition_dir(data_dir: &Path, topic: &str, index: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{index}"))
}

/// Suffix of a partition directory being deleted.
pub const DELETE_DIR_SUFFIX: &str = "-delete";

/// `<topic (at most 150 characters)>-<index>.<topic id, 32 hex>-delete`:
/// the id says which topic's deletion it records (a new topic of the same
/// name has another id), and the name stays under 255 bytes.
fn delete_dir(data_dir: &Path, topic: &str, index: i32, id: Uuid) -> PathBuf {
    let short = topic.get(..150).unwrap_or(topic);
    data_dir.join(format!(
        "{short}-{index}.{}{DELETE_DIR_SUFFIX}",
        id.as_simple()
    ))
}

/// The topic id recorded in a `-delete` directory name.
fn parse_delete_dir(name: &str) -> Option<Uuid> {
    let (_, id) = name.strip_suffix(DELETE_DIR_SUFFIX)?.rsplit_once('.')?;
    Uuid::try_parse(id).ok()
}

/// `-delete` directories of `data_dir` and the topic ids they record.
fn find_delete_dirs(data_dir: &Path) -> std::io::Result<Vec<(PathBuf, Uuid)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(id) = name.to_str().and_then(parse_delete_dir) {
            if entry.file_type()?.is_dir() {
                found.push((entry.path(), id));
            }
        }
    }
    Ok(found)
}

/// Removes the files inside `dir` but keeps the directory (which frees the
/// space while keeping the record of a deletion).
fn empty_dir(dir: &Path) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot list a directory being deleted");
            return;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(e) = removed {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a file being deleted");
        }
    }
}

fn remove_dirs(dirs: &[PathBuf]) {
    for dir in dirs {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => tracing::debug!(dir = %dir.display(), "removed deleted partition"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "could not remove deleted partition; retried at the next start")
            }
        }
    }
}

/// Removes `dirs` on a background thread (synchronously if no thread can
/// be started), so a big deletion does not hold up its caller.
fn remove_dirs_in_background(dirs: Vec<PathBuf>) {
    if dirs.is_empty() {
        return;
    }
    let shared = std::sync::Arc::new(dirs);
    let for_thread = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("moldau-delete".into())
        .spawn(move || remove_dirs(&for_thread));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start a deletion thread; deleting inline");
        remove_dirs(&shared);
    }
}

/// Removes the partition directories `indexes` of `topic` created by a
/// creation that failed half-way (their logs are already closed).
fn remove_created(data_dir: &Path, topic: &str, indexes: std::ops::Range<i32>) {
    let dirs: Vec<PathBuf> = indexes
        .map(|i| partition_dir(data_dir, topic, i))
        .filter(|d| d.exists())
        .collect();
    remove_dirs(&dirs);
}

const PARTITION_METADATA: &str = "partition.metadata";

impl TopicManager {
    /// Opens the data directory: loads the metadata, recovers every
    /// partition's log, and removes partition directories of deleted topics.
    pub fn open(data_dir: &Path, broker: BrokerConfig) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir)?;
        Self::open_with_store(data_dir, broker, Box::new(MetadataFile::new(data_dir)))
    }

    /// [`TopicManager::open`] with the metadata kept in `file`.
    pub fn open_with_store(
        data_dir: &Path,
        broker: BrokerConfig,
        file: Box<dyn MetadataStore>,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(data_dir)?;
        let mut doc = file.load_or_init()?;
        finish_deletions(data_dir, file.as_ref(), &mut doc)?;
        let high_watermarks = Arc::new(HighWatermarks::open(data_dir)?);
        let topics = open_topics(data_dir, &high_watermarks, &doc, &broker)?;
        remove_orphans(data_dir, &doc)?;
        let mut recovery = RecoveryStats::default();
        for p in topics.values().flat_map(|t| t.partitions.iter()) {
            let report = p.with_log(|log| log.open_report());
            let producers = p.producer_state_load();
            recovery.partitions += 1;
            recovery.unclean_partitions += usize::from(report.unclean);
            recovery.segments_recovered += report.segments_recovered;
            recovery.bytes_read += report.bytes_read + producers.bytes_read;
            recovery.producer_snapshots_loaded += usize::from(producers.snapshot_loaded);
        }
        Ok(Self {
            recovery,
            cleaner_throttle: Throttle::new(broker.log_cleaner_io_max_bytes_per_second),
            high_watermarks,
            effective: RwLock::new(Arc::new(broker.clone())),
            broker,
            data_dir: data_dir.to_path_buf(),
            file,
            producer_ids: Mutex::new(ProducerIdBlocks::resume(doc.producer_id_block_end)),
            cluster_id: doc.cluster_id,
            topics: RwLock::new(topics),
            admin: Mutex::new(()),
        })
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }
    /// What opening the logs at start had to recover.
    pub fn recovery_stats(&self) -> RecoveryStats {
        self.recovery
    }
    /// The broker's effective config: its properties with the dynamic
    /// broker configs laid over them.
    pub fn broker_config(&self) -> Arc<BrokerConfig> {
        self.effective.read().clone()
    }
    /// The broker's static properties, as loaded at start.
    pub fn static_broker_config(&self) -> &BrokerConfig {
        &self.broker
    }
    /// Lays the dynamic broker configs of an image over the static ones;
    /// when that changes the effective config, every open log gets its
    /// topic's config anew (e.g. a dynamic `log.retention.ms` reaches every
    /// topic without an override of its own). A value that does not parse
    /// (validated when written, so only from a newer broker) is logged and
    /// the last effective config stays.
    pub fn apply_dynamic_broker_configs(
        &self,
        configs: &crate::config_values::BrokerConfigs,
        node_id: i32,
    ) {
        let next = match crate::dynamic_config::effective(&self.broker, configs, node_id) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "a dynamic broker config does not apply; keeping the last ones");
                return;
            }
        };
        if **self.effective.read() == next {
            return;
        }
        let next = Arc::new(next);
        *self.effective.write() = next.clone();
        for t in self.all() {
            let cfg = topic_config::log_config(&t.meta.configs, &next);
            for p in &t.partitions {
                p.with_log(|log| log.set_config(cfg.clone()));
            }
        }
        tracing::info!(dynamic = ?next.dynamic.keys().collect::<Vec<_>>(), "dynamic broker configs applied");
    }
    /// The data directory (the broker's one log directory).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn get(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().get(name).cloned()
    }

    pub fn get_by_id(&self, id: Uuid) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .values()
            .find(|t| t.meta.id == id)
            .cloned()
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        self.get(topic)?.partition(index).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Topic>> {
        self.topics.read().values().cloned().collect()
    }

    fn persist(&self, topics: &BTreeMap<String, Arc<Topic>>) -> Result<(), TopicError> {
        let block_end = self.producer_ids.lock().persisted_end();
        self.save_doc(topics, block_end)
    }

    fn save_doc(
        &self,
        topics: &BTreeMap<String, Arc<Topic>>,
        producer_id_block_end: i64,
    ) -> Result<(), TopicError> {
        let doc = MetadataDoc {
            cluster_id: self.cluster_id.clone(),
            topics: topics
                .iter()
                .map(|(k, t)| (k.clone(), t.meta.clone()))
                .collect(),
            producer_id_block_end,
        };
        self.file.save(&doc).map_err(TopicError::from_io)
    }

    /// A new producer id, unique across restarts (InitProducerId).
    pub fn allocate_producer_id(&self) -> Result<i64, TopicError> {
        let _guard = self.admin.lock();
        let mut ids = self.producer_ids.lock();
        if let Some(end) = ids.needs_new_block() {
            let topics = self.topics.read().clone();
            self.save_doc(&topics, end)?;
            ids.block_persisted(end);
        }
        ids.take().ok_or_else(|| {
            TopicError::new(
                ResponseError::UnknownServerError,
                "no producer id available",
            )
        })
    }

    /// Whether `id` was handed out by this broker (now or before a restart).
    pub fn producer_id_issued(&self, id: i64) -> bool {
        self.producer_ids.lock().issued(id)
    }

    /// Checks a create request without doing it (`validate_only`, and the
    /// first step of [`create`](Self::create)).
    pub fn validate_create(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), TopicError> {
        validate_topic_name(name)
            .map_err(|m| TopicError::new(ResponseError::InvalidTopicException, m))?;
        if self.topics.read().contains_key(name) {
            return Err(TopicError::new(
                ResponseError::TopicAlreadyExists,
                format!("topic {name} already exists"),
            ));
        }
        if partitions < 1 {
            return Err(TopicError::new(
                ResponseError::InvalidPartitions,
                format!("number of partitions must be at least 1, got {partitions}"),
            ));
        }
        if replication_factor < 1 {
            return Err(TopicError::new(
                ResponseError::InvalidReplicationFactor,
                format!("replication factor must be at least 1, got {replication_factor}"),
            ));
        }
        if replication_factor > 1 {
            return Err(TopicError::new(
                ResponseError::InvalidReplicationFactor,
                format!(
                    "replication factor {replication_factor} is larger than the 1 available broker"
                ),
            ));
        }
        for (k, v) in configs {
            topic_config::validate(k, v)
                .map_err(|m| TopicError::new(ResponseError::InvalidConfig, m))?;
        }
        Ok(())
    }

    /// Creates a topic (`-1` partitions / replication factor mean the broker defaults).
    pub fn create(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<Arc<Topic>, TopicError> {
        let _guard = self.admin.lock();
        let partitions = if partitions == -1 {
            self.broker_config().num_partitions
        } else {
            partitions
        };
        let rf = if replication_factor == -1 {
            self.broker_config().default_replication_factor
        } else {
            replication_factor
        };
        self.validate_create(name, partitions, rf, &configs)?;
        let meta = TopicMeta {
            name: name.to_string(),
            id: Uuid::new_v4(),
            partitions,
            replication_factor: rf,
            configs,
            held: None,
        };
        let topic = match open_topic(
            &self.data_dir,
            &self.high_watermarks,
            &meta,
            &self.broker_config(),
        ) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                remove_created(&self.data_dir, name, 0..partitions);
                return Err(e);
            }
        };
        let mut next = self.topics.read().clone();
        next.insert(name.to_string(), topic.clone());
        if let Err(e) = self.persist(&next) {
            drop(next);
            drop(topic);
            remove_created(&self.data_dir, name, 0..partitions);
            return Err(e);
        }
        *self.topics.write() = next;
        tracing::info!(topic = name, partitions, id = %meta.id, "created topic");
        Ok(topic)
    }

    /// Creates a topic on first use if `auto.create.topics.enable` allows.
    pub fn auto_create(&self, name: &str) -> Result<Arc<Topic>, TopicError> {
        if let Some(t) = self.get(name) {
            return Ok(t);
        }
        if !self.broker_config().auto_create_topics_enable {
            return Err(TopicError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {name} does not exist"),
            ));
        }
        match self.create(name, -1, -1, BTreeMap::new()) {
            Err(e) if e.code == ResponseError::TopicAlreadyExists => self.get(name).ok_or(e),
            other => other,
        }
    }

    /// Deletes a topic and its data.
    pub fn delete(&self, name: &str) -> Result<Uuid, TopicError> {
        let _guard = self.admin.lock();
        if !self.broker_config().delete_topic_enable {
            return Err(TopicError::new(
                ResponseError::TopicDeletionDisabled,
                "delete.topic.enable is false",
            ));
        }
        self.delete_locked(name)
    }

    /// [`delete`](Self::delete) with the admin lock held.
    fn delete_locked(&self, name: &str) -> Result<Uuid, TopicError> {
        let topic = self.get(name).ok_or_else(|| {
            TopicError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {name} does not exist"),
            )
        })?;
        let id = topic.meta.id;
        // 1. Rename every partition directory (the first rename commits).
        let mut renamed = Vec::new();
        for p in &topic.partitions {
            let to = delete_dir(&self.data_dir, name, p.index, id);
            match p.with_log(|log| log.rename_dir(&to)) {
                Ok(()) => renamed.push(to),
                Err(e) if renamed.is_empty() => {
                    return Err(TopicError::new(
                        ResponseError::KafkaStorageError,
                        format!("cannot delete topic {name}: {e}"),
                    ));
                }
                // Committed already: this directory becomes an orphan once
                // the metadata no longer names the topic (removed at start).
                Err(e) => {
                    tracing::warn!(topic = name, partition = p.index, error = %e, "cannot rename a partition being deleted")
                }
            }
        }
        if let Err(e) = storage::checkpoint::fsync_dir(&self.data_dir) {
            tracing::warn!(error = %e, "cannot fsync the data directory");
        }
        // 2. Forget it, then rewrite the metadata without it.
        let mut next = self.topics.read().clone();
        next.remove(name);
        *self.topics.write() = next.clone();
        // Our reference is (normally) the last: dropping it closes the
        // logs' files and mappings, so removing them frees the space.
        drop(topic);
        if let Err(e) = self.persist(&next) {
            tracing::warn!(topic = name, error = %e, "cannot rewrite the metadata; freeing the deleted topic's space first");
            for dir in &renamed {
                empty_dir(dir);
            }
            if let Err(e) = self.persist(&next) {
                // The empty `-delete` directories record the deletion; the
                // next start completes it.
                tracing::error!(topic = name, error = %e, "cannot rewrite the metadata; the deletion completes at the next start");
                return Ok(id);
            }
        }
        // 3. The data goes in the background.
        remove_dirs_in_background(renamed);
        tracing::info!(topic = name, "deleted topic");
        Ok(id)
    }

    /// Raises a topic's partition count.
    pub fn create_partitions(
        &self,
        name: &str,
        count: i32,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        let _guard = self.admin.lock();
        let current = self.get(name).ok_or_else(|| {
            TopicError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {name} does not exist"),
            )
        })?;
        if count <= current.meta.partitions {
            return Err(TopicError::new(
                ResponseError::InvalidPartitions,
                format!(
                    "topic {name} has {} partitions; the new count {count} must be larger",
                    current.meta.partitions
                ),
            ));
        }
        if validate_only {
            return Ok(());
        }
        let mut meta = current.meta.clone();
        meta.partitions = count;
        let mut partitions = current.partitions.clone();
        let cfg = topic_config::log_config(&meta.configs, &self.broker_config());
        let added = current.meta.partitions..count;
        let jobs: Vec<_> = added.clone().map(|i| (&meta, i, &cfg)).collect();
        match open_all(&self.data_dir, &self.high_watermarks, &jobs) {
            Ok(opened) => partitions.extend(opened.into_iter().map(Arc::new)),
            Err(e) => {
                drop(partitions);
                remove_created(&self.data_dir, name, added);
                return Err(e);
            }
        }
        let topic = Arc::new(Topic { meta, partitions });
        let mut next = self.topics.read().clone();
        next.insert(name.to_string(), topic);
        if let Err(e) = self.persist(&next) {
            drop(next);
            remove_created(&self.data_dir, name, added);
            return Err(e);
        }
        *self.topics.write() = next;
        tracing::info!(topic = name, partitions = count, "added partitions");
        Ok(())
    }

    /// Replaces a topic's config overrides (AlterConfigs) or edits them
    /// (IncrementalAlterConfigs), validating every resulting value.
    pub fn alter_configs(
        &self,
        name: &str,
        change: impl FnOnce(&mut BTreeMap<String, String>) -> Result<(), TopicError>,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        let _guard = self.admin.lock();
        let current = self.get(name).ok_or_else(|| {
            TopicError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {name} does not exist"),
            )
        })?;
        let mut configs = current.meta.configs.clone();
        change(&mut configs)?;
        for (k, v) in &configs {
            topic_config::validate(k, v)
                .map_err(|m| TopicError::new(ResponseError::InvalidConfig, m))?;
        }
        if validate_only {
            return Ok(());
        }
        let mut meta = current.meta.clone();
        meta.configs = configs;
        let log_config = topic_config::log_config(&meta.configs, &self.broker_config());
        let topic = Arc::new(Topic {
            meta,
            partitions: current.partitions.clone(),
        });
        let mut next = self.topics.read().clone();
        next.insert(name.to_string(), topic);
        self.persist(&next)?;
        *self.topics.write() = next;
        for p in &current.partitions {
            p.with_log(|log| log.set_config(log_config.clone()));
        }
        tracing::info!(topic = name, "altered topic configs");
        Ok(())
    }

    /// Cluster mode: makes the local logs match what the controller placed
    /// on this broker. A local topic is deleted (as [`delete`](Self::delete)
    /// does) only when the controller says it was (`deleted` ids); a topic
    /// merely missing from the metadata keeps its data (logged, not
    /// served), and so does one whose name a new topic took without the
    /// old one's deletion (the new one is not opened here meanwhile).
    /// Assigned partitions missing here are created (empty) or opened;
    /// held partitions the controller placed elsewhere (a reassignment
    /// moved them) are deleted; config changes reach the open logs. The
    /// local metadata document
    /// records what is held, so a restart opens the same logs before the
    /// controller answers. Returns whether anything changed.
    pub fn apply_assignment(
        &self,
        assigned: &[Assigned],
        deleted: &std::collections::HashSet<Uuid>,
    ) -> Result<bool, TopicError> {
        let _guard = self.admin.lock();
        let wanted: BTreeMap<&str, &Assigned> =
            assigned.iter().map(|a| (a.name.as_str(), a)).collect();
        let mut changed = false;
        let mut stray = Vec::new();
        let mut stale = Vec::new();
        // A new topic of a name whose older topic this broker still holds
        // and the controller never said was deleted: the older data is kept
        // (its directories would collide) and the new one waits here.
        let mut blocked = std::collections::HashSet::new();
        for t in self.all() {
            let name = t.meta.name.clone();
            match wanted.get(name.as_str()) {
                Some(a) if a.id == t.meta.id => {}
                _ if deleted.contains(&t.meta.id) => stale.push(name),
                Some(a) => {
                    tracing::error!(topic = %name, held = %t.meta.id, new = %a.id, "a new topic has the name of one whose data this broker holds and that was not deleted: keeping the data, not opening the new topic here");
                    blocked.insert(name);
                }
                None => stray.push(name),
            }
        }
        if !stray.is_empty() {
            tracing::warn!(topics = ?stray, "local topics the controller does not place here and did not delete: kept, not served");
        }
        for name in stale {
            self.delete_locked(&name)?;
            changed = true;
        }
        let mut next = self.topics.read().clone();
        let mut first_error = None;
        let mut removed = Vec::new();
        for a in assigned.iter().filter(|a| !blocked.contains(&a.name)) {
            let mut held = a.held.clone();
            held.sort_unstable();
            held.dedup();
            let meta = TopicMeta {
                name: a.name.clone(),
                id: a.id,
                partitions: a.partitions,
                replication_factor: a.replication_factor,
                configs: a.configs.clone(),
                held: Some(held.clone()),
            };
            let current = next.get(&a.name).cloned();
            if current.as_ref().is_some_and(|t| t.meta == meta) {
                continue;
            }
            if held.is_empty() && current.is_none() {
                // a topic of the cluster with no replica here
                continue;
            }
            let cfg = topic_config::log_config(&meta.configs, &self.broker_config());
            let open_here = |index: i32| current.as_ref().and_then(|t| t.partition(index).cloned());
            let new_jobs: Vec<_> = held
                .iter()
                .filter(|&&i| open_here(i).is_none())
                .map(|&i| (&meta, i, &cfg))
                .collect();
            // Every new one is tried: one that fails leaves the others open.
            let mut opened = open_partitions(
                &self.data_dir,
                &self.high_watermarks,
                &new_jobs,
                CREATE_THREADS,
                false,
            )
            .into_iter();
            let mut partitions = Vec::with_capacity(held.len());
            for index in &held {
                let p = match open_here(*index) {
                    Some(p) => {
                        p.with_log(|log| log.set_config(cfg.clone()));
                        p
                    }
                    None => match opened.next() {
                        Some(Some(Ok(p))) => Arc::new(p),
                        Some(Some(Err(e))) => {
                            tracing::error!(topic = %a.name, partition = index, error = %e.message, "cannot open an assigned partition");
                            first_error.get_or_insert(e);
                            continue;
                        }
                        _ => continue,
                    },
                };
                partitions.push(p);
            }
            // Replicas moved away by a reassignment: the controller placed
            // them elsewhere, so their data goes (renamed first, as a topic
            // deletion does, and removed once the metadata is rewritten).
            let moved_away = current
                .iter()
                .flat_map(|t| t.partitions.iter())
                .filter(|p| !held.contains(&p.index));
            for p in moved_away {
                let to = delete_dir(&self.data_dir, &a.name, p.index, a.id);
                match p.with_log(|log| log.rename_dir(&to)) {
                    Ok(()) => {
                        tracing::info!(topic = %a.name, partition = p.index, "removing a replica moved to other brokers");
                        removed.push(to);
                    }
                    Err(e) => {
                        tracing::warn!(topic = %a.name, partition = p.index, error = %e, "cannot remove a replica moved to other brokers; its directory stays")
                    }
                }
            }
            changed = true;
            if held.is_empty() {
                // every replica of it here moved away
                next.remove(&a.name);
                continue;
            }
            let topic = Arc::new(Topic { meta, partitions });
            next.insert(a.name.clone(), topic);
        }
        if changed {
            self.persist(&next)?;
            *self.topics.write() = next;
        }
        remove_dirs_in_background(removed);
        match first_error {
            Some(e) => Err(e),
            None => Ok(changed),
        }
    }

    /// Runs retention and the flush policy on every partition
    /// (`log.retention.check.interval.ms`; compaction is [`Self::clean`]).
    pub fn housekeeping(&self) {
        let now = now_ms();
        for topic in self.all() {
            for p in &topic.partitions {
                let outcome = p.with_log(|log| {
                    let r = log.enforce_retention(now);
                    if let Err(e) = log.maybe_flush(now) {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "flush failed");
                    }
                    r
                });
                match outcome {
                    Ok(o) if o.segments_deleted > 0 => tracing::info!(
                        topic = %p.topic,
                        partition = p.index,
                        segments = o.segments_deleted,
                        bytes = o.bytes_deleted,
                        log_start_offset = o.log_start_offset,
                        "retention deleted segments"
                    ),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "retention failed")
                    }
                }
            }
        }
    }

    /// Rewrites the data directory's high watermark checkpoint with every
    /// partition's high watermark, when one changed (every
    /// `high_watermarks::CHECKPOINT_INTERVAL_MS`, as Kafka's checkpoint
    /// thread, and after the logs are closed): one file and its fsyncs
    /// whatever the number of partitions. The values are the published
    /// ones, read without the partitions' locks, so no produce or fetch
    /// waits for it; a truncation between the gathering and the write
    /// makes this round drop its values (see `HighWatermarks::write_all`).
    pub fn checkpoint_high_watermarks(&self) {
        let since = self.high_watermarks.generation();
        let entries: high_watermarks::Entries = self
            .all()
            .iter()
            .flat_map(|t| t.partitions.iter())
            .map(|p| (p.key(), p.checkpoint_entry(p.published_high_watermark())))
            .collect();
        match self.high_watermarks.write_all(since, entries) {
            Ok(outcome) => tracing::trace!(?outcome, "high watermark checkpoint"),
            // a full disk delays it; written again next time
            Err(e) => tracing::warn!(error = %e, "cannot checkpoint the high watermarks"),
        }
    }

    /// One round of the log cleaner (every `log.cleaner.backoff.ms`): a
    /// compaction pass on each compacted partition that is due for one. A
    /// pass does its reading and writing between two short holds of the
    /// partition's lock (see `PartitionLog::plan_compaction`), so produce
    /// and fetch go on while a partition is cleaned; its I/O counts against
    /// `log.cleaner.io.max.bytes.per.second`.
    pub fn clean(&self) {
        for topic in self.all() {
            for p in &topic.partitions {
                let now = now_ms();
                let started = std::time::Instant::now();
                let plan = p.with_log(|log| {
                    if log.config().compact {
                        log.plan_compaction(now)
                    } else {
                        Ok(CompactionPlan::Nothing(Default::default()))
                    }
                });
                let planned = started.elapsed();
                let mut ran_for = std::time::Duration::ZERO;
                let mut swapped = std::time::Duration::ZERO;
                let mut swap_locked = std::time::Duration::ZERO;
                let outcome = match plan {
                    Ok(CompactionPlan::Nothing(_)) => continue,
                    Ok(CompactionPlan::Pass(mut pass)) => {
                        let t = std::time::Instant::now();
                        let ran = pass.run(&self.cleaner_throttle);
                        ran_for = t.elapsed();
                        let t = std::time::Instant::now();
                        let finished = p.with_log(|log| {
                            let finished = log.finish_compaction(pass, ran);
                            swap_locked = t.elapsed();
                            finished
                        });
                        swapped = t.elapsed();
                        finished
                    }
                    Err(e) => Err(e),
                };
                // The plan and the swap hold the partition's lock (what
                // produce and fetch wait for); logged so that a slow one
                // shows. swap_locked_ms is the lock's part (waiting for the
                // lock included); swap_ms also counts freeing the retired
                // files, which `with_log` does after releasing the lock.
                let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
                match outcome {
                    Ok(o) if o.abandoned => {
                        tracing::info!(topic = %p.topic, partition = p.index, "compaction pass abandoned: the log changed while it ran")
                    }
                    Ok(o) => tracing::debug!(
                        topic = %p.topic,
                        partition = p.index,
                        plan_ms = ms(planned),
                        pass_ms = ms(ran_for),
                        swap_ms = ms(swapped),
                        swap_locked_ms = ms(swap_locked),
                        segments_rewritten = o.segments_rewritten,
                        segments_deleted = o.segments_deleted,
                        "compaction pass"
                    ),
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "compaction failed")
                    }
                }
            }
        }
    }

    /// Clean shutdown: closes every partition's log in place (see
    /// [`PartitionLog::close_in_place`]: fsync what changed, checkpoints,
    /// clean-shutdown marker), on up to [`CLOSE_THREADS`] threads at once.
    /// The work is fsyncs, which the filesystem batches into shared journal
    /// commits when they come from many threads, so a broker with thousands
    /// of partitions closes in seconds instead of one fsync after another.
    /// Logs refuse appends once closed, so a request still in flight cannot
    /// write behind a marker.
    pub fn close(&self) {
        let partitions: Vec<Arc<Partition>> = self
            .all()
            .iter()
            .flat_map(|t| t.partitions.iter().cloned())
            .collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failed = std::sync::atomic::AtomicUsize::new(0);
        let work = || loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(p) = partitions.get(i) else { break };
            if let Err(e) = p.close_log() {
                failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "closing log failed; the next start recovers it");
            }
        };
        let threads = CLOSE_THREADS.min(partitions.len());
        std::thread::scope(|scope| {
            for n in 1..threads {
                let spawned = std::thread::Builder::new()
                    .name(format!("moldau-close-{n}"))
                    .spawn_scoped(scope, work);
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot start another thread to close logs");
                    break;
                }
            }
            work();
        });
        tracing::info!(
            partitions = partitions.len(),
            failed = failed.into_inner(),
            "logs closed"
        );
        // the closed logs' high watermarks no longer move
        self.checkpoint_high_watermarks();
    }
}

/// At most this many threads close logs at shutdown.
pub const CLOSE_THREADS: usize = 16;

fn open_partition(
    data_dir: &Path,
    high_watermarks: &Arc<HighWatermarks>,
    meta: &TopicMeta,
    index: i32,
    cfg: storage::LogConfig,
) -> Result<Partition, TopicError> {
    let dir = partition_dir(data_dir, &meta.name, index);
    let marker = dir.join(PARTITION_METADATA);
    let expected = format!("version: 0\ntopic_id: {}\n", meta.id);
    match std::fs::read_to_string(&marker) {
        Ok(found) if found != expected => {
            // A directory left by an earlier topic of the same name.
            tracing::warn!(dir = %dir.display(), "removing stale partition of an earlier topic");
            std::fs::remove_dir_all(&dir).map_err(TopicError::from_io)?;
        }
        _ => {}
    }
    let p = Partition::open(meta, index, dir.clone(), cfg, Arc::clone(high_watermarks))?;
    if !marker.exists() {
        crate::metadata::write_atomically(&marker, expected.as_bytes())
            .map_err(TopicError::from_io)?;
    }
    Ok(p)
}

/// Opens (creating when new) the partitions `jobs` on up to `threads`
/// threads, answering in the order of `jobs`; with `stop_at_error`, after
/// a failure no further one is started (`None`). A new partition costs
/// fsyncs (its directory entry, its `partition.metadata`, its directory):
/// one after the other they made a CreateTopics of 1,000 partitions take
/// seconds on a busy disk. Here the directory entries share one fsync and
/// the rest run side by side, which the file system's journal commits
/// together.
fn open_partitions(
    data_dir: &Path,
    high_watermarks: &Arc<HighWatermarks>,
    jobs: &[(&TopicMeta, i32, &storage::LogConfig)],
    threads: usize,
    stop_at_error: bool,
) -> Vec<Option<Result<Partition, TopicError>>> {
    // New directories first, with one fsync of the data directory for all
    // of them (each log would otherwise fsync it for its own, and those
    // fsyncs of one directory run one at a time). A directory that cannot
    // be made is that partition's error, with the same code and hint (out
    // of descriptors, disk full) as any other storage error.
    let storage_error = |e: std::io::Error| TopicError::from(StorageError::Io(e));
    let mut made = false;
    let not_made: Vec<Option<TopicError>> = jobs
        .iter()
        .map(|&(meta, index, _)| {
            let dir = partition_dir(data_dir, &meta.name, index);
            if dir.is_dir() {
                return None;
            }
            match std::fs::create_dir_all(&dir) {
                Ok(()) => {
                    made = true;
                    None
                }
                Err(e) => Some(storage_error(e)),
            }
        })
        .collect();
    if made {
        if let Err(e) = crate::storage::checkpoint::fsync_dir(data_dir) {
            let e = storage_error(e);
            return jobs.iter().map(|_| Some(Err(e.clone()))).collect();
        }
    }
    let opened: Vec<Mutex<Option<Result<Partition, TopicError>>>> =
        jobs.iter().map(|_| Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let work = || loop {
        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(&(meta, index, cfg)) = jobs.get(k) else {
            break;
        };
        if failed.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let result = match not_made.get(k).cloned().flatten() {
            Some(e) => Err(e),
            None => open_partition(data_dir, high_watermarks, meta, index, cfg.clone()),
        };
        if result.is_err() && stop_at_error {
            failed.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        *opened[k].lock() = Some(result);
    };
    let threads = threads.min(jobs.len()).max(1);
    std::thread::scope(|scope| {
        for n in 1..threads {
            let spawned = std::thread::Builder::new()
                .name(format!("moldau-open-{n}"))
                .spawn_scoped(scope, work);
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start another thread to open logs");
                break;
            }
        }
        work();
    });
    opened.into_iter().map(Mutex::into_inner).collect()
}

/// At most this many threads open the logs of new partitions (CreateTopics,
/// CreatePartitions, an assignment from the controller): their work is
/// mostly waiting for fsyncs.
const CREATE_THREADS: usize = 8;

/// The opened partitions of `jobs` (new ones: a creation), or the first
/// error.
fn open_all(
    data_dir: &Path,
    high_watermarks: &Arc<HighWatermarks>,
    jobs: &[(&TopicMeta, i32, &storage::LogConfig)],
) -> Result<Vec<Partition>, TopicError> {
    let mut out = Vec::with_capacity(jobs.len());
    for (slot, (meta, index, _)) in
        open_partitions(data_dir, high_watermarks, jobs, CREATE_THREADS, true)
            .into_iter()
            .zip(jobs)
    {
        match slot {
            Some(Ok(p)) => out.push(p),
            Some(Err(e)) => {
                // e.g. out of file descriptors or space: the client sees
                // only KAFKA_STORAGE_ERROR, whoever runs the broker needs
                // the cause
                tracing::warn!(topic = %meta.name, partition = index, error = %e.message, "cannot create the topic's logs");
                return Err(e);
            }
            None => {}
        }
    }
    Ok(out)
}

/// Opens every held partition of every topic of `doc` at start, on up to
/// `num.recovery.threads.per.data.dir` threads (Moldau has one data
/// directory): recovery is reads and CRCs of separate directories, so
/// partitions recover side by side. The caller runs off the async runtime's
/// workers (the server calls this through `spawn_blocking`).
fn open_topics(
    data_dir: &Path,
    high_watermarks: &Arc<HighWatermarks>,
    doc: &MetadataDoc,
    broker: &BrokerConfig,
) -> Result<BTreeMap<String, Arc<Topic>>, TopicError> {
    let metas: Vec<&TopicMeta> = doc.topics.values().collect();
    let configs: Vec<storage::LogConfig> = metas
        .iter()
        .map(|m| topic_config::log_config(&m.configs, broker))
        .collect();
    let jobs: Vec<(usize, i32)> = metas
        .iter()
        .enumerate()
        .flat_map(|(t, m)| m.held_partitions().into_iter().map(move |i| (t, i)))
        .collect();
    let opened = open_partitions(
        data_dir,
        high_watermarks,
        &jobs
            .iter()
            .map(|&(t, index)| (metas[t], index, &configs[t]))
            .collect::<Vec<_>>(),
        broker.num_recovery_threads_per_data_dir,
        true,
    );
    let mut partitions: Vec<Vec<Arc<Partition>>> = metas.iter().map(|_| Vec::new()).collect();
    for (&(t, _), slot) in jobs.iter().zip(opened) {
        match slot {
            Some(Ok(p)) => partitions[t].push(Arc::new(p)),
            Some(Err(e)) => return Err(e),
            // not opened: another partition failed first
            None => {}
        }
    }
    Ok(metas
        .into_iter()
        .zip(partitions)
        .map(|(meta, partitions)| {
            let topic = Topic {
                meta: meta.clone(),
                partitions,
            };
            (meta.name.clone(), Arc::new(topic))
        })
        .collect())
}

fn open_topic(
    data_dir: &Path,
    high_watermarks: &Arc<HighWatermarks>,
    meta: &TopicMeta,
    broker: &BrokerConfig,
) -> Result<Topic, TopicError> {
    let cfg = topic_config::log_config(&meta.configs, broker);
    let jobs: Vec<_> = meta
        .held_partitions()
        .into_iter()
        .map(|i| (meta, i, &cfg))
        .collect();
    let partitions = open_all(data_dir, high_watermarks, &jobs)?
        .into_iter()
        .map(Arc::new)
        .collect();
    Ok(Topic {
        meta: meta.clone(),
        partitions,
    })
}

/// Completes deletions interrupted by a crash or a full disk: a topic whose
/// id names a `-delete` directory is dropped from `doc` (persisted after the
/// deleted data is removed, so this works on a full disk), then the
/// `-delete` directories are removed (in the background when the document
/// did not need rewriting).
fn finish_deletions(
    data_dir: &Path,
    file: &dyn MetadataStore,
    doc: &mut MetadataDoc,
) -> std::io::Result<()> {
    let pending = find_delete_dirs(data_dir)?;
    if pending.is_empty() {
        return Ok(());
    }
    let ids: std::collections::HashSet<Uuid> = pending.iter().map(|(_, id)| *id).collect();
    let before = doc.topics.len();
    doc.topics.retain(|name, t| {
        let deleting = ids.contains(&t.id);
        if deleting {
            tracing::warn!(topic = %name, id = %t.id, "completing an interrupted topic deletion");
        }
        !deleting
    });
    let dirs: Vec<PathBuf> = pending.into_iter().map(|(d, _)| d).collect();
    if doc.topics.len() == before {
        remove_dirs_in_background(dirs);
        return Ok(());
    }
    for d in &dirs {
        empty_dir(d);
    }
    match file.save(doc) {
        Ok(()) => remove_dirs_in_background(dirs),
        // Still no space: the topics stay out of the live set and the empty
        // directories keep recording the deletion for the next start.
        Err(e) => {
            tracing::error!(error = %e, "cannot rewrite the metadata after completing deletions")
        }
    }
    Ok(())
}

/// Removes partition directories no topic in `doc` owns (left by a delete
/// that was interrupted, or by a partition count that was never persisted).
fn remove_orphans(data_dir: &Path, doc: &MetadataDoc) -> std::io::Result<()> {
    let mut orphans = Vec::new();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().to_string();
        let Some((topic, index)) = name.rsplit_once('-') else {
            continue;
        };
        let Ok(index) = index.parse::<i32>() else {
            continue;
        };
        let owned = doc
            .topics
            .get(topic)
            .is_some_and(|t| t.held_partitions().contains(&index));
        if !owned && entry.path().join(PARTITION_METADATA).exists() {
            tracing::warn!(dir = %entry.path().display(), "removing partition directory of a deleted topic");
            // Renamed now (cheap; a new topic of that name cannot meet
            // it), removed in the background. The random id names no
            // topic, so if a crash leaves it, the next start only removes it.
            let to = delete_dir(data_dir, topic, index, Uuid::new_v4());
            match std::fs::rename(entry.path(), &to) {
                Ok(()) => orphans.push(to),
                Err(e) => {
                    tracing::warn!(dir = %entry.path().display(), error = %e, "cannot rename an orphan; removing it now");
                    std::fs::remove_dir_all(entry.path())?;
                }
            }
        }
    }
    remove_dirs_in_background(orphans);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(m: &TopicManager) -> Vec<String> {
        m.all().iter().map(|t| t.meta.name.clone()).collect()
    }

    fn assigned(name: &str, id: Uuid, partitions: i32, held: Vec<i32>) -> Assigned {
        Assigned {
            name: name.into(),
            id,
            partitions,
            replication_factor: 1,
            configs: BTreeMap::new(),
            held,
        }
    }

    #[test]
    fn partitions_open_on_the_recovery_threads_in_order_and_count_what_they_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("open");
        for name in ["a", "b", "c"] {
            m.create(name, 5, 1, BTreeMap::new()).expect("create");
        }
        for t in m.all() {
            for p in &t.partitions {
                let b = crate::storage::test_batches::batch_of(2, 1_000, |_| {
                    (None, Some(bytes::Bytes::from_static(b"v")))
                });
                let headers = crate::storage::batch::validate_batches(&b, 1 << 20).unwrap();
                p.append(&b, &headers, None).expect("append");
            }
        }
        m.close();
        drop(m);
        for threads in [1, 4] {
            let broker = BrokerConfig {
                num_recovery_threads_per_data_dir: threads,
                ..BrokerConfig::default()
            };
            let m = TopicManager::open(dir.path(), broker).expect("reopen");
            let all = m.all();
            assert_eq!(all.len(), 3);
            for t in &all {
                assert_eq!(
                    t.partitions.iter().map(|p| p.index).collect::<Vec<_>>(),
                    [0, 1, 2, 3, 4]
                );
                for p in &t.partitions {
                    assert_eq!(p.offsets().log_end, 2);
                }
            }
            let stats = m.recovery_stats();
            assert_eq!(stats.partitions, 15);
            assert_eq!(stats.unclean_partitions, 0);
            assert_eq!(stats.bytes_read, 0);
            assert_eq!(stats.producer_snapshots_loaded, 15);
            m.close();
        }
        // After a crash every partition re-validates its only segment.
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("reopen");
        drop(m);
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("recover");
        let stats = m.recovery_stats();
        assert_eq!(stats.unclean_partitions, 15);
        assert!(stats.bytes_read > 0);
    }

    #[test]
    fn an_assignment_opens_only_the_partitions_placed_here_and_survives_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("open");
        let id = Uuid::new_v4();
        let none = std::collections::HashSet::new();
        assert!(m
            .apply_assignment(&[assigned("t", id, 6, vec![1, 4])], &none)
            .unwrap());
        let t = m.get("t").expect("held");
        assert_eq!(
            t.partitions.iter().map(|p| p.index).collect::<Vec<_>>(),
            [1, 4]
        );
        assert!(t.partition(1).is_some() && t.partition(0).is_none() && t.partition(4).is_some());
        assert!(!partition_dir(dir.path(), "t", 0).exists());
        assert!(
            !m.apply_assignment(&[assigned("t", id, 6, vec![1, 4])], &none)
                .unwrap(),
            "idempotent"
        );
        drop(t);
        drop(m);
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("reopen");
        let t = m.get("t").expect("reopened before the controller answers");
        assert_eq!(
            t.partitions.iter().map(|p| p.index).collect::<Vec<_>>(),
            [1, 4]
        );
    }

    #[test]
    fn new_partitions_open_side_by_side_and_one_failure_spares_the_others_of_an_assignment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("open");
        let none = std::collections::HashSet::new();
        // a file where partition 2's directory belongs: that one cannot open
        std::fs::write(partition_dir(dir.path(), "t", 2), b"in the way").unwrap();
        let id = Uuid::new_v4();
        let err = m
            .apply_assignment(&[assigned("t", id, 20, (0..20).collect())], &none)
            .expect_err("partition 2 cannot open");
        assert_eq!(err.code, ResponseError::KafkaStorageError);
        let t = m.get("t").expect("the others are held");
        let held: Vec<i32> = t.partitions.iter().map(|p| p.index).collect();
        assert_eq!(held, (0..20).filter(|&i| i != 2).collect::<Vec<_>>());
        // a creation is all or nothing: what it made is removed again
        std::fs::write(partition_dir(dir.path(), "c", 7), b"in the way").unwrap();
        m.create("c", 12, 1, BTreeMap::new())
            .expect_err("partition 7 cannot open");
        assert!(m.get("c").is_none());
        for i in (0..12).filter(|&i| i != 7) {
            assert!(!partition_dir(dir.path(), "c", i).exists(), "c-{i} removed");
        }
        m.create("d", 40, 1, BTreeMap::new()).expect("create");
        assert_eq!(m.get("d").unwrap().partitions.len(), 40);
        for i in 0..40 {
            assert!(partition_dir(dir.path(), "d", i)
                .join(PARTITION_METADATA)
                .is_file());
        }
    }

    #[test]
    fn local_data_goes_only_with_a_deletion_never_with_a_missing_topic() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("open");
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let none = std::collections::HashSet::new();
        m.apply_assignment(
            &[assigned("a", a, 1, vec![0]), assigned("b", b, 1, vec![0])],
            &none,
        )
        .unwrap();
        // b missing from the metadata (say, its object was broken by hand)
        m.apply_assignment(&[assigned("a", a, 1, vec![0])], &none)
            .unwrap();
        assert!(m.get("b").is_some(), "kept");
        assert!(partition_dir(dir.path(), "b", 0).exists());
        // b deleted by the controller
        m.apply_assignment(&[assigned("a", a, 1, vec![0])], &[b].into())
            .unwrap();
        assert!(m.get("b").is_none(), "deleted");
        // a new topic named a while a was not deleted: a's data is kept
        let a2 = Uuid::new_v4();
        m.apply_assignment(&[assigned("a", a2, 1, vec![0])], &none)
            .unwrap();
        assert_eq!(
            m.get("a").map(|t| t.meta.id),
            Some(a),
            "kept; the new one waits"
        );
        // once a is deleted, the new one opens
        m.apply_assignment(&[assigned("a", a2, 1, vec![0])], &[a].into())
            .unwrap();
        assert_eq!(m.get("a").map(|t| t.meta.id), Some(a2));
    }

    #[test]
    fn a_deletion_interrupted_after_its_first_rename_completes_at_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("open");
        m.create("gone", 2, 1, BTreeMap::new()).expect("create");
        m.create("kept", 1, 1, BTreeMap::new()).expect("create");
        let id = m.get("gone").expect("gone").meta.id;
        drop(m);
        // A crash right after the commit point: one partition renamed, the
        // metadata document still naming the topic.
        std::fs::rename(
            partition_dir(dir.path(), "gone", 0),
            delete_dir(dir.path(), "gone", 0, id),
        )
        .expect("rename");
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("reopen");
        assert_eq!(names(&m), ["kept"], "not resurrected, others kept");
        drop(m);
        let doc = MetadataFile::new(dir.path()).load_or_init().expect("doc");
        assert!(!doc.topics.contains_key("gone"), "persisted");
        assert!(doc.topics.contains_key("kept"));
        for _ in 0..500 {
            let left = std::fs::read_dir(dir.path())
                .expect("ls")
                .filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with("gone-"));
            if !left {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("directories of the deleted topic remain");
    }

    #[test]
    fn a_delete_dir_of_an_older_topic_does_not_delete_a_new_one_of_the_same_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("open");
        let old = m
            .create("t", 1, 1, BTreeMap::new())
            .expect("create")
            .meta
            .id;
        m.delete("t").expect("delete");
        // Leave a -delete directory of the old topic behind.
        std::fs::create_dir_all(delete_dir(dir.path(), "t", 0, old)).expect("mkdir");
        let new = m
            .create("t", 1, 1, BTreeMap::new())
            .expect("recreate")
            .meta
            .id;
        assert_ne!(old, new);
        drop(m);
        let m = TopicManager::open(dir.path(), BrokerConfig::default()).expect("reopen");
        assert_eq!(m.get("t").map(|t| t.meta.id), Some(new));
        assert!(parse_delete_dir(&format!("a.b-c-7.{}-delete", new.as_simple())) == Some(new));
        assert_eq!(parse_delete_dir("t-0"), None);
    }
}
