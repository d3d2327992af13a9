//! The admin client and topic sync against a real `moldau-broker` process on
//! 127.0.0.1 (no Kubernetes): create, grow, repair config drift, delete.

mod support;

use support::{start_broker, start_broker_with_env};

use std::time::Duration;

use moldau_operator::crd::{DeletionPolicy, KafkaTopicSpec};
use moldau_operator::kafka::{AdminClient, ConfigOp};
use moldau_operator::topic::sync::sync_topic;

fn spec(partitions: i32, config: &[(&str, &str)]) -> KafkaTopicSpec {
    KafkaTopicSpec {
        cluster_ref: "c".into(),
        topic_name: None,
        partitions,
        replication_factor: Some(1),
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
    let out = sync_topic(&mut admin, "orders", &want, None, 1)
        .await
        .unwrap();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    let observed = out.observed.expect("topic exists after create");
    assert_eq!(observed.partitions, 2);
    assert_eq!(observed.replication_factor, 1);
    assert_eq!(
        observed.effective.get("retention.ms").map(String::as_str),
        Some("3600000")
    );

    // Idempotent.
    let out = sync_topic(&mut admin, "orders", &want, None, 1)
        .await
        .unwrap();
    assert!(out.performed.is_empty(), "{:?}", out.performed);

    // Drift behind the operator's back is undone.
    admin
        .alter_topic_config(
            "orders",
            &[ConfigOp::Set("retention.ms".into(), "1000".into())],
        )
        .await
        .unwrap();
    let out = sync_topic(&mut admin, "orders", &want, None, 1)
        .await
        .unwrap();
    assert_eq!(out.performed.len(), 1);
    assert_eq!(out.observed.unwrap().effective["retention.ms"], "3600000");

    // Growing partitions.
    let out = sync_topic(
        &mut admin,
        "orders",
        &spec(4, &[("retention.ms", "3600000")]),
        None,
        1,
    )
    .await
    .unwrap();
    assert!(out.problems.is_empty(), "{:?}", out.problems);
    assert_eq!(out.observed.unwrap().partitions, 4);
    // The replicas of each partition come with the observation.
    let out = sync_topic(
        &mut admin,
        "orders",
        &spec(4, &[("retention.ms", "3600000")]),
        None,
        1,
    )
    .await
    .unwrap();
    let replicas = out.observed.unwrap().replicas;
    assert_eq!(
        replicas.keys().copied().collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert!(replicas.values().all(|r| r.len() == 1));

    // One config key of many topics in one request (the rebalance's read of
    // min.insync.replicas); a topic that does not exist is left out.
    let mut other = spec(1, &[("min.insync.replicas", "1")]);
    other.replication_factor = Some(1);
    sync_topic(&mut admin, "other", &other, None, 1)
        .await
        .unwrap();
    let got = admin
        .describe_topics_config_key(
            &["orders".into(), "other".into(), "nope".into()],
            "min.insync.replicas",
        )
        .await
        .unwrap();
    assert_eq!(got.get("other").map(String::as_str), Some("1"));
    assert!(
        got.contains_key("orders"),
        "defaults are reported too: {got:?}"
    );
    assert!(!got.contains_key("nope"));
    admin.delete_topic("other").await.unwrap();

    // Impossible replication factor on a single broker.
    let mut wide = spec(1, &[]);
    wide.replication_factor = Some(3);
    let out = sync_topic(&mut admin, "wide", &wide, None, 1)
        .await
        .unwrap();
    assert_eq!(out.problems[0].reason, "ReplicationFactorTooHigh");

    admin.delete_topic("orders").await.unwrap();
    let md = admin.metadata(Some(&["orders".to_string()])).await.unwrap();
    assert!(md.topics.is_empty());
}

/// The properties round trip through the real broker binary: the
/// `server.properties` the operator renders for awkward keys and values,
/// read by a broker process, comes back in the broker's DescribeConfigs —
/// every key unchanged, and the value of a config Kafka knows unchanged.
/// A custom (unknown) name's value is reported as Kafka reports it:
/// sensitive, so no value. (The exhaustive in-process round trip of
/// values is `e2e/tests/properties_round_trip.rs`.)
#[tokio::test]
async fn rendered_properties_reach_the_broker_unchanged() {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    use kafka_protocol::protocol::StrBytes;
    use moldau_operator::cluster::builders::render_properties;
    use moldau_operator::kafka::wire;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let config: std::collections::BTreeMap<String, String> = [
        ("num.partitions", "3"),
        ("custom.backslash", "C:\\dir\\sub\\"),
        ("custom.separators", "a=b:c #d !e"),
        ("custom.leading", "  two leading, two trailing  "),
        ("custom.comment.like", "#!"),
        ("custom.empty", ""),
        ("custom.unicode", "é € 漢字 😀"),
        ("custom.control", "tab\there\nnewline\x0cff"),
        ("custom key:with=separators", "v"),
        ("#custom.hash.key", "!bang"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.properties");
    std::fs::write(&file, render_properties(&config)).unwrap();
    let broker = start_broker_with_env(&[("MOLDAU_CONFIG_FILE", file.as_os_str())]).await;

    let mut stream = tokio::net::TcpStream::connect(broker.addr).await.unwrap();
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(4) // BROKER
            .with_resource_name(StrBytes::from_static_str("0"))
            .with_configuration_keys(None)]);
    let version = 1;
    let frame = wire::encode_request(&req, version, 7, "round-trip-test").unwrap();
    stream.write_all(&frame).await.unwrap();
    let mut prefix = [0u8; 4];
    stream.read_exact(&mut prefix).await.unwrap();
    let mut body = vec![0u8; wire::frame_len(prefix).unwrap()];
    stream.read_exact(&mut body).await.unwrap();
    let resp = wire::decode_response::<DescribeConfigsRequest>(body.into(), version, 7).unwrap();
    let result = &resp.results[0];
    assert_eq!(result.error_code, 0, "{:?}", result.error_message);
    let described: std::collections::BTreeMap<String, Option<String>> = result
        .configs
        .iter()
        .map(|c| {
            (
                c.name.as_str().to_string(),
                c.value.as_ref().map(|v| v.as_str().to_string()),
            )
        })
        .collect();
    for (k, v) in &config {
        let expected = if k.starts_with("custom") || k.starts_with("#custom") {
            None
        } else {
            Some(v.clone())
        };
        assert_eq!(described.get(k), Some(&expected), "{k:?}");
    }
}
