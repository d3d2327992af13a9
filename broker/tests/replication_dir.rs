//! Replication across three real broker processes (`--cluster dir`, all on
//! 127.0.0.1): a topic with replication factor 3 and `min.insync.replicas`
//! 2 keeps every record acknowledged with acks=all when the leader is
//! killed (-9) — the new leader, elected from the ISR, serves them all, in
//! order; with two of three brokers gone, acks=all is refused with
//! NOT_ENOUGH_REPLICAS while consumers still read everything below the
//! high watermark; brokers that come back catch up and rejoin the ISR, and
//! producing resumes.

mod cluster_common;
mod wire_common;

use std::collections::BTreeMap;
use std::time::Duration;

use cluster_common::*;
use tokio::net::TcpStream;

const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "replica.lag.time.max.ms=2000",
    "replica.fetch.wait.max.ms=100",
    "replica.fetch.backoff.ms=100",
];

/// Produces `value` to the partition's leader, retrying the retriable
/// errors of a moment (unknown partition, not leader yet).
async fn produce_acked(
    conns: &mut BTreeMap<i32, TcpStream>,
    probe: i32,
    topic: &str,
    partition: i32,
    value: &str,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let leader = {
            let s = conns.get_mut(&probe).unwrap();
            partitions(s, topic).await[&partition].leader
        };
        let code = match conns.get_mut(&leader) {
            Some(c) => produce_to(c, topic, partition, value.as_bytes()).await,
            None => -1,
        };
        if code == 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{topic}-{partition}: {value} never acknowledged (last code {code}, leader {leader})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (20 s at most) until a consumer of `partition` on `s`'s broker
/// reads exactly `expected` (consumers read below the high watermark,
/// which a new leader moves once its followers have fetched).
async fn read_eventually(s: &mut TcpStream, partition: i32, expected: Vec<Vec<u8>>, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let got = values(s, "r", partition).await;
        if got == expected {
            return;
        }
        assert!(
            got.len() < expected.len() && expected.starts_with(&got),
            "partition {partition} ({what}): read {got:?}, which is not a prefix of what was acknowledged"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "partition {partition} ({what}): read {} of {} records",
            got.len(),
            expected.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn acked(partition: i32, count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| format!("p{partition}-{i}").into_bytes())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_records_survive_losing_brokers_and_min_isr_is_enforced() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let data = |n: i32| root.path().join(format!("data-{n}"));
    let start = |n: i32| spawn(&n.to_string(), &data(n), &shared, root.path(), SETTINGS);
    let mut brokers: BTreeMap<i32, wire_common::Child> = (0..3).map(|n| (n, start(n))).collect();
    let mut conns: BTreeMap<i32, TcpStream> = BTreeMap::new();
    for (n, b) in &brokers {
        conns.insert(*n, b.connect(Duration::from_secs(30)).await);
    }
    let s0 = conns.get_mut(&0).unwrap();
    wait_until(s0, "r", "three brokers", |v| v.0.len() == 3).await;
    let (code, message) = create_replicated(s0, "r", 3, 3, &[("min.insync.replicas", "2")]).await;
    assert_eq!(code, 0, "{message:?}");
    let all = vec![0, 1, 2];
    let view = wait_for_partitions(s0, "r", "three in-sync replicas each", |v| {
        v.len() == 3 && v.values().all(|p| p.replicas.len() == 3 && p.isr == all)
    })
    .await;

    for p in 0..3 {
        for value in acked(p, 20) {
            let value = String::from_utf8(value).unwrap();
            produce_acked(&mut conns, 0, "r", p, &value).await;
        }
    }

    // kill -9 the leader of partition 0: a follower from the ISR takes
    // over with every acknowledged record.
    let first = view[&0].leader;
    brokers
        .get_mut(&first)
        .unwrap()
        .stop(libc::SIGKILL, Duration::from_secs(10))
        .await;
    conns.remove(&first);
    let probe = *conns.keys().next().unwrap();
    let after = wait_for_partitions(
        conns.get_mut(&probe).unwrap(),
        "r",
        "new leaders from the ISR",
        |v| {
            v.values()
                .all(|p| p.leader >= 0 && p.leader != first && !p.isr.contains(&first))
        },
    )
    .await;
    for (p, pv) in &after {
        if view[p].leader == first {
            assert!(
                pv.epoch > view[p].epoch,
                "partition {p}: a new leader epoch"
            );
        }
        // The new leader's high watermark catches up once the other
        // follower fetches from it.
        let c = conns.get_mut(&pv.leader).unwrap();
        read_eventually(
            c,
            *p,
            acked(*p, 20),
            "every acknowledged record, in order, on the new leader",
        )
        .await;
    }
    // Two in-sync replicas still satisfy min.insync.replicas = 2.
    for p in 0..3 {
        let value = format!("p{p}-20");
        produce_acked(&mut conns, probe, "r", p, &value).await;
    }

    // A second broker gone: the last one alone refuses acks=all, and
    // consumers still read what was committed.
    let second = *conns.keys().find(|n| **n != probe).unwrap();
    brokers
        .get_mut(&second)
        .unwrap()
        .stop(libc::SIGKILL, Duration::from_secs(10))
        .await;
    conns.remove(&second);
    let last = wait_for_partitions(
        conns.get_mut(&probe).unwrap(),
        "r",
        "the last broker leading alone",
        |v| {
            v.values()
                .all(|p| p.leader == probe && p.isr == vec![probe])
        },
    )
    .await;
    assert_eq!(last.len(), 3);
    let s = conns.get_mut(&probe).unwrap();
    for p in 0..3 {
        assert_eq!(
            produce_to(s, "r", p, b"refused").await,
            19,
            "NOT_ENOUGH_REPLICAS with one in-sync replica of min 2"
        );
        read_eventually(s, p, acked(p, 21), "read below the high watermark alone").await;
    }

    // Both come back: they catch up, rejoin the ISR, and producing resumes.
    for n in [first, second] {
        brokers.insert(n, start(n));
    }
    for n in [first, second] {
        conns.insert(n, brokers[&n].connect(Duration::from_secs(30)).await);
    }
    wait_for_partitions(
        conns.get_mut(&probe).unwrap(),
        "r",
        "every replica back in sync",
        |v| v.values().all(|p| p.isr == all),
    )
    .await;
    for p in 0..3 {
        let value = format!("p{p}-21");
        produce_acked(&mut conns, probe, "r", p, &value).await;
        let leader = partitions(conns.get_mut(&probe).unwrap(), "r").await[&p].leader;
        let c = conns.get_mut(&leader).unwrap();
        read_eventually(c, p, acked(p, 22), "after the brokers returned").await;
    }
}
