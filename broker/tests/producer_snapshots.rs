//! Producer state snapshots on a real broker process: an idempotent
//! producer writes to several partitions; after SIGTERM the restarted
//! broker reads no segment data to rebuild the producer state (a retried
//! batch is still a duplicate, a gap still OUT_OF_ORDER_SEQUENCE_NUMBER);
//! after kill -9 it reads only what follows the last snapshot at or below
//! the recovery point, not the whole log, and still deduplicates.

mod wire_common;

use std::path::Path;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProduceRequest, ProduceResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use tokio::net::TcpStream;
use wire_common::*;

const TOPIC: &str = "snap";
const PARTITIONS: i32 = 3;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;

async fn produce_to(
    s: &mut TcpStream,
    partition: i32,
    pid: i64,
    epoch: i16,
    seq: i32,
    n: usize,
) -> (i16, i64) {
    let values: Vec<Vec<u8>> = (0..n).map(|i| vec![b'a' + i as u8; 200]).collect();
    let records = batch_from(&values, pid, epoch, seq, Compression::None);
    let req = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(TOPIC))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    let resp: ProduceResponse = call(s, ApiKey::Produce, 9, &req).await;
    let p = &resp.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// Per partition: the next sequence and the base offset of the last batch.
type Progress = Vec<(i32, i64)>;

/// `rounds` batches of 2 records to every partition.
async fn write(s: &mut TcpStream, pid: i64, epoch: i16, progress: &mut Progress, rounds: usize) {
    for _ in 0..rounds {
        for (p, (seq, last)) in progress.iter_mut().enumerate() {
            let (code, base) = produce_to(s, p as i32, pid, epoch, *seq, 2).await;
            assert_eq!(code, 0, "partition {p} sequence {seq}");
            *seq += 2;
            *last = base;
        }
    }
}

/// A retry of each partition's last batch is a duplicate (its first
/// offset, no second copy), a gap is refused, the next sequence appends
/// right after the last batch.
async fn assert_deduplicates(s: &mut TcpStream, pid: i64, epoch: i16, progress: &mut Progress) {
    for (p, (seq, last)) in progress.iter_mut().enumerate() {
        let p = p as i32;
        assert_eq!(
            produce_to(s, p, pid, epoch, *seq - 2, 2).await,
            (0, *last),
            "a retry on partition {p}"
        );
        assert_eq!(
            produce_to(s, p, pid, epoch, *seq + 1, 1).await.0,
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            "a gap on partition {p}"
        );
        let (code, base) = produce_to(s, p, pid, epoch, *seq, 1).await;
        assert_eq!(code, 0);
        assert_eq!(base, *last + 2, "the retry left no copy on partition {p}");
        *seq += 1;
        *last = base;
    }
}

/// Bytes of every segment of the data directory.
fn log_bytes(data: &Path) -> u64 {
    let mut total = 0;
    for dir in std::fs::read_dir(data).expect("data dir") {
        let dir = dir.expect("entry").path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).expect("partition dir") {
            let f = f.expect("entry").path();
            if f.extension().is_some_and(|e| e == "log") {
                total += f.metadata().expect("meta").len();
            }
        }
    }
    total
}

fn spawn(data: &Path, n: usize) -> Child {
    Child::spawn(
        data,
        data.with_extension(format!("{n}.log")),
        ChildOptions {
            settings: &["num.recovery.threads.per.data.dir=3"],
            ..Default::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_state_comes_back_from_snapshots_after_clean_and_unclean_stops() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let mut broker = spawn(&data, 1);
    let mut s = broker.connect(Duration::from_secs(120)).await;
    let create = CreateTopicsRequest::default()
        .with_timeout_ms(60_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(TOPIC))
            .with_num_partitions(PARTITIONS)
            .with_replication_factor(1)
            .with_configs(vec![CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str("internal.segment.bytes"))
                .with_value(Some(StrBytes::from_static_str("4096")))])]);
    let created: CreateTopicsResponse = call(&mut s, ApiKey::CreateTopics, 7, &create).await;
    assert_eq!(created.topics[0].error_code, 0, "{:?}", created.topics[0]);
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
    let mut progress: Progress = vec![(0, -1); PARTITIONS as usize];
    write(&mut s, pid, epoch, &mut progress, 30).await;
    drop(s);
    assert!(broker
        .stop(libc::SIGTERM, Duration::from_secs(60))
        .await
        .success());

    // Clean stop: the producer state comes from the snapshots at the log
    // ends; not a byte of segment data is read.
    let mut broker = spawn(&data, 2);
    let mut s = broker.connect(Duration::from_secs(120)).await;
    let m = broker.metrics().await;
    assert_eq!(
        metric(&m, "moldau_log_recovery_bytes_read_total"),
        Some(0),
        "{m}"
    );
    assert!(
        metric(&m, "moldau_log_producer_snapshots_loaded_total").is_some_and(|n| n >= 3),
        "{m}"
    );
    assert_eq!(
        metric(&m, "moldau_log_recovery_unclean_partitions"),
        Some(0)
    );
    assert_deduplicates(&mut s, pid, epoch, &mut progress).await;
    write(&mut s, pid, epoch, &mut progress, 30).await;
    drop(s);
    broker.stop(libc::SIGKILL, Duration::from_secs(60)).await;

    // kill -9: recovery re-validates from the recovery point (the clean
    // stop's log end) and replays producer state from the snapshot there:
    // some bytes, not the whole log.
    let whole = log_bytes(&data);
    let broker = spawn(&data, 3);
    let mut s = broker.connect(Duration::from_secs(120)).await;
    let m = broker.metrics().await;
    let read = metric(&m, "moldau_log_recovery_bytes_read_total").expect("metric");
    eprintln!("after kill -9 the start read {read} of {whole} bytes of segments");
    assert!(read > 0 && read < whole, "read {read} of {whole}; {m}");
    assert!(
        metric(&m, "moldau_log_recovery_unclean_partitions").is_some_and(|n| n >= 3),
        "{m}"
    );
    assert!(
        metric(&m, "moldau_log_producer_snapshots_loaded_total").is_some_and(|n| n >= 3),
        "{m}"
    );
    assert_deduplicates(&mut s, pid, epoch, &mut progress).await;
}
