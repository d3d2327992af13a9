//! The seeds of the transaction work (issue 37), built with the broker's own
//! encoders (and the `kafka-protocol` crate's messages for request frames)
//! rather than captured, since `fuzz/seed/make_corpus.py`'s clients do not
//! use transactions: the whole `txn_codecs` corpus and the `txn-*` files of
//! the `request_frame` and `log_recovery` corpora (`fuzz/corpus/<target>/`),
//! and the `txn_codecs` regression inputs (`fuzz/regressions/txn_codecs/`).
//!
//! The test checks that the committed files are exactly what this code
//! builds, and that every seed is well formed (a seed that does not decode
//! would start the mutations from garbage). Regenerate the files after a
//! change here:
//!
//! ```sh
//! MOLDAU_WRITE_SEEDS=1 cargo test -p moldau-fuzz-checks --test seeds
//! ```

use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiKey, DescribeProducersRequest,
    DescribeTransactionsRequest, EndTxnRequest, GroupId, InitProducerIdRequest,
    ListTransactionsRequest, ProducerId, RequestHeader, RequestKind, TopicName, TransactionalId,
    TxnOffsetCommitRequest, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use moldau_broker::storage::batch::{set_base_offset_and_epoch, BatchBuilder};
use moldau_broker::storage::producer_snapshot::{self, SnapshotBatch, SnapshotEntry};
use moldau_broker::storage::txn_index::{self, AbortedTxn};
use moldau_broker::txn::log_record::{
    self, encode_key, RawTaggedField, TopicPartitions, TxnLogValue,
};
use moldau_broker::txn::marker::{
    encode_control_key, ControlRecordType, EndTxnMarker, MarkerBatch, TxnResult,
};
use moldau_broker::txn::state::TxnState;

const NOW: i64 = 1_700_000_000_000;

/// One seed: `(kind, target, file name, bytes)`; kind is `corpus` or
/// `regressions`.
type Seed = (&'static str, &'static str, String, Vec<u8>);

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

// --- txn_codecs ------------------------------------------------------------

fn prepare_commit() -> TxnLogValue {
    TxnLogValue {
        producer_id: 4000,
        previous_producer_id: 3999,
        producer_epoch: 3,
        timeout_ms: 60_000,
        status: TxnState::PrepareCommit.id(),
        partitions: Some(vec![
            TopicPartitions {
                topic: "orders".into(),
                partition_ids: vec![0, 2, 5],
                unknown_tags: Vec::new(),
            },
            TopicPartitions {
                topic: "__consumer_offsets".into(),
                partition_ids: vec![17],
                unknown_tags: vec![RawTaggedField {
                    tag: 9,
                    data: vec![1, 2],
                }],
            },
        ]),
        last_update_ms: NOW + 250,
        start_ms: NOW,
        client_transaction_version: 2,
        unknown_tags: vec![RawTaggedField {
            tag: 7,
            data: b"later".to_vec(),
        }],
        ..TxnLogValue::default()
    }
}

fn ongoing() -> TxnLogValue {
    TxnLogValue {
        producer_id: 12,
        producer_epoch: 0,
        timeout_ms: 15_000,
        status: TxnState::Ongoing.id(),
        partitions: Some(vec![TopicPartitions {
            topic: "t".into(),
            partition_ids: vec![0, 1],
            unknown_tags: Vec::new(),
        }]),
        last_update_ms: NOW + 10,
        start_ms: NOW,
        ..TxnLogValue::default()
    }
}

fn empty() -> TxnLogValue {
    TxnLogValue {
        producer_id: 12,
        producer_epoch: 0,
        timeout_ms: 15_000,
        status: TxnState::Empty.id(),
        partitions: None,
        last_update_ms: NOW,
        start_ms: -1,
        ..TxnLogValue::default()
    }
}

fn complete_abort() -> TxnLogValue {
    TxnLogValue {
        producer_id: 77,
        next_producer_id: 78,
        producer_epoch: i16::MAX - 1,
        next_producer_epoch: 0,
        timeout_ms: 900_000,
        status: TxnState::CompleteAbort.id(),
        partitions: Some(Vec::new()),
        last_update_ms: NOW + 999,
        start_ms: NOW + 1,
        client_transaction_version: 2,
        ..TxnLogValue::default()
    }
}

/// Mode 0: `flags | key length u16 | key | value`.
fn txn_record(key: &[u8], value: Option<&[u8]>) -> Vec<u8> {
    let flags = u8::from(value.is_none());
    cat(&[
        &[0, flags],
        &(key.len() as u16).to_be_bytes(),
        key,
        value.unwrap_or_default(),
    ])
}

/// Mode 1: `flags | key length u8 | key | value`.
fn control_record(key: &[u8], value: Option<&[u8]>) -> Vec<u8> {
    let flags = u8::from(value.is_none());
    cat(&[&[1, flags, key.len() as u8], key, value.unwrap_or_default()])
}

fn aborted(pid: i64, first: i64, last: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id: pid,
        first_offset: first,
        last_offset: last,
        last_stable_offset: first,
    }
}

fn snapshot_entries() -> Vec<SnapshotEntry> {
    vec![
        SnapshotEntry {
            producer_id: 12,
            epoch: 0,
            batches: vec![
                SnapshotBatch {
                    first_seq: 0,
                    last_seq: 4,
                    first_offset: 0,
                },
                SnapshotBatch {
                    first_seq: 5,
                    last_seq: 9,
                    first_offset: 6,
                },
            ],
            current_txn_first_offset: 0,
            coordinator_epoch: 3,
        },
        SnapshotEntry {
            producer_id: 4000,
            epoch: 7,
            batches: vec![SnapshotBatch {
                first_seq: 100,
                last_seq: 100,
                first_offset: 11,
            }],
            current_txn_first_offset: -1,
            coordinator_epoch: -1,
        },
    ]
}

/// A version 1 snapshot (no transaction fields), laid out by hand as the
/// broker wrote it before version 2.
fn snapshot_v1(offset: i64, entries: &[SnapshotEntry]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&offset.to_be_bytes());
    body.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        body.extend_from_slice(&e.producer_id.to_be_bytes());
        body.extend_from_slice(&e.epoch.to_be_bytes());
        body.push(e.batches.len() as u8);
        for b in &e.batches {
            body.extend_from_slice(&b.first_seq.to_be_bytes());
            body.extend_from_slice(&b.last_seq.to_be_bytes());
            body.extend_from_slice(&b.first_offset.to_be_bytes());
        }
    }
    // the CRC is left 0: the seed asks the check to compute it (flags 1)
    cat(&[
        &0x4d50_5353u32.to_be_bytes(),
        &1u16.to_be_bytes(),
        &[0; 4],
        &body,
    ])
}

/// Batches of a `__transaction_state` partition as a coordinator writes
/// them, one after the other from offset 0.
fn transaction_state_log() -> Vec<u8> {
    let record = |id: &str, v: Option<&TxnLogValue>, version: i16| {
        (
            Some(Bytes::from(encode_key(id).unwrap())),
            v.map(|v| Bytes::from(v.encode(version).unwrap())),
            NOW,
        )
    };
    let batches = [
        BatchBuilder::new().records([record("app-1", Some(&empty()), 0)]),
        BatchBuilder::new().records([
            record("app-1", Some(&ongoing()), 0),
            record("app-2", Some(&prepare_commit()), 1),
        ]),
        // a control batch in the log is passed over by the load
        BatchBuilder::marker(
            &MarkerBatch::new(9, 0, EndTxnMarker::new(TxnResult::Commit, 1)),
            NOW,
        ),
        BatchBuilder::new()
            .compression(kafka_protocol::records::Compression::Gzip)
            .records([
                record("app-2", Some(&complete_abort()), 1),
                record("app-3", Some(&ongoing()), 1),
            ]),
        BatchBuilder::new().records([record("app-3", None, 1)]),
    ];
    log_of(&batches)
}

/// The batches, encoded and given consecutive offsets from 0.
fn log_of(batches: &[BatchBuilder]) -> Vec<u8> {
    let mut log = Vec::new();
    let mut offset = 0i64;
    for b in batches {
        let mut bytes = b.encode().unwrap();
        set_base_offset_and_epoch(&mut bytes, offset, 0);
        offset += b.to_records().len() as i64;
        log.extend_from_slice(&bytes);
    }
    log
}

fn txn_codecs() -> Vec<Seed> {
    let mut seeds: Vec<(String, Vec<u8>)> = Vec::new();
    let key = encode_key("app-1").unwrap();
    for (name, v, version) in [
        ("prepare-commit-v1", prepare_commit(), 1),
        ("prepare-commit-v0", prepare_commit(), 0),
        ("ongoing-v0", ongoing(), 0),
        ("ongoing-v1", ongoing(), 1),
        ("empty-v0", empty(), 0),
        ("complete-abort-v1", complete_abort(), 1),
    ] {
        let value = v.encode(version).unwrap();
        seeds.push((format!("record-{name}"), txn_record(&key, Some(&value))));
    }
    let (key, value) = log_record::tombstone("app-2").unwrap();
    seeds.push((
        "record-tombstone".into(),
        txn_record(&key, value.as_deref()),
    ));

    let commit = EndTxnMarker::new(TxnResult::Commit, 5);
    let abort = EndTxnMarker::new(TxnResult::Abort, 0);
    seeds.push((
        "control-commit".into(),
        control_record(&commit.key(), Some(&commit.value())),
    ));
    seeds.push((
        "control-abort".into(),
        control_record(&abort.key(), Some(&abort.value())),
    ));
    seeds.push((
        "control-newer-versions".into(),
        control_record(&[0, 1, 0, 0, 0xaa], Some(&[0, 2, 0, 0, 0, 9, 0xbb])),
    ));
    seeds.push((
        "control-leader-change".into(),
        control_record(
            &encode_control_key(ControlRecordType::LeaderChange),
            Some(&[0, 0, 0, 0, 0, 1, 0, 0, 0, 0]),
        ),
    ));
    seeds.push((
        "control-no-value".into(),
        control_record(&commit.key(), None),
    ));

    let entries = [aborted(12, 0, 5), aborted(4000, 3, 9), aborted(12, 10, 20)];
    let index: Vec<u8> = entries.iter().flat_map(|e| e.encode()).collect();
    seeds.push(("txnindex".into(), cat(&[&[2], &index])));
    seeds.push((
        "txnindex-torn".into(),
        cat(&[&[2], &index[..2 * txn_index::ENTRY_LEN + 9]]),
    ));

    let snapshot = producer_snapshot::encode(12, &snapshot_entries());
    seeds.push(("snapshot-v2".into(), cat(&[&[3, 0], &snapshot])));
    seeds.push(("snapshot-v2-fix-crc".into(), cat(&[&[3, 1], &snapshot])));
    seeds.push((
        "snapshot-v1".into(),
        cat(&[&[3, 1], &snapshot_v1(12, &snapshot_entries())]),
    ));
    seeds.push((
        "transaction-state-log".into(),
        cat(&[&[4], &transaction_state_log()]),
    ));
    seeds
        .into_iter()
        .map(|(name, bytes)| ("corpus", "txn_codecs", name, bytes))
        .collect()
}

/// Inputs whose counts claim far more than the bytes hold: each must be
/// refused before anything is allocated for it.
fn txn_codecs_regressions() -> Vec<Seed> {
    // a snapshot of 2^32 - 1 producers (CRC fixed by the check)
    let mut huge = producer_snapshot::encode(0, &[]);
    huge[18..22].copy_from_slice(&u32::MAX.to_be_bytes());
    let snapshot = cat(&[&[3, 1], &huge]);
    // a flexible value whose partition array claims 2^32 - 2 entries
    let mut value = cat(&[&[0, 1], &[0; 8], &[0; 2], &[0; 4], &[1]]);
    value.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    let key = encode_key("x").unwrap();
    let record = txn_record(&key, Some(&value));
    // a classic value whose partition array claims i32::MAX entries
    let mut v0 = cat(&[&[0, 0], &[0; 8], &[0; 2], &[0; 4], &[1]]);
    v0.extend_from_slice(&i32::MAX.to_be_bytes());
    let record_v0 = txn_record(&key, Some(&v0));
    vec![
        ("snapshot-count-claims-4g".into(), snapshot),
        ("record-v1-partitions-claims-4g".into(), record),
        ("record-v0-partitions-claims-2g".into(), record_v0),
    ]
    .into_iter()
    .map(|(name, bytes)| ("regressions", "txn_codecs", name, bytes))
    .collect()
}

// --- request_frame -----------------------------------------------------------

/// A request frame as the broker reads it after the size: header, body.
fn frame<M: Encodable>(api: ApiKey, version: i16, body: &M) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("seed-txn")));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, api.request_header_version(version))
        .unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.to_vec()
}

fn txn_id(s: &'static str) -> TransactionalId {
    TransactionalId(StrBytes::from_static_str(s))
}

fn topic(s: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(s))
}

/// Frames of every version of the transaction APIs, each a valid encoding
/// with the fields of its version set.
fn request_frames() -> Vec<Seed> {
    let mut frames: Vec<(ApiKey, i16, Vec<u8>)> = Vec::new();
    for v in 0..=4 {
        let body = InitProducerIdRequest::default()
            .with_transactional_id(Some(txn_id("app-1")))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(ProducerId(if v >= 3 { 4000 } else { -1 }))
            .with_producer_epoch(if v >= 3 { 2 } else { -1 });
        frames.push((
            ApiKey::InitProducerId,
            v,
            frame(ApiKey::InitProducerId, v, &body),
        ));
    }
    let topics = || {
        vec![
            AddPartitionsToTxnTopic::default()
                .with_name(topic("orders"))
                .with_partitions(vec![0, 1, 5]),
            AddPartitionsToTxnTopic::default()
                .with_name(topic("audit"))
                .with_partitions(vec![2]),
        ]
    };
    for v in 0..=5 {
        let body = if v <= 3 {
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(txn_id("app-1"))
                .with_v3_and_below_producer_id(ProducerId(4000))
                .with_v3_and_below_producer_epoch(2)
                .with_v3_and_below_topics(topics())
        } else {
            AddPartitionsToTxnRequest::default().with_transactions(vec![
                AddPartitionsToTxnTransaction::default()
                    .with_transactional_id(txn_id("app-1"))
                    .with_producer_id(ProducerId(4000))
                    .with_producer_epoch(2)
                    .with_verify_only(true)
                    .with_topics(topics()),
                AddPartitionsToTxnTransaction::default()
                    .with_transactional_id(txn_id("app-2"))
                    .with_producer_id(ProducerId(4001))
                    .with_producer_epoch(0)
                    .with_topics(topics()[..1].to_vec()),
            ])
        };
        frames.push((
            ApiKey::AddPartitionsToTxn,
            v,
            frame(ApiKey::AddPartitionsToTxn, v, &body),
        ));
    }
    for v in 0..=4 {
        let body = AddOffsetsToTxnRequest::default()
            .with_transactional_id(txn_id("app-1"))
            .with_producer_id(ProducerId(4000))
            .with_producer_epoch(2)
            .with_group_id(GroupId(StrBytes::from_static_str("group-1")));
        frames.push((
            ApiKey::AddOffsetsToTxn,
            v,
            frame(ApiKey::AddOffsetsToTxn, v, &body),
        ));
        let body = EndTxnRequest::default()
            .with_transactional_id(txn_id("app-1"))
            .with_producer_id(ProducerId(4000))
            .with_producer_epoch(2)
            .with_committed(v % 2 == 0);
        frames.push((ApiKey::EndTxn, v, frame(ApiKey::EndTxn, v, &body)));
        let body = TxnOffsetCommitRequest::default()
            .with_transactional_id(txn_id("app-1"))
            .with_group_id(GroupId(StrBytes::from_static_str("group-1")))
            .with_producer_id(ProducerId(4000))
            .with_producer_epoch(2)
            .with_generation_id(if v >= 3 { 3 } else { -1 })
            .with_member_id(StrBytes::from_static_str(if v >= 3 {
                "member-1"
            } else {
                ""
            }))
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(topic("orders"))
                .with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(42)
                        .with_committed_leader_epoch(if v >= 2 { 1 } else { -1 })
                        .with_committed_metadata(Some(StrBytes::from_static_str("m"))),
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(1)
                        .with_committed_offset(7),
                ])]);
        frames.push((
            ApiKey::TxnOffsetCommit,
            v,
            frame(ApiKey::TxnOffsetCommit, v, &body),
        ));
    }
    let body = WriteTxnMarkersRequest::default().with_markers(vec![
        WritableTxnMarker::default()
            .with_producer_id(ProducerId(4000))
            .with_producer_epoch(2)
            .with_transaction_result(true)
            .with_coordinator_epoch(5)
            .with_topics(vec![WritableTxnMarkerTopic::default()
                .with_name(topic("orders"))
                .with_partition_indexes(vec![0, 1, 5])]),
        WritableTxnMarker::default()
            .with_producer_id(ProducerId(12))
            .with_producer_epoch(0)
            .with_transaction_result(false)
            .with_coordinator_epoch(5)
            .with_topics(vec![WritableTxnMarkerTopic::default()
                .with_name(topic("__consumer_offsets"))
                .with_partition_indexes(vec![17])]),
    ]);
    frames.push((
        ApiKey::WriteTxnMarkers,
        1,
        frame(ApiKey::WriteTxnMarkers, 1, &body),
    ));
    let body = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![txn_id("app-1"), txn_id("app-2")]);
    frames.push((
        ApiKey::DescribeTransactions,
        0,
        frame(ApiKey::DescribeTransactions, 0, &body),
    ));
    for v in 0..=1 {
        let body = ListTransactionsRequest::default()
            .with_state_filters(vec![StrBytes::from_static_str("Ongoing")])
            .with_producer_id_filters(vec![ProducerId(4000)])
            .with_duration_filter(if v >= 1 { 60_000 } else { -1 });
        frames.push((
            ApiKey::ListTransactions,
            v,
            frame(ApiKey::ListTransactions, v, &body),
        ));
    }
    let body = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(topic("orders"))
        .with_partition_indexes(vec![0, 1])]);
    frames.push((
        ApiKey::DescribeProducers,
        0,
        frame(ApiKey::DescribeProducers, 0, &body),
    ));

    for (api, v, bytes) in &frames {
        // every frame decodes whole, as the broker's dispatch reads it
        let mut buf = Bytes::copy_from_slice(bytes);
        let header = RequestHeader::decode(&mut buf, api.request_header_version(*v)).unwrap();
        assert_eq!(
            (header.request_api_key, header.request_api_version),
            (*api as i16, *v)
        );
        RequestKind::decode(*api, &mut buf, *v).unwrap_or_else(|e| panic!("{api:?} v{v}: {e}"));
        assert!(buf.is_empty(), "{api:?} v{v}: bytes left over");
    }
    frames
        .into_iter()
        .map(|(api, v, bytes)| {
            let name = format!("{:02}-v{v:02}-txn", api as i16);
            ("corpus", "request_frame", name, bytes)
        })
        .collect()
}

// --- log_recovery --------------------------------------------------------------

/// `n` records of producer `pid` (epoch 0) from sequence `seq`, in its
/// open transaction.
fn txn_batch(pid: i64, seq: i32, n: usize) -> BatchBuilder {
    BatchBuilder::new()
        .producer(pid, 0, seq)
        .transactional()
        .records((0..n).map(|i| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(format!("value {pid}/{}", seq + i as i32))),
                NOW + i as i64,
            )
        }))
}

fn marker(pid: i64, result: TxnResult) -> BatchBuilder {
    BatchBuilder::marker(
        &MarkerBatch::new(pid, 0, EndTxnMarker::new(result, 1)),
        NOW + 100,
    )
}

/// A partition's log with transactions, offsets:
/// 0-2 producer 12's transaction, 3-4 plain records, 5-6 producer 4000's,
/// 7 COMMIT of 12, 8-9 producer 12's next transaction, 10 ABORT of 4000,
/// 11 ABORT of 12, 12-13 producer 4000's next transaction, left open (the
/// last stable offset stays at 12).
fn txn_log() -> Vec<u8> {
    log_of(&[
        txn_batch(12, 0, 3),
        BatchBuilder::new().records([
            (None, Some(Bytes::from_static(b"plain 1")), NOW),
            (None, Some(Bytes::from_static(b"plain 2")), NOW),
        ]),
        txn_batch(4000, 0, 2),
        marker(12, TxnResult::Commit),
        txn_batch(12, 3, 2),
        marker(4000, TxnResult::Abort),
        marker(12, TxnResult::Abort),
        txn_batch(4000, 2, 2),
    ])
}

/// The `.txnindex` of [`txn_log`]: its two aborted transactions.
fn txn_log_index() -> Vec<u8> {
    [
        AbortedTxn {
            producer_id: 4000,
            first_offset: 5,
            last_offset: 10,
            last_stable_offset: 8,
        },
        AbortedTxn {
            producer_id: 12,
            first_offset: 8,
            last_offset: 11,
            last_stable_offset: 12,
        },
    ]
    .iter()
    .flat_map(|e| e.encode())
    .collect()
}

/// The producer snapshot of [`txn_log`] below offset 7: both producers
/// in a transaction.
fn txn_log_snapshot() -> Vec<u8> {
    let entry = |pid, last_seq, first_offset| SnapshotEntry {
        producer_id: pid,
        epoch: 0,
        batches: vec![SnapshotBatch {
            first_seq: 0,
            last_seq,
            first_offset,
        }],
        current_txn_first_offset: first_offset,
        coordinator_epoch: -1,
    };
    producer_snapshot::encode(7, &[entry(12, 2, 0), entry(4000, 1, 5)])
}

/// Where the batch at `offset` starts in `log`.
fn position_of(log: &[u8], offset: i64) -> usize {
    let mut pos = 0;
    loop {
        let h = moldau_broker::storage::batch::BatchHeader::parse(&log[pos..]).unwrap();
        if h.base_offset == offset {
            return pos;
        }
        pos += h.total_size();
    }
}

fn log_recovery() -> Vec<Seed> {
    let log = txn_log();
    let index = txn_log_index();
    let snapshot = txn_log_snapshot();
    let files = |index: &[u8], snapshot: &[u8]| {
        cat(&[
            &(index.len() as u16).to_be_bytes(),
            index,
            &(snapshot.len() as u16).to_be_bytes(),
            snapshot,
        ])
    };
    let last = position_of(&log, 12);
    let split = position_of(&log, 8);
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        // the PartitionLog path: control batches in a recovered log
        ("txn-log-unclean", cat(&[&[0x40], &log])),
        // the partition path (flag 0x80): unclean, files and log agree
        (
            "txn-unclean",
            cat(&[&[0x80], &files(&index, &snapshot), &log]),
        ),
        // no index, no snapshot: everything rebuilt from the log
        (
            "txn-unclean-no-files",
            cat(&[&[0x80], &files(&[], &[]), &log]),
        ),
        // clean shutdown
        (
            "txn-clean",
            cat(&[&[0x81], &files(&index, &snapshot), &log]),
        ),
        // torn in the open transaction's batch: its index entries stay
        (
            "txn-torn",
            cat(&[&[0x80], &files(&index, &[]), &log[..last + 30]]),
        ),
        // two segments, the second from offset 8; the index names markers
        // of the second
        (
            "txn-two-segments",
            cat(&[
                &[0xa0],
                &8u64.to_be_bytes(),
                &(split as u32).to_be_bytes(),
                &files(&index, &snapshot),
                &log,
            ]),
        ),
    ];
    seeds
        .into_iter()
        .map(|(name, bytes)| ("corpus", "log_recovery", name.to_string(), bytes))
        .collect()
}

/// `.txnindex` files whose tail the reader cannot use (a crash in the
/// middle of an entry's write; an entry of an unknown version) while the
/// log holds an ABORT marker the files do not list: the open rebuilds
/// its entry, and a clean restart must still see it.
fn log_recovery_regressions() -> Vec<Seed> {
    let log = txn_log();
    let index = txn_log_index();
    let snapshot = txn_log_snapshot();
    let input = |index: &[u8]| {
        cat(&[
            &[0x80],
            &(index.len() as u16).to_be_bytes(),
            index,
            &(snapshot.len() as u16).to_be_bytes(),
            &snapshot,
            &log,
        ])
    };
    let torn = &index[..txn_index::ENTRY_LEN + 9];
    let mut unknown = index.clone();
    unknown[txn_index::ENTRY_LEN + 1] = 1;
    vec![
        ("txnindex-torn-tail", input(torn)),
        ("txnindex-unknown-version", input(&unknown)),
    ]
    .into_iter()
    .map(|(name, bytes)| ("regressions", "log_recovery", name.to_string(), bytes))
    .collect()
}

fn all() -> Vec<Seed> {
    let mut seeds = txn_codecs();
    seeds.extend(txn_codecs_regressions());
    seeds.extend(request_frames());
    seeds.extend(log_recovery());
    seeds.extend(log_recovery_regressions());
    seeds
}

/// Each txn_codecs corpus seed is well formed for its mode.
fn well_formed(name: &str, bytes: &[u8]) {
    let rest = &bytes[1..];
    match bytes[0] {
        0 => {
            let key_len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
            let key = &rest[3..3 + key_len];
            let value = (rest[0] & 1 == 0).then_some(&rest[3 + key_len..]);
            log_record::decode_record(key, value).expect(name);
        }
        1 => {
            let key_len = usize::from(rest[1]);
            let key = &rest[2..2 + key_len];
            moldau_broker::txn::marker::decode_control_key(key).expect(name);
        }
        2 => assert!(!txn_index::decode_all(rest).is_empty(), "{name}"),
        3 => {
            if rest[0] == 0 {
                producer_snapshot::decode(&rest[1..]).expect(name);
            }
        }
        _ => {
            let headers = moldau_broker::storage::batch::validate_batches(rest, 1 << 20);
            assert_eq!(headers.expect(name).len(), 5, "{name}");
        }
    }
}

#[test]
fn generated_seeds_are_committed() {
    let write = std::env::var("MOLDAU_WRITE_SEEDS").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    for (kind, target, name, bytes) in all() {
        if kind == "corpus" && target == "txn_codecs" {
            well_formed(&name, &bytes);
        }
        let path = fuzz_dir()
            .join(kind)
            .join(target)
            .join(format!("{name}.bin"));
        if write {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        } else if std::fs::read(&path).ok().as_ref() != Some(&bytes) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "seed files missing or stale (MOLDAU_WRITE_SEEDS=1 cargo test -p moldau-fuzz-checks --test seeds): {stale:?}"
    );
}
