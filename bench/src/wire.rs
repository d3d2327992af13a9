//! The wire load generator: `wire-produce` and `wire-consume` speak the
//! Kafka protocol directly (the `kafka-protocol` codec over one blocking TCP
//! connection) instead of through librdkafka, so that the client costs the
//! machine as little as possible and the brokers, not the client, set the
//! rate.
//!
//! Why it exists: on the benchmark's 2-core machine librdkafka needs about
//! 6 CPU-seconds per GiB to produce 100 B records and about 4 to compress
//! 1 KiB records with lz4 on its one broker thread, so in those
//! configurations the client leaves the brokers a fraction of the machine
//! and any two brokers measure alike. This generator does per request what
//! a producer's network thread does — frame a ready batch, write it, read
//! and check the answer — and leaves out what the application side of a
//! client does per record (serialising, batching, compressing), because
//! that work is the client's whatever broker it talks to.
//!
//! - `wire-produce` encodes a pool of distinct record batches once (values
//!   from the same text-like pool as `produce`, no keys, CreateTime now,
//!   optionally lz4-compressed, about `--batch-bytes` uncompressed each,
//!   librdkafka's `batch.size` of the other producer), then sends them to
//!   partition 0 in turn, Produce v9, up to `--in-flight` requests
//!   outstanding on the connection. Every response is checked (correlation
//!   id, error code, increasing base offsets); latency is per request, from
//!   its write to its response.
//! - `wire-consume` reads partitions 0..`--partitions` from offset 0 with
//!   Fetch v12 over `--consumers` connections (connection k the partitions
//!   p with p mod N = k, as `consume`), one fetch outstanding on each (as a
//!   consumer's one fetch per broker), full fetches without a session (as
//!   librdkafka), with librdkafka's defaults for the limits (1 MiB per
//!   partition, 50 MiB per response, 500 ms max wait). Every batch's CRC-32C is verified and its offsets must follow
//!   the previous batch's; records are counted from the batch headers, and
//!   bytes are the records' value bytes (`--size` each, as produced), so
//!   MB/s means what it means for `consume`. Records are not decompressed
//!   or split out: the CRC covers every byte the broker sent.
//!
//! Both print one JSON object with the same keys as `produce`/`consume`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::sync_channel;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bytes::{BufMut, Bytes, BytesMut};
use clap::Parser;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use serde_json::json;
use socket2::SockRef;

use crate::{
    check_loopback, payload_pool, pct_ms, Acks, Codec, ConsumeLoad, ConsumeShared, Pace,
    ProduceLoad,
};

const PRODUCE_VERSION: i16 = 9;
const FETCH_VERSION: i16 = 12;
/// Distinct batches sent in turn: enough that no two requests in flight
/// carry the same bytes.
const POOL_BATCHES: usize = 16;
/// Bytes of a v2 batch before its first record.
const BATCH_HEADER: usize = 61;

#[derive(Parser)]
pub struct WireProduceArgs {
    // `--count` is rounded up to whole batches.
    #[command(flatten)]
    load: ProduceLoad,
    /// Uncompressed bytes per batch (librdkafka's `batch.size` in `produce`).
    #[arg(long, default_value_t = 1_000_000)]
    batch_bytes: usize,
    /// Produce requests outstanding on the connection.
    #[arg(long, default_value_t = 5)]
    in_flight: usize,
    /// Records per second, paced (0: as fast as the broker answers). With
    /// `--batch-bytes` at most the record size, each request carries one
    /// record: the ack latency at a fixed rate, without a client's threads
    /// between the application and the socket.
    #[arg(long, default_value_t = 0)]
    rate: u64,
}

#[derive(Parser)]
pub struct WireConsumeArgs {
    #[command(flatten)]
    load: ConsumeLoad,
    /// Value size of every record (as produced), for MB/s.
    #[arg(long)]
    size: usize,
    /// `max.partition.fetch.bytes` (librdkafka's default).
    #[arg(long, default_value_t = 1_048_576)]
    partition_max_bytes: i32,
    /// Partitions 0..P are read.
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Connections reading in parallel (one thread each), connection k the
    /// partitions p with p mod N = k.
    #[arg(long, default_value_t = 1)]
    consumers: i32,
}

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.into()))
}

/// One request frame (length prefix included) with correlation id 0; the
/// id sits at bytes 8..12 (length 4, api key 2, api version 2).
fn frame<Req: Encodable>(api: ApiKey, version: i16, req: &Req) -> Result<BytesMut> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(0)
        .with_client_id(Some(StrBytes::from_static_str("moldau-bench-wire")));
    let mut body = BytesMut::new();
    header.encode(&mut body, api.request_header_version(version))?;
    req.encode(&mut body, version)?;
    let mut out = BytesMut::with_capacity(body.len() + 4);
    out.put_i32(i32::try_from(body.len())?);
    out.extend_from_slice(&body);
    Ok(out)
}

fn set_correlation_id(frame: &mut [u8], id: i32) {
    frame[8..12].copy_from_slice(&id.to_be_bytes());
}

/// Reads a connection's responses into one buffer, reused once the previous
/// response (and every `Bytes` cut from it) is dropped. A fresh zeroed
/// buffer per response cost the 1,000-partition consumers a quarter of
/// their CPU at 50 MiB fetches (the allocator's fresh pages cleared by the
/// kernel, then zeroed again), CPU the brokers under test share; reading
/// into the spare capacity of a reused buffer leaves only the first touch
/// of its pages, once per connection and size.
#[derive(Default)]
struct ResponseReader {
    buf: BytesMut,
}

impl ResponseReader {
    /// The body of the next response (after its header), checked to answer
    /// request `id`.
    fn read(
        &mut self,
        stream: &mut TcpStream,
        api: ApiKey,
        version: i16,
        id: i32,
    ) -> Result<Bytes> {
        let mut len = [0u8; 4];
        stream.read_exact(&mut len).context("reading a response")?;
        let len = usize::try_from(i32::from_be_bytes(len)).context("negative response length")?;
        self.buf.clear();
        self.buf.reserve(len);
        let socket = SockRef::from(&*stream);
        while self.buf.len() < len {
            let want = len - self.buf.len();
            let n = match socket.recv(&mut self.buf.spare_capacity_mut()[..want]) {
                Ok(0) => bail!("the broker closed the connection in a response"),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("reading a response body"),
            };
            // SAFETY: `recv` initialised the first `n` bytes of the spare
            // capacity, and `n <= want` bytes fit in it (reserved above).
            unsafe { self.buf.set_len(self.buf.len() + n) };
        }
        let mut body = self.buf.split_to(len).freeze();
        let header = ResponseHeader::decode(&mut body, api.response_header_version(version))?;
        ensure!(
            header.correlation_id == id,
            "response {} where {id} was due",
            header.correlation_id
        );
        Ok(body)
    }
}

fn connect(bootstrap: &str) -> Result<TcpStream> {
    check_loopback(bootstrap)?;
    let server = bootstrap.split(',').next().unwrap_or(bootstrap);
    let stream = TcpStream::connect(server).with_context(|| format!("connecting to {server}"))?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    Ok(stream)
}

/// Records of one batch: as many `size`-byte values as fit `batch_bytes`.
fn records_per_batch(size: usize, batch_bytes: usize) -> usize {
    // A record without key or headers: its value plus at most 11 bytes of
    // lengths, attributes and deltas.
    (batch_bytes.saturating_sub(BATCH_HEADER) / (size + 11)).max(1)
}

/// One v2 batch of `values` (no keys, no producer id) from `base_offset`,
/// every record stamped `timestamp` (CreateTime).
fn encode_batch<'a>(
    values: impl Iterator<Item = &'a [u8]>,
    base_offset: i64,
    timestamp: i64,
    compression: Compression,
) -> Result<Bytes> {
    let records: Vec<Record> = values
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: base_offset + i as i64,
            // The codec starts a new batch wherever offset - sequence
            // changes: a base sequence of -1 (no producer) follows on.
            sequence: i as i32 - 1,
            timestamp,
            key: None,
            value: Some(Bytes::copy_from_slice(v)),
            headers: Default::default(),
        })
        .collect();
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode_with_custom_compression(
        &mut batch,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
        Some(compress_as_librdkafka),
    )?;
    Ok(batch.freeze())
}

/// Compresses a batch's records as librdkafka's producer does (the other
/// load generator): an lz4 frame of independent 64 KiB blocks, fast mode
/// (level 0), with neither block nor content checksums
/// (`rdkafka_lz4.c`: only `blockMode` is set in its preferences). The
/// codec's own lz4 encoder uses high-compression level 4 and the `lz4`
/// crate's defaults, both checksums on: a broker that checks them
/// (Moldau's lz4 decoder does; the batch CRC already covers the bytes)
/// would spend a fifth of its produce CPU on work no real client asks of
/// it.
fn compress_as_librdkafka(
    records: &mut BytesMut,
    out: &mut BytesMut,
    compression: Compression,
) -> Result<()> {
    match compression {
        Compression::None => out.extend_from_slice(records),
        Compression::Lz4 => {
            let mut encoder = lz4::EncoderBuilder::new()
                .level(0)
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .block_checksum(lz4::liblz4::BlockChecksum::NoBlockChecksum)
                .build(out.writer())?;
            encoder.write_all(records)?;
            let (_, done) = encoder.finish();
            done?;
        }
        other => bail!("the wire load generator does not compress with {other:?}"),
    }
    Ok(())
}

/// `POOL_BATCHES` Produce request frames for partition 0 of `topic`, each
/// with one batch of `per_batch` records.
fn produce_frames(a: &WireProduceArgs, per_batch: usize) -> Result<Vec<BytesMut>> {
    let values = payload_pool(a.load.size, 4096);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    let compression = match a.load.compression {
        Codec::None => Compression::None,
        Codec::Lz4 => Compression::Lz4,
    };
    let acks = match a.load.acks {
        Acks::One => 1,
        Acks::All => -1,
    };
    (0..POOL_BATCHES)
        .map(|b| {
            let batch = encode_batch(
                (0..per_batch).map(|i| values[(b * per_batch + i) % values.len()].as_slice()),
                0,
                now_ms,
                compression,
            )?;
            let req = ProduceRequest::default()
                .with_acks(acks)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(topic_name(&a.load.topic))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch))])]);
            frame(ApiKey::Produce, PRODUCE_VERSION, &req)
        })
        .collect()
}

/// What the reading half of `wire_produce` saw.
#[derive(Default)]
struct Acked {
    batches: u64,
    latencies_us: Vec<u32>,
    last_ack: Option<Instant>,
    last_base_offset: i64,
}

pub fn wire_produce(a: &WireProduceArgs) -> Result<()> {
    ensure!(a.in_flight >= 1, "--in-flight must be at least 1");
    let per_batch = records_per_batch(a.load.size, a.batch_bytes);
    let mut frames = produce_frames(a, per_batch)?;
    let wire_bytes: usize = frames.iter().map(|f| f.len()).sum::<usize>() / frames.len();
    let mut writer = connect(&a.load.bootstrap)?;
    let mut reader = writer.try_clone()?;
    // A request is outstanding from its write until the reader has taken
    // its entry and read its response: a channel of in_flight - 1 slots
    // plus the one entry the reader holds bound that to `in_flight`.
    let (tx, rx) = sync_channel::<(i32, Instant)>(a.in_flight - 1);
    let read = thread::spawn(move || -> Result<Acked> {
        let mut acked = Acked {
            last_base_offset: -1,
            ..Acked::default()
        };
        let mut responses = ResponseReader::default();
        while let Ok((id, sent)) = rx.recv() {
            let mut body = responses.read(&mut reader, ApiKey::Produce, PRODUCE_VERSION, id)?;
            let resp = ProduceResponse::decode(&mut body, PRODUCE_VERSION)?;
            let now = Instant::now();
            let p = resp
                .responses
                .first()
                .and_then(|t| t.partition_responses.first())
                .context("a produce response without its partition")?;
            if p.error_code != 0 {
                bail!("produce request {id}: error code {}", p.error_code);
            }
            ensure!(
                p.base_offset > acked.last_base_offset,
                "base offset {} after {}",
                p.base_offset,
                acked.last_base_offset
            );
            acked.last_base_offset = p.base_offset;
            acked.batches += 1;
            acked
                .latencies_us
                .push(u32::try_from(now.duration_since(sent).as_micros()).unwrap_or(u32::MAX));
            acked.last_ack = Some(now);
        }
        Ok(acked)
    });
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(a.load.max_seconds);
    let batches_wanted = a.load.count.div_ceil(per_batch as u64);
    let pace = (a.rate > 0).then(|| Pace::per_second(a.rate as f64 / per_batch as f64));
    let mut sent = 0u64;
    let mut write_error = None;
    while sent < batches_wanted && Instant::now() < deadline {
        if let Some(pace) = &pace {
            pace.wait_for(sent);
        }
        let f = &mut frames[sent as usize % POOL_BATCHES];
        let id = i32::try_from(sent % i32::MAX as u64)?;
        set_correlation_id(f, id);
        // The entry goes first: the response can come before write_all returns.
        if tx.send((id, Instant::now())).is_err() {
            break; // the reader stopped on an error, reported below
        }
        if let Err(e) = writer.write_all(f) {
            write_error = Some(e);
            break;
        }
        sent += 1;
    }
    let send_seconds = start.elapsed().as_secs_f64();
    drop(tx);
    let acked = read
        .join()
        .map_err(|_| anyhow::anyhow!("the response reader panicked"))??;
    if let Some(e) = write_error {
        bail!("writing a produce request: {e}");
    }
    let records = acked.batches * per_batch as u64;
    let bytes = records * a.load.size as u64;
    let secs = acked
        .last_ack
        .map_or(1e-9, |t| t.duration_since(start).as_secs_f64());
    let mut lat = acked.latencies_us;
    lat.sort_unstable();
    println!(
        "{}",
        json!({
            "kind": "wire-produce",
            "topic": a.load.topic,
            "size": a.load.size,
            "acks": a.load.acks.as_str(),
            "compression": a.load.compression.as_str(),
            "records_per_batch": per_batch,
            "request_bytes": wire_bytes,
            "in_flight": a.in_flight,
            "rate": a.rate,
            "sent": sent * per_batch as u64,
            "acked": records,
            "failed": (sent - acked.batches) * per_batch as u64,
            "bytes": bytes,
            "seconds": secs,
            "send_seconds": send_seconds,
            "records_per_sec": records as f64 / secs,
            "mb_per_sec": bytes as f64 / secs / 1e6,
            "lat_p50_ms": pct_ms(&lat, 50.0),
            "lat_p99_ms": pct_ms(&lat, 99.0),
            "lat_p999_ms": pct_ms(&lat, 99.9),
            "lat_max_ms": lat.last().map(|v| f64::from(*v) / 1000.0),
        })
    );
    ensure!(
        acked.batches == sent,
        "{} of {sent} requests acknowledged",
        acked.batches
    );
    Ok(())
}

/// Walks the v2 batches of one fetch response's records from `next` (the
/// offset fetched): verifies each batch's CRC-32C and that its offsets
/// follow on; returns (records, the offset to fetch next). A batch cut
/// short at the end (the fetch limit) is left for the next fetch.
fn walk_batches(mut records: &[u8], mut next: i64) -> Result<(u64, i64)> {
    let mut count = 0u64;
    while records.len() >= 12 {
        let base_offset = i64::from_be_bytes(records[0..8].try_into()?);
        let len = i32::from_be_bytes(records[8..12].try_into()?);
        let total = 12 + usize::try_from(len).context("negative batch length")?;
        if records.len() < total {
            break;
        }
        let batch = &records[..total];
        ensure!(
            total >= BATCH_HEADER,
            "batch of {total} bytes at offset {base_offset}"
        );
        ensure!(
            batch[16] == 2,
            "batch magic {} at offset {base_offset}",
            batch[16]
        );
        let crc = u32::from_be_bytes(batch[17..21].try_into()?);
        ensure!(
            crc32c::crc32c(&batch[21..]) == crc,
            "batch at offset {base_offset}: CRC mismatch"
        );
        let last_delta = i32::from_be_bytes(batch[23..27].try_into()?);
        let n = i32::from_be_bytes(batch[57..61].try_into()?);
        ensure!(
            base_offset == next,
            "batch at offset {base_offset} where {next} was next"
        );
        count += u64::try_from(n).context("negative record count")?;
        next = base_offset + i64::from(last_delta) + 1;
        records = &records[total..];
    }
    Ok((count, next))
}

pub fn wire_consume(a: &WireConsumeArgs) -> Result<()> {
    ensure!(
        a.consumers >= 1 && a.partitions >= a.consumers,
        "--consumers must be at least 1 and at most --partitions"
    );
    let readers = (0..a.consumers)
        .map(|k| {
            let partitions: Vec<i32> = (k..a.partitions).step_by(a.consumers as usize).collect();
            Ok((connect(&a.load.bootstrap)?, partitions))
        })
        .collect::<Result<Vec<_>>>()?;
    let shared = ConsumeShared::new();
    let fetches = AtomicU64::new(0);
    let deadline = shared.base + Duration::from_secs_f64(a.load.max_seconds);
    ConsumeShared::run_each(readers, |(stream, partitions)| {
        fetch_partitions(a, stream, &partitions, &shared, &fetches, deadline)
    })?;
    let t = shared.totals();
    println!(
        "{}",
        json!({
            "kind": "wire-consume",
            "topic": a.load.topic,
            "partitions": a.partitions,
            "consumers": a.consumers,
            "records": t.records,
            "expected": a.load.count,
            "fetches": fetches.load(Ordering::Relaxed),
            "bytes": t.bytes,
            "seconds": t.seconds,
            "first_record_after_s": t.first_record_after_s,
            "records_per_sec": t.bytes as f64 / a.size.max(1) as f64 / t.seconds,
            "mb_per_sec": t.bytes as f64 / t.seconds / 1e6,
        })
    );
    a.load.check_complete(t.records)
}

/// One connection's loop: full fetches of `partitions` from offset 0 (no
/// fetch session, as librdkafka), one outstanding, until all connections
/// together have read `--count` records or the deadline passes.
fn fetch_partitions(
    a: &WireConsumeArgs,
    mut stream: TcpStream,
    partitions: &[i32],
    shared: &ConsumeShared,
    fetches: &AtomicU64,
    deadline: Instant,
) -> Result<()> {
    let mut next = vec![0i64; partitions.len()];
    let mut responses = ResponseReader::default();
    let mut id = 0i32;
    while shared.wanted(a.load.count, deadline) {
        let req = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(52_428_800)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(&a.load.topic))
                .with_partitions(
                    partitions
                        .iter()
                        .zip(&next)
                        .map(|(&p, &offset)| {
                            FetchPartition::default()
                                .with_partition(p)
                                .with_fetch_offset(offset)
                                .with_partition_max_bytes(a.partition_max_bytes)
                        })
                        .collect(),
                )]);
        id = id.wrapping_add(1) & i32::MAX;
        let mut f = frame(ApiKey::Fetch, FETCH_VERSION, &req)?;
        set_correlation_id(&mut f, id);
        stream.write_all(&f).context("writing a fetch")?;
        let mut body = responses.read(&mut stream, ApiKey::Fetch, FETCH_VERSION, id)?;
        let resp = FetchResponse::decode(&mut body, FETCH_VERSION)?;
        fetches.fetch_add(1, Ordering::Relaxed);
        ensure!(resp.error_code == 0, "fetch error code {}", resp.error_code);
        let mut n = 0u64;
        for p in resp.responses.iter().flat_map(|t| &t.partitions) {
            ensure!(
                p.error_code == 0,
                "partition {} fetch error code {}",
                p.partition_index,
                p.error_code
            );
            let slot = partitions
                .iter()
                .position(|&q| q == p.partition_index)
                .with_context(|| format!("partition {} was not asked for", p.partition_index))?;
            let (got, after) = walk_batches(p.records.as_deref().unwrap_or_default(), next[slot])?;
            next[slot] = after;
            n += got;
        }
        if n > 0 {
            // value bytes, `--size` each (as produced)
            shared.arrived(n, n * a.size as u64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base_offset: i64, n: usize) -> Vec<u8> {
        let value = b"value".as_slice();
        encode_batch(
            std::iter::repeat_n(value, n),
            base_offset,
            1,
            Compression::None,
        )
        .unwrap()
        .to_vec()
    }

    /// A response frame for a v0 response header: size, correlation id,
    /// body.
    fn response_frame(id: i32, body: &[u8]) -> Vec<u8> {
        let mut f = i32::try_from(body.len() + 4)
            .unwrap()
            .to_be_bytes()
            .to_vec();
        f.extend(id.to_be_bytes());
        f.extend(body);
        f
    }

    #[test]
    fn the_response_reader_reuses_its_buffer_across_split_responses() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let big: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        let sent = big.clone();
        let server = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let first = response_frame(1, b"small");
            // In pieces, the size field itself split, so reads come short.
            for piece in first.chunks(3) {
                s.write_all(piece).unwrap();
                s.flush().unwrap();
                thread::sleep(Duration::from_millis(2));
            }
            s.write_all(&response_frame(2, &sent)).unwrap();
            s.write_all(&response_frame(9, b"late")).unwrap();
        });
        let mut stream = TcpStream::connect(addr).unwrap();
        let mut reader = ResponseReader::default();
        // Produce v3 answers with a v0 header: the correlation id alone.
        let v3 = |r: &mut ResponseReader, s: &mut TcpStream, id| r.read(s, ApiKey::Produce, 3, id);
        assert_eq!(&v3(&mut reader, &mut stream, 1).unwrap()[..], b"small");
        assert_eq!(&v3(&mut reader, &mut stream, 2).unwrap()[..], &big[..]);
        let wrong = v3(&mut reader, &mut stream, 3).unwrap_err().to_string();
        assert!(wrong.contains("response 9 where 3 was due"), "{wrong}");
        server.join().unwrap();
        let closed = v3(&mut reader, &mut stream, 4);
        assert!(closed.is_err(), "a closed connection must be an error");
    }

    #[test]
    fn walks_whole_batches_and_leaves_a_cut_one() {
        let mut buf = batch(0, 3);
        buf.extend(batch(3, 2));
        let third = batch(5, 4);
        buf.extend(&third[..third.len() - 1]);
        assert_eq!(walk_batches(&buf, 0).unwrap(), (5, 5));
    }

    #[test]
    fn rejects_a_gap_and_a_bad_crc() {
        let mut buf = batch(0, 3);
        buf.extend(batch(4, 1));
        assert!(walk_batches(&buf, 0)
            .unwrap_err()
            .to_string()
            .contains("4 where 3"));
        let mut bad = batch(0, 3);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(walk_batches(&bad, 0)
            .unwrap_err()
            .to_string()
            .contains("CRC"));
    }

    #[test]
    fn lz4_batches_are_framed_as_librdkafka_frames_them() {
        let values: Vec<Vec<u8>> = (0..500)
            .map(|i| format!("value {i}").into_bytes())
            .collect();
        let b = encode_batch(values.iter().map(Vec::as_slice), 0, 7, Compression::Lz4).unwrap();
        assert_eq!(i16::from_be_bytes([b[21], b[22]]) & 7, 3, "lz4 codec bits");
        let frame = &b[BATCH_HEADER..];
        assert_eq!(frame[..4], 0x184D_2204u32.to_le_bytes(), "lz4 frame magic");
        let flags = frame[4];
        assert_eq!(flags & 0x20, 0x20, "independent blocks");
        assert_eq!(flags & 0x10, 0, "no block checksums");
        assert_eq!(flags & 0x04, 0, "no content checksum");
        assert_eq!((frame[5] >> 4) & 7, 4, "64 KiB blocks");
        let mut bytes = b.clone();
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes).unwrap();
        let decoded: Vec<Vec<u8>> = set
            .records
            .iter()
            .map(|r| r.value.clone().unwrap().to_vec())
            .collect();
        assert_eq!(decoded, values);
    }

    #[test]
    fn batches_stay_under_the_batch_size() {
        for size in [100, 1024] {
            let per = records_per_batch(size, 1_000_000);
            let value = vec![b'x'; size];
            let b = encode_batch(
                std::iter::repeat_n(value.as_slice(), per),
                0,
                1,
                Compression::None,
            )
            .unwrap();
            assert!(
                b.len() <= 1_000_000,
                "{size} B: {per} records, {} bytes",
                b.len()
            );
            assert!(
                b.len() > 985_000,
                "{size} B: {per} records, only {} bytes",
                b.len()
            );
        }
    }
}
