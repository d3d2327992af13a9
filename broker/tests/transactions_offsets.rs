//! Offsets committed inside transactions over the real wire (issue 37,
//! TxnOffsetCommit, KIP-98/447): a standalone broker takes a transaction's
//! offsets for a group, keeps them pending (OffsetFetch with
//! `require_stable` answers UNSTABLE_OFFSET_COMMIT, without it the last
//! committed offset), makes them the group's offsets when the transaction
//! commits and drops them when it aborts; refuses a commit for a group the
//! transaction never added (INVALID_TXN_STATE) and one from a fenced
//! producer (PRODUCER_FENCED); and after a restart reads the same outcome
//! back from `__consumer_offsets`, with a transaction still open there
//! still pending until it ends.

mod wire_common;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ApiKey, EndTxnRequest, EndTxnResponse,
    GroupId, InitProducerIdRequest, InitProducerIdResponse, OffsetFetchRequest,
    OffsetFetchResponse, ProducerId, TransactionalId, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use wire_common::*;

const TOPIC: &str = "input";
const GROUP: &str = "etl";
const ARGS: &[&str] = &[
    "--set",
    "transaction.state.log.num.partitions=3",
    "--set",
    "offsets.topic.num.partitions=3",
];

fn tid(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

fn gid(s: &str) -> GroupId {
    GroupId(StrBytes::from_string(s.to_string()))
}

async fn init(s: &mut TcpStream, txn: &str) -> (i64, i16) {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(tid(txn)))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r: InitProducerIdResponse = call(s, ApiKey::InitProducerId, 4, &req).await;
    assert_eq!(r.error_code, 0);
    (r.producer_id.0, r.producer_epoch)
}

async fn add_offsets(s: &mut TcpStream, txn: &str, pid: i64, epoch: i16) -> i16 {
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(tid(txn))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_group_id(gid(GROUP));
    let r: AddOffsetsToTxnResponse = call(s, ApiKey::AddOffsetsToTxn, 3, &req).await;
    r.error_code
}

/// TxnOffsetCommit v3 of `offset` for TOPIC-0 and TOPIC-1 (generation -1,
/// no member: a producer without group metadata); the two codes.
async fn commit(s: &mut TcpStream, txn: &str, pid: i64, epoch: i16, offset: i64) -> Vec<i16> {
    let partition = |p| {
        TxnOffsetCommitRequestPartition::default()
            .with_partition_index(p)
            .with_committed_offset(offset)
            .with_committed_leader_epoch(-1)
            .with_committed_metadata(Some(StrBytes::from_static_str("m")))
    };
    let req = TxnOffsetCommitRequest::default()
        .with_transactional_id(tid(txn))
        .with_group_id(gid(GROUP))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_generation_id(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(name(TOPIC))
            .with_partitions(vec![partition(0), partition(1)])]);
    let r: TxnOffsetCommitResponse = call(s, ApiKey::TxnOffsetCommit, 3, &req).await;
    r.topics[0]
        .partitions
        .iter()
        .map(|p| p.error_code)
        .collect()
}

async fn end(s: &mut TcpStream, txn: &str, pid: i64, epoch: i16, commit: bool) -> i16 {
    let req = EndTxnRequest::default()
        .with_transactional_id(tid(txn))
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r: EndTxnResponse = call(s, ApiKey::EndTxn, 3, &req).await;
    r.error_code
}

/// OffsetFetch v8 of TOPIC-0: (error code, committed offset).
async fn fetched(s: &mut TcpStream, require_stable: bool) -> (i16, i64) {
    let req = OffsetFetchRequest::default()
        .with_require_stable(require_stable)
        .with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(gid(GROUP))
            .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                .with_name(name(TOPIC))
                .with_partition_indexes(vec![0])]))]);
    let r: OffsetFetchResponse = call(s, ApiKey::OffsetFetch, 8, &req).await;
    let g = &r.groups[0];
    assert_eq!(g.error_code, 0);
    let p = &g.topics[0].partitions[0];
    (p.error_code, p.committed_offset)
}

const UNSTABLE: i16 = 88;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_offsets_commit_abort_fence_and_reload() {
    assert_eq!(ResponseError::UnstableOffsetCommit.code(), UNSTABLE);
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), ARGS).await;
    let mut s = broker.connect().await;
    assert_eq!(create_topic(&mut s, TOPIC, 2).await.0, 0);
    let (pid, epoch) = init(&mut s, "etl-1").await;

    // a group the transaction never added is refused, and nothing is kept
    assert_eq!(
        commit(&mut s, "etl-1", pid, epoch, 5).await,
        vec![ResponseError::InvalidTxnState.code(); 2]
    );
    assert_eq!(fetched(&mut s, true).await, (0, -1));

    // committed with the transaction: pending until then
    assert_eq!(add_offsets(&mut s, "etl-1", pid, epoch).await, 0);
    assert_eq!(commit(&mut s, "etl-1", pid, epoch, 10).await, vec![0, 0]);
    assert_eq!(fetched(&mut s, true).await, (UNSTABLE, -1));
    assert_eq!(fetched(&mut s, false).await, (0, -1), "not committed yet");
    assert_eq!(end(&mut s, "etl-1", pid, epoch, true).await, 0);
    assert_eq!(fetched(&mut s, true).await, (0, 10));

    // aborted with the transaction: the committed offset stays
    assert_eq!(add_offsets(&mut s, "etl-1", pid, epoch).await, 0);
    assert_eq!(commit(&mut s, "etl-1", pid, epoch, 20).await, vec![0, 0]);
    assert_eq!(fetched(&mut s, true).await, (UNSTABLE, -1));
    assert_eq!(fetched(&mut s, false).await, (0, 10));
    assert_eq!(end(&mut s, "etl-1", pid, epoch, false).await, 0);
    assert_eq!(fetched(&mut s, true).await, (0, 10));

    // a zombie: a new instance of the transactional id fences the old one
    let (pid2, epoch2) = init(&mut s, "etl-1").await;
    assert_eq!((pid2, epoch2), (pid, epoch + 1));
    assert_eq!(
        commit(&mut s, "etl-1", pid, epoch, 99).await,
        vec![ResponseError::ProducerFenced.code(); 2]
    );
    assert_eq!(fetched(&mut s, true).await, (0, 10));

    // left open across a restart: still pending, then committed
    assert_eq!(add_offsets(&mut s, "etl-1", pid2, epoch2).await, 0);
    assert_eq!(commit(&mut s, "etl-1", pid2, epoch2, 30).await, vec![0, 0]);
    drop(s);
    broker.stop().await;

    let broker = start(dir.path(), ARGS).await;
    let mut s = broker.connect().await;
    assert_eq!(
        fetched(&mut s, true).await,
        (UNSTABLE, -1),
        "the open transaction's offsets were read back as pending"
    );
    assert_eq!(
        fetched(&mut s, false).await,
        (0, 10),
        "the commit, not the abort"
    );
    assert_eq!(end(&mut s, "etl-1", pid2, epoch2, true).await, 0);
    assert_eq!(fetched(&mut s, true).await, (0, 30));
    drop(s);
    broker.stop().await;

    // and the markers written to __consumer_offsets settle it after a restart
    let broker = start(dir.path(), ARGS).await;
    let mut s = broker.connect().await;
    assert_eq!(fetched(&mut s, true).await, (0, 30));
    drop(s);
    broker.stop().await;
}
