//! The async edge of the `KafkaTopic` reconciler: finds the referenced
//! KafkaCluster, picks a Ready broker pod by its pod IP (never a Service or
//! DNS name), reads the brokers' cluster record through the API server (the
//! registered-broker count a replication factor is checked against), runs
//! `sync` through the admin client, writes status, publishes
//! Events, and applies `deletionPolicy` in a finalizer that never blocks
//! deletion once the cluster is gone or being deleted.
//!
//! The topic's config is its `spec.config` as the cluster's
//! `KafkaRetentionPolicy`s resolve it (`crate::retention::resolve`): this
//! reconciler is the one writer of a managed topic's configs, and shows in
//! `status.policyConfig` which policy decided which key. A change of a
//! policy of its cluster reconciles the topic at once.
//!
//! While partitions of the topic move it also reports their progress
//! (`status.reassignment`, see [`super::reassignment`] for why the topic
//! controller is its writer): it reads ListPartitionReassignments and the
//! cluster's `KafkaRebalance`s, reconciles again after `retry` while
//! anything moves, and is woken when a rebalance that moves the topic
//! changes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event as FinalizerEvent;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};

use crate::brokers::{admin_port, connect_admin, ready_brokers};
use crate::cluster::builders::{selector_string, Names};
use crate::cluster::membership::read_membership;
use crate::cluster::status::Problem;
use crate::context::Context;
use crate::crd::{
    format_time, DeletionPolicy, KafkaCluster, KafkaRebalance, KafkaRetentionPolicy, KafkaTopic,
    TopicReassignment,
};
use crate::error::{Error, Result};
use crate::kafka::OngoingReassignment;
use crate::reconcile::{finalized, metered, namespaced_api, requeue_after_error};

use super::plan::{default_replication_factor, ObservedTopic, TopicAction};
use super::reassignment::topic_reassignment;
use super::status::{problem_event, topic_status};
use super::sync::sync_topic;

const KIND: &str = "KafkaTopic";
/// Finalizer that applies `deletionPolicy`.
pub const FINALIZER: &str = "moldau.io/topic-deletion";

/// Whether deleting this KafkaTopic must delete a topic in Kafka: only with
/// `deletionPolicy: Delete` and only when the operator ever saw the topic in
/// Kafka (a topic that was never created leaves nothing to delete, so a
/// cluster that never came up cannot block the deletion).
pub fn must_delete_in_kafka(kt: &KafkaTopic) -> bool {
    kt.spec.deletion_policy == DeletionPolicy::Delete
        && kt
            .status
            .as_ref()
            .is_some_and(|s| s.topic_id.is_some() || s.partitions.is_some())
}

/// When several KafkaTopics of one cluster name the same Kafka topic, the
/// oldest (by creationTimestamp, then name) manages it. Returns the manager's
/// name when it is not `me`.
pub fn conflicting_owner(me: &KafkaTopic, all: &[KafkaTopic]) -> Option<String> {
    let topic = me.kafka_topic_name();
    let key = |t: &KafkaTopic| {
        (
            t.metadata.creation_timestamp.as_ref().map(|c| c.0),
            t.name_any(),
        )
    };
    let owner = all
        .iter()
        .filter(|t| t.namespace() == me.namespace())
        .filter(|t| t.spec.cluster_ref == me.spec.cluster_ref && t.kafka_topic_name() == topic)
        .min_by_key(|t| key(t))?;
    (owner.name_any() != me.name_any()).then(|| owner.name_any())
}

/// Where to reach the cluster of a topic, or why it cannot be reached.
enum Target {
    /// Ready brokers (id, pod address), lowest id first, never empty; the
    /// brokers registered with the controller, when the record is known;
    /// the cluster's default replication factor; and the cluster (how to
    /// dial it).
    Broker(
        Vec<(i32, SocketAddr)>,
        Option<usize>,
        i32,
        Box<KafkaCluster>,
    ),
    Unavailable(Problem),
    /// The cluster does not exist or is being deleted.
    Gone(Problem),
}

async fn target(ctx: &Context, kt: &KafkaTopic) -> Result<Target> {
    let ns = kt
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let cluster_name = &kt.spec.cluster_ref;
    let Some(kc) = clusters.get_opt(cluster_name).await? else {
        return Ok(Target::Gone(Problem {
            reason: "ClusterNotFound".into(),
            message: format!("KafkaCluster {ns}/{cluster_name} does not exist"),
        }));
    };
    if kc.metadata.deletion_timestamp.is_some() {
        return Ok(Target::Gone(Problem {
            reason: "ClusterDeleting".into(),
            message: format!("KafkaCluster {ns}/{cluster_name} is being deleted"),
        }));
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let list = pods
        .list(&ListParams::default().labels(&selector_string(cluster_name)))
        .await?;
    let brokers = ready_brokers(&list.items, admin_port(&kc));
    if brokers.is_empty() {
        return Ok(Target::Unavailable(Problem {
            reason: "NoBrokerReady".into(),
            message: format!("no Ready broker pod with an IP in KafkaCluster {ns}/{cluster_name}"),
        }));
    }
    let names = Names::of(&kc)?;
    let registered = read_membership(&ctx.client, &names)
        .await?
        .registered_count();
    let default_rf = default_replication_factor(&kc.spec.config);
    Ok(Target::Broker(
        brokers,
        registered,
        default_rf,
        Box::new(kc),
    ))
}

fn action_event(action: &TopicAction, topic: &str) -> (&'static str, String) {
    match action {
        TopicAction::Create { partitions, replication_factor, .. } => (
            "TopicCreated",
            format!("created topic {topic} with {partitions} partitions, replication factor {replication_factor}"),
        ),
        TopicAction::GrowPartitions(n) => ("PartitionsIncreased", format!("topic {topic} now has {n} partitions")),
        TopicAction::AlterConfig(ops) => ("TopicConfigUpdated", format!("applied {} config changes to topic {topic}", ops.len())),
    }
}

/// The topic's move progress: running reassignments as the sync read them
/// from the controller (`ongoing`), the `KafkaRebalance`s of its cluster
/// from the API server. A read that fails is logged and counts as nothing
/// moving.
async fn reassignment_of(
    ctx: &Context,
    kt: &KafkaTopic,
    ongoing: &[OngoingReassignment],
    observed: &ObservedTopic,
) -> Option<TopicReassignment> {
    let name = kt.kafka_topic_name();
    let rebalances: Vec<KafkaRebalance> = match kt.namespace() {
        Some(ns) => Api::<KafkaRebalance>::namespaced(ctx.client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| tracing::debug!(topic = %name, error = %e, "listing rebalances failed"))
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let names: Vec<String> = rebalances.iter().map(|r| r.name_any()).collect();
    let of_cluster: Vec<(&str, &crate::crd::KafkaRebalanceStatus)> = rebalances
        .iter()
        .zip(&names)
        .filter(|(r, _)| r.spec.cluster == kt.spec.cluster_ref)
        .filter_map(|(r, n)| r.status.as_ref().map(|s| (n.as_str(), s)))
        .collect();
    topic_reassignment(&name, &observed.replicas, ongoing, &of_cluster)
}

/// Writes the status. `reassignment`: `Some(value)` sets the move progress
/// (`Some(None)` removes it), `None` keeps what the status says (Kafka
/// could not be asked).
async fn write_status(
    ctx: &Context,
    kt: &KafkaTopic,
    reference: &ObjectReference,
    observed: Option<&super::plan::ObservedTopic>,
    problems: &[Problem],
    reassignment: Option<Option<TopicReassignment>>,
    policy_config: Option<BTreeMap<String, String>>,
) -> Result<()> {
    let ns = kt
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let old = kt.status.as_ref();
    let now = format_time(k8s_openapi::jiff::Timestamp::now());
    let mut status = topic_status(
        old,
        kt.metadata.generation,
        &kt.kafka_topic_name(),
        observed,
        problems,
        &now,
    );
    status.reassignment = match reassignment {
        Some(r) => r,
        None => old.and_then(|s| s.reassignment.clone()),
    };
    status.policy_config = match policy_config {
        Some(p) => p,
        None => old.map(|s| s.policy_config.clone()).unwrap_or_default(),
    };
    if old != Some(&status) {
        let api: Api<KafkaTopic> = Api::namespaced(ctx.client.clone(), &ns);
        let mut value = serde_json::to_value(&status).unwrap_or_default();
        if let Some(map) = value.as_object_mut() {
            // A merge patch keeps fields it does not mention: say null.
            map.entry("reassignment").or_insert(serde_json::Value::Null);
            map.entry("policyConfig").or_insert(serde_json::Value::Null);
        }
        let patch = serde_json::json!({ "status": value });
        api.patch_status(
            &kt.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    if let Some(ev) = problem_event(old, &status) {
        ctx.events.publish(reference, "Reconcile", &ev).await;
    }
    Ok(())
}

async fn apply_topic(kt: Arc<KafkaTopic>, ctx: Arc<Context>) -> Result<Action> {
    let reference = kt.object_ref(&());
    let name = kt.kafka_topic_name();
    let ns = kt
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let siblings: Api<KafkaTopic> = Api::namespaced(ctx.client.clone(), &ns);
    let all = siblings.list(&ListParams::default()).await?.items;
    if let Some(owner) = conflicting_owner(&kt, &all) {
        let p = Problem {
            reason: "TopicNameConflict".into(),
            message: format!(
                "KafkaTopic {owner} already manages topic {name} of cluster {}",
                kt.spec.cluster_ref
            ),
        };
        write_status(&ctx, &kt, &reference, None, &[p], None, None).await?;
        return Ok(Action::requeue(ctx.tunables.topic_resync));
    }
    let (brokers, registered, default_rf, kc) = match target(&ctx, &kt).await? {
        Target::Broker(brokers, registered, default_rf, kc) => {
            (brokers, registered, default_rf, kc)
        }
        Target::Unavailable(p) | Target::Gone(p) => {
            write_status(&ctx, &kt, &reference, None, &[p], None, None).await?;
            return Ok(Action::requeue(ctx.tunables.retry));
        }
    };
    let policies: Api<KafkaRetentionPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    let policies = policies.list(&ListParams::default()).await?.items;
    let resolved = resolve_policies(&kt, &policies);
    let mut spec = kt.spec.clone();
    spec.config = resolved.config;
    let mut addr = brokers[0].1;
    let outcome = match connect_admin(&ctx, &kc, &brokers).await {
        Ok((mut admin, controller)) => {
            addr = controller;
            match sync_topic(&mut admin, &name, &spec, registered, default_rf).await {
                Ok(o) => {
                    let moving = match &o.observed {
                        Some(observed) => reassignment_of(&ctx, &kt, &o.ongoing, observed).await,
                        None => None,
                    };
                    Ok((o, moving))
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    };
    let (outcome, moving) = match outcome {
        Ok(o) => o,
        Err(e) => {
            let p = Problem {
                reason: "KafkaUnavailable".into(),
                message: format!("broker {addr}: {e}"),
            };
            write_status(&ctx, &kt, &reference, None, &[p], None, None).await?;
            return Ok(Action::requeue(ctx.tunables.retry));
        }
    };
    for action in &outcome.performed {
        let (reason, note) = action_event(action, &name);
        ctx.events.normal(&reference, "Sync", reason, note).await;
    }
    write_status(
        &ctx,
        &kt,
        &reference,
        outcome.observed.as_ref(),
        &outcome.problems,
        Some(moving.clone()),
        Some(resolved.set_by),
    )
    .await?;
    Ok(Action::requeue(if moving.is_some() {
        // Progress shows while partitions move.
        ctx.tunables.retry
    } else {
        ctx.tunables.topic_resync
    }))
}

async fn cleanup_topic(kt: Arc<KafkaTopic>, ctx: Arc<Context>) -> Result<Action> {
    let reference = kt.object_ref(&());
    let name = kt.kafka_topic_name();
    if kt.spec.deletion_policy == DeletionPolicy::Retain {
        ctx.events
            .normal(
                &reference,
                "Delete",
                "TopicRetained",
                format!("deletionPolicy Retain: topic {name} is kept in Kafka"),
            )
            .await;
        return Ok(Action::await_change());
    }
    if !must_delete_in_kafka(&kt) {
        ctx.events
            .normal(
                &reference,
                "Delete",
                "FinalizerReleased",
                format!("topic {name} was never created in Kafka; nothing to delete"),
            )
            .await;
        return Ok(Action::await_change());
    }
    match target(&ctx, &kt).await? {
        Target::Gone(p) => {
            ctx.events
                .normal(
                    &reference,
                    "Delete",
                    "FinalizerReleased",
                    format!("{}; nothing to delete", p.message),
                )
                .await;
            Ok(Action::await_change())
        }
        Target::Unavailable(p) => Err(Error::Finalizer(format!(
            "cannot delete topic {name} yet: {}",
            p.message
        ))),
        Target::Broker(brokers, _, _, kc) => {
            let (mut admin, _) = connect_admin(&ctx, &kc, &brokers).await?;
            admin.delete_topic(&name).await?;
            ctx.events
                .normal(
                    &reference,
                    "Delete",
                    "TopicDeleted",
                    format!("deleted topic {name}"),
                )
                .await;
            Ok(Action::await_change())
        }
    }
}

/// Reconciles one KafkaTopic: through the finalizer helper when its
/// deletion has work to do (`deletionPolicy: Delete`); a `Retain` topic
/// carries no finalizer at all (one left from an earlier `Delete` is
/// removed), so deleting it — or its namespace after the operator is gone —
/// never waits on the operator.
pub async fn reconcile(kt: Arc<KafkaTopic>, ctx: Arc<Context>) -> Result<Action> {
    metered(&ctx, KIND, async {
        let api = namespaced_api(&ctx, kt.as_ref())?;
        let c = ctx.clone();
        if kt.spec.deletion_policy == DeletionPolicy::Retain {
            reconcile_retained(&api, kt, c).await
        } else {
            finalized(&api, FINALIZER, kt, |event| async move {
                match event {
                    FinalizerEvent::Apply(kt) => apply_topic(kt, c).await,
                    FinalizerEvent::Cleanup(kt) => cleanup_topic(kt, c).await,
                }
            })
            .await
        }
    })
    .await
}

/// A `Retain` topic: our finalizer, if an earlier `Delete` policy left it,
/// comes off (guarded by the resourceVersion read); a topic being deleted
/// is then let go, a live one reconciled as usual.
async fn reconcile_retained(
    api: &Api<KafkaTopic>,
    kt: Arc<KafkaTopic>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let finalizers = kt.finalizers();
    if finalizers.iter().any(|f| f == FINALIZER) {
        let rest: Vec<&String> = finalizers.iter().filter(|f| *f != FINALIZER).collect();
        let patch = serde_json::json!({
            "metadata": {
                "finalizers": rest,
                "resourceVersion": kt.resource_version(),
            }
        });
        api.patch(
            &kt.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
        tracing::info!(topic = %kt.name_any(), namespace = ?kt.namespace(), "deletionPolicy Retain: removed the deletion finalizer");
    }
    if kt.metadata.deletion_timestamp.is_some() {
        return cleanup_topic(kt, ctx).await;
    }
    apply_topic(kt, ctx).await
}

/// `kt`'s spec.config as the usable policies of its cluster resolve it.
pub fn resolve_policies(
    kt: &KafkaTopic,
    policies: &[KafkaRetentionPolicy],
) -> crate::retention::resolve::Resolved {
    let ns = kt.namespace().unwrap_or_default();
    let usable = crate::retention::usable(policies, &ns, &kt.spec.cluster_ref);
    let facts = crate::retention::resolve::TopicFacts {
        name: kt.kafka_topic_name(),
        labels: Some(kt.labels().clone()),
        own: kt.spec.config.clone(),
    };
    crate::retention::resolve::resolve(&facts, &usable)
}

/// The topics of the cluster of policy `kp` (any of them may match it).
pub fn topics_of_policy(
    topics: &[Arc<KafkaTopic>],
    kp: &KafkaRetentionPolicy,
) -> Vec<ObjectRef<KafkaTopic>> {
    topics
        .iter()
        .filter(|t| t.namespace() == kp.namespace() && t.spec.cluster_ref == kp.spec.cluster_ref)
        .map(|t| ObjectRef::from_obj(t.as_ref()))
        .collect()
}

/// Requeue policy after a failed reconcile: retry soon, never crash.
pub fn error_policy(kt: Arc<KafkaTopic>, err: &Error, ctx: Arc<Context>) -> Action {
    requeue_after_error(KIND, kt.as_ref(), err, &ctx)
}

/// The objects of a kind that reference cluster `kc` (same namespace,
/// `cluster_ref` naming it): what a cluster change wakes.
pub fn referencing<K>(
    objects: &[Arc<K>],
    kc: &KafkaCluster,
    cluster_ref: impl Fn(&K) -> &str,
) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()>,
{
    objects
        .iter()
        .filter(|o| o.namespace() == kc.namespace() && cluster_ref(o) == kc.name_any())
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect()
}

/// The topics that reference cluster `kc`.
pub fn topics_of(topics: &[Arc<KafkaTopic>], kc: &KafkaCluster) -> Vec<ObjectRef<KafkaTopic>> {
    referencing(topics, kc, |t| &t.spec.cluster_ref)
}

/// The topics whose partitions rebalance `kr` moves (same namespace and
/// cluster, named in its moves).
pub fn topics_moved_by(
    topics: &[Arc<KafkaTopic>],
    kr: &KafkaRebalance,
) -> Vec<ObjectRef<KafkaTopic>> {
    let Some(status) = &kr.status else {
        return Vec::new();
    };
    topics
        .iter()
        .filter(|t| t.namespace() == kr.namespace() && t.spec.cluster_ref == kr.spec.cluster)
        .filter(|t| {
            let name = t.kafka_topic_name();
            status.moves.iter().any(|m| m.topic == name)
        })
        .map(|t| ObjectRef::from_obj(t.as_ref()))
        .collect()
}

/// Runs the KafkaTopic controller until the stream ends.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<KafkaTopic> = ctx.watched_api(&namespace);
    let clusters: Api<KafkaCluster> = ctx.watched_api(&namespace);
    let rebalances: Api<KafkaRebalance> = ctx.watched_api(&namespace);
    let policies: Api<KafkaRetentionPolicy> = ctx.watched_api(&namespace);
    let controller = Controller::new(api, watcher::Config::default());
    let topics = controller.store();
    let moved = controller.store();
    let governed = controller.store();
    // A change of a cluster (e.g. it became Ready, or is being deleted)
    // reconciles its topics at once instead of at their next retry; so does
    // a change of a rebalance that moves them (their progress).
    controller
        .watches(clusters, watcher::Config::default(), move |kc| {
            topics_of(&topics.state(), &kc)
        })
        .watches(rebalances, watcher::Config::default(), move |kr| {
            topics_moved_by(&moved.state(), &kr)
        })
        .watches(policies, watcher::Config::default(), move |kp| {
            topics_of_policy(&governed.state(), &kp)
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                let reconciler =
                    matches!(e, kube::runtime::controller::Error::ReconcilerFailed(..));
                crate::context::log_controller_error("KafkaTopic", &e, reconciler);
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str, topic: Option<&str>, cluster: &str, created: i64) -> KafkaTopic {
        let mut kt = KafkaTopic::new(
            name,
            serde_json::from_value(serde_json::json!({
                "clusterRef": cluster, "partitions": 1, "replicationFactor": 1, "topicName": topic
            }))
            .unwrap(),
        );
        kt.metadata.namespace = Some("ns".into());
        kt.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
            ));
        kt
    }

    #[test]
    fn rebalance_changes_map_to_the_topics_they_move() {
        let topics = vec![
            Arc::new(named("a", None, "c", 1)),
            Arc::new(named("b", Some("kafka-b"), "c", 1)),
            Arc::new(named("x", None, "other", 1)),
        ];
        let mut kr = KafkaRebalance::new(
            "r",
            serde_json::from_value(serde_json::json!({"cluster": "c"})).unwrap(),
        );
        kr.metadata.namespace = Some("ns".into());
        assert!(topics_moved_by(&topics, &kr).is_empty(), "no status yet");
        let mv = |t: &str| crate::crd::PlannedMove {
            topic: t.into(),
            ..Default::default()
        };
        kr.status = Some(crate::crd::KafkaRebalanceStatus {
            moves: vec![mv("kafka-b"), mv("x"), mv("a")],
            ..Default::default()
        });
        let got: Vec<String> = topics_moved_by(&topics, &kr)
            .into_iter()
            .map(|r| r.name)
            .collect();
        // x is moved in another cluster only
        assert_eq!(got, vec!["a".to_string(), "b".to_string()]);
    }

    #[test]
    fn cluster_changes_map_to_its_topics() {
        let mut kc = KafkaCluster::new(
            "c",
            serde_json::from_value(serde_json::json!({
                "replicas": 1, "image": "i", "storage": {"size": "1Gi"}
            }))
            .unwrap(),
        );
        kc.metadata.namespace = Some("ns".into());
        let mine = named("a", None, "c", 1);
        let other_cluster = named("b", None, "d", 1);
        let mut other_ns = named("c", None, "c", 1);
        other_ns.metadata.namespace = Some("elsewhere".into());
        let all: Vec<Arc<KafkaTopic>> = [mine, other_cluster, other_ns]
            .into_iter()
            .map(Arc::new)
            .collect();
        let refs = topics_of(&all, &kc);
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].name, "a");
    }

    #[test]
    fn oldest_claim_on_a_topic_name_wins() {
        let a = named("orders", None, "c", 10);
        let b = named("orders-copy", Some("orders"), "c", 20);
        let other_cluster = named("x", Some("orders"), "d", 1);
        let all = vec![a.clone(), b.clone(), other_cluster.clone()];
        assert_eq!(conflicting_owner(&a, &all), None);
        assert_eq!(conflicting_owner(&b, &all), Some("orders".into()));
        assert_eq!(conflicting_owner(&other_cluster, &all), None);
        // same creation time: the name decides
        let c = named("aaa", Some("orders"), "c", 10);
        let all = vec![a.clone(), c.clone()];
        assert_eq!(conflicting_owner(&a, &all), Some("aaa".into()));
    }

    #[test]
    fn only_topics_seen_in_kafka_are_deleted_there() {
        let mut kt = KafkaTopic::new(
            "t",
            serde_json::from_value(serde_json::json!({
                "clusterRef": "c", "partitions": 1, "replicationFactor": 1
            }))
            .unwrap(),
        );
        assert!(!must_delete_in_kafka(&kt));
        kt.status = Some(crate::crd::KafkaTopicStatus {
            topic_id: Some("id".into()),
            ..Default::default()
        });
        assert!(must_delete_in_kafka(&kt));
        kt.spec.deletion_policy = DeletionPolicy::Retain;
        assert!(!must_delete_in_kafka(&kt));
    }
}
