//! Broker-side compression on the wire, with the broker-wide default
//! `compression.type` (no topic override): an idempotent producer's
//! uncompressed batch is stored zstd with its producer id, epoch and
//! sequence, and its retry is still recognised as a duplicate (acknowledged
//! with the original offset, not appended); a batch whose recompressed
//! form exceeds `max.message.bytes` is refused with MESSAGE_TOO_LARGE, as
//! Kafka checks the size after recompression.

mod wire_common;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, InitProducerIdRequest, InitProducerIdResponse,
};
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use moldau_broker::storage::batch;
use wire_common::*;

/// The raw record set of partition 0 from offset 0.
async fn fetch_raw(s: &mut tokio::net::TcpStream, topic: &str) -> Bytes {
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(4 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = call(s, ApiKey::Fetch, 12, &req).await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.records.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_default_codec_recompresses_and_keeps_idempotence() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &[
            "--set",
            "compression.type=zstd",
            "--set",
            "compression.zstd.level=7",
        ],
    )
    .await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, "z", 1).await.0, 0);
    let init: InitProducerIdResponse = call(
        &mut s,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000),
    )
    .await;
    assert_eq!(init.error_code, 0);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    let values: Vec<Vec<u8>> = (0..30)
        .map(|i| format!("value {i} ").repeat(20).into_bytes())
        .collect();
    let sent = batch_from(&values, pid, epoch, 0, Compression::None);
    assert_eq!(produce(&mut s, "z", sent.clone()).await, (0, 0));
    let more = batch_from(&values[..3], pid, epoch, 30, Compression::Gzip);
    assert_eq!(produce(&mut s, "z", more).await, (0, 30));
    // The retry of the first batch: its original offset, nothing appended.
    assert_eq!(produce(&mut s, "z", sent.clone()).await, (0, 0));

    let raw = fetch_raw(&mut s, "z").await;
    let headers = batch::validate_batches(&raw, usize::MAX).expect("valid batches, CRCs included");
    assert_eq!(headers.len(), 2, "the retry was not appended");
    let original = batch::BatchHeader::parse(&sent).unwrap();
    for (h, (base, seq, count)) in headers.iter().zip([(0, 0, 30), (30, 30, 3)]) {
        assert_eq!(h.compression(), 4, "stored zstd");
        assert_eq!(
            (
                h.base_offset,
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.records_count
            ),
            (base, pid, epoch, seq, count)
        );
    }
    assert_eq!(headers[0].base_timestamp, original.base_timestamp);
    assert_eq!(headers[0].max_timestamp, original.max_timestamp);
    assert!(headers[0].total_size() < sent.len(), "zstd stored smaller");
    let mut all = raw.clone();
    let decoded = RecordBatchDecoder::decode(&mut all).unwrap().records;
    let got: Vec<Vec<u8>> = decoded
        .iter()
        .map(|r| r.value.clone().unwrap().to_vec())
        .collect();
    assert_eq!(got, values);
    drop(s);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_message_bytes_applies_after_recompression() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &[
            "--set",
            "compression.type=uncompressed",
            "--set",
            "message.max.bytes=4000",
        ],
    )
    .await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, "u", 1).await.0, 0);
    // 20 KB of repetitive values: ~200 bytes as lz4, 20 KB uncompressed.
    let values: Vec<Vec<u8>> = (0..20).map(|_| vec![b'x'; 1000]).collect();
    let packed = batch_from(&values, -1, -1, 0, Compression::Lz4);
    assert!(packed.len() < 4000, "{}", packed.len());
    assert_eq!(
        produce(&mut s, "u", packed).await.0,
        10,
        "MESSAGE_TOO_LARGE"
    );
    // A batch still small once uncompressed is stored uncompressed.
    let small = batch_from(&values[..2], -1, -1, 0, Compression::Lz4);
    assert_eq!(produce(&mut s, "u", small).await, (0, 0));
    let raw = fetch_raw(&mut s, "u").await;
    let headers = batch::validate_batches(&raw, usize::MAX).unwrap();
    assert_eq!(headers.len(), 1);
    assert_eq!(headers[0].compression(), 0);
    drop(s);
    broker.stop().await;
}
