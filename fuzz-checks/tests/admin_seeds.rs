//! The `request_frame` seeds of the admin APIs that `fuzz/seed/make_corpus.py`'s
//! clients do not send (issue 43): UpdateFeatures (`kafka-features
//! upgrade|downgrade`), DescribeQuorum (`kafka-metadata-quorum`) and the
//! client telemetry APIs GetTelemetrySubscriptions, PushTelemetry (KIP-714;
//! a push carrying a small OTLP payload) and ListConfigResources (the
//! client-metrics resources), every served version, built with the `kafka-protocol` crate's messages and
//! committed as `fuzz/corpus/request_frame/<api>-v<version>-admin.bin`.
//! (The target itself reaches every advertised pair from any input; these
//! seeds start its mutations from well-formed bodies.)
//!
//! The test checks that the committed files are exactly what this code
//! builds and that each decodes whole. Regenerate them after a change:
//!
//! ```sh
//! MOLDAU_WRITE_SEEDS=1 cargo test -p moldau-fuzz-checks --test admin_seeds
//! ```

use std::path::Path;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{
    ApiKey, DescribeQuorumRequest, GetTelemetrySubscriptionsRequest, ListConfigResourcesRequest,
    PushTelemetryRequest, RequestHeader, RequestKind, TopicName, UpdateFeaturesRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use moldau_broker::protocol::versions::supported_range;

/// A request frame as the broker reads it after the size: header, body.
fn frame<M: Encodable>(api: ApiKey, version: i16, body: &M) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("seed-admin")));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, api.request_header_version(version))
        .unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.to_vec()
}

fn served(api: ApiKey) -> std::ops::RangeInclusive<i16> {
    let (min, max) = supported_range(api).expect("advertised");
    min..=max
}

/// `(api, version, frame)` of every served version.
fn frames() -> Vec<(ApiKey, i16, Vec<u8>)> {
    let mut out = Vec::new();
    for v in served(ApiKey::UpdateFeatures) {
        let update = |feature: &'static str, level: i16| {
            FeatureUpdateKey::default()
                .with_feature(StrBytes::from_static_str(feature))
                .with_max_version_level(level)
                .with_allow_downgrade(v == 0 && level < 2)
                .with_upgrade_type(if v >= 1 && level < 2 { 2 } else { 1 })
        };
        let body = UpdateFeaturesRequest::default()
            .with_timeout_ms(30_000)
            .with_feature_updates(vec![
                update("metadata.version", 33),
                update("transaction.version", 1),
            ])
            .with_validate_only(v >= 1);
        out.push((
            ApiKey::UpdateFeatures,
            v,
            frame(ApiKey::UpdateFeatures, v, &body),
        ));
    }
    for v in served(ApiKey::DescribeQuorum) {
        let body = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        out.push((
            ApiKey::DescribeQuorum,
            v,
            frame(ApiKey::DescribeQuorum, v, &body),
        ));
    }
    // a client instance id as a broker assigns one
    let instance = uuid::Uuid::from_u128(0x5eed_0000_0000_4000_8000_0000_0000_0001);
    for v in served(ApiKey::GetTelemetrySubscriptions) {
        let body = GetTelemetrySubscriptionsRequest::default().with_client_instance_id(instance);
        out.push((
            ApiKey::GetTelemetrySubscriptions,
            v,
            frame(ApiKey::GetTelemetrySubscriptions, v, &body),
        ));
    }
    for v in served(ApiKey::PushTelemetry) {
        let body = PushTelemetryRequest::default()
            .with_client_instance_id(instance)
            .with_subscription_id(0x1234_5678)
            .with_compression_type(0)
            .with_metrics(Bytes::from_static(OTLP_GAUGE));
        out.push((
            ApiKey::PushTelemetry,
            v,
            frame(ApiKey::PushTelemetry, v, &body),
        ));
    }
    for v in served(ApiKey::ListConfigResources) {
        let body = ListConfigResourcesRequest::default();
        out.push((
            ApiKey::ListConfigResources,
            v,
            frame(ApiKey::ListConfigResources, v, &body),
        ));
    }
    out
}

/// OTLP `MetricsData` with one gauge `m` of one data point, 1.0
/// (resource_metrics → scope_metrics → metrics { name, gauge { point } }).
const OTLP_GAUGE: &[u8] = &[
    0x0a, 0x14, // resource_metrics (1), 20 bytes
    0x12, 0x12, // scope_metrics (2), 18 bytes
    0x12, 0x10, // metrics (2), 16 bytes
    0x0a, 0x01, b'm', // name (1)
    0x2a, 0x0b, // gauge (5), 11 bytes
    0x0a, 0x09, // data_points (1), 9 bytes
    0x21, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, // as_double (4): 1.0
];

#[test]
fn admin_seeds_are_committed_and_decode() {
    let write = std::env::var("MOLDAU_WRITE_SEEDS").is_ok_and(|v| v == "1");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/request_frame");
    let mut stale = Vec::new();
    for (api, v, bytes) in frames() {
        let mut buf = Bytes::copy_from_slice(&bytes);
        let header = RequestHeader::decode(&mut buf, api.request_header_version(v)).unwrap();
        assert_eq!(
            (header.request_api_key, header.request_api_version),
            (api as i16, v)
        );
        RequestKind::decode(api, &mut buf, v).unwrap_or_else(|e| panic!("{api:?} v{v}: {e}"));
        assert!(buf.is_empty(), "{api:?} v{v}: bytes left over");
        let path = dir.join(format!("{:02}-v{v:02}-admin.bin", api as i16));
        if write {
            std::fs::write(&path, &bytes).unwrap();
        } else if std::fs::read(&path).ok().as_ref() != Some(&bytes) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "seed files missing or stale (MOLDAU_WRITE_SEEDS=1 cargo test -p moldau-fuzz-checks --test admin_seeds): {stale:?}"
    );
}
