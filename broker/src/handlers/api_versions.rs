//! ApiVersions: the table of implemented versions, and the KIP-511 fallback
//! for clients asking with a version newer than ours.

use bytes::{BufMut, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiVersionsResponse, ResponseHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::broker::Broker;
use crate::protocol::versions::{advertised_range, SUPPORTED};

fn api_list() -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .map(|(api, min, max)| {
            let (min, max) = advertised_range(*api, (*min, *max));
            ApiVersion::default()
                .with_api_key(*api as i16)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect()
}

/// `metadata.version` 33 is Kafka 4.4's `4.4-IV2`, the latest production
/// level of Apache Kafka 4.4 (`MetadataVersion.LATEST_PRODUCTION`): the
/// level a new Kafka 4.4 cluster finalizes, and the one whose client-facing
/// behaviour (the API versions of Kafka 4.4) Moldau serves. In Kafka it
/// versions the KRaft metadata log's records; Moldau has no such log (its
/// metadata is the controller's store, see `crate::controller`), so no
/// other level would mean anything here: it is the only level supported,
/// and it cannot be changed (see [`super::features`]).
pub const METADATA_VERSION: i16 = 33;

/// The feature flags (KIP-584) Moldau supports, as `(name, min, max)`:
/// Kafka's names, at the levels Moldau really implements. Level 1 of
/// `group.version` (finalized) is the KIP-848 consumer group protocol:
/// the Java client sends ConsumerGroupHeartbeat only to a cluster that
/// finalized it (see `crate::group::consumer`). `transaction.version` 2 is KIP-890 part 2 (an epoch
/// bump at every EndTxn v5+, partitions added by the produce itself);
/// its finalized level is the broker config `transaction.version`.
/// `metadata.version`: see [`METADATA_VERSION`].
pub const SUPPORTED_FEATURES: &[(&str, i16, i16)] = &[
    ("group.version", 0, GROUP_VERSION),
    ("metadata.version", METADATA_VERSION, METADATA_VERSION),
    ("transaction.version", 0, 2),
];

/// The finalized features' epoch. Kafka reports the metadata offset the
/// levels were read at; Moldau's come from the broker config, fixed for
/// the process's life, so one epoch that is never -1 (the Java client
/// reads finalized features only once their epoch is above -1, and so
/// would never see transaction version 2).
pub const FINALIZED_FEATURES_EPOCH: i64 = 1;

/// The finalized `group.version`: 1, KIP-848 consumer groups served.
pub const GROUP_VERSION: i16 = 1;

/// The finalized features, as `(name, level)`: those above level 0 (Kafka
/// leaves a feature at level 0 out of the list).
pub fn finalized_features(transaction_version: i16) -> Vec<(&'static str, i16)> {
    [
        ("group.version", GROUP_VERSION),
        ("metadata.version", METADATA_VERSION),
        ("transaction.version", transaction_version),
    ]
    .into_iter()
    .filter(|(_, level)| *level > 0)
    .collect()
}

/// The finalized level of `feature` (0: not finalized, or unknown).
pub fn finalized_level(feature: &str, transaction_version: i16) -> i16 {
    finalized_features(transaction_version)
        .into_iter()
        .find(|(name, _)| *name == feature)
        .map_or(0, |(_, level)| level)
}

pub fn handle(broker: &Broker) -> ApiVersionsResponse {
    let features = SUPPORTED_FEATURES
        .iter()
        .map(|(name, min, max)| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    let level = broker.topics.static_broker_config().transaction_version;
    let finalized = finalized_features(level)
        .into_iter()
        .map(|(name, level)| {
            FinalizedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version_level(level)
                .with_max_version_level(level)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_api_keys(api_list())
        .with_supported_features(features)
        .with_finalized_features_epoch(FINALIZED_FEATURES_EPOCH)
        .with_finalized_features(finalized)
}

/// KIP-511: a request with an ApiVersions version we do not know gets a v0
/// response carrying UNSUPPORTED_VERSION and our version table, so the
/// client can retry with one we support.
pub fn unsupported_version_response(correlation_id: i32) -> bytes::Bytes {
    let resp = ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_list());
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    // Both encodes write into a growable buffer with v0 fields only; they
    // cannot fail.
    let _ = ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut buf, 0);
    let _ = resp.encode(&mut buf, 0);
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    buf.freeze()
}
