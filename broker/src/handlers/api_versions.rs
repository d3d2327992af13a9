//! ApiVersions: the table of implemented versions, and the KIP-511 fallback
//! for clients asking with a version newer than ours.

use bytes::{BufMut, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::{ApiVersion, SupportedFeatureKey};
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

/// The feature flags (KIP-584) Moldau supports, as `(name, min, max)`:
/// Kafka's names, at the levels Moldau really implements. Level 0 of
/// `group.version` is the classic group protocol only (no KIP-848
/// consumer groups); level 0 of `transaction.version` is no transaction
/// protocol beyond idempotence. `metadata.version` is left out: it
/// versions KRaft's metadata log, which Moldau does not have. Nothing is
/// finalized above level 0, so the finalized list is empty, as Kafka
/// reports a feature at level 0.
pub const SUPPORTED_FEATURES: &[(&str, i16, i16)] =
    &[("group.version", 0, 0), ("transaction.version", 0, 0)];

pub fn handle(_broker: &Broker) -> ApiVersionsResponse {
    let features = SUPPORTED_FEATURES
        .iter()
        .map(|(name, min, max)| {
            SupportedFeatureKey::default()
                .with_name(StrBytes::from_static_str(name))
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_api_keys(api_list())
        .with_supported_features(features)
        .with_finalized_features_epoch(-1)
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
