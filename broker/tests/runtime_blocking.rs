//! Nothing blocks the async runtime, and shutdown is fast and clean:
//! - a produce that rolls a segment (tiny `internal.segment.bytes`) or fsyncs
//!   (`flush.messages=1`) runs off the runtime's worker: on a runtime with
//!   one worker thread, while such an append is held in progress (a test
//!   hook inside the blocking section waits for the test), requests of
//!   other connections, and a produce to the same partition waiting for
//!   its lock, do not stall other connections (an ordering, not a timing);
//! - a broker process with 2,000 partitions holding a little data exits
//!   cleanly on SIGTERM, and the next start recovers nothing: its
//!   `/metrics` count 0 unclean partitions and 0 re-validated segments
//!   (after a `kill -9` the same counts are positive, so the check can
//!   fail). A generous wall-clock ceiling on the exit is only a safety net.

mod wire_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, ProduceRequest, ProduceResponse,
};
use moldau_broker::topics::BLOCKING_APPEND_HOOK;
use tokio::net::TcpStream;
use wire_common::*;

fn produce_request(topic: &str, records: Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])])
}

async fn produce_reply(stream: &mut TcpStream, correlation_id: i32) -> (i16, i64) {
    let resp: ProduceResponse = receive(
        stream,
        ApiKey::Produce,
        9,
        correlation_id,
        Duration::from_secs(120),
    )
    .await;
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// The hook holds appends to topics named `held-*` until released (or for
/// at most 30 s, so that a regression fails the test instead of hanging it:
/// with the runtime's only worker blocked, not even timers fire).
struct Gate {
    entered: tokio::sync::mpsc::UnboundedSender<String>,
    release: Mutex<std::sync::mpsc::Receiver<()>>,
    timed_out: AtomicBool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn appends_that_roll_or_fsync_do_not_stall_other_connections() {
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let (release, release_rx) = std::sync::mpsc::channel();
    let gate: &'static Gate = Box::leak(Box::new(Gate {
        entered: entered_tx,
        release: Mutex::new(release_rx),
        timed_out: AtomicBool::new(false),
    }));
    assert!(BLOCKING_APPEND_HOOK
        .set(Box::new(move |topic: &str, _| {
            if topic.starts_with("held-") {
                let _ = gate.entered.send(topic.to_string());
                let rx = gate.release.lock().expect("gate");
                if rx.recv_timeout(Duration::from_secs(30)).is_err() {
                    gate.timed_out.store(true, Ordering::SeqCst);
                }
            }
        }))
        .is_ok());

    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start(dir.path(), &[]).await;
    let mut admin = broker.connect().await;
    create_with_configs(&mut admin, "other", &[]).await;
    // internal.segment.bytes (Kafka 4's test-only override of segment.bytes,
    // which refuses less than 1 MiB) of 1024: two 1.5 KiB batches roll.
    create_with_configs(
        &mut admin,
        "held-roll",
        &[("internal.segment.bytes", "1024")],
    )
    .await;
    create_with_configs(&mut admin, "held-flush", &[("flush.messages", "1")]).await;
    let big = || batch(&[vec![b'x'; 1500]]);

    // --- A produce that rolls the segment.
    let mut producer = broker.connect().await;
    assert_eq!(produce(&mut producer, "held-roll", big()).await, (0, 0));
    send(
        &mut producer,
        ApiKey::Produce,
        9,
        21,
        &produce_request("held-roll", big()),
    )
    .await;
    assert_eq!(entered.recv().await.as_deref(), Some("held-roll"));
    // The roll is in progress (held by the hook, the partition locked).
    // A produce to the same partition waits for the lock...
    let mut same = broker.connect().await;
    send(
        &mut same,
        ApiKey::Produce,
        9,
        22,
        &produce_request("held-roll", batch(&[b"s".to_vec()])),
    )
    .await;
    // ...and yet another connection is served, more than once, meanwhile.
    let mut other = broker.connect().await;
    for i in 0..3 {
        assert_eq!(topic_error(&mut other, "other").await, 0);
        assert_eq!(
            produce(&mut other, "other", batch(&[b"o".to_vec()])).await,
            (0, i)
        );
    }
    assert!(
        !has_pending_bytes(&producer) && !has_pending_bytes(&same),
        "the held produce finished before another connection was served"
    );
    assert!(
        !gate.timed_out.load(Ordering::SeqCst),
        "the runtime stalled"
    );
    release.send(()).expect("release");
    assert_eq!(produce_reply(&mut producer, 21).await, (0, 1));
    // The waiting produce got the lock; the segment is full again, so it
    // rolls too (and is held the same way).
    assert_eq!(entered.recv().await.as_deref(), Some("held-roll"));
    release.send(()).expect("release");
    assert_eq!(produce_reply(&mut same, 22).await, (0, 2));
    let segments = std::fs::read_dir(dir.path().join("held-roll-0"))
        .expect("ls")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .count();
    assert!(
        segments >= 2,
        "the produce did not roll ({segments} segments)"
    );

    // --- A produce that fsyncs (flush.messages=1).
    send(
        &mut producer,
        ApiKey::Produce,
        9,
        23,
        &produce_request("held-flush", batch(&[b"f".to_vec()])),
    )
    .await;
    assert_eq!(entered.recv().await.as_deref(), Some("held-flush"));
    for _ in 0..3 {
        assert_eq!(topic_error(&mut other, "other").await, 0);
    }
    assert!(
        !has_pending_bytes(&producer),
        "the fsyncing produce finished before another connection was served"
    );
    assert!(
        !gate.timed_out.load(Ordering::SeqCst),
        "the runtime stalled"
    );
    release.send(()).expect("release");
    assert_eq!(produce_reply(&mut producer, 23).await, (0, 0));
    let rp = std::fs::read_to_string(
        dir.path()
            .join("held-flush-0")
            .join("recovery-point.checkpoint"),
    )
    .expect("recovery point checkpoint");
    assert_eq!(rp, "moldau-checkpoint 1 1\n", "the produce was flushed");

    drop((admin, producer, same, other));
    broker.stop().await;
}

/// Produces one small batch to each of `partitions` partitions of `topic`
/// in one request; all must succeed.
async fn produce_everywhere(stream: &mut TcpStream, topic: &str, partitions: i32) {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(60_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(
                (0..partitions)
                    .map(|i| {
                        PartitionProduceData::default()
                            .with_index(i)
                            .with_records(Some(batch(&[format!("v{i}").into_bytes()])))
                    })
                    .collect(),
            )]);
    send(stream, ApiKey::Produce, 9, 31, &req).await;
    let resp: ProduceResponse =
        receive(stream, ApiKey::Produce, 9, 31, Duration::from_secs(300)).await;
    let parts = &resp.responses[0].partition_responses;
    assert_eq!(parts.len(), partitions as usize);
    assert!(parts.iter().all(|p| p.error_code == 0), "produce failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_2000_partitions_exits_and_the_next_start_recovers_nothing() {
    const PARTITIONS: i32 = 2000;
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut broker = Child::spawn(
        &data,
        data.with_file_name("first.log"),
        ChildOptions::default(),
    );
    let mut c = broker.connect(Duration::from_secs(120)).await;
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(600_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name("wide"))
            .with_num_partitions(PARTITIONS)
            .with_replication_factor(1)]);
    send(&mut c, ApiKey::CreateTopics, 7, 30, &req).await;
    let resp: CreateTopicsResponse = receive(
        &mut c,
        ApiKey::CreateTopics,
        7,
        30,
        Duration::from_secs(600),
    )
    .await;
    assert_eq!(resp.topics[0].error_code, 0, "{resp:?}");
    produce_everywhere(&mut c, "wide", PARTITIONS).await;
    drop(c);

    // Safety net only: the structural check is the next start's counts.
    let status = broker.stop(libc::SIGTERM, Duration::from_secs(25)).await;
    assert!(status.success(), "exit {status:?}; log:\n{}", broker.log());
    let log = broker.log();
    assert!(
        log.contains(&format!(
            "logs closed partitions={} failed=0",
            PARTITIONS + 1
        )),
        "{log}"
    );
    let markers = (0..PARTITIONS)
        .filter(|i| data.join(format!("wide-{i}/.clean-shutdown")).is_file())
        .count();
    assert_eq!(markers, PARTITIONS as usize, "every partition marked clean");

    // A clean stop: the next start re-validates nothing and serves the data.
    let mut broker = Child::spawn(
        &data,
        data.with_file_name("second.log"),
        ChildOptions::default(),
    );
    let mut c = broker.connect(Duration::from_secs(120)).await;
    let m = broker.metrics().await;
    assert_eq!(
        metric(&m, "moldau_log_recovery_unclean_partitions"),
        Some(0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "moldau_log_recovery_segments_recovered"),
        Some(0),
        "{m}"
    );
    assert!(
        broker
            .log()
            .contains("partitions=2001 unclean_partitions=0 segments_recovered=0"),
        "{}",
        broker.log()
    );
    let records = fetch_all(&mut c, "wide", 0).await;
    assert_eq!(records.len(), 1);
    assert_eq!(&records[0].1[..], b"v0");
    produce_everywhere(&mut c, "wide", PARTITIONS).await;
    drop(c);

    // The control: after kill -9 the same counts are positive.
    broker.stop(libc::SIGKILL, Duration::from_secs(25)).await;
    let broker = Child::spawn(
        &data,
        data.with_file_name("third.log"),
        ChildOptions::default(),
    );
    let mut c = broker.connect(Duration::from_secs(120)).await;
    let m = broker.metrics().await;
    assert_eq!(
        metric(&m, "moldau_log_recovery_unclean_partitions"),
        Some(PARTITIONS as u64 + 1),
        "{m}"
    );
    assert!(
        metric(&m, "moldau_log_recovery_segments_recovered")
            .is_some_and(|n| n >= PARTITIONS as u64),
        "{m}"
    );
    let records = fetch_all(&mut c, "wide", 0).await;
    assert_eq!(records.len(), 2, "nothing lost");
}
