//! The async edge of the `KafkaRebalance` reconciler: finds the referenced
//! KafkaCluster and its Ready broker pods (pod IPs, never a Service or DNS
//! name), reads the cluster through the admin client
//! ([`super::execute::read_cluster`]), takes one [`lifecycle::next`] step,
//! performs its action, writes the status and publishes an Event on each
//! transition. Level-triggered: every reconcile starts from what the cluster
//! and the resource say now, and every action is safe to repeat; it
//! requeues soon while moves run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action as Requeued;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};

use crate::brokers::{admin_port, dial_for, ready_brokers};
use crate::cluster::builders::selector_string;
use crate::context::Context;
use crate::crd::{
    format_time, KafkaCluster, KafkaRebalance, KafkaRebalanceStatus, APPROVE_ANNOTATION,
    STOP_ANNOTATION,
};
use crate::error::{Error, Result};
use crate::kafka::Dial;

use super::execute::{perform, read_cluster};
use super::lifecycle::{self, annotation_true, Action, Observation, Request, Requeue};

const KIND: &str = "KafkaRebalance";

/// The merge patch that writes `status` whole: fields the status leaves out
/// are sent as null, so a stale proposal or progress is removed.
pub fn status_patch(status: &KafkaRebalanceStatus) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        for key in [
            "phase",
            "observedGeneration",
            "sessionId",
            "plannedFor",
            "proposal",
            "moves",
            "progress",
            "throttle",
        ] {
            map.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    serde_json::json!({ "status": value })
}

/// What the cluster looks like, and the broker addresses to act through
/// and how to dial them.
async fn observe(
    ctx: &Context,
    kr: &KafkaRebalance,
) -> Result<(Observation, Vec<(i32, SocketAddr)>, Dial)> {
    let plain = || Dial::plain(ctx.tunables.kafka_timeout);
    let ns = kr
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = &kr.spec.cluster;
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let kc = match clusters.get_opt(name).await? {
        Some(kc) if kc.metadata.deletion_timestamp.is_none() => kc,
        Some(_) => {
            return Ok((
                Observation::ClusterNotFound(format!("KafkaCluster {ns}/{name} is being deleted")),
                Vec::new(),
                plain(),
            ))
        }
        None => {
            return Ok((
                Observation::ClusterNotFound(format!("KafkaCluster {ns}/{name} does not exist")),
                Vec::new(),
                plain(),
            ))
        }
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let list = pods
        .list(&ListParams::default().labels(&selector_string(name)))
        .await?;
    let brokers = ready_brokers(&list.items, admin_port(&kc));
    if brokers.is_empty() {
        return Ok((
            Observation::Unavailable(format!(
                "no Ready broker pod with an IP in KafkaCluster {ns}/{name}"
            )),
            brokers,
            plain(),
        ));
    }
    let dial = match dial_for(ctx, &kc).await {
        Ok(dial) => dial,
        Err(e) => {
            return Ok((
                Observation::Unavailable(format!("reaching KafkaCluster {ns}/{name}: {e}")),
                brokers,
                plain(),
            ))
        }
    };
    match read_cluster(&brokers, &dial).await {
        Ok(c) => Ok((Observation::Cluster(c), brokers, dial)),
        Err(e) => Ok((
            Observation::Unavailable(format!("reading KafkaCluster {ns}/{name}: {e}")),
            brokers,
            dial,
        )),
    }
}

fn describe(action: &Action) -> String {
    match action {
        Action::None => "nothing".into(),
        Action::Submit(m) => format!("submitted {} reassignment(s)", m.len()),
        Action::Cancel(m) => format!("cancelled {} reassignment(s)", m.len()),
        Action::ElectPreferred(p) => {
            format!("elected preferred leaders of {} partition(s)", p.len())
        }
    }
}

/// The step to write when performing one failed: the old status, marked
/// `KafkaUnavailable`, retried soon.
fn unavailable(
    req: &Request,
    old: Option<&KafkaRebalanceStatus>,
    e: &crate::kafka::KafkaError,
    now: &str,
) -> lifecycle::Step {
    let mut step = lifecycle::next(
        req,
        old,
        &Observation::Unavailable(format!("performing the rebalance step failed: {e}")),
        now,
    );
    step.requeue = Requeue::Soon;
    step
}

async fn apply(kr: Arc<KafkaRebalance>, ctx: Arc<Context>) -> Result<Requeued> {
    let ns = kr
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let annotations = kr.annotations();
    let req = Request {
        spec: &kr.spec,
        approve_annotation: annotation_true(annotations.get(APPROVE_ANNOTATION)),
        stop_annotation: annotation_true(annotations.get(STOP_ANNOTATION)),
        generation: kr.metadata.generation,
    };
    let (observed, brokers, dial) = observe(&ctx, &kr).await?;
    let now = format_time(k8s_openapi::jiff::Timestamp::now());
    let old = kr.status.as_ref();
    let mut step = lifecycle::next(&req, old, &observed, &now);
    if step.action != Action::None || step.throttle.is_some() {
        match perform(&step, &brokers, &dial).await {
            Ok(refused) if refused.is_empty() => {
                tracing::info!(rebalance = %kr.name_any(), namespace = %ns,
                    cluster = %kr.spec.cluster, throttle = ?step.throttle, "{}", describe(&step.action));
            }
            Ok(refused) => {
                step = lifecycle::refused(&req, old, &step, &refused, &now);
                if let Err(e) = perform(&step, &brokers, &dial).await {
                    tracing::warn!(rebalance = %kr.name_any(), namespace = %ns, error = %e,
                        "removing the throttle of a refused rebalance failed; retrying");
                    step = unavailable(&req, old, &e, &now);
                }
            }
            Err(e) => {
                // Not written: the old status still says what is set and
                // started, so the next reconcile computes this step again.
                tracing::warn!(rebalance = %kr.name_any(), namespace = %ns, error = %e,
                    "rebalance action failed; retrying");
                step = unavailable(&req, old, &e, &now);
            }
        }
    }
    if old != Some(&step.status) {
        let api: Api<KafkaRebalance> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch_status(
            &kr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&status_patch(&step.status)),
        )
        .await?;
    }
    if let Some(event) = &step.event {
        tracing::info!(rebalance = %kr.name_any(), namespace = %ns, reason = %event.reason,
            phase = ?step.status.phase, "{}", event.note);
        ctx.events
            .publish(&kr.object_ref(&()), "Rebalance", event)
            .await;
    }
    Ok(match step.requeue {
        Requeue::Soon => Requeued::requeue(ctx.tunables.retry),
        Requeue::Resync => Requeued::requeue(ctx.tunables.topic_resync),
        Requeue::Idle => Requeued::requeue(ctx.tunables.cluster_resync),
    })
}

/// Reconciles one KafkaRebalance.
pub async fn reconcile(kr: Arc<KafkaRebalance>, ctx: Arc<Context>) -> Result<Requeued> {
    let started = Instant::now();
    let result = apply(kr, ctx.clone()).await;
    ctx.metrics.reconciled(KIND, started.elapsed());
    if result.is_err() {
        ctx.metrics.failed(KIND);
    }
    result
}

/// Requeue policy after a failed reconcile: retry soon, never crash.
pub fn error_policy(kr: Arc<KafkaRebalance>, err: &Error, ctx: Arc<Context>) -> Requeued {
    tracing::warn!(rebalance = %kr.name_any(), namespace = ?kr.namespace(), error = %err,
        "rebalance reconcile failed");
    Requeued::requeue(ctx.tunables.retry)
}

/// Runs the KafkaRebalance controller until the stream ends.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<KafkaRebalance> = ctx.watched_api(&namespace);
    Controller::new(api, watcher::Config::default())
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                // A rebalance deleted while queued (the operator deletes a
                // scale's rebalance when it is done) is not worth a warning.
                let reconciler = matches!(
                    e,
                    kube::runtime::controller::Error::ReconcilerFailed(..)
                        | kube::runtime::controller::Error::ObjectNotFound(..)
                );
                crate::context::log_controller_error(KIND, &e, reconciler);
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RebalancePhase;

    #[test]
    fn the_status_patch_clears_what_the_status_leaves_out() {
        let status = KafkaRebalanceStatus {
            phase: Some(RebalancePhase::Failed),
            ..Default::default()
        };
        let patch = status_patch(&status);
        let s = &patch["status"];
        assert_eq!(s["phase"], "Failed");
        assert!(s["proposal"].is_null() && s.get("proposal").is_some());
        assert!(s.get("moves").is_some() && s["moves"].is_null());
        assert!(s["conditions"].is_array());
    }
}
