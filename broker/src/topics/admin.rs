//! The topic manager's admin operations (CreateTopics, DeleteTopics,
//! CreatePartitions, AlterConfigs and IncrementalAlterConfigs, and
//! auto-creation on first use): each validates, changes the logs on disk,
//! persists the metadata document, and only then makes the change visible,
//! all under the manager's admin lock.
//!
//! A creation of a topic or partitions that fails half-way (a full disk, no
//! file descriptors left) removes the partition directories it created, so
//! the request fails as a whole and can be retried. A deletion follows the
//! crash-safe protocol of `dirs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::dirs::{delete_dir, empty_dir, remove_created, remove_dirs_in_background};
use super::manager::TopicManager;
use super::open::{open_all, open_topic};
use super::topic::Topic;
use crate::error::TopicError;
use crate::metadata::{validate_topic_name, TopicMeta};
use crate::storage;
use crate::topic_config;

/// How an IncrementalAlterConfigs entry changes a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterOp {
    Set,
    Delete,
    Append,
    Subtract,
}

impl TopicManager {
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
    pub(super) fn delete_locked(&self, name: &str) -> Result<Uuid, TopicError> {
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
}
