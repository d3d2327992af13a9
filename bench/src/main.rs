//! `moldau-bench`: the load generator of the side-by-side benchmark
//! (`bench/run.sh`). It speaks only the Kafka protocol (librdkafka through
//! the `rdkafka` crate), so the very same binary and settings drive Moldau
//! and Apache Kafka.
//!
//! Every subcommand is bounded in record count *and* wall-clock time, stops
//! by itself and prints one JSON object on stdout:
//!
//! - `create-topic`: a topic with N partitions, replication factor R
//!   (default 1) and topic configs, ready once every partition has a leader
//!   and all R replicas in sync;
//! - `wait-cluster`: waits until the cluster's Metadata lists N brokers;
//! - `produce`: as fast as the client can (or paced, `--rate`), measuring
//!   throughput and the latency of every record from `send` to its delivery
//!   report (paced, a thread of its own serves the reports, so each is
//!   timestamped when it arrives); with `--keys N` records carry keys `key-0`..`key-(N-1)` in turn
//!   (a compacted topic's load), and `--samples-out FILE` writes each
//!   record's send time (Unix ms) and latency (µs) for windowed percentiles;
//!   with `--producers N --partitions P`, N producers (one client, so one
//!   connection, each) send in parallel, each over all P partitions in turn;
//! - `consume`: a fresh consumer reads the topic from the beginning; with
//!   `--consumers N --partitions P`, N consumers (one connection each) read
//!   P partitions, consumer k the partitions p with p mod N = k, each
//!   from its partitions' log start offsets (looked up before any consumer
//!   is assigned);
//! - `produce` and `consume` also report their busiest thread (see
//!   `threads`): how much of the run librdkafka's one thread per broker
//!   connection, or a sending thread, was on a CPU;
//! - `wait-ready`: returns once one ListOffsets (latest) answers without
//!   error for every partition of a topic (a restarted broker is ready, as
//!   a client sees it);
//! - `e2e`: a paced producer and a consumer in one process; latency is the
//!   time from `send` to the consumer seeing the record (same clock);
//! - `txn-produce`: a transactional producer (transactions of N records,
//!   acks=all), throughput and `commit_transaction()` latency, the end
//!   offsets verified against what was committed (see `txn`);
//! - `tcp`: single-connection loopback TCP bandwidth (a machine limit);
//! - `wire-produce`, `wire-consume`: the same loads without librdkafka,
//!   from pre-encoded batches over the Kafka protocol (see `wire`), so that
//!   the client takes little of the machine.
//!
//! Only 127.0.0.0/8 addresses are accepted as bootstrap servers.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde_json::json;

mod threads;
mod txn;
mod wire;

/// The process's allocator, for Rust and (through mimalloc's `override`)
/// for librdkafka: see `Cargo.toml` for why the client needs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "Kafka-protocol load generator for bench/run.sh")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Acks {
    #[value(name = "1")]
    One,
    #[value(name = "all")]
    All,
}

impl Acks {
    fn as_str(self) -> &'static str {
        match self {
            Acks::One => "1",
            Acks::All => "all",
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Codec {
    None,
    Lz4,
}

impl Codec {
    fn as_str(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Lz4 => "lz4",
        }
    }
}

/// A produce load, as both load generators take it (`produce` and
/// `wire-produce`): where it goes, its records, and its bounds.
#[derive(clap::Args)]
struct ProduceLoad {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    #[arg(long)]
    topic: String,
    /// Record value size in bytes (no key).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    #[arg(long, value_enum, default_value = "1")]
    acks: Acks,
    #[arg(long, value_enum, default_value = "none")]
    compression: Codec,
    /// Stop after this many records…
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// …or after this many seconds, whichever comes first.
    #[arg(long, default_value_t = 10.0)]
    max_seconds: f64,
}

#[derive(Parser)]
struct ProduceArgs {
    #[command(flatten)]
    load: ProduceLoad,
    /// Producer `linger.ms`.
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// Records carry keys `key-0`..`key-(N-1)` in turn (0: no key).
    #[arg(long, default_value_t = 0)]
    keys: u64,
    /// Records per second (0: as fast as possible).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Writes `send_unix_ms latency_us` per acknowledged record here.
    #[arg(long)]
    samples_out: Option<std::path::PathBuf>,
    /// Producer clients sending in parallel (one thread and connection each);
    /// `--count` and `--rate` are totals shared among them.
    #[arg(long, default_value_t = 1)]
    producers: u64,
    /// Records go to partitions 0..P in turn (each producer starting at its
    /// own share of the range).
    #[arg(long, default_value_t = 1)]
    partitions: u64,
}

/// A consume load, as both load generators take it (`consume` and
/// `wire-consume`): where it reads from, and its bounds.
#[derive(clap::Args)]
struct ConsumeLoad {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    #[arg(long)]
    topic: String,
    /// Stop after this many records (in all)…
    #[arg(long)]
    count: u64,
    /// …or after this many seconds.
    #[arg(long, default_value_t = 30.0)]
    max_seconds: f64,
}

impl ConsumeLoad {
    /// Fails the run when fewer than `--count` records were read in time.
    fn check_complete(&self, records: u64) -> Result<()> {
        if records < self.count {
            bail!(
                "consumed {records} of {} records before the deadline",
                self.count
            );
        }
        Ok(())
    }
}

#[derive(Parser)]
struct ConsumeArgs {
    #[command(flatten)]
    load: ConsumeLoad,
    /// Partitions 0..P are read.
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Consumer clients reading in parallel (one thread and connection each),
    /// consumer k the partitions p with p mod N = k.
    #[arg(long, default_value_t = 1)]
    consumers: i32,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a topic; an existing topic is fine.
    CreateTopic {
        #[arg(long, default_value = "127.0.0.1:9092")]
        bootstrap: String,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        #[arg(long, default_value_t = 1)]
        replication_factor: i32,
        /// A topic config `key=value` (e.g. `min.insync.replicas=2`); repeatable.
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// Wait until the cluster's Metadata lists this many brokers.
    WaitCluster {
        #[arg(long, default_value = "127.0.0.1:9092")]
        bootstrap: String,
        #[arg(long)]
        brokers: usize,
        #[arg(long, default_value_t = 60.0)]
        max_seconds: f64,
    },
    /// Produce as fast as possible; throughput and per-record ack latency.
    Produce(ProduceArgs),
    /// Read partitions 0..P of a topic from the beginning; throughput.
    Consume(ConsumeArgs),
    /// Wait until ListOffsets answers for every partition of a topic.
    WaitReady {
        #[arg(long, default_value = "127.0.0.1:9092")]
        bootstrap: String,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        #[arg(long, default_value_t = 300.0)]
        max_seconds: f64,
    },
    /// Paced producer + consumer in one process; end-to-end latency.
    E2e {
        #[arg(long, default_value = "127.0.0.1:9092")]
        bootstrap: String,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 1024)]
        size: usize,
        #[arg(long, value_enum, default_value = "1")]
        acks: Acks,
        #[arg(long, value_enum, default_value = "none")]
        compression: Codec,
        /// Records per second.
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        /// Seconds of paced sending (after a one-record warm-up).
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
    /// Transactional produce (`transactional.id`, acks=all): throughput of
    /// committed records and `commit_transaction()` latency, the end
    /// offsets checked against the commits (see `txn`).
    TxnProduce(txn::TxnProduceArgs),
    /// Produce from pre-encoded batches, without librdkafka (see `wire`);
    /// `--count` is rounded up to whole batches.
    WireProduce(wire::WireProduceArgs),
    /// Read partition 0 from the beginning, without librdkafka (see `wire`).
    WireConsume(wire::WireConsumeArgs),
    /// Single-connection loopback TCP bandwidth (127.0.0.1).
    Tcp {
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Bytes per write/read call.
        #[arg(long, default_value_t = 1 << 20)]
        chunk: usize,
    },
    /// Loopback round trips at a fixed rate against a trivial echo thread:
    /// what waking an idle responder and then the idle requester costs on
    /// this machine with no work in between, to read the brokers'
    /// fixed-rate p99 against (a broker whose threads spin before parking
    /// can answer faster than it at the tail).
    Rtt {
        /// Round trips per second.
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        #[arg(long, default_value_t = 3000)]
        count: u64,
        /// Bytes each way.
        #[arg(long, default_value_t = 100)]
        size: usize,
    },
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::CreateTopic {
            bootstrap,
            topic,
            partitions,
            replication_factor,
            configs,
        } => create_topic(&bootstrap, &topic, partitions, replication_factor, &configs),
        Cmd::WaitCluster {
            bootstrap,
            brokers,
            max_seconds,
        } => wait_cluster(&bootstrap, brokers, max_seconds),
        Cmd::Produce(a) => produce(&a),
        Cmd::Consume(a) => consume(&a),
        Cmd::WaitReady {
            bootstrap,
            topic,
            partitions,
            max_seconds,
        } => wait_ready(&bootstrap, &topic, partitions, max_seconds),
        Cmd::E2e {
            bootstrap,
            topic,
            size,
            acks,
            compression,
            rate,
            seconds,
        } => e2e(&bootstrap, &topic, size, acks, compression, rate, seconds),
        Cmd::TxnProduce(a) => txn::txn_produce(&a),
        Cmd::WireProduce(a) => wire::wire_produce(&a),
        Cmd::WireConsume(a) => wire::wire_consume(&a),
        Cmd::Tcp { seconds, chunk } => tcp(seconds, chunk),
        Cmd::Rtt { rate, count, size } => rtt(rate, count, size),
    }
}

/// Refuses bootstrap servers outside 127.0.0.0/8.
fn check_loopback(bootstrap: &str) -> Result<()> {
    for server in bootstrap.split(',') {
        let host = server.rsplit_once(':').map_or(server, |(h, _)| h);
        let ip: std::net::Ipv4Addr = host
            .parse()
            .with_context(|| format!("bootstrap host {host:?} must be a 127.x.y.z address"))?;
        if !ip.is_loopback() {
            bail!("bootstrap host {ip} is outside 127.0.0.0/8");
        }
    }
    Ok(())
}

/// Extra librdkafka settings for every client of a run, `key=value` lines
/// (e.g. `security.protocol=SSL` and `ssl.ca.location=…` for a TLS
/// listener: bench/tls.py sets it).
const CLIENT_CONFIG_ENV: &str = "MOLDAU_BENCH_CLIENT_CONFIG";

fn base_config(bootstrap: &str) -> Result<ClientConfig> {
    check_loopback(bootstrap)?;
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "moldau-bench")
        .set("broker.address.family", "v4")
        .set("log_level", "3");
    if let Ok(extra) = std::env::var(CLIENT_CONFIG_ENV) {
        for line in extra.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (k, v) = line
                .split_once('=')
                .with_context(|| format!("{CLIENT_CONFIG_ENV}: {line:?} is not key=value"))?;
            c.set(k.trim(), v.trim());
        }
    }
    Ok(c)
}

fn create_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication_factor: i32,
    configs: &[String],
) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = base_config(bootstrap)?.create()?;
    let mut new = NewTopic::new(
        topic,
        partitions,
        TopicReplication::Fixed(replication_factor),
    );
    for kv in configs {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--config {kv:?} is not key=value"))?;
        new = new.set(k, v);
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = futures_executor::block_on(admin.create_topics([&new], &opts))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, code)) => bail!("create topic {t}: {code}"),
        }
    }
    // Wait until every partition has a leader and a full ISR in the metadata.
    let rf = usize::try_from(replication_factor.max(1)).unwrap_or(1);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let md = admin
            .inner()
            .fetch_metadata(Some(topic), Duration::from_secs(5))?;
        let ready = md.topics().iter().any(|t| {
            t.name() == topic
                && t.error().is_none()
                && !t.partitions().is_empty()
                && t.partitions()
                    .iter()
                    .all(|p| p.error().is_none() && p.leader() >= 0 && p.isr().len() >= rf)
        });
        if ready {
            break;
        }
        if Instant::now() > deadline {
            bail!("topic {topic}: no leader or ISR short of {rf} replicas after 30 s");
        }
        thread::sleep(Duration::from_millis(100));
    }
    println!(
        "{}",
        json!({"topic": topic, "partitions": partitions, "replication_factor": replication_factor})
    );
    Ok(())
}

fn wait_cluster(bootstrap: &str, brokers: usize, max_seconds: f64) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = base_config(bootstrap)?.create()?;
    let deadline = Instant::now() + Duration::from_secs_f64(max_seconds);
    loop {
        let seen = admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(5))
            .map(|md| md.brokers().len())
            .unwrap_or(0);
        if seen >= brokers {
            println!("{}", json!({"brokers": seen}));
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{seen} of {brokers} brokers in Metadata after {max_seconds} s");
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Record values: text-like bytes (words from a small vocabulary and
/// digits) so that lz4 has something realistic to do (~2× on this data),
/// unlike all-zero or random payloads.
fn payload_pool(size: usize, n: usize) -> Vec<Vec<u8>> {
    const WORDS: &[&str] = &[
        "order", "user", "id", "status", "shipped", "amount", "eur", "item", "sku", "created",
        "true", "false", "null", "region", "eu-west", "price", "quantity", "event", "click",
        "view", "session", "moldau", "kafka", "stream",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..n)
        .map(|_| {
            let mut v = Vec::with_capacity(size + 16);
            while v.len() < size {
                let r = next();
                if r % 3 == 0 {
                    v.extend_from_slice(format!("{}", r % 1_000_000).as_bytes());
                } else {
                    v.extend_from_slice(WORDS[(r as usize >> 8) % WORDS.len()].as_bytes());
                }
                v.push(if r % 5 == 0 { b',' } else { b' ' });
            }
            v.truncate(size);
            v
        })
        .collect()
}

/// Latencies in microseconds and delivery counters, fed by delivery reports.
struct Stats {
    base: Instant,
    latencies_us: Mutex<Vec<u32>>,
    /// `(send ns since base, latency µs)` per record, when asked for.
    samples: Option<Mutex<Vec<(u64, u32)>>>,
    acked: AtomicU64,
    acked_bytes: AtomicU64,
    failed: AtomicU64,
    last_ack_ns: AtomicU64,
}

impl Stats {
    fn new(base: Instant) -> Self {
        Self {
            base,
            latencies_us: Mutex::new(Vec::new()),
            samples: None,
            acked: AtomicU64::new(0),
            acked_bytes: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_ack_ns: AtomicU64::new(0),
        }
    }
    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }
}

struct Ctx(Arc<Stats>);

impl ClientContext for Ctx {}

impl ProducerContext for Ctx {
    /// Send time in nanoseconds since `Stats::base`.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_ns: usize) {
        let now = self.0.now_ns();
        match result {
            Ok(m) => {
                let us = now.saturating_sub(sent_ns as u64) / 1000;
                let us = us.min(u64::from(u32::MAX)) as u32;
                if let Ok(mut l) = self.0.latencies_us.lock() {
                    l.push(us);
                }
                if let Some(Ok(mut s)) = self.0.samples.as_ref().map(|s| s.lock()) {
                    s.push((sent_ns as u64, us));
                }
                self.0.acked.fetch_add(1, Ordering::Relaxed);
                self.0
                    .acked_bytes
                    .fetch_add(m.payload_len() as u64, Ordering::Relaxed);
                self.0.last_ack_ns.fetch_max(now, Ordering::Relaxed);
            }
            Err(_) => {
                self.0.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn producer_config(
    bootstrap: &str,
    acks: Acks,
    codec: Codec,
    linger_ms: u64,
) -> Result<ClientConfig> {
    let mut c = base_config(bootstrap)?;
    c.set("acks", acks.as_str())
        .set("compression.type", codec.as_str())
        .set("linger.ms", linger_ms.to_string())
        .set("enable.idempotence", "false")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.kbytes", "65536")
        .set("queue.buffering.max.messages", "1000000")
        .set("message.timeout.ms", "60000");
    Ok(c)
}

/// Percentile (nearest rank) of sorted microsecond samples, in milliseconds.
fn pct_ms(sorted: &[u32], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    Some(f64::from(sorted[i]) / 1000.0)
}

/// Serves `producer`'s delivery reports until `done`, blocked in
/// `poll` between them, so that a paced run timestamps each
/// acknowledgement when it arrives. Polling from the sending thread
/// between sends would timestamp it at the next poll (up to one send
/// interval late: 1 ms at 1000 records/s), and polling with the time left
/// to the next send spins a core, since the client's poll counts whole
/// milliseconds.
///
/// Full-load runs use it too, with the sending thread blocked inside the
/// client while its queue is full (`RD_KAFKA_MSG_F_BLOCK`) until this
/// thread's reports free room. The sending thread used to poll there with
/// `poll(1 ms)`, which the `rdkafka` crate turns into a busy loop (it polls
/// until its deadline has passed, each time with the time left rounded
/// down to whole milliseconds, i.e. 0, so never blocking): at full load
/// the queue is full most of the time, and a profile of a 1 KiB run had
/// 18% of both cores' samples in `clock_gettime` from that loop, on a
/// 2-core machine shared with the broker under test. `poll` here waits
/// 100 ms at a time, so only its last millisecond can spin.
fn serve_delivery_reports<C: ProducerContext>(producer: &BaseProducer<C>, done: &AtomicBool) {
    while !done.load(Ordering::Relaxed) {
        producer.poll(Duration::from_millis(100));
    }
}

/// librdkafka's handle of one topic, made once per sending loop. Sending
/// through it (`rd_kafka_produce`) skips what `BaseProducer::send` does per
/// record on top of the client's own work: a `CString` of the topic name and,
/// inside `rd_kafka_producev`, a lookup of the topic by that name under the
/// client's lock. At 100-byte records the sending thread is what limits the
/// rate (before this it kept a core ~90% busy at 1.0–1.4 M records/s), so the load
/// generator's own per-record cost is kept to the client's minimum. The
/// delivery reports are the same: the opaque is passed as
/// `BaseRecord::with_opaque_to` passes a `usize` (as the pointer itself),
/// and `Ctx::delivery` receives it unchanged.
struct TopicHandle(*mut rdkafka_sys::rd_kafka_topic_t);

impl TopicHandle {
    fn new<C: ProducerContext>(producer: &BaseProducer<C>, topic: &str) -> Result<Self> {
        let name = std::ffi::CString::new(topic).context("topic name")?;
        // SAFETY: the client pointer is live for as long as `producer`,
        // which outlives the handle (both belong to one `send_loop`); the
        // name is copied by librdkafka; a null config means defaults.
        let rkt = unsafe {
            rdkafka_sys::rd_kafka_topic_new(
                producer.client().native_ptr(),
                name.as_ptr(),
                std::ptr::null_mut(),
            )
        };
        if rkt.is_null() {
            bail!("cannot make a handle for topic {topic}");
        }
        Ok(TopicHandle(rkt))
    }

    /// Hands one record to the client (copied: `RD_KAFKA_MSG_F_COPY`).
    fn send(
        &self,
        partition: i32,
        value: &[u8],
        key: Option<&[u8]>,
        opaque: usize,
    ) -> std::result::Result<(), RDKafkaErrorCode> {
        let (key_ptr, key_len) = key.map_or((std::ptr::null(), 0), |k| (k.as_ptr(), k.len()));
        // SAFETY: the handle is live; payload and key are valid for the
        // call and copied by librdkafka before it returns (MSG_F_COPY).
        // While the client's queue is full the call waits for room
        // (MSG_F_BLOCK), which `serve_delivery_reports` makes.
        let rc = unsafe {
            rdkafka_sys::rd_kafka_produce(
                self.0,
                partition,
                rdkafka_sys::RD_KAFKA_MSG_F_COPY | rdkafka_sys::RD_KAFKA_MSG_F_BLOCK,
                value.as_ptr() as *mut std::ffi::c_void,
                value.len(),
                key_ptr as *const std::ffi::c_void,
                key_len,
                opaque as *mut std::ffi::c_void,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: reads the calling thread's last librdkafka error.
        Err(unsafe { rdkafka_sys::rd_kafka_last_error() }.into())
    }
}

impl Drop for TopicHandle {
    fn drop(&mut self) {
        // SAFETY: made by rd_kafka_topic_new and destroyed once; the
        // client keeps its own reference while records are in flight.
        unsafe { rdkafka_sys::rd_kafka_topic_destroy(self.0) };
    }
}

/// One producer's part of a `produce` run.
struct Share {
    count: u64,
    /// Records per second (0: as fast as possible).
    rate: u64,
    first_partition: u64,
}

/// Sends one producer's share and waits for its acknowledgements; returns
/// the records sent and when the last was handed to the client.
fn send_loop(
    a: &ProduceArgs,
    producer: &BaseProducer<Ctx>,
    stats: &Stats,
    pool: &[Vec<u8>],
    share: Share,
    start_ns: u64,
) -> Result<(u64, u64)> {
    let deadline_ns = start_ns + Duration::from_secs_f64(a.load.max_seconds).as_nanos() as u64;
    let topic = TopicHandle::new(producer, &a.load.topic)?;
    let mut sent: u64 = 0;
    // The clock is read every 256 records, not every record: at ~1 M records
    // per second each read (~30 ns on this VM) was a few per cent of the
    // sending thread, which is what sets the rate at 100 B.
    let mut past_deadline = false;
    while sent < share.count && !past_deadline {
        if let Some(gap_ns) = (sent * 1_000_000_000).checked_div(share.rate) {
            // paced: record n goes at start + n / rate
            let due_ns = start_ns + gap_ns;
            let now = stats.now_ns();
            if now >= deadline_ns {
                break;
            }
            if now < due_ns {
                // delivery reports are served by `serve_delivery_reports`
                thread::sleep(Duration::from_nanos(due_ns - now));
                continue;
            }
        }
        let value = &pool[(sent % pool.len() as u64) as usize];
        let key = (a.keys > 0).then(|| format!("key-{}", sent % a.keys));
        let partition = ((share.first_partition + sent) % a.partitions) as i32;
        let key = key.as_deref().map(str::as_bytes);
        match topic.send(partition, value, key, stats.now_ns() as usize) {
            Ok(()) => {
                sent += 1;
                if sent.is_multiple_of(256) {
                    past_deadline = stats.now_ns() >= deadline_ns;
                }
            }
            Err(RDKafkaErrorCode::QueueFull) => {
                // Not expected with MSG_F_BLOCK; never spin if it happens.
                thread::sleep(Duration::from_micros(100));
                past_deadline = stats.now_ns() >= deadline_ns;
            }
            Err(e) => bail!("send: {e}"),
        }
    }
    let send_done_ns = stats.now_ns();
    producer.flush(Duration::from_secs(60))?;
    Ok((sent, send_done_ns))
}

fn produce(a: &ProduceArgs) -> Result<()> {
    if a.producers == 0 || a.partitions == 0 {
        bail!("--producers and --partitions must be at least 1");
    }
    let base = Instant::now();
    let base_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64()
        * 1e3;
    let mut stats = Stats::new(base);
    if a.samples_out.is_some() {
        stats.samples = Some(Mutex::new(Vec::new()));
    }
    let stats = Arc::new(stats);
    let mut producers = Vec::new();
    for _ in 0..a.producers {
        let producer: BaseProducer<Ctx> = producer_config(
            &a.load.bootstrap,
            a.load.acks,
            a.load.compression,
            a.linger_ms,
        )?
        .create_with_context(Ctx(Arc::clone(&stats)))?;
        // Connect and learn the leaders before the clock starts.
        producer
            .client()
            .fetch_metadata(Some(&a.load.topic), Duration::from_secs(10))?;
        producers.push(producer);
    }
    let pool = payload_pool(a.load.size, 1024);
    let run_threads = threads::RunThreads::start();
    let start_ns = stats.now_ns();
    let n = a.producers;
    let sending_done = AtomicBool::new(false);
    let results: Vec<Result<(u64, u64)>> = thread::scope(|s| {
        for producer in &producers {
            let (done, run_threads) = (&sending_done, &run_threads);
            s.spawn(move || {
                serve_delivery_reports(producer, done);
                run_threads.thread_done("delivery reports");
            });
        }
        let handles: Vec<_> = producers
            .iter()
            .enumerate()
            .map(|(k, producer)| {
                let k = k as u64;
                let share = Share {
                    count: a.load.count / n + u64::from(k < a.load.count % n),
                    rate: a.rate.div_ceil(n),
                    first_partition: k * a.partitions / n,
                };
                let (stats, pool, run_threads) = (&stats, &pool, &run_threads);
                s.spawn(move || {
                    let result = send_loop(a, producer, stats, pool, share, start_ns);
                    run_threads.thread_done("send");
                    result
                })
            })
            .collect();
        let results = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("producer thread panicked")))
            })
            .collect();
        sending_done.store(true, Ordering::Relaxed);
        results
    });
    let (mut sent, mut send_done_ns) = (0u64, start_ns);
    for r in results {
        let (s, done) = r?;
        sent += s;
        send_done_ns = send_done_ns.max(done);
    }
    let acked = stats.acked.load(Ordering::Relaxed);
    let bytes = stats.acked_bytes.load(Ordering::Relaxed);
    let failed = stats.failed.load(Ordering::Relaxed);
    let end_ns = stats.last_ack_ns.load(Ordering::Relaxed).max(start_ns + 1);
    let secs = (end_ns - start_ns) as f64 / 1e9;
    let busiest_thread = run_threads.busiest_json(secs);
    let mut lat = std::mem::take(
        &mut *stats
            .latencies_us
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?,
    );
    lat.sort_unstable();
    if let (Some(path), Some(samples)) = (&a.samples_out, &stats.samples) {
        let samples = samples.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for (sent_ns, us) in samples.iter() {
            writeln!(out, "{:.3} {us}", base_unix_ms + *sent_ns as f64 / 1e6)?;
        }
        out.flush()?;
    }
    println!(
        "{}",
        json!({
            "kind": "produce",
            "topic": a.load.topic,
            "size": a.load.size,
            "acks": a.load.acks.as_str(),
            "compression": a.load.compression.as_str(),
            "linger_ms": a.linger_ms,
            "producers": a.producers,
            "partitions": a.partitions,
            "sent": sent,
            "acked": acked,
            "failed": failed,
            "bytes": bytes,
            "seconds": secs,
            "send_seconds": (send_done_ns - start_ns) as f64 / 1e9,
            "records_per_sec": acked as f64 / secs,
            "mb_per_sec": bytes as f64 / secs / 1e6,
            "lat_p50_ms": pct_ms(&lat, 50.0),
            "lat_p99_ms": pct_ms(&lat, 99.0),
            "lat_p999_ms": pct_ms(&lat, 99.9),
            "lat_max_ms": lat.last().map(|v| f64::from(*v) / 1000.0),
            "busiest_thread": busiest_thread,
        })
    );
    if failed > 0 {
        bail!("{failed} records failed");
    }
    Ok(())
}

fn consumer(bootstrap: &str) -> Result<BaseConsumer> {
    let mut c = base_config(bootstrap)?;
    c.set("group.id", "moldau-bench")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false");
    Ok(c.create()?)
}

fn assign_from_beginning(c: &BaseConsumer, topic: &str) -> Result<()> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)?;
    c.assign(&tpl)?;
    Ok(())
}

/// What the consumers of one consume run share (`consume` and
/// `wire-consume`): the records read and the measured interval.
struct ConsumeShared {
    base: Instant,
    records: AtomicU64,
    /// Bytes of every arrival but the run's first (it opens the measured
    /// interval).
    bytes: AtomicU64,
    errors: AtomicU64,
    /// When the first records arrived (any consumer), ns since `base` + 1.
    first_ns: AtomicU64,
    last_ns: AtomicU64,
}

/// A consume run's totals: records, counted bytes, the measured seconds
/// and when the first records came (s after the start).
struct ConsumeTotals {
    records: u64,
    bytes: u64,
    errors: u64,
    seconds: f64,
    first_record_after_s: Option<f64>,
}

impl ConsumeShared {
    fn new() -> Self {
        Self {
            base: Instant::now(),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
        }
    }

    /// Whether the run should go on: fewer than `count` records so far and
    /// `deadline` not passed.
    fn wanted(&self, count: u64, deadline: Instant) -> bool {
        self.records.load(Ordering::Relaxed) < count && Instant::now() < deadline
    }

    /// `records` records of `bytes` bytes arrived now. The run's first
    /// arrival opens the measured interval: its bytes are not counted.
    fn arrived(&self, records: u64, bytes: u64) {
        let now_ns = self.base.elapsed().as_nanos() as u64;
        let opened = self
            .first_ns
            .compare_exchange(0, now_ns + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok();
        if !opened {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        self.records.fetch_add(records, Ordering::Relaxed);
        self.last_ns.fetch_max(now_ns, Ordering::Relaxed);
    }

    /// Runs `read` on each of `readers` in a thread of its own; the first
    /// error, if any.
    fn run_each<T: Send>(readers: Vec<T>, read: impl Fn(T) -> Result<()> + Sync) -> Result<()> {
        let read = &read;
        let results: Vec<Result<()>> = thread::scope(|s| {
            let handles: Vec<_> = readers
                .into_iter()
                .map(|r| s.spawn(move || read(r)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("consumer thread panicked")))
                })
                .collect()
        });
        results.into_iter().collect()
    }

    fn totals(&self) -> ConsumeTotals {
        let first_ns = self.first_ns.load(Ordering::Relaxed);
        let first = (first_ns > 0).then(|| (first_ns - 1) as f64 / 1e9);
        let seconds = first
            .map_or(0.0, |f| {
                self.last_ns.load(Ordering::Relaxed) as f64 / 1e9 - f
            })
            .max(1e-9);
        ConsumeTotals {
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            seconds,
            first_record_after_s: first,
        }
    }
}

/// Reads with `rd_kafka_consume_batch_queue` (up to 4096 records per call)
/// rather than one `poll` per record, so that the client's per-record
/// overhead does not cap the measured rate at small record sizes.
fn consume(a: &ConsumeArgs) -> Result<()> {
    if a.consumers < 1 || a.partitions < a.consumers {
        bail!("--consumers must be at least 1 and at most --partitions");
    }
    // Every consumer connected and its start offsets known before any is
    // assigned: librdkafka starts fetching at the assignment, so the
    // consumers start within moments of each other.
    let mut consumers = Vec::new();
    for k in 0..a.consumers {
        let c = consumer(&a.load.bootstrap)?;
        let mine: Vec<i32> = (k..a.partitions).step_by(a.consumers as usize).collect();
        let start = log_start_offsets(&c, &a.load.topic, &mine)?;
        consumers.push((c, start));
    }
    let run_threads = threads::RunThreads::start();
    for (c, start) in &consumers {
        c.assign(start)?;
    }
    let consumers: Vec<BaseConsumer> = consumers.into_iter().map(|(c, _)| c).collect();
    let shared = ConsumeShared::new();
    let deadline = shared.base + Duration::from_secs_f64(a.load.max_seconds);
    ConsumeShared::run_each(consumers.iter().collect(), |c| {
        let result = read_batches(c, &shared, a.load.count, deadline);
        run_threads.thread_done("read");
        result
    })?;
    let t = shared.totals();
    let busiest_thread = run_threads.busiest_json(t.seconds);
    let size = if t.records > 0 {
        t.bytes as f64 / t.records as f64
    } else {
        0.0
    };
    println!(
        "{}",
        json!({
            "kind": "consume",
            "topic": a.load.topic,
            "partitions": a.partitions,
            "consumers": a.consumers,
            "records": t.records,
            "expected": a.load.count,
            "bytes": t.bytes,
            "errors": t.errors,
            "seconds": t.seconds,
            "first_record_after_s": t.first_record_after_s,
            "records_per_sec": if size > 0.0 { t.bytes as f64 / size / t.seconds } else { 0.0 },
            "mb_per_sec": t.bytes as f64 / t.seconds / 1e6,
            "busiest_thread": busiest_thread,
        })
    );
    a.load.check_complete(t.records)
}

/// The partitions at their log start offsets, asked with one ListOffsets
/// (earliest) before the read.
///
/// Assigning `Offset::Beginning` instead leaves the lookup to librdkafka,
/// which asks as soon as the partitions are assigned: while the consumer's
/// connection to the leader is still being set up that query fails and is
/// retried after 500 ms, for some of ten consumers and not others (a
/// consumer's first records came 0.03 s or 0.5 s after its assignment).
/// Ten consumers starting that far apart stretch a read of well under a
/// second, whichever broker serves it.
fn log_start_offsets(
    c: &BaseConsumer,
    topic: &str,
    partitions: &[i32],
) -> Result<TopicPartitionList> {
    let mut query = TopicPartitionList::new();
    for &p in partitions {
        query.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    let answer = c.offsets_for_times(query, Duration::from_secs(30))?;
    let mut start = TopicPartitionList::new();
    for e in answer.elements() {
        e.error()
            .map_err(|err| anyhow::anyhow!("partition {}: {err}", e.partition()))?;
        match e.offset() {
            Offset::Offset(o) => {
                start.add_partition_offset(topic, e.partition(), Offset::Offset(o))?;
            }
            other => bail!("partition {}: no start offset ({other:?})", e.partition()),
        }
    }
    if start.count() != partitions.len() {
        bail!(
            "{} start offsets for {} partitions",
            start.count(),
            partitions.len()
        );
    }
    Ok(start)
}

/// One consumer's loop: batches until all consumers together have `count`
/// records or the deadline passes.
fn read_batches(
    c: &BaseConsumer,
    shared: &ConsumeShared,
    count: u64,
    deadline: Instant,
) -> Result<()> {
    use rdkafka_sys as sys;
    // SAFETY: the client outlives the queue handle, destroyed below.
    let queue = unsafe { sys::rd_kafka_queue_get_consumer(c.client().native_ptr()) };
    if queue.is_null() {
        bail!("no consumer queue");
    }
    let mut msgs: Vec<*mut sys::rd_kafka_message_t> = vec![std::ptr::null_mut(); 4096];
    while shared.wanted(count, deadline) {
        // SAFETY: `msgs` has room for `msgs.len()` pointers; librdkafka fills
        // the first `got` of them with messages we own until destroyed.
        let got =
            unsafe { sys::rd_kafka_consume_batch_queue(queue, 100, msgs.as_mut_ptr(), msgs.len()) };
        if got <= 0 {
            continue;
        }
        let (mut n, mut batch_bytes, mut errors) = (0u64, 0u64, 0u64);
        for &m in &msgs[..got as usize] {
            // SAFETY: each of the first `got` entries is a valid message.
            unsafe {
                if (*m).err == sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    n += 1;
                    batch_bytes += (*m).len as u64;
                } else {
                    errors += 1;
                }
                sys::rd_kafka_message_destroy(m);
            }
        }
        shared.arrived(n, batch_bytes);
        shared.errors.fetch_add(errors, Ordering::Relaxed);
    }
    // SAFETY: obtained above, destroyed once.
    unsafe { sys::rd_kafka_queue_destroy(queue) };
    Ok(())
}

/// Polls with one ListOffsets (latest) for all partitions until every
/// partition answers without error; prints when (Unix time) and the sum of
/// the end offsets.
fn wait_ready(bootstrap: &str, topic: &str, partitions: i32, max_seconds: f64) -> Result<()> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(max_seconds);
    let mut c = base_config(bootstrap)?;
    // A broker that is not listening yet: retry every 20 ms, not with
    // librdkafka's backoff (up to 10 s); one that is listening but still
    // loading its logs answers late: wait for it rather than give up on the
    // connection's first request.
    c.set("group.id", "moldau-bench-ready")
        .set("enable.auto.commit", "false")
        .set("reconnect.backoff.ms", "20")
        .set("reconnect.backoff.max.ms", "20")
        .set("retry.backoff.ms", "20")
        .set("retry.backoff.max.ms", "20")
        .set("api.version.request.timeout.ms", "300000")
        .set("socket.timeout.ms", "300000")
        .set("socket.connection.setup.timeout.ms", "300000")
        .set("topic.metadata.refresh.interval.ms", "100");
    let c: BaseConsumer = c.create()?;
    let mut attempts = 0u64;
    let mut last_error;
    loop {
        attempts += 1;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::End)?;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match c.offsets_for_times(tpl, left.max(Duration::from_millis(100))) {
            Ok(tpl) => {
                let elems = tpl.elements();
                let bad = elems.iter().find_map(|e| match (e.error(), e.offset()) {
                    (Err(err), _) => Some(format!("partition {}: {err}", e.partition())),
                    (Ok(()), Offset::Offset(_)) => None,
                    (Ok(()), o) => Some(format!("partition {}: offset {o:?}", e.partition())),
                });
                match bad {
                    None if elems.len() == partitions as usize => {
                        let sum: i64 = elems
                            .iter()
                            .map(|e| match e.offset() {
                                Offset::Offset(o) => o,
                                _ => 0,
                            })
                            .sum();
                        let unix = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)?
                            .as_secs_f64();
                        println!(
                            "{}",
                            json!({
                                "kind": "wait-ready",
                                "topic": topic,
                                "partitions": partitions,
                                "ready_unix": unix,
                                "seconds": start.elapsed().as_secs_f64(),
                                "attempts": attempts,
                                "end_offsets_sum": sum,
                            })
                        );
                        return Ok(());
                    }
                    None => last_error = format!("{} of {partitions} partitions", elems.len()),
                    Some(e) => last_error = e,
                }
            }
            Err(e) => last_error = e.to_string(),
        }
        if Instant::now() > deadline {
            bail!("not ready after {max_seconds} s ({attempts} attempts): {last_error}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[allow(clippy::too_many_arguments)]
fn e2e(
    bootstrap: &str,
    topic: &str,
    size: usize,
    acks: Acks,
    codec: Codec,
    rate: u64,
    seconds: f64,
) -> Result<()> {
    if size < 16 {
        bail!("--size must be at least 16 (the record carries its send time)");
    }
    let base = Instant::now();
    let stats = Arc::new(Stats::new(base));
    let producer: BaseProducer<Ctx> =
        producer_config(bootstrap, acks, codec, 0)?.create_with_context(Ctx(Arc::clone(&stats)))?;
    let c = consumer(bootstrap)?;
    assign_from_beginning(&c, topic)?;
    let mut value = payload_pool(size, 1).remove(0);

    let send = |value: &mut Vec<u8>, seq: u64| -> Result<()> {
        let now = base.elapsed().as_nanos() as u64;
        value[..8].copy_from_slice(&now.to_le_bytes());
        value[8..16].copy_from_slice(&seq.to_le_bytes());
        let rec = BaseRecord::<(), [u8], usize>::with_opaque_to(topic, now as usize)
            .partition(0)
            .payload(value.as_slice());
        producer
            .send(rec)
            .map_err(|(e, _)| anyhow::anyhow!("send: {e}"))?;
        producer.poll(Duration::ZERO);
        Ok(())
    };
    let decode = |m: &rdkafka::message::BorrowedMessage<'_>| -> Option<(u64, u64)> {
        let p = m.payload()?;
        let ts = u64::from_le_bytes(p.get(..8)?.try_into().ok()?);
        let seq = u64::from_le_bytes(p.get(8..16)?.try_into().ok()?);
        Some((ts, seq))
    };

    // Warm-up: one record must make the whole round trip first.
    send(&mut value, u64::MAX)?;
    let warm_deadline = Instant::now() + Duration::from_secs(30);
    loop {
        producer.poll(Duration::ZERO);
        if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
            if decode(&m).is_some_and(|(_, s)| s == u64::MAX) {
                break;
            }
        }
        if Instant::now() > warm_deadline {
            bail!("warm-up record did not come back within 30 s");
        }
    }

    // The consumer runs on its own thread; the producer paces on this one.
    let total = ((rate as f64) * seconds).round().max(1.0) as u64;
    let consumer_deadline = Duration::from_secs_f64(seconds + 15.0);
    let reader = thread::spawn(move || {
        let mut lat_us: Vec<u32> = Vec::with_capacity(total as usize);
        let t0 = Instant::now();
        while (lat_us.len() as u64) < total && t0.elapsed() < consumer_deadline {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
                let now = base.elapsed().as_nanos() as u64;
                if let Some((ts, seq)) = decode(&m) {
                    if seq != u64::MAX {
                        lat_us
                            .push((now.saturating_sub(ts) / 1000).min(u64::from(u32::MAX)) as u32);
                    }
                }
            }
        }
        lat_us
    });
    let pace = Pace::per_second(rate.max(1) as f64);
    let start_ns = stats.now_ns();
    let sending_done = AtomicBool::new(false);
    let send_done_ns = thread::scope(|s| -> Result<u64> {
        s.spawn(|| serve_delivery_reports(&producer, &sending_done));
        let sent = (|| -> Result<u64> {
            for seq in 0..total {
                pace.wait_for(seq);
                send(&mut value, seq)?;
            }
            let send_done_ns = stats.now_ns();
            producer.flush(Duration::from_secs(30))?;
            Ok(send_done_ns)
        })();
        sending_done.store(true, Ordering::Relaxed);
        sent
    })?;
    let acked = stats.acked.load(Ordering::Relaxed).saturating_sub(1);
    let ack_secs = stats
        .last_ack_ns
        .load(Ordering::Relaxed)
        .saturating_sub(start_ns) as f64
        / 1e9;
    let mut acks_us = std::mem::take(
        &mut *stats
            .latencies_us
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?,
    );
    // The warm-up record was delivered first: leave it out.
    if !acks_us.is_empty() {
        acks_us.remove(0);
    }
    acks_us.sort_unstable();
    let mut lat = reader
        .join()
        .map_err(|_| anyhow::anyhow!("consumer thread panicked"))?;
    lat.sort_unstable();
    println!(
        "{}",
        json!({
            "kind": "e2e",
            "topic": topic,
            "size": size,
            "acks": acks.as_str(),
            "compression": codec.as_str(),
            "rate": rate,
            "sent": total,
            "send_seconds": (send_done_ns - start_ns) as f64 / 1e9,
            "acked": acked,
            // First paced send to the last acknowledgement: a broker that
            // keeps up acknowledges at the offered rate; one that cannot
            // falls behind and this exceeds `send_seconds` by the backlog.
            "ack_seconds": ack_secs,
            "ack_rate": if ack_secs > 0.0 { acked as f64 / ack_secs } else { 0.0 },
            "received": lat.len(),
            "p50_ms": pct_ms(&lat, 50.0),
            "p99_ms": pct_ms(&lat, 99.0),
            "p999_ms": pct_ms(&lat, 99.9),
            "max_ms": lat.last().map(|v| f64::from(*v) / 1000.0),
            "ack_p50_ms": pct_ms(&acks_us, 50.0),
            "ack_p99_ms": pct_ms(&acks_us, 99.0),
            "ack_p999_ms": pct_ms(&acks_us, 99.9),
        })
    );
    if (lat.len() as u64) < total {
        bail!("received {} of {total} records", lat.len());
    }
    Ok(())
}

/// Paced sends (`e2e`, `rtt`, `wire-produce --rate`): the n-th is due n
/// intervals after the start, so a late send is not carried over.
pub(crate) struct Pace {
    start: Instant,
    interval: Duration,
}

impl Pace {
    /// Starting now, `per_second` sends a second.
    pub(crate) fn per_second(per_second: f64) -> Self {
        Self {
            start: Instant::now(),
            interval: Duration::from_secs_f64(1.0 / per_second),
        }
    }

    /// Sleeps until send `n` (from 0) is due.
    pub(crate) fn wait_for(&self, n: u64) {
        let due = self.start + self.interval.mul_f64(n as f64);
        thread::sleep(due.saturating_duration_since(Instant::now()));
    }
}

fn rtt(rate: u64, count: u64, size: usize) -> Result<()> {
    ensure!(
        rate >= 1 && size >= 1,
        "--rate and --size must be at least 1"
    );
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = thread::spawn(move || -> Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; size];
        loop {
            match s.read_exact(&mut buf) {
                Ok(()) => s.write_all(&buf)?,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let out = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let mut lat_us: Vec<u32> = Vec::with_capacity(count as usize);
    let pace = Pace::per_second(rate as f64);
    for i in 0..count {
        pace.wait_for(i);
        let sent = Instant::now();
        s.write_all(&out)?;
        s.read_exact(&mut back)?;
        lat_us.push(u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX));
    }
    drop(s);
    echo.join()
        .map_err(|_| anyhow::anyhow!("echo thread panicked"))??;
    lat_us.sort_unstable();
    println!(
        "{}",
        json!({
            "kind": "rtt",
            "rate": rate,
            "count": count,
            "size": size,
            "p50_ms": pct_ms(&lat_us, 50.0),
            "p99_ms": pct_ms(&lat_us, 99.0),
            "p999_ms": pct_ms(&lat_us, 99.9),
        })
    );
    Ok(())
}

fn tcp(seconds: f64, chunk: usize) -> Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let server = thread::spawn(move || -> Result<(u64, f64)> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; chunk];
        let mut total = 0u64;
        let mut first: Option<Instant> = None;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                break;
            }
            first.get_or_insert_with(Instant::now);
            total += n as u64;
        }
        let secs = first.map_or(1e-9, |f| f.elapsed().as_secs_f64());
        Ok((total, secs))
    });
    let mut s = TcpStream::connect(addr)?;
    let buf = vec![0x5au8; chunk];
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline {
        s.write_all(&buf)?;
    }
    drop(s);
    let (total, secs) = server
        .join()
        .map_err(|_| anyhow::anyhow!("server thread panicked"))??;
    println!(
        "{}",
        json!({"kind": "tcp", "bytes": total, "seconds": secs, "mb_per_sec": total as f64 / secs / 1e6})
    );
    Ok(())
}
