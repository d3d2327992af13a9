//! Test support: the shapes of v2 record batches the crate's unit tests
//! use, each built with [`BatchBuilder`] (the one builder of batches;
//! integration tests, benches and fuzz checks call it directly).

use bytes::Bytes;
use kafka_protocol::records::Compression;

use super::batch::BatchBuilder;

/// Every codec a batch may use.
pub const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// One uncompressed batch of `n` records with timestamps `ts`, `ts + 1`, …;
/// `record(i)` gives each record's key and value.
pub fn batch_of(
    n: usize,
    ts: i64,
    record: impl Fn(usize) -> (Option<Bytes>, Option<Bytes>),
) -> Vec<u8> {
    records(BatchBuilder::new(), n, ts, record)
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
    records(BatchBuilder::new().producer(pid, epoch, seq), n, ts, record)
}

/// One batch of `n` records with keys `key-i`, values of `10 + i` bytes
/// and timestamps from `ts`, compressed with `compression`.
pub fn keyed(n: usize, ts: i64, compression: Compression) -> Vec<u8> {
    keyed_sized((0..n).map(|i| 10 + i), ts, compression)
}

/// One batch of one record per value size in `sizes` (keys `key-i`,
/// timestamps `ts + i`), compressed with `compression`.
pub fn keyed_sized(
    sizes: impl Iterator<Item = usize>,
    ts: i64,
    compression: Compression,
) -> Vec<u8> {
    BatchBuilder::new()
        .compression(compression)
        .records(sizes.enumerate().map(|(i, size)| {
            (
                Some(Bytes::from(format!("key-{i}"))),
                Some(Bytes::from(vec![b'v'; size])),
                ts + i as i64,
            )
        }))
        .encode()
        .expect("encode")
}

fn records(
    builder: BatchBuilder,
    n: usize,
    ts: i64,
    record: impl Fn(usize) -> (Option<Bytes>, Option<Bytes>),
) -> Vec<u8> {
    builder
        .records((0..n).map(|i| {
            let (key, value) = record(i);
            (key, value, ts + i as i64)
        }))
        .encode()
        .expect("encode")
}
