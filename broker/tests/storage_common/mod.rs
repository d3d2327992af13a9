//! Helpers shared by the `storage_*` integration tests (included with
//! `#[path]`, not a test target of its own).
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder, RecordSet};
use moldau_broker::storage::batch::{BatchBuilder, BatchHeader};
use moldau_broker::storage::{FetchSlice, LogConfig};

/// One v2 batch of `n` records with timestamps `ts, ts+1, ...`.
pub fn batch(n: usize, ts: i64) -> Vec<u8> {
    batch_with(n, ts, Compression::None, 16)
}

/// One v2 batch of `n` records (keys `k0`, `k1`, …, values of
/// `value_len` bytes) with timestamps `ts, ts+1, ...`.
pub fn batch_with(n: usize, ts: i64, compression: Compression, value_len: usize) -> Vec<u8> {
    let v = keyed_batch(
        (0..n).map(|i| (ts + i as i64, vec![b'x'; value_len])),
        compression,
    );
    assert_eq!(
        BatchHeader::parse(&v).expect("one batch").total_size(),
        v.len()
    );
    v
}

/// One v2 batch whose records (offsets 0..) carry exactly `timestamps`.
pub fn batch_with_timestamps(timestamps: &[i64], compression: Compression) -> Vec<u8> {
    keyed_batch(
        timestamps.iter().map(|&ts| (ts, b"v".to_vec())),
        compression,
    )
}

/// One batch of `(timestamp, value)` records with keys `k0`, `k1`, ….
fn keyed_batch(records: impl Iterator<Item = (i64, Vec<u8>)>, compression: Compression) -> Vec<u8> {
    BatchBuilder::new()
        .compression(compression)
        .records(records.enumerate().map(|(i, (ts, value))| {
            (
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(value)),
                ts,
            )
        }))
        .encode()
        .expect("encode")
}

pub fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 128,
        segment_index_bytes: 4096,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

pub fn slice_bytes(s: &FetchSlice) -> Vec<u8> {
    let mut buf = vec![0u8; s.len as usize];
    s.file
        .read_exact_at(&mut buf, s.position)
        .expect("read slice");
    buf
}

/// Splits bytes into batch headers, asserting they are whole batches.
pub fn headers(bytes: &[u8]) -> Vec<BatchHeader> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let h = BatchHeader::parse(&bytes[pos..]).expect("batch header");
        assert!(
            pos + h.total_size() <= bytes.len(),
            "partial batch in slice"
        );
        out.push(h);
        pos += h.total_size();
    }
    out
}

pub fn decode(bytes: &[u8]) -> Vec<RecordSet> {
    RecordBatchDecoder::decode_all(&mut Bytes::copy_from_slice(bytes)).expect("decode")
}

pub fn copy_dir(from: &Path, to: &Path) {
    if to.exists() {
        fs::remove_dir_all(to).expect("clear");
    }
    fs::create_dir_all(to).expect("mkdir");
    for e in fs::read_dir(from).expect("ls") {
        let e = e.expect("entry");
        fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

pub fn files_with_suffix(dir: &Path, suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    v.sort();
    v
}
