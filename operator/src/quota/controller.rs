//! The Kubernetes edge of `KafkaQuota`: every reconcile of one KafkaQuota
//! plans and applies the quotas of its whole cluster (all KafkaQuotas of
//! that cluster in the namespace), then writes the status of each of them
//! that changed. A finalizer removes what a deleted object set; it does not
//! block deletion once the cluster is gone or being deleted.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event as FinalizerEvent;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::ResourceExt;

use crate::brokers::{admin_port, connect_admin, ready_brokers};
use crate::cluster::builders::selector_string;
use crate::context::Context;
use crate::crd::{
    format_time, merge_conditions, AppliedQuota, Condition, KafkaCluster, KafkaQuota,
    KafkaQuotaStatus, RefusedQuota,
};
use crate::error::{Error, Result};
use crate::kafka::{AdminClient, KafkaError};
use crate::reconcile::{finalized, metered, namespaced_api, requeue_after_error};
use crate::topic::controller::referencing;

use super::plan::{plan, settle};

const KIND: &str = "KafkaQuota";
/// Finalizer that removes the quotas an object set.
pub const FINALIZER: &str = "moldau.io/quota-removal";

/// Each object's ownership record and refusals after one application.
pub type Settled = BTreeMap<String, (Vec<AppliedQuota>, Vec<RefusedQuota>)>;

/// Plans the quotas of one cluster from `quotas` and what the broker has,
/// applies them through `admin`, and returns each object's new record.
pub async fn sync_quotas(
    admin: &mut AdminClient,
    quotas: &[KafkaQuota],
) -> std::result::Result<Settled, KafkaError> {
    let broker = admin.describe_client_quotas().await?;
    let p = plan(quotas, &broker);
    let results = admin.alter_client_quotas(&p.alterations).await?;
    let failed = results
        .into_iter()
        .filter_map(|(e, r)| r.err().map(|err| (e, err.to_string())))
        .collect();
    Ok(settle(&p, &failed))
}

/// The status of an object from its settled record (or a problem that kept
/// the plan from running: then its old record stays).
pub fn quota_status(
    kq: &KafkaQuota,
    settled: Option<&(Vec<AppliedQuota>, Vec<RefusedQuota>)>,
    problem: Option<(&str, String)>,
    now: &str,
) -> KafkaQuotaStatus {
    let old = kq.status.clone().unwrap_or_default();
    let (applied, refused) = match settled {
        Some((a, r)) => (a.clone(), r.clone()),
        None => (old.applied.clone(), old.refused.clone()),
    };
    let ready = match (problem, refused.is_empty()) {
        (Some((reason, message)), _) => Condition::new("Ready", false, reason, message),
        (None, true) => Condition::new(
            "Ready",
            true,
            "Applied",
            format!("quotas of {} entities applied", applied.len()),
        ),
        (None, false) => Condition::new(
            "Ready",
            false,
            "Refused",
            format!(
                "{} entities not applied (see status.refused)",
                refused.len()
            ),
        ),
    };
    KafkaQuotaStatus {
        conditions: merge_conditions(&old.conditions, vec![ready], kq.metadata.generation, now),
        observed_generation: kq.metadata.generation,
        applied,
        refused,
    }
}

async fn write_status(ctx: &Context, kq: &KafkaQuota, status: KafkaQuotaStatus) -> Result<()> {
    if kq.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let ns = kq
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<KafkaQuota> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = serde_json::json!({ "status": status });
    match api
        .patch_status(
            &kq.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // gone meanwhile (its finalizer was released)
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Reconciles the cluster of `kq`. Returns whether `kq` still owns quotas
/// on the broker, and whether the cluster is gone.
async fn reconcile_cluster(ctx: &Context, kq: &KafkaQuota) -> Result<(bool, bool)> {
    let ns = kq
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let cluster = &kq.spec.cluster_ref;
    let api: Api<KafkaQuota> = Api::namespaced(ctx.client.clone(), &ns);
    let all: Vec<KafkaQuota> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|q| &q.spec.cluster_ref == cluster)
        .collect();
    let now = format_time(k8s_openapi::jiff::Timestamp::now());
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let kc = clusters.get_opt(cluster).await?;
    let problem = match &kc {
        None => Some((
            "ClusterNotFound",
            format!("KafkaCluster {ns}/{cluster} does not exist"),
        )),
        Some(kc) if kc.metadata.deletion_timestamp.is_some() => Some((
            "ClusterDeleting",
            format!("KafkaCluster {ns}/{cluster} is being deleted"),
        )),
        _ => None,
    };
    let gone = problem.is_some();
    let mut problem = problem;
    let mut settled = None;
    if let (None, Some(kc)) = (&problem, &kc) {
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        let list = pods
            .list(&ListParams::default().labels(&selector_string(cluster)))
            .await?;
        let brokers = ready_brokers(&list.items, admin_port(kc));
        if brokers.is_empty() {
            problem = Some((
                "NoBrokerReady",
                format!("no Ready broker pod with an IP in KafkaCluster {ns}/{cluster}"),
            ));
        } else {
            let outcome = async {
                let (mut admin, _) = connect_admin(ctx, kc, &brokers).await?;
                sync_quotas(&mut admin, &all).await
            }
            .await;
            match outcome {
                Ok(s) => settled = Some(s),
                Err(e) => problem = Some(("KafkaError", e.to_string())),
            }
        }
    }
    let mut still_owns = false;
    for q in &all {
        let record = settled.as_ref().and_then(|s| s.get(&q.name_any()));
        let status = quota_status(q, record, problem.clone(), &now);
        if q.name_any() == kq.name_any() {
            still_owns = !status.applied.is_empty();
        }
        write_status(ctx, q, status).await?;
    }
    Ok((still_owns, gone))
}

/// Reconciles one KafkaQuota (through the finalizer helper).
pub async fn reconcile(kq: Arc<KafkaQuota>, ctx: Arc<Context>) -> Result<Action> {
    metered(&ctx, KIND, async {
        let api = namespaced_api(&ctx, kq.as_ref())?;
        let c = ctx.clone();
        finalized(&api, FINALIZER, kq, |event| async move {
            match event {
                FinalizerEvent::Apply(kq) => {
                    reconcile_cluster(&c, &kq).await?;
                    Ok(Action::requeue(c.tunables.topic_resync))
                }
                FinalizerEvent::Cleanup(kq) => {
                    let (owns, gone) = reconcile_cluster(&c, &kq).await?;
                    if owns && !gone {
                        return Err(Error::Finalizer(format!(
                            "KafkaQuota {} still has quotas on the broker",
                            kq.name_any()
                        )));
                    }
                    Ok(Action::await_change())
                }
            }
        })
        .await
    })
    .await
}

/// Requeue policy after a failed reconcile: retry soon, never crash.
pub fn error_policy(kq: Arc<KafkaQuota>, err: &Error, ctx: Arc<Context>) -> Action {
    requeue_after_error(KIND, kq.as_ref(), err, &ctx)
}

/// The KafkaQuotas that reference cluster `kc`.
pub fn quotas_of(quotas: &[Arc<KafkaQuota>], kc: &KafkaCluster) -> Vec<ObjectRef<KafkaQuota>> {
    referencing(quotas, kc, |q| &q.spec.cluster_ref)
}

/// Runs the KafkaQuota controller until the stream ends.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<KafkaQuota> = ctx.watched_api(&namespace);
    let clusters: Api<KafkaCluster> = ctx.watched_api(&namespace);
    let controller = Controller::new(api, watcher::Config::default());
    let quotas = controller.store();
    controller
        .watches(clusters, watcher::Config::default(), move |kc| {
            quotas_of(&quotas.state(), &kc)
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                let reconciler =
                    matches!(e, kube::runtime::controller::Error::ReconcilerFailed(..));
                crate::context::log_controller_error(KIND, &e, reconciler);
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::QuotaEntitySpec;

    fn kq() -> KafkaQuota {
        let mut q = KafkaQuota::new(
            "q",
            serde_json::from_value(serde_json::json!({
                "clusterRef": "c", "entities": [{"clientId": "app"}], "producerByteRate": 10
            }))
            .unwrap(),
        );
        q.metadata.generation = Some(3);
        q
    }

    fn applied() -> Vec<AppliedQuota> {
        vec![AppliedQuota {
            entity: QuotaEntitySpec {
                client_id: Some("app".into()),
                ..Default::default()
            },
            values: [("producer_byte_rate".to_string(), 10.0)].into(),
        }]
    }

    #[test]
    fn ready_when_everything_applied() {
        let s = quota_status(&kq(), Some(&(applied(), vec![])), None, "t");
        assert_eq!(s.observed_generation, Some(3));
        assert!(s.conditions[0].is_true());
        assert_eq!(s.conditions[0].reason, "Applied");
        assert_eq!(s.applied, applied());
    }

    #[test]
    fn refusals_and_problems_are_not_ready_and_keep_the_record() {
        let refused = vec![RefusedQuota {
            entity: QuotaEntitySpec::default(),
            reason: "INVALID_REQUEST".into(),
        }];
        let s = quota_status(&kq(), Some(&(vec![], refused.clone())), None, "t");
        assert_eq!(s.conditions[0].reason, "Refused");
        assert!(!s.conditions[0].is_true());
        // the broker was not reachable: the old record stays
        let mut q = kq();
        q.status = Some(KafkaQuotaStatus {
            applied: applied(),
            ..Default::default()
        });
        let s = quota_status(&q, None, Some(("NoBrokerReady", "none".into())), "t");
        assert_eq!(s.conditions[0].reason, "NoBrokerReady");
        assert_eq!(s.applied, applied());
    }
}
