//! Explicit replica assignments (`kafka-topics --create|--alter
//! --replica-assignment`, Admin `NewTopic(name, replicasAssignments)`,
//! `NewPartitions.increaseTo(n, assignments)`) in a cluster of three
//! broker processes (`--cluster dir`), sent to a broker that is not the
//! controller: `validate_only` checks and creates nothing; the create puts
//! every partition on exactly the replicas given, led by the first; Kafka's
//! refusals (INVALID_REPLICA_ASSIGNMENT for an unknown broker, a repeated
//! one, uneven counts or a gap; INVALID_REQUEST with a count or factor
//! beside the assignments); CreatePartitions with assignments adds
//! partitions on the replicas given.

mod cluster_common;
mod wire_common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cluster_common::*;
use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse,
};
use tokio::net::TcpStream;
use wire_common::{call, name, Child};

const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const INVALID_REQUEST: i16 = 42;

/// Explicit `(partition, replicas)` of a CreateTopics request.
type Assignments<'a> = &'a [(i32, &'a [i32])];

/// One topic's CreateTopics answer: `(code, message, partitions, factor)`.
type Created = (i16, Option<String>, i32, i16);

/// CreateTopics v7 of one topic with explicit `assignments`.
async fn create(
    s: &mut TcpStream,
    topic: &str,
    partitions: i32,
    factor: i16,
    assignments: Assignments<'_>,
    validate_only: bool,
) -> Created {
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_validate_only(validate_only)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(factor)
            .with_assignments(
                assignments
                    .iter()
                    .map(|(p, r)| {
                        CreatableReplicaAssignment::default()
                            .with_partition_index(*p)
                            .with_broker_ids(r.iter().map(|b| BrokerId(*b)).collect())
                    })
                    .collect(),
            )]);
    let resp: CreateTopicsResponse = call(s, ApiKey::CreateTopics, 7, &req).await;
    let t = &resp.topics[0];
    (
        t.error_code,
        t.error_message.as_ref().map(|m| m.to_string()),
        t.num_partitions,
        t.replication_factor,
    )
}

/// CreatePartitions v3 of one topic to `count`, with `assignments`.
async fn grow(s: &mut TcpStream, topic: &str, count: i32, assignments: &[&[i32]]) -> i16 {
    let req = CreatePartitionsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(name(topic))
            .with_count(count)
            .with_assignments(Some(
                assignments
                    .iter()
                    .map(|r| {
                        CreatePartitionsAssignment::default()
                            .with_broker_ids(r.iter().map(|b| BrokerId(*b)).collect())
                    })
                    .collect(),
            ))]);
    let resp: CreatePartitionsResponse = call(s, ApiKey::CreatePartitions, 3, &req).await;
    resp.results[0].error_code
}

/// `{partition: (replicas, leader, sorted ISR)}` as `s`'s broker shows it.
type Placed = BTreeMap<i32, (Vec<i32>, i32, Vec<i32>)>;

fn placed(parts: &BTreeMap<i32, PartitionView>) -> Placed {
    parts
        .iter()
        .map(|(i, p)| (*i, (p.replicas.clone(), p.leader, p.isr.clone())))
        .collect()
}

fn sorted(v: &[i32]) -> Vec<i32> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_assignments_are_taken_as_given_through_any_broker() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let brokers: BTreeMap<i32, Child> = (0..3)
        .map(|n| {
            let data = root.path().join(format!("data-{n}"));
            (n, spawn(&n.to_string(), &data, &shared, root.path(), &[]))
        })
        .collect();
    let mut s0 = brokers[&0].connect(Duration::from_secs(30)).await;
    let all: BTreeSet<i32> = [0, 1, 2].into();
    let (_, controller, _) = wait_until(&mut s0, "m", "three brokers", |v| v.0 == all).await;
    let other = (controller + 1) % 3;
    let mut s = brokers[&other].connect(Duration::from_secs(10)).await;
    wait_until(&mut s, "m", "three brokers here too", |v| v.0 == all).await;

    let wanted: [(i32, &[i32]); 3] = [(2, &[0, 1]), (0, &[1, 2]), (1, &[2, 0])];
    // validate_only: checked, answered with what would be made, nothing made.
    let (code, message, count, factor) = create(&mut s, "m", -1, -1, &wanted, true).await;
    assert_eq!((code, count, factor), (0, 3, 2), "{message:?}");
    assert_eq!(
        create(&mut s, "m", -1, -1, &[(0, &[0, 7])], true).await.0,
        INVALID_REPLICA_ASSIGNMENT,
        "validate_only refuses what the create would"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(partitions(&mut s0, "m").await.is_empty(), "validate only");

    let (code, message, count, factor) = create(&mut s, "m", -1, -1, &wanted, false).await;
    assert_eq!((code, count, factor), (0, 3, 2), "{message:?}");
    let expected: Placed = [
        (0, (vec![1, 2], 1, vec![1, 2])),
        (1, (vec![2, 0], 2, vec![0, 2])),
        (2, (vec![0, 1], 0, vec![0, 1])),
    ]
    .into();
    for b in brokers.values() {
        let mut c = b.connect(Duration::from_secs(10)).await;
        let got = wait_for_partitions(&mut c, "m", "the topic", |p| p.len() == 3).await;
        assert_eq!(placed(&got), expected, "exactly the replicas given");
    }

    // Kafka's refusals.
    let refused: [(&str, i32, i16, Assignments, i16); 7] = [
        (
            "unknown broker",
            -1,
            -1,
            &[(0, &[0, 7])],
            INVALID_REPLICA_ASSIGNMENT,
        ),
        (
            "a replica twice",
            -1,
            -1,
            &[(0, &[1, 1])],
            INVALID_REPLICA_ASSIGNMENT,
        ),
        (
            "uneven counts",
            -1,
            -1,
            &[(0, &[0, 1]), (1, &[2])],
            INVALID_REPLICA_ASSIGNMENT,
        ),
        (
            "a gap",
            -1,
            -1,
            &[(0, &[0]), (2, &[1])],
            INVALID_REPLICA_ASSIGNMENT,
        ),
        (
            "an empty list",
            -1,
            -1,
            &[(0, &[])],
            INVALID_REPLICA_ASSIGNMENT,
        ),
        ("a count beside", 1, -1, &[(0, &[0])], INVALID_REQUEST),
        ("a factor beside", -1, 1, &[(0, &[0])], INVALID_REQUEST),
    ];
    for (what, count, factor, assignments, want) in refused {
        let (code, message, ..) = create(&mut s, "x", count, factor, assignments, false).await;
        assert_eq!(code, want, "{what}: {message:?}");
        assert!(message.is_some(), "{what}: a message says why");
    }
    assert!(
        partitions(&mut s0, "x").await.is_empty(),
        "nothing refused made"
    );

    // CreatePartitions with assignments: one list per added partition, the
    // topic's replica count.
    assert_eq!(
        grow(&mut s, "m", 5, &[&[2, 1]]).await,
        INVALID_REPLICA_ASSIGNMENT,
        "one list for two partitions"
    );
    assert_eq!(
        grow(&mut s, "m", 4, &[&[2]]).await,
        INVALID_REPLICA_ASSIGNMENT,
        "not the topic's factor"
    );
    assert_eq!(grow(&mut s, "m", 5, &[&[2, 1], &[0, 2]]).await, 0);
    let got = wait_for_partitions(&mut s0, "m", "five partitions", |p| p.len() == 5).await;
    let got = placed(&got);
    assert_eq!(got[&3], (vec![2, 1], 2, sorted(&[2, 1])));
    assert_eq!(got[&4], (vec![0, 2], 0, sorted(&[0, 2])));
}
