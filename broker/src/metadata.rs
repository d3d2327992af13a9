//! The standalone metadata store: the cluster id and every topic's id,
//! partition count, replication factor and config overrides, kept in one
//! JSON document in the data directory and replaced atomically on each
//! change (temp file, fsync, rename, fsync directory).
//!
//! It owns only that file; the topics' logs belong to `topics`/`storage`.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Everything the broker knows about one topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
    /// Cluster mode: the partitions whose replicas this broker holds (the
    /// controller places them). `None`: every partition (standalone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Vec<i32>>,
}

impl TopicMeta {
    /// The partitions whose logs this broker keeps.
    pub fn held_partitions(&self) -> Vec<i32> {
        match &self.held {
            Some(held) => held.clone(),
            None => (0..self.partitions.max(0)).collect(),
        }
    }
}

/// The persisted metadata document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetadataDoc {
    pub cluster_id: String,
    pub topics: BTreeMap<String, TopicMeta>,
    /// Producer ids below this may have been handed out.
    #[serde(default)]
    pub producer_id_block_end: i64,
}

/// Where a standalone broker keeps its metadata document ([`MetadataFile`]
/// in the data directory). In cluster mode the same document records which
/// partitions this broker holds, so a restart reopens them before the
/// controller answers; the cluster's own metadata is kept by the controller,
/// one object per record (`controller::store`).
pub trait MetadataStore: std::fmt::Debug + Send + Sync {
    /// Loads the document, or a fresh one with a new cluster id.
    fn load_or_init(&self) -> std::io::Result<MetadataDoc>;
    /// Replaces the document atomically: after a crash, the old one or
    /// the new one is read back, never a mix.
    fn save(&self, doc: &MetadataDoc) -> std::io::Result<()>;
}

impl MetadataStore for MetadataFile {
    fn load_or_init(&self) -> std::io::Result<MetadataDoc> {
        MetadataFile::load_or_init(self)
    }
    fn save(&self, doc: &MetadataDoc) -> std::io::Result<()> {
        MetadataFile::save(self, doc)
    }
}

/// Reads and writes the metadata document of a data directory.
#[derive(Debug, Clone)]
pub struct MetadataFile {
    path: PathBuf,
}

pub const METADATA_FILE_NAME: &str = "moldau-metadata.json";

impl MetadataFile {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            path: data_dir.join(METADATA_FILE_NAME),
        }
    }

    /// Loads the document, or a fresh one with a new cluster id.
    pub fn load_or_init(&self) -> std::io::Result<MetadataDoc> {
        match fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", self.path.display()),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let doc = MetadataDoc {
                    cluster_id: new_cluster_id(),
                    topics: BTreeMap::new(),
                    producer_id_block_end: 0,
                };
                self.save(&doc)?;
                Ok(doc)
            }
            Err(e) => Err(e),
        }
    }

    pub fn save(&self, doc: &MetadataDoc) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(doc).map_err(std::io::Error::other)?;
        write_atomically(&self.path, &bytes)
    }
}

/// A Kafka-style cluster id: 16 random bytes, URL-safe base64 without padding.
pub fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = Uuid::new_v4().into_bytes();
    let mut out = String::with_capacity(22);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in bytes {
        acc = (acc << 8) | b as u32;
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(ALPHABET[((acc >> bits) & 63) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (6 - bits)) & 63) as usize] as char);
    }
    out
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the
/// new content: write a temp file, fsync it, rename, fsync the directory.
/// The file is readable by the broker's user only (0600): among these
/// files are a standalone broker's SCRAM credentials and ACLs.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension("tmp");
    // a leftover temp file would keep its own mode
    let _ = fs::remove_file(&tmp);
    let created = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp);
    let written = created.and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    if let Err(e) = written {
        // A full disk: the old file is intact; do not leave a partial temp
        // file holding space behind.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

/// Kafka's topic name rules: 1–249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name {name:?} is not allowed"));
    }
    if name.len() > 249 {
        return Err(format!(
            "topic name is {} characters long; the limit is 249",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '.' || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "topic name {name:?} contains {c:?}; only [a-zA-Z0-9._-] are allowed"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn atomically_written_files_are_the_brokers_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acls.json");
        std::fs::write(path.with_extension("tmp"), b"left over").unwrap();
        write_atomically(&path, b"{}").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
    }

    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_x-y").is_ok());
        for bad in ["", ".", "..", "a b", "a/b", "é", &"x".repeat(250)] {
            assert!(validate_topic_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_topic_name(&"x".repeat(249)).is_ok());
    }

    #[test]
    fn metadata_round_trips_and_keeps_cluster_id() {
        let dir = tempfile::tempdir().unwrap();
        let f = MetadataFile::new(dir.path());
        let mut doc = f.load_or_init().unwrap();
        assert_eq!(doc.cluster_id.len(), 22);
        doc.topics.insert(
            "t".into(),
            TopicMeta {
                name: "t".into(),
                id: Uuid::new_v4(),
                partitions: 3,
                replication_factor: 1,
                configs: [("retention.ms".to_string(), "5".to_string())].into(),
                held: None,
            },
        );
        f.save(&doc).unwrap();
        assert_eq!(f.load_or_init().unwrap(), doc);
    }
}
