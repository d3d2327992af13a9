//! The Kubernetes/Kafka edge of `KafkaRetentionPolicy`: every reconcile of
//! one policy reads its whole cluster (all topics and their overrides from
//! the broker, the `KafkaTopic`s, the records of what policies changed),
//! applies [`super::plan`] to the topics without a `KafkaTopic`, reads the
//! overrides again and writes the status of every policy of the cluster.
//!
//! The records live in the ConfigMap `<cluster>-policy-records` (owned by
//! the KafkaCluster, so it goes with it). Reconciles are serialized (one
//! at a time in this process; the Lease makes the process the only one), so
//! two policies of a cluster never race on the records. A policy is
//! reconciled on its own changes, on changes of its cluster and of the
//! cluster's KafkaTopics (labels decide matching), and every
//! `--topic-resync` seconds, which is how topics created by applications
//! are brought into line. A finalizer keeps a deleted policy until every
//! topic it matched carries its resolution without it again.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::Event as FinalizerEvent;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Resource, ResourceExt};

use crate::brokers::{admin_port, connect_admin, ready_brokers};
use crate::cluster::builders::{owner_reference, selector_string};
use crate::context::{Context, FIELD_MANAGER};
use crate::crd::{
    format_time, merge_conditions, Condition, KafkaCluster, KafkaRetentionPolicy,
    KafkaRetentionPolicyStatus, KafkaTopic,
};
use crate::error::{Error, Result};
use crate::kafka::{AdminClient, KafkaError};
use crate::reconcile::{finalized, metered, namespaced_api, requeue_after_error};
use crate::topic::controller::referencing;

use super::plan::{not_yet_restored, plan, report, ClusterView, ManagedTopic, PolicyReport};
use super::resolve::{validate, ConfigRecord};
use super::usable;

const KIND: &str = "KafkaRetentionPolicy";
/// Finalizer that restores the topics a deleted policy governed.
pub const FINALIZER: &str = "moldau.io/retention-restore";
/// Key of the records in the records ConfigMap.
const RECORDS_KEY: &str = "records.json";

/// One reconcile at a time (see the module docs).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Name of the ConfigMap holding the records of cluster `cluster`.
pub fn records_name(cluster: &str) -> String {
    format!("{cluster}-policy-records")
}

async fn read_records(ctx: &Context, ns: &str, cluster: &str) -> Result<Vec<ConfigRecord>> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let Some(cm) = api.get_opt(&records_name(cluster)).await? else {
        return Ok(Vec::new());
    };
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(RECORDS_KEY))
        .map(String::as_str)
        .unwrap_or("[]");
    // A record set that does not parse would make every policy value look
    // like a topic's own: refuse to go on rather than lose the own values.
    serde_json::from_str(text).map_err(|e| {
        Error::Finalizer(format!(
            "ConfigMap {ns}/{} holds unreadable records: {e}",
            records_name(cluster)
        ))
    })
}

async fn write_records(ctx: &Context, kc: &KafkaCluster, records: &[ConfigRecord]) -> Result<()> {
    let ns = kc
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let mut owner = owner_reference(kc).map_err(|e| Error::Finalizer(e.to_string()))?;
    // an owner for garbage collection, not a controller of the ConfigMap
    owner.controller = None;
    owner.block_owner_deletion = None;
    let text = serde_json::to_string_pretty(records).unwrap_or_else(|_| "[]".into());
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(records_name(&kc.name_any())),
            namespace: Some(ns.clone()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(RECORDS_KEY.to_string(), text)])),
        ..Default::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    api.patch(
        &records_name(&kc.name_any()),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await?;
    Ok(())
}

/// Every non-internal topic of the cluster and its overrides.
async fn observe(
    admin: &mut AdminClient,
) -> std::result::Result<BTreeMap<String, BTreeMap<String, String>>, KafkaError> {
    let md = admin.metadata(None).await?;
    let names: Vec<String> = md
        .topics
        .into_iter()
        .map(|t| t.name)
        .filter(|n| !n.starts_with("__"))
        .collect();
    admin.describe_topics_overrides(&names).await
}

/// The KafkaTopics of cluster `cluster`, by Kafka topic name.
fn managed_topics(topics: &[KafkaTopic], cluster: &str) -> BTreeMap<String, ManagedTopic> {
    topics
        .iter()
        .filter(|t| t.spec.cluster_ref == cluster)
        .map(|t| {
            (
                t.kafka_topic_name(),
                ManagedTopic {
                    labels: t.labels().clone(),
                    spec_config: t.spec.config.clone(),
                },
            )
        })
        .collect()
}

/// The status of a policy from its report, or the problem that kept the
/// cluster from being read (then the old counts stay).
pub fn policy_status(
    kp: &KafkaRetentionPolicy,
    report: Option<&PolicyReport>,
    problem: Option<(&str, String)>,
    now: &str,
) -> KafkaRetentionPolicyStatus {
    let old = kp.status.clone().unwrap_or_default();
    let invalid = validate(kp);
    let cluster = &kp.spec.cluster_ref;
    let ready = if !invalid.is_empty() {
        Condition::new("Ready", false, "InvalidPolicy", invalid.join("; "))
    } else if let Some((reason, message)) = problem {
        Condition::new("Ready", false, reason, message)
    } else {
        match report {
            None => Condition::new("Ready", false, "Pending", "not reconciled yet"),
            Some(r) if r.matched == 0 => Condition::new(
                "Ready",
                true,
                "NoTopicMatched",
                format!("the selector matches no topic of cluster {cluster}"),
            ),
            Some(r) if r.conforming < r.matched => Condition::new(
                "Ready",
                false,
                "NotConforming",
                format!(
                    "{} of {} matched topics do not conform (see status.nonConforming)",
                    r.matched - r.conforming,
                    r.matched
                ),
            ),
            Some(r) => Condition::new(
                "Ready",
                true,
                "Applied",
                format!("all {} matched topics conform", r.matched),
            ),
        }
    };
    let mut conditions = vec![ready];
    if let Some(r) = report.filter(|r| r.conflict_count > 0) {
        conditions.push(Condition::new(
            "Conflicting",
            true,
            "LowerPrecedence",
            format!(
                "{} topic configs it matches are governed by policies of higher precedence (see status.conflicts)",
                r.conflict_count
            ),
        ));
    }
    let (matched, conforming, non_conforming, conflicts) = match (report, invalid.is_empty()) {
        (Some(r), true) => (
            r.matched as i32,
            r.conforming as i32,
            r.non_conforming.clone(),
            r.conflicts.clone(),
        ),
        (_, false) => (0, 0, Vec::new(), Vec::new()),
        (None, true) => (
            old.matched_topics,
            old.conforming_topics,
            old.non_conforming.clone(),
            old.conflicts.clone(),
        ),
    };
    KafkaRetentionPolicyStatus {
        conditions: merge_conditions(&old.conditions, conditions, kp.metadata.generation, now),
        observed_generation: kp.metadata.generation,
        matched_topics: matched,
        conforming_topics: conforming,
        non_conforming,
        conflicts,
    }
}

async fn write_status(
    ctx: &Context,
    kp: &KafkaRetentionPolicy,
    status: KafkaRetentionPolicyStatus,
) -> Result<()> {
    if kp.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let ns = kp
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<KafkaRetentionPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    let mut value = serde_json::to_value(&status).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        // A merge patch keeps lists it does not mention: say empty.
        map.entry("nonConforming").or_insert(serde_json::json!([]));
        map.entry("conflicts").or_insert(serde_json::json!([]));
    }
    let patch = serde_json::json!({ "status": value });
    match api
        .patch_status(
            &kp.name_any(),
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

/// What reconciling a cluster found for the policy that triggered it.
struct Outcome {
    /// Topics it matched that do not yet carry their resolution without it
    /// (only meaningful while it is being deleted).
    not_restored: Vec<String>,
    /// The cluster is gone or being deleted.
    gone: bool,
}

/// Applies the policies of the cluster of `kp` and writes every status.
async fn reconcile_cluster(ctx: &Context, kp: &KafkaRetentionPolicy) -> Result<Outcome> {
    let _serial = SERIAL.lock().await;
    let ns = kp
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let cluster = &kp.spec.cluster_ref;
    let api: Api<KafkaRetentionPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    let all: Vec<KafkaRetentionPolicy> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| &p.spec.cluster_ref == cluster)
        .collect();
    let now = format_time(k8s_openapi::jiff::Timestamp::now());
    let clusters: Api<KafkaCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let kc = clusters.get_opt(cluster).await?;
    let mut problem = match &kc {
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
    let mut outcome = Outcome {
        not_restored: Vec::new(),
        gone,
    };
    let mut reports: BTreeMap<String, PolicyReport> = BTreeMap::new();
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
            match apply_cluster(ctx, kc, &all, &brokers).await {
                Ok((view, by_policy, refused)) => {
                    reports = by_policy;
                    for r in reports.values_mut() {
                        for nc in &mut r.non_conforming {
                            if let Some(why) = refused.get(&nc.topic) {
                                nc.reason = format!("{}; the broker refused: {why}", nc.reason);
                            }
                        }
                    }
                    if kp.metadata.deletion_timestamp.is_some() {
                        outcome.not_restored =
                            not_yet_restored(kp, &view, &usable(&all, &ns, cluster));
                    }
                    if !refused.is_empty() {
                        ctx.events
                            .warning(
                                &kp.object_ref(&()),
                                "Apply",
                                "ConfigRefused",
                                format!(
                                    "the broker refused the policy configs of {} topics: {}",
                                    refused.len(),
                                    refused
                                        .iter()
                                        .take(3)
                                        .map(|(t, e)| format!("{t}: {e}"))
                                        .collect::<Vec<_>>()
                                        .join("; ")
                                ),
                            )
                            .await;
                    }
                }
                Err(e) => problem = Some(("KafkaError", e.to_string())),
            }
        }
    }
    for p in all
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let status = policy_status(p, reports.get(&p.name_any()), problem.clone(), &now);
        write_status(ctx, p, status).await?;
    }
    Ok(outcome)
}

/// Reads the cluster, applies the plan, reads it again. Returns the view
/// after the changes, each policy's report, and the broker's refusals
/// (topic → error).
async fn apply_cluster(
    ctx: &Context,
    kc: &KafkaCluster,
    all: &[KafkaRetentionPolicy],
    brokers: &[(i32, std::net::SocketAddr)],
) -> Result<(
    ClusterView,
    BTreeMap<String, PolicyReport>,
    BTreeMap<String, String>,
)> {
    let ns = kc
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let cluster = kc.name_any();
    let topics: Api<KafkaTopic> = Api::namespaced(ctx.client.clone(), &ns);
    let managed = managed_topics(&topics.list(&ListParams::default()).await?.items, &cluster);
    let records = read_records(ctx, &ns, &cluster).await?;
    let (mut admin, _) = connect_admin(ctx, kc, brokers).await?;
    let mut view = ClusterView {
        overrides: observe(&mut admin).await?,
        managed,
        records,
    };
    let policies = usable(all, &ns, &cluster);
    let p = plan(&view, &policies);
    if p.records_before != view.records {
        write_records(ctx, kc, &p.records_before).await?;
    }
    let mut refused = BTreeMap::new();
    for (topic, ops) in &p.alterations {
        match admin.alter_topic_config(topic, ops).await {
            Ok(()) => {}
            // e.g. a value the broker rejects, or the topic was deleted meanwhile
            Err(e @ KafkaError::Broker { .. }) => {
                refused.insert(topic.clone(), e.to_string());
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Kept as written before the changes when one was refused: a superset
    // is safe (see the plan's docs); pruned once all went through.
    let records = if refused.is_empty() {
        p.records_after.clone()
    } else {
        p.records_before.clone()
    };
    if records != p.records_before {
        write_records(ctx, kc, &records).await?;
    }
    if !p.alterations.is_empty() {
        let changed = p.alterations.len() - refused.len();
        if changed > 0 {
            ctx.events
                .normal(
                    &kc.object_ref(&()),
                    "Apply",
                    "RetentionPolicyApplied",
                    format!("retention policies changed the configs of {changed} topics"),
                )
                .await;
        }
        view.overrides = observe(&mut admin).await?;
    }
    view.records = records;
    let after = plan(&view, &policies);
    let reports = all
        .iter()
        .map(|p| p.name_any())
        .map(|name| {
            let r = report(&name, &after.resolved, &view);
            (name, r)
        })
        .collect();
    Ok((view, reports, refused))
}

/// Reconciles one KafkaRetentionPolicy (through the finalizer helper).
pub async fn reconcile(kp: Arc<KafkaRetentionPolicy>, ctx: Arc<Context>) -> Result<Action> {
    metered(&ctx, KIND, async {
        let api = namespaced_api(&ctx, kp.as_ref())?;
        let c = ctx.clone();
        finalized(&api, FINALIZER, kp, |event| async move {
            match event {
                FinalizerEvent::Apply(kp) => {
                    reconcile_cluster(&c, &kp).await?;
                    Ok(Action::requeue(c.tunables.topic_resync))
                }
                FinalizerEvent::Cleanup(kp) => {
                    let outcome = reconcile_cluster(&c, &kp).await?;
                    if !outcome.gone && !outcome.not_restored.is_empty() {
                        return Err(Error::Finalizer(format!(
                            "KafkaRetentionPolicy {}: {} topics not restored yet (e.g. {})",
                            kp.name_any(),
                            outcome.not_restored.len(),
                            outcome.not_restored[0]
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
pub fn error_policy(kp: Arc<KafkaRetentionPolicy>, err: &Error, ctx: Arc<Context>) -> Action {
    requeue_after_error(KIND, kp.as_ref(), err, &ctx)
}

/// The policies that reference cluster `kc`.
pub fn policies_of(
    policies: &[Arc<KafkaRetentionPolicy>],
    kc: &KafkaCluster,
) -> Vec<ObjectRef<KafkaRetentionPolicy>> {
    referencing(policies, kc, |p| &p.spec.cluster_ref)
}

/// The policies of the cluster of KafkaTopic `kt` (its labels take part
/// in matching).
pub fn policies_of_topic(
    policies: &[Arc<KafkaRetentionPolicy>],
    kt: &KafkaTopic,
) -> Vec<ObjectRef<KafkaRetentionPolicy>> {
    policies
        .iter()
        .filter(|p| p.namespace() == kt.namespace() && p.spec.cluster_ref == kt.spec.cluster_ref)
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// Runs the KafkaRetentionPolicy controller until the stream ends.
pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<KafkaRetentionPolicy> = ctx.watched_api(&namespace);
    let clusters: Api<KafkaCluster> = ctx.watched_api(&namespace);
    let topics: Api<KafkaTopic> = ctx.watched_api(&namespace);
    let controller = Controller::new(api, watcher::Config::default());
    let by_cluster = controller.store();
    let by_topic = controller.store();
    controller
        .watches(clusters, watcher::Config::default(), move |kc| {
            policies_of(&by_cluster.state(), &kc)
        })
        .watches(topics, watcher::Config::default(), move |kt| {
            policies_of_topic(&by_topic.state(), &kt)
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
    use crate::crd::NonConformingTopic;

    fn kp(spec: serde_json::Value) -> KafkaRetentionPolicy {
        let mut spec = spec;
        spec["clusterRef"] = "c".into();
        let mut p = KafkaRetentionPolicy::new("p", serde_json::from_value(spec).unwrap());
        p.metadata.generation = Some(2);
        p
    }

    fn valid() -> KafkaRetentionPolicy {
        kp(
            serde_json::json!({"selector": {"topicNames": ["logs-*"]}, "config": {"retention.ms": "1000"}}),
        )
    }

    #[test]
    fn conditions_follow_the_report() {
        let p = valid();
        let none = policy_status(&p, Some(&PolicyReport::default()), None, "t");
        assert_eq!(none.conditions[0].reason, "NoTopicMatched");
        assert!(
            none.conditions[0].is_true(),
            "matching nothing is not an error"
        );
        assert_eq!(none.observed_generation, Some(2));
        let bad = PolicyReport {
            matched: 3,
            conforming: 2,
            non_conforming: vec![NonConformingTopic {
                topic: "logs-a".into(),
                reason: "x".into(),
            }],
            ..Default::default()
        };
        let s = policy_status(&p, Some(&bad), None, "t");
        assert_eq!(s.conditions[0].reason, "NotConforming");
        assert!(!s.conditions[0].is_true());
        assert_eq!((s.matched_topics, s.conforming_topics), (3, 2));
        let good = PolicyReport {
            matched: 3,
            conforming: 3,
            conflict_count: 1,
            ..Default::default()
        };
        let s = policy_status(&p, Some(&good), None, "t");
        assert_eq!(s.conditions[0].reason, "Applied");
        assert_eq!(s.conditions[1].type_, "Conflicting");
    }

    #[test]
    fn invalid_policies_and_unreachable_clusters_say_why() {
        let unknown = kp(
            serde_json::json!({"selector": {"topicNames": ["*"]}, "config": {"retention.msx": "1"}}),
        );
        let s = policy_status(&unknown, Some(&PolicyReport::default()), None, "t");
        assert_eq!(s.conditions[0].reason, "InvalidPolicy");
        assert!(s.conditions[0].message.contains("retention.msx"));
        let below = kp(
            serde_json::json!({"selector": {"topicNames": ["*"]}, "mode": "enforce",
            "config": {"retention.ms": "10"}, "bounds": {"retention.ms": {"min": 3600000}}}),
        );
        let s = policy_status(&below, None, None, "t");
        assert_eq!(s.conditions[0].reason, "InvalidPolicy");
        assert!(
            s.conditions[0].message.contains("below the floor"),
            "{}",
            s.conditions[0].message
        );
        let mut p = valid();
        p.status = Some(KafkaRetentionPolicyStatus {
            matched_topics: 4,
            conforming_topics: 4,
            ..Default::default()
        });
        let s = policy_status(&p, None, Some(("NoBrokerReady", "none".into())), "t");
        assert_eq!(s.conditions[0].reason, "NoBrokerReady");
        assert_eq!(
            s.matched_topics, 4,
            "the last counts stay while the cluster cannot be read"
        );
    }

    #[test]
    fn managed_topics_are_keyed_by_kafka_name() {
        let mut kt = KafkaTopic::new(
            "k8s-name",
            serde_json::from_value(serde_json::json!({
                "clusterRef": "c", "topicName": "logs.app", "partitions": 1,
                "config": {"retention.ms": "5"}
            }))
            .unwrap(),
        );
        kt.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
        let other = KafkaTopic::new(
            "x",
            serde_json::from_value(serde_json::json!({"clusterRef": "d", "partitions": 1}))
                .unwrap(),
        );
        let m = managed_topics(&[kt, other], "c");
        assert_eq!(m.len(), 1);
        assert_eq!(m["logs.app"].labels["team"], "a");
        assert_eq!(m["logs.app"].spec_config["retention.ms"], "5");
    }
}
