//! Replication across three real broker processes (`--cluster dir`, all on
//! 127.0.0.1): a topic with replication factor 3 and `min.insync.replicas`
//! 2 keeps every record acknowledged with acks=all when the leader is
//! killed (-9) — the new leader, elected from the ISR, serves them all, in
//! order; with two of three brokers gone, acks=all is refused with
//! NOT_ENOUGH_REPLICAS while consumers still read everything below the
//! high watermark; brokers that come back catch up and rejoin the ISR,
//! producing resumes and preferred leaders are restored. A follower paused
//! past `replica.lag.time.max.ms` leaves the ISR (Metadata, `/metrics`) and
//! rejoins once resumed. A leader holding records its followers never got
//! (they were paused) dies; after the failover it returns as a follower,
//! truncates them away, and no consumer ever reads them. Followers fetch
//! through fetch sessions (incremental after the first), and keep
//! replicating when a full session cache evicts theirs. A follower that
//! starts over with an empty log copies a compacted leader with its offset
//! gaps, record for record.

mod cluster_common;
mod wire_common;

use std::collections::BTreeMap;
use std::time::Duration;

use cluster_common::*;
use tokio::net::TcpStream;

const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "leader.imbalance.check.interval.seconds=1",
    "replica.lag.time.max.ms=2000",
    "replica.fetch.wait.max.ms=100",
    "replica.fetch.backoff.ms=100",
];

/// Waits (20 s at most) until a consumer of `partition` on `s`'s broker
/// reads exactly `expected` (consumers read below the high watermark,
/// which a new leader moves once its followers have fetched).
async fn read_eventually(
    s: &mut TcpStream,
    topic: &str,
    partition: i32,
    expected: Vec<Vec<u8>>,
    what: &str,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        // a broker that just became leader may not know it yet
        let got = match try_values(s, topic, partition).await {
            Ok(got) => got,
            Err(code @ (3 | 6)) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "partition {partition} ({what}): error {code} for 20 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(code) => panic!("partition {partition} ({what}): error {code}"),
        };
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

/// Creates `topic` with one partition, three replicas and `configs`, and
/// waits until all three brokers are in its ISR: the partition's view then.
async fn create_in_sync(
    s: &mut TcpStream,
    topic: &str,
    configs: &[(&str, &str)],
) -> BTreeMap<i32, PartitionView> {
    let (code, message) = create_replicated(s, topic, 1, 3, configs).await;
    assert_eq!(code, 0, "{message:?}");
    wait_for_partitions(s, topic, "in sync", |v| {
        v.get(&0).is_some_and(|p| p.isr == [0, 1, 2])
    })
    .await
}

/// Broker `n`'s settings in rack `rack-<n>`, with consumers sent to a
/// replica of their own rack, and `extra`.
fn rack_settings(n: i32, extra: &[&'static str]) -> Vec<&'static str> {
    let mut settings: Vec<&str> = SETTINGS.to_vec();
    settings.push(Box::leak(format!("broker.rack=rack-{n}").into_boxed_str()));
    settings
        .push("replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector");
    settings.extend_from_slice(extra);
    settings
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
            "r",
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
        read_eventually(
            s,
            "r",
            p,
            acked(p, 21),
            "read below the high watermark alone",
        )
        .await;
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
        read_eventually(c, "r", p, acked(p, 22), "after the brokers returned").await;
    }
    // Preferred leaders come back (auto leader rebalance).
    wait_for_partitions(
        conns.get_mut(&probe).unwrap(),
        "r",
        "preferred leaders restored",
        |v| v.values().all(|p| p.leader == p.replicas[0]),
    )
    .await;
    // What the leaders counted: ISR changes, and no partition under-replicated now.
    // A broker takes up the leadership the controller gave it (what the probe's
    // metadata shows) a moment later, so each gets a few seconds to count it.
    let mut shrinks_and_expands = 0;
    for b in brokers.values() {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let m = loop {
            let m = b.metrics().await;
            let settled = wire_common::metric(&m, "moldau_leader_count") == Some(1)
                && wire_common::metric(&m, "moldau_under_replicated_partitions") == Some(0);
            if settled || tokio::time::Instant::now() >= deadline {
                break m;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            wire_common::metric(&m, "moldau_under_replicated_partitions"),
            Some(0),
            "{m}"
        );
        assert_eq!(
            wire_common::metric(&m, "moldau_leader_count"),
            Some(1),
            "{m}"
        );
        shrinks_and_expands += wire_common::metric(&m, "moldau_isr_expands_total").unwrap_or(0);
    }
    assert!(
        shrinks_and_expands >= 3,
        "the returning brokers rejoined through ISR expansions"
    );
}

/// Produces `value` to partition 0 of `topic` through `s` (acks=all),
/// retrying for 10 s what a client retries (the broker learning of the
/// topic or of its leadership a moment late).
async fn produce_retrying(s: &mut TcpStream, topic: &str, value: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match produce_to(s, topic, 0, value.as_bytes()).await {
            0 => return,
            // unknown partition, not leader, not enough replicas, timed out
            code @ (3 | 6 | 7 | 19) => assert!(
                tokio::time::Instant::now() < deadline,
                "{value}: error {code} for 10 s"
            ),
            code => panic!("{value}: error {code}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The partition's leader and its metrics page.
async fn leader_metrics(
    brokers: &BTreeMap<i32, wire_common::Child>,
    s: &mut TcpStream,
) -> (i32, String) {
    let leader = partitions(s, "d").await[&0].leader;
    (leader, brokers[&leader].metrics().await)
}

fn signal(b: &wire_common::Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(b.child.id() as libc::pid_t, sig) }, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_followers_leave_the_isr_and_a_diverged_leader_is_truncated() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let data = |n: i32| root.path().join(format!("data-{n}"));
    let start = |n: i32| spawn(&n.to_string(), &data(n), &shared, root.path(), SETTINGS);
    let mut brokers: BTreeMap<i32, wire_common::Child> = (0..3).map(|n| (n, start(n))).collect();
    let mut s = brokers[&0].connect(Duration::from_secs(30)).await;
    let (_, controller, _) = wait_until(&mut s, "d", "three brokers", |v| v.0.len() == 3).await;
    let view = create_in_sync(&mut s, "d", &[("min.insync.replicas", "2")]).await;
    let all = vec![0, 1, 2];
    let leader = view[&0].leader;
    let mut lc = brokers[&leader].connect(Duration::from_secs(10)).await;
    for i in 0..5 {
        // the leader may learn of the topic a moment after broker 0
        produce_retrying(&mut lc, "d", &format!("a{i}")).await;
    }

    // A follower paused past replica.lag.time.max.ms leaves the ISR, shown
    // in Metadata and in the leader's /metrics; resumed, it rejoins.
    // (not the controller's broker: in `dir` mode a paused controller
    // keeps its lock, and nothing would change meanwhile)
    let follower = view[&0]
        .replicas
        .iter()
        .copied()
        .find(|r| *r != leader && *r != controller)
        .unwrap();
    signal(&brokers[&follower], libc::SIGSTOP);
    // ask a broker that is not paused
    let mut s = brokers[&leader].connect(Duration::from_secs(10)).await;
    let shrunk = wait_for_partitions(&mut s, "d", "the paused follower out of the ISR", |v| {
        v.get(&0).is_some_and(|p| !p.isr.contains(&follower))
    })
    .await;
    let (now_leader, m) = leader_metrics(&brokers, &mut s).await;
    assert_eq!(now_leader, shrunk[&0].leader);
    assert_eq!(
        wire_common::metric(&m, "moldau_under_replicated_partitions"),
        Some(1),
        "{m}"
    );
    signal(&brokers[&follower], libc::SIGCONT);
    wait_for_partitions(&mut s, "d", "the resumed follower back in the ISR", |v| {
        v.get(&0).is_some_and(|p| p.isr == all)
    })
    .await;
    let (_, m) = leader_metrics(&brokers, &mut s).await;
    assert_eq!(
        wire_common::metric(&m, "moldau_under_replicated_partitions"),
        Some(0),
        "{m}"
    );

    // Divergence: both followers paused (long enough for their pending
    // fetches to be answered, so nothing new reaches them), the leader
    // takes acks=1 records they never get, and is killed.
    let view = wait_for_partitions(&mut s, "d", "in sync", |v| {
        v.get(&0).is_some_and(|p| p.isr == all)
    })
    .await;
    let old = view[&0].leader;
    let followers: Vec<i32> = all.iter().copied().filter(|r| *r != old).collect();
    let mut oc = brokers[&old].connect(Duration::from_secs(10)).await;
    for f in &followers {
        signal(&brokers[f], libc::SIGSTOP);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..3 {
        let req = kafka_protocol::messages::ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(5000)
            .with_topic_data(vec![
                kafka_protocol::messages::produce_request::TopicProduceData::default()
                    .with_name(wire_common::name("d"))
                    .with_partition_data(vec![
                        kafka_protocol::messages::produce_request::PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(wire_common::batch(&[
                                format!("lost{i}").into_bytes()
                            ]))),
                    ]),
            ]);
        let resp: kafka_protocol::messages::ProduceResponse =
            wire_common::call(&mut oc, kafka_protocol::messages::ApiKey::Produce, 9, &req).await;
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    }
    // not committed: no consumer sees them
    let seen = values(&mut oc, "d", 0).await;
    assert!(seen.iter().all(|v| !v.starts_with(b"lost")), "{seen:?}");
    brokers
        .get_mut(&old)
        .unwrap()
        .stop(libc::SIGKILL, Duration::from_secs(10))
        .await;
    for f in &followers {
        signal(&brokers[f], libc::SIGCONT);
    }
    let mut fs = brokers[&followers[0]]
        .connect(Duration::from_secs(10))
        .await;
    let failed_over = wait_for_partitions(&mut fs, "d", "a new leader", |v| {
        v.get(&0).is_some_and(|p| p.leader >= 0 && p.leader != old)
    })
    .await;
    let new_leader = failed_over[&0].leader;
    let mut nc = brokers[&new_leader].connect(Duration::from_secs(10)).await;
    for i in 0..2 {
        // a moment after the failover: retriable errors, as clients see them
        produce_retrying(&mut nc, "d", &format!("b{i}")).await;
    }
    let expected: Vec<Vec<u8>> = ["a0", "a1", "a2", "a3", "a4", "b0", "b1"]
        .iter()
        .map(|v| v.as_bytes().to_vec())
        .collect();
    read_eventually(&mut nc, "d", 0, expected.clone(), "on the new leader").await;

    // The old leader returns: it truncates what it alone had, catches up,
    // and — leading again as the preferred replica or not — serves exactly
    // what was acknowledged.
    brokers.insert(old, start(old));
    let mut oc = brokers[&old].connect(Duration::from_secs(30)).await;
    wait_for_partitions(&mut fs, "d", "the old leader back in sync", |v| {
        v.get(&0).is_some_and(|p| p.isr == all)
    })
    .await;
    assert!(
        brokers[&old].log().contains("truncated a diverged replica"),
        "{}",
        brokers[&old].log()
    );
    // The truncation rewrote the data directory's high watermark file at
    // once (one file for all partitions, no per-partition file): the old
    // leader's entry never exceeds the 7 acknowledged records.
    let hw_file = data(old).join(moldau_broker::storage::high_watermarks::FILE);
    let text = std::fs::read_to_string(&hw_file).unwrap();
    let entries = moldau_broker::storage::high_watermarks::parse(&text).expect("well formed");
    let entry = entries
        .values()
        .find(|e| e.topic == "d")
        .unwrap_or_else(|| panic!("no entry for d: {text}"));
    assert!(entry.high_watermark <= 7, "{text}");
    assert!(!data(old).join("d-0/high-watermark.checkpoint").exists());
    let leader_now = partitions(&mut fs, "d").await[&0].leader;
    let mut c = brokers[&leader_now].connect(Duration::from_secs(10)).await;
    read_eventually(
        &mut c,
        "d",
        0,
        expected.clone(),
        "after the old leader returned",
    )
    .await;
    // Leadership back on the old leader (preferred replica or not): its
    // log holds exactly the acknowledged records.
    if view[&0].replicas[0] == old {
        // (as the old leader itself sees it: then it serves as leader)
        wait_for_partitions(&mut oc, "d", "the preferred leader back", |v| {
            v.get(&0).is_some_and(|p| p.leader == old)
        })
        .await;
        read_eventually(&mut oc, "d", 0, expected, "on the old leader leading again").await;
    }
}

/// A consumer's Fetch of partition 0 of `topic` from `offset` at
/// `version`, naming `rack`: `(error, preferred read replica, records as
/// (offset, value))`.
async fn fetch_in_rack(
    s: &mut TcpStream,
    topic: &str,
    version: i16,
    rack: &str,
    offset: i64,
) -> (i16, i32, Vec<(i64, Vec<u8>)>) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse};
    use kafka_protocol::records::RecordBatchDecoder;
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_rack_id(kafka_protocol::protocol::StrBytes::from_string(
            rack.to_string(),
        ))
        .with_topics(vec![FetchTopic::default()
            .with_topic(wire_common::name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp: FetchResponse = wire_common::call(s, ApiKey::Fetch, version, &req).await;
    let p = &resp.responses[0].partitions[0];
    let mut records = p.records.clone().unwrap_or_default();
    let mut out = Vec::new();
    while bytes::Buf::has_remaining(&records) {
        let set = RecordBatchDecoder::decode(&mut records).expect("decode");
        out.extend(
            set.records
                .into_iter()
                .map(|r| (r.offset, r.value.unwrap_or_default().to_vec())),
        );
    }
    (p.error_code, p.preferred_read_replica.0, out)
}

/// [`fetch_in_rack`] from offset 0, the values only.
async fn fetch_as_consumer(
    s: &mut TcpStream,
    topic: &str,
    version: i16,
    rack: &str,
) -> (i16, i32, Vec<Vec<u8>>) {
    let (code, preferred, records) = fetch_in_rack(s, topic, version, rack, 0).await;
    (
        code,
        preferred,
        records.into_iter().map(|(_, v)| v).collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_naming_its_rack_reads_from_an_in_sync_replica_there() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let start = |n: i32| {
        spawn(
            &n.to_string(),
            &root.path().join(format!("data-{n}")),
            &shared,
            root.path(),
            &rack_settings(n, &[]),
        )
    };
    let brokers: BTreeMap<i32, wire_common::Child> = (0..3).map(|n| (n, start(n))).collect();
    let mut s = brokers[&0].connect(Duration::from_secs(30)).await;
    wait_until(&mut s, "k", "three brokers", |v| v.0.len() == 3).await;
    let view = create_in_sync(&mut s, "k", &[]).await;
    let all = [0, 1, 2];
    let leader = view[&0].leader;
    let mut lc = brokers[&leader].connect(Duration::from_secs(10)).await;
    for i in 0..3 {
        produce_retrying(&mut lc, "k", &format!("k{i}")).await;
    }
    let expected: Vec<Vec<u8>> = (0..3).map(|i| format!("k{i}").into_bytes()).collect();
    let follower = *all.iter().find(|n| **n != leader).unwrap();
    let rack = format!("rack-{follower}");

    // The leader sends a consumer of the follower's rack there...
    let (code, preferred, got) = fetch_as_consumer(&mut lc, "k", 11, &rack).await;
    assert_eq!(
        (code, preferred),
        (0, follower),
        "sent to the replica in its rack"
    );
    assert!(got.is_empty(), "no records with a redirect");
    // ...and serves one of its own rack (or naming none) itself.
    let (code, preferred, got) =
        fetch_as_consumer(&mut lc, "k", 11, &format!("rack-{leader}")).await;
    assert_eq!((code, preferred, got), (0, -1, expected.clone()));
    // The follower serves that consumer below its own high watermark.
    let mut fc = brokers[&follower].connect(Duration::from_secs(10)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (code, preferred, got) = fetch_as_consumer(&mut fc, "k", 11, &rack).await;
        assert_eq!((code, preferred), (0, -1));
        assert!(expected.starts_with(&got), "{got:?}");
        if got == expected {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the follower never served it all"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A client too old for KIP-392 (Fetch v10) still reads only from leaders.
    let (code, _, _) = fetch_as_consumer(&mut fc, "k", 10, &rack).await;
    assert_eq!(code, 6, "NOT_LEADER_OR_FOLLOWER below v11");
}

/// The fetch-session counters of one broker's metrics page: (full fetches,
/// incremental fetches, refused as unknown, evictions).
fn session_counters(page: &str) -> (u64, u64, u64, u64) {
    let m = |name: &str| wire_common::metric(page, name).unwrap_or(0);
    (
        m("moldau_fetch_session_requests_total{kind=\"full\"}"),
        m("moldau_fetch_session_requests_total{kind=\"incremental\"}"),
        m("moldau_fetch_session_errors_total{error=\"fetch_session_id_not_found\"}"),
        m("moldau_fetch_session_evictions_total"),
    )
}

/// Three brokers with `settings` added, and a connection to each.
async fn three_brokers(
    root: &std::path::Path,
    settings: &[&str],
) -> (BTreeMap<i32, wire_common::Child>, BTreeMap<i32, TcpStream>) {
    let shared = root.join("shared");
    let all: Vec<&str> = SETTINGS.iter().chain(settings).copied().collect();
    let brokers: BTreeMap<i32, wire_common::Child> = (0..3)
        .map(|n| {
            let data = root.join(format!("data-{n}"));
            (n, spawn(&n.to_string(), &data, &shared, root, &all))
        })
        .collect();
    let mut conns: BTreeMap<i32, TcpStream> = BTreeMap::new();
    for (n, b) in &brokers {
        conns.insert(*n, b.connect(Duration::from_secs(30)).await);
    }
    wait_until(conns.get_mut(&0).unwrap(), "s", "three brokers", |v| {
        v.0.len() == 3
    })
    .await;
    (brokers, conns)
}

/// Creates `topic` with `partitions` partitions, three replicas and
/// min.insync.replicas 3 (so an acknowledged record is on every broker:
/// each follower fetched it), retrying while a deletion of the same name
/// completes; has 5 records `<tag>p<partition>-<n>` acknowledged per
/// partition and reads them back from each leader.
async fn replicate(conns: &mut BTreeMap<i32, TcpStream>, topic: &str, partitions: i32, tag: &str) {
    let s0 = conns.get_mut(&0).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (code, message) =
            create_replicated(s0, topic, partitions, 3, &[("min.insync.replicas", "3")]).await;
        if code == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "creating {topic}: {code} {message:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let view = wait_for_partitions(s0, topic, "three in-sync replicas each", |v| {
        v.len() == partitions as usize && v.values().all(|p| p.isr.len() == 3)
    })
    .await;
    let value = |p: i32, n: usize| format!("{tag}p{p}-{n}");
    for round in 0..5 {
        for p in 0..partitions {
            produce_acked(conns, 0, topic, p, &value(p, round)).await;
        }
        // idle for a few fetches between rounds: the sessions' steady state
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for p in 0..partitions {
        let expected = (0..5).map(|n| value(p, n).into_bytes()).collect();
        let c = conns.get_mut(&view[&p].leader).unwrap();
        read_eventually(c, topic, p, expected, "every acknowledged record").await;
    }
}

/// Every broker's metrics page, by node.
async fn metrics_pages(brokers: &BTreeMap<i32, wire_common::Child>) -> BTreeMap<i32, String> {
    let mut pages = BTreeMap::new();
    for (n, b) in brokers {
        pages.insert(*n, b.metrics().await);
    }
    pages
}

/// Followers fetch through fetch sessions (KIP-227): after one full fetch
/// per follower, the leaders serve incremental ones; every record is
/// acknowledged by all three replicas. The topic is then deleted and
/// created again under its name: each follower's fetcher, left with no
/// partition on a leader, closes its session there (the leaders hold two
/// sessions at the end, not four, and evicted none), and new sessions
/// replicate the new topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_fetch_through_sessions() {
    let root = tempfile::tempdir().unwrap();
    let (brokers, mut conns) = three_brokers(root.path(), &[]).await;
    replicate(&mut conns, "s", 12, "a").await;
    let s0 = conns.get_mut(&0).unwrap();
    assert_eq!(wire_common::delete_topic(s0, "s").await, 0);
    replicate(&mut conns, "s", 12, "b").await;
    for (n, page) in &metrics_pages(&brokers).await {
        let (full, incremental, not_found, evictions) = session_counters(page);
        // each of the two followers: one full fetch to open its session,
        // one more for the topic created again (a few more if a fetch
        // broke while leaders moved)
        assert!((2..=8).contains(&full), "broker {n}: {full} full fetches");
        assert!(
            incremental >= 20 * full,
            "broker {n}: {incremental} incremental fetches against {full} full ones"
        );
        assert_eq!((not_found, evictions), (0, 0), "broker {n}");
        assert_eq!(
            wire_common::metric(page, "moldau_fetch_sessions"),
            Some(2),
            "broker {n}: one session per follower, the closed ones gone"
        );
    }
}

/// With one session slot per leader and no protection for idle sessions,
/// the two followers of every leader take the slot from each other at each
/// full fetch: the other's next incremental fetch is refused as unknown
/// and it starts over with a full one. Replication goes on through it: all
/// records are acknowledged by all three replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_survive_the_eviction_of_their_sessions() {
    let root = tempfile::tempdir().unwrap();
    let settings = [
        "max.incremental.fetch.session.cache.slots=1",
        "min.incremental.fetch.session.eviction.ms=0",
    ];
    let (brokers, mut conns) = three_brokers(root.path(), &settings).await;
    replicate(&mut conns, "s", 6, "").await;
    for (n, page) in &metrics_pages(&brokers).await {
        let (full, incremental, not_found, evictions) = session_counters(page);
        assert!(
            evictions > 0 && not_found > 0,
            "broker {n}: {evictions} evictions, {not_found} refused as unknown"
        );
        assert!(
            full > 2 && incremental > 0,
            "broker {n}: {full} full and {incremental} incremental fetches"
        );
        assert_eq!(wire_common::metric(page, "moldau_fetch_sessions"), Some(1));
    }
}

/// Every record of partition 0 of `topic` with its offset, read by a
/// consumer of `rack` (Fetch v12: served by a follower in that rack).
async fn fetch_all_in_rack(s: &mut TcpStream, topic: &str, rack: &str) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let (code, preferred, records) = fetch_in_rack(s, topic, 12, rack, offset).await;
        assert_eq!(
            (code, preferred),
            (0, -1),
            "fetch {topic} at {offset} in {rack}"
        );
        let Some(last) = records.last() else {
            return out;
        };
        offset = last.0 + 1;
        out.extend(records);
    }
}

/// Every record of partition 0 of `topic` with its offset, from its leader.
async fn leader_log(s: &mut TcpStream, topic: &str) -> Vec<(i64, Vec<u8>)> {
    wire_common::fetch_all(s, topic, 0)
        .await
        .into_iter()
        .map(|(o, v)| (o, v.to_vec()))
        .collect()
}

/// Whether some record's offset is more than one past the record before.
fn has_gaps(records: &[(i64, Vec<u8>)]) -> bool {
    records.windows(2).any(|w| w[1].0 > w[0].0 + 1)
}

/// A follower that starts over with an empty data directory copies a
/// compacted leader: the cleaned log has offset gaps, which the follower
/// keeps as they are (the leader's offsets, not renumbered ones). Its own
/// cleaner is off, so what it serves to a consumer of its rack must be
/// the leader's log record for record, offset for offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_follower_copies_a_compacted_log_with_its_offset_gaps() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let data = |n: i32| root.path().join(format!("data-{n}"));
    let start = |n: i32, extra: &[&'static str]| {
        let settings = rack_settings(n, &[&["log.cleaner.backoff.ms=200"], extra].concat());
        spawn(&n.to_string(), &data(n), &shared, root.path(), &settings)
    };
    let mut brokers: BTreeMap<i32, wire_common::Child> =
        (0..3).map(|n| (n, start(n, &[]))).collect();
    let mut s = brokers[&0].connect(Duration::from_secs(30)).await;
    let (_, controller, _) = wait_until(&mut s, "c", "three brokers", |v| v.0.len() == 3).await;
    let view = create_in_sync(
        &mut s,
        "c",
        &[
            ("cleanup.policy", "compact"),
            ("internal.segment.bytes", "16384"),
            ("min.cleanable.dirty.ratio", "0.01"),
        ],
    )
    .await;
    let all = [0, 1, 2];
    let leader = view[&0].leader;
    // not the controller's broker: the controller stays where it is
    let follower = *all
        .iter()
        .find(|n| **n != leader && **n != controller)
        .unwrap();

    // The follower goes, and its data with it.
    brokers
        .get_mut(&follower)
        .unwrap()
        .stop(libc::SIGKILL, Duration::from_secs(10))
        .await;
    std::fs::remove_dir_all(data(follower)).unwrap();
    let mut lc = brokers[&leader].connect(Duration::from_secs(10)).await;
    wait_for_partitions(&mut lc, "c", "the follower out of the ISR", |v| {
        v.get(&0).is_some_and(|p| !p.isr.contains(&follower))
    })
    .await;

    // 20 keys, then 29 rounds of the first 10 (~2 KB a batch, in many
    // segments); the leader cleans them down to the latest value of each
    // key: the first round's second half, a gap, then the latest rounds.
    let mut written = 0;
    for r in 0..30 {
        let keys = if r == 0 { 20 } else { 10 };
        let values: Vec<Vec<u8>> = (0..keys)
            .map(|i| format!("v{r}-{i}-{}", "x".repeat(200)).into_bytes())
            .collect();
        let (code, _) = wire_common::produce(&mut lc, "c", wire_common::batch(&values)).await;
        assert_eq!(code, 0, "round {r}");
        written += values.len();
    }
    // cleaned, and settled: the same log in two reads a second apart (the
    // follower copies it with its own cleaner off, so the leader's must
    // have finished)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut previous = Vec::new();
    let cleaned = loop {
        let read = leader_log(&mut lc, "c").await;
        if read.len() < written / 2 && has_gaps(&read) && read == previous {
            break read;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the leader never settled cleaned: {} of {written} records, offsets {:?}",
            read.len(),
            read.iter().map(|r| r.0).collect::<Vec<_>>()
        );
        previous = read;
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(cleaned[0].1.starts_with(b"v0-10-"), "{:?}", cleaned[0].0);
    // the latest round is whole, at the end
    let last: Vec<Vec<u8>> = cleaned[cleaned.len() - 10..]
        .iter()
        .map(|(_, v)| v.clone())
        .collect();
    assert!(last.iter().all(|v| v.starts_with(b"v29-")), "{last:?}");

    // Back with an empty log and no cleaner of its own: it fetches the
    // cleaned log from offset 0, joins the ISR, and serves exactly it.
    brokers.insert(follower, start(follower, &["log.cleaner.enable=false"]));
    wait_for_partitions(&mut lc, "c", "the follower back in the ISR", |v| {
        v.get(&0).is_some_and(|p| p.isr.contains(&follower))
    })
    .await;
    let mut fc = brokers[&follower].connect(Duration::from_secs(30)).await;
    let rack = format!("rack-{follower}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let on_leader = leader_log(&mut lc, "c").await;
        let on_follower = fetch_all_in_rack(&mut fc, "c", &rack).await;
        if on_follower == on_leader {
            assert!(has_gaps(&on_follower), "the copy has the leader's gaps");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the follower serves {} records ({:?}..), the leader {} ({:?}..)",
            on_follower.len(),
            on_follower.iter().map(|r| r.0).take(8).collect::<Vec<_>>(),
            on_leader.len(),
            on_leader.iter().map(|r| r.0).take(8).collect::<Vec<_>>(),
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
