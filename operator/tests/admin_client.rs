//! The admin client and the topic sync against a fake broker on 127.0.0.1.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::FakeBroker;
use moldau_operator::crd::{DeletionPolicy, KafkaTopicSpec};
use moldau_operator::kafka::{AdminClient, ConfigOp};
use moldau_operator::topic::plan::TopicAction;
use moldau_operator::topic::sync::sync_topic;

const T: Duration = Duration::from_secs(5);

fn spec(partitions: i32, rf: i32, config: &[(&str, &str)]) -> KafkaTopicSpec {
    KafkaTopicSpec {
        cluster_ref: "c".into(),
        topic_name: None,
        partitions,
        replication_factor: rf,
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        deletion_policy: DeletionPolicy::Delete,
    }
}

#[tokio::test]
async fn admin_calls_round_trip() {
    let broker = FakeBroker::start().await;
    let mut admin = AdminClient::connect(broker.addr, T).await.unwrap();
    let md = admin.metadata(None).await.unwrap();
    assert_eq!(md.brokers.len(), 1);
    assert!(md.topics.is_empty());

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
    assert!(broker.topic("orders").is_none());
}

#[tokio::test]
async fn sync_creates_then_repairs_drift() {
    let broker = FakeBroker::start().await;
    let mut admin = AdminClient::connect(broker.addr, T).await.unwrap();
    let want = spec(3, 1, &[("retention.ms", "1000")]);

    let out = sync_topic(&mut admin, "orders", &want).await.unwrap();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    assert!(matches!(out.performed[..], [TopicAction::Create { .. }]));
    let observed = out.observed.unwrap();
    assert_eq!(observed.partitions, 3);
    assert_eq!(observed.effective["retention.ms"], "1000");

    // nothing to do the second time
    let out = sync_topic(&mut admin, "orders", &want).await.unwrap();
    assert!(out.performed.is_empty());

    // someone changes the topic behind the operator's back
    broker.with_topic("orders", |t| {
        t.partitions = 5;
        t.config.insert("retention.ms".into(), "1".into());
        t.config.insert("segment.bytes".into(), "1024".into());
    });
    let out = sync_topic(&mut admin, "orders", &want).await.unwrap();
    assert_eq!(out.problems[0].reason, "PartitionDecreaseNotAllowed");
    let t = broker.topic("orders").unwrap();
    assert_eq!(
        t.config,
        BTreeMap::from([("retention.ms".to_string(), "1000".to_string())])
    );

    // the spec grows partitions
    let out = sync_topic(
        &mut admin,
        "orders",
        &spec(6, 1, &[("retention.ms", "1000")]),
    )
    .await
    .unwrap();
    assert!(out.problems.is_empty());
    assert_eq!(broker.topic("orders").unwrap().partitions, 6);
}

#[tokio::test]
async fn impossible_specs_become_problems() {
    let broker = FakeBroker::start().await;
    let mut admin = AdminClient::connect(broker.addr, T).await.unwrap();
    let out = sync_topic(&mut admin, "wide", &spec(1, 3, &[]))
        .await
        .unwrap();
    assert_eq!(out.problems[0].reason, "ReplicationFactorTooHigh");
    assert!(out.observed.is_none());
    assert!(broker.topic("wide").is_none());
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
