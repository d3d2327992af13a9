//! `txn-produce`: a transactional producer (librdkafka's transactional API
//! through the `rdkafka` crate, so the same client drives Moldau and Apache
//! Kafka), for `bench/transactions.py`.
//!
//! One producer with a `transactional.id` (so idempotent, acks=all) runs
//! transactions of `--txn-records` records, one after the other, until
//! `--count` records are committed or `--max-seconds` have passed (checked
//! between transactions). The records of a transaction go round-robin over
//! partitions 0..P, so a transaction of at least P records writes to every
//! partition (and gets one commit marker in each).
//!
//! Measured, per transaction: the time of `commit_transaction()` as an
//! application sees it (from the call to its return: the records not yet
//! acknowledged are flushed and waited for, then EndTxn), split into the
//! wait for the transaction's last acknowledgements and the EndTxn part
//! that follows;
//! and throughput of committed records from the first `begin_transaction`
//! to the last commit's return.
//!
//! The commit is called through librdkafka directly, not through the
//! crate's `commit_transaction`: that flushes first with a `poll` that
//! returns only at its 100 ms deadline, which would round every commit up
//! to a multiple of 100 ms. Here a thread of its own serves the delivery
//! reports as they arrive (`serve_delivery_reports`, as `produce` does),
//! which is what librdkafka's own flush inside the commit waits for.
//!
//! Verification at the end, so that a broken broker cannot look fast: with
//! no transaction open, each partition's end offset at read_committed (the
//! last stable offset, ListOffsets with isolation level 1) and at
//! read_uncommitted (the high watermark) must both have grown from the
//! start's by the records committed to it plus one marker per transaction
//! that wrote to it
//! (waited for up to `--verify-seconds`: a coordinator may write markers
//! after the commit returns). Any difference fails the run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use serde_json::json;

use crate::{base_config, pct_ms, serve_delivery_reports, Codec, TopicHandle};

#[derive(clap::Args)]
pub(crate) struct TxnProduceArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    #[arg(long)]
    topic: String,
    /// Records go to partitions 0..P in turn.
    #[arg(long, default_value_t = 1)]
    partitions: u64,
    /// Record value size in bytes (no key).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Records per transaction.
    #[arg(long, default_value_t = 100)]
    txn_records: u64,
    #[arg(long, value_enum, default_value = "none")]
    compression: Codec,
    /// Producer `linger.ms`.
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// The producer's `transactional.id`.
    #[arg(long, default_value = "moldau-bench-txn")]
    transactional_id: String,
    /// Stop once this many records are committed (whole transactions)…
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// …or, between transactions, after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    max_seconds: f64,
    /// How long the end offsets may take to reach the committed count.
    #[arg(long, default_value_t = 15.0)]
    verify_seconds: f64,
}

/// Delivery reports of the open transaction: how many arrived, and how
/// many of them failed.
#[derive(Default)]
struct Acks {
    done: Mutex<(u64, u64)>,
    arrived: Condvar,
}

struct TxnCtx(Arc<Acks>);

impl ClientContext for TxnCtx {}

impl ProducerContext for TxnCtx {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Ok(mut d) = self.0.done.lock() {
            d.0 += 1;
            if result.is_err() {
                d.1 += 1;
            }
            self.0.arrived.notify_all();
        }
    }
}

impl Acks {
    /// Waits until `n` delivery reports arrived in all; returns the failed.
    fn wait_for(&self, n: u64, timeout: Duration) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        let mut d = self.done.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        while d.0 < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("{} of {n} delivery reports after {timeout:?}", d.0);
            }
            d = self
                .arrived
                .wait_timeout(d, left)
                .map_err(|_| anyhow::anyhow!("poisoned"))?
                .0;
        }
        Ok(d.1)
    }
}

/// `rd_kafka_commit_transaction` (see the module's note on why not the
/// crate's), its error as text.
fn commit(producer: &BaseProducer<TxnCtx>, timeout: Duration) -> Result<()> {
    // SAFETY: the client pointer is live for as long as `producer`; the
    // returned error object, if any, is read and destroyed once here.
    unsafe {
        let err = rdkafka_sys::rd_kafka_commit_transaction(
            producer.client().native_ptr(),
            timeout.as_millis() as i32,
        );
        if err.is_null() {
            return Ok(());
        }
        let msg = std::ffi::CStr::from_ptr(rdkafka_sys::rd_kafka_error_string(err))
            .to_string_lossy()
            .into_owned();
        rdkafka_sys::rd_kafka_error_destroy(err);
        bail!("commit_transaction: {msg}")
    }
}

/// `rd_kafka_flush`: with the delivery reports served by another thread,
/// it waits until every record sent is acknowledged, and makes the client
/// send what lingers meanwhile (see the module's note on why not the
/// crate's `flush`).
fn flush(producer: &BaseProducer<TxnCtx>, timeout: Duration) -> Result<()> {
    // SAFETY: the client pointer is live for as long as `producer`.
    let err = unsafe {
        rdkafka_sys::rd_kafka_flush(producer.client().native_ptr(), timeout.as_millis() as i32)
    };
    if err != rdkafka_sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        bail!("flush: {}", rdkafka::error::RDKafkaErrorCode::from(err));
    }
    Ok(())
}

/// Percentiles of per-transaction durations (µs samples) in ms.
fn lat_json(mut us: Vec<u32>) -> serde_json::Value {
    us.sort_unstable();
    json!({
        "p50_ms": pct_ms(&us, 50.0),
        "p99_ms": pct_ms(&us, 99.0),
        "max_ms": us.last().map(|v| f64::from(*v) / 1000.0),
    })
}

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u128::from(u32::MAX)) as u32
}

pub(crate) fn txn_produce(a: &TxnProduceArgs) -> Result<()> {
    if a.partitions == 0 || a.txn_records == 0 {
        bail!("--partitions and --txn-records must be at least 1");
    }
    let acks = Arc::new(Acks::default());
    let mut cfg = base_config(&a.bootstrap)?;
    cfg.set("transactional.id", &a.transactional_id)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("compression.type", a.compression.as_str())
        .set("linger.ms", a.linger_ms.to_string())
        .set("batch.size", "1000000")
        .set("queue.buffering.max.kbytes", "65536")
        .set("queue.buffering.max.messages", "1000000")
        .set("transaction.timeout.ms", "60000")
        .set("message.timeout.ms", "60000");
    let producer: BaseProducer<TxnCtx> = cfg.create_with_context(TxnCtx(Arc::clone(&acks)))?;
    producer
        .client()
        .fetch_metadata(Some(&a.topic), Duration::from_secs(10))?;
    let t_init = Instant::now();
    producer
        .init_transactions(Duration::from_secs(60))
        .context("init_transactions")?;
    let init_seconds = t_init.elapsed().as_secs_f64();

    // The partitions' end offsets before the run (a topic used before,
    // e.g. the warm-up's): what the run adds is checked against them.
    let before = end_offsets(a, "read_uncommitted")?;
    let pool = crate::payload_pool(a.size, 1024);
    let topic = TopicHandle::new(&producer, &a.topic)?;
    let parts = a.partitions as usize;
    // Per partition: records committed, transactions that wrote to it.
    let mut records_in = vec![0u64; parts];
    let mut txns_in = vec![0u64; parts];
    let (mut commit_us, mut end_txn_us, mut ack_wait_us) = (vec![], vec![], vec![]);
    let (mut sent, mut txns) = (0u64, 0u64);
    let done = AtomicBool::new(false);
    let timeout = Duration::from_secs(60);
    let start = Instant::now();
    let mut end = start;
    let result: Result<()> = thread::scope(|s| {
        s.spawn(|| serve_delivery_reports(&producer, &done));
        let mut run = || -> Result<()> {
            let deadline = start + Duration::from_secs_f64(a.max_seconds);
            while sent + a.txn_records <= a.count.max(a.txn_records)
                && (txns == 0 || Instant::now() < deadline)
            {
                producer.begin_transaction().context("begin_transaction")?;
                let mut touched = vec![false; parts];
                for i in 0..a.txn_records {
                    let p = ((sent + i) % a.partitions) as usize;
                    let value = &pool[((sent + i) % pool.len() as u64) as usize];
                    loop {
                        match topic.send(p as i32, value, None, 0) {
                            Ok(()) => break,
                            Err(rdkafka::error::RDKafkaErrorCode::QueueFull) => {
                                thread::sleep(Duration::from_micros(100))
                            }
                            Err(e) => bail!("send: {e}"),
                        }
                    }
                    touched[p] = true;
                }
                let t0 = Instant::now();
                let expected = sent + a.txn_records;
                // The part of the commit that waits for the records (a
                // flush, as `commit_transaction` starts with: it sends what
                // lingers at once); then EndTxn (the flush inside the
                // commit finds nothing left).
                flush(&producer, timeout)?;
                let failed = acks.wait_for(expected, timeout)?;
                let t1 = Instant::now();
                if failed > 0 {
                    bail!("{failed} records failed in transaction {txns}");
                }
                commit(&producer, timeout)?;
                let t2 = Instant::now();
                commit_us.push(micros(t2 - t0));
                ack_wait_us.push(micros(t1 - t0));
                end_txn_us.push(micros(t2 - t1));
                sent = expected;
                txns += 1;
                end = t2;
                for (p, t) in touched.iter().enumerate() {
                    if *t {
                        txns_in[p] += 1;
                    }
                }
                for i in 0..a.txn_records {
                    records_in[((expected - a.txn_records + i) % a.partitions) as usize] += 1;
                }
            }
            Ok(())
        };
        let r = run();
        done.store(true, Ordering::Relaxed);
        r
    });
    result?;
    let secs = (end - start).as_secs_f64().max(1e-9);
    let bytes = sent * a.size as u64;
    let verify = verify(a, &before, &records_in, &txns_in)?;
    println!(
        "{}",
        json!({
            "kind": "txn-produce",
            "topic": a.topic,
            "partitions": a.partitions,
            "size": a.size,
            "txn_records": a.txn_records,
            "compression": a.compression.as_str(),
            "linger_ms": a.linger_ms,
            "transactions": txns,
            "committed_records": sent,
            "bytes": bytes,
            "seconds": secs,
            "init_seconds": init_seconds,
            "records_per_sec": sent as f64 / secs,
            "mb_per_sec": bytes as f64 / secs / 1e6,
            "transactions_per_sec": txns as f64 / secs,
            "commit": lat_json(commit_us),
            "ack_wait": lat_json(ack_wait_us),
            "end_txn": lat_json(end_txn_us),
            "verify": verify,
        })
    );
    Ok(())
}

/// A client that asks ListOffsets at `isolation.level` `level`.
fn offsets_client(a: &TxnProduceArgs, level: &str) -> Result<BaseConsumer> {
    let mut c = base_config(&a.bootstrap)?;
    c.set("isolation.level", level);
    Ok(c.create()?)
}

/// Each partition's end offset at `level` (`read_committed`: the LSO).
fn end_offsets(a: &TxnProduceArgs, level: &str) -> Result<Vec<i64>> {
    let c = offsets_client(a, level)?;
    read_ends(a, &c)
}

fn read_ends(a: &TxnProduceArgs, c: &BaseConsumer) -> Result<Vec<i64>> {
    (0..a.partitions as i32)
        .map(|p| Ok(c.fetch_watermarks(&a.topic, p, Duration::from_secs(5))?.1))
        .collect()
}

/// The end offsets at read_committed and read_uncommitted against what was
/// committed on top of `before` (see the module's note); fails on a
/// difference.
fn verify(
    a: &TxnProduceArgs,
    before: &[i64],
    records_in: &[u64],
    txns_in: &[u64],
) -> Result<serde_json::Value> {
    let committed = offsets_client(a, "read_committed")?;
    let uncommitted = offsets_client(a, "read_uncommitted")?;
    let expected: Vec<i64> = before
        .iter()
        .zip(records_in.iter().zip(txns_in))
        .map(|(b, (r, t))| b + (r + t) as i64)
        .collect();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(a.verify_seconds);
    loop {
        let lso = read_ends(a, &committed)?;
        let hw = read_ends(a, &uncommitted)?;
        if lso == expected && hw == expected {
            return Ok(json!({
                "ok": true,
                "start_offsets": before,
                "end_offsets": lso,
                "waited_seconds": t0.elapsed().as_secs_f64(),
            }));
        }
        if Instant::now() > deadline {
            bail!(
                "verification failed: from start offsets {before:?}, expected end offsets \
                 {expected:?} (+ records + one marker per transaction), read_committed {lso:?}, \
                 read_uncommitted {hw:?}"
            );
        }
        thread::sleep(Duration::from_millis(100));
    }
}
