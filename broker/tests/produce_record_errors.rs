//! KIP-467 on the wire: a Produce whose record set holds keyless records
//! for a compacted topic is refused with INVALID_RECORD, and the response
//! names every keyless record by its index in the partition's record set
//! (across batches), while the log stays as it was. Librdkafka fails the
//! whole batch with INVALID_RECORD either way (against Kafka too, see
//! e2e/clients/test_admin.py), so the per-record list is checked here.

mod wire_common;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use wire_common::*;

/// One batch whose records have the given keys (`None`: no key).
fn keyed_batch(keys: &[Option<&str>], compression: Compression) -> Bytes {
    let records: Vec<Record> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: -1,
            timestamp: 1_700_000_000_000,
            key: k.map(|k| Bytes::from(k.to_string())),
            value: Some(Bytes::from_static(b"v")),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("encode batch");
    buf.freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_records_of_a_compacted_topic_are_each_named() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &["--set", "log.cleanup.policy=compact"]).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, "compacted", 1).await.0, 0);

    // two batches: keys a, -, c then -, e (lz4): records 1 and 3 are keyless
    let mut records = BytesMut::new();
    records.extend_from_slice(&keyed_batch(
        &[Some("a"), None, Some("c")],
        Compression::None,
    ));
    records.extend_from_slice(&keyed_batch(&[None, Some("e")], Compression::Lz4));
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name("compacted"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records.freeze()))])]);
    let resp: ProduceResponse = call(&mut s, ApiKey::Produce, 9, &req).await;
    let p = &resp.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 87, "INVALID_RECORD");
    let named: Vec<(i32, String)> = p
        .record_errors
        .iter()
        .map(|e| {
            let message = e.batch_index_error_message.as_ref().map(|m| m.to_string());
            (e.batch_index, message.unwrap_or_default())
        })
        .collect();
    assert_eq!(named.iter().map(|e| e.0).collect::<Vec<_>>(), vec![1, 3]);
    assert!(
        named.iter().all(|e| e.1.contains("without a key")),
        "{named:?}"
    );
    assert!(p.error_message.is_some());

    // nothing was appended; keyed records still are
    let (code, base) = produce(
        &mut s,
        "compacted",
        keyed_batch(&[Some("x")], Compression::None),
    )
    .await;
    assert_eq!((code, base), (0, 0));
    broker.stop().await;
}
