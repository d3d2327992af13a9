//! A connection's requests are read ahead of the one being handled, and
//! a produce request's compressed batches checked then (`protocol::connection`,
//! `handlers::prepare`). Sent back to back without waiting, as a client
//! with several requests in flight sends them, requests must still be
//! answered in order, each batch accepted or refused exactly as it would
//! be alone, a bad frame after them must close the connection only after
//! they are answered, and a config change handled before a produce request
//! must apply to it even if its batches were checked before the change.

mod wire_common;

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, ProduceRequest,
    ProduceResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use moldau_broker::storage::batch::BatchBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wire_common::*;

/// Records per batch: 700 values of 100 bytes that do not compress make
/// batches (lz4 ones too) over the 64 KiB from which a produce request's
/// batches are checked on the blocking pool.
const RECORDS: usize = 700;

/// The values of request `request`: a label, then pseudo-random bytes.
fn values(request: usize) -> Vec<Vec<u8>> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ request as u64;
    (0..RECORDS)
        .map(|i| {
            let mut v = format!("request {request:02} record {i:04} ").into_bytes();
            while v.len() < 100 {
                // xorshift64
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                v.push(state as u8);
            }
            v
        })
        .collect()
}

/// `values` without keys, for a compacted topic to refuse.
fn keyless_batch(values: &[Vec<u8>]) -> Bytes {
    BatchBuilder::new()
        .records(
            values
                .iter()
                .map(|v| (None, Some(Bytes::from(v.clone())), 1_700_000_000_000)),
        )
        .encode()
        .expect("encode")
        .into()
}

fn produce_request(topic: &str, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])])
}

/// `(error code, base offset, records named in record_errors)`.
async fn produce_answer(
    s: &mut tokio::net::TcpStream,
    correlation_id: i32,
) -> (i16, i64, Vec<i32>) {
    let resp: ProduceResponse = receive(
        s,
        ApiKey::Produce,
        9,
        correlation_id,
        Duration::from_secs(60),
    )
    .await;
    let p = &resp.responses[0].partition_responses[0];
    let named = p.record_errors.iter().map(|e| e.batch_index).collect();
    (p.error_code, p.base_offset, named)
}

async fn metrics_of(broker: &Running) -> String {
    metrics_page(broker.addrs.http).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_sent_back_to_back_are_answered_in_order_and_checked_as_alone() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut admin = broker.connect().await;
    assert_eq!(create_topic(&mut admin, "piped", 1).await.0, 0);
    create_with_configs(
        &mut admin,
        "piped-compact",
        &[("cleanup.policy", "compact")],
    )
    .await;

    // Seven produce requests, written at once: good batches (uncompressed
    // and lz4), one whose CRC does not match, one of keyless records for
    // a compacted topic; then a frame of an unknown API.
    let corrupt = {
        let mut b = batch_from(&values(2), -1, -1, 0, Compression::Lz4).to_vec();
        let last = b.len() - 1;
        b[last] ^= 0x55;
        Bytes::from(b)
    };
    let requests = [
        (
            "piped",
            batch_from(&values(0), -1, -1, 0, Compression::None),
        ),
        ("piped", batch_from(&values(1), -1, -1, 0, Compression::Lz4)),
        ("piped", corrupt),
        ("piped-compact", keyless_batch(&values(3))),
        ("piped", batch_from(&values(4), -1, -1, 0, Compression::Lz4)),
        (
            "piped",
            batch_from(&values(5), -1, -1, 0, Compression::None),
        ),
        ("piped", batch_from(&values(6), -1, -1, 0, Compression::Lz4)),
    ];
    let mut s = broker.connect().await;
    for (at, (topic, records)) in requests.iter().enumerate() {
        let req = produce_request(topic, records.clone());
        send(&mut s, ApiKey::Produce, 9, at as i32 + 1, &req).await;
    }
    // api key 999, version 0, correlation id 8, then a client id length
    s.write_all(&[0, 0, 0, 10, 0x03, 0xe7, 0, 0, 0, 0, 0, 8, 0, 0])
        .await
        .unwrap();

    let mut answers = Vec::new();
    for at in 0..requests.len() {
        answers.push(produce_answer(&mut s, at as i32 + 1).await);
    }
    let n = RECORDS as i64;
    assert_eq!(answers[0], (0, 0, vec![]));
    assert_eq!(answers[1], (0, n, vec![]));
    assert_eq!(answers[2].0, 2, "CORRUPT_MESSAGE: {:?}", answers[2]);
    assert_eq!(answers[3].0, 87, "INVALID_RECORD: {:?}", answers[3]);
    assert_eq!(answers[3].2, (0..RECORDS as i32).collect::<Vec<_>>());
    assert_eq!(answers[4], (0, 2 * n, vec![]));
    assert_eq!(answers[5], (0, 3 * n, vec![]));
    assert_eq!(answers[6], (0, 4 * n, vec![]));
    // the unknown API closes the connection, after the answers above
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0))),
        "expected the connection closed with nothing more: {read:?}"
    );

    // The log holds the accepted batches' records, byte for byte, in order.
    let stored = fetch_all(&mut admin, "piped", 0).await;
    let expected: Vec<Vec<u8>> = [0, 1, 4, 5, 6].iter().flat_map(|r| values(*r)).collect();
    assert_eq!(stored.len(), expected.len());
    for (at, ((offset, value), want)) in stored.iter().zip(&expected).enumerate() {
        assert_eq!(*offset, at as i64);
        assert_eq!(value.as_ref(), want.as_slice(), "offset {offset}");
    }
    assert!(fetch_all(&mut admin, "piped-compact", 0).await.is_empty());

    // The four lz4 requests (the corrupt one too) were checked by the
    // reading side, and the handler used those checks (no rules changed
    // meanwhile); the three uncompressed ones were checked in their turn.
    let m = metrics_of(&broker).await;
    assert_eq!(
        metric(&m, "moldau_produce_checked_ahead_total"),
        Some(4),
        "{m}"
    );
    assert_eq!(
        metric(&m, "moldau_produce_checked_again_total"),
        Some(0),
        "{m}"
    );
    broker.stop().await;
}

/// Sends IncrementalAlterConfigs SET of one config of topic `topic`.
async fn alter_topic_config(
    s: &mut tokio::net::TcpStream,
    correlation_id: i32,
    topic: &str,
    config: &str,
    value: &str,
) {
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configs(vec![AlterableConfig::default()
                .with_name(StrBytes::from_string(config.to_string()))
                .with_config_operation(0)
                .with_value(Some(StrBytes::from_string(value.to_string())))]),
    ]);
    send(s, ApiKey::IncrementalAlterConfigs, 1, correlation_id, &req).await;
}

/// The error code of the IncrementalAlterConfigs answer `correlation_id`.
async fn alter_answer(s: &mut tokio::net::TcpStream, correlation_id: i32) -> i16 {
    let altered: IncrementalAlterConfigsResponse = receive(
        s,
        ApiKey::IncrementalAlterConfigs,
        1,
        correlation_id,
        Duration::from_secs(60),
    )
    .await;
    altered.responses[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_change_answered_before_a_produce_applies_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, "shrinking", 1).await.0, 0);

    // Back to back: lower max.message.bytes below the batch's size, then
    // produce the batch. The produce request is read (and its batch
    // checked) while the change is handled; it must be refused with
    // MESSAGE_TOO_LARGE all the same, and the log stay empty. Repeated
    // with the limit raised again in between, alternating the outcome.
    for round in 0..3 {
        let records = batch_from(&values(round), -1, -1, 0, Compression::Lz4);
        let too_small = (records.len() / 2).to_string();
        let base = round as i32 * 10;
        alter_topic_config(
            &mut s,
            base + 1,
            "shrinking",
            "max.message.bytes",
            &too_small,
        )
        .await;
        send(
            &mut s,
            ApiKey::Produce,
            9,
            base + 2,
            &produce_request("shrinking", records.clone()),
        )
        .await;
        alter_topic_config(
            &mut s,
            base + 3,
            "shrinking",
            "max.message.bytes",
            "1048588",
        )
        .await;
        send(
            &mut s,
            ApiKey::Produce,
            9,
            base + 4,
            &produce_request("shrinking", records),
        )
        .await;

        assert_eq!(alter_answer(&mut s, base + 1).await, 0);
        let refused = produce_answer(&mut s, base + 2).await;
        assert_eq!(
            refused.0, 10,
            "MESSAGE_TOO_LARGE in round {round}: {refused:?}"
        );
        assert_eq!(alter_answer(&mut s, base + 3).await, 0);
        let accepted = produce_answer(&mut s, base + 4).await;
        assert_eq!(
            accepted,
            (0, round as i64 * RECORDS as i64, vec![]),
            "round {round}"
        );
    }
    let stored = fetch_all(&mut s, "shrinking", 0).await;
    assert_eq!(stored.len(), 3 * RECORDS);
    // Each produce was checked ahead; whether a check came before the
    // change (and was redone) or after depends on timing, not the outcome.
    let m = metrics_of(&broker).await;
    let ahead = metric(&m, "moldau_produce_checked_ahead_total").unwrap_or(0);
    let again = metric(&m, "moldau_produce_checked_again_total").unwrap_or(0);
    assert_eq!(ahead + again, 6, "{m}");
    broker.stop().await;
}
