//! Admin operations and descriptor limits on a real broker:
//! - a 2,000-partition CreateTopics runs off the runtime's worker threads:
//!   on a single-threaded runtime, requests of another connection are
//!   answered while it is still in progress (an ordering, not a timing);
//! - a broker process with a low RLIMIT_NOFILE answers a CreateTopics that
//!   runs out of descriptors with an error for that topic, cleans up what it
//!   created, keeps serving, and accepts connections again once a flood of
//!   connections that exhausted its descriptors goes away;
//! - CreatePartitions with an empty (present) assignment list is refused.

mod wire_common;

use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse};
use tokio::net::TcpStream;
use wire_common::*;

#[tokio::test(flavor = "current_thread")]
async fn big_create_topics_does_not_stall_another_connection() {
    const PARTITIONS: i32 = 2000;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start(dir.path(), &[]).await;
    let mut other = broker.connect().await;
    assert_eq!(create_topic(&mut other, "other", 1).await.0, 0);
    assert_eq!(
        produce(&mut other, "other", batch(&[b"x".to_vec()]))
            .await
            .0,
        0
    );

    let mut admin = broker.connect().await;
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(600_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name("wide"))
            .with_num_partitions(PARTITIONS)
            .with_replication_factor(1)]);
    send(&mut admin, ApiKey::CreateTopics, 7, 11, &req).await;
    // The creation has started once its first partition exists. (On this
    // single-threaded runtime, a handler blocking the runtime would run to
    // its end before this task could even look.)
    let first = dir.path().join("wide-0");
    let mut polls = 0;
    while !first.exists() {
        assert!(polls < 60_000, "creation never started");
        tokio::time::sleep(Duration::from_millis(1)).await;
        polls += 1;
    }
    // Another connection is served meanwhile...
    assert_eq!(topic_error(&mut other, "other").await, 0);
    assert_eq!(
        produce(&mut other, "other", batch(&[b"y".to_vec()])).await,
        (0, 1)
    );
    // ...before the CreateTopics response exists.
    assert!(
        !has_pending_bytes(&admin),
        "CreateTopics finished before a request sent after it started was answered"
    );
    let last = dir.path().join(format!("wide-{}", PARTITIONS - 1));
    assert!(
        !last.exists(),
        "creation already complete: the test proves nothing"
    );

    let resp: CreateTopicsResponse = receive(
        &mut admin,
        ApiKey::CreateTopics,
        7,
        11,
        Duration::from_secs(600),
    )
    .await;
    assert_eq!(resp.topics[0].error_code, 0);
    assert_eq!(resp.topics[0].num_partitions, PARTITIONS);
    assert!(last.exists());
    assert_eq!(delete_topic(&mut admin, "wide").await, 0);
    drop((admin, other));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_file_descriptors_fails_one_request_not_the_broker() {
    const LIMIT: u64 = 256;
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let broker = Child::spawn(
        &data,
        data.with_extension("log"),
        ChildOptions {
            // An explicit max.connections is honoured even above half the
            // descriptor limit (the default is capped there): this test
            // wants the accept loop itself to run out of descriptors.
            settings: &["max.connections=100000"],
            open_files: Some(LIMIT),
            ..Default::default()
        },
    );
    let mut c = broker.connect(Duration::from_secs(60)).await;

    let m = broker.metrics().await;
    assert_eq!(metric(&m, "moldau_max_fds"), Some(LIMIT), "{m}");
    assert!(
        metric(&m, "moldau_open_fds").is_some_and(|n| n > 3 && n < LIMIT),
        "{m}"
    );

    assert_eq!(create_topic(&mut c, "fits", 4).await.0, 0);
    // Each partition costs at least 3 descriptors: 200 cannot fit in 256.
    let (code, message) = create_topic(&mut c, "huge", 200).await;
    assert_eq!(code, 56, "KAFKA_STORAGE_ERROR; message {message:?}");
    let message = message.unwrap_or_default();
    assert!(message.contains("file descriptors"), "{message}");
    // … and the broker's log says why, for whoever runs it.
    let log = broker.log();
    assert!(
        log.lines()
            .any(|l| l.contains("cannot create the topic's logs") && l.contains("huge")),
        "{log}"
    );
    // What it created half-way is gone, and it does not exist.
    let huge: Vec<_> = std::fs::read_dir(&data)
        .expect("ls")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("huge-"))
        .collect();
    assert!(huge.is_empty(), "left over: {huge:?}");
    assert_eq!(topic_error(&mut c, "huge").await, 3);
    // The broker goes on serving, this connection and new ones.
    assert_eq!(
        produce(&mut c, "fits", batch(&[b"a".to_vec()])).await,
        (0, 0)
    );
    let mut c2 = broker.connect(Duration::from_secs(30)).await;
    assert_eq!(topic_error(&mut c2, "fits").await, 0);

    // A flood of connections exhausts the descriptors; the accept loop
    // backs off, and serves again once they are gone.
    let mut flood = Vec::new();
    for _ in 0..LIMIT + 100 {
        match TcpStream::connect(broker.kafka).await {
            Ok(s) => flood.push(s),
            Err(_) => break,
        }
    }
    assert!(
        flood.len() as u64 > LIMIT,
        "only {} connections",
        flood.len()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // An existing connection still works while the broker is at its limit.
    assert_eq!(topic_error(&mut c, "fits").await, 0);
    drop(flood);
    let mut c3 = broker.connect(Duration::from_secs(60)).await;
    assert_eq!(delete_topic(&mut c3, "fits").await, 0);
    let mut c4 = broker.connect(Duration::from_secs(30)).await;
    assert_eq!(topic_error(&mut c4, "fits").await, 3);
    assert_eq!(create_topic(&mut c4, "again", 4).await.0, 0);
    let log = broker.log();
    let accept_warnings = log.matches("accept failed").count();
    assert!(
        (1..=20).contains(&accept_warnings),
        "accept errors must be logged, rate-limited ({accept_warnings} lines):\n{log}"
    );
    drop((c, c2, c3, c4));
}

/// CreatePartitions with an assignment list that is present but empty is
/// refused as Kafka's controller refuses it (only an absent list lets the
/// broker place the new partitions); an absent list still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_partitions_refuses_an_empty_assignment_list() {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

    let dir = tempfile::tempdir().expect("tempdir");
    let broker = start(dir.path(), &[]).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, "grown", 1).await.0, 0);
    let grow = |assignments: Option<Vec<_>>| {
        CreatePartitionsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(name("grown"))
                .with_count(3)
                .with_assignments(assignments)])
    };
    let resp: CreatePartitionsResponse =
        call(&mut s, ApiKey::CreatePartitions, 3, &grow(Some(Vec::new()))).await;
    let r = &resp.results[0];
    assert_eq!(r.error_code, 39, "INVALID_REPLICA_ASSIGNMENT: {r:?}");
    assert!(
        r.error_message
            .as_deref()
            .is_some_and(|m| m.contains("add 2 additional partition(s), but only 0 assignment(s)")),
        "{r:?}"
    );
    let resp: CreatePartitionsResponse =
        call(&mut s, ApiKey::CreatePartitions, 3, &grow(None)).await;
    assert_eq!(resp.results[0].error_code, 0, "{:?}", resp.results[0]);
    broker.stop().await;
}
