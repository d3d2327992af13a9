//! Helpers of the tests that run several broker processes as one cluster
//! (`--cluster dir`): where a cluster keeps its files, starting a broker
//! or two and restarting them, reading the cluster as Metadata shows it,
//! producing to and reading from one partition.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
};
use tokio::net::TcpStream;

use super::wire_common::*;

/// Starts broker `node` of a `--cluster dir` cluster sharing `shared`,
/// with fast heartbeats and `settings` on top.
pub fn spawn(node: &str, data: &Path, shared: &Path, logs: &Path, settings: &[&str]) -> Child {
    let shared = shared.to_str().unwrap().to_string();
    let args: Vec<&'static str> = vec![
        "--cluster",
        "dir",
        "--cluster-dir",
        Box::leak(shared.into_boxed_str()),
        "--node-id",
        Box::leak(node.to_string().into_boxed_str()),
        "--controller-listen",
        "127.0.0.1:0",
    ];
    Child::spawn(
        data,
        logs.join(format!("broker-{node}.log")),
        ChildOptions {
            settings: Box::leak(
                [
                    "broker.heartbeat.interval.ms=100",
                    "broker.session.timeout.ms=6000",
                ]
                .iter()
                .chain(settings)
                .map(|s| s.to_string())
                .map(|s| &*Box::leak(s.into_boxed_str()))
                .collect::<Vec<&'static str>>()
                .into_boxed_slice(),
            ),
            args: Box::leak(args.into_boxed_slice()),
            ..Default::default()
        },
    )
}

/// Where a test's cluster keeps its files, in one temporary folder
/// removed when this is dropped: the shared `--cluster dir` folder
/// (`shared`), each broker's data (`data-<n>`) and the brokers' logs.
pub struct ClusterDirs {
    root: tempfile::TempDir,
}

impl ClusterDirs {
    pub fn new() -> ClusterDirs {
        ClusterDirs {
            root: tempfile::tempdir().unwrap(),
        }
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The folder the brokers share (`--cluster-dir`).
    pub fn shared(&self) -> PathBuf {
        self.root().join("shared")
    }

    /// Broker `n`'s data folder.
    pub fn data(&self, n: i32) -> PathBuf {
        self.root().join(format!("data-{n}"))
    }

    /// Starts broker `n` with `settings` (see [`spawn`]).
    pub fn start(&self, n: i32, settings: &[&str]) -> Child {
        spawn(
            &n.to_string(),
            &self.data(n),
            &self.shared(),
            self.root(),
            settings,
        )
    }
}

/// Starts brokers 0 and 1 with `start` and waits (30 s at most) until
/// broker 0 shows both registered: the brokers, and that connection to
/// broker 0.
pub async fn two_brokers(start: impl Fn(i32) -> Child) -> (BTreeMap<i32, Child>, TcpStream) {
    let brokers: BTreeMap<i32, Child> = (0..2).map(|n| (n, start(n))).collect();
    let mut probe = brokers[&0].connect(Duration::from_secs(30)).await;
    let both = BTreeSet::from([0, 1]);
    wait_until(&mut probe, "t", "both brokers registered", |v| v.0 == both).await;
    (brokers, probe)
}

/// Stops broker `node` of a two-broker cluster (SIGTERM, 30 s at most):
/// the other broker's node id.
pub async fn stop_one_of_two(brokers: &mut BTreeMap<i32, Child>, node: i32) -> i32 {
    brokers
        .get_mut(&node)
        .unwrap()
        .stop(libc::SIGTERM, Duration::from_secs(30))
        .await;
    1 - node
}

/// Stops every broker of `brokers` (SIGTERM, 30 s at most each), then
/// starts each again with `start`: the whole cluster restarted.
pub async fn restart_all(
    mut brokers: BTreeMap<i32, Child>,
    start: impl Fn(i32) -> Child,
) -> BTreeMap<i32, Child> {
    for b in brokers.values_mut() {
        b.stop(libc::SIGTERM, Duration::from_secs(30)).await;
    }
    let nodes: Vec<i32> = brokers.keys().copied().collect();
    drop(brokers);
    nodes.into_iter().map(|n| (n, start(n))).collect()
}

/// `(brokers, controller, {partition: (leader, leader epoch)})` of `topic`.
pub type View = (BTreeSet<i32>, i32, BTreeMap<i32, (i32, i32)>);

/// The cluster and `topic` as one Metadata answer of `s`'s broker shows them.
pub async fn snapshot(s: &mut TcpStream, topic: &str) -> (View, BTreeMap<i32, PartitionView>) {
    let m: MetadataResponse = call(
        s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    )
    .await;
    let brokers = m.brokers.iter().map(|b| b.node_id.0).collect();
    let parts: BTreeMap<i32, PartitionView> = m
        .topics
        .iter()
        .filter(|t| t.name.as_ref().map(|n| n.as_str()) == Some(topic))
        .flat_map(|t| t.partitions.iter())
        .map(|p| {
            let mut isr: Vec<i32> = p.isr_nodes.iter().map(|b| b.0).collect();
            isr.sort_unstable();
            (
                p.partition_index,
                PartitionView {
                    leader: p.leader_id.0,
                    epoch: p.leader_epoch,
                    replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                    isr,
                },
            )
        })
        .collect();
    let leaders = parts
        .iter()
        .map(|(i, p)| (*i, (p.leader, p.epoch)))
        .collect();
    ((brokers, m.controller_id.0, leaders), parts)
}

pub async fn view(s: &mut TcpStream, topic: &str) -> View {
    snapshot(s, topic).await.0
}

/// Every partition of `topic` as `s`'s broker shows it.
pub async fn partitions(s: &mut TcpStream, topic: &str) -> BTreeMap<i32, PartitionView> {
    snapshot(s, topic).await.1
}

/// Waits (30 s at most) until `ok` holds for what `s`'s broker shows.
async fn wait_for_snapshot(
    s: &mut TcpStream,
    topic: &str,
    what: &str,
    ok: impl Fn(&View, &BTreeMap<i32, PartitionView>) -> bool,
) -> (View, BTreeMap<i32, PartitionView>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (v, p) = snapshot(s, topic).await;
        if ok(&v, &p) {
            return (v, p);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never {what}; last {v:?} {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn wait_until(
    s: &mut TcpStream,
    topic: &str,
    what: &str,
    ok: impl Fn(&View) -> bool,
) -> View {
    wait_for_snapshot(s, topic, what, |v, _| ok(v)).await.0
}

/// Waits (30 s at most) until `ok` holds for `topic`'s partitions.
pub async fn wait_for_partitions(
    s: &mut TcpStream,
    topic: &str,
    what: &str,
    ok: impl Fn(&BTreeMap<i32, PartitionView>) -> bool,
) -> BTreeMap<i32, PartitionView> {
    wait_for_snapshot(s, topic, what, |_, p| ok(p)).await.1
}

/// Produces one batch to `partition`: its error code.
pub async fn produce_to(s: &mut TcpStream, topic: &str, partition: i32, value: &[u8]) -> i16 {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch(&[value.to_vec()])))])]);
    let resp: ProduceResponse = call(s, ApiKey::Produce, 9, &req).await;
    resp.responses[0].partition_responses[0].error_code
}

/// Produces `value` to the partition's leader, retrying the retriable
/// errors of a moment (unknown partition, not leader yet).
pub async fn produce_acked(
    conns: &mut BTreeMap<i32, TcpStream>,
    probe: i32,
    topic: &str,
    partition: i32,
    value: &str,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let leader = {
            let s = conns.get_mut(&probe).unwrap();
            partitions(s, topic).await[&partition].leader
        };
        let code = match conns.get_mut(&leader) {
            Some(c) => produce_to(c, topic, partition, value.as_bytes()).await,
            None => -1,
        };
        if code == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{topic}-{partition}: {value} never acknowledged (last code {code}, leader {leader})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every record value of `partition`, read from its leader.
pub async fn values(s: &mut TcpStream, topic: &str, partition: i32) -> Vec<Vec<u8>> {
    match try_values(s, topic, partition).await {
        Ok(v) => v,
        Err(code) => panic!("fetch {topic}-{partition}: error {code}"),
    }
}

/// [`values`], or the fetch's error code.
pub async fn try_values(
    s: &mut TcpStream,
    topic: &str,
    partition: i32,
) -> Result<Vec<Vec<u8>>, i16> {
    let records = try_records(s, topic, partition, 0).await?;
    Ok(records
        .into_iter()
        .map(|r| r.value.unwrap_or_default().to_vec())
        .collect())
}

/// Every record of `partition` from offset 0, control records included,
/// as one Fetch v12 of `s`'s broker with `isolation_level` (0:
/// read_uncommitted, 1: read_committed) reads them; or the fetch's error
/// code.
pub async fn try_records(
    s: &mut TcpStream,
    topic: &str,
    partition: i32,
    isolation_level: i8,
) -> Result<Vec<kafka_protocol::records::Record>, i16> {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{FetchRequest, FetchResponse};
    use kafka_protocol::records::RecordBatchDecoder;
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation_level)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = call(s, ApiKey::Fetch, 12, &req).await;
    let p = &resp.responses[0].partitions[0];
    if p.error_code != 0 {
        return Err(p.error_code);
    }
    let mut records = p.records.clone().unwrap_or_default();
    let mut out = Vec::new();
    while bytes::Buf::has_remaining(&records) {
        out.extend(
            RecordBatchDecoder::decode(&mut records)
                .expect("decode")
                .records,
        );
    }
    Ok(out)
}

/// One partition as Metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    pub leader: i32,
    pub epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// CreateTopics with a replication factor and configs: `(code, message)`.
pub async fn create_replicated(
    s: &mut TcpStream,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(&str, &str)],
) -> (i16, Option<String>) {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(
                configs
                    .iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(kafka_protocol::protocol::StrBytes::from_string(
                                k.to_string(),
                            ))
                            .with_value(Some(kafka_protocol::protocol::StrBytes::from_string(
                                v.to_string(),
                            )))
                    })
                    .collect(),
            )]);
    let resp: CreateTopicsResponse = call(s, ApiKey::CreateTopics, 7, &req).await;
    let t = &resp.topics[0];
    (
        t.error_code,
        t.error_message.as_ref().map(|m| m.to_string()),
    )
}

/// The coordinator of `key` (FindCoordinator v4; `key_type` 0: a group,
/// 1: a transactional id) as `s`'s broker answers it: `(node id, port)`,
/// retried for 30 s while there is none (its topic being created or its
/// partition without a leader).
pub async fn find_coordinator(s: &mut TcpStream, key_type: i8, key: &str) -> (i32, u16) {
    use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let req = FindCoordinatorRequest::default()
            .with_key_type(key_type)
            .with_coordinator_keys(vec![kafka_protocol::protocol::StrBytes::from_string(
                key.to_string(),
            )]);
        let r: FindCoordinatorResponse = call(s, ApiKey::FindCoordinator, 4, &req).await;
        let c = &r.coordinators[0];
        if c.error_code == 0 {
            return (c.node_id.0, c.port as u16);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no coordinator for {key}: {}",
            c.error_code
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (30 s at most) until `s`'s broker names `node` the coordinator of
/// `key` (see [`find_coordinator`]), as after the last one's broker went:
/// the coordinator found, `(node id, port)`.
pub async fn wait_for_coordinator(
    s: &mut TcpStream,
    key_type: i8,
    key: &str,
    node: i32,
) -> (i32, u16) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let found = find_coordinator(s, key_type, key).await;
        if found.0 == node {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no takeover: {key}'s coordinator is still {found:?}, not node {node}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
