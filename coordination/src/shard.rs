//! The `MetadataShard` custom resource (`moldau.io/v1alpha1`, namespaced,
//! short name `mshard`): one object per metadata record of a Moldau cluster
//! in Kubernetes mode — the cluster record, or one topic — written only by
//! the active controller (through [`crate::store::KubeMetadataStore`]).
//!
//! # Why a CRD of Moldau's own, not ConfigMaps
//!
//! - **The API server enforces fencing.** Every object carries the epoch of
//!   the controller that last wrote it, and a CEL transition rule
//!   (`self.epoch >= oldSelf.epoch`) makes the API server refuse any update
//!   that would lower it. A new controller stamps its epoch on every object
//!   before it acts, so a deposed controller — even one paused between its
//!   Lease check and its write, holding a current resourceVersion — is
//!   refused by the server, not by its own (stale) judgement. A ConfigMap
//!   has no such rule; only an admission webhook (another moving part, and
//!   one that must be up for writes to work) could add it.
//! - **Schema validation** rejects malformed hand edits (`kubectl edit`) at
//!   the door: wrong types, a missing payload, two payloads, a changed
//!   cluster or topic id. What the schema cannot express (e.g. a leader that
//!   is not a replica) the reader checks with the records' `validate()`.
//! - **Readable with kubectl**: `kubectl get mshard` prints cluster, epoch,
//!   writer and age; `-o yaml` shows the record as structured YAML, not a
//!   JSON string inside a ConfigMap key.
//!
//! The rules the API server enforces (see [`MetadataShardSpec`]):
//! the epoch never decreases; `cluster` never changes; exactly one payload
//! (`clusterRecord` or `topic`), whose kind never changes; a topic's
//! `topicId` never changes; the cluster object's `stampedEpoch` never
//! decreases nor exceeds its epoch. On create there is no `oldSelf`:
//! creates are not epoch-fenced by the server; `stampedEpoch` is how a
//! deposed controller's late create is recognised (see [`crate::store`]).
//!
//! This module owns the type only; no I/O.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::records::{ClusterRecord, TopicRecord};

/// The message of the CEL rule refusing a lower epoch; the store recognises
/// the API server's 422 answer by it.
pub const STALE_EPOCH_MESSAGE: &str =
    "stale controller epoch: this object was written by a newer controller";

/// Label naming the cluster an object belongs to.
pub const CLUSTER_LABEL: &str = "moldau.io/cluster";
/// Label saying which kind of record an object holds (`cluster` | `topic`).
pub const SHARD_LABEL: &str = "moldau.io/shard";

/// One metadata record of a Moldau cluster, with the epoch and node id of
/// the controller that wrote it last.
// The lint misreads `type_ = ...` of several `printcolumn(...)` as repeats.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "moldau.io",
    version = "v1alpha1",
    kind = "MetadataShard",
    plural = "metadatashards",
    shortname = "mshard",
    namespaced,
    derive = "PartialEq",
    doc = "One metadata record (the cluster record or one topic) of a Moldau cluster in Kubernetes mode, written by the active controller. Do not edit by hand: the controller reports objects that fail validation and does not use them.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Epoch", type_ = "integer", json_path = ".spec.epoch"),
    printcolumn(name = "Writer", type_ = "integer", json_path = ".spec.writer"),
    printcolumn(
        name = "Topic",
        type_ = "string",
        json_path = ".spec.topic.name",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.epoch >= oldSelf.epoch").message("stale controller epoch: this object was written by a newer controller"))]
#[x_kube(validation = Rule::new("has(self.clusterRecord) != has(self.topic)").message("exactly one of clusterRecord and topic must be set"))]
#[x_kube(validation = Rule::new("has(self.topic) == has(oldSelf.topic)").message("the kind of record (clusterRecord or topic) is immutable"))]
#[x_kube(validation = Rule::new("!has(self.topic) || !has(oldSelf.topic) || self.topic.topicId == oldSelf.topic.topicId").message("topic.topicId is immutable"))]
#[x_kube(validation = Rule::new("!has(self.stampedEpoch) || self.stampedEpoch <= self.epoch").message("stampedEpoch cannot exceed epoch"))]
#[x_kube(validation = Rule::new("!has(oldSelf.stampedEpoch) || (has(self.stampedEpoch) && self.stampedEpoch >= oldSelf.stampedEpoch)").message("stampedEpoch never decreases"))]
pub struct MetadataShardSpec {
    /// The cluster (KafkaCluster name) this record belongs to; immutable.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("cluster is immutable"))]
    pub cluster: String,
    /// The controller epoch of the last writer; never decreases.
    #[schemars(range(min = 0))]
    pub epoch: i64,
    /// The node id of the controller that wrote this last.
    #[schemars(range(min = -1))]
    pub writer: i32,
    /// The cluster record (exactly one of `clusterRecord`, `topic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_record: Option<ClusterRecord>,
    /// One topic (exactly one of `clusterRecord`, `topic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<TopicRecord>,
    /// On the cluster object: the latest controller epoch whose take-over
    /// stamped every topic object. A topic object with a lower epoch was
    /// created by a deposed controller afterwards and is not metadata.
    /// Never decreases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub stamped_epoch: Option<i64>,
}

/// The payload of a shard.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload<'a> {
    Cluster(&'a ClusterRecord),
    Topic(&'a TopicRecord),
}

impl MetadataShardSpec {
    /// The one payload, or why there is not exactly one.
    pub fn payload(&self) -> Result<Payload<'_>, String> {
        match (&self.cluster_record, &self.topic) {
            (Some(c), None) => Ok(Payload::Cluster(c)),
            (None, Some(t)) => Ok(Payload::Topic(t)),
            (None, None) => Err("no payload (neither clusterRecord nor topic)".into()),
            (Some(_), Some(_)) => Err("two payloads (clusterRecord and topic)".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_crd_carries_the_fencing_rules() {
        let crd = MetadataShard::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("metadatashards.moldau.io")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.short_names, Some(vec!["mshard".to_string()]));
        let yaml = serde_json::to_string(&crd).unwrap();
        for rule in [
            "self.epoch >= oldSelf.epoch",
            "has(self.clusterRecord) != has(self.topic)",
            "self.topic.topicId == oldSelf.topic.topicId",
            "self == oldSelf",
        ] {
            assert!(yaml.contains(rule), "missing rule {rule}");
        }
        assert!(yaml.contains(STALE_EPOCH_MESSAGE));
        let cols: Vec<_> = crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(cols, ["Cluster", "Epoch", "Writer", "Topic", "Age"]);
    }

    #[test]
    fn payload_is_exactly_one() {
        let mut s = MetadataShardSpec {
            cluster: "c".into(),
            epoch: 1,
            writer: 0,
            cluster_record: None,
            topic: None,
            stamped_epoch: None,
        };
        assert!(s.payload().is_err());
        s.cluster_record = Some(ClusterRecord::default());
        assert!(matches!(s.payload(), Ok(Payload::Cluster(_))));
        let json = serde_json::to_value(&s).unwrap();
        assert!(json.get("clusterRecord").is_some());
        assert!(json.get("topic").is_none());
    }
}
