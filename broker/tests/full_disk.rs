//! A real broker on a small, full tmpfs data directory (needs root for
//! `mount`; fails loudly without it unless `MOLDAU_SKIP_MOUNT_TESTS=1`):
//! produce fails with KAFKA_STORAGE_ERROR while reads keep working, a
//! restart on the full disk starts and serves every acknowledged record
//! (no SIGBUS from an index grown on the full filesystem), a DeleteTopics
//! frees space while full, and produce then succeeds again by itself.

mod wire_common;

use std::time::Duration;

use bytes::Bytes;
use wire_common::*;

const KAFKA_STORAGE_ERROR: i16 = 56;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

fn value(i: usize, len: usize) -> Vec<u8> {
    let mut v = format!("value-{i:06}-").into_bytes();
    v.resize(len, (i % 251) as u8);
    v
}

fn check_acked(topic: &str, acked: &[(i64, Vec<u8>)], found: &[(i64, Bytes)]) {
    let found: std::collections::BTreeMap<i64, &Bytes> =
        found.iter().map(|(o, v)| (*o, v)).collect();
    for (offset, expected) in acked {
        let got = found
            .get(offset)
            .unwrap_or_else(|| panic!("{topic}: acknowledged offset {offset} is missing"));
        assert!(
            got.as_ref() == expected.as_slice(),
            "{topic}: offset {offset} has the wrong value"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_tmpfs_fails_produce_keeps_reads_survives_restart_and_recovers() {
    let Some(fs) = Tmpfs::mount("12m") else {
        return;
    };
    let data = fs.path();
    let opts = ["--set", "log.segment.bytes=1048576"];
    let broker = start(&data, &opts).await;
    let mut c = broker.connect().await;
    for t in ["small", "big"] {
        assert_eq!(create_topic(&mut c, t, 1).await.0, 0, "create {t}");
    }
    let mut small_acked = Vec::new();
    for i in 0..5 {
        let v = value(i, 100);
        let (code, offset) = produce(&mut c, "small", batch(std::slice::from_ref(&v))).await;
        assert_eq!(code, 0);
        small_acked.push((offset, v));
    }

    // Fill the disk through "big": 60 KiB records, then 1 KiB ones until
    // even those fail.
    let mut big_acked = Vec::new();
    let mut errors = Vec::new();
    for (i, len) in (0..).zip((0..400).map(|_| 60 << 10).chain((0..400).map(|_| 1 << 10))) {
        let v = value(i, len);
        let (code, offset) = produce(&mut c, "big", batch(std::slice::from_ref(&v))).await;
        if code == 0 {
            big_acked.push((offset, v));
        } else {
            errors.push((len, code));
            if len < 60 << 10 && errors.iter().filter(|(l, _)| *l == len).count() >= 3 {
                break;
            }
        }
    }
    assert!(
        big_acked.len() > 100,
        "only {} records fit",
        big_acked.len()
    );
    assert!(!errors.is_empty(), "the disk never filled");
    assert!(
        errors.iter().all(|(_, code)| *code == KAFKA_STORAGE_ERROR),
        "produce errors on a full disk: {errors:?}"
    );
    assert!(fs.free_bytes() < 64 << 10, "free: {}", fs.free_bytes());

    // Reads keep working, on both partitions.
    check_acked("big", &big_acked, &fetch_all(&mut c, "big", 0).await);
    check_acked("small", &small_acked, &fetch_all(&mut c, "small", 0).await);
    let (code, _) = produce(&mut c, "big", batch(&[value(9999, 60 << 10)])).await;
    assert_eq!(code, KAFKA_STORAGE_ERROR, "still full");

    // Restart on the full disk: it starts and serves every acked record.
    drop(c);
    broker.stop().await;
    let broker = start(&data, &opts).await;
    let mut c = broker.connect().await;
    check_acked("big", &big_acked, &fetch_all(&mut c, "big", 0).await);
    check_acked("small", &small_acked, &fetch_all(&mut c, "small", 0).await);
    let (code, _) = produce(&mut c, "big", batch(&[value(9998, 60 << 10)])).await;
    assert_eq!(code, KAFKA_STORAGE_ERROR, "still full after the restart");

    // Deleting the big topic works while full and frees its space.
    let free_before = fs.free_bytes();
    assert_eq!(
        delete_topic(&mut c, "big").await,
        0,
        "DeleteTopics while full"
    );
    assert_eq!(topic_error(&mut c, "big").await, UNKNOWN_TOPIC_OR_PARTITION);
    let mut waited = 0;
    while fs.free_bytes() < free_before + (8 << 20) {
        assert!(
            waited < 300,
            "space not freed: {} bytes free",
            fs.free_bytes()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }

    // Produce works again by itself.
    for i in 5..10 {
        let v = value(i, 60 << 10);
        let (code, offset) = produce(&mut c, "small", batch(std::slice::from_ref(&v))).await;
        assert_eq!(code, 0, "produce after space returned");
        small_acked.push((offset, v));
    }
    assert_eq!(create_topic(&mut c, "big", 1).await.0, 0, "recreate");
    let (code, offset) = produce(&mut c, "big", batch(&[value(1, 1000)])).await;
    assert_eq!(
        (code, offset),
        (0, 0),
        "a new topic of the same name starts empty"
    );

    // And all of it survives another restart; the old "big" stays deleted.
    drop(c);
    broker.stop().await;
    let broker = start(&data, &opts).await;
    let mut c = broker.connect().await;
    check_acked("small", &small_acked, &fetch_all(&mut c, "small", 0).await);
    let big = fetch_all(&mut c, "big", 0).await;
    assert_eq!(big.len(), 1, "only the new topic's record");
    assert_eq!(big[0].1.as_ref(), value(1, 1000).as_slice());
    let leftovers: Vec<String> = std::fs::read_dir(&data)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-delete"))
        .collect();
    assert!(leftovers.is_empty(), "left over: {leftovers:?}");
    drop(c);
    broker.stop().await;
}
