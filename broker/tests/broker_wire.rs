//! A real broker (started in-process on 127.0.0.1 with an ephemeral port)
//! driven over TCP with the `kafka-protocol` codec: version negotiation,
//! produce/fetch through the zero-copy path, restart persistence, and bad
//! frames that must close only their own connection.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse, MetadataRequest,
    MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use moldau_broker::config::Cli;
use moldau_broker::server::{run_reporting, BoundAddresses};
use moldau_broker::storage::batch::BatchBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};

struct Running {
    addrs: BoundAddresses,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start(dir: &std::path::Path, extra: &[&str]) -> Running {
    let mut args = vec![
        "moldau-broker".to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--http-listen".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        dir.display().to_string(),
        "--set".into(),
        "offsets.topic.num.partitions=3".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let cli = <Cli as clap::Parser>::parse_from(args);
    let (stop, rx) = watch::channel(false);
    let (tx, bound) = oneshot::channel();
    let task = tokio::spawn(run_reporting(cli, rx, false, Some(tx)));
    let addrs = tokio::time::timeout(Duration::from_secs(30), bound)
        .await
        .unwrap()
        .unwrap();
    Running { addrs, stop, task }
}

impl Running {
    async fn stop(self) {
        self.stop.send(true).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

async fn call<Req: Encodable, Resp: Decodable>(
    stream: &mut TcpStream,
    api: ApiKey,
    version: i16,
    req: &Req,
) -> Resp {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("wire-test")));
    let mut body = BytesMut::new();
    header
        .encode(&mut body, api.request_header_version(version))
        .unwrap();
    req.encode(&mut body, version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(body.len() as i32);
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await.unwrap();
    let mut resp = read_frame(stream).await.expect("a response");
    let h = ResponseHeader::decode(&mut resp, api.response_header_version(version)).unwrap();
    assert_eq!(h.correlation_id, 7);
    Resp::decode(&mut resp, version).unwrap()
}

async fn read_frame(stream: &mut TcpStream) -> Option<Bytes> {
    let mut len = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut len))
        .await
        .ok()?
        .ok()?;
    let mut buf = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut buf).await.ok()?;
    Some(Bytes::from(buf))
}

/// A plain HTTP/1.1 GET; returns the whole response (status line included).
async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// True when the broker closed the connection (EOF) within a few seconds.
async fn closed(stream: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut b)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

fn batch(values: &[&str]) -> Bytes {
    idempotent_batch(values, -1, -1, -1)
}

/// A batch of producer `pid`/`epoch` whose first record has sequence `seq`
/// (`pid == -1`: a plain, non-idempotent batch).
fn idempotent_batch(values: &[&str], pid: i64, epoch: i16, seq: i32) -> Bytes {
    BatchBuilder::new()
        .compression(Compression::Lz4)
        .producer(pid, epoch, seq)
        .records(values.iter().enumerate().map(|(i, v)| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(v.to_string())),
                1_700_000_000_000 + i as i64,
            )
        }))
        .encode()
        .unwrap()
        .into()
}

async fn produce(stream: &mut TcpStream, topic: &str, records: Bytes) -> (i16, i64) {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.into())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = call(stream, ApiKey::Produce, 9, &req).await;
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// Creates `topic` through Metadata auto-creation.
async fn ensure_topic(stream: &mut TcpStream, topic: &str) {
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(true)
        .with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.into()))))]));
    let meta: MetadataResponse = call(stream, ApiKey::Metadata, 12, &req).await;
    assert_eq!(meta.topics[0].error_code, 0);
}

async fn fetch_values(
    stream: &mut TcpStream,
    topic: &str,
    offset: i64,
    version: i16,
) -> Vec<(i64, String)> {
    let req = FetchRequest::default()
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.into())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = call(stream, ApiKey::Fetch, version, &req).await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let mut records = p.records.clone().unwrap_or_default();
    let mut out = Vec::new();
    while records.has_remaining() {
        let set = RecordBatchDecoder::decode(&mut records).unwrap();
        for r in set.records {
            out.push((
                r.offset,
                String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_fetch_restart_and_version_negotiation() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut s = TcpStream::connect(broker.addrs.kafka).await.unwrap();

    let versions: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    assert_eq!(versions.error_code, 0);
    let fetch = versions
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::Fetch as i16)
        .unwrap();
    assert_eq!((fetch.min_version, fetch.max_version), (4, 12));
    // Produce from v0 as Kafka 4 advertises it (librdkafka's compression
    // check); a v1 request still closes the connection (see
    // bad_frames_close_only_their_connection).
    let produce_range = versions
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::Produce as i16)
        .unwrap();
    assert_eq!(
        (produce_range.min_version, produce_range.max_version),
        (0, 12)
    );
    let end_txn = versions
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::EndTxn as i16)
        .expect("transactions are advertised");
    assert_eq!(
        (end_txn.min_version, end_txn.max_version),
        (0, 5),
        "EndTxn v5: transaction version 2"
    );

    let meta: MetadataResponse = call(
        &mut s,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_allow_auto_topic_creation(true)
            .with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("wire"))))])),
    )
    .await;
    assert_eq!(meta.topics[0].error_code, 0, "auto-created");
    assert_eq!(meta.topics[0].partitions.len(), 1);

    assert_eq!(
        produce(&mut s, "wire", batch(&["a", "b", "c"])).await,
        (0, 0)
    );
    assert_eq!(produce(&mut s, "wire", batch(&["d", "e"])).await, (0, 3));
    for version in [4, 11, 12] {
        let got = fetch_values(&mut s, "wire", 4, version).await;
        // The whole batch holding offset 4 comes back (3 and 4).
        assert_eq!(
            got,
            vec![(3, "d".to_string()), (4, "e".to_string())],
            "fetch v{version}"
        );
    }

    // A corrupted batch is refused with CORRUPT_MESSAGE; nothing is appended.
    let mut bad = BytesMut::from(&batch(&["x"])[..]);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert_eq!(produce(&mut s, "wire", bad.freeze()).await.0, 2);

    let metrics = http_get(broker.addrs.http, "/metrics").await;
    for expected in [
        "moldau_bytes_in_total{topic=\"wire\"}",
        "moldau_records_in_total{topic=\"wire\"} 5",
        "moldau_log_end_offset{topic=\"wire\",partition=\"0\"} 5",
        "moldau_requests_total{api=\"Produce\"}",
        "moldau_under_replicated_partitions 0",
        "moldau_offline_partitions 0",
    ] {
        assert!(
            metrics.contains(expected),
            "/metrics lacks {expected}:\n{metrics}"
        );
    }
    // The build it runs: the same version and revision as `--version`.
    let version = std::process::Command::new(env!("CARGO_BIN_EXE_moldau-broker"))
        .arg("--version")
        .output()
        .expect("moldau-broker --version");
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let revision = version
        .strip_prefix(concat!(
            "moldau-broker ",
            env!("CARGO_PKG_VERSION"),
            " (revision "
        ))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("--version printed {version:?}"));
    assert!(!revision.is_empty(), "--version printed {version:?}");
    let build_info = format!(
        "moldau_build_info{{version=\"{}\",revision=\"{revision}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        metrics.contains(&build_info),
        "/metrics lacks {build_info}:\n{metrics}"
    );
    assert!(http_get(broker.addrs.http, "/readyz")
        .await
        .starts_with("HTTP/1.1 200"));

    drop(s);
    broker.stop().await;
    let broker = start(dir.path(), &[]).await;
    let mut s = TcpStream::connect(broker.addrs.kafka).await.unwrap();
    let got = fetch_values(&mut s, "wire", 0, 12).await;
    assert_eq!(
        got.iter().map(|(o, _)| *o).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(produce(&mut s, "wire", batch(&["f"])).await, (0, 5));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &["--set", "socket.request.max.bytes=1048576"]).await;
    let addr = broker.addrs.kafka;

    // KIP-511: an ApiVersions version from the future gets a v0 answer with
    // UNSUPPORTED_VERSION and our table, and the connection stays open.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(10);
    frame.put_i16(ApiKey::ApiVersions as i16);
    frame.put_i16(99);
    frame.put_i32(42);
    frame.put_i16(-1);
    s.write_all(&frame).await.unwrap();
    let mut resp = read_frame(&mut s).await.unwrap();
    assert_eq!(resp.get_i32(), 42);
    let v0 = ApiVersionsResponse::decode(&mut resp, 0).unwrap();
    assert_eq!(v0.error_code, 35);
    assert!(!v0.api_keys.is_empty());
    let ok: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        0,
        &ApiVersionsRequest::default(),
    )
    .await;
    assert_eq!(ok.error_code, 0);

    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "unknown api key",
            [
                &12i32.to_be_bytes()[..],
                &[0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0, 0],
            ]
            .concat(),
        ),
        (
            "unsupported produce version",
            [
                &12i32.to_be_bytes()[..],
                &[0, 0, 0, 1, 0, 0, 0, 1, 0xff, 0xff, 0, 0],
            ]
            .concat(),
        ),
        (
            "frame above socket.request.max.bytes",
            (2 * 1024 * 1024i32).to_be_bytes().to_vec(),
        ),
        ("negative size", (-5i32).to_be_bytes().to_vec()),
        (
            "garbage body",
            [&6i32.to_be_bytes()[..], &[0, 3, 0, 12, 0xde, 0xad]].concat(),
        ),
        (
            "undecodable metadata",
            [
                &14i32.to_be_bytes()[..],
                &[0, 3, 0, 12, 0, 0, 0, 1, 0, 5, b'a', 0xff, 0xff, 0xff],
            ]
            .concat(),
        ),
    ];
    for (what, bytes) in cases {
        let mut bad = TcpStream::connect(addr).await.unwrap();
        bad.write_all(&bytes).await.unwrap();
        assert!(
            closed(&mut bad).await,
            "{what}: connection should be closed"
        );
    }
    // A truncated frame followed by a hang-up must not disturb anything.
    let mut torn = TcpStream::connect(addr).await.unwrap();
    torn.write_all(&[0, 0, 0, 100, 0, 18]).await.unwrap();
    drop(torn);

    // The first connection and new ones still work.
    let again: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    assert_eq!(again.error_code, 0);
    let mut fresh = TcpStream::connect(addr).await.unwrap();
    assert_eq!(
        produce(&mut fresh, "after-bad-input", batch(&["ok"]))
            .await
            .0,
        3,
        "unknown topic on produce"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_retries_are_not_duplicated_even_after_restart() {
    use kafka_protocol::messages::{
        InitProducerIdRequest, InitProducerIdResponse, TransactionalId,
    };
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut s = TcpStream::connect(broker.addrs.kafka).await.unwrap();
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
    assert!(pid >= 0);
    assert_eq!(epoch, 0);
    let other: InitProducerIdResponse = call(
        &mut s,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None),
    )
    .await;
    assert_ne!(other.producer_id.0, pid, "ids are unique");
    let txn: InitProducerIdResponse = call(
        &mut s,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
            .with_transaction_timeout_ms(60_000),
    )
    .await;
    assert_eq!(txn.error_code, 0, "the transaction coordinator answers");
    assert_eq!(txn.producer_epoch, 0);
    assert!(txn.producer_id.0 >= 0 && txn.producer_id.0 != pid);

    ensure_topic(&mut s, "idem").await;
    assert_eq!(
        produce(&mut s, "idem", idempotent_batch(&["a", "b"], pid, epoch, 0)).await,
        (0, 0)
    );
    assert_eq!(
        produce(&mut s, "idem", idempotent_batch(&["c"], pid, epoch, 2)).await,
        (0, 2)
    );
    // A retry of the first batch: acknowledged with its original offset, not appended.
    assert_eq!(
        produce(&mut s, "idem", idempotent_batch(&["a", "b"], pid, epoch, 0)).await,
        (0, 0)
    );
    // A gap in the sequence.
    assert_eq!(
        produce(&mut s, "idem", idempotent_batch(&["z"], pid, epoch, 9))
            .await
            .0,
        45
    );
    // An older epoch is fenced.
    let bumped: InitProducerIdResponse = call(
        &mut s,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_producer_id(kafka_protocol::messages::ProducerId(pid))
            .with_producer_epoch(epoch),
    )
    .await;
    assert_eq!((bumped.producer_id.0, bumped.producer_epoch), (pid, 1));
    assert_eq!(
        produce(&mut s, "idem", idempotent_batch(&["d"], pid, 1, 0)).await,
        (0, 3)
    );
    assert_eq!(
        produce(&mut s, "idem", idempotent_batch(&["e"], pid, 0, 3))
            .await
            .0,
        47
    );

    drop(s);
    broker.stop().await;
    let broker = start(dir.path(), &[]).await;
    let mut s = TcpStream::connect(broker.addrs.kafka).await.unwrap();
    // The producer state is rebuilt from the log: the retry is still a duplicate.
    assert_eq!(
        produce(&mut s, "idem", idempotent_batch(&["d"], pid, 1, 0)).await,
        (0, 3)
    );
    assert_eq!(
        produce(&mut s, "idem", idempotent_batch(&["f"], pid, 1, 1)).await,
        (0, 4)
    );
    let values: Vec<String> = fetch_values(&mut s, "idem", 0, 12)
        .await
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, ["a", "b", "c", "d", "f"]);
    let again: InitProducerIdResponse = call(
        &mut s,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default().with_transactional_id(None),
    )
    .await;
    assert!(
        again.producer_id.0 > other.producer_id.0,
        "ids stay unique across restarts: {} then {}",
        other.producer_id.0,
        again.producer_id.0
    );
    broker.stop().await;
}
