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
use crate::metrics::{GroupPartitionLabel, PartitionLabel, ReplicaLabel, StateLabel, TxnEndLabel};

async fn metrics(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    let (mut led, mut under_replicated, mut under_min_isr) = (0, 0, 0);
    broker.metrics.follower_lag.clear();
    for topic in broker.topics.all() {
        let min_isr = crate::topic_config::min_insync_replicas(
            &topic.meta.configs,
            &broker.topics.broker_config(),
        );
        for p in &topic.partitions {
            if let Some(summary) = p.leader_summary() {
                led += 1;
                under_replicated += i64::from(summary.isr < summary.replicas);
                under_min_isr += i64::from(summary.isr < min_isr);
                for (replica, lag) in summary.follower_lag {
                    let label = ReplicaLabel {
                        topic: p.topic.clone(),
                        partition: p.index.to_string(),
                        replica: replica.to_string(),
                    };
                    broker.metrics.follower_lag.get_or_create(&label).set(lag);
                }
            }
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
            broker
                .metrics
                .partition_lso_lag
                .get_or_create(&label)
                .set(offsets.high_watermark - offsets.last_stable);
        }
    }
    broker.metrics.leader_count.set(led);
    broker
        .metrics
        .under_replicated_partitions
        .set(under_replicated);
    broker.metrics.under_min_isr_partitions.set(under_min_isr);
    // Offline partitions are counted once, by the controller's broker.
    let image = broker.image();
    let offline = if image.controller_id == broker.node_id {
        image
            .topics()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.leader < 0)
            .count()
    } else {
        0
    };
    broker
        .metrics
        .offline_partitions
        .set(i64::try_from(offline).unwrap_or(i64::MAX));
    let overdue = broker.in_flight.overdue(std::time::Instant::now());
    for (api, late) in &overdue {
        tracing::error!(
            ?api,
            late_ms = late.as_millis() as u64,
            "a request is in flight past its deadline"
        );
    }
    broker
        .metrics
        .requests_overdue
        .set(i64::try_from(overdue.len()).unwrap_or(i64::MAX));
    let budget = &broker.request_budget;
    broker
        .metrics
        .request_bytes_in_flight
        .set(i64::try_from(budget.in_use()).unwrap_or(i64::MAX));
    broker
        .metrics
        .request_bytes_budget
        .set(i64::try_from(budget.capacity()).unwrap_or(i64::MAX));
    transaction_metrics(&broker);
    client_telemetry_metrics(&broker);
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

/// The transaction coordinator's figures: ids by state and markers owed
/// (counted now, under the shard locks), and its ends mirrored into the
/// counters (`fetch_max`: the coordinator's counts only grow, and two
/// scrapes at once cannot count twice).
fn transaction_metrics(broker: &Broker) {
    let census = broker.txns.census();
    for state in crate::txn::census::REPORTED_STATES {
        let label = StateLabel {
            state: state.name().to_string(),
        };
        broker
            .metrics
            .transactions
            .get_or_create(&label)
            .set(i64::try_from(census.count(state)).unwrap_or(i64::MAX));
    }
    broker
        .metrics
        .transaction_markers_pending
        .set(i64::try_from(census.markers_pending()).unwrap_or(i64::MAX));
    for (end, n) in broker.txns.ended() {
        let label = TxnEndLabel {
            result: end.result().to_string(),
            reason: end.reason().to_string(),
        };
        broker
            .metrics
            .transactions_ended
            .get_or_create(&label)
            .inner()
            .fetch_max(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What clients pushed (KIP-714), mirrored into `moldau_client_metric`
/// from `crate::telemetry` (expired values swept first, so a client gone
/// quiet disappears from the output).
fn client_telemetry_metrics(broker: &Broker) {
    let (values, dropped) = broker.telemetry.shown(crate::clock::now_ms());
    let m = &broker.metrics;
    m.client_metric.clear();
    for (client_instance_id, client_id, name, attributes, value) in values {
        m.client_metric
            .get_or_create(&crate::metrics::ClientMetricLabel {
                client_instance_id,
                client_id,
                name,
                attributes,
            })
            .set(value);
    }
    for (reason, n) in dropped {
        m.client_telemetry_dropped
            .get_or_create(&crate::metrics::ReasonLabel {
                reason: reason.to_string(),
            })
            .inner()
            .fetch_max(n, std::sync::atomic::Ordering::Relaxed);
    }
    m.client_telemetry_instances
        .set(i64::try_from(broker.telemetry.instances()).unwrap_or(i64::MAX));
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
