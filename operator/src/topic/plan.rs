//! The topic planner: from a `KafkaTopic` spec and the topic as Kafka reports
//! it, the admin actions that bring Kafka back to the spec, and the problems
//! that make the spec impossible to honour. Pure; the controller executes.
//!
//! A spec without `replicationFactor` gets the cluster's
//! `default.replication.factor` ([`default_replication_factor`]), resolved
//! here so that the broker-count check and the Event name the real factor;
//! such a spec accepts whatever factor the topic has afterwards.
//! Partitions only grow; a replication factor change is reported, not done
//! (it needs a reassignment, a later resource); topic-level config overrides
//! that are not in the spec are removed, so drift made behind the operator's
//! back is undone on the next reconcile — except the two throttled-replica
//! lists ([`REASSIGNMENT_CONFIGS`]): they belong to whoever moves the
//! topic's partitions (a `KafkaRebalance`, `kafka-reassign-partitions
//! --throttle`), are never removed here, and `spec.config` may not set them.

use std::collections::BTreeMap;

use crate::cluster::status::Problem;
use crate::cluster::validate::bad_config_names;
use crate::crd::KafkaTopicSpec;
use crate::kafka::admin::SOURCE_TOPIC_CONFIG;
use crate::kafka::{reassign, ConfigEntry, ConfigOp, OngoingReassignment, TopicMetadata};

/// The topic as Kafka reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObservedTopic {
    /// Topic id.
    pub topic_id: Option<String>,
    /// Partition count.
    pub partitions: i32,
    /// Replication factor: the replicas each partition ends with, not the
    /// transient set of a partition being moved (see [`ObservedTopic::from_kafka`]).
    pub replication_factor: i32,
    /// Topic-level config overrides (DescribeConfigs source = topic).
    pub overrides: BTreeMap<String, String>,
    /// Every non-sensitive config value (the effective config).
    pub effective: BTreeMap<String, String>,
    /// Replicas of each partition (partition → broker ids).
    pub replicas: BTreeMap<i32, Vec<i32>>,
}

impl ObservedTopic {
    /// The topic from Kafka's answers: its Metadata, the reassignments the
    /// controller runs (ListPartitionReassignments) and its DescribeConfigs
    /// entries. The replication factor counts each partition's target
    /// replicas (replicas minus those being removed, as Kafka's tools do):
    /// while a partition moves, Metadata lists the replicas being added and
    /// those being removed together, which is no factor anybody asked for.
    /// `replicas` keeps the lists as Metadata reports them.
    pub fn from_kafka(
        t: &TopicMetadata,
        ongoing: &[OngoingReassignment],
        entries: Vec<ConfigEntry>,
    ) -> Self {
        let mut observed = ObservedTopic {
            topic_id: t.topic_id.clone(),
            partitions: t.partitions,
            replication_factor: reassign::topic_replication_factor(t, ongoing),
            replicas: t
                .partition_details
                .iter()
                .map(|p| (p.partition, p.replicas.clone()))
                .collect(),
            ..Default::default()
        };
        for e in entries {
            let Some(value) = e.value else { continue };
            if e.source == SOURCE_TOPIC_CONFIG {
                observed.overrides.insert(e.name.clone(), value.clone());
            }
            observed.effective.insert(e.name, value);
        }
        observed
    }
}

/// One admin action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopicAction {
    /// CreateTopics.
    Create {
        /// Partitions.
        partitions: i32,
        /// Replication factor.
        replication_factor: i16,
        /// Topic config.
        config: BTreeMap<String, String>,
    },
    /// CreatePartitions up to this total.
    GrowPartitions(i32),
    /// IncrementalAlterConfigs.
    AlterConfig(Vec<ConfigOp>),
}

/// Actions to run and problems to report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicPlan {
    /// Admin actions, in order.
    pub actions: Vec<TopicAction>,
    /// Parts of the spec that cannot be honoured.
    pub problems: Vec<Problem>,
}

fn problem(reason: &str, message: String) -> Problem {
    Problem {
        reason: reason.into(),
        message,
    }
}

/// The broker count a replication factor is checked against: the brokers
/// registered (unfenced) in the controller's cluster record when there is
/// one, else the brokers the Metadata response lists (a broker that is its
/// own one-broker cluster lists only itself). Ready pods never count.
pub fn broker_count(registered: Option<usize>, metadata_brokers: usize) -> usize {
    registered.unwrap_or(metadata_brokers)
}

/// Kafka's default of `default.replication.factor`.
pub const KAFKA_DEFAULT_REPLICATION_FACTOR: i32 = 1;

/// The replication factor of a topic whose spec gives none: the cluster's
/// `default.replication.factor` (the KafkaCluster's `spec.config`, which is
/// the brokers' config), else Kafka's default. A value that is not a
/// positive number counts as unset (the broker would not start with it).
pub fn default_replication_factor(cluster_config: &BTreeMap<String, String>) -> i32 {
    cluster_config
        .get("default.replication.factor")
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|rf| *rf >= 1)
        .unwrap_or(KAFKA_DEFAULT_REPLICATION_FACTOR)
}

/// Topic configs owned by partition reassignments, not by the KafkaTopic.
pub const REASSIGNMENT_CONFIGS: &[&str] = &[
    crate::rebalance::throttle::LEADER_REPLICAS,
    crate::rebalance::throttle::FOLLOWER_REPLICAS,
];

/// Plans the actions for `spec` given the observed topic (None = absent),
/// the number of live brokers (see [`broker_count`]) and the cluster's
/// default replication factor (see [`default_replication_factor`]).
pub fn plan(
    spec: &KafkaTopicSpec,
    observed: Option<&ObservedTopic>,
    brokers: usize,
    default_rf: i32,
) -> TopicPlan {
    let mut out = TopicPlan::default();
    let bad = bad_config_names(&spec.config);
    if !bad.is_empty() {
        out.problems.push(problem(
            "InvalidConfig",
            format!(
                "spec.config keys are not Kafka config names: {}",
                bad.join(", ")
            ),
        ));
        return out;
    }
    let reserved: Vec<&str> = REASSIGNMENT_CONFIGS
        .iter()
        .copied()
        .filter(|k| spec.config.contains_key(*k))
        .collect();
    if !reserved.is_empty() {
        out.problems.push(problem(
            "ReservedConfig",
            format!(
                "spec.config may not set {}: partition reassignments set them (KafkaRebalance throttleBytesPerSecond)",
                reserved.join(", ")
            ),
        ));
        return out;
    }
    let Some(observed) = observed else {
        let rf = spec.replication_factor.unwrap_or(default_rf);
        if rf < 1 || rf as usize > brokers {
            let source = if spec.replication_factor.is_some() {
                "replicationFactor"
            } else {
                "the cluster's default.replication.factor"
            };
            out.problems.push(problem(
                "ReplicationFactorTooHigh",
                format!("{source} {rf} needs {rf} brokers; the cluster has {brokers}"),
            ));
        } else if spec.partitions < 1 {
            out.problems.push(problem(
                "InvalidPartitions",
                format!("partitions {} < 1", spec.partitions),
            ));
        } else {
            out.actions.push(TopicAction::Create {
                partitions: spec.partitions,
                replication_factor: rf as i16,
                config: spec.config.clone(),
            });
        }
        return out;
    };

    if spec.partitions < observed.partitions {
        out.problems.push(problem(
            "PartitionDecreaseNotAllowed",
            format!(
                "spec.partitions is {} but the topic has {} partitions; partitions cannot be removed",
                spec.partitions, observed.partitions
            ),
        ));
    } else if spec.partitions > observed.partitions {
        out.actions
            .push(TopicAction::GrowPartitions(spec.partitions));
    }

    match spec.replication_factor {
        Some(rf) if observed.replication_factor > 0 && rf != observed.replication_factor => {
            out.problems.push(problem(
                "ReplicationFactorChangeUnsupported",
                format!(
                    "spec.replicationFactor is {rf} but the topic has {}; changing it is not supported yet",
                    observed.replication_factor
                ),
            ));
        }
        _ => {}
    }

    let mut ops: Vec<ConfigOp> = spec
        .config
        .iter()
        .filter(|(k, v)| observed.overrides.get(*k) != Some(*v))
        .map(|(k, v)| ConfigOp::Set(k.clone(), v.clone()))
        .collect();
    ops.extend(
        observed
            .overrides
            .keys()
            .filter(|k| !spec.config.contains_key(*k))
            .filter(|k| !REASSIGNMENT_CONFIGS.contains(&k.as_str()))
            .map(|k| ConfigOp::Delete(k.clone())),
    );
    if !ops.is_empty() {
        out.actions.push(TopicAction::AlterConfig(ops));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::DeletionPolicy;

    fn spec(partitions: i32, rf: i32, config: &[(&str, &str)]) -> KafkaTopicSpec {
        KafkaTopicSpec {
            cluster_ref: "c".into(),
            topic_name: None,
            partitions,
            replication_factor: Some(rf),
            config: config
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            deletion_policy: DeletionPolicy::Delete,
        }
    }

    fn observed(partitions: i32, rf: i32, overrides: &[(&str, &str)]) -> ObservedTopic {
        ObservedTopic {
            topic_id: Some("id".into()),
            partitions,
            replication_factor: rf,
            overrides: overrides
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            effective: BTreeMap::new(),
            replicas: BTreeMap::new(),
        }
    }

    #[test]
    fn absent_topic_is_created() {
        let p = plan(&spec(3, 1, &[("retention.ms", "1000")]), None, 1, 1);
        assert!(p.problems.is_empty());
        assert_eq!(
            p.actions,
            vec![TopicAction::Create {
                partitions: 3,
                replication_factor: 1,
                config: BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
            }]
        );
    }

    #[test]
    fn replication_factor_above_broker_count_is_a_problem() {
        let p = plan(&spec(3, 3, &[]), None, 1, 1);
        assert!(p.actions.is_empty());
        assert_eq!(p.problems[0].reason, "ReplicationFactorTooHigh");
        assert!(p.problems[0].message.contains("has 1"));
    }

    #[test]
    fn registered_brokers_decide_the_replication_factor() {
        // 3 Ready pods that are 3 one-broker clusters: no record, Metadata says 1.
        let n = broker_count(None, 1);
        let p = plan(&spec(3, 3, &[]), None, n, 1);
        assert_eq!(p.problems[0].reason, "ReplicationFactorTooHigh");
        // The record has 2 registered unfenced brokers: RF 3 still refused,
        // whatever one broker's Metadata says.
        let p = plan(&spec(3, 3, &[]), None, broker_count(Some(2), 3), 1);
        assert_eq!(p.problems[0].reason, "ReplicationFactorTooHigh");
        assert!(p.problems[0].message.contains("has 2"));
        // 3 registered: accepted.
        let p = plan(&spec(3, 3, &[]), None, broker_count(Some(3), 1), 1);
        assert!(p.problems.is_empty());
        assert!(matches!(
            p.actions[0],
            TopicAction::Create {
                replication_factor: 3,
                ..
            }
        ));
        // A record with nobody registered refuses even RF 1.
        let p = plan(&spec(1, 1, &[]), None, broker_count(Some(0), 1), 1);
        assert_eq!(p.problems[0].reason, "ReplicationFactorTooHigh");
    }

    #[test]
    fn in_sync_topic_needs_nothing() {
        let p = plan(
            &spec(3, 1, &[("a", "1")]),
            Some(&observed(3, 1, &[("a", "1")])),
            1,
            1,
        );
        assert_eq!(p, TopicPlan::default());
    }

    #[test]
    fn partitions_grow_but_never_shrink() {
        let p = plan(&spec(5, 1, &[]), Some(&observed(3, 1, &[])), 1, 1);
        assert_eq!(p.actions, vec![TopicAction::GrowPartitions(5)]);
        let p = plan(&spec(2, 1, &[]), Some(&observed(3, 1, &[])), 1, 1);
        assert!(p.actions.is_empty());
        assert_eq!(p.problems[0].reason, "PartitionDecreaseNotAllowed");
    }

    #[test]
    fn config_drift_is_undone() {
        let p = plan(
            &spec(
                1,
                1,
                &[("retention.ms", "1000"), ("cleanup.policy", "compact")],
            ),
            Some(&observed(
                1,
                1,
                &[("retention.ms", "5"), ("segment.bytes", "1")],
            )),
            1,
            1,
        );
        assert_eq!(
            p.actions,
            vec![TopicAction::AlterConfig(vec![
                ConfigOp::Set("cleanup.policy".into(), "compact".into()),
                ConfigOp::Set("retention.ms".into(), "1000".into()),
                ConfigOp::Delete("segment.bytes".into()),
            ])]
        );
    }

    #[test]
    fn replication_factor_change_is_reported_not_done() {
        let p = plan(&spec(1, 2, &[]), Some(&observed(1, 1, &[])), 3, 1);
        assert!(p.actions.is_empty());
        assert_eq!(p.problems[0].reason, "ReplicationFactorChangeUnsupported");
    }

    #[test]
    fn a_topic_being_moved_keeps_its_replication_factor() {
        use crate::kafka::PartitionInfo;
        // RF 3, partition 0 moving {0,1,2} -> {1,2,3}: Metadata lists
        // [1,2,3,0] until broker 3 is in sync and broker 0 is removed.
        let part = |partition, replicas: &[i32]| PartitionInfo {
            partition,
            leader: replicas[0],
            replicas: replicas.to_vec(),
            isr: replicas.to_vec(),
        };
        let meta = TopicMetadata {
            name: "t".into(),
            topic_id: Some("id".into()),
            partitions: 2,
            replication_factor: 4,
            partition_details: vec![part(0, &[1, 2, 3, 0]), part(1, &[0, 1, 2])],
        };
        let moving = OngoingReassignment {
            topic: "t".into(),
            partition: 0,
            replicas: vec![1, 2, 3, 0],
            adding: vec![3],
            removing: vec![0],
        };
        let entries = vec![ConfigEntry {
            name: "retention.ms".into(),
            value: Some("5".into()),
            source: SOURCE_TOPIC_CONFIG,
            sensitive: false,
        }];
        let o = ObservedTopic::from_kafka(&meta, &[moving], entries);
        assert_eq!(o.replication_factor, 3);
        assert_eq!(o.replicas[&0], vec![1, 2, 3, 0], "replicas as reported");
        assert_eq!(o.overrides["retention.ms"], "5");
        let p = plan(&spec(2, 3, &[("retention.ms", "5")]), Some(&o), 4, 1);
        assert_eq!(p, TopicPlan::default(), "no false factor change");
        // a real difference is still reported
        let p = plan(&spec(2, 2, &[("retention.ms", "5")]), Some(&o), 4, 1);
        assert_eq!(p.problems[0].reason, "ReplicationFactorChangeUnsupported");
        assert!(p.problems[0].message.contains("the topic has 3"));
    }

    #[test]
    fn cluster_default_replication_factor() {
        let config =
            |v: &str| BTreeMap::from([("default.replication.factor".to_string(), v.to_string())]);
        assert_eq!(default_replication_factor(&BTreeMap::new()), 1);
        assert_eq!(default_replication_factor(&config("3")), 3);
        assert_eq!(default_replication_factor(&config(" 2 ")), 2);
        assert_eq!(default_replication_factor(&config("0")), 1);
        assert_eq!(default_replication_factor(&config("three")), 1);
    }

    #[test]
    fn no_replication_factor_takes_the_cluster_default() {
        let mut s = spec(3, 1, &[]);
        s.replication_factor = None;
        let p = plan(&s, None, 3, 3);
        assert!(p.problems.is_empty(), "{p:?}");
        assert_eq!(
            p.actions,
            vec![TopicAction::Create {
                partitions: 3,
                replication_factor: 3,
                config: BTreeMap::new(),
            }]
        );
        // Too few brokers for the default: said so, with where the factor came from.
        let p = plan(&s, None, 2, 3);
        assert!(p.actions.is_empty());
        assert_eq!(p.problems[0].reason, "ReplicationFactorTooHigh");
        assert!(
            p.problems[0]
                .message
                .contains("default.replication.factor 3"),
            "{}",
            p.problems[0].message
        );
        // An existing topic: whatever factor it has is accepted.
        let p = plan(&s, Some(&observed(3, 2, &[])), 3, 3);
        assert_eq!(p, TopicPlan::default());
    }

    #[test]
    fn bad_config_keys_stop_everything() {
        let p = plan(&spec(1, 1, &[("Not A Key", "1")]), None, 1, 1);
        assert!(p.actions.is_empty());
        assert_eq!(p.problems[0].reason, "InvalidConfig");
    }

    #[test]
    fn reassignment_throttles_are_left_to_reassignments() {
        let o = observed(
            3,
            2,
            &[
                ("retention.ms", "5"),
                ("leader.replication.throttled.replicas", "0:1"),
                ("follower.replication.throttled.replicas", "0:2"),
            ],
        );
        let p = plan(&spec(3, 2, &[]), Some(&o), 3, 1);
        assert_eq!(
            p.actions,
            vec![TopicAction::AlterConfig(vec![ConfigOp::Delete(
                "retention.ms".into()
            )])]
        );
        let p = plan(
            &spec(3, 2, &[("follower.replication.throttled.replicas", "*")]),
            Some(&o),
            3,
            1,
        );
        assert!(p.actions.is_empty());
        assert_eq!(p.problems[0].reason, "ReservedConfig");
    }
}
