//! Three real broker processes on 127.0.0.1 form one cluster (`--cluster
//! dir`: a shared metadata directory, the controller elected by a lock on
//! it): every broker's Metadata lists all three and the same controller; a
//! topic of 12 partitions created through any broker has its leaders on all
//! three, and records produced to each partition's leader are fetched back;
//! a broker that does not lead a partition refuses it with
//! NOT_LEADER_OR_FOLLOWER. kill -9 of the controller: another broker takes
//! over, fences the dead one after the session timeout, and topics created
//! before and after are intact; the killed broker restarts on its data and
//! rejoins, leading its partitions again with their records.

mod cluster_common;
mod wire_common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cluster_common::*;
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
use tokio::net::TcpStream;
use wire_common::*;

/// The HTTP status of `GET path`.
async fn http_status(addr: std::net::SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = TcpStream::connect(addr).await.expect("http");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    String::from_utf8_lossy(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_brokers_are_one_cluster_and_survive_losing_the_controller() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let data = |n: i32| root.path().join(format!("data-{n}"));
    let mut brokers: BTreeMap<i32, Child> = (0..3)
        .map(|n| {
            (
                n,
                spawn(&n.to_string(), &data(n), &shared, root.path(), &[]),
            )
        })
        .collect();
    let mut s0 = brokers[&0].connect(Duration::from_secs(30)).await;
    let all: BTreeSet<i32> = [0, 1, 2].into();
    let (_, controller, _) = wait_until(&mut s0, "orders", "three brokers", |v| v.0 == all).await;
    for b in brokers.values() {
        let mut s = b.connect(Duration::from_secs(10)).await;
        let v = wait_until(&mut s, "orders", "the same view", |v| v.0 == all).await;
        assert_eq!(v.1, controller, "one controller for all");
    }

    // A second process claiming a live broker's node id is refused
    // registration, says why, and never becomes ready; the cluster is
    // unchanged.
    let other = (controller + 1) % 3;
    {
        let impostor_dir = root.path().join("impostor");
        let impostor = spawn(&other.to_string(), &impostor_dir, &shared, root.path(), &[]);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !impostor.log().contains("is held by a live broker") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no clear refusal:\n{}",
                impostor.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            http_status(impostor.http, "/readyz").await,
            503,
            "never ready"
        );
        let v = view(&mut s0, "orders").await;
        assert_eq!(v.0, all);
        let m: MetadataResponse = call(
            &mut s0,
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(None),
        )
        .await;
        let port = m
            .brokers
            .iter()
            .find(|b| b.node_id.0 == other)
            .unwrap()
            .port;
        assert_eq!(
            port,
            i32::from(brokers[&other].kafka.port()),
            "the live broker keeps its id"
        );
    }

    // A topic created through a broker that is not the controller.
    let mut s = brokers[&other].connect(Duration::from_secs(10)).await;
    let (code, message) = create_topic(&mut s, "orders", 12).await;
    assert_eq!(code, 0, "{message:?}");
    let (_, _, parts) = wait_until(&mut s0, "orders", "12 partitions", |v| v.2.len() == 12).await;
    let mut per_leader = BTreeMap::new();
    for (leader, epoch) in parts.values() {
        *per_leader.entry(*leader).or_insert(0) += 1;
        assert_eq!(*epoch, 0);
    }
    assert_eq!(
        per_leader,
        [(0, 4), (1, 4), (2, 4)].into(),
        "leaders spread"
    );

    // Each partition through its leader; refused elsewhere.
    let mut conns: BTreeMap<i32, TcpStream> = BTreeMap::new();
    for (n, b) in &brokers {
        conns.insert(*n, b.connect(Duration::from_secs(10)).await);
    }
    for (p, (leader, _)) in &parts {
        let value = format!("record of {p}");
        let c = conns.get_mut(leader).unwrap();
        // The leader learns of the topic a moment after broker 0 did
        // (UNKNOWN_TOPIC_OR_PARTITION meanwhile, which clients retry).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            match produce_to(c, "orders", *p, value.as_bytes()).await {
                3 if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                code => {
                    assert_eq!(code, 0, "produce to the leader of {p}");
                    break;
                }
            }
        }
        let elsewhere = conns.get_mut(&((leader + 1) % 3)).unwrap();
        // that broker may not have applied the topic's image yet
        // (UNKNOWN_TOPIC_OR_PARTITION): ask again, boundedly
        let mut code = produce_to(elsewhere, "orders", *p, b"x").await;
        for _ in 0..50 {
            if code != 3 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            code = produce_to(elsewhere, "orders", *p, b"x").await;
        }
        assert_eq!(
            code, 6,
            "NOT_LEADER_OR_FOLLOWER from a broker that does not lead {p}"
        );
    }
    for (p, (leader, _)) in &parts {
        let c = conns.get_mut(leader).unwrap();
        assert_eq!(
            values(c, "orders", *p).await,
            vec![format!("record of {p}").into_bytes()]
        );
    }

    // kill -9 of the controller.
    let mut dead = brokers.remove(&controller).unwrap();
    dead.stop(libc::SIGKILL, Duration::from_secs(10)).await;
    conns.remove(&controller);
    let survivors: BTreeSet<i32> = brokers.keys().copied().collect();
    let mut s = brokers
        .values()
        .next()
        .unwrap()
        .connect(Duration::from_secs(10))
        .await;
    let v = wait_until(
        &mut s,
        "orders",
        "a new controller and the dead broker fenced",
        |v| v.0 == survivors && survivors.contains(&v.1),
    )
    .await;
    for (p, (leader, epoch)) in &v.2 {
        if parts[p].0 == controller {
            assert_eq!(
                (*leader, *epoch),
                (-1, 1),
                "partition {p}: one replica, now offline"
            );
        } else {
            assert_eq!((*leader, *epoch), parts[p], "partition {p} untouched");
        }
    }
    let (code, message) = create_topic(&mut s, "after", 3).await;
    assert_eq!(code, 0, "{message:?}");
    wait_until(&mut s, "after", "the new topic", |v| v.2.len() == 3).await;

    // The killed broker restarts on its data and rejoins.
    let back = spawn(
        &controller.to_string(),
        &data(controller),
        &shared,
        root.path(),
        &[],
    );
    let mut sb = back.connect(Duration::from_secs(30)).await;
    let v = wait_until(&mut sb, "orders", "the broker back and leading", |v| {
        v.0 == all && v.2.values().all(|(l, _)| *l >= 0)
    })
    .await;
    for (p, (leader, epoch)) in &v.2 {
        if parts[p].0 == controller {
            assert_eq!(
                (*leader, *epoch),
                (controller, 2),
                "partition {p} led again"
            );
            assert_eq!(
                values(&mut sb, "orders", *p).await,
                vec![format!("record of {p}").into_bytes()]
            );
        }
    }
    let after = view(&mut sb, "after").await;
    assert_eq!(after.2.len(), 3, "the topic created while it was away");

    // Controlled shutdown: a broker stopped with SIGTERM unregisters, so the
    // controller fences it at once (not after the 6 s session timeout), and
    // its restart registers at once.
    brokers.insert(controller, back);
    let (_, current, _) = view(&mut sb, "orders").await;
    let leaving = (current + 1) % 3;
    let mut b = brokers.remove(&leaving).unwrap();
    let stopped = tokio::time::Instant::now();
    let status = b.stop(libc::SIGTERM, Duration::from_secs(20)).await;
    assert!(status.success(), "{status:?}");
    assert!(
        b.log().contains("unregistered from the controller"),
        "{}",
        b.log()
    );
    let rest: BTreeSet<i32> = all.iter().copied().filter(|n| *n != leaving).collect();
    let mut s = brokers[&current].connect(Duration::from_secs(10)).await;
    wait_until(&mut s, "orders", "the stopped broker fenced", |v| {
        v.0 == rest
    })
    .await;
    let fenced_after = stopped.elapsed();
    assert!(
        fenced_after < Duration::from_secs(4),
        "fenced at once, not after the session timeout: {fenced_after:?}"
    );
    let again = spawn(
        &leaving.to_string(),
        &data(leaving),
        &shared,
        root.path(),
        &[],
    );
    let restarted = tokio::time::Instant::now();
    again.connect(Duration::from_secs(30)).await;
    wait_until(&mut s, "orders", "the restarted broker back", |v| {
        v.0 == all
    })
    .await;
    assert!(
        restarted.elapsed() < Duration::from_secs(5),
        "a clean restart registers at once: {:?}",
        restarted.elapsed()
    );
}
