//! A fake Kafka broker for tests: speaks the admin subset of the Kafka
//! protocol over TCP on 127.0.0.1 with in-memory topics, so the admin client
//! and the topic sync can be tested without the real broker.

#![allow(dead_code, clippy::map_entry)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{
    decode_request_header_from_buffer, Decodable, Encodable, Message, StrBytes,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A topic held by the fake broker.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeTopic {
    pub id: uuid::Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    pub config: BTreeMap<String, String>,
}

#[derive(Default, Debug)]
pub struct State {
    pub topics: BTreeMap<String, FakeTopic>,
    /// API keys of the requests received, in order.
    pub calls: Vec<i16>,
}

pub struct FakeBroker {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<State>>,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

impl FakeBroker {
    pub async fn start() -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let _ = serve(sock, addr, st).await;
                });
            }
        });
        FakeBroker { addr, state }
    }

    pub fn topic(&self, name: &str) -> Option<FakeTopic> {
        self.state.lock().unwrap().topics.get(name).cloned()
    }

    pub fn with_topic<R>(&self, name: &str, f: impl FnOnce(&mut FakeTopic) -> R) -> R {
        f(self.state.lock().unwrap().topics.get_mut(name).unwrap())
    }
}

async fn serve(
    mut sock: TcpStream,
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
) -> std::io::Result<()> {
    loop {
        let len = sock.read_i32().await? as usize;
        let mut buf = vec![0u8; len];
        sock.read_exact(&mut buf).await?;
        let mut body = Bytes::from(buf);
        let header = decode_request_header_from_buffer(&mut body).unwrap();
        let key = ApiKey::try_from(header.request_api_key).unwrap();
        let v = header.request_api_version;
        state.lock().unwrap().calls.push(header.request_api_key);
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(header.correlation_id)
            .encode(&mut out, key.response_header_version(v))
            .unwrap();
        handle(key, v, &mut body, &mut out, addr, &state);
        assert!(!body.has_remaining());
        let mut frame = BytesMut::new();
        frame.put_i32(out.len() as i32);
        frame.extend_from_slice(&out);
        sock.write_all(&frame).await?;
    }
}

fn range<M: Message>(key: ApiKey) -> ApiVersion {
    ApiVersion::default()
        .with_api_key(key as i16)
        .with_min_version(M::VERSIONS.min)
        .with_max_version(M::VERSIONS.max)
}

fn handle(
    key: ApiKey,
    v: i16,
    body: &mut Bytes,
    out: &mut BytesMut,
    addr: SocketAddr,
    state: &Mutex<State>,
) {
    let mut st = state.lock().unwrap();
    match key {
        ApiKey::ApiVersions => {
            ApiVersionsRequest::decode(body, v).unwrap();
            ApiVersionsResponse::default()
                .with_api_keys(vec![
                    range::<ApiVersionsRequest>(ApiKey::ApiVersions),
                    range::<MetadataRequest>(ApiKey::Metadata),
                    range::<CreateTopicsRequest>(ApiKey::CreateTopics),
                    range::<CreatePartitionsRequest>(ApiKey::CreatePartitions),
                    range::<DescribeConfigsRequest>(ApiKey::DescribeConfigs),
                    range::<IncrementalAlterConfigsRequest>(ApiKey::IncrementalAlterConfigs),
                    range::<DeleteTopicsRequest>(ApiKey::DeleteTopics),
                ])
                .encode(out, v)
                .unwrap();
        }
        ApiKey::Metadata => {
            let req = MetadataRequest::decode(body, v).unwrap();
            let names: Vec<String> = match req.topics {
                Some(ts) => ts
                    .iter()
                    .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
                    .collect(),
                None => st.topics.keys().cloned().collect(),
            };
            let topics = names
                .iter()
                .map(|n| match st.topics.get(n) {
                    Some(t) => MetadataResponseTopic::default()
                        .with_name(Some(TopicName(s(n))))
                        .with_topic_id(t.id)
                        .with_partitions(
                            (0..t.partitions)
                                .map(|p| {
                                    MetadataResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_replica_nodes(
                                            (0..t.replication_factor as i32)
                                                .map(BrokerId)
                                                .collect(),
                                        )
                                })
                                .collect(),
                        ),
                    None => MetadataResponseTopic::default()
                        .with_name(Some(TopicName(s(n))))
                        .with_error_code(3),
                })
                .collect();
            MetadataResponse::default()
                .with_controller_id(BrokerId(0))
                .with_brokers(vec![MetadataResponseBroker::default()
                    .with_node_id(BrokerId(0))
                    .with_host(s(&addr.ip().to_string()))
                    .with_port(addr.port() as i32)])
                .with_topics(topics)
                .encode(out, v)
                .unwrap();
        }
        ApiKey::CreateTopics => {
            let req = CreateTopicsRequest::decode(body, v).unwrap();
            let mut results = Vec::new();
            for t in req.topics {
                let name = t.name.0.to_string();
                let mut r = CreatableTopicResult::default().with_name(t.name.clone());
                if st.topics.contains_key(&name) {
                    r = r.with_error_code(36);
                } else if t.replication_factor > 1 {
                    r = r
                        .with_error_code(38)
                        .with_error_message(Some(s("only one broker")));
                } else {
                    let id = uuid::Uuid::new_v4();
                    st.topics.insert(
                        name,
                        FakeTopic {
                            id,
                            partitions: t.num_partitions,
                            replication_factor: t.replication_factor,
                            config: t
                                .configs
                                .iter()
                                .map(|c| {
                                    (c.name.to_string(), c.value.as_ref().unwrap().to_string())
                                })
                                .collect(),
                        },
                    );
                    r = r.with_topic_id(id).with_num_partitions(t.num_partitions);
                }
                results.push(r);
            }
            CreateTopicsResponse::default()
                .with_topics(results)
                .encode(out, v)
                .unwrap();
        }
        ApiKey::CreatePartitions => {
            let req = CreatePartitionsRequest::decode(body, v).unwrap();
            let results = req
                .topics
                .iter()
                .map(|t| {
                    let r = CreatePartitionsTopicResult::default().with_name(t.name.clone());
                    match st.topics.get_mut(t.name.0.as_str()) {
                        None => r.with_error_code(3),
                        Some(topic) if t.count <= topic.partitions => r.with_error_code(37),
                        Some(topic) => {
                            topic.partitions = t.count;
                            r
                        }
                    }
                })
                .collect();
            CreatePartitionsResponse::default()
                .with_results(results)
                .encode(out, v)
                .unwrap();
        }
        ApiKey::DescribeConfigs => {
            let req = DescribeConfigsRequest::decode(body, v).unwrap();
            let results = req
                .resources
                .iter()
                .map(|r| {
                    let res = DescribeConfigsResult::default()
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name.clone());
                    match st.topics.get(r.resource_name.as_str()) {
                        None => res.with_error_code(3),
                        Some(t) => {
                            let mut configs: Vec<DescribeConfigsResourceResult> = t
                                .config
                                .iter()
                                .map(|(k, val)| {
                                    DescribeConfigsResourceResult::default()
                                        .with_name(s(k))
                                        .with_value(Some(s(val)))
                                        .with_config_source(1)
                                })
                                .collect();
                            if !t.config.contains_key("retention.ms") {
                                configs.push(
                                    DescribeConfigsResourceResult::default()
                                        .with_name(s("retention.ms"))
                                        .with_value(Some(s("604800000")))
                                        .with_config_source(5),
                                );
                            }
                            res.with_configs(configs)
                        }
                    }
                })
                .collect();
            DescribeConfigsResponse::default()
                .with_results(results)
                .encode(out, v)
                .unwrap();
        }
        ApiKey::IncrementalAlterConfigs => {
            let req = IncrementalAlterConfigsRequest::decode(body, v).unwrap();
            let responses = req
                .resources
                .iter()
                .map(|r| {
                    let resp = AlterConfigsResourceResponse::default()
                        .with_resource_type(r.resource_type)
                        .with_resource_name(r.resource_name.clone());
                    match st.topics.get_mut(r.resource_name.as_str()) {
                        None => resp.with_error_code(3),
                        Some(t) => {
                            for c in &r.configs {
                                match c.config_operation {
                                    0 => {
                                        t.config.insert(
                                            c.name.to_string(),
                                            c.value.as_ref().unwrap().to_string(),
                                        );
                                    }
                                    1 => {
                                        t.config.remove(c.name.as_str());
                                    }
                                    _ => return resp.with_error_code(42),
                                }
                            }
                            resp
                        }
                    }
                })
                .collect();
            IncrementalAlterConfigsResponse::default()
                .with_responses(responses)
                .encode(out, v)
                .unwrap();
        }
        ApiKey::DeleteTopics => {
            let req = DeleteTopicsRequest::decode(body, v).unwrap();
            let mut names: Vec<String> = req.topic_names.iter().map(|n| n.0.to_string()).collect();
            names.extend(
                req.topics
                    .iter()
                    .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string())),
            );
            let responses = names
                .iter()
                .map(|n| {
                    let r = DeletableTopicResult::default().with_name(Some(TopicName(s(n))));
                    if st.topics.remove(n).is_some() {
                        r
                    } else {
                        r.with_error_code(3)
                    }
                })
                .collect();
            DeleteTopicsResponse::default()
                .with_responses(responses)
                .encode(out, v)
                .unwrap();
        }
        other => panic!("fake broker does not handle {other:?}"),
    }
}
