//! The async edge of the `KafkaCluster` reconciler: server-side applies the
//! desired objects, observes the StatefulSet, its pods (readiness, revision,
//! their containers' restarts and last termination) and the brokers'
//! cluster record (read through the API server, never from a broker),
//! deletes at most one outdated pod per reconcile (as the rollout planner
//! says), writes status and publishes Events. All decisions come from
//! `builders`, `rollout`, `scaling`, `status`; a pod is read by
//! `pods::pod_state`, the brokers reached through `crate::brokers`.
//!
//! Scaling: the StatefulSet gets the replicas `scaling::decide` returns,
//! not `spec.replicas` directly; for that it reads the operator's
//! `KafkaRebalance` of the cluster and, only while a scale-down is asked
//! for, the partitions' placement from the brokers (Metadata and
//! ListPartitionReassignments through the controller, at pod IPs), then
//! applies or deletes that `KafkaRebalance` as decided. The rebalance
//! itself runs in the KafkaRebalance controller.
//!
//! Config: a new value of a key `dynamic` lists is applied as the
//! cluster-wide dynamic broker default through a Ready broker (the pods'
//! config hash does not cover those values, so no roll); every other
//! change rolls the brokers.
//!
//! The cluster record is not watched (its kind belongs to the brokers and
//! may not be installed yet); a cluster that is not Ready is reconciled again
//! after `retry`, a Ready one after `cluster_resync` or at any pod change.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::brokers::{admin_port, connect_admin, dial_for, ready_brokers};
use crate::certs;
use crate::context::{Context, FIELD_MANAGER};
use crate::crd::{find_condition, format_time, KafkaCluster, KafkaRebalance, ListenerStatus};
use crate::error::{Error, Result};
use crate::rebalance::execute::read_placement;

use super::builders::{self, ClusterObjects, Names, CLUSTER_LABEL};
use super::health::{read_replica_health, HealthView};
use super::listeners;
use super::membership::{read_membership, Membership};
use super::pods::{pod_state, PodState};
use super::rollout::{next_step, roll_pending, RolloutStep};
use super::scaling::{self, ObservedRebalance, RebalanceChange, ScaleDecision, ScaleInput};
use super::status::{
    cluster_status, status_events, status_patch, ClusterObservation, Problem, DEGRADED, READY,
};
use super::validate::cluster_spec_problem;

const KIND: &str = "KafkaCluster";

async fn apply<K>(client: &kube::Client, ns: &str, obj: &K) -> Result<()>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or(Error::MissingField("metadata.name"))?;
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await?;
    Ok(())
}

async fn apply_all(client: &kube::Client, ns: &str, objs: &ClusterObjects) -> Result<()> {
    apply::<ServiceAccount>(client, ns, &objs.service_account).await?;
    apply::<Role>(client, ns, &objs.role).await?;
    apply::<RoleBinding>(client, ns, &objs.role_binding).await?;
    apply::<ConfigMap>(client, ns, &objs.config_map).await?;
    apply::<Service>(client, ns, &objs.headless_service).await?;
    apply::<Service>(client, ns, &objs.bootstrap_service).await?;
    apply::<StatefulSet>(client, ns, &objs.stateful_set).await?;
    apply::<PodDisruptionBudget>(client, ns, &objs.pdb).await?;
    Ok(())
}

/// The StatefulSet's update revision, once its controller has observed the
/// latest template (before that, the revision is stale).
pub fn current_update_revision(sts: &StatefulSet) -> Option<String> {
    let status = sts.status.as_ref()?;
    let generation = sts.metadata.generation?;
    if status.observed_generation? < generation {
        return None;
    }
    status.update_revision.clone().filter(|r| !r.is_empty())
}

/// The operator's `KafkaRebalance` as the scale decision sees it.
pub fn observed_rebalance(kr: &KafkaRebalance) -> ObservedRebalance {
    let status = kr.status.as_ref();
    let current = status.and_then(|s| s.observed_generation) == kr.metadata.generation;
    let ready = status.and_then(|s| find_condition(&s.conditions, "Ready"));
    ObservedRebalance {
        mode: kr.spec.mode,
        brokers: kr.spec.brokers.clone(),
        phase: status.and_then(|s| s.phase).filter(|_| current),
        reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
        message: ready.map(|c| c.message.clone()).unwrap_or_default(),
    }
}

/// Reads what the scale decision needs and takes it.
async fn decide_scale(
    ctx: &Context,
    kc: &KafkaCluster,
    names: &Names,
    current: Option<i32>,
    pods: &[Pod],
    membership: &Membership,
) -> Result<ScaleDecision> {
    let auto = kc.spec.rebalance.auto_on_scale;
    let registered: BTreeSet<i32> = membership
        .view()
        .map(|v| v.registered.iter().copied().collect())
        .unwrap_or_default();
    let ready: BTreeSet<i32> = pods
        .iter()
        .filter_map(pod_state)
        .filter(|p| p.ready && !p.terminating && registered.contains(&p.ordinal))
        .map(|p| p.ordinal)
        .collect();
    let api: Api<KafkaRebalance> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let rebalance = if auto && current.is_some() {
        api.get_opt(&names.auto_rebalance())
            .await?
            .map(|kr| observed_rebalance(&kr))
    } else {
        None
    };
    let placement = if scaling::needs_placement(kc.spec.replicas, auto, current) {
        let brokers = ready_brokers(pods, admin_port(kc));
        let placement = match dial_for(ctx, kc).await {
            Ok(dial) => read_placement(&brokers, &dial).await,
            Err(e) => Err(e),
        };
        match placement {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::info!(cluster = %builders::object_key(kc), error = %e,
                    "reading the partitions for a scale-down failed; retrying");
                None
            }
        }
    } else {
        None
    };
    // The scale's state is read from the API server, not the (possibly
    // stale) cached object: a reconcile started by the StatefulSet change
    // of the previous one must see what that one recorded.
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &names.namespace);
    let fresh = clusters.get_opt(&names.cluster).await?;
    let pending = fresh
        .as_ref()
        .and_then(|kc| kc.status.as_ref())
        .and_then(|s| s.auto_rebalance.as_ref());
    let name = names.auto_rebalance();
    let decision = scaling::decide(&ScaleInput {
        desired: kc.spec.replicas,
        auto,
        current,
        ready: &ready,
        pending,
        rebalance: rebalance.as_ref(),
        placement: placement.as_ref(),
        rebalance_name: &name,
    });
    if decision.pending.as_ref() != pending {
        // Record the scale's state before acting on it, so a reconcile that
        // fails half-way cannot lose it (e.g. a grown StatefulSet whose new
        // brokers would never be filled).
        let patch = serde_json::json!({"status": {"autoRebalance": decision.pending}});
        clusters
            .patch_status(
                &names.cluster,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    Ok(decision)
}

/// Applies or deletes the operator's `KafkaRebalance` as decided.
async fn change_rebalance(
    ctx: &Context,
    kc: &KafkaCluster,
    names: &Names,
    change: &RebalanceChange,
) -> Result<()> {
    let api: Api<KafkaRebalance> = Api::namespaced(ctx.client.clone(), &names.namespace);
    match change {
        RebalanceChange::Keep => {}
        RebalanceChange::Apply(mode, brokers) => {
            let kr = builders::auto_rebalance(kc, *mode, brokers)?;
            api.patch(
                &names.auto_rebalance(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&kr),
            )
            .await?;
        }
        RebalanceChange::Delete => match api
            .delete(&names.auto_rebalance(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        },
    }
    Ok(())
}

/// Reconciles one KafkaCluster.
pub async fn reconcile(kc: Arc<KafkaCluster>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let result = reconcile_inner(&kc, &ctx).await;
    ctx.metrics.reconciled(KIND, started.elapsed());
    if result.is_err() {
        ctx.metrics.failed(KIND);
    }
    result
}

/// Sets the dynamic keys of `spec.config` as the cluster-wide broker
/// defaults (see [`super::dynamic`]) through a Ready broker. A failure is
/// logged and retried by the next reconcile; it never fails this one.
async fn sync_dynamic_configs(
    ctx: &Context,
    kc: &KafkaCluster,
    pods: &[Pod],
    reference: &k8s_openapi::api::core::v1::ObjectReference,
) {
    let brokers = ready_brokers(pods, admin_port(kc));
    if brokers.is_empty() {
        return;
    }
    let outcome = async {
        let (mut admin, _) = connect_admin(ctx, kc, &brokers).await?;
        let current = admin.describe_broker_defaults().await?;
        let ops = super::dynamic::plan(&kc.spec.config, &current);
        if !ops.is_empty() {
            admin.alter_broker_config("", &ops).await?;
        }
        Ok::<_, crate::kafka::KafkaError>(ops)
    }
    .await;
    match outcome {
        Ok(ops) if !ops.is_empty() => {
            let keys: Vec<&str> = ops
                .iter()
                .map(|op| match op {
                    crate::kafka::ConfigOp::Set(k, _) | crate::kafka::ConfigOp::Delete(k) => {
                        k.as_str()
                    }
                })
                .collect();
            ctx.events
                .normal(
                    reference,
                    "Reconcile",
                    "DynamicConfigUpdated",
                    format!(
                        "applied cluster-wide broker configs without a restart: {}",
                        keys.join(", ")
                    ),
                )
                .await;
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(cluster = %builders::object_key(kc), error = %e, "applying dynamic broker configs failed; retried at the next reconcile")
        }
    }
}

async fn reconcile_inner(kc: &KafkaCluster, ctx: &Context) -> Result<Action> {
    if kc.metadata.deletion_timestamp.is_some() {
        // Children are garbage-collected through owner references.
        return Ok(Action::await_change());
    }
    let names = Names::of(kc)?;
    let ns = names.namespace.clone();
    let client = &ctx.client;
    let reference = kc.object_ref(&());
    let sts_api: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let before = sts_api.get_opt(&names.stateful_set()).await?;
    let current = before
        .as_ref()
        .and_then(|s| s.spec.as_ref())
        .and_then(|s| s.replicas);
    let selector = builders::selector_string(&names.cluster);
    let pods_before = pod_api
        .list(&ListParams::default().labels(&selector))
        .await?;
    let membership = read_membership(client, &names).await?;
    // A refused spec applies nothing; the brokers go on as they are.
    let refusal = cluster_spec_problem(&kc.spec);
    let mut problem: Option<Problem> = None;
    let scale = if refusal.is_none() {
        Some(decide_scale(ctx, kc, &names, current, &pods_before.items, &membership).await?)
    } else {
        None
    };
    if let Some(scale) = &scale {
        let certs = if listeners::layout(&kc.spec).secured() {
            certs::ensure_cluster_certs(
                client,
                kc,
                certs::CaPolicy::of(kc.spec.cluster_ca.as_ref()),
                std::time::SystemTime::now(),
            )
            .await
            .map(|c| Some(c.digest))
        } else {
            Ok(None)
        };
        let applied = match &certs {
            // no broker starts without its certificates
            Err(e) => Err(Problem {
                reason: "CertificatesUnavailable".into(),
                message: format!("the cluster's certificates: {e}"),
            }),
            Ok(digest) => {
                let objs = builders::desired_objects_scaled(kc, scale.replicas, digest.as_deref())?;
                apply_all(client, &ns, &objs).await.map_err(|e| Problem {
                    reason: "ApplyFailed".into(),
                    message: e.to_string(),
                })
            }
        };
        if let Err(p) = applied {
            tracing::warn!(cluster = %builders::object_key(kc), reason = %p.reason, error = %p.message, "applying desired objects failed");
            problem = Some(p);
        } else if let Err(e) = change_rebalance(ctx, kc, &names, &scale.rebalance).await {
            tracing::warn!(cluster = %builders::object_key(kc), error = %e, "applying the scale's KafkaRebalance failed");
            problem = Some(Problem {
                reason: "ApplyFailed".into(),
                message: e.to_string(),
            });
        } else {
            if let Some(ev) = &scale.event {
                ctx.events.publish(&reference, "Scale", ev).await;
            }
            match current {
                None => {
                    ctx.events
                        .normal(
                            &reference,
                            "Create",
                            "ClusterCreated",
                            format!(
                                "created StatefulSet {} with {} brokers",
                                names.stateful_set(),
                                scale.replicas
                            ),
                        )
                        .await
                }
                Some(old) if old != scale.replicas => {
                    ctx.events
                        .normal(
                            &reference,
                            "Scale",
                            "ClusterScaled",
                            format!("scaled from {old} to {} brokers", scale.replicas),
                        )
                        .await
                }
                Some(_) => {}
            }
        }
    }

    let sts = sts_api.get_opt(&names.stateful_set()).await?;
    // What the StatefulSet runs now (while a scale waits for data to move,
    // not spec.replicas).
    let running = sts
        .as_ref()
        .and_then(|s| s.spec.as_ref())
        .and_then(|s| s.replicas)
        .unwrap_or(kc.spec.replicas);
    let pods = pod_api
        .list(&ListParams::default().labels(&selector))
        .await?;
    let pod_states: Vec<PodState> = pods.items.iter().filter_map(pod_state).collect();
    let update_revision = sts.as_ref().and_then(current_update_revision);
    let step = if sts.is_some() {
        let health = if roll_pending(running, update_revision.as_deref(), &pod_states) {
            read_replica_health(client, &names).await
        } else {
            HealthView::Known(Default::default())
        };
        next_step(running, update_revision.as_deref(), &pod_states, &health)
    } else {
        RolloutStep::Wait("StatefulSet does not exist yet".into())
    };

    if let (RolloutStep::Delete { name, ordinal }, None, None) = (&step, &problem, &refusal) {
        let uid = pods
            .items
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| p.metadata.uid.clone());
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid,
                resource_version: None,
            }),
            ..Default::default()
        };
        match pod_api.delete(name, &dp).await {
            Ok(_) => {
                ctx.events
                    .normal(
                        &reference,
                        "RollingRestart",
                        "RollingRestart",
                        format!(
                            "restarting broker {ordinal} (pod {name}) to apply revision {}",
                            update_revision.clone().unwrap_or_default()
                        ),
                    )
                    .await;
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }

    if problem.is_none() && refusal.is_none() {
        sync_dynamic_configs(ctx, kc, &pods.items, &reference).await;
    }

    let (scaling, auto_rebalance) = match (&scale, &problem) {
        (Some(s), None) => (s.note.clone(), s.pending.clone()),
        // Nothing was applied: the scale's state stays as it was.
        _ => (
            None,
            kc.status.as_ref().and_then(|s| s.auto_rebalance.clone()),
        ),
    };
    let layout = listeners::layout(&kc.spec);
    let obs = ClusterObservation {
        generation: kc.metadata.generation,
        desired_replicas: running,
        scaling,
        auto_rebalance,
        update_revision,
        pods: pod_states,
        rollout: step.clone(),
        refusal: refusal.clone(),
        problem: problem.clone(),
        selector,
        bootstrap_servers: builders::bootstrap_servers(&names, layout.clients[0].port),
        listeners: layout
            .clients
            .iter()
            .map(|l| ListenerStatus {
                name: l.port_name.clone(),
                bootstrap_servers: builders::bootstrap_servers(&names, l.port),
                security_protocol: l.protocol().into(),
            })
            .collect(),
        membership,
        stall_timeout_seconds: kc.spec.rollout.stall_timeout_seconds,
    };
    let now = format_time(k8s_openapi::jiff::Timestamp::now());
    let old_status = kc.status.as_ref();
    let status = cluster_status(old_status, &obs, &now);
    if old_status != Some(&status) {
        let api: Api<KafkaCluster> = Api::namespaced(client.clone(), &ns);
        let patch = status_patch(&status);
        api.patch_status(
            &names.cluster,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    if let (Some(hold), true) = (
        &status.rollout_hold,
        old_status
            .and_then(|s| s.rollout_hold.as_ref())
            .map(|h| (&h.reason, h.broker))
            != status.rollout_hold.as_ref().map(|h| (&h.reason, h.broker)),
    ) {
        tracing::info!(cluster = %builders::object_key(kc), reason = %hold.reason, "rolling restart held: {}", hold.message);
    }
    for ev in status_events(old_status, &status) {
        ctx.events.publish(&reference, "Reconcile", &ev).await;
    }

    // A scale waiting for partitions to move is looked at again soon.
    // A crash loop or a refusal is looked at again soon too (a crash loop
    // ends by time, not by a change of a watched object).
    let settled = problem.is_none()
        && refusal.is_none()
        && crate::crd::find_condition(&status.conditions, DEGRADED).is_some_and(|c| !c.is_true())
        && status.auto_rebalance.is_none()
        && scale.as_ref().is_some_and(|s| s.note.is_none())
        && matches!(step, RolloutStep::UpToDate)
        && crate::crd::find_condition(&status.conditions, READY).is_some_and(|c| c.is_true());
    Ok(if settled {
        Action::requeue(ctx.tunables.cluster_resync)
    } else {
        Action::requeue(ctx.tunables.retry)
    })
}

/// Requeue policy after a failed reconcile: retry soon, never crash.
pub fn error_policy(kc: Arc<KafkaCluster>, err: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(cluster = %builders::object_key(&kc), error = %err, "reconcile failed");
    Action::requeue(ctx.tunables.retry)
}

/// Maps a broker pod to its KafkaCluster.
pub fn pod_to_cluster(pod: Pod) -> Option<ObjectRef<KafkaCluster>> {
    let cluster = pod.labels().get(CLUSTER_LABEL)?.clone();
    let ns = pod.namespace()?;
    Some(ObjectRef::new(&cluster).within(&ns))
}

/// Runs the KafkaCluster controller until the stream ends. `namespace` limits
/// it to one namespace (all namespaces when None).
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let client = ctx.client.clone();
    fn api<K>(client: &kube::Client, ns: &Option<String>) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match ns {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
    let clusters: Api<KafkaCluster> = api(&client, &namespace);
    let sts: Api<StatefulSet> = api(&client, &namespace);
    let svc: Api<Service> = api(&client, &namespace);
    let cm: Api<ConfigMap> = api(&client, &namespace);
    let pods: Api<Pod> = api(&client, &namespace);
    let rebalances: Api<KafkaRebalance> = api(&client, &namespace);
    let children =
        watcher::Config::default().labels("app.kubernetes.io/managed-by=moldau-operator");
    Controller::new(clusters, watcher::Config::default())
        .owns(sts, children.clone())
        .owns(svc, children.clone())
        .owns(cm, children.clone())
        // the KafkaRebalance of a scale: its progress moves the scale on
        .owns(rebalances, children.clone())
        .watches(
            pods,
            watcher::Config::default().labels("app.kubernetes.io/name=moldau-broker"),
            pod_to_cluster,
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                let reconciler =
                    matches!(e, kube::runtime::controller::Error::ReconcilerFailed(..));
                crate::context::log_controller_error("KafkaCluster", &e, reconciler);
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSetStatus;
    use std::collections::BTreeMap;

    #[test]
    fn stale_update_revision_is_ignored() {
        let mut sts = StatefulSet::default();
        sts.metadata.generation = Some(3);
        sts.status = Some(StatefulSetStatus {
            observed_generation: Some(2),
            update_revision: Some("r".into()),
            ..Default::default()
        });
        assert_eq!(current_update_revision(&sts), None);
        sts.status.as_mut().unwrap().observed_generation = Some(3);
        assert_eq!(current_update_revision(&sts).as_deref(), Some("r"));
    }

    #[test]
    fn pods_map_to_their_cluster() {
        let pod = |labels: &[(&str, &str)]| {
            let mut p = Pod::default();
            p.metadata.name = Some("demo-0".into());
            p.metadata.namespace = Some("ns".into());
            p.metadata.labels = Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            );
            p
        };
        let r = pod_to_cluster(pod(&[(CLUSTER_LABEL, "demo")])).unwrap();
        assert_eq!(r.name, "demo");
        assert_eq!(r.namespace.as_deref(), Some("ns"));
        assert!(pod_to_cluster(pod(&[])).is_none());
    }
}
