//! The HTTP endpoint for operators and Kubernetes: `/metrics` (Prometheus
//! text), `/healthz` (the process is alive) and `/readyz` (logs recovered
//! and the Kafka listener bound).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::broker::Broker;
use crate::metrics::{GroupPartitionLabel, PartitionLabel};

async fn metrics(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    for topic in broker.topics.all() {
        for p in &topic.partitions {
            let label = PartitionLabel {
                topic: p.topic.clone(),
                partition: p.index.to_string(),
            };
            let offsets = p.offsets();
            broker
                .metrics
                .log_size_bytes
                .get_or_create(&label)
                .set(p.size_bytes() as i64);
            broker
                .metrics
                .log_end_offset
                .get_or_create(&label)
                .set(offsets.log_end);
            broker
                .metrics
                .log_start_offset
                .get_or_create(&label)
                .set(offsets.log_start);
        }
    }
    // A single broker is every partition's only replica and its leader: no
    // partition can be under-replicated or offline while it serves. The
    // gauges exist so alerts written for replicated clusters work unchanged.
    let budget = &broker.request_budget;
    broker
        .metrics
        .request_bytes_in_flight
        .set(i64::try_from(budget.in_use()).unwrap_or(i64::MAX));
    broker
        .metrics
        .request_bytes_budget
        .set(i64::try_from(budget.capacity()).unwrap_or(i64::MAX));
    broker.metrics.under_replicated_partitions.set(0);
    broker.metrics.offline_partitions.set(0);
    // Groups and partitions that went away must not linger in the output.
    broker.metrics.group_committed_offset.clear();
    broker.metrics.group_lag.clear();
    for (group, topic, partition, committed) in broker.groups.committed() {
        let Some(p) = broker.topics.partition(&topic, partition) else {
            continue;
        };
        let label = GroupPartitionLabel {
            group,
            topic,
            partition: partition.to_string(),
        };
        let hw = p.offsets().high_watermark;
        broker
            .metrics
            .group_committed_offset
            .get_or_create(&label)
            .set(committed);
        broker
            .metrics
            .group_lag
            .get_or_create(&label)
            .set((hw - committed).max(0));
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        broker.metrics.render(),
    )
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(broker): State<Arc<Broker>>) -> (StatusCode, &'static str) {
    if broker.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

pub fn router(broker: Arc<Broker>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(broker)
}
