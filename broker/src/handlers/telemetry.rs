//! GetTelemetrySubscriptions and PushTelemetry (KIP-714): the wire edge of
//! `crate::telemetry`, which owns the rules. Neither needs an ACL (as in
//! Kafka); the client is matched by its client id, its software name and
//! version (from ApiVersions), its address and port and its instance id.

use kafka_protocol::messages::{
    ApiVersionsRequest, GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest, PushTelemetryResponse,
};

use super::str_bytes;
use crate::broker::Broker;
use crate::protocol::principal::ConnectionContext;
use crate::telemetry::subscriptions::ClientMetadata;

/// What a client is matched by, from its connection.
pub fn client_metadata(ctx: &ConnectionContext) -> ClientMetadata {
    ClientMetadata {
        client_instance_id: String::new(),
        client_id: ctx.client_id.clone(),
        client_software_name: ctx.client_software.0.clone(),
        client_software_version: ctx.client_software.1.clone(),
        client_source_address: ctx.peer.ip().to_string(),
        client_source_port: ctx.peer.port().to_string(),
    }
}

/// Kafka's `telemetry.max.bytes` (a static broker property here, default
/// 1 MiB; at least 1).
fn telemetry_max_bytes(broker: &Broker) -> i32 {
    broker
        .topics
        .static_broker_config()
        .raw
        .get("telemetry.max.bytes")
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(crate::telemetry::DEFAULT_TELEMETRY_MAX_BYTES)
}

pub fn get_subscriptions(
    broker: &Broker,
    req: GetTelemetrySubscriptionsRequest,
    ctx: &ConnectionContext,
) -> GetTelemetrySubscriptionsResponse {
    let image = broker.image();
    let subscriptions = broker.telemetry.subscriptions(&image.broker_configs);
    match broker.telemetry.get_subscription(
        req.client_instance_id,
        &client_metadata(ctx),
        &subscriptions,
        crate::clock::now_ms(),
    ) {
        Ok(a) => GetTelemetrySubscriptionsResponse::default()
            .with_client_instance_id(a.client_instance_id)
            .with_subscription_id(a.subscription_id)
            .with_accepted_compression_types(crate::telemetry::ACCEPTED_COMPRESSION_TYPES.to_vec())
            .with_push_interval_ms(a.push_interval_ms)
            .with_telemetry_max_bytes(telemetry_max_bytes(broker))
            // cumulative sums: `/metrics` shows each pushed value as it
            // is, and Prometheus takes rates of cumulative counters
            .with_delta_temporality(false)
            .with_requested_metrics(a.requested_metrics.iter().map(|m| str_bytes(m)).collect()),
        Err(e) => {
            tracing::debug!(code = ?e.code, "{}", e.message);
            GetTelemetrySubscriptionsResponse::default().with_error_code(e.code.code())
        }
    }
}

/// PushTelemetry; decompressing and decoding the payload is CPU work (the
/// caller runs it on the blocking pool).
pub fn push(
    broker: &Broker,
    req: PushTelemetryRequest,
    client: &ClientMetadata,
) -> PushTelemetryResponse {
    let image = broker.image();
    let subscriptions = broker.telemetry.subscriptions(&image.broker_configs);
    let push = crate::telemetry::Push {
        client_instance_id: req.client_instance_id,
        subscription_id: req.subscription_id,
        terminating: req.terminating,
        compression_type: req.compression_type,
        metrics: &req.metrics,
    };
    match broker.telemetry.push(
        &push,
        client,
        &subscriptions,
        telemetry_max_bytes(broker),
        crate::clock::now_ms(),
    ) {
        Ok(()) => {
            tracing::debug!(
                client_instance_id = %crate::telemetry::subscriptions::kafka_uuid(req.client_instance_id),
                terminating = req.terminating,
                bytes = req.metrics.len(),
                "telemetry pushed"
            );
            PushTelemetryResponse::default()
        }
        Err(e) => {
            tracing::debug!(code = ?e.code, "{}", e.message);
            PushTelemetryResponse::default().with_error_code(e.code.code())
        }
    }
}

/// Keeps the client software name and version an ApiVersions request
/// names (KIP-511), cut to 128 bytes, for `match` selectors.
pub fn note_software(ctx: &mut ConnectionContext, req: &ApiVersionsRequest) {
    let cut = |s: &str| {
        let mut end = s.len().min(128);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_string()
    };
    ctx.client_software = (
        cut(req.client_software_name.as_str()),
        cut(req.client_software_version.as_str()),
    );
}
