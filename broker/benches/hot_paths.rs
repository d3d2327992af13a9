//! Criterion micro-benchmarks of the broker's per-request hot paths:
//! batch validation (headers, and every record, compressed or not), log append, offset-index lookup (through
//! `PartitionLog::read`), Produce request decode / response encode and Fetch
//! request decode / response encode.
//!
//! Run: `cargo bench -p moldau-broker --bench hot_paths` (quick defaults:
//! 1 s warm-up, 3 s measurement, 30 samples; override on the command line,
//! e.g. `-- --measurement-time 10`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::Compression;
use moldau_broker::handlers::encode_response;
use moldau_broker::protocol::fetch_encode::{
    encode_fetch_response, FetchOut, PartitionOut, TopicOut,
};
use moldau_broker::storage::batch::{validate_batches, validate_records, BatchBuilder};
use moldau_broker::storage::{LogConfig, PartitionLog};

/// A plain batch of keyless records with these values (CreateTime from
/// 1,700,000,000,000), compressed with `compression`.
fn keyless(values: impl IntoIterator<Item = Bytes>, compression: Compression) -> BatchBuilder {
    BatchBuilder::new().compression(compression).records(
        values
            .into_iter()
            .enumerate()
            .map(|(i, value)| (None, Some(value), 1_700_000_000_000 + i as i64)),
    )
}

/// One v2 batch of `n` records of `value_len` bytes each (no keys).
fn batch(n: usize, value_len: usize, compression: Compression) -> Vec<u8> {
    let value: Vec<u8> = (0..value_len).map(|i| b"moldau stream "[i % 14]).collect();
    keyless(std::iter::repeat_n(Bytes::from(value), n), compression)
        .encode()
        .expect("encode batch")
}

/// One v2 batch of `n` records of `value_len` text-like bytes each (words
/// and numbers, which lz4 compresses about 2×), lz4-compressed as
/// librdkafka and the Java client frame it: independent 64 KiB blocks,
/// fast mode, no block or content checksums. (`batch` uses the `lz4`
/// crate's defaults, both checksums on, and one repeated value.)
fn batch_as_producers_send_it(n: usize, value_len: usize) -> Vec<u8> {
    use std::io::Write;
    const WORDS: &[&str] = &[
        "order", "user", "status", "shipped", "amount", "item", "region",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let values = (0..n).map(|_| {
        let mut value = Vec::with_capacity(value_len + 8);
        while value.len() < value_len {
            let r = next();
            if r % 3 == 0 {
                value.extend_from_slice((r % 1_000_000).to_string().as_bytes());
            } else {
                value.extend_from_slice(WORDS[(r >> 8) as usize % WORDS.len()].as_bytes());
            }
            value.push(b' ');
        }
        value.truncate(value_len);
        Bytes::from(value)
    });
    keyless(values, Compression::Lz4)
        .encode_with(|records: &mut BytesMut, out: &mut BytesMut, _| {
            let mut encoder = lz4::EncoderBuilder::new()
                .level(0)
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .block_checksum(lz4::liblz4::BlockChecksum::NoBlockChecksum)
                .build(Vec::new())?;
            encoder.write_all(records)?;
            let (compressed, done) = encoder.finish();
            done?;
            out.extend_from_slice(&compressed);
            Ok(())
        })
        .expect("encode batch")
}

/// The shapes measured: (label, records per batch, value bytes).
const SHAPES: &[(&str, usize, usize)] = &[("16x1KiB", 16, 1024), ("160x100B", 160, 100)];

fn bench_validate(c: &mut Criterion) {
    let mut g = c.benchmark_group("validate_batches");
    for &(label, n, len) in SHAPES {
        // A produce payload of 4 batches, as a client with linger sends them.
        let one = batch(n, len, Compression::None);
        let payload: Vec<u8> = one.iter().copied().cycle().take(one.len() * 4).collect();
        g.throughput(Throughput::Bytes(payload.len() as u64));
        g.bench_function(label, |b| {
            b.iter(|| validate_batches(black_box(&payload), 1 << 20).expect("valid"))
        });
    }
    g.finish();
}

/// Record-level validation (`validate_records`, run on every produced
/// batch) of batches as the benchmark's producers send them: ~1 MB of
/// values, uncompressed and lz4 (which is decompressed to be checked).
fn bench_validate_records(c: &mut Criterion) {
    let mut g = c.benchmark_group("validate_records");
    let shapes = [
        ("9000x100B", batch(9000, 100, Compression::None), 9000 * 100),
        (
            "9000x100B_lz4",
            batch(9000, 100, Compression::Lz4),
            9000 * 100,
        ),
        (
            "960x1KiB_lz4",
            batch(960, 1024, Compression::Lz4),
            960 * 1024,
        ),
        // As librdkafka sends them (one ~1 MB batch per partition and
        // request), and as the Java client does with its default
        // batch.size (16 KiB: 64 batches of 150 records in a 1 MB request).
        (
            "9000x100B_lz4_as_sent",
            batch_as_producers_send_it(9000, 100),
            9000 * 100,
        ),
        (
            "960x1KiB_lz4_as_sent",
            batch_as_producers_send_it(960, 1024),
            960 * 1024,
        ),
        (
            "64x150x100B_lz4_as_sent",
            batch_as_producers_send_it(150, 100).repeat(64),
            64 * 150 * 100,
        ),
    ];
    for (label, payload, value_bytes) in shapes {
        let headers = validate_batches(&payload, 2 << 20).expect("valid batches");
        g.throughput(Throughput::Bytes(value_bytes as u64));
        g.bench_function(label, |b| {
            b.iter(|| validate_records(black_box(&payload), &headers, false).expect("valid"))
        });
    }
    g.finish();
}

fn bench_append(c: &mut Criterion) {
    let mut g = c.benchmark_group("partition_log_append");
    for &(label, n, len) in SHAPES {
        let template = batch(n, len, Compression::None);
        g.throughput(Throughput::Bytes(template.len() as u64));
        g.bench_function(label, |b| {
            // A fresh log per sample, so the temp dir never grows beyond one
            // sample's appends (page cache only: no fsync, as in the broker).
            b.iter_custom(|iters| {
                let dir = tempfile::tempdir().expect("tempdir");
                let mut log =
                    PartitionLog::open(dir.path().join("bench-0"), LogConfig::default(), 0)
                        .expect("open log");
                let buf = template.clone();
                let start = Instant::now();
                for _ in 0..iters {
                    log.append(black_box(&buf), 0, 1_700_000_000_000)
                        .expect("append");
                }
                start.elapsed()
            })
        });
    }
    g.finish();
}

fn bench_read(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log =
        PartitionLog::open(dir.path().join("read-0"), LogConfig::default(), 0).expect("open log");
    // 20 000 batches of 16 records (320 000 offsets, ~11 MB): index entries
    // every 4 KiB as configured by default.
    let b16 = batch(16, 32, Compression::None);
    for _ in 0..20_000 {
        log.append(&b16, 0, 1_700_000_000_000).expect("append");
    }
    let end = log.log_end_offset();
    let mut g = c.benchmark_group("partition_log_read");
    // Random offset, then the slice a fetch would send: a small max_bytes
    // measures the index lookup (plus the scan to the batch); 1 MiB (the
    // consumers' default max.partition.fetch.bytes) adds the walk over the
    // batch headers that sizes the slice.
    for (label, max_bytes) in [
        ("random_offset_max_4KiB", 4u64 << 10),
        ("random_offset_max_1MiB", 1 << 20),
    ] {
        g.bench_function(label, |b| {
            let mut state: u64 = 0x2545_f491_4f6c_dd1d;
            b.iter(|| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let offset = (state % end as u64) as i64;
                let slice = log.read(black_box(offset), max_bytes, end).expect("read");
                black_box(slice.len)
            })
        });
    }
    g.finish();
}

fn produce_request(topics: usize, batch_bytes: &Bytes) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(30_000)
        .with_topic_data(
            (0..topics)
                .map(|t| {
                    TopicProduceData::default()
                        .with_name(TopicName(StrBytes::from_string(format!("bench-topic-{t}"))))
                        .with_partition_data(vec![PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(batch_bytes.clone()))])
                })
                .collect(),
        )
}

fn bench_produce_codec(c: &mut Criterion) {
    const VERSION: i16 = 9;
    let mut g = c.benchmark_group("produce");
    let records = Bytes::from(batch(16, 1024, Compression::None));
    let mut wire = BytesMut::new();
    produce_request(1, &records)
        .encode(&mut wire, VERSION)
        .expect("encode request");
    let wire = wire.freeze();
    g.throughput(Throughput::Bytes(wire.len() as u64));
    g.bench_function("request_decode_v9_16KiB", |b| {
        b.iter(|| {
            let mut buf = wire.clone();
            ProduceRequest::decode(black_box(&mut buf), VERSION).expect("decode")
        })
    });
    let response = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
        .with_name(TopicName(StrBytes::from_static_str("bench-topic-0")))
        .with_partition_responses(vec![PartitionProduceResponse::default()
            .with_index(0)
            .with_base_offset(123_456)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(0)])]);
    g.throughput(Throughput::Elements(1));
    g.bench_function("response_encode_v9", |b| {
        b.iter(|| {
            encode_response(ApiKey::Produce, VERSION, 7, black_box(&response)).expect("encode")
        })
    });
    g.finish();
}

fn bench_fetch_codec(c: &mut Criterion) {
    const VERSION: i16 = 12;
    let mut g = c.benchmark_group("fetch");
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_topics(
            (0..4)
                .map(|t| {
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(format!("bench-topic-{t}"))))
                        .with_partitions(
                            (0..4)
                                .map(|p| {
                                    FetchPartition::default()
                                        .with_partition(p)
                                        .with_fetch_offset(1_000_000)
                                        .with_partition_max_bytes(1 << 20)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    let mut wire = BytesMut::new();
    request.encode(&mut wire, VERSION).expect("encode request");
    let wire = wire.freeze();
    g.bench_function("request_decode_v12_4x4", |b| {
        b.iter(|| {
            let mut buf = wire.clone();
            FetchRequest::decode(black_box(&mut buf), VERSION).expect("decode")
        })
    });

    // A response naming 4 topics x 4 partitions, each with a file region.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log =
        PartitionLog::open(dir.path().join("fetch-0"), LogConfig::default(), 0).expect("open");
    let b16 = batch(16, 1024, Compression::None);
    for _ in 0..64 {
        log.append(&b16, 0, 1_700_000_000_000).expect("append");
    }
    let slice = log.read(0, 1 << 20, log.log_end_offset()).expect("read");
    let out = FetchOut {
        throttle_time_ms: 0,
        error_code: 0,
        session_id: 0,
        topics: (0..4)
            .map(|t| TopicOut {
                name: format!("bench-topic-{t}"),
                partitions: (0..4)
                    .map(|p| PartitionOut {
                        index: p,
                        error_code: 0,
                        high_watermark: 1024,
                        last_stable_offset: 1024,
                        log_start_offset: 0,
                        aborted_transactions: None,
                        records: Some(slice.clone()),
                        diverging_epoch: None,
                        preferred_read_replica: -1,
                    })
                    .collect(),
            })
            .collect(),
    };
    g.bench_function("response_encode_v12_4x4", |b| {
        b.iter(|| encode_fetch_response(7, VERSION, black_box(&out)))
    });
    g.finish();
}

fn quick() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = quick();
    targets = bench_validate, bench_validate_records, bench_append, bench_read, bench_produce_codec, bench_fetch_codec
}
criterion_main!(benches);
