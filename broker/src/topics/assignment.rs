//! Cluster mode: making the local logs match what the controller placed on
//! this broker ([`TopicManager::apply_assignment`] over the image's
//! [`Assigned`] topics). A topic then holds only some of its partitions;
//! local data goes only with a deletion the controller announced, never
//! because a topic is missing from the metadata.

use std::collections::BTreeMap;
use std::sync::Arc;

use uuid::Uuid;

use super::dirs::{delete_dir, remove_dirs_in_background};
use super::manager::TopicManager;
use super::open::{open_partitions, CREATE_THREADS};
use super::topic::Topic;
use crate::error::TopicError;
use crate::image::Assigned;
use crate::metadata::TopicMeta;
use crate::topic_config;

impl TopicManager {
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
}

#[cfg(test)]
mod tests {
    use kafka_protocol::error::ResponseError;

    use super::*;
    use crate::config::BrokerConfig;
    use crate::topics::dirs::{partition_dir, PARTITION_METADATA};

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
}
