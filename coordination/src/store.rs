//! [`KubeMetadataStore`]: the controller's cluster metadata kept in
//! [`MetadataShard`] objects of one namespace, one object per record, for one
//! cluster.
//!
//! # Objects
//!
//! - `<cluster>-cluster`: the [`ClusterRecord`] (label `moldau.io/shard=cluster`).
//! - `<cluster>-topic-<sanitized>-<hash>`: one [`TopicRecord`] (label
//!   `moldau.io/shard=topic`). Kafka topic names allow `_`, `.` and upper
//!   case, Kubernetes names do not; `<sanitized>` is the name lower-cased
//!   with every other character replaced by `-` (cut so the whole name stays
//!   within 253 characters), and `<hash>` is the 32-bit FNV-1a hash of the
//!   exact topic name in 8 hex digits, so `My_Topic` and `my.topic` get
//!   different objects. FNV-1a is ten lines of code with a fixed, published
//!   definition (no crate, no seed), so the name is stable across versions
//!   and architectures; it is not a security boundary. The record's `name`
//!   field stays the authority: an object whose name is not the one its
//!   topic maps to is reported as invalid.
//!
//! Every object carries the labels `moldau.io/cluster=<cluster>` and
//! `moldau.io/shard=cluster|topic`, and in its spec the epoch and node id of
//! the controller that wrote it last.
//!
//! # Fencing
//!
//! Every write is a compare-and-swap on `resourceVersion` (a replace carrying
//! the version the writer read, or a create that fails when the object
//! exists). Beyond that, [`MetadataShard`]'s CEL rule makes the API server
//! refuse an update that lowers the epoch. [`KubeMetadataStore::take_over`]
//! bumps the epoch on the cluster object and then stamps the new epoch on
//! every topic object; from then on the server refuses every write of an
//! older controller to any of them, however long that controller was paused
//! and whatever resourceVersion it holds ([`StoreError::Fenced`]). Deletes
//! are fenced by their resourceVersion precondition: stamping changed every
//! object's version, so a version a deposed controller read before the
//! take-over no longer matches.
//!
//! Creates have no old object to compare with, so the epoch rule does not
//! fence them: a deposed controller may still create a *new* topic object
//! after the new controller listed the objects. The cluster object's
//! `stampedEpoch` (set to its epoch once a take-over has stamped every
//! valid object; one more write) tells the next take-over which objects
//! were written outside the terms it knows of: a deposed controller's late
//! create, or an object a human repaired after a take-over found it
//! invalid. Such an object is **adopted** — stamped like the others and
//! listed in [`Snapshot::adopted`] — never deleted: deleting metadata
//! would make brokers give up data, and a create that a client may have
//! been told succeeded is better kept than lost.
//!
//! # Cost in API writes
//!
//! | operation | writes | reads |
//! | --- | --- | --- |
//! | [`take_over`](KubeMetadataStore::take_over) | 2 (cluster object: epoch, then `stampedEpoch`) + 1 per topic object with an older epoch (a stamp), + 1 per lost CAS retried, + 1 Event per invalid object | 1 GET + 1 LIST per 500 objects, + 1 GET per retry |
//! | [`put_topic`](KubeMetadataStore::put_topic), [`put_cluster`](KubeMetadataStore::put_cluster), [`delete_topic`](KubeMetadataStore::delete_topic) | 1 | none (1 GET only when fenced, to report the newer epoch) |
//! | [`read_cluster`](KubeMetadataStore::read_cluster), [`read_topic`](KubeMetadataStore::read_topic) | 0 | 1 GET |
//!
//! `put_*` replace the whole object with the store's own metadata (name,
//! labels, resourceVersion); a take-over keeps the metadata it read.
//!
//! Reporting invalid objects as Events needs `create` on `events.k8s.io`
//! events in the namespace, besides `get`/`list`/`create`/`update`/`delete`
//! on `metadatashards`.
//!
//! This module owns the object names, labels and write protocol; it does not
//! decide what to write (that is the controller's job) and never retries a
//! lost CAS of a `put_*`/`delete_*` on its own (the caller re-reads and
//! re-decides).

use std::collections::BTreeMap;

use base64::Engine;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, PostParams,
    Preconditions,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};

use crate::records::{ClusterRecord, TopicRecord};
use crate::shard::{
    MetadataShard, MetadataShardSpec, Payload, CLUSTER_LABEL, SHARD_LABEL, STALE_EPOCH_MESSAGE,
};

/// Longest Kubernetes object name (a DNS subdomain).
const MAX_NAME: usize = 253;
/// Topic objects listed per page.
const PAGE: u32 = 500;
/// Topic objects stamped concurrently during a take-over.
const STAMP_CONCURRENCY: usize = 16;
/// Lost CAS retried (re-read, re-write) before giving up with `Conflict`.
const CAS_RETRIES: usize = 8;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object changed (or appeared, or disappeared) since it was read:
    /// the compare-and-swap was lost. Re-read and decide again.
    #[error("{object} changed since it was read (compare-and-swap lost)")]
    Conflict {
        /// The object name.
        object: String,
    },
    /// A newer controller has taken over: an object carries a higher epoch
    /// than ours, or the API server refused our write by the epoch rule.
    /// Stop acting as controller.
    #[error("fenced: our controller epoch {ours} is older than {}", theirs.map_or("the object's".to_string(), |t| t.to_string()))]
    Fenced {
        /// Our epoch.
        ours: i64,
        /// The newer epoch, when it could be read.
        theirs: Option<i64>,
    },
    /// An object (or a record we were asked to write) is malformed.
    #[error("invalid metadata object {object}: {reason}")]
    Invalid {
        /// The object name.
        object: String,
        /// What is wrong.
        reason: String,
    },
    /// Any other API failure (unreachable, forbidden, ...).
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

/// A record as stored, with the writer's epoch and the object's version
/// (pass it back as `expected_rv` to update it).
#[derive(Clone, Debug, PartialEq)]
pub struct Stored<T> {
    pub record: T,
    pub epoch: i64,
    pub writer: i32,
    pub resource_version: String,
}

/// What a controller resumes from after [`KubeMetadataStore::take_over`].
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Our controller epoch (stamped on every object below).
    pub epoch: i64,
    /// The cluster record, with us as controller.
    pub cluster: ClusterRecord,
    /// The controller the record named before us (`None` for a new
    /// cluster): a take-over after its Lease expired means it has been
    /// silent for a whole lease duration.
    pub previous_controller: Option<i32>,
    pub cluster_resource_version: String,
    /// Every valid topic, with its object's resourceVersion, by topic name.
    pub topics: Vec<(TopicRecord, String)>,
    /// Objects not used (and not rewritten): `(object name, reason)`.
    pub invalid: Vec<(String, String)>,
    /// Topic objects written outside the controller terms this one
    /// resumes from (their epoch is below the cluster object's
    /// `stampedEpoch`: a deposed controller's late create, or an object
    /// repaired by hand): adopted, i.e. stamped and part of the metadata.
    /// `(object name, their epoch)`.
    pub adopted: Vec<(String, i64)>,
}

/// 32-bit FNV-1a (offset basis 2166136261, prime 16777619).
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Checks a cluster name can prefix object names: a DNS-1123 label
/// (1–63 characters of `a-z`, `0-9`, `-`, alphanumeric at both ends).
pub fn validate_cluster_name(cluster: &str) -> Result<(), String> {
    let ok_chars = cluster
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ends = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    if cluster.is_empty()
        || cluster.len() > 63
        || !ok_chars
        || !ends(cluster.bytes().next())
        || !ends(cluster.bytes().last())
    {
        return Err(format!(
            "cluster name {cluster:?} is not a DNS-1123 label (1-63 characters of a-z, 0-9, '-')"
        ));
    }
    Ok(())
}

/// The name of a cluster's cluster-record object.
pub fn cluster_object_name(cluster: &str) -> String {
    format!("{cluster}-cluster")
}

/// The name of the object holding topic `topic` of `cluster`.
pub fn topic_object_name(cluster: &str, topic: &str) -> String {
    let prefix = format!("{cluster}-topic-");
    let suffix = format!("-{:08x}", fnv1a32(topic.as_bytes()));
    let room = MAX_NAME.saturating_sub(prefix.len() + suffix.len());
    let sanitized: String = topic
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(room)
        .collect();
    format!("{prefix}{sanitized}{suffix}")
}

/// A fresh Kafka cluster id: 16 random bytes (a version-4 UUID, as Kafka's
/// `Uuid.randomUuid`), URL-safe base64 without padding (22 characters),
/// never starting with `-` (Kafka avoids those: they read as CLI flags).
pub fn new_cluster_id() -> String {
    loop {
        let id = uuid::Uuid::new_v4();
        let s = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes());
        if !s.starts_with('-') {
            return s;
        }
    }
}

/// Classifies a failed write of `object` by a controller of epoch `ours`:
/// 409 (resourceVersion mismatch, or exists on create) and 404 (gone since
/// read) lose the CAS; 422 carrying the epoch rule's message is fencing;
/// any other 422 is an invalid object.
pub fn classify(object: &str, ours: i64, e: kube::Error) -> StoreError {
    match &e {
        kube::Error::Api(s) if s.code == 409 || s.code == 404 => StoreError::Conflict {
            object: object.to_string(),
        },
        kube::Error::Api(s) if s.code == 422 && s.message.contains(STALE_EPOCH_MESSAGE) => {
            StoreError::Fenced { ours, theirs: None }
        }
        kube::Error::Api(s) if s.code == 422 => StoreError::Invalid {
            object: object.to_string(),
            reason: s.message.clone(),
        },
        _ => StoreError::Api(e),
    }
}

/// A topic object's verdict during a take-over.
enum Stamp {
    /// Stamped: the topic, the new resourceVersion, and the epoch it had
    /// when that was below `stampedEpoch` (adopted).
    Done(TopicRecord, String, Option<i64>),
    Invalid(Box<DynamicObject>, String),
    /// Deleted while we stamped (by a deposed controller, before our stamp
    /// could fence it): not part of the metadata.
    Gone,
}

/// The controller's metadata store for one cluster in one namespace.
#[derive(Clone)]
pub struct KubeMetadataStore {
    api: Api<MetadataShard>,
    raw: Api<DynamicObject>,
    resource: ApiResource,
    recorder: Recorder,
    namespace: String,
    cluster: String,
}

impl KubeMetadataStore {
    /// A store for `cluster` (a DNS-1123 label, normally the KafkaCluster's
    /// name) in `namespace`. Events about invalid objects are reported as
    /// controller `moldau-controller`.
    pub fn new(client: Client, namespace: &str, cluster: &str) -> Result<Self, StoreError> {
        validate_cluster_name(cluster).map_err(|reason| StoreError::Invalid {
            object: cluster_object_name(cluster),
            reason,
        })?;
        let resource = ApiResource::erase::<MetadataShard>(&());
        let reporter = Reporter {
            controller: "moldau-controller".into(),
            instance: None,
        };
        Ok(KubeMetadataStore {
            api: Api::namespaced(client.clone(), namespace),
            raw: Api::namespaced_with(client.clone(), namespace, &resource),
            resource,
            recorder: Recorder::new(client, reporter),
            namespace: namespace.to_string(),
            cluster: cluster.to_string(),
        })
    }

    /// Names the reporting instance (e.g. the broker's pod) on Events.
    pub fn with_event_instance(mut self, client: Client, instance: String) -> Self {
        let reporter = Reporter {
            controller: "moldau-controller".into(),
            instance: Some(instance),
        };
        self.recorder = Recorder::new(client, reporter);
        self
    }

    /// The cluster name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The object name of topic `topic`.
    pub fn topic_object_name(&self, topic: &str) -> String {
        topic_object_name(&self.cluster, topic)
    }

    fn labels(&self, shard: &str) -> BTreeMap<String, String> {
        [
            (CLUSTER_LABEL.to_string(), self.cluster.clone()),
            (SHARD_LABEL.to_string(), shard.to_string()),
        ]
        .into()
    }

    fn shard(
        &self,
        name: &str,
        epoch: i64,
        writer: i32,
        cluster_record: Option<ClusterRecord>,
        topic: Option<TopicRecord>,
        resource_version: Option<&str>,
    ) -> MetadataShard {
        let kind = if topic.is_some() { "topic" } else { "cluster" };
        let mut obj = MetadataShard::new(
            name,
            MetadataShardSpec {
                cluster: self.cluster.clone(),
                epoch,
                writer,
                cluster_record,
                topic,
                stamped_epoch: None,
            },
        );
        obj.metadata = ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels(kind)),
            resource_version: resource_version.map(str::to_string),
            ..Default::default()
        };
        obj
    }

    /// Reads one object, `Invalid` when it does not parse.
    async fn get_shard(&self, name: &str) -> Result<Option<MetadataShard>, StoreError> {
        let Some(raw) = self.raw.get_opt(name).await? else {
            return Ok(None);
        };
        raw.try_parse::<MetadataShard>()
            .map(Some)
            .map_err(|e| StoreError::Invalid {
                object: name.to_string(),
                reason: format!("does not parse: {e}"),
            })
    }

    /// Fills in the newer epoch of a `Fenced` error (one GET, best effort).
    async fn with_theirs(&self, name: &str, err: StoreError) -> StoreError {
        match err {
            StoreError::Fenced { ours, theirs: None } => {
                let theirs = match self.api.get_opt(name).await {
                    Ok(Some(o)) => Some(o.spec.epoch),
                    _ => None,
                };
                StoreError::Fenced { ours, theirs }
            }
            other => other,
        }
    }

    /// Writes `obj` as a create (no resourceVersion) or a CAS replace.
    async fn write(&self, obj: &MetadataShard, epoch: i64) -> Result<String, StoreError> {
        let name = obj.name_any();
        let res = if obj.metadata.resource_version.is_some() {
            self.api.replace(&name, &PostParams::default(), obj).await
        } else {
            self.api.create(&PostParams::default(), obj).await
        };
        match res {
            Ok(o) => Ok(o.resource_version().unwrap_or_default()),
            Err(e) => {
                let err = classify(&name, epoch, e);
                Err(self.with_theirs(&name, err).await)
            }
        }
    }

    fn check_cluster_object(
        &self,
        name: &str,
        obj: &MetadataShard,
    ) -> Result<ClusterRecord, StoreError> {
        let invalid = |reason: String| StoreError::Invalid {
            object: name.to_string(),
            reason,
        };
        if obj.spec.cluster != self.cluster {
            return Err(invalid(format!(
                "belongs to cluster {:?}, not {:?}",
                obj.spec.cluster, self.cluster
            )));
        }
        let record = match obj.spec.payload().map_err(invalid)? {
            Payload::Cluster(c) => c.clone(),
            Payload::Topic(_) => {
                return Err(invalid("holds a topic, not the cluster record".into()))
            }
        };
        record.validate().map_err(|e| invalid(e.0))?;
        Ok(record)
    }

    /// Becomes the controller of the next epoch: reads (or creates, with a
    /// fresh cluster id, at epoch 1) the cluster object and writes it back
    /// with `epoch = old + 1`, `writer`, `controllerId` and
    /// `controllerAddress` (CAS, re-read on a lost race); then stamps the new
    /// epoch on every topic object of this cluster (CAS each). Objects that
    /// do not parse or fail validation are not rewritten: they are logged,
    /// reported as a Warning Event on the object, and listed in
    /// [`Snapshot::invalid`].
    ///
    /// Call it only while holding the controller Lease; act on the snapshot
    /// only after it returns (fencing holds from then on). A topic object
    /// already carrying a higher epoch means someone took over after us:
    /// [`StoreError::Fenced`]. An invalid *cluster* object fails the whole
    /// take-over with [`StoreError::Invalid`] (there is nothing to resume
    /// from).
    pub async fn take_over(
        &self,
        controller_id: i32,
        controller_address: &str,
    ) -> Result<Snapshot, StoreError> {
        let name = cluster_object_name(&self.cluster);
        let mut attempts = 0;
        let mut previous_controller = None;
        let (epoch, cluster, mut cluster_obj, stamped_before) = loop {
            attempts += 1;
            if attempts > CAS_RETRIES {
                return Err(StoreError::Conflict { object: name });
            }
            let (epoch, record, mut obj, stamped) = match self.get_shard(&name).await? {
                None => {
                    let record = ClusterRecord {
                        cluster_id: new_cluster_id(),
                        controller_id,
                        controller_address: controller_address.to_string(),
                        ..Default::default()
                    };
                    let obj = self.shard(&name, 1, controller_id, Some(record.clone()), None, None);
                    (1, record, obj, 0)
                }
                Some(mut obj) => {
                    let mut record = self.check_cluster_object(&name, &obj)?;
                    previous_controller = Some(record.controller_id);
                    record.controller_id = controller_id;
                    record.controller_address = controller_address.to_string();
                    let epoch =
                        obj.spec
                            .epoch
                            .checked_add(1)
                            .ok_or_else(|| StoreError::Invalid {
                                object: name.clone(),
                                reason: "the epoch cannot grow any more".into(),
                            })?;
                    // Keep the object's metadata (labels, annotations and
                    // owner references others set), change only the spec.
                    obj.spec.epoch = epoch;
                    obj.spec.writer = controller_id;
                    obj.spec.cluster_record = Some(record.clone());
                    let stamped = obj.spec.stamped_epoch.unwrap_or(0);
                    (epoch, record, obj, stamped)
                }
            };
            match self.write(&obj, epoch).await {
                Ok(rv) => {
                    obj.metadata.resource_version = Some(rv);
                    break (epoch, record, obj, stamped);
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        };
        tracing::info!(cluster = %self.cluster, epoch, controller_id, "took over the cluster metadata");

        // Every topic object of this cluster, page by page.
        let selector = format!("{CLUSTER_LABEL}={},{SHARD_LABEL}=topic", self.cluster);
        let mut objects = Vec::new();
        let mut lp = ListParams::default().labels(&selector).limit(PAGE);
        loop {
            let page = self.raw.list(&lp).await?;
            objects.extend(page.items);
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => break,
            }
        }

        let stamped: Vec<Stamp> = futures::stream::iter(objects)
            .map(|obj| self.stamp(obj, epoch, controller_id, stamped_before))
            .buffer_unordered(STAMP_CONCURRENCY)
            .try_collect()
            .await?;

        let mut topics = Vec::new();
        let mut invalid = Vec::new();
        let mut adopted = Vec::new();
        for s in stamped {
            match s {
                Stamp::Done(t, rv, late) => {
                    if let Some(their_epoch) = late {
                        let object = topic_object_name(&self.cluster, &t.name);
                        tracing::warn!(cluster = %self.cluster, %object, epoch = their_epoch, stamped_epoch = stamped_before, "adopted a metadata object written outside the known controller terms (a deposed controller's late create, or a repair by hand)");
                        adopted.push((object, their_epoch));
                    }
                    topics.push((t, rv));
                }
                Stamp::Gone => {}
                Stamp::Invalid(obj, reason) => {
                    let object = obj.name_any();
                    tracing::error!(cluster = %self.cluster, %object, %reason, "invalid metadata object: not used, not rewritten");
                    self.report_invalid(&obj, &reason).await;
                    invalid.push((object, reason));
                }
            }
        }
        topics.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        invalid.sort();
        adopted.sort();

        // Every object carries our epoch now: record that this take-over
        // completed (objects below it from now on are a deposed
        // controller's creates).
        let cluster_rv = loop {
            cluster_obj.spec.stamped_epoch = Some(epoch);
            match self.write(&cluster_obj, epoch).await {
                Ok(rv) => break rv,
                Err(StoreError::Conflict { .. }) => {
                    // Only a newer take-over (or a hand edit) writes it now.
                    let fresh = self.get_shard(&name).await?.ok_or(StoreError::Conflict {
                        object: name.clone(),
                    })?;
                    if fresh.spec.epoch != epoch {
                        return Err(StoreError::Fenced {
                            ours: epoch,
                            theirs: Some(fresh.spec.epoch),
                        });
                    }
                    self.check_cluster_object(&name, &fresh)?;
                    cluster_obj = fresh;
                }
                Err(e) => return Err(e),
            }
        };
        let cluster = match &cluster_obj.spec.cluster_record {
            Some(c) => c.clone(),
            None => cluster,
        };
        Ok(Snapshot {
            epoch,
            cluster,
            previous_controller,
            cluster_resource_version: cluster_rv,
            topics,
            invalid,
            adopted,
        })
    }

    /// Checks one topic object and stamps `epoch` on it (CAS, re-read on a
    /// lost race); deletes it when its epoch is below `stamped_before`.
    async fn stamp(
        &self,
        obj: DynamicObject,
        epoch: i64,
        writer: i32,
        stamped_before: i64,
    ) -> Result<Stamp, StoreError> {
        let name = obj.name_any();
        let mut raw = obj;
        for _ in 0..CAS_RETRIES {
            let mut shard = match raw.clone().try_parse::<MetadataShard>() {
                Ok(s) => s,
                Err(e) => {
                    return Ok(Stamp::Invalid(
                        Box::new(raw),
                        format!("does not parse: {e}"),
                    ))
                }
            };
            let late = (shard.spec.epoch < stamped_before).then_some(shard.spec.epoch);
            let topic = match self.check_topic_object(&name, &shard.spec) {
                Ok(t) => t,
                Err(reason) => return Ok(Stamp::Invalid(Box::new(raw), reason)),
            };
            if shard.spec.epoch > epoch {
                return Err(StoreError::Fenced {
                    ours: epoch,
                    theirs: Some(shard.spec.epoch),
                });
            }
            if shard.spec.epoch == epoch {
                let rv = shard.resource_version().unwrap_or_default();
                return Ok(Stamp::Done(topic, rv, None));
            }
            shard.spec.epoch = epoch;
            shard.spec.writer = writer;
            match self.write(&shard, epoch).await {
                Ok(rv) => return Ok(Stamp::Done(topic, rv, late)),
                Err(StoreError::Conflict { .. }) => {}
                Err(StoreError::Invalid { reason, .. }) => {
                    return Ok(Stamp::Invalid(
                        Box::new(raw),
                        format!("the API server refused it: {reason}"),
                    ))
                }
                Err(e) => return Err(e),
            }
            match self.raw.get_opt(&name).await? {
                Some(fresh) => raw = fresh,
                None => return Ok(Stamp::Gone),
            }
        }
        Err(StoreError::Conflict { object: name })
    }

    /// The topic of a topic object, or why it cannot be trusted.
    fn check_topic_object(
        &self,
        name: &str,
        spec: &MetadataShardSpec,
    ) -> Result<TopicRecord, String> {
        if spec.cluster != self.cluster {
            return Err(format!(
                "belongs to cluster {:?}, not {:?}",
                spec.cluster, self.cluster
            ));
        }
        let topic = match spec.payload()? {
            Payload::Topic(t) => t.clone(),
            Payload::Cluster(_) => return Err("holds a cluster record, not a topic".into()),
        };
        topic.validate().map_err(|e| e.0)?;
        let want = self.topic_object_name(&topic.name);
        if name != want {
            return Err(format!(
                "holds topic {:?}, whose object is {want}",
                topic.name
            ));
        }
        Ok(topic)
    }

    /// Best effort: a Warning Event on the object.
    async fn report_invalid(&self, obj: &DynamicObject, reason: &str) {
        let mut reference: ObjectReference = obj.object_ref(&self.resource);
        if reference.namespace.is_none() {
            reference.namespace = Some(self.namespace.clone());
        }
        let mut note = format!("not used by the controller and not rewritten: {reason}");
        if note.len() > 1000 {
            let mut end = 1000;
            while !note.is_char_boundary(end) {
                end -= 1;
            }
            note.truncate(end);
        }
        let event = Event {
            type_: EventType::Warning,
            reason: "InvalidMetadata".into(),
            note: Some(note),
            action: "TakeOver".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(object = %obj.name_any(), error = %e, "could not publish an Event");
        }
    }

    /// Call only after [`KubeMetadataStore::take_over`] returned `epoch`.
    /// Creates (`expected_rv` None: fails with `Conflict` when the object
    /// exists — see [`KubeMetadataStore::read_topic`] for an object left by
    /// a deposed controller) or replaces (only if its resourceVersion still is
    /// `expected_rv`) the object of `topic`, stamped with `epoch` and
    /// `writer`. Returns the new resourceVersion. One API write.
    pub async fn put_topic(
        &self,
        epoch: i64,
        writer: i32,
        topic: &TopicRecord,
        expected_rv: Option<&str>,
    ) -> Result<String, StoreError> {
        let name = self.topic_object_name(&topic.name);
        topic.validate().map_err(|e| StoreError::Invalid {
            object: name.clone(),
            reason: e.0,
        })?;
        let obj = self.shard(&name, epoch, writer, None, Some(topic.clone()), expected_rv);
        self.write(&obj, epoch).await
    }

    /// Deletes the object of topic `topic` if its resourceVersion still is
    /// `expected_rv` (`Conflict` otherwise, or when it is gone). One API
    /// write.
    pub async fn delete_topic(&self, topic: &str, expected_rv: &str) -> Result<(), StoreError> {
        self.delete_object(&self.topic_object_name(topic), expected_rv)
            .await
    }

    async fn delete_object(&self, name: &str, expected_rv: &str) -> Result<(), StoreError> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(expected_rv.to_string()),
                uid: None,
            }),
            ..Default::default()
        };
        match self.api.delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) => Err(classify(name, 0, e)),
        }
    }

    /// Creates (`expected_rv` None) or CAS-replaces the cluster object.
    /// Returns the new resourceVersion. One API write.
    pub async fn put_cluster(
        &self,
        epoch: i64,
        writer: i32,
        cluster: &ClusterRecord,
        expected_rv: Option<&str>,
    ) -> Result<String, StoreError> {
        let name = cluster_object_name(&self.cluster);
        cluster.validate().map_err(|e| StoreError::Invalid {
            object: name.clone(),
            reason: e.0,
        })?;
        let mut obj = self.shard(
            &name,
            epoch,
            writer,
            Some(cluster.clone()),
            None,
            expected_rv,
        );
        // The caller's take-over of `epoch` completed (the contract of
        // every `put_*`), so the marker stays at it.
        obj.spec.stamped_epoch = Some(epoch);
        self.write(&obj, epoch).await
    }

    /// Reads the cluster record (no write): what brokers use to find the
    /// controller, and the operator to report status. `None` before the
    /// first take-over.
    pub async fn read_cluster(&self) -> Result<Option<Stored<ClusterRecord>>, StoreError> {
        let name = cluster_object_name(&self.cluster);
        let Some(obj) = self.get_shard(&name).await? else {
            return Ok(None);
        };
        let record = self.check_cluster_object(&name, &obj)?;
        Ok(Some(Stored {
            record,
            epoch: obj.spec.epoch,
            writer: obj.spec.writer,
            resource_version: obj.resource_version().unwrap_or_default(),
        }))
    }

    /// Reads one topic (no write); `Invalid` when its object cannot be
    /// trusted. For the controller of epoch E (after its take-over), a
    /// topic whose stored epoch is below E is a deposed controller's late
    /// create, not metadata: delete it ([`KubeMetadataStore::delete_topic`]
    /// with its resourceVersion) before creating that topic again.
    pub async fn read_topic(&self, topic: &str) -> Result<Option<Stored<TopicRecord>>, StoreError> {
        let name = self.topic_object_name(topic);
        let Some(obj) = self.get_shard(&name).await? else {
            return Ok(None);
        };
        let record = self
            .check_topic_object(&name, &obj.spec)
            .map_err(|reason| StoreError::Invalid {
                object: name.clone(),
                reason,
            })?;
        Ok(Some(Stored {
            record,
            epoch: obj.spec.epoch,
            writer: obj.spec.writer,
            resource_version: obj.resource_version().unwrap_or_default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn topic_names_map_to_distinct_valid_object_names() {
        let names = [
            "orders",
            "Orders",
            "my_topic",
            "my.topic",
            "my-topic",
            "__consumer_offsets",
            "A",
        ];
        let objects: Vec<String> = names.iter().map(|n| topic_object_name("prod", n)).collect();
        let mut unique = objects.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{objects:?}");
        for o in &objects {
            assert!(o.starts_with("prod-topic-"), "{o}");
            assert!(o.len() <= MAX_NAME);
            assert!(
                o.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{o}"
            );
            assert!(o.as_bytes()[o.len() - 1].is_ascii_alphanumeric());
        }
        assert_eq!(
            topic_object_name("prod", "My_Topic.v2"),
            format!("prod-topic-my-topic-v2-{:08x}", fnv1a32(b"My_Topic.v2"))
        );
        // Stable: the same name always maps to the same object.
        assert_eq!(topic_object_name("c", "x"), topic_object_name("c", "x"));
        assert_eq!(cluster_object_name("prod"), "prod-cluster");
    }

    #[test]
    fn long_names_are_cut_to_fit() {
        let topic = "t".repeat(249);
        let cluster = "c".repeat(63);
        let name = topic_object_name(&cluster, &topic);
        assert_eq!(name.len(), MAX_NAME);
        assert!(name.ends_with(&format!("-{:08x}", fnv1a32(topic.as_bytes()))));
        // Names that differ only beyond the cut still differ.
        let mut other = topic.clone();
        other.replace_range(248.., "u");
        assert_ne!(name, topic_object_name(&cluster, &other));
    }

    #[test]
    fn cluster_names_must_be_labels() {
        assert!(validate_cluster_name("prod-1").is_ok());
        for bad in ["", "Prod", "-a", "a-", "a_b", "a.b", &"a".repeat(64)] {
            assert!(validate_cluster_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cluster_ids_look_like_kafkas() {
        for _ in 0..100 {
            let id = new_cluster_id();
            assert_eq!(id.len(), 22);
            assert!(!id.starts_with('-'));
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(&id)
                .unwrap();
            assert_eq!(bytes.len(), 16);
        }
        assert_ne!(new_cluster_id(), new_cluster_id());
    }

    fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Status::failure(message, "Invalid").with_code(code).boxed())
    }

    #[test]
    fn errors_are_classified() {
        assert!(matches!(
            classify("o", 1, api_error(409, "the object has been modified")),
            StoreError::Conflict { object } if object == "o"
        ));
        assert!(matches!(
            classify("o", 1, api_error(404, "not found")),
            StoreError::Conflict { .. }
        ));
        let fenced = format!(
            "MetadataShard.moldau.io \"o\" is invalid: spec: Invalid value: \"object\": {STALE_EPOCH_MESSAGE}"
        );
        assert!(matches!(
            classify("o", 1, api_error(422, &fenced)),
            StoreError::Fenced {
                ours: 1,
                theirs: None
            }
        ));
        assert!(matches!(
            classify("o", 1, api_error(422, "spec: Invalid value: \"object\": cluster is immutable")),
            StoreError::Invalid { reason, .. } if reason.contains("cluster is immutable")
        ));
        assert!(matches!(
            classify("o", 1, api_error(403, "forbidden")),
            StoreError::Api(_)
        ));
    }
}
