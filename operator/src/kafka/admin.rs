//! The admin connection: one TCP connection to one broker, ApiVersions on
//! connect, then typed admin calls that turn Kafka error codes into
//! [`KafkaError::Broker`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::DescribeConfigsResourceResult;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, DescribeLogDirsRequest, ElectLeadersRequest,
    ListPartitionReassignmentsRequest,
};
use kafka_protocol::messages::{
    ApiVersionsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, IncrementalAlterConfigsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::dial::{BrokerStream, Dial};
use super::metadata::{BrokerInfo, ClusterMetadata, PartitionInfo, TopicMetadata};
use super::reassign::{self, OngoingReassignment, PartitionError, Reassignment};
use super::wire::{self, ApiVersions};
use super::{codes, KafkaError};

const CLIENT_ID: &str = "moldau-operator";
/// Config resource type of a topic.
const RESOURCE_TOPIC: i8 = 2;
/// Kafka config resource type of a broker.
const RESOURCE_BROKER: i8 = 4;
/// DescribeConfigs `config_source` of a topic-level override.
pub const SOURCE_TOPIC_CONFIG: i8 = 1;
/// DescribeConfigs `config_source` of a cluster-wide dynamic broker default.
pub const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;

/// One entry of DescribeConfigs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Config name.
    pub name: String,
    /// Value (None when sensitive or unset).
    pub value: Option<String>,
    /// Kafka config source (1 = topic override, 5 = default, …).
    pub source: i8,
    /// Sensitive values are never reported.
    pub sensitive: bool,
}

/// One IncrementalAlterConfigs operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigOp {
    /// Set a topic-level override.
    Set(String, String),
    /// Remove a topic-level override (back to the broker default).
    Delete(String),
}

/// An admin connection to one broker.
pub struct AdminClient {
    addr: String,
    stream: Box<dyn BrokerStream>,
    correlation_id: i32,
    versions: ApiVersions,
    timeout: Duration,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn opt_string(v: &Option<StrBytes>) -> Option<String> {
    v.as_ref().map(|v| v.as_str().to_string())
}

/// A DescribeConfigs entry; sensitive values are never kept.
fn config_entry(c: DescribeConfigsResourceResult) -> ConfigEntry {
    ConfigEntry {
        name: c.name.as_str().to_string(),
        value: if c.is_sensitive {
            None
        } else {
            opt_string(&c.value)
        },
        source: c.config_source,
        sensitive: c.is_sensitive,
    }
}

impl AdminClient {
    /// Connects to `addr` (a broker pod IP and listener port) and negotiates
    /// API versions. `timeout` bounds every network step.
    pub async fn connect(addr: SocketAddr, timeout: Duration) -> Result<Self, KafkaError> {
        Self::dial(addr, &Dial::plain(timeout)).await
    }

    /// [`AdminClient::connect`] as `dial` says (TLS for a secured cluster).
    pub async fn dial(addr: SocketAddr, dial: &Dial) -> Result<Self, KafkaError> {
        let stream = super::dial::open(addr, dial).await?;
        let mut client = AdminClient {
            addr: addr.to_string(),
            stream,
            correlation_id: 0,
            versions: ApiVersions::default(),
            timeout: dial.timeout,
        };
        client.versions = client.api_versions().await?;
        Ok(client)
    }

    /// The broker address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn round_trip(&mut self, frame: Bytes) -> Result<Bytes, KafkaError> {
        let addr = self.addr.clone();
        let io = |source| KafkaError::Io {
            addr: addr.clone(),
            source,
        };
        let work = async {
            self.stream.write_all(&frame).await.map_err(io)?;
            let mut prefix = [0u8; 4];
            self.stream.read_exact(&mut prefix).await.map_err(io)?;
            let len = wire::frame_len(prefix)?;
            let mut body = vec![0u8; len];
            self.stream.read_exact(&mut body).await.map_err(io)?;
            Ok::<_, KafkaError>(Bytes::from(body))
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| KafkaError::Timeout(self.addr.clone()))?
    }

    fn next_correlation(&mut self) -> i32 {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        self.correlation_id
    }

    async fn api_versions(&mut self) -> Result<ApiVersions, KafkaError> {
        // Ask with v3; a broker that does not speak it answers in v0 with
        // UNSUPPORTED_VERSION and its version list.
        let req = ApiVersionsRequest::default()
            .with_client_software_name(s(CLIENT_ID))
            .with_client_software_version(s(env!("CARGO_PKG_VERSION")));
        let id = self.next_correlation();
        let body = self
            .round_trip(wire::encode_request(&req, 3, id, CLIENT_ID)?)
            .await?;
        let resp = match wire::decode_response::<ApiVersionsRequest>(body.clone(), 3, id) {
            Ok(r) if r.error_code == 0 => r,
            _ => {
                let r = wire::decode_response::<ApiVersionsRequest>(body, 0, id)?;
                if r.error_code != 0 && r.error_code != codes::UNSUPPORTED_VERSION {
                    return Err(KafkaError::broker("ApiVersions", r.error_code, None));
                }
                r
            }
        };
        Ok(ApiVersions::from_response(&resp))
    }

    pub(super) async fn call<R: Request>(
        &mut self,
        req: R,
        name: &'static str,
    ) -> Result<R::Response, KafkaError> {
        let version = self.versions.negotiate::<R>(name)?;
        self.call_at(req, version).await
    }

    async fn call_at<R: Request>(
        &mut self,
        req: R,
        version: i16,
    ) -> Result<R::Response, KafkaError> {
        let id = self.next_correlation();
        let frame = wire::encode_request(&req, version, id, CLIENT_ID)?;
        let body = self.round_trip(frame).await?;
        wire::decode_response::<R>(body, version, id)
    }

    /// Metadata of the brokers and of `topics` (all topics when None).
    /// Topics that do not exist are left out.
    pub async fn metadata(
        &mut self,
        topics: Option<&[String]>,
    ) -> Result<ClusterMetadata, KafkaError> {
        let version = self.versions.negotiate::<MetadataRequest>("Metadata")?;
        let req = MetadataRequest::default()
            .with_topics(topics.map(|ts| {
                ts.iter()
                    .map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(s(t)))))
                    .collect()
            }))
            .with_allow_auto_topic_creation(version < 4);
        let resp = self.call_at(req, version).await?;
        let mut out = ClusterMetadata {
            controller_id: resp.controller_id.0,
            brokers: resp
                .brokers
                .iter()
                .map(|b| BrokerInfo {
                    node_id: b.node_id.0,
                    host: b.host.as_str().to_string(),
                    port: b.port,
                    rack: opt_string(&b.rack),
                })
                .collect(),
            topics: Vec::new(),
        };
        for t in resp.topics {
            let name = t
                .name
                .as_ref()
                .map(|n| n.0.as_str().to_string())
                .unwrap_or_default();
            match t.error_code {
                0 => {}
                codes::UNKNOWN_TOPIC_OR_PARTITION => continue,
                code => {
                    return Err(KafkaError::broker(
                        "Metadata",
                        code,
                        Some(format!("topic {name}")),
                    ))
                }
            }
            out.topics.push(TopicMetadata {
                name,
                topic_id: (!t.topic_id.is_nil()).then(|| t.topic_id.to_string()),
                partitions: t.partitions.len() as i32,
                replication_factor: t
                    .partitions
                    .iter()
                    .map(|p| p.replica_nodes.len() as i32)
                    .max()
                    .unwrap_or(0),
                partition_details: {
                    let mut ps: Vec<PartitionInfo> = t
                        .partitions
                        .iter()
                        .map(|p| PartitionInfo {
                            partition: p.partition_index,
                            leader: p.leader_id.0,
                            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                        })
                        .collect();
                    ps.sort_by_key(|p| p.partition);
                    ps
                },
            });
        }
        Ok(out)
    }

    /// Creates a topic. Returns its id when the broker reports one.
    pub async fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &BTreeMap<String, String>,
    ) -> Result<Option<String>, KafkaError> {
        let topic = CreatableTopic::default()
            .with_name(TopicName(s(name)))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(s(k))
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            );
        let req = CreateTopicsRequest::default()
            .with_topics(vec![topic])
            .with_timeout_ms(30_000);
        let resp = self.call(req, "CreateTopics").await?;
        let result = resp
            .topics
            .into_iter()
            .find(|t| t.name.0.as_str() == name)
            .ok_or_else(|| {
                KafkaError::Protocol(format!("CreateTopics response lacks topic {name}"))
            })?;
        if result.error_code != 0 {
            return Err(KafkaError::broker(
                "CreateTopics",
                result.error_code,
                opt_string(&result.error_message),
            ));
        }
        Ok((!result.topic_id.is_nil()).then(|| result.topic_id.to_string()))
    }

    /// Grows a topic to `count` partitions, placed by the cluster.
    pub async fn create_partitions(&mut self, name: &str, count: i32) -> Result<(), KafkaError> {
        let req = CreatePartitionsRequest::default()
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(TopicName(s(name)))
                .with_count(count)
                // null, not the codec's default empty list: Kafka (and
                // Moldau) refuse an empty list as INVALID_REPLICA_ASSIGNMENT
                .with_assignments(None)])
            .with_timeout_ms(30_000);
        let resp = self.call(req, "CreatePartitions").await?;
        for r in resp.results {
            if r.error_code != 0 {
                return Err(KafkaError::broker(
                    "CreatePartitions",
                    r.error_code,
                    opt_string(&r.error_message),
                ));
            }
        }
        Ok(())
    }

    /// The configs of one resource (`resource_type`, `name`).
    async fn describe_one(
        &mut self,
        resource_type: i8,
        name: &str,
    ) -> Result<Vec<ConfigEntry>, KafkaError> {
        let req = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(s(name))
                .with_configuration_keys(None),
        ]);
        let resp = self.call(req, "DescribeConfigs").await?;
        let result = resp
            .results
            .into_iter()
            .next()
            .ok_or_else(|| KafkaError::Protocol("DescribeConfigs response is empty".into()))?;
        if result.error_code != 0 {
            return Err(KafkaError::broker(
                "DescribeConfigs",
                result.error_code,
                opt_string(&result.error_message),
            ));
        }
        Ok(result.configs.into_iter().map(config_entry).collect())
    }

    /// The config of a topic.
    pub async fn describe_topic_config(
        &mut self,
        name: &str,
    ) -> Result<Vec<ConfigEntry>, KafkaError> {
        self.describe_one(RESOURCE_TOPIC, name).await
    }

    /// The configs of many topics in one DescribeConfigs request (only
    /// `key` when given): topic → its entries. Topics that answer with an
    /// error (e.g. deleted meanwhile) are left out.
    async fn describe_topics(
        &mut self,
        topics: &[String],
        key: Option<&str>,
    ) -> Result<BTreeMap<String, Vec<ConfigEntry>>, KafkaError> {
        if topics.is_empty() {
            return Ok(BTreeMap::new());
        }
        let req = DescribeConfigsRequest::default().with_resources(
            topics
                .iter()
                .map(|t| {
                    DescribeConfigsResource::default()
                        .with_resource_type(RESOURCE_TOPIC)
                        .with_resource_name(s(t))
                        .with_configuration_keys(key.map(|k| vec![s(k)]))
                })
                .collect(),
        );
        let resp = self.call(req, "DescribeConfigs").await?;
        Ok(resp
            .results
            .into_iter()
            .filter(|r| r.error_code == 0)
            .map(|r| {
                let entries = r.configs.into_iter().map(config_entry).collect();
                (r.resource_name.as_str().to_string(), entries)
            })
            .collect())
    }

    /// One config `key` of many topics in one DescribeConfigs request:
    /// topic → its value (absent when the topic reports none or an error,
    /// e.g. it was deleted meanwhile). Sensitive values are never reported.
    pub async fn describe_topics_config_key(
        &mut self,
        topics: &[String],
        key: &str,
    ) -> Result<BTreeMap<String, String>, KafkaError> {
        Ok(self
            .describe_topics(topics, Some(key))
            .await?
            .into_iter()
            .filter_map(|(topic, entries)| {
                entries
                    .into_iter()
                    .find(|e| e.name == key)
                    .and_then(|e| e.value)
                    .map(|v| (topic, v))
            })
            .collect())
    }

    /// The topic-level overrides (DescribeConfigs source = topic) of many
    /// topics in one request: topic → key → value. Topics that answer with
    /// an error are left out; sensitive values are never reported.
    pub async fn describe_topics_overrides(
        &mut self,
        topics: &[String],
    ) -> Result<BTreeMap<String, BTreeMap<String, String>>, KafkaError> {
        Ok(self
            .describe_topics(topics, None)
            .await?
            .into_iter()
            .map(|(topic, entries)| {
                let overrides = entries
                    .into_iter()
                    .filter(|e| e.source == SOURCE_TOPIC_CONFIG)
                    .filter_map(|e| Some((e.name, e.value?)))
                    .collect();
                (topic, overrides)
            })
            .collect())
    }

    /// Applies config operations to a topic.
    pub async fn alter_topic_config(
        &mut self,
        name: &str,
        ops: &[ConfigOp],
    ) -> Result<(), KafkaError> {
        self.alter_config(RESOURCE_TOPIC, name, ops).await
    }

    /// The cluster-wide dynamic broker defaults (DescribeConfigs of the
    /// broker resource `""`, entries of source DYNAMIC_DEFAULT_BROKER_CONFIG).
    pub async fn describe_broker_defaults(
        &mut self,
    ) -> Result<BTreeMap<String, String>, KafkaError> {
        Ok(self
            .describe_one(RESOURCE_BROKER, "")
            .await?
            .into_iter()
            .filter(|e| e.source == SOURCE_DYNAMIC_DEFAULT_BROKER)
            .filter_map(|e| Some((e.name, e.value?)))
            .collect())
    }

    /// Applies dynamic config operations to a broker (`entity`: its node
    /// id, or `""` for the cluster-wide default), as `kafka-configs
    /// --entity-type brokers` does.
    pub async fn alter_broker_config(
        &mut self,
        entity: &str,
        ops: &[ConfigOp],
    ) -> Result<(), KafkaError> {
        self.alter_config(RESOURCE_BROKER, entity, ops).await
    }

    async fn alter_config(
        &mut self,
        resource_type: i8,
        name: &str,
        ops: &[ConfigOp],
    ) -> Result<(), KafkaError> {
        let configs = ops
            .iter()
            .map(|op| match op {
                ConfigOp::Set(k, v) => AlterableConfig::default()
                    .with_name(s(k))
                    .with_config_operation(0)
                    .with_value(Some(s(v))),
                ConfigOp::Delete(k) => AlterableConfig::default()
                    .with_name(s(k))
                    .with_config_operation(1)
                    .with_value(None),
            })
            .collect();
        let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(s(name))
                .with_configs(configs),
        ]);
        let resp = self.call(req, "IncrementalAlterConfigs").await?;
        for r in resp.responses {
            if r.error_code != 0 {
                return Err(KafkaError::broker(
                    "IncrementalAlterConfigs",
                    r.error_code,
                    opt_string(&r.error_message),
                ));
            }
        }
        Ok(())
    }

    /// Deletes a topic; a topic that does not exist is not an error.
    pub async fn delete_topic(&mut self, name: &str) -> Result<(), KafkaError> {
        let version = self
            .versions
            .negotiate::<DeleteTopicsRequest>("DeleteTopics")?;
        let mut req = DeleteTopicsRequest::default().with_timeout_ms(30_000);
        if version >= 6 {
            req = req.with_topics(vec![
                DeleteTopicState::default().with_name(Some(TopicName(s(name))))
            ]);
        } else {
            req = req.with_topic_names(vec![TopicName(s(name))]);
        }
        let resp = self.call_at(req, version).await?;
        for r in resp.responses {
            match r.error_code {
                0 | codes::UNKNOWN_TOPIC_OR_PARTITION => {}
                code => {
                    return Err(KafkaError::broker(
                        "DeleteTopics",
                        code,
                        opt_string(&r.error_message),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Starts (target replicas) or cancels (`None`) partition reassignments
    /// (KIP-455; send to the controller). Returns the partitions the broker
    /// refused; cancelling a move that already finished is not refused.
    pub async fn alter_partition_reassignments(
        &mut self,
        moves: &[Reassignment],
    ) -> Result<Vec<PartitionError>, KafkaError> {
        let cancel = moves.iter().all(|m| m.replicas.is_none());
        let req = reassign::alter_request(moves, 30_000);
        let resp = self
            .call::<AlterPartitionReassignmentsRequest>(req, "AlterPartitionReassignments")
            .await?;
        reassign::alter_errors(&resp, cancel)
    }

    /// The reassignments the controller is running.
    pub async fn list_partition_reassignments(
        &mut self,
    ) -> Result<Vec<OngoingReassignment>, KafkaError> {
        let resp = self
            .call::<ListPartitionReassignmentsRequest>(
                reassign::list_request(30_000),
                "ListPartitionReassignments",
            )
            .await?;
        reassign::ongoing(&resp)
    }

    /// Size in bytes of every replica on this broker, by (topic, partition).
    pub async fn describe_log_dirs(&mut self) -> Result<BTreeMap<(String, i32), u64>, KafkaError> {
        let resp = self
            .call::<DescribeLogDirsRequest>(reassign::log_dirs_request(), "DescribeLogDirs")
            .await?;
        reassign::replica_sizes(&resp)
    }

    /// Elects the preferred leader (first replica) of `partitions`. Returns
    /// the partitions it could not elect for.
    pub async fn elect_preferred_leaders(
        &mut self,
        partitions: &[(String, i32)],
    ) -> Result<Vec<PartitionError>, KafkaError> {
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let req = reassign::elect_preferred_request(partitions, 30_000);
        let resp = self
            .call::<ElectLeadersRequest>(req, "ElectLeaders")
            .await?;
        reassign::elect_errors(&resp)
    }
}
