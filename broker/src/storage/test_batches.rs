//! Test support: v2 record batches built with the `kafka-protocol` encoder,
//! for the crate's unit tests (integration tests have their own in
//! `tests/wire_common`, as they cannot see `cfg(test)` code).

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// One uncompressed batch of `n` records with timestamps `ts`, `ts + 1`, …;
/// `record(i)` gives each record's key and value.
pub fn batch_of(
    n: usize,
    ts: i64,
    record: impl Fn(usize) -> (Option<Bytes>, Option<Bytes>),
) -> Vec<u8> {
    // the encoder keeps records in one batch only while offset - sequence
    // is constant
    encode(n, ts, -1, -1, -1, record)
}

/// One uncompressed batch of `n` records of idempotent producer `pid` in
/// `epoch`, sequences `seq..seq + n`, timestamps from `ts`.
pub fn idempotent_batch_of(
    pid: i64,
    epoch: i16,
    seq: i32,
    n: usize,
    ts: i64,
    record: impl Fn(usize) -> (Option<Bytes>, Option<Bytes>),
) -> Vec<u8> {
    encode(n, ts, pid, epoch, seq, record)
}

fn encode(
    n: usize,
    ts: i64,
    pid: i64,
    epoch: i16,
    first_seq: i32,
    record: impl Fn(usize) -> (Option<Bytes>, Option<Bytes>),
) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| {
            let (key, value) = record(i);
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: pid,
                producer_epoch: epoch,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: first_seq + i as i32,
                timestamp: ts + i as i64,
                key,
                value,
                headers: Default::default(),
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("encode");
    buf.to_vec()
}
