//! A real standalone broker (in-process, 127.0.0.1, ephemeral ports) asked
//! over TCP with the `kafka-protocol` codec what `kafka-features` and
//! `kafka-metadata-quorum` ask: the finalized feature levels in
//! ApiVersions v3 (`metadata.version` among them), UpdateFeatures refusing
//! every change with Kafka's INVALID_UPDATE_VERSION and accepting the
//! levels already finalized, and the quorum view of DescribeQuorum: a
//! standalone broker is its own leader and only voter; in a two-broker
//! `--cluster dir` cluster either broker names the controller as leader
//! and only voter, with the controller's epoch and metadata offset, and
//! the other broker as an observer with its heartbeats.

mod cluster_common;
mod wire_common;

use std::collections::BTreeSet;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeQuorumRequest, DescribeQuorumResponse,
    TopicName, UpdateFeaturesRequest, UpdateFeaturesResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use wire_common::{call, start};

fn update(feature: &str, level: i16, upgrade_type: i8) -> FeatureUpdateKey {
    FeatureUpdateKey::default()
        .with_feature(StrBytes::from_string(feature.into()))
        .with_max_version_level(level)
        .with_upgrade_type(upgrade_type)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_version_is_finalized_and_no_level_changes() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut s = broker.connect().await;

    let v: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    let supported: Vec<_> = v
        .supported_features
        .iter()
        .map(|f| (f.name.to_string(), f.min_version, f.max_version))
        .collect();
    assert!(
        supported.contains(&("metadata.version".into(), 33, 33)),
        "{supported:?}"
    );
    let finalized: Vec<_> = v
        .finalized_features
        .iter()
        .map(|f| (f.name.to_string(), f.min_version_level, f.max_version_level))
        .collect();
    assert!(
        finalized.contains(&("metadata.version".into(), 33, 33)),
        "{finalized:?}"
    );
    assert_eq!(v.finalized_features_epoch, 1);
    let uf = v
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::UpdateFeatures as i16)
        .expect("UpdateFeatures is advertised");
    assert_eq!((uf.min_version, uf.max_version), (0, 2));

    // the finalized levels themselves: accepted, nothing changes
    let same: UpdateFeaturesResponse = call(
        &mut s,
        ApiKey::UpdateFeatures,
        2,
        &UpdateFeaturesRequest::default().with_feature_updates(vec![update(
            "metadata.version",
            33,
            1,
        )]),
    )
    .await;
    assert_eq!(same.error_code, 0, "{same:?}");

    // an upgrade past Moldau's one level, v1 (per-feature results too)
    let up: UpdateFeaturesResponse = call(
        &mut s,
        ApiKey::UpdateFeatures,
        1,
        &UpdateFeaturesRequest::default().with_feature_updates(vec![update(
            "metadata.version",
            34,
            1,
        )]),
    )
    .await;
    assert_eq!(up.error_code, ResponseError::InvalidUpdateVersion.code());
    let msg = up.error_message.as_deref().unwrap_or_default().to_string();
    assert!(
        msg.starts_with(
            "The update failed for all features since the following feature had an error: \
             Invalid update version 34 for feature metadata.version."
        ),
        "{msg}"
    );
    assert_eq!(up.results.len(), 1);
    assert_eq!(
        up.results[0].error_code,
        ResponseError::InvalidUpdateVersion.code()
    );

    // a safe downgrade of transaction.version, validate-only: refused,
    // naming the broker config that sets it
    let down: UpdateFeaturesResponse = call(
        &mut s,
        ApiKey::UpdateFeatures,
        2,
        &UpdateFeaturesRequest::default()
            .with_validate_only(true)
            .with_feature_updates(vec![update("transaction.version", 1, 2)]),
    )
    .await;
    assert_eq!(down.error_code, ResponseError::InvalidUpdateVersion.code());
    let msg = down
        .error_message
        .as_deref()
        .unwrap_or_default()
        .to_string();
    assert!(msg.contains("broker config"), "{msg}");

    // an unknown feature
    let unknown: UpdateFeaturesResponse = call(
        &mut s,
        ApiKey::UpdateFeatures,
        2,
        &UpdateFeaturesRequest::default().with_feature_updates(vec![update(
            "no.such.feature",
            1,
            1,
        )]),
    )
    .await;
    assert_eq!(
        unknown.error_code,
        ResponseError::InvalidUpdateVersion.code()
    );

    // and the levels are as before
    let again: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    )
    .await;
    assert_eq!(again.finalized_features, v.finalized_features);
    drop(s);
    broker.stop().await;
}

fn ask_quorum(topic: &str) -> DescribeQuorumRequest {
    DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_string(topic.into())))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])])
}

async fn describe_quorum(s: &mut TcpStream, version: i16) -> DescribeQuorumResponse {
    call(
        s,
        ApiKey::DescribeQuorum,
        version,
        &ask_quorum("__cluster_metadata"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_broker_is_its_own_quorum() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &["--node-id", "4"]).await;
    let mut s = broker.connect().await;
    let r = describe_quorum(&mut s, 2).await;
    assert_eq!(r.error_code, 0);
    let p = &r.topics[0].partitions[0];
    assert_eq!(r.topics[0].topic_name.as_str(), "__cluster_metadata");
    assert_eq!((p.error_code, p.leader_id.0, p.leader_epoch), (0, 4, 1));
    assert!(p.high_watermark >= 1, "{p:?}");
    assert_eq!(p.current_voters.len(), 1);
    assert_eq!(p.current_voters[0].replica_id.0, 4);
    assert_eq!(p.current_voters[0].log_end_offset, p.high_watermark);
    assert!(p.observers.is_empty());
    assert_eq!(r.nodes.len(), 1);
    assert_eq!(
        r.nodes[0].listeners[0].port,
        broker.addrs.kafka.port(),
        "{:?}",
        r.nodes
    );
    // v0 too
    let v0 = describe_quorum(&mut s, 0).await;
    assert_eq!(v0.topics[0].partitions[0].leader_id.0, 4);

    // any other partition is unknown, as on Kafka
    let other: DescribeQuorumResponse =
        call(&mut s, ApiKey::DescribeQuorum, 2, &ask_quorum("orders")).await;
    assert_eq!(
        other.topics[0].partitions[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    drop(s);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_describes_its_controller_as_the_quorum_leader() {
    use cluster_common::{spawn, wait_until};
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("shared");
    let brokers: Vec<_> = (0..2)
        .map(|n| {
            let data = root.path().join(format!("data-{n}"));
            spawn(&n.to_string(), &data, &shared, root.path(), &[])
        })
        .collect();
    let both: BTreeSet<i32> = [0, 1].into();
    let mut s0 = brokers[0].connect(Duration::from_secs(30)).await;
    let (_, controller, _) = wait_until(&mut s0, "none", "two brokers", |v| v.0 == both).await;
    let other = 1 - controller;
    for b in &brokers {
        let mut s = b.connect(Duration::from_secs(10)).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        // until the controller has heard the other broker in this term
        let (r, p) = loop {
            let r = describe_quorum(&mut s, 2).await;
            let p = r.topics[0].partitions[0].clone();
            let heard = p
                .observers
                .iter()
                .any(|o| o.replica_id.0 == other && o.last_fetch_timestamp > 0);
            // and until this broker's image holds the controller's
            // registration (its listener); the image of the broker asked
            // may lag the controller's by a heartbeat
            let listener_known = r.nodes.first().is_some_and(|n| !n.listeners.is_empty());
            if (heard && listener_known) || tokio::time::Instant::now() > deadline {
                break (r, p);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!((r.error_code, p.error_code), (0, 0));
        assert_eq!(p.leader_id.0, controller, "{p:?}");
        assert!(p.leader_epoch >= 1 && p.high_watermark >= 1, "{p:?}");
        let voters: Vec<i32> = p.current_voters.iter().map(|v| v.replica_id.0).collect();
        assert_eq!(voters, vec![controller]);
        assert_eq!(p.observers.len(), 1, "{p:?}");
        let o = &p.observers[0];
        assert_eq!(o.replica_id.0, other);
        assert!(o.last_fetch_timestamp > 0, "{p:?}");
        assert!((0..=p.high_watermark).contains(&o.log_end_offset), "{p:?}");
        let controller_port = brokers[controller as usize].kafka.port();
        assert_eq!(r.nodes[0].listeners[0].port, controller_port, "{r:?}");
    }
}
