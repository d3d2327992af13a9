//! The admin client and the topic sync against a real `moldau-broker`
//! process on 127.0.0.1: every call round-trips, drift made by another
//! admin client is repaired, impossible specs become problems.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use moldau_operator::crd::{DeletionPolicy, KafkaTopicSpec};
use moldau_operator::kafka::{AdminClient, ConfigOp};
use moldau_operator::topic::plan::TopicAction;
use moldau_operator::topic::sync::sync_topic;
use support::start_broker;

const T: Duration = Duration::from_secs(5);

fn spec(partitions: i32, rf: i32, config: &[(&str, &str)]) -> KafkaTopicSpec {
    KafkaTopicSpec {
        cluster_ref: "c".into(),
        topic_name: None,
        partitions,
        replication_factor: Some(rf),
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        deletion_policy: DeletionPolicy::Delete,
    }
}

#[tokio::test]
async fn admin_calls_round_trip() {
    let broker = start_broker().await;
    let mut admin = AdminClient::connect(broker.addr, T).await.unwrap();
    let md = admin.metadata(None).await.unwrap();
    assert_eq!(md.brokers.len(), 1);
    let names: Vec<&str> = md.topics.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["__consumer_offsets"],
        "a new broker has only its internal topic"
    );

    let cfg = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
    let id = admin.create_topic("orders", 2, 1, &cfg).await.unwrap();
    assert!(id.is_some());
    let err = admin.create_topic("orders", 2, 1, &cfg).await.unwrap_err();
    assert_eq!(err.code(), Some(36));

    admin.create_partitions("orders", 4).await.unwrap();
    let md = admin
        .metadata(Some(&["orders".to_string(), "missing".to_string()]))
        .await
        .unwrap();
    assert_eq!(md.topics.len(), 1);
    assert_eq!(md.topics[0].partitions, 4);
    assert_eq!(md.topics[0].topic_id, id);

    admin
        .alter_topic_config(
            "orders",
            &[
                ConfigOp::Set("cleanup.policy".into(), "compact".into()),
                ConfigOp::Delete("retention.ms".into()),
            ],
        )
        .await
        .unwrap();
    let entries = admin.describe_topic_config("orders").await.unwrap();
    assert!(entries.iter().any(|e| e.name == "cleanup.policy"
        && e.value.as_deref() == Some("compact")
        && e.source == 1));
    assert!(entries
        .iter()
        .any(|e| e.name == "retention.ms" && e.source == 5));

    admin.delete_topic("orders").await.unwrap();
    admin.delete_topic("orders").await.unwrap(); // already gone: fine
    let md = admin.metadata(Some(&["orders".to_string()])).await.unwrap();
    assert!(md.topics.is_empty(), "deleted topic still listed");
}

#[tokio::test]
async fn sync_creates_then_repairs_drift() {
    let broker = start_broker().await;
    let mut admin = AdminClient::connect(broker.addr, T).await.unwrap();
    let want = spec(3, 1, &[("retention.ms", "1000")]);

    let out = sync_topic(&mut admin, "orders", &want, None, 1)
        .await
        .unwrap();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    assert!(matches!(out.performed[..], [TopicAction::Create { .. }]));
    let observed = out.observed.unwrap();
    assert_eq!(observed.partitions, 3);
    assert_eq!(observed.effective["retention.ms"], "1000");

    // nothing to do the second time
    let out = sync_topic(&mut admin, "orders", &want, None, 1)
        .await
        .unwrap();
    assert!(out.performed.is_empty());

    // someone changes the topic behind the operator's back
    let mut other = AdminClient::connect(broker.addr, T).await.unwrap();
    other.create_partitions("orders", 5).await.unwrap();
    other
        .alter_topic_config(
            "orders",
            &[
                ConfigOp::Set("retention.ms".into(), "1".into()),
                ConfigOp::Set("segment.bytes".into(), "1048576".into()),
            ],
        )
        .await
        .unwrap();
    let out = sync_topic(&mut admin, "orders", &want, None, 1)
        .await
        .unwrap();
    assert_eq!(out.problems[0].reason, "PartitionDecreaseNotAllowed");
    let overrides: BTreeMap<String, String> = other
        .describe_topic_config("orders")
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.source == 1)
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect();
    assert_eq!(
        overrides,
        BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
        "config drift repaired"
    );

    // the spec grows partitions
    let out = sync_topic(
        &mut admin,
        "orders",
        &spec(6, 1, &[("retention.ms", "1000")]),
        None,
        1,
    )
    .await
    .unwrap();
    assert!(out.problems.is_empty());
    let md = other.metadata(Some(&["orders".to_string()])).await.unwrap();
    assert_eq!(md.topics[0].partitions, 6);
}

#[tokio::test]
async fn impossible_specs_become_problems() {
    let broker = start_broker().await;
    let mut admin = AdminClient::connect(broker.addr, T).await.unwrap();
    let out = sync_topic(&mut admin, "wide", &spec(1, 3, &[]), None, 1)
        .await
        .unwrap();
    assert_eq!(out.problems[0].reason, "ReplicationFactorTooHigh");
    assert!(out.observed.is_none());
    let md = admin.metadata(Some(&["wide".to_string()])).await.unwrap();
    assert!(md.topics.is_empty(), "nothing was created");
}

#[tokio::test]
async fn unreachable_broker_is_an_error_not_a_hang() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    assert!(AdminClient::connect(addr, Duration::from_millis(500))
        .await
        .is_err());
}
