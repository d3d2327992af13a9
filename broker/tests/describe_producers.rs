//! DescribeProducers (API key 61, KIP-664) over the real wire: a
//! standalone broker answers the active producers of a partition it leads
//! — an idempotent producer with its epoch, last sequence and timestamp, and a
//! transactional one whose open transaction's start offset is shown until
//! the transaction commits — and UNKNOWN_TOPIC_OR_PARTITION for a
//! partition or topic that does not exist.

mod wire_common;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::describe_producers_response::PartitionResponse;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, DescribeProducersRequest,
    DescribeProducersResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use moldau_broker::storage::batch::BatchBuilder;
use tokio::net::TcpStream;
use wire_common::*;

const TOPIC: &str = "described";
const TXN: &str = "describe-producers-txn";
const ARGS: &[&str] = &["--set", "transaction.state.log.num.partitions=1"];

fn tid() -> TransactionalId {
    TransactionalId(StrBytes::from_static_str(TXN))
}

async fn init(s: &mut TcpStream, transactional: bool) -> (i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(transactional.then(tid))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r: InitProducerIdResponse = call(s, ApiKey::InitProducerId, 4, &req).await;
    assert_eq!(r.error_code, 0);
    (r.producer_id.0, r.producer_epoch)
}

async fn describe(s: &mut TcpStream, topic: &str, partitions: Vec<i32>) -> Vec<PartitionResponse> {
    let req = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(name(topic))
        .with_partition_indexes(partitions)]);
    let mut r: DescribeProducersResponse = call(s, ApiKey::DescribeProducers, 0, &req).await;
    assert_eq!(r.topics.len(), 1);
    assert_eq!(r.topics[0].name.0.as_str(), topic);
    r.topics.remove(0).partitions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_and_transactional_producers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), ARGS).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, TOPIC, 1).await.0, 0);

    // nothing produced yet: no producers
    let parts = describe(&mut s, TOPIC, vec![0]).await;
    assert_eq!(parts[0].error_code, 0);
    assert!(parts[0].active_producers.is_empty());

    // an idempotent producer: two batches, sequences 0..=2 and 3..=4
    let (idem, idem_epoch) = init(&mut s, false).await;
    let values = |n: usize| (0..n).map(|i| vec![b'a' + i as u8]).collect::<Vec<_>>();
    let first = batch_from(&values(3), idem, idem_epoch, 0, Compression::None);
    assert_eq!(produce(&mut s, TOPIC, first).await, (0, 0));
    let second = batch_from(&values(2), idem, idem_epoch, 3, Compression::None);
    assert_eq!(produce(&mut s, TOPIC, second).await, (0, 3));

    // a transaction opened at offset 5
    let (txn_pid, txn_epoch) = init(&mut s, true).await;
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(tid())
        .with_v3_and_below_producer_id(ProducerId(txn_pid))
        .with_v3_and_below_producer_epoch(txn_epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(name(TOPIC))
            .with_partitions(vec![0])]);
    let r: AddPartitionsToTxnResponse = call(&mut s, ApiKey::AddPartitionsToTxn, 3, &req).await;
    assert_eq!(
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
    let records: Bytes = BatchBuilder::new()
        .producer(txn_pid, txn_epoch, 0)
        .transactional()
        .record(None, Some(Bytes::from_static(b"t")), 1_700_000_000_000)
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
                .with_index(0)
                .with_records(Some(records))])]);
    let r: ProduceResponse = call(&mut s, ApiKey::Produce, 9, &req).await;
    let p = &r.responses[0].partition_responses[0];
    assert_eq!((p.error_code, p.base_offset), (0, 5));

    let parts = describe(&mut s, TOPIC, vec![0]).await;
    assert_eq!(parts[0].error_code, 0);
    let mut producers = parts[0].active_producers.clone();
    producers.sort_by_key(|p| p.producer_id.0);
    assert_eq!(producers.len(), 2, "{producers:?}");
    let idem_state = producers.iter().find(|p| p.producer_id.0 == idem).unwrap();
    assert_eq!(idem_state.producer_epoch, idem_epoch as i32);
    assert_eq!(idem_state.last_sequence, 4);
    // batch_from's CreateTimes start at 1,700,000,000,000: the second
    // batch's max
    assert_eq!(idem_state.last_timestamp, 1_700_000_000_001);
    assert_eq!(idem_state.current_txn_start_offset, -1);
    let txn_state = producers
        .iter()
        .find(|p| p.producer_id.0 == txn_pid)
        .unwrap();
    assert_eq!(txn_state.producer_epoch, txn_epoch as i32);
    assert_eq!(txn_state.last_sequence, 0);
    assert_eq!(txn_state.last_timestamp, 1_700_000_000_000);
    assert_eq!(txn_state.current_txn_start_offset, 5);

    // commit: the transaction is no longer open
    let req = EndTxnRequest::default()
        .with_transactional_id(tid())
        .with_producer_id(ProducerId(txn_pid))
        .with_producer_epoch(txn_epoch)
        .with_committed(true);
    let r: EndTxnResponse = call(&mut s, ApiKey::EndTxn, 3, &req).await;
    assert_eq!(r.error_code, 0);
    let mut open = 5;
    for _ in 0..100 {
        let parts = describe(&mut s, TOPIC, vec![0]).await;
        let t = parts[0]
            .active_producers
            .iter()
            .find(|p| p.producer_id.0 == txn_pid)
            .unwrap()
            .clone();
        open = t.current_txn_start_offset;
        if open == -1 {
            assert!(t.coordinator_epoch >= 0, "{t:?}");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(open, -1, "the COMMIT marker ends the transaction");

    // a partition or topic that does not exist
    let parts = describe(&mut s, TOPIC, vec![0, 7]).await;
    assert_eq!(parts[0].error_code, 0);
    assert_eq!(parts[1].partition_index, 7);
    assert_eq!(
        parts[1].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    let parts = describe(&mut s, "no-such-topic", vec![0]).await;
    assert_eq!(
        parts[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );

    broker.stop().await;
}
