//! Opening partitions' logs: at start (every held partition, on the
//! recovery threads), and for a creation or an assignment (new partitions
//! side by side, their directory entries sharing one fsync).
//!
//! A partition directory holds a `partition.metadata` marker naming its
//! topic id; a directory left by an earlier topic of the same name is
//! removed before the new one opens.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use super::dirs::{partition_dir, PARTITION_METADATA};
use super::topic::Topic;
use crate::config::BrokerConfig;
use crate::error::TopicError;
use crate::metadata::{MetadataDoc, TopicMeta};
use crate::partition::Partition;
use crate::storage::high_watermarks::HighWatermarks;
use crate::storage::{self, StorageError};
use crate::topic_config;

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
pub(super) fn open_partitions(
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
pub(super) const CREATE_THREADS: usize = 8;

/// The opened partitions of `jobs` (new ones: a creation), or the first
/// error.
pub(super) fn open_all(
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
pub(super) fn open_topics(
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

pub(super) fn open_topic(
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
