//! The metadata image: an immutable snapshot of the cluster as handlers see
//! it — brokers, the controller, topics with their ids, and per partition
//! its replicas, leader, leader epoch and in-sync replicas; dynamic broker
//! configs, client quotas, users' SCRAM credentials and the ACLs.
//!
//! Handlers read the current image ([`crate::broker::Broker::image`]) and
//! never metadata state directly; the controller publishes a new image after
//! every change it makes (Kafka's `MetadataImage` plays the same part). What
//! this broker does with a partition follows from its [`PartitionRole`] in
//! the image, never from "this broker, epoch 0".
//!
//! This module owns the image's shape and the pure functions that build and
//! query it; it holds no locks and does no I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use uuid::Uuid;

/// One advertised listener of a broker (`advertised.listeners`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerEndpoint {
    /// The listener's name, upper-case (`EXTERNAL`).
    pub name: String,
    pub host: String,
    pub port: i32,
    /// Kafka's security protocol name (`SASL_SSL`).
    pub security_protocol: String,
}

/// A broker of the cluster as clients reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerImage {
    pub id: i32,
    /// The inter-broker listener's advertised host and port: where other
    /// brokers dial this one (and all a broker registered before it
    /// advertised named endpoints).
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Every advertised listener, inter-broker one included; empty when
    /// the broker registered only `host`/`port` (an older Moldau).
    pub endpoints: Vec<ListenerEndpoint>,
    /// The process registered under this id now (cluster mode): a follower
    /// proves it is this broker by naming it (see `handlers::sasl`). Never
    /// shown to clients.
    pub incarnation: Option<Uuid>,
}

impl BrokerImage {
    /// Where clients that came on `listener` reach this broker: its
    /// endpoint of that name; `None` when it has no such listener (Kafka
    /// leaves it out of the answer). A broker that registered no named
    /// endpoints (an older Moldau) is reached on its one address whatever
    /// the listener, so mixed versions keep answering.
    pub fn endpoint(&self, listener: &str) -> Option<(&str, i32)> {
        if self.endpoints.is_empty() {
            return Some((self.host.as_str(), self.port));
        }
        self.endpoints
            .iter()
            .find(|e| e.name == listener)
            .map(|e| (e.host.as_str(), e.port))
    }
}

/// One partition's replica set and leadership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionImage {
    pub index: i32,
    /// Replicas, preferred leader first.
    pub replicas: Vec<i32>,
    /// The leader's node id; -1 when the partition has none (offline).
    pub leader: i32,
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
    /// Grows with every change of the partition (leader, ISR, replicas):
    /// the compare-and-swap version of ISR changes.
    pub partition_epoch: i32,
    /// A running reassignment's replicas being added (in `replicas`,
    /// catching up); empty when none runs.
    pub adding_replicas: Vec<i32>,
    /// A running reassignment's replicas that leave once it completes.
    pub removing_replicas: Vec<i32>,
}

/// A topic as the image places it on one broker: what
/// [`TopicManager::apply_assignment`](crate::topics::TopicManager::apply_assignment)
/// makes the local logs match (built by [`MetadataImage::assigned_to`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Assigned {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// The partitions with a replica on this broker.
    pub held: Vec<i32>,
}

/// What a broker is for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionRole {
    /// It leads the partition in `epoch`: produce and fetch are served here.
    Leader { epoch: i32 },
    /// It holds a replica and follows `leader` (-1: no leader now).
    Follower { leader: i32, epoch: i32 },
    /// It holds no replica of the partition.
    NotReplica,
}

impl PartitionImage {
    /// The role of broker `node` for this partition.
    pub fn role_of(&self, node: i32) -> PartitionRole {
        if self.leader == node && self.leader >= 0 {
            PartitionRole::Leader {
                epoch: self.leader_epoch,
            }
        } else if self.replicas.contains(&node) {
            PartitionRole::Follower {
                leader: self.leader,
                epoch: self.leader_epoch,
            }
        } else {
            PartitionRole::NotReplica
        }
    }
}

/// A topic: its id, whether it is internal, and its partitions by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub internal: bool,
    pub partitions: Vec<PartitionImage>,
    /// Config overrides (cluster mode; standalone brokers read their own).
    pub configs: BTreeMap<String, String>,
}

impl TopicImage {
    pub fn partition(&self, index: i32) -> Option<&PartitionImage> {
        let i = usize::try_from(index).ok()?;
        self.partitions.get(i).filter(|p| p.index == index)
    }
}

/// The whole snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetadataImage {
    pub cluster_id: String,
    /// The active controller's node id (-1: none known).
    pub controller_id: i32,
    pub brokers: Vec<BrokerImage>,
    /// Ids of recently deleted topics (cluster mode): the only topics whose
    /// local data a broker deletes.
    pub deleted_topic_ids: Vec<Uuid>,
    /// Dynamic broker configs (see `crate::dynamic_config`).
    pub broker_configs: crate::config_values::BrokerConfigs,
    /// Client quotas by entity (see `crate::quota`).
    pub client_quotas: crate::quota::entity::ClientQuotas,
    /// Users' SCRAM credentials (see `crate::security::credentials`); read
    /// one with [`MetadataImage::scram_credential`].
    pub scram_credentials: crate::security::credentials::ScramCredentials,
    /// The cluster's ACL bindings (see `crate::security::acl_admin`),
    /// shared so that an authorizer per request costs a reference count
    /// (`Broker::authorizer`).
    pub acls: Arc<crate::security::acl::AclSet>,
    topics: BTreeMap<String, Arc<TopicImage>>,
    by_id: HashMap<Uuid, String>,
}

/// What the image needs to know of a topic to describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicFacts {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
}

impl MetadataImage {
    /// The image of a standalone broker: it is the only broker and the
    /// controller, and leads every partition (leader epoch 0) with itself
    /// as the only replica and in-sync replica.
    pub fn standalone(
        cluster_id: &str,
        this: BrokerImage,
        topics: impl IntoIterator<Item = TopicFacts>,
    ) -> Self {
        let node = this.id;
        let topics = topics.into_iter().map(|t| {
            let partitions = (0..t.partitions.max(0))
                .map(|index| PartitionImage {
                    index,
                    replicas: vec![node],
                    leader: node,
                    leader_epoch: 0,
                    isr: vec![node],
                    partition_epoch: 0,
                    adding_replicas: vec![],
                    removing_replicas: vec![],
                })
                .collect();
            (t.name, t.id, partitions)
        });
        Self::new(cluster_id, node, vec![this], topics)
    }

    /// An image from its parts; topic names and ids are indexed.
    pub fn new(
        cluster_id: &str,
        controller_id: i32,
        brokers: Vec<BrokerImage>,
        topics: impl IntoIterator<Item = (String, Uuid, Vec<PartitionImage>)>,
    ) -> Self {
        let mut by_name = BTreeMap::new();
        let mut by_id = HashMap::new();
        for (name, id, partitions) in topics {
            by_id.insert(id, name.clone());
            let internal = name == crate::group::offsets::OFFSETS_TOPIC
                || name == crate::txn::vocab::TRANSACTION_STATE_TOPIC;
            by_name.insert(
                name.clone(),
                Arc::new(TopicImage {
                    name,
                    id,
                    internal,
                    partitions,
                    configs: BTreeMap::new(),
                }),
            );
        }
        Self {
            cluster_id: cluster_id.to_string(),
            controller_id,
            brokers,
            deleted_topic_ids: Vec::new(),
            broker_configs: Default::default(),
            client_quotas: Default::default(),
            scram_credentials: Default::default(),
            acls: Default::default(),
            topics: by_name,
            by_id,
        }
    }

    /// The SCRAM credential of `user` for `mechanism`, as the cluster
    /// metadata holds it (salt, StoredKey, ServerKey, iterations): what SASL
    /// SCRAM authentication verifies a client against. `None` when the user
    /// has no credential for that mechanism.
    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: crate::security::scram::ScramMechanism,
    ) -> Option<crate::security::scram::ScramCredential> {
        self.scram_credentials.get(user, mechanism).cloned()
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.topics.get(name)
    }

    /// Sets a topic's config overrides (while the image is being built).
    pub fn set_configs(&mut self, topic: &str, configs: BTreeMap<String, String>) {
        if let Some(t) = self.topics.get_mut(topic) {
            Arc::make_mut(t).configs = configs;
        }
    }

    /// What this image places on broker `node`: every topic, and which of
    /// its partitions have a replica there (none for most topics of a big
    /// cluster: the broker then holds none, and deletes what a
    /// reassignment moved away).
    pub fn assigned_to(&self, node: i32) -> Vec<Assigned> {
        self.topics
            .values()
            .map(|t| {
                let held: Vec<i32> = t
                    .partitions
                    .iter()
                    .filter(|p| p.replicas.contains(&node))
                    .map(|p| p.index)
                    .collect();
                let replication_factor = t
                    .partitions
                    .first()
                    .map_or(1, |p| i16::try_from(p.replicas.len()).unwrap_or(i16::MAX));
                Assigned {
                    name: t.name.clone(),
                    id: t.id,
                    partitions: i32::try_from(t.partitions.len()).unwrap_or(i32::MAX),
                    replication_factor,
                    configs: t.configs.clone(),
                    held,
                }
            })
            .collect()
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&Arc<TopicImage>> {
        self.topics.get(self.by_id.get(&id)?)
    }

    /// Every topic, by name.
    pub fn topics(&self) -> impl Iterator<Item = &Arc<TopicImage>> {
        self.topics.values()
    }

    pub fn partition(&self, topic: &str, index: i32) -> Option<&PartitionImage> {
        self.topic(topic)?.partition(index)
    }

    pub fn broker(&self, id: i32) -> Option<&BrokerImage> {
        self.brokers.iter().find(|b| b.id == id)
    }

    /// The role of broker `node` for `topic`-`index`; `None` when the image
    /// has no such partition.
    pub fn role(&self, topic: &str, index: i32, node: i32) -> Option<PartitionRole> {
        Some(self.partition(topic, index)?.role_of(node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this() -> BrokerImage {
        BrokerImage {
            id: 3,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: None,
            endpoints: vec![],
            incarnation: None,
        }
    }

    #[test]
    fn a_broker_answers_on_the_endpoint_of_the_request_s_listener() {
        let endpoint = |name: &str, port| ListenerEndpoint {
            name: name.into(),
            host: "127.0.0.1".into(),
            port,
            security_protocol: "PLAINTEXT".into(),
        };
        let b = BrokerImage {
            endpoints: vec![endpoint("INTERNAL", 9092), endpoint("EXTERNAL", 9094)],
            ..this()
        };
        assert_eq!(b.endpoint("EXTERNAL"), Some(("127.0.0.1", 9094)));
        assert_eq!(b.endpoint("INTERNAL"), Some(("127.0.0.1", 9092)));
        assert_eq!(b.endpoint("OTHER"), None, "left out, as Kafka does");
        assert_eq!(
            this().endpoint("ANY"),
            Some(("127.0.0.1", 9092)),
            "an older broker without named endpoints answers on its one address"
        );
    }

    #[test]
    fn a_standalone_broker_leads_every_partition_in_epoch_0() {
        let id = Uuid::new_v4();
        let image = MetadataImage::standalone(
            "c1",
            this(),
            [
                TopicFacts {
                    name: "orders".into(),
                    id,
                    partitions: 3,
                },
                TopicFacts {
                    name: "__consumer_offsets".into(),
                    id: Uuid::new_v4(),
                    partitions: 1,
                },
            ],
        );
        assert_eq!(image.controller_id, 3);
        assert_eq!(image.brokers, vec![this()]);
        assert_eq!(
            image.topic_by_id(id).map(|t| t.name.as_str()),
            Some("orders")
        );
        assert!(image.topic("__consumer_offsets").unwrap().internal);
        assert!(!image.topic("orders").unwrap().internal);
        for p in 0..3 {
            assert_eq!(
                image.role("orders", p, 3),
                Some(PartitionRole::Leader { epoch: 0 })
            );
        }
        assert_eq!(image.role("orders", 3, 3), None);
        assert_eq!(image.role("orders", -1, 3), None);
        assert_eq!(image.role("nope", 0, 3), None);
        assert_eq!(image.role("orders", 0, 4), Some(PartitionRole::NotReplica));
    }

    #[test]
    fn a_broker_is_assigned_the_partitions_it_has_replicas_of() {
        let p = |index, replicas: Vec<i32>| PartitionImage {
            index,
            leader: replicas[0],
            isr: replicas.clone(),
            replicas,
            leader_epoch: 0,
            partition_epoch: 0,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        let id = Uuid::new_v4();
        let mut image = MetadataImage::new(
            "c",
            1,
            vec![],
            [
                (
                    "a".to_string(),
                    id,
                    vec![p(0, vec![1]), p(1, vec![2]), p(2, vec![3, 1])],
                ),
                ("b".to_string(), Uuid::new_v4(), vec![p(0, vec![2])]),
            ],
        );
        image.set_configs("a", [("retention.ms".to_string(), "1".to_string())].into());
        let here = image.assigned_to(1);
        assert_eq!(here.len(), 2, "every topic, held here or not");
        assert_eq!(here[0].id, id);
        assert_eq!(here[0].held, vec![0, 2]);
        assert_eq!(here[0].partitions, 3);
        assert_eq!(here[0].configs["retention.ms"], "1");
        assert!(here[1].held.is_empty(), "nothing of b on broker 1");
        assert!(image.assigned_to(9).iter().all(|a| a.held.is_empty()));
    }

    #[test]
    fn roles_follow_leadership_and_replicas() {
        let p = PartitionImage {
            index: 0,
            replicas: vec![1, 2, 3],
            leader: 2,
            leader_epoch: 7,
            isr: vec![2, 3],
            partition_epoch: 9,
            adding_replicas: vec![],
            removing_replicas: vec![],
        };
        assert_eq!(p.role_of(2), PartitionRole::Leader { epoch: 7 });
        assert_eq!(
            p.role_of(1),
            PartitionRole::Follower {
                leader: 2,
                epoch: 7
            }
        );
        assert_eq!(p.role_of(9), PartitionRole::NotReplica);
        let offline = PartitionImage { leader: -1, ..p };
        assert_eq!(
            offline.role_of(2),
            PartitionRole::Follower {
                leader: -1,
                epoch: 7
            }
        );
    }
}
