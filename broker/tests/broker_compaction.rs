//! Compaction in a running broker stays off the produce path: a cleaning
//! pass slowed down by `log.cleaner.io.max.bytes.per.second` is caught in
//! progress (its staging directory exists), and while it lasts produce
//! (acks=all) and fetch requests to the same partition are answered —
//! they would wait for the pass if it held the partition's lock, as it
//! did before. An ordering, not a timing: the produces are counted while
//! the pass is still running. After the pass, the partition holds the
//! latest value of every key and every record produced during it.

mod wire_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use wire_common::*;

const TOPIC: &str = "cleaned";

fn staging(data: &Path) -> std::path::PathBuf {
    data.join(format!("{TOPIC}-0")).join("cleaner-staging")
}

/// Values `v<round>-<i>` for keys `k0..k{n}` (the batch helper's keys).
fn round(r: usize, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("v{r}-{i}-{}", "x".repeat(1000)).into_bytes())
        .collect()
}

/// A broker with `settings` (`key=value`) and the compacted topic on it,
/// rolling every `segment_bytes`, cleaned at any dirty ratio.
async fn compacted_topic(
    data: &Path,
    settings: &[&str],
    segment_bytes: u32,
) -> (Running, tokio::net::TcpStream) {
    let args: Vec<&str> = settings.iter().flat_map(|kv| ["--set", *kv]).collect();
    let broker = start(data, &args).await;
    let mut s = broker.connect().await;
    let segment_bytes = segment_bytes.to_string();
    create_with_configs(
        &mut s,
        TOPIC,
        &[
            ("cleanup.policy", "compact"),
            ("internal.segment.bytes", &segment_bytes),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    )
    .await;
    (broker, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_fetch_go_on_while_a_partition_is_cleaned() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // ~1.5 MB to read and write at 250 KB/s: a pass of several seconds
    let (broker, mut s) = compacted_topic(
        tmp.path(),
        &[
            "log.cleaner.backoff.ms=300",
            "log.cleaner.io.max.bytes.per.second=250000",
        ],
        65536,
    )
    .await;
    // 40 rounds of the same 20 keys (~800 KB) in many segments
    let mut written: Vec<(i64, Vec<u8>)> = Vec::new();
    for r in 0..40 {
        let values = round(r, 20);
        let (code, base) = produce(&mut s, TOPIC, batch(&values)).await;
        assert_eq!(code, 0);
        written.extend(
            values
                .into_iter()
                .enumerate()
                .map(|(i, v)| (base + i as i64, v)),
        );
    }

    // A pass starts at the next housekeeping tick.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !staging(tmp.path()).exists() {
        assert!(Instant::now() < deadline, "no compaction pass started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // While it runs: produce and fetch are answered.
    let mut during = Vec::new();
    let mut answered_while_cleaning = 0;
    for r in 100..120 {
        let values = round(r, 2);
        let (code, base) = produce(&mut s, TOPIC, batch(&values)).await;
        assert_eq!(code, 0, "produce during the pass");
        let still_running = staging(tmp.path()).exists();
        during.extend(
            values
                .into_iter()
                .enumerate()
                .map(|(i, v)| (base + i as i64, v)),
        );
        if still_running {
            answered_while_cleaning += 1;
        }
    }
    assert!(
        answered_while_cleaning >= 10,
        "only {answered_while_cleaning} of 20 produces were answered while the pass ran: \
         the pass blocks the partition"
    );
    let read = fetch_all(&mut s, TOPIC, 0).await;
    assert!(read.len() >= during.len());

    // The pass ends (its staging directory goes) and has cleaned.
    let deadline = Instant::now() + Duration::from_secs(120);
    while staging(tmp.path()).exists() {
        assert!(Instant::now() < deadline, "the pass did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    written.extend(during.iter().cloned());
    let read = fetch_all(&mut s, TOPIC, 0).await;
    assert!(
        read.len() < written.len(),
        "nothing was cleaned: {} records",
        read.len()
    );
    // latest value per key: keys are k<i> per batch; compare by value prefix
    let key_of = |v: &[u8]| -> String {
        let text = String::from_utf8_lossy(v);
        let mut parts = text.splitn(3, '-');
        let _round = parts.next();
        format!("k{}", parts.next().unwrap_or(""))
    };
    let latest = |recs: &[(i64, Vec<u8>)]| -> BTreeMap<String, (i64, Vec<u8>)> {
        recs.iter()
            .map(|(o, v)| (key_of(v), (*o, v.clone())))
            .collect()
    };
    let read: Vec<(i64, Vec<u8>)> = read.into_iter().map(|(o, v)| (o, v.to_vec())).collect();
    assert_eq!(latest(&read), latest(&written), "latest value of every key");
    for rec in &during {
        assert!(
            read.contains(rec),
            "a record produced during the pass is gone: offset {}",
            rec.0
        );
    }
    broker.stop().await;
}

/// `log.cleaner.enable=false`: compacted topics are not cleaned at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_cleaner_cleans_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (broker, mut s) = compacted_topic(
        tmp.path(),
        &["log.cleaner.backoff.ms=100", "log.cleaner.enable=false"],
        16384,
    )
    .await;
    for r in 0..20 {
        assert_eq!(produce(&mut s, TOPIC, batch(&round(r, 10))).await.0, 0);
    }
    // 20 cleaner rounds' worth of time, had it been enabled
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        fetch_all(&mut s, TOPIC, 0).await.len(),
        200,
        "records were cleaned"
    );
    broker.stop().await;
}
