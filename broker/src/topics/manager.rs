//! The topic manager's registry: the live set of topics this broker holds
//! and their lookup, the broker config it opens logs with (static, and
//! effective with the dynamic broker configs laid over it), the metadata
//! document every change is persisted to, and the producer id blocks
//! persisted with it. Opening it recovers every held partition and
//! completes deletions a crash interrupted.
//!
//! The operations that change the set are in `admin` and `assignment`,
//! the periodic work over it in `maintenance`; they reach the fields here,
//! which are private to `topics`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::{Mutex, RwLock};
use uuid::Uuid;

use super::dirs::{finish_deletions, remove_orphans};
use super::open::open_topics;
use super::topic::Topic;
use crate::config::BrokerConfig;
use crate::error::TopicError;
use crate::metadata::{MetadataDoc, MetadataFile, MetadataStore};
use crate::partition::Partition;
use crate::producer::ids::ProducerIdBlocks;
use crate::storage::cleaner::Throttle;
use crate::storage::high_watermarks::HighWatermarks;
use crate::topic_config;

/// The live topics of this broker.
#[derive(Debug)]
pub struct TopicManager {
    /// The broker's static properties, as loaded.
    pub(super) broker: BrokerConfig,
    /// With the dynamic broker configs of the current image laid over them.
    pub(super) effective: RwLock<Arc<BrokerConfig>>,
    pub(super) data_dir: PathBuf,
    /// The controller's metadata store (standalone: the data directory's file).
    pub(super) file: Box<dyn MetadataStore>,
    pub(super) cluster_id: String,
    pub(super) topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// Serialises admin changes so each persisted document is consistent.
    pub(super) admin: Mutex<()>,
    /// Producer id blocks; its persisted end is part of the metadata document.
    pub(super) producer_ids: Mutex<ProducerIdBlocks>,
    /// What opening the logs at start had to recover.
    pub(super) recovery: RecoveryStats,
    /// `log.cleaner.io.max.bytes.per.second`, shared by every pass.
    pub(super) cleaner_throttle: Throttle,
    /// The data directory's high watermark checkpoint.
    pub(super) high_watermarks: Arc<HighWatermarks>,
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

    pub(super) fn persist(&self, topics: &BTreeMap<String, Arc<Topic>>) -> Result<(), TopicError> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
