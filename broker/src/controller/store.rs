//! Where the active controller persists cluster metadata: one record per
//! object (the cluster record, one per topic), every write a
//! compare-and-swap on the version the controller last read, and every
//! write stamped with the controller's epoch so that a deposed controller
//! is refused ([`StoreError::Fenced`]) rather than overwriting its
//! successor.
//!
//! Two implementations: Kubernetes objects (cluster mode, the
//! `MetadataShard` resources of `moldau_coordination::store`, adapted in
//! [`super::kube_store`]), and [`DirStore`], the same scheme over files in
//! one directory, for a controller whose brokers share a host (`--cluster
//! dir`: local clusters and tests).

use std::path::{Path, PathBuf};

use moldau_coordination::records::{ClusterRecord, TopicRecord};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// Why a write did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// Someone wrote the object since we read it (compare-and-swap lost).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A newer controller has written; this one must stop acting.
    #[error("fenced: {0}")]
    Fenced(String),
    /// The store cannot be reached or failed.
    #[error("{0}")]
    Unavailable(String),
}

/// What a controller finds when it takes over: its epoch (one above every
/// earlier one) and the metadata with each object's version.
#[derive(Debug, Clone, Default)]
pub struct Resumed {
    pub epoch: i64,
    pub cluster: ClusterRecord,
    /// The controller the cluster record named before this term (`None`
    /// for a new cluster).
    pub previous_controller: Option<i32>,
    pub cluster_version: String,
    pub topics: Vec<(TopicRecord, String)>,
    /// Objects that could not be trusted (reported, never overwritten):
    /// `(object, reason)`.
    pub invalid: Vec<(String, String)>,
}

/// The writes of one controller term (its epoch is bound in).
#[tonic::async_trait]
pub trait ClusterStore: Send + Sync + 'static {
    /// Creates (`expected` = None) or replaces a topic record; returns the
    /// new version.
    async fn put_topic(
        &self,
        t: &TopicRecord,
        expected: Option<&str>,
    ) -> Result<String, StoreError>;
    async fn delete_topic(&self, name: &str, expected: &str) -> Result<(), StoreError>;
    /// Replaces the cluster record; returns the new version.
    async fn put_cluster(&self, c: &ClusterRecord, expected: &str) -> Result<String, StoreError>;
}

#[derive(Debug, Serialize, Deserialize)]
struct Stored<T> {
    epoch: i64,
    version: u64,
    record: T,
}

/// Cluster metadata as files in one directory: `cluster.json` and
/// `topics/<hex of the topic name>.json`, each replaced atomically, with a
/// version and the writer's epoch in every file. The compare-and-swap is
/// exact across the processes sharing the directory: every
/// read–check–write (and a take-over's stamping) holds an exclusive
/// `flock` on `store.lock`, so a deposed controller that resumes between
/// its check and its write cannot slip a write past its successor's
/// take-over.
#[derive(Debug)]
pub struct DirStore {
    dir: PathBuf,
    epoch: i64,
    lock: Mutex<()>,
}

/// Holds the directory's store lock (and this process's) until dropped.
struct Exclusive<'a> {
    _process: parking_lot::MutexGuard<'a, ()>,
    _file: std::fs::File,
}

fn lock_dir(dir: &Path) -> Result<std::fs::File, StoreError> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("store.lock"))
        .map_err(io)?;
    // SAFETY: flock on a descriptor we own; it is held for a few file
    // operations, and released when the file is dropped.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io(std::io::Error::last_os_error()));
    }
    Ok(file)
}

fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn hex(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<Stored<T>>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(e)),
    }
}

impl DirStore {
    /// Takes the store over for a new term: bumps the epoch in
    /// `cluster.json` (creating it with a fresh cluster id), stamps every
    /// topic file with it, and returns what is there.
    pub fn take_over(
        dir: &Path,
        controller_id: i32,
        controller_address: &str,
    ) -> Result<(Self, Resumed), StoreError> {
        std::fs::create_dir_all(dir.join("topics")).map_err(io)?;
        let _exclusive = lock_dir(dir)?;
        let cluster_path = dir.join("cluster.json");
        let previous: Option<Stored<ClusterRecord>> = read(&cluster_path)?;
        let previous_controller = previous.as_ref().map(|s| s.record.controller_id);
        let (epoch, version, mut cluster) = match previous {
            Some(s) => (s.epoch + 1, s.version + 1, s.record),
            None => (
                1,
                1,
                ClusterRecord {
                    cluster_id: crate::metadata::new_cluster_id(),
                    ..Default::default()
                },
            ),
        };
        cluster.controller_id = controller_id;
        cluster.controller_address = controller_address.to_string();
        let store = Self {
            dir: dir.to_path_buf(),
            epoch,
            lock: Mutex::new(()),
        };
        store.write(&cluster_path, version, &cluster)?;
        let mut resumed = Resumed {
            epoch,
            cluster,
            previous_controller,
            cluster_version: version.to_string(),
            ..Default::default()
        };
        for entry in std::fs::read_dir(dir.join("topics")).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let stored: Stored<TopicRecord> = match read(&path) {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => {
                    resumed
                        .invalid
                        .push((path.display().to_string(), e.to_string()));
                    continue;
                }
            };
            if let Err(e) = stored.record.validate() {
                resumed
                    .invalid
                    .push((path.display().to_string(), e.to_string()));
                continue;
            }
            let version = stored.version + 1;
            store.write(&path, version, &stored.record)?;
            resumed.topics.push((stored.record, version.to_string()));
        }
        resumed.topics.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        Ok((store, resumed))
    }

    /// The cluster record as it is now (brokers read where the controller
    /// is from it): `(epoch, record)`.
    pub fn read_cluster(dir: &Path) -> Result<Option<(i64, ClusterRecord)>, StoreError> {
        let stored: Option<Stored<ClusterRecord>> = read(&dir.join("cluster.json"))?;
        Ok(stored.map(|s| (s.epoch, s.record)))
    }

    fn exclusive(&self) -> Result<Exclusive<'_>, StoreError> {
        let process = self.lock.lock();
        Ok(Exclusive {
            _process: process,
            _file: lock_dir(&self.dir)?,
        })
    }

    fn topic_path(&self, name: &str) -> PathBuf {
        self.dir.join("topics").join(format!("{}.json", hex(name)))
    }

    fn write<T: Serialize>(&self, path: &Path, version: u64, record: &T) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(&Stored {
            epoch: self.epoch,
            version,
            record,
        })
        .map_err(io)?;
        crate::metadata::write_atomically(path, &bytes).map_err(io)
    }

    /// Checks the object at `path` is at `expected` (None: absent) and
    /// that neither it nor the cluster record was written by a newer term
    /// (the cluster record covers objects a newer term has not stamped,
    /// such as a topic being created); returns the next version.
    fn check<T: for<'de> Deserialize<'de>>(
        &self,
        path: &Path,
        expected: Option<&str>,
    ) -> Result<u64, StoreError> {
        let cluster: Option<Stored<ClusterRecord>> = read(&self.dir.join("cluster.json"))?;
        if let Some(c) = cluster.filter(|c| c.epoch > self.epoch) {
            return Err(StoreError::Fenced(format!(
                "controller epoch {} has taken over; ours is {}",
                c.epoch, self.epoch
            )));
        }
        let current: Option<Stored<T>> = read(path)?;
        if let Some(c) = &current {
            if c.epoch > self.epoch {
                return Err(StoreError::Fenced(format!(
                    "{} was written by controller epoch {}; ours is {}",
                    path.display(),
                    c.epoch,
                    self.epoch
                )));
            }
        }
        let have = current.as_ref().map(|c| c.version.to_string());
        if have.as_deref() != expected {
            return Err(StoreError::Conflict(format!(
                "{}: expected version {expected:?}, found {have:?}",
                path.display()
            )));
        }
        Ok(current.map_or(1, |c| c.version + 1))
    }
}

#[tonic::async_trait]
impl ClusterStore for DirStore {
    async fn put_topic(
        &self,
        t: &TopicRecord,
        expected: Option<&str>,
    ) -> Result<String, StoreError> {
        let path = self.topic_path(&t.name);
        let _guard = self.exclusive()?;
        let version = self.check::<TopicRecord>(&path, expected)?;
        self.write(&path, version, t)?;
        Ok(version.to_string())
    }

    async fn delete_topic(&self, name: &str, expected: &str) -> Result<(), StoreError> {
        let path = self.topic_path(name);
        let _guard = self.exclusive()?;
        self.check::<TopicRecord>(&path, Some(expected))?;
        std::fs::remove_file(&path).map_err(io)?;
        crate::storage::checkpoint::fsync_dir(&self.dir.join("topics")).map_err(io)
    }

    async fn put_cluster(&self, c: &ClusterRecord, expected: &str) -> Result<String, StoreError> {
        let path = self.dir.join("cluster.json");
        let _guard = self.exclusive()?;
        let version = self.check::<ClusterRecord>(&path, Some(expected))?;
        self.write(&path, version, c)?;
        Ok(version.to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use moldau_coordination::records::PartitionRecord;

    use super::*;

    fn topic(name: &str) -> TopicRecord {
        TopicRecord {
            name: name.into(),
            topic_id: uuid::Uuid::new_v4().to_string(),
            replication_factor: 1,
            configs: BTreeMap::new(),
            partitions: vec![PartitionRecord {
                index: 0,
                replicas: vec![0],
                isr: vec![0],
                leader: 0,
                leader_epoch: 0,
                partition_epoch: 0,
                adding_replicas: vec![],
                removing_replicas: vec![],
                eligible_leader_replicas: vec![],
            }],
        }
    }

    #[tokio::test]
    async fn a_new_term_resumes_and_fences_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let (first, resumed) = DirStore::take_over(dir.path(), 0, "http://127.0.0.1:1").unwrap();
        assert_eq!(resumed.epoch, 1);
        let v = first.put_topic(&topic("a.B_c"), None).await.unwrap();
        // a stale version loses the compare-and-swap
        assert!(matches!(
            first.put_topic(&topic("a.B_c"), None).await,
            Err(StoreError::Conflict(_))
        ));
        let (second, resumed) = DirStore::take_over(dir.path(), 1, "http://127.0.0.1:2").unwrap();
        assert_eq!(resumed.epoch, 2);
        assert_eq!(resumed.cluster.controller_id, 1);
        assert_eq!(resumed.topics.len(), 1);
        let (t, stamped) = &resumed.topics[0];
        assert_ne!(stamped, &v, "take-over stamps every object");
        // the old term is refused on every object the new one stamped
        assert!(matches!(
            first.put_topic(t, Some(stamped)).await,
            Err(StoreError::Fenced(_))
        ));
        assert!(matches!(
            first
                .put_cluster(&resumed.cluster, &resumed.cluster_version)
                .await,
            Err(StoreError::Fenced(_))
        ));
        second.delete_topic(&t.name, stamped).await.unwrap();
        let (_, third) = DirStore::take_over(dir.path(), 2, "x").unwrap();
        assert!(third.topics.is_empty());
        assert_eq!(third.cluster.cluster_id, resumed.cluster.cluster_id);
    }

    #[tokio::test]
    async fn an_invalid_record_is_reported_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = DirStore::take_over(dir.path(), 0, "x").unwrap();
        let mut bad = topic("bad");
        bad.partitions[0].leader = 7;
        store.put_topic(&bad, None).await.unwrap();
        let path = store.topic_path("bad");
        let before = std::fs::read(&path).unwrap();
        let (_, resumed) = DirStore::take_over(dir.path(), 0, "x").unwrap();
        assert_eq!(resumed.invalid.len(), 1, "{:?}", resumed.invalid);
        assert!(resumed.topics.is_empty());
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }
}
