//! Failover of a three-broker `--cluster dir` cluster, as clients feel it
//! (issue 40): a controller stopped (SIGSTOP) for longer than a broker
//! session fences nobody when it resumes; a controller stopped for good is
//! replaced within the lease, its broker fenced at once by the new
//! controller, so acks=all producers to partitions it followed wait no
//! longer than Kafka's bound (session timeout + heartbeat, 12 s), and the
//! resumed old controller steps down and rejoins; a broker that comes
//! back gets its preferred leaderships back (auto leader rebalance).
//!
//! Real broker processes on 127.0.0.1 with the default lease, session and
//! heartbeat settings unless a test says otherwise.

mod cluster_common;
mod wire_common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cluster_common::*;
use tokio::net::TcpStream;
use wire_common::Child;

fn signal(b: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(b.child.id() as libc::pid_t, sig) }, 0);
}

/// Kafka's defaults (the test helper shortens them otherwise).
const DEFAULTS: &[&str] = &[
    "broker.heartbeat.interval.ms=2000",
    "broker.session.timeout.ms=9000",
];

struct Cluster {
    root: tempfile::TempDir,
    brokers: BTreeMap<i32, Child>,
}

impl Cluster {
    fn start(settings: &[&str]) -> Self {
        let root = tempfile::tempdir().unwrap();
        let shared = root.path().join("shared");
        let brokers = (0..3)
            .map(|n| {
                let data = root.path().join(format!("data-{n}"));
                (
                    n,
                    spawn(&n.to_string(), &data, &shared, root.path(), settings),
                )
            })
            .collect();
        Self { root, brokers }
    }

    async fn conn(&self, n: i32) -> TcpStream {
        self.brokers[&n].connect(Duration::from_secs(30)).await
    }

    /// A replicated topic of `partitions` partitions, every ISR full.
    async fn topic(&self, topic: &str, partitions: i32) -> BTreeMap<i32, PartitionView> {
        let mut s = self.conn(0).await;
        wait_until(&mut s, "x", "three brokers", |v| v.0.len() == 3).await;
        let (code, message) = create_replicated(
            &mut s,
            topic,
            partitions,
            3,
            &[("min.insync.replicas", "2")],
        )
        .await;
        assert_eq!(code, 0, "{message:?}");
        wait_for_partitions(&mut s, topic, "every ISR full", |v| {
            v.len() == partitions as usize && v.values().all(|p| p.isr.len() == 3)
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_paused_past_the_session_timeout_fences_nobody() {
    // A lease longer than the pause, so the paused controller is still the
    // controller when it resumes (the case of issue 40, item 1).
    let mut settings = DEFAULTS.to_vec();
    settings.push("controller.lease.duration.ms=40000");
    settings.push("controller.lease.retry.ms=2000");
    let c = Cluster::start(&settings);
    let before = c.topic("p", 3).await;
    let mut s = c.conn(0).await;
    let (_, controller, _) = view(&mut s, "p").await;
    let other = (controller + 1) % 3;
    let mut s = c.conn(other).await;

    signal(&c.brokers[&controller], libc::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(12)).await;
    signal(&c.brokers[&controller], libc::SIGCONT);
    // time for a resumed controller to (wrongly) fence, and for the
    // elections that would follow
    tokio::time::sleep(Duration::from_secs(4)).await;

    let log = c.brokers[&controller].log();
    assert!(
        !log.contains("brokers fenced after missing heartbeats"),
        "the resumed controller fenced brokers:\n{log}"
    );
    assert!(
        log.contains("the controller was away"),
        "the gap was noticed:\n{log}"
    );
    let (v, after) = snapshot(&mut s, "p").await;
    assert_eq!(v.0, BTreeSet::from([0, 1, 2]), "every broker in service");
    assert_eq!(v.1, controller, "still the controller");
    for (p, was) in &before {
        assert_eq!(
            (after[p].leader, after[p].epoch),
            (was.leader, was.epoch),
            "partition {p}: no election"
        );
    }
}

/// Produces acks=all to every partition led by a broker other than
/// `avoid` until `deadline`; returns the longest time between two
/// acknowledged produces (anywhere) and how many were acknowledged.
async fn produce_through(
    c: &Cluster,
    topic: &str,
    avoid: i32,
    deadline: tokio::time::Instant,
) -> (Duration, usize) {
    let mut conns: BTreeMap<i32, TcpStream> = BTreeMap::new();
    for n in c.brokers.keys().filter(|n| **n != avoid) {
        conns.insert(*n, c.conn(*n).await);
    }
    let mut last_ack = tokio::time::Instant::now();
    let mut longest = Duration::ZERO;
    let mut acked = 0;
    let mut i = 0u64;
    while tokio::time::Instant::now() < deadline {
        let any = *conns.keys().next().unwrap();
        let leaders = partitions(conns.get_mut(&any).unwrap(), topic).await;
        for (p, view) in leaders {
            let Some(s) = conns.get_mut(&view.leader) else {
                continue;
            };
            i += 1;
            let code = tokio::time::timeout(
                Duration::from_secs(6),
                produce_to(s, topic, p, format!("r{i}").as_bytes()),
            )
            .await
            .unwrap_or(-1);
            if code == 0 {
                let now = tokio::time::Instant::now();
                longest = longest.max(now - last_ack);
                last_ack = now;
                acked += 1;
            } else if code == -1 {
                // a timed-out call leaves the connection mid-answer
                conns.insert(view.leader, c.conn(view.leader).await);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (longest, acked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_controller_costs_acks_all_producers_less_than_kafkas_bound() {
    let c = Cluster::start(DEFAULTS);
    c.topic("f", 6).await;
    let mut s = c.conn(0).await;
    let (_, controller, _) = view(&mut s, "f").await;
    let survivor = (controller + 1) % 3;

    // acks=all works before the fault
    let warm = tokio::time::Instant::now() + Duration::from_secs(1);
    let (_, acked) = produce_through(&c, "f", controller, warm).await;
    assert!(acked > 0);

    signal(&c.brokers[&controller], libc::SIGSTOP);
    let stopped = tokio::time::Instant::now();
    let (longest, acked) =
        produce_through(&c, "f", controller, stopped + Duration::from_secs(20)).await;
    assert!(
        acked > 0,
        "nothing acknowledged after the controller stopped"
    );
    assert!(
        longest <= Duration::from_secs(12),
        "acks=all stalled {longest:?}, beyond Kafka's session timeout + heartbeat (12 s)"
    );
    let mut s = c.conn(survivor).await;
    let (v, parts) = snapshot(&mut s, "f").await;
    assert_ne!(v.1, controller, "a new controller");
    assert!(!v.0.contains(&controller), "the stopped broker is fenced");
    assert!(
        parts.values().all(|p| !p.isr.contains(&controller)),
        "and out of every ISR: {parts:?}"
    );
    let new_controller = v.1;
    let log = c.brokers[&new_controller].log();
    assert!(
        log.contains("won the controller lease"),
        "the survivor took the lease:\n{log}"
    );

    // It resumes: it must not act as controller, and it rejoins.
    signal(&c.brokers[&controller], libc::SIGCONT);
    let all = BTreeSet::from([0, 1, 2]);
    let v = wait_until(&mut s, "f", "the resumed broker back", |v| v.0 == all).await;
    assert_eq!(v.1, new_controller, "the new controller stays");
    let resumed_log = c.brokers[&controller].log();
    assert!(
        resumed_log.contains("stepping down") || resumed_log.contains("lost the controller lease"),
        "the old controller stepped down:\n{resumed_log}"
    );
    // No request was held past its own timeout by a broker that kept
    // running (the stopped one answers what it held once it resumes).
    for (_, b) in c.brokers.iter().filter(|(n, _)| **n != controller) {
        let m = b.metrics().await;
        assert_eq!(
            wire_common::metric(&m, "moldau_requests_overdue"),
            Some(0),
            "{m}"
        );
        assert!(
            !m.lines()
                .any(|l| l.starts_with("moldau_requests_answered_overdue_total{")),
            "requests answered past their deadline:\n{m}"
        );
    }
    drop(c.root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_controller_is_replaced_at_once_and_its_broker_fenced_quickly() {
    let mut c = Cluster::start(DEFAULTS);
    c.topic("k", 3).await;
    let mut s = c.conn(0).await;
    let (_, controller, _) = view(&mut s, "k").await;
    let survivor = (controller + 1) % 3;
    let mut s = c.conn(survivor).await;
    let mut dead = c.brokers.remove(&controller).unwrap();
    let killed = tokio::time::Instant::now();
    dead.stop(libc::SIGKILL, Duration::from_secs(10)).await;
    let rest: BTreeSet<i32> = c.brokers.keys().copied().collect();
    wait_until(
        &mut s,
        "k",
        "a new controller, the dead broker fenced",
        |v| v.0 == rest && rest.contains(&v.1),
    )
    .await;
    // the lease's holder is gone (its lock went with it): the take-over is
    // immediate, and the dead broker has the take-over grace (1 s), not a
    // session timeout
    let took = killed.elapsed();
    eprintln!("controller killed: new controller and the dead broker fenced after {took:?}");
    assert!(took < Duration::from_secs(6), "fenced after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_broker_gets_its_preferred_leaderships_back() {
    let mut settings = DEFAULTS.to_vec();
    settings.push("leader.imbalance.check.interval.seconds=3");
    let c = Cluster::start(&settings);
    let before = c.topic("b", 6).await;
    let mut s = c.conn(0).await;
    let (_, controller, _) = view(&mut s, "b").await;
    let paused = (controller + 1) % 3;
    let preferred: BTreeSet<i32> = before
        .iter()
        .filter(|(_, p)| p.replicas[0] == paused)
        .map(|(i, _)| *i)
        .collect();
    assert!(!preferred.is_empty());
    let mut s = c.conn(controller).await;
    signal(&c.brokers[&paused], libc::SIGSTOP);
    wait_for_partitions(&mut s, "b", "its leaderships moved away", |v| {
        v.values()
            .all(|p| p.leader != paused && !p.isr.contains(&paused))
    })
    .await;
    signal(&c.brokers[&paused], libc::SIGCONT);
    let back = wait_for_partitions(&mut s, "b", "its preferred leaderships back", |v| {
        preferred.iter().all(|i| v[i].leader == paused)
    })
    .await;
    for i in &preferred {
        assert!(back[i].isr.contains(&paused));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_broker_succeeds_itself_at_once_and_serves_only_the_clusters_metadata() {
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
    let mut c = Cluster::start(DEFAULTS);
    c.topic("r", 3).await;
    let mut s = c.conn(0).await;
    let (_, controller, _) = view(&mut s, "r").await;
    let cluster_id = {
        let m: MetadataResponse = wire_common::call(
            &mut s,
            ApiKey::Metadata,
            12,
            &MetadataRequest::default().with_topics(None),
        )
        .await;
        m.cluster_id.expect("cluster id").to_string()
    };
    let victim = (controller + 1) % 3;
    let data = c.root.path().join(format!("data-{victim}"));
    let shared = c.root.path().join("shared");

    // A second process on a live broker's data directory refuses to start.
    let mut second = spawn("9", &data, &shared, c.root.path(), DEFAULTS);
    let status = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(st) = second.child.try_wait().unwrap() {
                return st;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the second process exits");
    assert!(!status.success());
    assert!(
        second
            .log()
            .contains("another process holds the data directory"),
        "{}",
        second.log()
    );
    drop(second);

    // kill -9 and an immediate restart on the same directory: it proves it
    // succeeds its old incarnation and is back in service at once, not
    // after the old one's session timeout (9 s).
    let mut old = c.brokers.remove(&victim).unwrap();
    old.stop(libc::SIGKILL, Duration::from_secs(10)).await;
    let restarted = tokio::time::Instant::now();
    let back = spawn(&victim.to_string(), &data, &shared, c.root.path(), DEFAULTS);
    // Whatever it answers, it answers for the cluster: its first Metadata
    // names the cluster's id and every broker.
    let mut sb = back.connect(Duration::from_secs(30)).await;
    let m: MetadataResponse = wire_common::call(
        &mut sb,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    )
    .await;
    assert_eq!(m.cluster_id.map(|c| c.to_string()), Some(cluster_id));
    assert_ne!(m.controller_id.0, -1);
    let all = BTreeSet::from([0, 1, 2]);
    // asked of the controller: `s` may be the victim's connection (broker 0
    // is the victim when broker 2 is the controller)
    let mut on_controller = c.conn(controller).await;
    wait_until(
        &mut on_controller,
        "r",
        "the restarted broker in service",
        |v| v.0 == all,
    )
    .await;
    let took = restarted.elapsed();
    eprintln!("kill -9 and restart: back in service after {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "back in service after {took:?}"
    );
    assert!(
        c.brokers[&controller]
            .log()
            .contains("replaces its previous incarnation at once"),
        "{}",
        c.brokers[&controller].log()
    );
}
