//! KIP-467 on the wire: a Produce whose record set holds keyless records
//! for a compacted topic is refused with INVALID_RECORD, and the response
//! names every keyless record by its index in the batch, while the log
//! stays as it was. A record set of more than one batch for a partition is
//! INVALID_RECORD as a whole (Kafka's validator takes one batch, format v2). Librdkafka fails the
//! whole batch with INVALID_RECORD either way (against Kafka too, see
//! e2e/clients/test_admin.py), so the per-record list is checked here.

mod wire_common;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse};
use kafka_protocol::records::Compression;
use moldau_broker::storage::batch::BatchBuilder;
use wire_common::*;

/// One batch whose records have the given keys (`None`: no key).
fn keyed_batch(keys: &[Option<&str>], compression: Compression) -> Bytes {
    BatchBuilder::new()
        .compression(compression)
        .records(keys.iter().map(|k| {
            let key = k.map(|k| Bytes::from(k.to_string()));
            (key, Some(Bytes::from_static(b"v")), 1_700_000_000_000)
        }))
        .encode()
        .expect("encode")
        .into()
}

async fn produce_raw(
    s: &mut tokio::net::TcpStream,
    topic: &str,
    partitions: Vec<(i32, Bytes)>,
) -> ProduceResponse {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(
                partitions
                    .into_iter()
                    .map(|(index, records)| {
                        PartitionProduceData::default()
                            .with_index(index)
                            .with_records(Some(records))
                    })
                    .collect(),
            )]);
    call(s, ApiKey::Produce, 9, &req).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_records_of_a_compacted_topic_are_each_named() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &["--set", "log.cleanup.policy=compact"]).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, "compacted", 1).await.0, 0);

    // keys a, -, c, -, e: records 1 and 3 are keyless (uncompressed and lz4)
    for compression in [Compression::None, Compression::Lz4] {
        let records = keyed_batch(&[Some("a"), None, Some("c"), None, Some("e")], compression);
        let resp = produce_raw(&mut s, "compacted", vec![(0, records)]).await;
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
        assert_eq!(
            named.iter().map(|e| e.0).collect::<Vec<_>>(),
            vec![1, 3],
            "{compression:?}: {:?}",
            p.error_message
        );
        assert!(
            named.iter().all(|e| e.1.contains("without a key")),
            "{named:?}"
        );
        assert!(p.error_message.is_some());
    }

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

/// Kafka's log validator takes one record batch (format v2) per partition
/// and produce request: more is INVALID_RECORD and nothing is appended,
/// even when every batch is valid; other partitions of the same request
/// are not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_one_batch_for_a_partition_is_an_invalid_record() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, "two", 2).await.0, 0);
    for second in [Compression::None, Compression::Lz4] {
        let mut two = BytesMut::new();
        two.extend_from_slice(&keyed_batch(&[Some("a"), Some("b")], Compression::None));
        two.extend_from_slice(&keyed_batch(&[Some("c")], second));
        let resp = produce_raw(
            &mut s,
            "two",
            vec![
                (0, two.freeze()),
                (1, keyed_batch(&[Some("d")], Compression::None)),
            ],
        )
        .await;
        let parts = &resp.responses[0].partition_responses;
        let p0 = parts.iter().find(|p| p.index == 0).expect("partition 0");
        let p1 = parts.iter().find(|p| p.index == 1).expect("partition 1");
        assert_eq!(p0.error_code, 87, "INVALID_RECORD");
        assert!(p0.error_message.is_some());
        assert!(p0.record_errors.is_empty());
        assert_eq!(p1.error_code, 0);
    }
    // nothing of the refused sets in partition 0; both single batches in 1
    let (code, base) = produce(&mut s, "two", keyed_batch(&[Some("x")], Compression::None)).await;
    assert_eq!((code, base), (0, 0));
    assert_eq!(fetch_all(&mut s, "two", 0).await.len(), 1);
    broker.stop().await;
}
