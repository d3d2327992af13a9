//! A `KafkaRebalance` run end to end without Kubernetes: four real
//! `moldau-broker` processes (`--cluster dir`, every address on 127.0.0.1),
//! the operator's pure lifecycle (`rebalance::lifecycle::next`) driven by
//! its admin-client edge (`rebalance::execute`) exactly as the controller
//! drives it: read the cluster, take the step, perform its action, keep the
//! status. A `remove-brokers` rebalance of broker 3 runs batch by batch
//! until Metadata shows no replica on broker 3, and every record produced
//! before is still readable from the partitions' new leaders. The moves run
//! under a replication throttle: while they run the topic's
//! throttled-replica configs are what the status records, and they are
//! gone at the end.
//!
//! The broker binary: `MOLDAU_TEST_BROKER_BIN` if set, else the workspace
//! build.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{FetchRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::records::RecordBatchDecoder;
use moldau_operator::brokers::connect_controller;
use moldau_operator::crd::{
    KafkaRebalanceSpec, KafkaRebalanceStatus, RebalanceMode, RebalancePhase,
};
use moldau_operator::kafka::{wire, AdminClient, Dial};
use moldau_operator::rebalance::execute::{perform, read_cluster};
use moldau_operator::rebalance::lifecycle::{
    drained, next, Action, Observation, Request as RebalanceRequest,
};
use moldau_operator::rebalance::throttle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const T: Duration = Duration::from_secs(10);
const TOPIC: &str = "orders";
const PARTITIONS: i32 = 8;
const RECORDS_PER_PARTITION: usize = 50;

struct Node {
    id: i32,
    addr: SocketAddr,
    child: std::process::Child,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn broker_bin() -> PathBuf {
    match std::env::var_os("MOLDAU_TEST_BROKER_BIN") {
        Some(p) => PathBuf::from(p),
        None => support::workspace_bin("moldau-broker", "moldau-broker"),
    }
}

fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], moldau_e2e::ports::unused_loopback_port()))
}

fn spawn(bin: &Path, id: i32, root: &Path) -> Node {
    let (kafka, http) = (free_addr(), free_addr());
    let data = root.join(format!("data-{id}"));
    std::fs::create_dir_all(&data).unwrap();
    let log = std::fs::File::create(root.join(format!("broker-{id}.log"))).unwrap();
    let mut cmd = std::process::Command::new(bin);
    cmd.args(["--listen", &kafka.to_string()])
        .args(["--http-listen", &http.to_string()])
        .arg("--data-dir")
        .arg(&data)
        .args(["--node-id", &id.to_string()])
        .args(["--cluster", "dir"])
        .arg("--cluster-dir")
        .arg(root.join("shared"))
        .args(["--controller-listen", "127.0.0.1:0"]);
    for s in [
        "offsets.topic.num.partitions=1",
        "broker.heartbeat.interval.ms=100",
        "broker.session.timeout.ms=6000",
        "replica.fetch.wait.max.ms=100",
        "replica.fetch.backoff.ms=100",
        "replica.lag.time.max.ms=3000",
    ] {
        cmd.args(["--set", s]);
    }
    cmd.env("NO_COLOR", "1")
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    Node {
        id,
        addr: kafka,
        child: cmd.spawn().expect("spawning moldau-broker"),
    }
}

/// One request/response on a fresh connection.
async fn rpc<R: Request>(addr: SocketAddr, req: &R, version: i16) -> R::Response {
    let mut s = tokio::time::timeout(T, TcpStream::connect(addr))
        .await
        .expect("connect timed out")
        .expect("connect");
    let frame = wire::encode_request(req, version, 1, "rebalance-test").unwrap();
    tokio::time::timeout(T, async {
        s.write_all(&frame).await.unwrap();
        let mut prefix = [0u8; 4];
        s.read_exact(&mut prefix).await.unwrap();
        let mut body = vec![0u8; wire::frame_len(prefix).unwrap()];
        s.read_exact(&mut body).await.unwrap();
        wire::decode_response::<R>(body.into(), version, 1).unwrap()
    })
    .await
    .expect("response timed out")
}

fn name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_string()))
}

fn batch(values: &[String]) -> bytes::Bytes {
    let mut b = moldau_broker::storage::batch::BatchBuilder::new();
    for (i, v) in values.iter().enumerate() {
        b = b.record(
            None,
            Some(bytes::Bytes::from(v.clone())),
            1_700_000_000_000 + i as i64,
        );
    }
    b.encode().unwrap().into()
}

/// The leader of every partition of `TOPIC` (waits until each has one).
async fn leaders(nodes: &[Node]) -> Vec<(i32, SocketAddr)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut admin = AdminClient::connect(nodes[0].addr, T).await.unwrap();
        let md = admin.metadata(Some(&[TOPIC.to_string()])).await.unwrap();
        let parts: Vec<(i32, SocketAddr)> = md
            .topics
            .iter()
            .flat_map(|t| t.partition_details.iter())
            .filter_map(|p| {
                let n = nodes.iter().find(|n| n.id == p.leader)?;
                Some((p.partition, n.addr))
            })
            .collect();
        if parts.len() == PARTITIONS as usize {
            return parts;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "partitions without a leader: {md:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn values_of(partition: i32) -> Vec<String> {
    (0..RECORDS_PER_PARTITION)
        .map(|i| format!("p{partition}-r{i}"))
        .collect()
}

async fn produce_all(nodes: &[Node]) {
    for (partition, addr) in leaders(nodes).await {
        let values = values_of(partition);
        // two batches, acks=all
        for half in values.chunks(RECORDS_PER_PARTITION / 2) {
            let req = ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(name(TOPIC))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(batch(half)))])]);
            // A leader may learn of the new topic a moment after the
            // controller's Metadata lists it: retry what a client retries
            // (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER), bounded.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            loop {
                let resp = rpc(addr, &req, 9).await;
                let code = resp.responses[0].partition_responses[0].error_code;
                if (code == 3 || code == 6) && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                assert_eq!(code, 0, "produce to {TOPIC}-{partition}");
                break;
            }
        }
    }
}

async fn read_partition(addr: SocketAddr, partition: i32) -> Result<Vec<String>, i16> {
    let req = FetchRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(8 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(TOPIC))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(0)
                .with_partition_max_bytes(8 << 20)])]);
    let resp = rpc(addr, &req, 12).await;
    let p = &resp.responses[0].partitions[0];
    if p.error_code != 0 {
        return Err(p.error_code);
    }
    let mut records = p.records.clone().unwrap_or_default();
    let mut out = Vec::new();
    while bytes::Buf::has_remaining(&records) {
        let set = RecordBatchDecoder::decode(&mut records).expect("decode");
        out.extend(
            set.records
                .into_iter()
                .map(|r| String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap()),
        );
    }
    Ok(out)
}

/// Every partition's records, read from its current leader (retried while
/// leadership settles).
async fn read_all(nodes: &[Node]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut partition = 0;
    while partition < PARTITIONS {
        let addr = leaders(nodes)
            .await
            .into_iter()
            .find(|(p, _)| *p == partition)
            .map(|(_, a)| a)
            .unwrap();
        match read_partition(addr, partition).await {
            Ok(got) if got.len() >= RECORDS_PER_PARTITION => {
                assert_eq!(got, values_of(partition), "{TOPIC}-{partition}");
                partition += 1;
            }
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{TOPIC}-{partition} never readable in full: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn wait_for_brokers(nodes: &[Node]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let seen = match AdminClient::connect(nodes[0].addr, T).await {
            Ok(mut admin) => admin
                .metadata(Some(&[]))
                .await
                .map(|m| (m.brokers.len(), m.controller_id))
                .unwrap_or((0, -1)),
            Err(_) => (0, -1),
        };
        if seen.0 == nodes.len() && seen.1 >= 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cluster never formed: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_brokers_drains_broker_3_and_keeps_every_record() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("shared")).unwrap();
    let bin = broker_bin();
    let nodes: Vec<Node> = (0..4).map(|id| spawn(&bin, id, root.path())).collect();
    let addrs: Vec<(i32, SocketAddr)> = nodes.iter().map(|n| (n.id, n.addr)).collect();
    wait_for_brokers(&nodes).await;

    let mut admin = connect_controller(&addrs, &Dial::plain(T)).await.unwrap().0;
    admin
        .create_topic(TOPIC, PARTITIONS, 2, &Default::default())
        .await
        .unwrap();
    drop(admin);
    produce_all(&nodes).await;

    let before = read_cluster(&addrs, &Dial::plain(T)).await.unwrap();
    assert!(
        !drained(&before, 3),
        "broker 3 holds replicas before the rebalance"
    );
    assert!(before.partitions.iter().any(|p| p.size_bytes > 0));

    let spec = KafkaRebalanceSpec {
        cluster: "local".into(),
        mode: RebalanceMode::RemoveBrokers,
        brokers: vec![3],
        throttle_bytes_per_second: Some(50_000_000),
        topics: None,
        max_concurrent_moves: Some(2),
        approved: false,
    };
    let mut req = RebalanceRequest {
        spec: &spec,
        approve_annotation: false,
        stop_annotation: false,
        generation: Some(1),
    };
    let now = "2026-12-02T00:00:00Z";
    let mut status: Option<KafkaRebalanceStatus> = None;
    let mut submitted = 0;
    let mut throttled_seen = 0;
    let mut phases = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let observed = match read_cluster(&addrs, &Dial::plain(T)).await {
            Ok(c) => Observation::Cluster(c),
            Err(e) => Observation::Unavailable(e.to_string()),
        };
        let step = next(&req, status.as_ref(), &observed, now);
        if let Action::Submit(m) = &step.action {
            submitted += m.len();
            assert!(m.len() <= 2, "at most maxConcurrentMoves in flight");
        }
        let refused = perform(&step, &addrs, &Dial::plain(T)).await.unwrap();
        assert!(refused.is_empty(), "the broker refused {refused:?}");
        if let Some(applied) = &step.status.throttle {
            // What the status says is set is what the topic's config says.
            let mut admin = connect_controller(&addrs, &Dial::plain(T)).await.unwrap().0;
            let config = admin.describe_topic_config(TOPIC).await.unwrap();
            let value = |k: &str| {
                config
                    .iter()
                    .find(|e| e.name == k)
                    .and_then(|e| e.value.clone())
                    .unwrap_or_default()
            };
            let t = &applied.topics[0];
            assert_eq!(value(throttle::LEADER_REPLICAS), t.leader);
            assert_eq!(value(throttle::FOLLOWER_REPLICAS), t.follower);
            assert!(t.follower.split(',').all(|e| !e.ends_with(":3")));
            throttled_seen += 1;
        }
        let phase = step.status.phase;
        if phases.last() != Some(&phase) {
            phases.push(phase);
        }
        status = Some(step.status);
        match phase {
            Some(RebalancePhase::ProposalReady) => {
                let p = status.as_ref().unwrap().proposal.clone().unwrap();
                assert!(p.moves > 0 && p.bytes_to_move > 0, "{p:?}");
                // the user approves by annotation
                req.approve_annotation = true;
            }
            Some(RebalancePhase::Ready) => break,
            Some(RebalancePhase::Failed) | Some(RebalancePhase::Stopped) | None => {
                panic!("rebalance ended {phase:?}: {status:?}")
            }
            Some(RebalancePhase::Rebalancing) => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rebalance did not finish: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        phases,
        vec![
            Some(RebalancePhase::ProposalReady),
            Some(RebalancePhase::Rebalancing),
            Some(RebalancePhase::Ready)
        ]
    );
    let status = status.unwrap();
    eprintln!(
        "proposal {:?}\nprogress {:?}\nconditions {:?}",
        status.proposal, status.progress, status.conditions
    );
    let progress = status.progress.clone().unwrap();
    assert_eq!(progress.partitions_done, progress.partitions_total);
    assert!(submitted as i64 >= progress.partitions_total);

    assert!(throttled_seen > 0, "the moves ran throttled");
    assert_eq!(status.throttle, None);
    let mut admin = connect_controller(&addrs, &Dial::plain(T)).await.unwrap().0;
    let config = admin.describe_topic_config(TOPIC).await.unwrap();
    for k in [throttle::LEADER_REPLICAS, throttle::FOLLOWER_REPLICAS] {
        let v = config
            .iter()
            .find(|e| e.name == k)
            .and_then(|e| e.value.clone());
        assert!(v.unwrap_or_default().is_empty(), "{k} removed at the end");
    }
    drop(admin);

    let after = read_cluster(&addrs, &Dial::plain(T)).await.unwrap();
    assert!(
        drained(&after, 3),
        "broker 3 still holds replicas: {after:?}"
    );
    assert!(after.ongoing.is_empty());
    for p in &after.partitions {
        assert_eq!(p.replicas.len(), 2, "RF kept: {p:?}");
    }
    // Metadata as any broker shows it: nothing on broker 3.
    for n in &nodes {
        let mut admin = AdminClient::connect(n.addr, T).await.unwrap();
        let md = admin.metadata(None).await.unwrap();
        for t in &md.topics {
            for p in &t.partition_details {
                assert!(
                    !p.replicas.contains(&3),
                    "broker {} shows {}-{} on {:?}",
                    n.id,
                    t.name,
                    p.partition,
                    p.replicas
                );
            }
        }
    }
    read_all(&nodes).await;
}
