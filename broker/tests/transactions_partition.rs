//! Transactions on the partition side over the real wire (issue 37): a
//! single broker in `--cluster dir` mode (so it has a broker identity to
//! authenticate WriteTxnMarkers with, as a coordinator's broker does)
//! takes transactional batches; read_committed fetches stop at the last
//! stable offset; WriteTxnMarkers from an authenticated broker commits and
//! aborts (from anyone else it is refused); aborted transactions come back
//! with the fetch; ListOffsets at read_committed answers the LSO; and all
//! of it — the aborted-transaction index, the open transactions and the
//! coordinator epochs in the producer snapshot — survives a restart.
//! (Without a coordinator, so with `transaction.partition.verification.enable`
//! off: the produce path's verification is tested in `transactions_offsets`.)
//!
//! With three broker processes, the followers keep the same transactions:
//! after the leader is killed, the new leader answers read_committed
//! fetches with the same last stable offset and aborted transactions, and
//! commits the transaction that was open when the old leader died.

mod cluster_common;
mod wire_common;

use std::path::Path;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListOffsetsRequest, ListOffsetsResponse, ProduceRequest, ProduceResponse, ProducerId,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;
use moldau_broker::storage::batch::{BatchBuilder, BatchHeader};
use tokio::net::TcpStream;
use wire_common::*;

const TOPIC: &str = "tx";

fn args(shared: &Path) -> Vec<&'static str> {
    let shared: &'static str = Box::leak(shared.display().to_string().into_boxed_str());
    vec![
        "--cluster",
        "dir",
        "--cluster-dir",
        shared,
        "--node-id",
        "1",
        "--controller-listen",
        "127.0.0.1:0",
        // the partition side alone: these batches come from producers no
        // transaction coordinator knows (transactions_offsets and
        // transactions_coordinator verify them)
        "--set",
        NO_VERIFICATION,
    ]
}

const NO_VERIFICATION: &str = "transaction.partition.verification.enable=false";

/// The incarnation broker `node` registered with, from the cluster
/// directory.
fn incarnation(shared: &Path, node: i64) -> String {
    let text = std::fs::read_to_string(shared.join("cluster.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    fn find(v: &serde_json::Value, node: i64) -> Option<String> {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("nodeId").and_then(|n| n.as_i64()) == Some(node) {
                    if let Some(i) = m.get("incarnation").and_then(|i| i.as_str()) {
                        return Some(i.to_string());
                    }
                }
                m.values().find_map(|v| find(v, node))
            }
            serde_json::Value::Array(a) => a.iter().find_map(|v| find(v, node)),
            _ => None,
        }
    }
    find(&v, node).expect("the broker's registration")
}

/// A connection to `addr` authenticated as broker `node`
/// (`MOLDAU-BROKER`), retried until the registration is in the image.
async fn broker_connection(addr: std::net::SocketAddr, node: i64, shared: &Path) -> TcpStream {
    for _ in 0..100 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let hs: SaslHandshakeResponse = call(
            &mut s,
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str("MOLDAU-BROKER")),
        )
        .await;
        assert_eq!(hs.error_code, 0);
        let token = format!("{node}:{}", incarnation(shared, node));
        let auth: SaslAuthenticateResponse = call(
            &mut s,
            ApiKey::SaslAuthenticate,
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
        )
        .await;
        if auth.error_code == 0 {
            return s;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("cannot authenticate as broker {node}");
}

async fn producer_id(s: &mut TcpStream) -> (i64, i16) {
    let r: InitProducerIdResponse = call(
        s,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    )
    .await;
    assert_eq!(r.error_code, 0);
    (r.producer_id.0, r.producer_epoch)
}

async fn produce(
    s: &mut TcpStream,
    topic: &str,
    pid: i64,
    epoch: i16,
    seq: i32,
    n: usize,
    txn: bool,
) -> (i16, i64) {
    let mut b = BatchBuilder::new().producer(pid, epoch, seq);
    if txn {
        b = b.transactional();
    }
    let records = b
        .records((0..n).map(|i| (None, Some(Bytes::from(format!("{pid}-{seq}-{i}"))), 1_000)))
        .encode()
        .unwrap();
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(records)))])]);
    let resp: ProduceResponse = call(s, ApiKey::Produce, 9, &req).await;
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

async fn marker(
    s: &mut TcpStream,
    topic: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
    coordinator_epoch: i32,
) -> i16 {
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_transaction_result(commit)
        .with_coordinator_epoch(coordinator_epoch)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(name(topic))
            .with_partition_indexes(vec![0])])]);
    let resp: WriteTxnMarkersResponse = call(s, ApiKey::WriteTxnMarkers, 1, &req).await;
    assert_eq!(resp.markers[0].producer_id.0, pid);
    resp.markers[0].topics[0].partitions[0].error_code
}

/// What a fetch from `offset` at `isolation` answers: (high watermark,
/// last stable offset, base offsets of the batches read, aborted
/// transactions).
struct Fetched {
    hw: i64,
    lso: i64,
    batches: Vec<i64>,
    aborted: Option<Vec<(i64, i64)>>,
}

async fn fetch(s: &mut TcpStream, topic: &str, offset: i64, isolation: i8) -> Fetched {
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = call(s, ApiKey::Fetch, 12, &req).await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let mut batches = Vec::new();
    let mut rest: &[u8] = p.records.as_deref().unwrap_or(&[]);
    while rest.len() >= 61 {
        let h = BatchHeader::parse(rest).unwrap();
        batches.push(h.base_offset);
        rest = &rest[h.total_size().min(rest.len())..];
    }
    Fetched {
        hw: p.high_watermark,
        lso: p.last_stable_offset,
        batches,
        aborted: p.aborted_transactions.as_ref().map(|a| {
            a.iter()
                .map(|t| (t.producer_id.0, t.first_offset))
                .collect()
        }),
    }
}

async fn latest(s: &mut TcpStream, topic: &str, isolation: i8) -> i64 {
    list_offset(s, topic, isolation, -1).await
}

/// ListOffsets of `timestamp` (-1: latest) at `isolation`: the offset.
async fn list_offset(s: &mut TcpStream, topic: &str, isolation: i8, timestamp: i64) -> i64 {
    let req = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_isolation_level(isolation)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(timestamp)])]);
    let resp: ListOffsetsResponse = call(s, ApiKey::ListOffsets, 8, &req).await;
    let p = &resp.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

async fn wait_leader(s: &mut TcpStream, topic: &str) {
    for _ in 0..200 {
        if latest_try(s, topic).await {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the partition has no leader");
}

async fn latest_try(s: &mut TcpStream, topic: &str) -> bool {
    let req = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let resp: ListOffsetsResponse = call(s, ApiKey::ListOffsets, 8, &req).await;
    resp.topics[0].partitions[0].error_code == 0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_stops_at_the_lso_and_markers_commit_and_abort_across_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let shared = tempfile::tempdir().unwrap();
    let b = start(data.path(), &args(shared.path())).await;
    let mut s = b.connect().await;
    // the broker registers with its own controller first
    let mut created = None;
    for _ in 0..200 {
        let (code, message) = create_topic(&mut s, TOPIC, 1).await;
        created = Some((code, message));
        if code == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(created.as_ref().map(|c| c.0), Some(0), "{created:?}");
    wait_leader(&mut s, TOPIC).await;
    let (a, ea) = producer_id(&mut s).await;
    let (c, ec) = producer_id(&mut s).await;
    let (plain, ep) = producer_id(&mut s).await;

    // A's transaction [0, 2), a plain batch at 2, C's transaction from 3
    assert_eq!(produce(&mut s, TOPIC, a, ea, 0, 2, true).await, (0, 0));
    assert_eq!(produce(&mut s, TOPIC, plain, ep, 0, 1, false).await, (0, 2));
    assert_eq!(produce(&mut s, TOPIC, c, ec, 0, 1, true).await, (0, 3));
    // a plain batch inside A's open transaction is refused
    assert_eq!(
        produce(&mut s, TOPIC, a, ea, 2, 1, false).await.0,
        ResponseError::InvalidTxnState.code()
    );
    let f = fetch(&mut s, TOPIC, 0, 1).await;
    assert_eq!((f.hw, f.lso, f.batches.len()), (4, 0, 0));
    let f = fetch(&mut s, TOPIC, 0, 0).await;
    assert_eq!(
        (f.hw, f.lso, f.batches, f.aborted),
        (4, 0, vec![0, 2, 3], None)
    );
    assert_eq!(latest(&mut s, TOPIC, 1).await, 0);
    assert_eq!(latest(&mut s, TOPIC, 0).await, 4);
    // a lookup by timestamp at read_committed finds nothing past the LSO
    assert_eq!(list_offset(&mut s, TOPIC, 1, 0).await, -1);
    assert_eq!(list_offset(&mut s, TOPIC, 0, 0).await, 0);

    // only a broker may write markers
    assert_eq!(
        marker(&mut s, TOPIC, a, ea, false, 0).await,
        ResponseError::ClusterAuthorizationFailed.code()
    );
    let mut coordinator = broker_connection(b.addrs.kafka, 1, shared.path()).await;
    // A aborts: the LSO moves to C's first offset
    assert_eq!(marker(&mut coordinator, TOPIC, a, ea, false, 2).await, 0);
    let f = fetch(&mut s, TOPIC, 0, 1).await;
    assert_eq!((f.hw, f.lso), (5, 3));
    assert_eq!(f.batches, vec![0, 2]);
    assert_eq!(f.aborted, Some(vec![(a, 0)]));
    assert_eq!(latest(&mut s, TOPIC, 1).await, 3);
    // C commits: everything is stable
    assert_eq!(marker(&mut coordinator, TOPIC, c, ec, true, 2).await, 0);
    let f = fetch(&mut s, TOPIC, 0, 1).await;
    assert_eq!((f.hw, f.lso), (6, 6));
    assert_eq!(f.batches, vec![0, 2, 3, 4, 5]);
    assert_eq!(f.aborted, Some(vec![(a, 0)]));
    assert_eq!(latest(&mut s, TOPIC, 1).await, 6);
    // fenced: an older coordinator epoch, an older producer epoch; unknown partitions
    assert_eq!(
        marker(&mut coordinator, TOPIC, a, ea, true, 1).await,
        ResponseError::TransactionCoordinatorFenced.code()
    );
    assert_eq!(
        marker(&mut coordinator, TOPIC, c, ec - 1, true, 2).await,
        ResponseError::InvalidProducerEpoch.code()
    );
    // A opens another transaction, left open over the restart
    assert_eq!(produce(&mut s, TOPIC, a, ea, 2, 1, true).await, (0, 6));
    let f = fetch(&mut s, TOPIC, 0, 1).await;
    assert_eq!((f.hw, f.lso), (7, 6));
    drop((s, coordinator));
    b.stop().await;

    let part_dir = data.path().join(format!("{TOPIC}-0"));
    let indexes: Vec<String> = std::fs::read_dir(&part_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".txnindex"))
        .collect();
    assert_eq!(indexes, vec!["00000000000000000000.txnindex".to_string()]);
    assert_eq!(
        std::fs::metadata(part_dir.join(&indexes[0])).unwrap().len(),
        34,
        "one of Kafka's entries"
    );

    let b = start(data.path(), &args(shared.path())).await;
    let mut s = b.connect().await;
    wait_leader(&mut s, TOPIC).await;
    let f = fetch(&mut s, TOPIC, 0, 1).await;
    assert_eq!((f.hw, f.lso), (7, 6));
    assert_eq!(f.batches, vec![0, 2, 3, 4, 5]);
    let page = metrics_page(b.addrs.http).await;
    assert_eq!(
        metric(
            &page,
            "moldau_partition_lso_lag{topic=\"tx\",partition=\"0\"}"
        ),
        Some(1),
        "one record held back by A's open transaction"
    );
    assert_eq!(f.aborted, Some(vec![(a, 0)]));
    assert_eq!(latest(&mut s, TOPIC, 1).await, 6);
    let mut coordinator = broker_connection(b.addrs.kafka, 1, shared.path()).await;
    assert_eq!(
        marker(&mut coordinator, TOPIC, a, ea, true, 1).await,
        ResponseError::TransactionCoordinatorFenced.code(),
        "the coordinator epoch survives the restart"
    );
    assert_eq!(marker(&mut coordinator, TOPIC, a, ea, false, 2).await, 0);
    let f = fetch(&mut s, TOPIC, 5, 1).await;
    assert_eq!((f.hw, f.lso), (8, 8));
    assert_eq!(f.aborted, Some(vec![(a, 6)]));
    assert_eq!(latest(&mut s, TOPIC, 1).await, 8);
    drop((s, coordinator));
    b.stop().await;
}

/// A read_committed fetch of `topic` from whichever broker `conns` says
/// leads it, retried (20 s) until `ok` holds.
async fn fetch_from_leader(
    conns: &mut std::collections::BTreeMap<i32, TcpStream>,
    probe: i32,
    topic: &str,
    ok: impl Fn(&Fetched) -> bool,
) -> (i32, Fetched) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let leader =
            cluster_common::partitions(conns.get_mut(&probe).unwrap(), topic).await[&0].leader;
        if let Some(c) = conns.get_mut(&leader) {
            if let Some(f) = try_fetch(c, topic, 0, 1).await {
                if ok(&f) {
                    return (leader, f);
                }
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader answered as expected"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// [`fetch`], `None` on a partition error.
async fn try_fetch(s: &mut TcpStream, topic: &str, offset: i64, isolation: i8) -> Option<Fetched> {
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(isolation)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = call(s, ApiKey::Fetch, 12, &req).await;
    if resp.responses[0].partitions[0].error_code != 0 {
        return None;
    }
    Some(fetch(s, topic, offset, isolation).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_keeps_the_last_stable_offset_and_the_aborted_transactions() {
    use std::collections::BTreeMap;
    use std::time::Duration;
    const T: &str = "txr";
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let settings = [
        NO_VERIFICATION,
        "broker.session.timeout.ms=3000",
        "replica.lag.time.max.ms=2000",
        "replica.fetch.wait.max.ms=100",
        "replica.fetch.backoff.ms=100",
    ];
    let mut brokers: BTreeMap<i32, Child> = (0..3)
        .map(|n| {
            let data = root.path().join(format!("data-{n}"));
            (
                n,
                cluster_common::spawn(&n.to_string(), &data, &shared, root.path(), &settings),
            )
        })
        .collect();
    let mut conns: BTreeMap<i32, TcpStream> = BTreeMap::new();
    for (n, b) in &brokers {
        conns.insert(*n, b.connect(Duration::from_secs(30)).await);
    }
    cluster_common::wait_until(conns.get_mut(&0).unwrap(), T, "three brokers", |v| {
        v.0.len() == 3
    })
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (code, message) = cluster_common::create_replicated(
            conns.get_mut(&0).unwrap(),
            T,
            1,
            3,
            &[("min.insync.replicas", "2")],
        )
        .await;
        if code == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{code} {message:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let view = cluster_common::wait_for_partitions(conns.get_mut(&0).unwrap(), T, "in sync", |v| {
        v.get(&0).is_some_and(|p| p.isr.len() == 3)
    })
    .await;
    let leader = view[&0].leader;
    let s = conns.get_mut(&leader).unwrap();
    let (a, ea) = producer_id(s).await;
    let (c, ec) = producer_id(s).await;
    // broker 0's view can name the leader before the leader has applied the
    // same image: until it has, it answers UNKNOWN_TOPIC_OR_PARTITION or
    // NOT_LEADER, writes nothing, and the same sequence may be sent again
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let answer = produce(s, T, a, ea, 0, 2, true).await;
        let not_yet = [
            ResponseError::UnknownTopicOrPartition.code(),
            ResponseError::NotLeaderOrFollower.code(),
        ];
        if !not_yet.contains(&answer.0) || tokio::time::Instant::now() > deadline {
            assert_eq!(answer, (0, 0));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(produce(s, T, c, ec, 0, 1, true).await, (0, 2));
    let addr = brokers[&leader].kafka;
    let mut coordinator = broker_connection(addr, leader as i64, &shared).await;
    assert_eq!(marker(&mut coordinator, T, a, ea, false, 4).await, 0);
    let f = fetch(conns.get_mut(&leader).unwrap(), T, 0, 1).await;
    assert_eq!((f.hw, f.lso, f.batches.clone()), (4, 2, vec![0]));
    assert_eq!(f.aborted, Some(vec![(a, 0)]));
    drop(coordinator);

    // the leader dies: another replica of the ISR takes over with the same view
    brokers
        .get_mut(&leader)
        .unwrap()
        .stop(libc::SIGKILL, Duration::from_secs(10))
        .await;
    conns.remove(&leader);
    let probe = *conns.keys().next().unwrap();
    let (new_leader, f) = fetch_from_leader(&mut conns, probe, T, |f| f.hw == 4).await;
    assert_ne!(new_leader, leader);
    assert_eq!((f.lso, f.batches.clone()), (2, vec![0]));
    assert_eq!(f.aborted, Some(vec![(a, 0)]));
    let s = conns.get_mut(&new_leader).unwrap();
    assert_eq!(latest(s, T, 1).await, 2);
    // the coordinator epoch came along with the marker; C's transaction is still open
    let addr = brokers[&new_leader].kafka;
    let mut coordinator = broker_connection(addr, new_leader as i64, &shared).await;
    assert_eq!(
        marker(&mut coordinator, T, a, ea, true, 3).await,
        ResponseError::TransactionCoordinatorFenced.code()
    );
    assert_eq!(marker(&mut coordinator, T, c, ec, true, 4).await, 0);
    let s = conns.get_mut(&new_leader).unwrap();
    let f = fetch(s, T, 0, 1).await;
    assert_eq!((f.hw, f.lso), (5, 5));
    assert_eq!(f.batches, vec![0, 2, 3, 4]);
    assert_eq!(f.aborted, Some(vec![(a, 0)]));
}
