//! The transaction coordinator's figures on `/metrics` (issue 37, item 6),
//! from a standalone broker process driven over the wire: one committed
//! transaction, one aborted by its client, one fenced by a new producer
//! instance and one left open past its `transaction.timeout.ms` show as
//! exactly one of each in `moldau_transactions_ended_total`, and
//! `moldau_transactions{state="Ongoing"}` rises to 1 while one is open and
//! falls back to 0 once it ends.

mod wire_common;

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse,
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use moldau_broker::storage::batch::BatchBuilder;
use tokio::net::TcpStream;
use wire_common::*;

const TOPIC: &str = "orders";

fn tid(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

/// InitProducerId for `id`: (error, producer id, epoch).
async fn init(s: &mut TcpStream, id: &str, timeout_ms: i32) -> (i16, i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(tid(id)))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r: InitProducerIdResponse = call(s, ApiKey::InitProducerId, 4, &req).await;
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

async fn add_partition(s: &mut TcpStream, id: &str, pid: i64, epoch: i16) -> i16 {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(tid(id))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(name(TOPIC))
            .with_partitions(vec![0])]);
    let r: AddPartitionsToTxnResponse = call(s, ApiKey::AddPartitionsToTxn, 3, &req).await;
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

async fn produce_txn(s: &mut TcpStream, id: &str, pid: i64, epoch: i16) -> i16 {
    let records: Bytes = BatchBuilder::new()
        .producer(pid, epoch, 0)
        .transactional()
        .record(None, Some(Bytes::from_static(b"v")), 1_700_000_000_000)
        .encode()
        .expect("batch")
        .into();
    let req = ProduceRequest::default()
        .with_transactional_id(Some(tid(id)))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(TOPIC))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let r: ProduceResponse = call(s, ApiKey::Produce, 9, &req).await;
    r.responses[0].partition_responses[0].error_code
}

async fn end(s: &mut TcpStream, id: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    let req = EndTxnRequest::default()
        .with_transactional_id(tid(id))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r: EndTxnResponse = call(s, ApiKey::EndTxn, 3, &req).await;
    r.error_code
}

/// The figures this test reads off one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Figures {
    ongoing: Option<u64>,
    committed: Option<u64>,
    aborted_by_client: Option<u64>,
    aborted_on_timeout: Option<u64>,
    aborted_by_fence: Option<u64>,
    markers_pending: Option<u64>,
    lso_lag: Option<u64>,
}

impl Figures {
    fn of(page: &str) -> Figures {
        let ended = |result: &str, reason: &str| {
            metric(
                page,
                &format!(
                    "moldau_transactions_ended_total{{result=\"{result}\",reason=\"{reason}\"}}"
                ),
            )
        };
        Figures {
            ongoing: metric(page, "moldau_transactions{state=\"Ongoing\"}"),
            committed: ended("commit", "client"),
            aborted_by_client: ended("abort", "client"),
            aborted_on_timeout: ended("abort", "timeout"),
            aborted_by_fence: ended("abort", "fenced"),
            markers_pending: metric(page, "moldau_transaction_markers_pending"),
            lso_lag: metric(
                page,
                &format!("moldau_partition_lso_lag{{topic=\"{TOPIC}\",partition=\"0\"}}"),
            ),
        }
    }

    /// Every transaction ended and its markers written: nothing open.
    fn settled(ended: [u64; 4]) -> Figures {
        Figures {
            ongoing: Some(0),
            committed: Some(ended[0]),
            aborted_by_client: Some(ended[1]),
            aborted_on_timeout: Some(ended[2]),
            aborted_by_fence: Some(ended[3]),
            markers_pending: Some(0),
            lso_lag: Some(0),
        }
    }
}

/// Scrapes until the page shows `want` (markers go out in the
/// background), failing with the last figures after `within`.
async fn wait_for(b: &Child, want: Figures, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let got = Figures::of(&b.metrics().await);
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "metrics still {got:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_ended_by_reason_and_open_ones_on_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Child::spawn(
        &dir.path().join("data"),
        dir.path().join("broker.log"),
        ChildOptions {
            settings: &[
                "transaction.state.log.num.partitions=3",
                "transaction.abort.timed.out.transaction.cleanup.interval.ms=100",
            ],
            ..ChildOptions::default()
        },
    );
    let mut s = b.connect(Duration::from_secs(60)).await;
    assert_eq!(create_topic(&mut s, TOPIC, 1).await.0, 0);
    let long = Duration::from_secs(30);

    // before any transaction: every family is there, at 0
    wait_for(&b, Figures::settled([0, 0, 0, 0]), long).await;

    // committed by its client
    let (code, pid, epoch) = init(&mut s, "committer", 60_000).await;
    assert_eq!(code, 0);
    assert_eq!(add_partition(&mut s, "committer", pid, epoch).await, 0);
    let open = Figures::of(&b.metrics().await);
    assert_eq!(open.ongoing, Some(1), "one transaction open: {open:?}");
    assert_eq!(open.committed, Some(0));
    assert_eq!(end(&mut s, "committer", pid, epoch, true).await, 0);
    wait_for(&b, Figures::settled([1, 0, 0, 0]), long).await;

    // aborted by its client
    let (code, pid, epoch) = init(&mut s, "aborter", 60_000).await;
    assert_eq!(code, 0);
    assert_eq!(add_partition(&mut s, "aborter", pid, epoch).await, 0);
    assert_eq!(Figures::of(&b.metrics().await).ongoing, Some(1));
    assert_eq!(end(&mut s, "aborter", pid, epoch, false).await, 0);
    wait_for(&b, Figures::settled([1, 1, 0, 0]), long).await;

    // fenced: a new instance's InitProducerId finds it ongoing and aborts it
    let (code, pid, epoch) = init(&mut s, "zombie", 60_000).await;
    assert_eq!(code, 0);
    assert_eq!(add_partition(&mut s, "zombie", pid, epoch).await, 0);
    assert_eq!(Figures::of(&b.metrics().await).ongoing, Some(1));
    assert_eq!(
        init(&mut s, "zombie", 60_000).await.0,
        ResponseError::ConcurrentTransactions.code(),
        "the fence answers retry while its abort completes"
    );
    wait_for(&b, Figures::settled([1, 1, 0, 1]), long).await;
    let (code, ..) = init(&mut s, "zombie", 60_000).await;
    assert_eq!(
        code, 0,
        "the new instance gets its epoch once the abort is done"
    );

    // left open past its 5 s timeout, with a record held back from
    // read_committed consumers until the coordinator aborts it
    let (code, pid, epoch) = init(&mut s, "sleeper", 5_000).await;
    assert_eq!(code, 0);
    assert_eq!(add_partition(&mut s, "sleeper", pid, epoch).await, 0);
    assert_eq!(produce_txn(&mut s, "sleeper", pid, epoch).await, 0);
    let open = Figures::of(&b.metrics().await);
    assert_eq!(open.ongoing, Some(1), "open until its timeout: {open:?}");
    assert_eq!(open.lso_lag, Some(1), "its record is not stable yet");
    assert_eq!(open.aborted_on_timeout, Some(0));
    wait_for(&b, Figures::settled([1, 1, 1, 1]), long).await;
    assert_eq!(
        end(&mut s, "sleeper", pid, epoch, true).await,
        ResponseError::ProducerFenced.code(),
        "the timeout fenced its producer"
    );
    // nothing more ends with the refused commit, and a later scrape still
    // shows the same counts (the mirror does not count twice)
    let page = b.metrics().await;
    assert_eq!(Figures::of(&page), Figures::settled([1, 1, 1, 1]));
    // the transaction lines of the page (what the README shows)
    for line in page.lines().filter(|l| l.starts_with("moldau_transaction")) {
        eprintln!("{line}");
    }

    drop(s);
    let status = b.stop(libc::SIGTERM, long).await;
    assert!(status.success(), "broker exit: {status:?}\n{}", b.log());
}
