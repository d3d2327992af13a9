//! The admin client and topic sync against a real `moldau-broker` process on
//! 127.0.0.1 (no Kubernetes): create, grow, repair config drift, delete.

mod support;

use support::start_broker;

use std::time::Duration;

use moldau_operator::crd::{DeletionPolicy, KafkaTopicSpec};
use moldau_operator::kafka::{AdminClient, ConfigOp};
use moldau_operator::topic::sync::sync_topic;

fn spec(partitions: i32, config: &[(&str, &str)]) -> KafkaTopicSpec {
    KafkaTopicSpec {
        cluster_ref: "c".into(),
        topic_name: None,
        partitions,
        replication_factor: 1,
        config: config
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        deletion_policy: DeletionPolicy::Delete,
    }
}

#[tokio::test]
async fn topic_lifecycle_against_the_real_broker() {
    let broker = start_broker().await;
    let mut admin = AdminClient::connect(broker.addr, Duration::from_secs(10))
        .await
        .unwrap();

    // What the topic controller asks first: brokers and controller, no topics.
    let md = admin.metadata(Some(&[])).await.unwrap();
    assert_eq!(md.brokers.len(), 1);
    assert!(md.topics.is_empty());
    assert_eq!(md.brokers[0].port, i32::from(broker.addr.port()));

    let want = spec(2, &[("retention.ms", "3600000")]);
    let out = sync_topic(&mut admin, "orders", &want).await.unwrap();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let observed = out.observed.expect("topic exists after create");
    assert_eq!(observed.partitions, 2);
    assert_eq!(observed.replication_factor, 1);
    assert_eq!(
        observed.effective.get("retention.ms").map(String::as_str),
        Some("3600000")
    );

    // Idempotent.
    let out = sync_topic(&mut admin, "orders", &want).await.unwrap();
    assert!(out.performed.is_empty(), "{:?}", out.performed);

    // Drift behind the operator's back is undone.
    admin
        .alter_topic_config(
            "orders",
            &[ConfigOp::Set("retention.ms".into(), "1000".into())],
        )
        .await
        .unwrap();
    let out = sync_topic(&mut admin, "orders", &want).await.unwrap();
    assert_eq!(out.performed.len(), 1);
    assert_eq!(out.observed.unwrap().effective["retention.ms"], "3600000");

    // Growing partitions.
    let out = sync_topic(
        &mut admin,
        "orders",
        &spec(4, &[("retention.ms", "3600000")]),
    )
    .await
    .unwrap();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    assert_eq!(out.observed.unwrap().partitions, 4);

    // Impossible replication factor on a single broker.
    let mut wide = spec(1, &[]);
    wide.replication_factor = 3;
    let out = sync_topic(&mut admin, "wide", &wide).await.unwrap();
    assert_eq!(out.problems[0].reason, "ReplicationFactorTooHigh");

    admin.delete_topic("orders").await.unwrap();
    let md = admin.metadata(Some(&["orders".to_string()])).await.unwrap();
    assert!(md.topics.is_empty());
}
