//! Fetch sessions (KIP-227) on the wire, against an in-process broker on
//! 127.0.0.1: a full fetch gets a session id; incremental fetches carry
//! only the partitions with news and long-poll over the whole session;
//! wrong epochs and unknown ids get their top-level errors; forgotten
//! partitions stop being fetched; a closed session is gone; and with one
//! cache slot a second client's session is refused while the first is
//! fresh, and evicts it once it is stale.

mod wire_common;

use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse,
};
use tokio::net::TcpStream;
use wire_common::*;

const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
const T: &str = "sessions";

async fn produce_to(s: &mut TcpStream, topic: &str, partition: i32, value: &str) {
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch(&[value.as_bytes().to_vec()])))])]);
    let resp: ProduceResponse = call(s, ApiKey::Produce, 9, &req).await;
    assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
}

fn request(
    session_id: i32,
    epoch: i32,
    partitions: &[(i32, i64)],
    forgotten: &[i32],
    max_wait_ms: i32,
) -> FetchRequest {
    let topics = if partitions.is_empty() {
        vec![]
    } else {
        vec![FetchTopic::default().with_topic(name(T)).with_partitions(
            partitions
                .iter()
                .map(|&(p, offset)| {
                    FetchPartition::default()
                        .with_partition(p)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20)
                })
                .collect(),
        )]
    };
    let forgotten = if forgotten.is_empty() {
        vec![]
    } else {
        vec![ForgottenTopic::default()
            .with_topic(name(T))
            .with_partitions(forgotten.to_vec())]
    };
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(if max_wait_ms > 0 { 1 } else { 0 })
        .with_max_bytes(4 << 20)
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(topics)
        .with_forgotten_topics_data(forgotten)
}

async fn fetch(s: &mut TcpStream, req: &FetchRequest) -> FetchResponse {
    call(s, ApiKey::Fetch, 12, req).await
}

/// `(partition, records bytes, high watermark)` of each partition answered.
fn answered(resp: &FetchResponse) -> Vec<(i32, usize, i64)> {
    let mut out: Vec<(i32, usize, i64)> = resp
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| {
            assert_eq!(p.error_code, 0, "partition {}", p.partition_index);
            (
                p.partition_index,
                p.records.as_ref().map_or(0, |r| r.len()),
                p.high_watermark,
            )
        })
        .collect();
    out.sort();
    out
}

fn partitions(resp: &FetchResponse) -> Vec<i32> {
    answered(resp).into_iter().map(|(p, _, _)| p).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_session_full_incremental_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, T, 3).await.0, 0);
    produce_to(&mut s, T, 0, "a0").await;
    produce_to(&mut s, T, 0, "a1").await;
    produce_to(&mut s, T, 1, "b0").await;

    // full fetch: a session, every partition answered
    let full = fetch(&mut s, &request(0, 0, &[(0, 0), (1, 0), (2, 0)], &[], 0)).await;
    assert_eq!(full.error_code, 0);
    let id = full.session_id;
    assert_ne!(id, 0, "a full fetch with epoch 0 creates a session");
    let got = answered(&full);
    assert_eq!(got.iter().map(|p| p.0).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(got[0].1 > 0 && got[1].1 > 0 && got[2].1 == 0);

    // epoch 1: the client moved on; nothing new, nothing answered
    let inc = fetch(&mut s, &request(id, 1, &[(0, 2), (1, 1)], &[], 0)).await;
    assert_eq!((inc.error_code, inc.session_id), (0, id));
    assert_eq!(answered(&inc), vec![]);

    // new data on partition 2 only (the session holds its offset 0)
    produce_to(&mut s, T, 2, "c0").await;
    let inc = fetch(&mut s, &request(id, 2, &[], &[], 0)).await;
    let got = answered(&inc);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].0, got[0].2), (2, 1));
    assert!(got[0].1 > 0);

    // a replayed epoch, and an unknown session
    let wrong = fetch(&mut s, &request(id, 2, &[], &[], 0)).await;
    assert_eq!(wrong.error_code, INVALID_FETCH_SESSION_EPOCH);
    assert!(wrong.responses.is_empty());
    let unknown_id = if id == i32::MAX { 1 } else { id + 1 };
    let unknown = fetch(&mut s, &request(unknown_id, 1, &[], &[], 0)).await;
    assert_eq!(unknown.error_code, FETCH_SESSION_ID_NOT_FOUND);

    // the session survived the wrong epoch; partition 0 is forgotten
    let inc = fetch(&mut s, &request(id, 3, &[(2, 1)], &[0], 0)).await;
    assert_eq!((inc.error_code, answered(&inc)), (0, vec![]));
    produce_to(&mut s, T, 0, "a2").await;
    produce_to(&mut s, T, 1, "b1").await;
    let inc = fetch(&mut s, &request(id, 4, &[], &[], 0)).await;
    assert_eq!(partitions(&inc), vec![1], "partition 0 was forgotten");
    // partition 1 moved on to 2: nothing new, nothing answered
    let inc = fetch(&mut s, &request(id, 5, &[(1, 2)], &[], 0)).await;
    assert_eq!(partitions(&inc), Vec::<i32>::new());

    // long poll over the session's partitions: records to partition 2
    // arrive while the incremental fetch waits
    let mut other = broker.connect().await;
    let producer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        produce_to(&mut other, T, 2, "c1").await;
    });
    let started = Instant::now();
    let inc = fetch(&mut s, &request(id, 6, &[], &[], 10_000)).await;
    producer.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(8));
    let got = answered(&inc);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 2);
    assert!(got[0].1 > 0);

    let m = metrics_page(broker.addrs.http).await;
    assert_eq!(metric(&m, "moldau_fetch_sessions"), Some(1));
    assert_eq!(
        metric(&m, "moldau_fetch_session_requests_total{kind=\"full\"}"),
        Some(1)
    );
    assert_eq!(
        metric(
            &m,
            "moldau_fetch_session_requests_total{kind=\"incremental\"}"
        ),
        Some(6)
    );
    for error in ["fetch_session_id_not_found", "invalid_fetch_session_epoch"] {
        let name = format!("moldau_fetch_session_errors_total{{error=\"{error}\"}}");
        assert_eq!(metric(&m, &name), Some(1), "{name}");
    }

    // closing: a full fetch without session, then the id is unknown
    let closed = fetch(&mut s, &request(id, -1, &[(1, 0)], &[], 0)).await;
    assert_eq!((closed.error_code, closed.session_id), (0, 0));
    assert_eq!(partitions(&closed), vec![1]);
    let gone = fetch(&mut s, &request(id, 7, &[], &[], 0)).await;
    assert_eq!(gone.error_code, FETCH_SESSION_ID_NOT_FOUND);
    // epoch -1 without a session creates none
    let sessionless = fetch(&mut s, &request(0, -1, &[(1, 0)], &[], 0)).await;
    assert_eq!(sessionless.session_id, 0);
    let m = metrics_page(broker.addrs.http).await;
    assert_eq!(metric(&m, "moldau_fetch_sessions"), Some(0));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_session_one_slot_refuses_fresh_and_evicts_stale() {
    // a fresh session keeps its slot against an equal-sized newcomer
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &["--set", "max.incremental.fetch.session.cache.slots=1"],
    )
    .await;
    let (mut a, mut b) = (broker.connect().await, broker.connect().await);
    assert_eq!(create_topic(&mut a, T, 2).await.0, 0);
    let first = fetch(&mut a, &request(0, 0, &[(0, 0), (1, 0)], &[], 0)).await;
    assert_ne!(first.session_id, 0);
    let second = fetch(&mut b, &request(0, 0, &[(0, 0), (1, 0)], &[], 0)).await;
    assert_eq!((second.error_code, second.session_id), (0, 0));
    assert_eq!(partitions(&second), vec![0, 1]);
    let inc = fetch(&mut a, &request(first.session_id, 1, &[], &[], 0)).await;
    assert_eq!(inc.error_code, 0);
    let m = metrics_page(broker.addrs.http).await;
    assert_eq!(metric(&m, "moldau_fetch_session_evictions_total"), Some(0));
    broker.stop().await;

    // with a short min.incremental.fetch.session.eviction.ms, an idle
    // session is evicted by the next client's
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &[
            "--set",
            "max.incremental.fetch.session.cache.slots=1",
            "--set",
            "min.incremental.fetch.session.eviction.ms=200",
        ],
    )
    .await;
    let (mut a, mut b) = (broker.connect().await, broker.connect().await);
    assert_eq!(create_topic(&mut a, T, 2).await.0, 0);
    let first = fetch(&mut a, &request(0, 0, &[(0, 0), (1, 0)], &[], 0)).await;
    assert_ne!(first.session_id, 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = fetch(&mut b, &request(0, 0, &[(0, 0), (1, 0)], &[], 0)).await;
    assert_ne!(second.session_id, 0);
    assert_ne!(second.session_id, first.session_id);
    let evicted = fetch(&mut a, &request(first.session_id, 1, &[], &[], 0)).await;
    assert_eq!(evicted.error_code, FETCH_SESSION_ID_NOT_FOUND);
    let kept = fetch(&mut b, &request(second.session_id, 1, &[], &[], 0)).await;
    assert_eq!(kept.error_code, 0);
    let m = metrics_page(broker.addrs.http).await;
    assert_eq!(metric(&m, "moldau_fetch_session_evictions_total"), Some(1));
    assert_eq!(metric(&m, "moldau_fetch_sessions"), Some(1));
    broker.stop().await;
}
