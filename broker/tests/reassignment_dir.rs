//! Partition reassignment across four real broker processes (`--cluster
//! dir`, all on 127.0.0.1), through Kafka's own admin APIs
//! (AlterPartitionReassignments / ListPartitionReassignments, KIP-455):
//! a replica set moved onto a broker that had none — the leader among the
//! leaving replicas — completes once the new replica has caught up: the
//! new replica leads and serves every acknowledged record, the leaving
//! broker's copy is deleted from its disk, nothing runs any more. A move
//! that cannot complete (its new replica is stopped) is listed with its
//! adding and removing replicas, and cancelling it restores the original
//! replicas. Kafka's errors for bad requests.

mod cluster_common;
mod wire_common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cluster_common::*;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use tokio::net::TcpStream;

const SETTINGS: &[&str] = &[
    "broker.session.timeout.ms=3000",
    "replica.lag.time.max.ms=2000",
    "replica.fetch.wait.max.ms=100",
    "replica.fetch.backoff.ms=100",
    // leadership stays where reassignment puts it
    "auto.leader.rebalance.enable=false",
];

/// AlterPartitionReassignments of one partition at `version`: `(top-level
/// error, partition error, message)`. `target: None` cancels.
async fn reassign(
    s: &mut TcpStream,
    version: i16,
    topic: &str,
    partition: i32,
    target: Option<&[i32]>,
    allow_rf_change: bool,
) -> (i16, i16, Option<String>) {
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_allow_replication_factor_change(allow_rf_change)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(wire_common::name(topic))
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(partition)
                .with_replicas(
                    target.map(|t| t.iter().copied().map(BrokerId).collect()),
                )])]);
    let resp: AlterPartitionReassignmentsResponse =
        wire_common::call(s, ApiKey::AlterPartitionReassignments, version, &req).await;
    let p = &resp.responses[0].partitions[0];
    (
        resp.error_code,
        p.error_code,
        p.error_message.as_ref().map(|m| m.to_string()),
    )
}

/// The running reassignments ListPartitionReassignments shows:
/// `{(topic, partition): (replicas, adding, removing)}`.
async fn running(
    s: &mut TcpStream,
    only: Option<(&str, &[i32])>,
) -> BTreeMap<(String, i32), (Vec<i32>, Vec<i32>, Vec<i32>)> {
    let req = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(only.map(|(t, ps)| {
            vec![ListPartitionReassignmentsTopics::default()
                .with_name(wire_common::name(t))
                .with_partition_indexes(ps.to_vec())]
        }));
    let resp: ListPartitionReassignmentsResponse =
        wire_common::call(s, ApiKey::ListPartitionReassignments, 0, &req).await;
    assert_eq!(resp.error_code, 0);
    let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<i32>>();
    resp.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    (t.name.to_string(), p.partition_index),
                    (
                        ids(&p.replicas),
                        ids(&p.adding_replicas),
                        ids(&p.removing_replicas),
                    ),
                )
            })
        })
        .collect()
}

fn sorted(v: &[i32]) -> Vec<i32> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_move_to_another_broker_and_a_stuck_move_is_cancelled() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let data = |n: i32| root.path().join(format!("data-{n}"));
    let mut brokers: BTreeMap<i32, wire_common::Child> = (0..4)
        .map(|n| {
            let b = spawn(&n.to_string(), &data(n), &shared, root.path(), SETTINGS);
            (n, b)
        })
        .collect();
    let mut s = brokers[&0].connect(Duration::from_secs(30)).await;
    wait_until(&mut s, "m", "four brokers", |v| v.0.len() == 4).await;
    let (code, message) = create_replicated(&mut s, "m", 2, 3, &[]).await;
    assert_eq!(code, 0, "{message:?}");
    let before = wait_for_partitions(&mut s, "m", "in sync", |v| {
        v.len() == 2
            && v.values()
                .all(|p| p.leader >= 0 && sorted(&p.isr) == sorted(&p.replicas))
    })
    .await;
    let all: BTreeSet<i32> = (0..4).collect();
    let absent = |p: &PartitionView| *all.iter().find(|b| !p.replicas.contains(b)).unwrap();

    // records to move
    let leader = before[&0].leader;
    let mut lc = brokers[&leader].connect(Duration::from_secs(10)).await;
    let expected: Vec<Vec<u8>> = (0..20).map(|i| format!("r{i}").into_bytes()).collect();
    for v in &expected {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let code = produce_to(&mut lc, "m", 0, v).await;
            if code == 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "produce: error {code}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // Partition 0 moves onto the broker that has no replica of it, which
    // comes first; the current leader leaves.
    let newcomer = absent(&before[&0]);
    let stays: Vec<i32> = before[&0]
        .replicas
        .iter()
        .copied()
        .filter(|r| *r != leader)
        .collect();
    let target: Vec<i32> = std::iter::once(newcomer).chain(stays).collect();
    assert_eq!(
        reassign(&mut s, 1, "m", 0, Some(&target), false).await,
        (0, 0, None)
    );
    let moved = wait_for_partitions(&mut s, "m", "the move completed", |v| {
        v[&0].replicas == target && sorted(&v[&0].isr) == sorted(&target)
    })
    .await;
    assert_eq!(
        moved[&0].leader, newcomer,
        "the first target replica in sync leads"
    );
    assert!(moved[&0].epoch > before[&0].epoch, "a new leader epoch");
    assert!(
        running(&mut s, None).await.is_empty(),
        "nothing runs any more"
    );
    let mut nc = brokers[&newcomer].connect(Duration::from_secs(10)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match try_values(&mut nc, "m", 0).await {
            Ok(got) if got == expected => break,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the new replica serves {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    // the leaving broker's copy goes from its disk
    let gone = data(leader).join("m-0");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while gone.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} still exists",
            gone.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(data(newcomer).join("m-0").exists());
    assert!(
        brokers[&leader]
            .log()
            .contains("removing a replica moved to other brokers"),
        "{}",
        brokers[&leader].log()
    );

    // Partition 1 moves onto a stopped (registered, fenced) broker: it
    // cannot catch up, so the move runs until cancelled, which restores
    // the original replicas.
    let p1 = before[&1].clone();
    let stuck = absent(&p1);
    brokers
        .get_mut(&stuck)
        .unwrap()
        .stop(libc::SIGTERM, Duration::from_secs(20))
        .await;
    let asked = *all.iter().find(|b| **b != stuck).unwrap();
    let mut s = brokers[&asked].connect(Duration::from_secs(10)).await;
    let mut target = p1.replicas.clone();
    let out = *target.iter().find(|r| **r != p1.leader).unwrap();
    target.retain(|r| *r != out);
    target.insert(0, stuck);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        // a moment after the stop, the controller may be moving
        match reassign(&mut s, 0, "m", 1, Some(&target), true).await {
            (0, 0, None) => break,
            other => {
                assert!(tokio::time::Instant::now() < deadline, "{other:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let listed = running(&mut s, Some(("m", &[0, 1]))).await;
    assert_eq!(
        listed.get(&("m".to_string(), 1)),
        Some(&(
            target.iter().copied().chain([out]).collect(),
            vec![stuck],
            vec![out]
        )),
        "{listed:?}"
    );
    assert!(running(&mut s, Some(("m", &[0]))).await.is_empty());
    let shown = partitions(&mut s, "m").await;
    assert_eq!(
        shown[&1].replicas.len(),
        4,
        "Metadata lists every replica while it runs"
    );
    assert_eq!(
        reassign(&mut s, 1, "m", 1, None, true).await,
        (0, 0, None),
        "cancelled"
    );
    let back = wait_for_partitions(&mut s, "m", "the original replicas again", |v| {
        sorted(&v[&1].replicas) == sorted(&p1.replicas)
    })
    .await;
    assert_eq!(back[&1].leader, p1.leader);
    assert!(running(&mut s, None).await.is_empty());

    // Kafka's errors
    let (_, code, _) = reassign(&mut s, 1, "nope", 0, Some(&[0, 1, 2]), true).await;
    assert_eq!(code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    let (_, code, message) = reassign(&mut s, 1, "m", 1, Some(&[0, 1, 99]), true).await;
    assert_eq!(code, 39, "INVALID_REPLICA_ASSIGNMENT: {message:?}");
    let (_, code, _) = reassign(&mut s, 1, "m", 1, Some(&[0, 0, 1]), true).await;
    assert_eq!(code, 39, "a repeated broker");
    let (_, code, _) = reassign(&mut s, 1, "m", 1, Some(&[0, 1]), false).await;
    assert_eq!(
        code, 38,
        "INVALID_REPLICATION_FACTOR without allow_replication_factor_change"
    );
    let (_, code, _) = reassign(&mut s, 1, "m", 1, None, true).await;
    assert_eq!(code, 85, "NO_REASSIGNMENT_IN_PROGRESS");
}

/// IncrementalAlterConfigs SET of one config of broker entity `entity`:
/// its error code.
async fn alter_broker_config(s: &mut TcpStream, entity: &str, name: &str, value: &str) -> i16 {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::{
        IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    };
    use kafka_protocol::protocol::StrBytes;
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(StrBytes::from_string(entity.to_string()))
            .with_configs(vec![AlterableConfig::default()
                .with_name(StrBytes::from_string(name.to_string()))
                .with_config_operation(0)
                .with_value(Some(StrBytes::from_string(value.to_string())))]),
    ]);
    let resp: IncrementalAlterConfigsResponse =
        wire_common::call(s, ApiKey::IncrementalAlterConfigs, 1, &req).await;
    resp.responses[0].error_code
}

/// Moves `topic`-0 (one replica) onto a second broker and returns how long
/// it took to complete (Metadata shows both replicas in sync).
async fn time_a_move(s: &mut TcpStream, topic: &str) -> Duration {
    let p = partitions(s, topic).await[&0].clone();
    let other = (0..3).find(|b| *b != p.leader).unwrap();
    let target = [p.leader, other];
    let started = tokio::time::Instant::now();
    assert_eq!(
        reassign(s, 0, topic, 0, Some(&target), true).await,
        (0, 0, None)
    );
    let deadline = started + Duration::from_secs(90);
    loop {
        let now = partitions(s, topic).await;
        if sorted(&now[&0].isr) == sorted(&target) && now[&0].replicas == target {
            return started.elapsed();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{topic}: never completed: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_move_goes_at_the_throttled_rate() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let settings: Vec<&str> = SETTINGS
        .iter()
        .copied()
        // the rates are set dynamically below: were they not applied, the
        // move would be as fast as the unthrottled one
        .chain(["replica.fetch.max.bytes=65536"])
        .collect();
    let brokers: BTreeMap<i32, wire_common::Child> = (0..3)
        .map(|n| {
            let data = root.path().join(format!("data-{n}"));
            (
                n,
                spawn(&n.to_string(), &data, &shared, root.path(), &settings),
            )
        })
        .collect();
    let mut s = brokers[&0].connect(Duration::from_secs(30)).await;
    wait_until(&mut s, "slow", "three brokers", |v| v.0.len() == 3).await;
    let throttle_all = [
        ("leader.replication.throttled.replicas", "*"),
        ("follower.replication.throttled.replicas", "*"),
    ];
    assert_eq!(
        create_replicated(&mut s, "slow", 1, 1, &throttle_all)
            .await
            .0,
        0
    );
    assert_eq!(create_replicated(&mut s, "fast", 1, 1, &[]).await.0, 0);
    let (code, message) = create_replicated(
        &mut s,
        "bad",
        1,
        1,
        &[("leader.replication.throttled.replicas", "0-1")],
    )
    .await;
    assert_eq!(code, 40, "INVALID_CONFIG: {message:?}");
    // dynamic broker configs: the cluster-wide default entity "" and
    // each broker's own
    assert_eq!(
        alter_broker_config(&mut s, "", "follower.replication.throttled.rate", "100000").await,
        0
    );
    for n in 0..3 {
        let entity = n.to_string();
        let code = alter_broker_config(
            &mut s,
            &entity,
            "leader.replication.throttled.rate",
            "100000",
        )
        .await;
        assert_eq!(code, 0);
    }
    assert_eq!(
        alter_broker_config(&mut s, "", "num.partitions", "1").await,
        42,
        "INVALID_REQUEST: not a dynamic config"
    );
    assert_eq!(
        alter_broker_config(&mut s, "1", "follower.replication.throttled.rate", "-5").await,
        42,
        "INVALID_REQUEST: Kafka's code for every broker config value it refuses"
    );
    // 1 MB in each: 100 records of 10 KB
    let value = vec![b'x'; 10_000];
    for topic in ["slow", "fast"] {
        let leader =
            wait_for_partitions(&mut s, topic, "led", |v| v[&0].leader >= 0).await[&0].leader;
        let mut lc = brokers[&leader].connect(Duration::from_secs(10)).await;
        for _ in 0..100 {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
            while produce_to(&mut lc, topic, 0, &value).await != 0 {
                assert!(tokio::time::Instant::now() < deadline);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let fast = time_a_move(&mut s, "fast").await;
    let slow = time_a_move(&mut s, "slow").await;
    // 1 MB at 100 KB/s, less what the first second lets through: several
    // seconds however fast the machine; unthrottled, it is one fetch round
    assert!(
        slow >= Duration::from_secs(5),
        "a throttled 1 MB move took {slow:?}"
    );
    assert!(fast < slow, "unthrottled {fast:?}, throttled {slow:?}");
    // and the moved replica has everything
    let leader = partitions(&mut s, "slow").await[&0].leader;
    let mut lc = brokers[&leader].connect(Duration::from_secs(10)).await;
    assert_eq!(values(&mut lc, "slow", 0).await.len(), 100);
}
