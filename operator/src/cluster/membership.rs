//! What the operator knows of the brokers' own view of their cluster: the
//! cluster record that the elected controller keeps in the `MetadataShard`
//! `<cluster>-cluster` (`spec.clusterRecord`: controller id, registered
//! brokers; `spec.epoch`: the controller epoch).
//!
//! Owns the parsing of that object (pure, [`parse_cluster_shard`]) and its one
//! read through the API server ([`read_membership`]). The operator never
//! writes metadata objects and never dials a broker or the controller to learn
//! membership: the record the controller persisted is the truth it reports.
//!
//! The object is read as a `DynamicObject` and its record parsed into the
//! shared [`ClusterRecord`] type, so this does not depend on the typed
//! `MetadataShard` resource.

use kube::api::{Api, ApiResource, DynamicObject};
use moldau_coordination::records::ClusterRecord;

use super::builders::{Names, METADATA_SHARDS, MOLDAU_GROUP};

/// The version of the brokers' `MetadataShard` kind.
pub const METADATA_SHARD_VERSION: &str = "v1alpha1";

/// The cluster membership the operator observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Membership {
    /// No cluster record: no broker has been elected controller yet (or the
    /// `MetadataShard` kind is not installed).
    Absent,
    /// A record exists but cannot be read or trusted (the message says why).
    Unreadable(String),
    /// The record, as the controller last wrote it.
    Known(ClusterView),
}

/// The parts of the cluster record the operator reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    /// The active controller's node id (None: the record names none).
    pub controller: Option<i32>,
    /// The controller epoch of the record's last write.
    pub epoch: i64,
    /// Node ids registered and not fenced, ascending.
    pub registered: Vec<i32>,
}

impl Membership {
    /// The view, when the record is known.
    pub fn view(&self) -> Option<&ClusterView> {
        match self {
            Membership::Known(v) => Some(v),
            _ => None,
        }
    }

    /// How many brokers are registered and not fenced, when the record is
    /// known (None: no record to count from).
    pub fn registered_count(&self) -> Option<usize> {
        self.view().map(|v| v.registered.len())
    }
}

/// The `ApiResource` of the brokers' `MetadataShard` kind.
pub fn metadata_shard_resource() -> ApiResource {
    ApiResource {
        group: MOLDAU_GROUP.into(),
        version: METADATA_SHARD_VERSION.into(),
        api_version: format!("{MOLDAU_GROUP}/{METADATA_SHARD_VERSION}"),
        kind: "MetadataShard".into(),
        plural: METADATA_SHARDS.into(),
    }
}

/// Parses the cluster `MetadataShard`'s data (everything but its metadata,
/// i.e. `DynamicObject::data`): `spec.epoch` and `spec.clusterRecord`.
pub fn parse_cluster_shard(data: &serde_json::Value) -> Membership {
    let Some(spec) = data.get("spec") else {
        return Membership::Unreadable("the cluster record object has no spec".into());
    };
    let Some(epoch) = spec.get("epoch").and_then(|e| e.as_i64()) else {
        return Membership::Unreadable("the cluster record has no integer spec.epoch".into());
    };
    let Some(raw) = spec.get("clusterRecord") else {
        return Membership::Unreadable(
            "the cluster record object has no spec.clusterRecord".into(),
        );
    };
    let record: ClusterRecord = match serde_json::from_value(raw.clone()) {
        Ok(r) => r,
        Err(e) => return Membership::Unreadable(format!("spec.clusterRecord does not parse: {e}")),
    };
    if let Err(e) = record.validate() {
        return Membership::Unreadable(format!("spec.clusterRecord is invalid: {e}"));
    }
    Membership::Known(view_of(&record, epoch))
}

/// The reported view of a (valid) record.
pub fn view_of(record: &ClusterRecord, epoch: i64) -> ClusterView {
    let mut registered: Vec<i32> = record
        .brokers
        .iter()
        .filter(|b| !b.fenced)
        .map(|b| b.node_id)
        .collect();
    registered.sort_unstable();
    ClusterView {
        controller: (record.controller_id >= 0).then_some(record.controller_id),
        epoch,
        registered,
    }
}

/// Reads the cluster record of `names` through the API server. Not found
/// (the object, or the kind) is [`Membership::Absent`]; a refused read
/// (RBAC) is [`Membership::Unreadable`]; other failures are errors to retry.
pub async fn read_membership(
    client: &kube::Client,
    names: &Names,
) -> Result<Membership, kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &names.namespace, &metadata_shard_resource());
    match api.get_opt(&names.cluster_shard()).await {
        Ok(Some(obj)) => Ok(parse_cluster_shard(&obj.data)),
        Ok(None) => Ok(Membership::Absent),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Membership::Absent),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Membership::Unreadable(format!(
            "reading MetadataShard {} was refused: {}",
            names.cluster_shard(),
            s.message
        ))),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn broker(id: i32, fenced: bool) -> serde_json::Value {
        json!({"nodeId": id, "host": format!("127.0.0.{}", id + 1), "port": 9092,
               "incarnation": "i", "brokerEpoch": 3, "fenced": fenced})
    }

    fn shard(controller: i32, epoch: i64, brokers: Vec<serde_json::Value>) -> serde_json::Value {
        json!({"spec": {"epoch": epoch, "clusterRecord": {
            "clusterId": "abcdefghijklmnopqrstuv", "controllerId": controller,
            "controllerAddress": "http://127.0.0.2:9091", "producerIdBlockEnd": 1000,
            "brokers": brokers}}})
    }

    #[test]
    fn a_record_gives_controller_epoch_and_unfenced_brokers() {
        let m = parse_cluster_shard(&shard(
            1,
            7,
            vec![broker(2, false), broker(0, false), broker(1, true)],
        ));
        assert_eq!(
            m,
            Membership::Known(ClusterView {
                controller: Some(1),
                epoch: 7,
                registered: vec![0, 2],
            })
        );
        assert_eq!(m.registered_count(), Some(2));
    }

    #[test]
    fn no_controller_yet() {
        let m = parse_cluster_shard(&shard(-1, 0, vec![]));
        let v = m.view().unwrap();
        assert_eq!(v.controller, None);
        assert!(v.registered.is_empty());
        assert_eq!(Membership::Absent.registered_count(), None);
    }

    #[test]
    fn broken_records_are_unreadable_not_panics() {
        let cases = [
            json!({}),
            json!({"spec": {}}),
            json!({"spec": {"epoch": "x", "clusterRecord": {}}}),
            json!({"spec": {"epoch": 1}}),
            json!({"spec": {"epoch": 1, "clusterRecord": {"controllerId": "one"}}}),
            // no cluster id
            json!({"spec": {"epoch": 1, "clusterRecord": {"clusterId": "", "controllerId": 0}}}),
            // a node id twice
            shard(0, 1, vec![broker(0, false), broker(0, true)]),
        ];
        for (i, c) in cases.iter().enumerate() {
            assert!(
                matches!(parse_cluster_shard(c), Membership::Unreadable(_)),
                "case {i}: {c}"
            );
        }
    }

    #[test]
    fn resource_is_the_brokers_crd() {
        let ar = metadata_shard_resource();
        assert_eq!(ar.api_version, "moldau.io/v1alpha1");
        assert_eq!(ar.plural, "metadatashards");
        assert_eq!(ar.kind, "MetadataShard");
    }
}
