//! ElectLeaders and DescribeLogDirs against real brokers.
//!
//! Three broker processes (`--cluster dir`, all on 127.0.0.1) with
//! `auto.leader.rebalance.enable=false`, so leadership moves only when
//! asked: a broker leading partitions of an RF=3 topic stops cleanly (its
//! leaderships move to in-sync followers) and comes back; it rejoins every
//! ISR but leads nothing. ElectLeaders PREFERRED, sent to a broker of the
//! cluster, gives each partition back to its preferred replica with a
//! higher leader epoch and answers ELECTION_NOT_NEEDED for the rest; asked
//! again, ELECTION_NOT_NEEDED everywhere. Unknown topics and partitions,
//! unclean elections of led partitions and an unknown election type get
//! Kafka's codes. DescribeLogDirs on each broker lists exactly the
//! partitions Metadata places on it, with their sizes (> 0 after producing,
//! equal on every replica once followers caught up, lag 0), the data
//! directory and its filesystem's size; a topic filter narrows it.
//!
//! An in-process standalone broker answers both for itself: it leads
//! everything, so a preferred election is never needed.

mod cluster_common;
mod wire_common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use cluster_common::*;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeLogDirsRequest,
    DescribeLogDirsResponse, ElectLeadersRequest, ElectLeadersResponse,
};
use tokio::net::TcpStream;
use wire_common::{call, name};

const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "auto.leader.rebalance.enable=false",
    "replica.lag.time.max.ms=2000",
    "replica.fetch.wait.max.ms=100",
    "replica.fetch.backoff.ms=100",
];

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REQUEST: i16 = 42;
const ELECTION_NOT_NEEDED: i16 = 84;

/// `{(topic, partition): error code}` of an ElectLeaders answer.
type Elected = BTreeMap<(String, i32), i16>;

/// ElectLeaders at `version` (`kind` is not on the wire in v0) for
/// `targets` (`None`: every partition): `(top-level code, per partition)`.
async fn elect(
    s: &mut TcpStream,
    version: i16,
    kind: i8,
    targets: Option<&[(&str, &[i32])]>,
) -> (i16, Elected) {
    let req = ElectLeadersRequest::default()
        .with_election_type(kind)
        .with_timeout_ms(30_000)
        .with_topic_partitions(targets.map(|ts| {
            ts.iter()
                .map(|(t, ps)| {
                    TopicPartitions::default()
                        .with_topic(name(t))
                        .with_partitions(ps.to_vec())
                })
                .collect()
        }));
    let resp: ElectLeadersResponse = call(s, ApiKey::ElectLeaders, version, &req).await;
    let per_partition = resp
        .replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result
                .iter()
                .map(move |p| ((t.topic.0.to_string(), p.partition_id), p.error_code))
        })
        .collect();
    (resp.error_code, per_partition)
}

/// `{(topic, partition): (size, offset lag)}` of one log directory.
type Sizes = BTreeMap<(String, i32), (i64, i64)>;

/// One log directory's answer: `(path, error, total, usable, sizes)`.
type LogDir = (String, i16, i64, i64, Sizes);

async fn log_dirs(
    s: &mut TcpStream,
    version: i16,
    filter: Option<&[(&str, &[i32])]>,
) -> Vec<LogDir> {
    let req = DescribeLogDirsRequest::default().with_topics(filter.map(|ts| {
        ts.iter()
            .map(|(t, ps)| {
                DescribableLogDirTopic::default()
                    .with_topic(name(t))
                    .with_partitions(ps.to_vec())
            })
            .collect()
    }));
    let resp: DescribeLogDirsResponse = call(s, ApiKey::DescribeLogDirs, version, &req).await;
    assert_eq!(resp.error_code, NONE);
    resp.results
        .iter()
        .map(|d| {
            let partitions = d
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(move |p| {
                        assert!(!p.is_future_key);
                        (
                            (t.name.0.to_string(), p.partition_index),
                            (p.partition_size, p.offset_lag),
                        )
                    })
                })
                .collect();
            (
                d.log_dir.to_string(),
                d.error_code,
                d.total_bytes,
                d.usable_bytes,
                partitions,
            )
        })
        .collect()
}

/// The only log directory a broker has.
async fn the_log_dir(s: &mut TcpStream, filter: Option<&[(&str, &[i32])]>) -> LogDir {
    let mut dirs = log_dirs(s, 4, filter).await;
    assert_eq!(dirs.len(), 1, "one log directory per broker: {dirs:?}");
    dirs.remove(0)
}

fn canonical(p: &Path) -> String {
    std::fs::canonicalize(p).unwrap().display().to_string()
}

/// Produces `value` (acks=all) at `s`'s broker, retrying for 20 s while
/// that broker does not show the partition or its leadership yet (its
/// image may be a moment behind the one that answered Metadata).
async fn produce_eventually(s: &mut TcpStream, topic: &str, partition: i32, value: &[u8]) {
    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let code = produce_to(s, topic, partition, value).await;
        if code == NONE {
            return;
        }
        assert!(
            [UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER].contains(&code)
                && tokio::time::Instant::now() < deadline,
            "{topic}-{partition}: produce error {code}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Produces `count` records to each partition of `topic`, at its leader.
async fn fill(conns: &mut BTreeMap<i32, TcpStream>, topic: &str, partitions: i32, count: usize) {
    let view = partitions_of(conns, topic).await;
    for p in 0..partitions {
        let leader = conns.get_mut(&view[&p].leader).unwrap();
        for i in 0..count {
            produce_eventually(leader, topic, p, format!("{topic}-{p}-{i}").as_bytes()).await;
        }
    }
}

async fn partitions_of(
    conns: &mut BTreeMap<i32, TcpStream>,
    topic: &str,
) -> BTreeMap<i32, PartitionView> {
    let probe = conns.values_mut().next().unwrap();
    partitions(probe, topic).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_elections_restore_leaders_and_each_broker_describes_its_log_dir() {
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
    wait_until(s0, "e", "three brokers", |v| v.0.len() == 3).await;
    let (code, message) = create_replicated(s0, "e", 3, 3, &[]).await;
    assert_eq!(code, NONE, "{message:?}");
    let (code, message) = create_replicated(s0, "solo", 3, 1, &[]).await;
    assert_eq!(code, NONE, "{message:?}");
    let all = vec![0, 1, 2];
    let before = wait_for_partitions(s0, "e", "three in-sync replicas each", |v| {
        v.len() == 3 && v.values().all(|p| p.isr == all)
    })
    .await;
    wait_for_partitions(s0, "solo", "three led partitions", |v| {
        v.len() == 3 && v.values().all(|p| p.leader >= 0)
    })
    .await;
    fill(&mut conns, "e", 3, 5).await;
    fill(&mut conns, "solo", 3, 2).await;

    // The preferred leader of partition 0 stops cleanly and comes back:
    // in every ISR again, leading nothing.
    let moved = before[&0].replicas[0];
    assert_eq!(
        before[&0].leader, moved,
        "a new partition is led by its first replica"
    );
    brokers
        .get_mut(&moved)
        .unwrap()
        .stop(libc::SIGTERM, Duration::from_secs(30))
        .await;
    conns.remove(&moved);
    let probe = *conns.keys().next().unwrap();
    wait_for_partitions(
        conns.get_mut(&probe).unwrap(),
        "e",
        "leaders moved off the stopped broker",
        |v| v.values().all(|p| p.leader >= 0 && p.leader != moved),
    )
    .await;
    brokers.insert(moved, start(moved));
    conns.insert(
        moved,
        brokers[&moved].connect(Duration::from_secs(30)).await,
    );
    let displaced = wait_for_partitions(
        conns.get_mut(&probe).unwrap(),
        "e",
        "the returned broker back in every ISR",
        |v| v.values().all(|p| p.isr == all),
    )
    .await;
    let lost: BTreeSet<i32> = displaced
        .iter()
        .filter(|(_, p)| p.replicas[0] == moved)
        .map(|(i, _)| *i)
        .collect();
    assert!(lost.contains(&0));
    for i in &lost {
        assert_ne!(
            displaced[i].leader, moved,
            "partition {i}: no automatic rebalance"
        );
    }

    // ElectLeaders PREFERRED through a broker that is not the one moved.
    let s = conns.get_mut(&probe).unwrap();
    let (top, results) = elect(s, 2, 0, Some(&[("e", &[0, 1, 2])])).await;
    assert_eq!(top, NONE);
    for i in 0..3 {
        let want = if lost.contains(&i) {
            NONE
        } else {
            ELECTION_NOT_NEEDED
        };
        assert_eq!(
            results[&("e".to_string(), i)],
            want,
            "partition {i}: {results:?}"
        );
    }
    // The broker that forwarded the election shows it at once.
    let after = partitions(s, "e").await;
    for (i, p) in &after {
        assert_eq!(
            p.leader, p.replicas[0],
            "partition {i} led by its preferred replica"
        );
        if lost.contains(i) {
            assert!(
                p.epoch > displaced[i].epoch,
                "partition {i}: a new leader epoch ({} after {})",
                p.epoch,
                displaced[i].epoch
            );
        } else {
            assert_eq!(p.epoch, displaced[i].epoch, "partition {i} untouched");
        }
    }
    // The new leader serves produce.
    let leader = conns.get_mut(&moved).unwrap();
    wait_for_partitions(leader, "e", "the election in every image", |v| {
        v.get(&0).is_some_and(|x| x.leader == moved)
    })
    .await;
    assert_eq!(
        produce_to(leader, "e", 0, b"after the election").await,
        NONE
    );

    // Nothing left to elect.
    let s = conns.get_mut(&probe).unwrap();
    let (top, again) = elect(s, 2, 0, Some(&[("e", &[0, 1, 2])])).await;
    assert_eq!(top, NONE);
    assert!(
        again.values().all(|c| *c == ELECTION_NOT_NEEDED),
        "{again:?}"
    );
    assert_eq!(again.len(), 3);
    let (top, everything) = elect(s, 2, 0, None).await;
    assert_eq!(
        (top, everything.len()),
        (NONE, 0),
        "every partition: the ones needing nothing are left out ({everything:?})"
    );
    let (_, v1) = elect(s, 1, 0, Some(&[("solo", &[0, 1, 2])])).await;
    assert!(v1.values().all(|c| *c == ELECTION_NOT_NEEDED), "{v1:?}");
    let (_, v0) = elect(s, 0, 0, Some(&[("e", &[1])])).await;
    assert_eq!(
        v0[&("e".to_string(), 1)],
        ELECTION_NOT_NEEDED,
        "v0 is preferred"
    );
    let (top, unknown) = elect(s, 2, 0, Some(&[("e", &[7]), ("nope", &[0])])).await;
    assert_eq!(top, NONE);
    assert_eq!(unknown[&("e".to_string(), 7)], UNKNOWN_TOPIC_OR_PARTITION);
    assert_eq!(
        unknown[&("nope".to_string(), 0)],
        UNKNOWN_TOPIC_OR_PARTITION
    );
    let (_, unclean) = elect(s, 2, 1, Some(&[("e", &[0])])).await;
    assert_eq!(
        unclean[&("e".to_string(), 0)],
        ELECTION_NOT_NEEDED,
        "an unclean election of a led partition"
    );
    let (top, bad) = elect(s, 2, 9, Some(&[("e", &[0])])).await;
    assert_eq!(top, INVALID_REQUEST);
    assert_eq!(bad[&("e".to_string(), 0)], INVALID_REQUEST);
    let (top, empty) = elect(s, 2, 0, Some(&[])).await;
    assert_eq!(
        (top, empty.len()),
        (NONE, 0),
        "an empty list elects nothing"
    );

    // DescribeLogDirs: each broker answers for its own directory with the
    // partitions Metadata places on it.
    let solo = partitions(s, "solo").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut sizes: BTreeMap<i32, Sizes> = BTreeMap::new();
        for (n, c) in conns.iter_mut() {
            let (path, error, total, usable, parts) = the_log_dir(c, None).await;
            assert_eq!(path, canonical(&data(*n)), "broker {n}");
            assert_eq!(error, NONE);
            assert!(
                total > 0 && usable >= 0 && usable <= total,
                "{total} {usable}"
            );
            let mut hosted: BTreeSet<(String, i32)> =
                (0..3).map(|i| ("e".to_string(), i)).collect();
            hosted.extend(
                solo.iter()
                    .filter(|(_, p)| p.replicas == vec![*n])
                    .map(|(i, _)| ("solo".to_string(), *i)),
            );
            let listed: BTreeSet<(String, i32)> = parts.keys().cloned().collect();
            assert_eq!(listed, hosted, "broker {n} lists what it hosts");
            assert!(parts.values().all(|(size, _)| *size > 0), "{parts:?}");
            sizes.insert(*n, parts);
        }
        // replicas hold the same bytes once followers caught up
        let caught_up = (0..3).all(|i| {
            let key = ("e".to_string(), i);
            let of: BTreeSet<(i64, i64)> = sizes.values().map(|p| p[&key]).collect();
            of.len() == 1 && of.iter().all(|(_, lag)| *lag == 0)
        });
        if caught_up {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "replicas never held the same bytes: {sizes:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A topic filter: only what was named (and is hosted) is listed.
    let c = conns.get_mut(&probe).unwrap();
    let (_, _, _, _, one) = the_log_dir(c, Some(&[("e", &[1]), ("nope", &[0])])).await;
    assert_eq!(
        one.keys().cloned().collect::<Vec<_>>(),
        vec![("e".to_string(), 1)]
    );
    let (_, _, _, _, none) = the_log_dir(c, Some(&[])).await;
    assert!(none.is_empty(), "an empty filter names nothing: {none:?}");
    // v1 has no filesystem sizes (the decoder's default -1).
    let v1 = log_dirs(c, 1, Some(&[("e", &[0])])).await;
    assert_eq!((v1.len(), v1[0].2, v1[0].3), (1, -1, -1));
    assert_eq!(v1[0].4.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_broker_answers_both_for_itself() {
    let dir = tempfile::tempdir().unwrap();
    let broker = wire_common::start(dir.path(), &[]).await;
    let mut s = broker.connect().await;
    let versions: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    let range = |api: ApiKey| {
        versions
            .api_keys
            .iter()
            .find(|k| k.api_key == api as i16)
            .map(|k| (k.min_version, k.max_version))
    };
    assert_eq!(range(ApiKey::DescribeLogDirs), Some((1, 4)));
    assert_eq!(range(ApiKey::ElectLeaders), Some((0, 2)));

    let (code, message) = wire_common::create_topic(&mut s, "st", 2).await;
    assert_eq!(code, NONE, "{message:?}");
    let (code, _) = wire_common::produce(&mut s, "st", wire_common::batch(&[b"x".to_vec()])).await;
    assert_eq!(code, NONE);

    for kind in [0, 1] {
        let (top, r) = elect(&mut s, 2, kind, Some(&[("st", &[0, 1]), ("nope", &[0])])).await;
        assert_eq!(top, NONE);
        assert_eq!(
            r[&("st".to_string(), 0)],
            ELECTION_NOT_NEEDED,
            "kind {kind}"
        );
        assert_eq!(
            r[&("st".to_string(), 1)],
            ELECTION_NOT_NEEDED,
            "kind {kind}"
        );
        assert_eq!(r[&("nope".to_string(), 0)], UNKNOWN_TOPIC_OR_PARTITION);
    }
    let (top, all) = elect(&mut s, 1, 0, None).await;
    assert_eq!((top, all.len()), (NONE, 0));

    for version in 1..=4 {
        let dirs = log_dirs(&mut s, version, None).await;
        assert_eq!(dirs.len(), 1);
        let (path, error, total, _, parts) = &dirs[0];
        assert_eq!(path, &canonical(dir.path()), "v{version}");
        assert_eq!(*error, NONE);
        assert_eq!(*total > 0, version >= 4, "v{version}: {total}");
        assert!(parts[&("st".to_string(), 0)].0 > 0, "v{version}: {parts:?}");
        assert_eq!(parts[&("st".to_string(), 1)], (0, 0), "an empty log");
    }
    drop(s);
    broker.stop().await;
}

const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;

fn signal(child: &wire_common::Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(
        unsafe { libc::kill(child.child.id() as libc::pid_t, sig) },
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unclean_election_brings_back_a_partition_whose_in_sync_replica_is_gone() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let start = |n: i32| {
        let data = root.path().join(format!("data-{n}"));
        spawn(&n.to_string(), &data, &shared, root.path(), SETTINGS)
    };
    let mut brokers: BTreeMap<i32, wire_common::Child> = (0..3).map(|n| (n, start(n))).collect();
    let mut conns: BTreeMap<i32, TcpStream> = BTreeMap::new();
    for (n, b) in &brokers {
        conns.insert(*n, b.connect(Duration::from_secs(30)).await);
    }
    let s0 = conns.get_mut(&0).unwrap();
    let (_, controller, _) = wait_until(s0, "u", "three brokers", |v| v.0.len() == 3).await;
    let (code, message) = create_replicated(s0, "u", 6, 2, &[]).await;
    assert_eq!(code, NONE, "{message:?}");
    let view = wait_for_partitions(s0, "u", "two in-sync replicas each", |v| {
        v.len() == 6 && v.values().all(|p| p.isr.len() == 2)
    })
    .await;
    // A partition the controller holds no replica of: its two brokers can
    // be paused and killed without stopping the controller.
    let (p, pv) = view
        .iter()
        .find(|(_, pv)| !pv.replicas.contains(&controller))
        .expect("a pair of replicas without the controller");
    let (p, a, b) = (
        *p,
        pv.leader,
        *pv.replicas.iter().find(|r| **r != pv.leader).unwrap(),
    );
    // acks=all with both replicas in sync: b has them too
    for i in 0..3 {
        let value = format!("u-{i}");
        produce_eventually(conns.get_mut(&a).unwrap(), "u", p, value.as_bytes()).await;
    }

    // b stops (fenced: out of the ISR), then a, the last in-sync replica,
    // dies: the partition has no leader and keeps a as its ISR.
    signal(&brokers[&b], libc::SIGSTOP);
    let probe = conns.get_mut(&controller).unwrap();
    wait_for_partitions(probe, "u", "the paused broker out of the ISR", |v| {
        v.get(&p).is_some_and(|x| x.isr == vec![a])
    })
    .await;
    brokers
        .get_mut(&a)
        .unwrap()
        .stop(libc::SIGKILL, Duration::from_secs(10))
        .await;
    let offline = wait_for_partitions(probe, "u", "the partition offline", |v| {
        v.get(&p)
            .is_some_and(|x| x.leader == -1 && x.isr == vec![a])
    })
    .await;
    let (_, r) = elect(probe, 2, 0, Some(&[("u", &[p])])).await;
    assert_eq!(r[&("u".to_string(), p)], PREFERRED_LEADER_NOT_AVAILABLE);
    let (_, r) = elect(probe, 2, 1, Some(&[("u", &[p])])).await;
    assert_eq!(
        r[&("u".to_string(), p)],
        ELIGIBLE_LEADERS_NOT_AVAILABLE,
        "no replica is live"
    );

    // b returns: live, but outside the ISR it does not lead by itself
    // (unclean election is not enabled for the topic) …
    signal(&brokers[&b], libc::SIGCONT);
    let back = wait_until(probe, "u", "the paused broker back", |v| v.0.contains(&b)).await;
    assert_eq!(back.2[&p].0, -1, "no automatic unclean election");
    // … until an unclean election is asked for.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let code = loop {
        let (top, r) = elect(probe, 2, 1, Some(&[("u", &[p])])).await;
        assert_eq!(top, NONE);
        let code = r[&("u".to_string(), p)];
        if code != ELIGIBLE_LEADERS_NOT_AVAILABLE || tokio::time::Instant::now() > deadline {
            break code;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(code, NONE, "unclean election");
    let now = partitions(probe, "u").await;
    assert_eq!((now[&p].leader, now[&p].isr.clone()), (b, vec![b]));
    assert!(now[&p].epoch > offline[&p].epoch, "a new leader epoch");
    // b had every record (it was in sync when they were acknowledged)
    let sb = conns.get_mut(&b).unwrap();
    wait_for_partitions(sb, "u", "b leading in its own image", |v| {
        v.get(&p).is_some_and(|x| x.leader == b)
    })
    .await;
    let got = values(sb, "u", p).await;
    assert_eq!(got, vec![b"u-0".to_vec(), b"u-1".to_vec(), b"u-2".to_vec()]);
    assert_eq!(produce_to(sb, "u", p, b"u-3").await, NONE);
    let warned = brokers
        .values()
        .any(|c| c.log().contains("unclean leader election"));
    assert!(warned, "the controller logs the possible data loss");
}
