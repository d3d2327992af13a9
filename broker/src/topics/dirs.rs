//! The data directory's layout of partition directories, and the on-disk
//! record of topic deletions.
//!
//! **Deleting a topic** (crash-safe, and possible on a full disk; the
//! steps run in [`TopicManager::delete`](super::TopicManager::delete)):
//! 1. every partition directory `<topic>-<p>` is renamed to
//!    `<topic>-<p>.<topic id>-delete` (a rename needs no free space). The
//!    first rename is the commit point: from then on the deletion completes
//!    even across a crash, because at start any topic whose id names a
//!    `-delete` directory is dropped from the metadata (roll forward,
//!    [`finish_deletions`]), so a half-deleted topic never comes back, and
//!    other topics are untouched;
//! 2. the topic leaves the in-memory map and the metadata document is
//!    rewritten without it (temp file + rename, so a failure leaves the old
//!    document whole). If that fails (no space for the temp file), the
//!    files inside the `-delete` directories are removed first — freeing
//!    the space — and the rewrite is retried; the empty `-delete`
//!    directories stay as the record of the deletion until it succeeds;
//! 3. the `-delete` directories are removed by a background thread (and
//!    any left over are removed at the next start).
//!
//! File operations only: which topics exist is the manager's to say.

use std::path::{Path, PathBuf};

use uuid::Uuid;

use crate::metadata::{MetadataDoc, MetadataStore};

pub(super) fn partition_dir(data_dir: &Path, topic: &str, index: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{index}"))
}

/// Suffix of a partition directory being deleted.
pub const DELETE_DIR_SUFFIX: &str = "-delete";

/// `<topic (at most 150 characters)>-<index>.<topic id, 32 hex>-delete`:
/// the id says which topic's deletion it records (a new topic of the same
/// name has another id), and the name stays under 255 bytes.
pub(super) fn delete_dir(data_dir: &Path, topic: &str, index: i32, id: Uuid) -> PathBuf {
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
pub(super) fn empty_dir(dir: &Path) {
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
pub(super) fn remove_dirs_in_background(dirs: Vec<PathBuf>) {
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
pub(super) fn remove_created(data_dir: &Path, topic: &str, indexes: std::ops::Range<i32>) {
    let dirs: Vec<PathBuf> = indexes
        .map(|i| partition_dir(data_dir, topic, i))
        .filter(|d| d.exists())
        .collect();
    remove_dirs(&dirs);
}

pub(super) const PARTITION_METADATA: &str = "partition.metadata";

/// Completes deletions interrupted by a crash or a full disk: a topic whose
/// id names a `-delete` directory is dropped from `doc` (persisted after the
/// deleted data is removed, so this works on a full disk), then the
/// `-delete` directories are removed (in the background when the document
/// did not need rewriting).
pub(super) fn finish_deletions(
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
pub(super) fn remove_orphans(data_dir: &Path, doc: &MetadataDoc) -> std::io::Result<()> {
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
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::BrokerConfig;
    use crate::metadata::MetadataFile;
    use crate::topics::TopicManager;

    fn names(m: &TopicManager) -> Vec<String> {
        m.all().iter().map(|t| t.meta.name.clone()).collect()
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
