//! The transaction coordinator across two broker processes (`--cluster
//! dir`, on 127.0.0.1): `__transaction_state` is created through the
//! controller by the first transactional FindCoordinator (two replicas,
//! capped to the brokers there are), the coordinator is its partition's
//! leader, and a transaction over two partitions led by different brokers
//! commits with one marker written in process and one sent over an
//! authenticated broker connection (WriteTxnMarkers); read_committed
//! consumers of both leaders then see the records. When the coordinator's
//! broker stops, the other one takes its partition over, reloads the
//! transactional id and goes on fencing by epoch.

mod cluster_common;
mod wire_common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use cluster_common::*;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, DescribeTransactionsRequest,
    DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use moldau_broker::storage::batch::BatchBuilder;
use tokio::net::TcpStream;
use wire_common::{call, name};

const TOPIC: &str = "orders";
const TXN: &str = "app-dir";
const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "transaction.state.log.num.partitions=1",
    // one broker is stopped at the end: the survivor must write alone
    // (with the default of 2, as in Kafka, it would answer
    // COORDINATOR_NOT_AVAILABLE until the other is back)
    "transaction.state.log.min.isr=1",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
    "replica.fetch.wait.max.ms=100",
    "replica.fetch.backoff.ms=100",
];

fn tid() -> TransactionalId {
    TransactionalId(StrBytes::from_static_str(TXN))
}

/// The coordinator of TXN: (node id, port), once there is one.
async fn coordinator(s: &mut TcpStream) -> (i32, u16) {
    find_coordinator(s, 1, TXN).await
}

/// InitProducerId, retried while the coordinator loads or aborts.
async fn init(s: &mut TcpStream) -> (i64, i16) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(tid()))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
        let r: InitProducerIdResponse = call(s, ApiKey::InitProducerId, 4, &req).await;
        if r.error_code == 0 {
            return (r.producer_id.0, r.producer_epoch);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "init: {}",
            r.error_code
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn add(s: &mut TcpStream, pid: i64, epoch: i16, partitions: Vec<i32>) -> Vec<i16> {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(tid())
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(name(TOPIC))
            .with_partitions(partitions)]);
    let r: AddPartitionsToTxnResponse = call(s, ApiKey::AddPartitionsToTxn, 3, &req).await;
    r.results_by_topic_v3_and_below[0]
        .results_by_partition
        .iter()
        .map(|p| p.partition_error_code)
        .collect()
}

async fn produce_txn(s: &mut TcpStream, partition: i32, pid: i64, epoch: i16, value: &str) -> i16 {
    let records: Bytes = BatchBuilder::new()
        .producer(pid, epoch, 0)
        .transactional()
        .record(
            None,
            Some(Bytes::from(value.to_string())),
            1_700_000_000_000,
        )
        .encode()
        .expect("batch")
        .into();
    let req = ProduceRequest::default()
        .with_transactional_id(Some(tid()))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(TOPIC))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    let r: ProduceResponse = call(s, ApiKey::Produce, 9, &req).await;
    r.responses[0].partition_responses[0].error_code
}

async fn end(s: &mut TcpStream, pid: i64, epoch: i16, commit: bool) -> i16 {
    let req = EndTxnRequest::default()
        .with_transactional_id(tid())
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r: EndTxnResponse = call(s, ApiKey::EndTxn, 3, &req).await;
    r.error_code
}

async fn state(s: &mut TcpStream) -> (i16, String, i16) {
    let req = DescribeTransactionsRequest::default().with_transactional_ids(vec![tid()]);
    let r: DescribeTransactionsResponse = call(s, ApiKey::DescribeTransactions, 0, &req).await;
    let t = &r.transaction_states[0];
    (
        t.error_code,
        t.transaction_state.as_str().to_string(),
        t.producer_epoch,
    )
}

/// The values of `partition` a read_committed consumer of `s` gets.
async fn read_committed(s: &mut TcpStream, partition: i32) -> Vec<String> {
    let records = try_records(s, TOPIC, partition, 1)
        .await
        .unwrap_or_else(|code| panic!("read_committed fetch of {partition}: error {code}"));
    records
        .into_iter()
        .filter(|r| !r.control)
        .map(|r| String::from_utf8_lossy(&r.value.unwrap_or_default()).to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_cross_brokers_and_a_new_coordinator_takes_over() {
    let dirs = ClusterDirs::new();
    let (mut brokers, c0) = two_brokers(|n| dirs.start(n, SETTINGS)).await;
    let c1 = brokers[&1].connect(Duration::from_secs(30)).await;
    let mut conns = BTreeMap::from([(0, c0), (1, c1)]);
    let probe = conns.get_mut(&0).unwrap();
    let (code, message) = create_replicated(probe, TOPIC, 2, 1, &[]).await;
    assert_eq!(code, 0, "{message:?}");
    let parts = wait_for_partitions(probe, TOPIC, "led", |p| {
        p.len() == 2 && p.values().all(|v| v.leader >= 0)
    })
    .await;
    let leaders: Vec<i32> = parts.values().map(|p| p.leader).collect();
    assert_ne!(
        leaders[0], leaders[1],
        "one partition per broker: {parts:?}"
    );

    let (coord, port) = coordinator(probe).await;
    assert_eq!(brokers[&coord].kafka.port(), port);
    let mut c = conns.remove(&coord).unwrap();
    let (pid, epoch) = init(&mut c).await;
    assert_eq!(epoch, 0);
    assert_eq!(add(&mut c, pid, epoch, vec![0, 1]).await, vec![0, 0]);
    for (partition, leader) in leaders.iter().enumerate() {
        let s = if *leader == coord {
            &mut c
        } else {
            conns.get_mut(leader).unwrap()
        };
        let value = format!("v{partition}");
        assert_eq!(
            produce_txn(s, partition as i32, pid, epoch, &value).await,
            0
        );
        assert!(read_committed(s, partition as i32).await.is_empty());
    }
    assert_eq!(end(&mut c, pid, epoch, true).await, 0);
    assert_eq!(state(&mut c).await, (0, "CompleteCommit".to_string(), 0));
    for (partition, leader) in leaders.iter().enumerate() {
        let s = if *leader == coord {
            &mut c
        } else {
            conns.get_mut(leader).unwrap()
        };
        assert_eq!(
            read_committed(s, partition as i32).await,
            vec![format!("v{partition}")],
            "partition {partition} (leader {leader}, coordinator {coord})"
        );
    }

    // the coordinator's broker goes: the other one takes __transaction_state over
    drop(c);
    let other = stop_one_of_two(&mut brokers, coord).await;
    let s = conns.get_mut(&other).unwrap();
    let (new_coord, _) = wait_for_coordinator(s, 1, TXN, other).await;
    assert_eq!(new_coord, other);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (code, st, e) = state(s).await;
        if code == 0 {
            assert_eq!((st.as_str(), e), ("CompleteCommit", 0), "reloaded");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "describe: {code}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (pid2, epoch2) = init(s).await;
    assert_eq!((pid2, epoch2), (pid, 1), "the epoch goes on from the log");
}
