//! What the operator knows of the brokers' own view of their cluster: the
//! cluster record that the elected controller keeps in the `MetadataShard`
//! `<cluster>-cluster` (`spec.clusterRecord`: controller id, registered
//! brokers; `spec.epoch`: the controller epoch).
//!
//! Owns the parsing of that object (pure, [`membership_of`]) and its one
//! read through the API server ([`read_membership`]). The operator never
//! writes metadata objects and never dials a broker or the controller to learn
//! membership: the record the controller persisted is the truth it reports.
//!
//! The object is the coordination crate's typed `MetadataShard`, the same
//! type the brokers' controller writes.

use kube::api::Api;
use moldau_coordination::records::ClusterRecord;
use moldau_coordination::shard::{MetadataShard, MetadataShardSpec, Payload};

use super::builders::Names;

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

/// The membership a cluster `MetadataShard` records: its `clusterRecord`
/// (checked as every reader checks it) and `epoch`.
pub fn membership_of(spec: &MetadataShardSpec) -> Membership {
    let record = match spec.payload() {
        Ok(Payload::Cluster(record)) => record,
        Ok(Payload::Topic(_)) => {
            return Membership::Unreadable(
                "the cluster record object holds a topic, not a clusterRecord".into(),
            )
        }
        Err(e) => return Membership::Unreadable(format!("the cluster record object has {e}")),
    };
    if let Err(e) = record.validate() {
        return Membership::Unreadable(format!("spec.clusterRecord is invalid: {e}"));
    }
    Membership::Known(view_of(record, spec.epoch))
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
/// (RBAC) or an object that does not parse is [`Membership::Unreadable`];
/// other failures are errors to retry.
pub async fn read_membership(
    client: &kube::Client,
    names: &Names,
) -> Result<Membership, kube::Error> {
    let api: Api<MetadataShard> = Api::namespaced(client.clone(), &names.namespace);
    let name = names.cluster_shard();
    match api.get_opt(&name).await {
        Ok(Some(obj)) => Ok(membership_of(&obj.spec)),
        Ok(None) => Ok(Membership::Absent),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Membership::Absent),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Membership::Unreadable(format!(
            "reading MetadataShard {name} was refused: {}",
            s.message
        ))),
        Err(kube::Error::SerdeError(e)) => Ok(Membership::Unreadable(format!(
            "MetadataShard {name} does not parse: {e}"
        ))),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moldau_coordination::records::{RegisteredBroker, TopicRecord};

    fn broker(id: i32, fenced: bool) -> RegisteredBroker {
        RegisteredBroker {
            node_id: id,
            host: format!("127.0.0.{}", id + 1),
            port: 9092,
            rack: None,
            incarnation: "i".into(),
            broker_epoch: 3,
            fenced,
            succession_hash: None,
            endpoints: vec![],
        }
    }

    fn shard(controller: i32, epoch: i64, brokers: Vec<RegisteredBroker>) -> MetadataShardSpec {
        MetadataShardSpec {
            cluster: "demo".into(),
            epoch,
            writer: controller,
            cluster_record: Some(ClusterRecord {
                cluster_id: "abcdefghijklmnopqrstuv".into(),
                controller_id: controller,
                controller_address: "http://127.0.0.2:9091".into(),
                producer_id_block_end: 1000,
                brokers,
                deleted_topics: Vec::new(),
                broker_configs: Default::default(),
                client_quotas: Vec::new(),
                scram_credentials: Vec::new(),
                acls: Vec::new(),
            }),
            topic: None,
            stamped_epoch: None,
        }
    }

    #[test]
    fn a_record_gives_controller_epoch_and_unfenced_brokers() {
        let m = membership_of(&shard(
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
        let m = membership_of(&shard(-1, 0, vec![]));
        let v = m.view().unwrap();
        assert_eq!(v.controller, None);
        assert!(v.registered.is_empty());
        assert_eq!(Membership::Absent.registered_count(), None);
    }

    #[test]
    fn broken_records_are_unreadable_not_trusted() {
        let mut no_payload = shard(0, 1, vec![]);
        no_payload.cluster_record = None;
        let mut a_topic = shard(0, 1, vec![]);
        a_topic.cluster_record = None;
        a_topic.topic = Some(TopicRecord {
            name: "t".into(),
            topic_id: "x".into(),
            replication_factor: 1,
            configs: Default::default(),
            partitions: vec![],
        });
        let mut two = shard(0, 1, vec![]);
        two.topic = a_topic.topic.clone();
        let mut no_id = shard(0, 1, vec![]);
        no_id.cluster_record.as_mut().unwrap().cluster_id.clear();
        let twice = shard(0, 1, vec![broker(0, false), broker(0, true)]);
        for (i, c) in [no_payload, a_topic, two, no_id, twice].iter().enumerate() {
            assert!(
                matches!(membership_of(c), Membership::Unreadable(_)),
                "case {i}: {c:?}"
            );
        }
    }

    #[test]
    fn the_role_names_the_coordination_crates_kind() {
        use kube::Resource;
        assert_eq!(
            MetadataShard::group(&()),
            super::super::builders::MOLDAU_GROUP
        );
        assert_eq!(
            MetadataShard::plural(&()),
            super::super::builders::METADATA_SHARDS
        );
    }

    #[test]
    fn the_object_name_is_the_coordination_crates() {
        let names = Names {
            cluster: "prod".into(),
            namespace: "ns".into(),
        };
        assert_eq!(
            names.cluster_shard(),
            moldau_coordination::store::cluster_object_name("prod")
        );
    }
}
