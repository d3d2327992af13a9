//! The transaction coordinator over the real wire (issue 37): a standalone
//! broker finds itself coordinator of a transactional id, hands out its
//! producer id and epoch, takes AddPartitionsToTxn, transactional produce
//! and EndTxn, writes the COMMIT/ABORT markers on the partitions (so a
//! read_committed fetch sees committed data and skips aborted data),
//! shows its transactions in DescribeTransactions and ListTransactions,
//! fences a zombie producer when a new instance initialises, reloads
//! `__transaction_state` when it restarts, and aborts (and fences) a
//! transaction left open past its timeout.

mod wire_common;

use bytes::{Buf, Bytes};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ApiVersionsRequest,
    ApiVersionsResponse, DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest,
    EndTxnResponse, FetchRequest, FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    InitProducerIdRequest, InitProducerIdResponse, ListTransactionsRequest,
    ListTransactionsResponse, ProduceRequest, ProduceResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use moldau_broker::storage::batch::BatchBuilder;
use tokio::net::TcpStream;
use wire_common::*;

const TOPIC: &str = "orders";
const TXN: &str = "app-1";
const ARGS: &[&str] = &["--set", "transaction.state.log.num.partitions=3"];

fn tid(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

async fn init(s: &mut TcpStream) -> (i16, i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(tid(TXN)))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r: InitProducerIdResponse = call(s, ApiKey::InitProducerId, 4, &req).await;
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

async fn add_partition(s: &mut TcpStream, pid: i64, epoch: i16) -> i16 {
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(tid(TXN))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(name(TOPIC))
            .with_partitions(vec![0])]);
    let r: AddPartitionsToTxnResponse = call(s, ApiKey::AddPartitionsToTxn, 3, &req).await;
    r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
}

/// AddPartitionsToTxn v4 (a broker's batch), verify-only for TOPIC-0.
async fn verify(s: &mut TcpStream, pid: i64, epoch: i16) -> i16 {
    let req = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(tid(TXN))
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch)
            .with_verify_only(true)
            .with_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(name(TOPIC))
                .with_partitions(vec![0])]),
    ]);
    let r: AddPartitionsToTxnResponse = call(s, ApiKey::AddPartitionsToTxn, 4, &req).await;
    assert_eq!(r.error_code, 0);
    let t = &r.results_by_transaction[0];
    assert_eq!(t.transactional_id.0.as_str(), TXN);
    t.topic_results[0].results_by_partition[0].partition_error_code
}

async fn produce_txn(s: &mut TcpStream, pid: i64, epoch: i16, seq: i32, value: &str) -> i16 {
    produce_txn_at(s, 9, pid, epoch, seq, value).await
}

/// A transactional produce of one record at Produce `version` (v12+: a
/// transaction version 2 client's, which adds the partition itself).
async fn produce_txn_at(
    s: &mut TcpStream,
    version: i16,
    pid: i64,
    epoch: i16,
    seq: i32,
    value: &str,
) -> i16 {
    let records: Bytes = BatchBuilder::new()
        .producer(pid, epoch, seq)
        .transactional()
        .record(
            Some(Bytes::from_static(b"k")),
            Some(Bytes::from(value.to_string())),
            1_700_000_000_000,
        )
        .encode()
        .expect("batch")
        .into();
    let req = ProduceRequest::default()
        .with_transactional_id(Some(tid(TXN)))
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(TOPIC))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    let r: ProduceResponse = call(s, ApiKey::Produce, version, &req).await;
    r.responses[0].partition_responses[0].error_code
}

async fn end(s: &mut TcpStream, pid: i64, epoch: i16, commit: bool) -> i16 {
    end_at(s, 3, pid, epoch, commit).await.0
}

/// EndTxn at `version`: (error, producer id, epoch) — v5+ (transaction
/// version 2) answers the bumped epoch.
async fn end_at(
    s: &mut TcpStream,
    version: i16,
    pid: i64,
    epoch: i16,
    commit: bool,
) -> (i16, i64, i16) {
    let req = EndTxnRequest::default()
        .with_transactional_id(tid(TXN))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r: EndTxnResponse = call(s, ApiKey::EndTxn, version, &req).await;
    (r.error_code, r.producer_id.0, r.producer_epoch)
}

/// Retries a transaction version 2 produce while the previous end is
/// still completing (CONCURRENT_TRANSACTIONS, told as NOT_ENOUGH_REPLICAS).
async fn produce_txn_v2(s: &mut TcpStream, pid: i64, epoch: i16, seq: i32, value: &str) -> i16 {
    for _ in 0..100 {
        let code = produce_txn_at(s, 12, pid, epoch, seq, value).await;
        if code != ResponseError::NotEnoughReplicas.code() {
            return code;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the previous transaction never completed");
}

/// (error, state, producer id, epoch, partitions of TOPIC)
async fn describe(s: &mut TcpStream) -> (i16, String, i64, i16, Vec<i32>) {
    let req = DescribeTransactionsRequest::default().with_transactional_ids(vec![tid(TXN)]);
    let r: DescribeTransactionsResponse = call(s, ApiKey::DescribeTransactions, 0, &req).await;
    let t = &r.transaction_states[0];
    let parts = t
        .topics
        .iter()
        .filter(|t| t.topic.0.as_str() == TOPIC)
        .flat_map(|t| t.partitions.clone())
        .collect();
    (
        t.error_code,
        t.transaction_state.as_str().to_string(),
        t.producer_id.0,
        t.producer_epoch,
        parts,
    )
}

/// The values a read_committed fetch returns (control records left out).
async fn read_committed(s: &mut TcpStream) -> Vec<String> {
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(TOPIC))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = call(s, ApiKey::Fetch, 12, &req).await;
    let p = &resp.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    let aborted: Vec<(i64, i64)> = p
        .aborted_transactions
        .iter()
        .flatten()
        .map(|a| (a.producer_id.0, a.first_offset))
        .collect();
    let mut out = Vec::new();
    let mut records = p.records.clone().unwrap_or_default();
    while records.has_remaining() {
        let set = RecordBatchDecoder::decode(&mut records).expect("decode");
        for r in set.records {
            let skipped = r.control
                || aborted
                    .iter()
                    .any(|(pid, first)| *pid == r.producer_id && r.offset >= *first);
            if !skipped {
                out.push(String::from_utf8_lossy(&r.value.unwrap_or_default()).to_string());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_abort_fencing_and_reload_over_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), ARGS).await;
    let mut s = broker.connect().await;
    let (code, _) = create_topic(&mut s, TOPIC, 1).await;
    assert_eq!(code, 0);

    // FindCoordinator for a transactional id (batched v4 form): this broker
    let req = FindCoordinatorRequest::default()
        .with_key_type(1)
        .with_coordinator_keys(vec![StrBytes::from_static_str(TXN)]);
    let r: FindCoordinatorResponse = call(&mut s, ApiKey::FindCoordinator, 4, &req).await;
    assert_eq!(r.coordinators[0].error_code, 0);
    assert_eq!(r.coordinators[0].port, broker.addrs.kafka.port() as i32);

    let (code, pid, epoch) = init(&mut s).await;
    assert_eq!(code, 0);
    assert!(pid >= 0);
    assert_eq!(epoch, 0);

    // clients cannot write the coordinator's topic
    let (code, _) = produce(&mut s, "__transaction_state", batch(&[b"x".to_vec()])).await;
    assert_eq!(code, ResponseError::InvalidTopicException.code());

    // a partition leader's verification (v4, verify-only): not yet added
    assert_eq!(
        verify(&mut s, pid, epoch).await,
        ResponseError::TransactionAbortable.code()
    );

    // commit
    assert_eq!(add_partition(&mut s, pid, epoch).await, 0);
    assert_eq!(verify(&mut s, pid, epoch).await, 0, "added: verified");
    assert_eq!(produce_txn(&mut s, pid, epoch, 0, "committed").await, 0);
    let (code, state, dpid, depoch, parts) = describe(&mut s).await;
    assert_eq!((code, state.as_str(), dpid, depoch), (0, "Ongoing", pid, 0));
    assert_eq!(parts, vec![0]);
    let r: ListTransactionsResponse = call(
        &mut s,
        ApiKey::ListTransactions,
        0,
        &ListTransactionsRequest::default()
            .with_state_filters(vec![StrBytes::from_static_str("Ongoing")]),
    )
    .await;
    assert_eq!(r.transaction_states.len(), 1);
    assert_eq!(r.transaction_states[0].transactional_id.0.as_str(), TXN);
    // v2: a pattern the whole id must match (KIP-1152)
    for (pattern, found) in [("app-[0-9]", 1), ("app", 0), ("", 1)] {
        let r: ListTransactionsResponse = call(
            &mut s,
            ApiKey::ListTransactions,
            2,
            &ListTransactionsRequest::default()
                .with_transactional_id_pattern(Some(StrBytes::from_static_str(pattern))),
        )
        .await;
        assert_eq!(
            (r.error_code, r.transaction_states.len()),
            (0, found),
            "{pattern:?}"
        );
    }
    let r: ListTransactionsResponse = call(
        &mut s,
        ApiKey::ListTransactions,
        2,
        &ListTransactionsRequest::default()
            .with_transactional_id_pattern(Some(StrBytes::from_static_str("app-("))),
    )
    .await;
    assert_eq!(r.error_code, ResponseError::InvalidRegularExpression.code());
    assert!(
        read_committed(&mut s).await.is_empty(),
        "open: nothing stable yet"
    );
    assert_eq!(end(&mut s, pid, epoch, true).await, 0);
    let (_, state, ..) = describe(&mut s).await;
    assert_eq!(state, "CompleteCommit");
    assert_eq!(read_committed(&mut s).await, vec!["committed".to_string()]);

    // a new instance fences the old one
    let (code, pid2, epoch2) = init(&mut s).await;
    assert_eq!(code, 0);
    assert_eq!((pid2, epoch2), (pid, 1));
    assert_eq!(
        add_partition(&mut s, pid, epoch).await,
        ResponseError::ProducerFenced.code()
    );
    assert_eq!(
        end(&mut s, pid, epoch, true).await,
        ResponseError::ProducerFenced.code()
    );

    // abort
    assert_eq!(add_partition(&mut s, pid2, epoch2).await, 0);
    assert_eq!(produce_txn(&mut s, pid2, epoch2, 0, "aborted").await, 0);
    assert_eq!(end(&mut s, pid2, epoch2, false).await, 0);
    let (_, state, ..) = describe(&mut s).await;
    assert_eq!(state, "CompleteAbort");
    assert_eq!(read_committed(&mut s).await, vec!["committed".to_string()]);

    drop(s);
    broker.stop().await;

    // a restart reloads __transaction_state
    let broker = start(dir.path(), ARGS).await;
    let mut s = broker.connect().await;
    let (code, state, dpid, depoch, _) = describe(&mut s).await;
    assert_eq!(
        (code, state.as_str(), dpid, depoch),
        (0, "CompleteAbort", pid, 1)
    );
    assert_eq!(read_committed(&mut s).await, vec!["committed".to_string()]);
    let (code, _, epoch3) = init(&mut s).await;
    assert_eq!((code, epoch3), (0, 2));
    drop(s);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &[
            "--set",
            "transaction.state.log.num.partitions=3",
            "--set",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=100",
        ],
    )
    .await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, TOPIC, 1).await.0, 0);
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(tid(TXN)))
        .with_transaction_timeout_ms(500)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r: InitProducerIdResponse = call(&mut s, ApiKey::InitProducerId, 4, &req).await;
    assert_eq!(r.error_code, 0);
    let (pid, epoch) = (r.producer_id.0, r.producer_epoch);
    assert_eq!(add_partition(&mut s, pid, epoch).await, 0);
    assert_eq!(produce_txn(&mut s, pid, epoch, 0, "late").await, 0);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, state, _, e, _) = describe(&mut s).await;
        if state == "CompleteAbort" {
            assert_eq!(e, epoch + 1, "the abort bumps the epoch");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {state}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(read_committed(&mut s).await.is_empty());
    assert_eq!(
        end(&mut s, pid, epoch, true).await,
        ResponseError::ProducerFenced.code()
    );
    drop(s);
    broker.stop().await;
}

/// KIP-890 part 1: a partition leader takes a transaction's first batch
/// only once the coordinator confirms the partition is in it, so no
/// batch can open a transaction there that nobody will end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_produce_needs_its_partition_in_the_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), ARGS).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, TOPIC, 1).await.0, 0);
    let (code, pid, epoch) = init(&mut s).await;
    assert_eq!(code, 0);

    // never added: refused, and nothing opened on the partition
    assert_eq!(
        produce_txn(&mut s, pid, epoch, 0, "unadded").await,
        ResponseError::InvalidTxnState.code()
    );
    // transactional records without the request's transactional id
    let records: Bytes = BatchBuilder::new()
        .producer(pid, epoch, 0)
        .transactional()
        .record(
            None,
            Some(Bytes::from_static(b"anonymous")),
            1_700_000_000_000,
        )
        .encode()
        .expect("batch")
        .into();
    assert_eq!(
        produce(&mut s, TOPIC, records).await.0,
        ResponseError::TransactionalIdAuthorizationFailed.code()
    );

    assert_eq!(add_partition(&mut s, pid, epoch).await, 0);
    assert_eq!(produce_txn(&mut s, pid, epoch, 0, "first").await, 0);
    assert_eq!(produce_txn(&mut s, pid, epoch, 1, "second").await, 0);
    assert_eq!(end(&mut s, pid, epoch, true).await, 0);

    // the next transaction has not added the partition yet: a late batch
    // of the ended one (or a buggy client) cannot open a hanging one
    assert_eq!(
        produce_txn(&mut s, pid, epoch, 2, "after the end").await,
        ResponseError::InvalidTxnState.code()
    );
    assert_eq!(add_partition(&mut s, pid, epoch).await, 0);
    assert_eq!(produce_txn(&mut s, pid, epoch, 2, "aborted").await, 0);
    assert_eq!(end(&mut s, pid, epoch, false).await, 0);
    assert_eq!(
        read_committed(&mut s).await,
        vec!["first".to_string(), "second".to_string()]
    );

    // a fenced producer's first batch is told INVALID_PRODUCER_EPOCH
    let (_, pid2, epoch2) = init(&mut s).await;
    assert_eq!((pid2, epoch2), (pid, epoch + 1));
    assert_eq!(
        produce_txn(&mut s, pid, epoch, 3, "zombie").await,
        ResponseError::InvalidProducerEpoch.code()
    );
    drop(s);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_version_2_adds_partitions_with_the_produce_and_bumps_the_epoch_at_each_end() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), ARGS).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, TOPIC, 1).await.0, 0);

    // the feature is finalized at level 2, with an epoch clients act on
    let r: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("test"))
            .with_client_software_version(StrBytes::from_static_str("1")),
    )
    .await;
    let tv = r
        .finalized_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .expect("transaction.version finalized");
    assert_eq!((tv.min_version_level, tv.max_version_level), (2, 2));
    assert!(r.finalized_features_epoch >= 0);

    let (code, pid, e0) = init(&mut s).await;
    assert_eq!(code, 0);
    // Produce v12 adds the partition: no AddPartitionsToTxn
    assert_eq!(produce_txn_at(&mut s, 12, pid, e0, 0, "one").await, 0);
    let (_, state, _, _, parts) = describe(&mut s).await;
    assert_eq!((state.as_str(), parts), ("Ongoing", vec![0]));
    assert_eq!(produce_txn_at(&mut s, 12, pid, e0, 1, "two").await, 0);
    let (code, rpid, e1) = end_at(&mut s, 5, pid, e0, true).await;
    assert_eq!(
        (code, rpid, e1),
        (0, pid, e0 + 1),
        "the end bumps the epoch"
    );
    // a retry of that commit (the old epoch) is recognised
    assert_eq!(end_at(&mut s, 5, pid, e0, true).await, (0, pid, e1));

    // a late batch of the ended transaction cannot open a new one
    let late = produce_txn_at(&mut s, 12, pid, e0, 2, "late").await;
    assert!(
        late == ResponseError::InvalidProducerEpoch.code()
            || late == ResponseError::NotEnoughReplicas.code(),
        "late batch at the old epoch: {late}"
    );
    // the next transaction, at the bumped epoch from sequence 0, aborted
    assert_eq!(produce_txn_v2(&mut s, pid, e1, 0, "aborted").await, 0);
    let (code, _, e2) = end_at(&mut s, 5, pid, e1, false).await;
    assert_eq!((code, e2), (0, e1 + 1));
    let (_, state, _, depoch, _) = describe(&mut s).await;
    assert_eq!(state, "CompleteAbort");
    assert_eq!(depoch, e2);
    // an abort with nothing in the transaction bumps too (the client may
    // not know whether its transaction started)
    let (code, _, e3) = end_at(&mut s, 5, pid, e2, false).await;
    assert_eq!((code, e3), (0, e2 + 1));
    assert_eq!(
        read_committed(&mut s).await,
        vec!["one".to_string(), "two".to_string()]
    );
    // a client on the older rules (Produce v11) still has to add first
    assert_eq!(
        produce_txn_at(&mut s, 11, pid, e3, 0, "unadded").await,
        ResponseError::InvalidTxnState.code()
    );
    drop(s);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_version_0_keeps_every_client_on_the_older_rules() {
    let dir = tempfile::tempdir().unwrap();
    let args = [ARGS, &["--set", "transaction.version=0"]].concat();
    let broker = start(dir.path(), &args).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, TOPIC, 1).await.0, 0);
    let r: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    // transaction.version at 0 is not listed (the other features are)
    let finalized: Vec<&str> = r
        .finalized_features
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(
        finalized,
        vec!["group.version", "metadata.version"],
        "transaction.version at 0 is not finalized above 0"
    );
    let (_, pid, epoch) = init(&mut s).await;
    assert_eq!(add_partition(&mut s, pid, epoch).await, 0);
    assert_eq!(produce_txn(&mut s, pid, epoch, 0, "kept").await, 0);
    // EndTxn v3 keeps the epoch; the markers are written at it
    assert_eq!(end(&mut s, pid, epoch, true).await, 0);
    let (_, state, _, depoch, _) = describe(&mut s).await;
    assert_eq!((state.as_str(), depoch), ("CompleteCommit", epoch));
    assert_eq!(read_committed(&mut s).await, vec!["kept".to_string()]);
    drop(s);
    broker.stop().await;
}
