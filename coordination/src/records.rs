//! The cluster metadata records, as the controller keeps them in memory and
//! persists them (one object per record, so objects stay small however many
//! topics a cluster has). Plain serializable data with the few invariants a
//! reader must check before trusting a record someone may have edited by
//! hand ([`TopicRecord::validate`], [`ClusterRecord::validate`]).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A broker the controller has registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisteredBroker {
    /// The node id (the StatefulSet ordinal).
    pub node_id: i32,
    /// Where clients reach its Kafka listener.
    pub host: String,
    pub port: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// New at every process start (a UUID).
    pub incarnation: String,
    /// Grows with every registration of this node id.
    pub broker_epoch: i64,
    /// Fenced brokers (heartbeats stopped) lead nothing.
    #[serde(default)]
    pub fenced: bool,
    /// SHA-256 (hex) of the succession token of its data directory: a
    /// restart presenting the same token replaces a still-live
    /// incarnation at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succession_hash: Option<String>,
    /// Every advertised listener (issue 38); `host`/`port` above stay the
    /// inter-broker one, and a record written before listeners were named
    /// has none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<ListenerEndpointRecord>,
}

/// One advertised listener of a registered broker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListenerEndpointRecord {
    /// The listener's name, upper-case.
    pub name: String,
    pub host: String,
    pub port: i32,
    /// Kafka's security protocol name (`SASL_SSL`).
    pub security_protocol: String,
}

/// The cluster-wide record: one per cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRecord {
    /// Kafka's cluster id (22 characters of URL-safe base64); never changes.
    pub cluster_id: String,
    /// The active controller's node id (-1: none yet).
    pub controller_id: i32,
    /// The active controller's gRPC endpoint (`http://host:port`); brokers
    /// find the controller here, never through cluster DNS.
    #[serde(default)]
    pub controller_address: String,
    /// Producer ids below this may have been handed out (blocks are
    /// allocated by moving this up, so ids are never reused).
    #[serde(default)]
    pub producer_id_block_end: i64,
    /// The brokers registered with the controller.
    #[serde(default)]
    pub brokers: Vec<RegisteredBroker>,
    /// Ids of the most recently deleted topics (at most
    /// [`DELETED_TOPICS_KEPT`], oldest first). A broker deletes a topic's
    /// local data only when its id is here (or a new topic took its name):
    /// a topic merely missing from the metadata — an object someone broke
    /// by hand, a bug — never costs data.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted_topics: Vec<String>,
    /// Dynamic broker configs by entity: `""` for the cluster-wide
    /// default, else a broker's node id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Client quotas (Kafka's AlterClientQuotas), one entry per entity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_quotas: Vec<ClientQuotaRecord>,
    /// SCRAM credentials (Kafka's AlterUserScramCredentials), one entry per
    /// user and mechanism: salted and hashed as Kafka stores them, never a
    /// password.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scram_credentials: Vec<ScramCredentialRecord>,
    /// ACL bindings (Kafka's CreateAcls/DeleteAcls), one entry per binding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<AclRecord>,
}

/// One ACL binding (Kafka's `AccessControlEntryRecord`): a resource pattern
/// and an access control entry, the enums by Kafka's names as `kafka-acls`
/// prints them. A reader skips (and reports) an entry it cannot use — an
/// unknown name, a binding Kafka would refuse — rather than refusing the
/// record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AclRecord {
    /// `TOPIC`, `GROUP`, `CLUSTER`, `TRANSACTIONAL_ID`, `DELEGATION_TOKEN`
    /// or `USER`.
    pub resource_type: String,
    /// A name, a prefix, or `*` (every resource of the type).
    pub resource_name: String,
    /// `LITERAL` or `PREFIXED`.
    pub pattern_type: String,
    /// `Type:name`, e.g. `User:alice`, or `User:*`.
    pub principal: String,
    /// A client address, or `*`.
    pub host: String,
    /// Kafka's operation name (`READ`, `WRITE`, `ALL`, …).
    pub operation: String,
    /// `ALLOW` or `DENY`.
    pub permission: String,
}

/// One user's credential for one SCRAM mechanism (Kafka's
/// `UserScramCredentialRecord`): what verifies a client's proof and signs
/// the server's answer, not enough to authenticate as the user. Bytes are
/// standard base64. A reader skips (and reports) an entry it cannot use —
/// an unknown mechanism, bad base64 — rather than refusing the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScramCredentialRecord {
    /// The user name (the SASL username, any non-empty string).
    #[schemars(length(min = 1))]
    pub user: String,
    /// `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub mechanism: String,
    pub salt: String,
    /// H(HMAC(SaltedPassword, "Client Key")).
    pub stored_key: String,
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: String,
    pub iterations: i32,
}

/// One part of a client-quota entity: a name, or the default of its kind
/// (`{"kind": "name", "name": "app-1"}` / `{"kind": "default"}`: both
/// objects, so the MetadataShard schema stays structural), or — client ids
/// only, a Moldau extension — every client id starting with a prefix
/// (`{"kind": "prefix", "name": "batch-"}`; records written before it
/// existed read unchanged).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "camelCase")]
pub enum QuotaName {
    Name(String),
    Default,
    /// Client ids starting with this (non-empty) prefix.
    Prefix(String),
}

/// By hand: the derived schema is a `oneOf` whose variants give `kind`
/// different enums, which a structural CRD schema cannot hold.
impl JsonSchema for QuotaName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "QuotaName".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "description": "A name (kind: name), the default of its kind (kind: default), or a client-id prefix (kind: prefix).",
            "properties": {
                "kind": {"type": "string", "enum": ["name", "default", "prefix"]},
                "name": {"type": "string"}
            },
            "required": ["kind"]
        })
    }
}

/// A client-quota entity: a user and/or a client id (each a name or the
/// default; a client id may also be a prefix); a part that is `None` is not
/// part of the entity.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct QuotaEntity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<QuotaName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<QuotaName>,
}

/// An entity's quotas: `producer_byte_rate`, `consumer_byte_rate`,
/// `request_percentage`, as Kafka's decimal text (doubles).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientQuotaRecord {
    pub entity: QuotaEntity,
    pub values: BTreeMap<String, String>,
}

/// How many deleted topic ids the cluster record keeps.
pub const DELETED_TOPICS_KEPT: usize = 1000;

impl ClusterRecord {
    /// Records a deleted topic's id, forgetting the oldest beyond the cap.
    pub fn remember_deleted(&mut self, topic_id: &str) {
        self.deleted_topics.retain(|t| t != topic_id);
        self.deleted_topics.push(topic_id.to_string());
        let over = self
            .deleted_topics
            .len()
            .saturating_sub(DELETED_TOPICS_KEPT);
        self.deleted_topics.drain(..over);
    }
}

/// One partition's replica set and leadership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionRecord {
    pub index: i32,
    /// Replicas, preferred leader first.
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// -1: no leader (offline).
    pub leader: i32,
    /// Grows with every leader change; never goes back.
    pub leader_epoch: i32,
    /// Grows with every change of this partition (leader, ISR, replicas).
    pub partition_epoch: i32,
    /// While a reassignment runs (KIP-455): replicas being added (in
    /// `replicas` already, catching up; not yet in the target's ISR).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<i32>,
    /// While a reassignment runs: replicas to drop once every target
    /// replica is in sync (`replicas` minus these is the target).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<i32>,
    /// While the partition has no leader: former ISR members that may
    /// lead without losing acknowledged records (Moldau's form of
    /// KIP-966's eligible leader replicas; empty whenever a leader exists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub eligible_leader_replicas: Vec<i32>,
}

/// One topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopicRecord {
    /// The Kafka topic name (may hold characters Kubernetes names cannot).
    pub name: String,
    /// The topic id (a UUID).
    pub topic_id: String,
    pub replication_factor: i16,
    /// Topic config overrides.
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
    /// By index, 0..n.
    pub partitions: Vec<PartitionRecord>,
}

/// Why a record cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidRecord(pub String);

impl TopicRecord {
    /// Checks what every reader relies on: a valid id, partitions numbered
    /// 0..n, each with replicas, a leader among them (or -1), an ISR within
    /// the replicas, and non-negative epochs.
    pub fn validate(&self) -> Result<(), InvalidRecord> {
        let bad = |m: String| Err(InvalidRecord(format!("topic {:?}: {m}", self.name)));
        if self.name.is_empty() {
            return bad("empty name".into());
        }
        if uuid::Uuid::parse_str(&self.topic_id).is_err() {
            return bad(format!("topic id {:?} is not a UUID", self.topic_id));
        }
        if self.replication_factor < 1 {
            return bad(format!(
                "replication factor {} is below 1",
                self.replication_factor
            ));
        }
        if self.partitions.is_empty() {
            return bad("no partitions".into());
        }
        for (i, p) in self.partitions.iter().enumerate() {
            if usize::try_from(p.index).ok() != Some(i) {
                return bad(format!("partition {i} has index {}", p.index));
            }
            if p.replicas.is_empty() {
                return bad(format!("partition {i} has no replicas"));
            }
            let mut seen = p.replicas.clone();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != p.replicas.len() || seen.iter().any(|r| *r < 0) {
                return bad(format!("partition {i} has replicas {:?}", p.replicas));
            }
            if p.leader != -1 && !p.replicas.contains(&p.leader) {
                return bad(format!(
                    "partition {i}: leader {} is not a replica",
                    p.leader
                ));
            }
            if p.isr.iter().any(|r| !p.replicas.contains(r)) {
                return bad(format!(
                    "partition {i}: ISR {:?} is not within the replicas",
                    p.isr
                ));
            }
            if p.eligible_leader_replicas
                .iter()
                .any(|r| !p.replicas.contains(r))
            {
                return bad(format!(
                    "partition {i}: eligible leaders {:?} are not within the replicas",
                    p.eligible_leader_replicas
                ));
            }
            let mut moving = p.adding_replicas.iter().chain(&p.removing_replicas);
            if moving.any(|r| !p.replicas.contains(r))
                || p.adding_replicas
                    .iter()
                    .any(|r| p.removing_replicas.contains(r))
                || p.removing_replicas.len() >= p.replicas.len()
            {
                return bad(format!(
                    "partition {i}: a reassignment adding {:?} and removing {:?} does not fit the replicas {:?}",
                    p.adding_replicas, p.removing_replicas, p.replicas
                ));
            }
            if p.leader_epoch < 0 || p.partition_epoch < 0 {
                return bad(format!("partition {i} has a negative epoch"));
            }
        }
        Ok(())
    }
}

impl ClusterRecord {
    /// Checks a cluster id is present and node ids are unique.
    pub fn validate(&self) -> Result<(), InvalidRecord> {
        if self.cluster_id.is_empty() {
            return Err(InvalidRecord("the cluster record has no cluster id".into()));
        }
        let mut ids: Vec<i32> = self.brokers.iter().map(|b| b.node_id).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        if ids.len() != n {
            return Err(InvalidRecord(
                "the cluster record lists a node id twice".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_entities_are_objects_in_json_and_read_back() {
        let record = ClientQuotaRecord {
            entity: QuotaEntity {
                user: Some(QuotaName::Default),
                client_id: Some(QuotaName::Name("app".into())),
            },
            values: BTreeMap::from([("producer_byte_rate".into(), "1048576".into())]),
        };
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(
            json["entity"]["user"],
            serde_json::json!({"kind": "default"})
        );
        assert_eq!(
            json["entity"]["clientId"],
            serde_json::json!({"kind": "name", "name": "app"})
        );
        assert_eq!(
            serde_json::from_value::<ClientQuotaRecord>(json).unwrap(),
            record
        );
    }

    #[test]
    fn prefix_entities_are_a_new_kind_and_old_records_read_unchanged() {
        let record = ClientQuotaRecord {
            entity: QuotaEntity {
                user: None,
                client_id: Some(QuotaName::Prefix("batch-".into())),
            },
            values: BTreeMap::from([("producer_byte_rate".into(), "1024".into())]),
        };
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(
            json["entity"]["clientId"],
            serde_json::json!({"kind": "prefix", "name": "batch-"})
        );
        assert_eq!(
            serde_json::from_value::<ClientQuotaRecord>(json).unwrap(),
            record
        );
        // a record as written before prefixes existed
        let old = serde_json::json!({
            "entity": {"user": {"kind": "default"}, "clientId": {"kind": "name", "name": "app"}},
            "values": {"consumer_byte_rate": "10"}
        });
        let old: ClientQuotaRecord = serde_json::from_value(old).unwrap();
        assert_eq!(old.entity.client_id, Some(QuotaName::Name("app".into())));
        assert_eq!(old.entity.user, Some(QuotaName::Default));
    }

    #[test]
    fn scram_credentials_are_optional_and_round_trip() {
        // a cluster record written before SCRAM credentials existed
        let old = serde_json::json!({"clusterId": "abcdefghijklmnopqrstuv", "controllerId": 1});
        let old: ClusterRecord = serde_json::from_value(old).unwrap();
        assert!(old.scram_credentials.is_empty());
        assert!(serde_json::to_value(&old)
            .unwrap()
            .get("scramCredentials")
            .is_none());
        let mut record = old;
        record.scram_credentials.push(ScramCredentialRecord {
            user: "alice".into(),
            mechanism: "SCRAM-SHA-512".into(),
            salt: "c2FsdA==".into(),
            stored_key: "AAAA".into(),
            server_key: "BBBB".into(),
            iterations: 4096,
        });
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["scramCredentials"][0]["storedKey"], "AAAA");
        assert_eq!(
            serde_json::from_value::<ClusterRecord>(json).unwrap(),
            record
        );
    }

    #[test]
    fn acls_are_optional_and_round_trip() {
        // a cluster record written before ACLs existed
        let old = serde_json::json!({"clusterId": "abcdefghijklmnopqrstuv", "controllerId": 1});
        let old: ClusterRecord = serde_json::from_value(old).unwrap();
        assert!(old.acls.is_empty());
        assert!(serde_json::to_value(&old).unwrap().get("acls").is_none());
        let mut record = old;
        record.acls.push(AclRecord {
            resource_type: "TOPIC".into(),
            resource_name: "orders".into(),
            pattern_type: "LITERAL".into(),
            principal: "User:alice".into(),
            host: "*".into(),
            operation: "READ".into(),
            permission: "ALLOW".into(),
        });
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["acls"][0]["resourceType"], "TOPIC");
        assert_eq!(json["acls"][0]["patternType"], "LITERAL");
        assert_eq!(
            serde_json::from_value::<ClusterRecord>(json).unwrap(),
            record
        );
    }

    fn topic() -> TopicRecord {
        TopicRecord {
            name: "orders".into(),
            topic_id: uuid::Uuid::new_v4().to_string(),
            replication_factor: 1,
            configs: BTreeMap::new(),
            partitions: vec![
                PartitionRecord {
                    index: 0,
                    replicas: vec![1],
                    isr: vec![1],
                    leader: 1,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    adding_replicas: vec![],
                    removing_replicas: vec![],
                    eligible_leader_replicas: vec![],
                },
                PartitionRecord {
                    index: 1,
                    replicas: vec![2],
                    isr: vec![],
                    leader: -1,
                    leader_epoch: 3,
                    partition_epoch: 4,
                    adding_replicas: vec![],
                    removing_replicas: vec![],
                    eligible_leader_replicas: vec![],
                },
            ],
        }
    }

    #[test]
    fn a_well_formed_topic_is_valid() {
        assert_eq!(topic().validate(), Ok(()));
    }

    #[test]
    fn hand_edits_that_break_invariants_are_caught() {
        type Break = Box<dyn Fn(&mut TopicRecord)>;
        let cases: Vec<Break> = vec![
            Box::new(|t| t.topic_id = "nope".into()),
            Box::new(|t| t.partitions.clear()),
            Box::new(|t| t.partitions[1].index = 5),
            Box::new(|t| t.partitions[0].replicas.clear()),
            Box::new(|t| t.partitions[0].replicas = vec![1, 1]),
            Box::new(|t| t.partitions[0].adding_replicas = vec![7]),
            Box::new(|t| t.partitions[0].removing_replicas = vec![1]),
            Box::new(|t| t.partitions[0].leader = 9),
            Box::new(|t| t.partitions[0].isr = vec![7]),
            Box::new(|t| t.partitions[0].leader_epoch = -1),
            Box::new(|t| t.replication_factor = 0),
        ];
        for (i, break_it) in cases.iter().enumerate() {
            let mut t = topic();
            break_it(&mut t);
            assert!(t.validate().is_err(), "case {i}");
        }
    }

    #[test]
    fn deleted_topics_are_remembered_up_to_the_cap() {
        let mut c = ClusterRecord::default();
        for i in 0..DELETED_TOPICS_KEPT + 5 {
            c.remember_deleted(&i.to_string());
        }
        assert_eq!(c.deleted_topics.len(), DELETED_TOPICS_KEPT);
        assert_eq!(c.deleted_topics[0], "5", "the oldest are forgotten");
        c.remember_deleted("7");
        assert_eq!(c.deleted_topics.last().map(String::as_str), Some("7"));
        assert_eq!(c.deleted_topics.len(), DELETED_TOPICS_KEPT, "no duplicates");
    }

    #[test]
    fn records_serialize_in_camel_case() {
        let t = topic();
        let json = serde_json::to_value(&t).unwrap();
        assert!(json.get("topicId").is_some());
        assert!(json["partitions"][0].get("leaderEpoch").is_some());
        let back: TopicRecord = serde_json::from_value(json).unwrap();
        assert_eq!(back, t);
    }
}
