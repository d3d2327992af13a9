//! Pure status logic of a `KafkaTopic`: `Ready` and `Degraded` conditions plus
//! the observed partitions, replication factor, topic id and effective config.

use crate::cluster::status::Problem;
use crate::crd::{merge_conditions, Condition, KafkaTopicStatus};

use super::plan::ObservedTopic;

/// Computes the status after a reconcile. `observed` is the topic as Kafka
/// reports it after the actions ran (None when absent or unreachable);
/// `problems` are the reasons the spec is not (fully) honoured.
pub fn topic_status(
    old: Option<&KafkaTopicStatus>,
    generation: Option<i64>,
    topic_name: &str,
    observed: Option<&ObservedTopic>,
    problems: &[Problem],
    now: &str,
) -> KafkaTopicStatus {
    let (ready, degraded) = match (problems.first(), observed) {
        (Some(p), observed) => {
            let all = problems
                .iter()
                .map(|p| p.message.as_str())
                .collect::<Vec<_>>()
                .join("; ");
            let ready = match observed {
                // The topic is usable; the spec is what cannot be honoured.
                Some(_) => Condition::new(
                    "Ready",
                    true,
                    "TopicExists",
                    "the topic exists but differs from the spec; see Degraded",
                ),
                None => Condition::new("Ready", false, &p.reason, p.message.clone()),
            };
            (ready, Condition::new("Degraded", true, &p.reason, all))
        }
        (None, Some(_)) => (
            Condition::new(
                "Ready",
                true,
                "TopicInSync",
                format!("topic {topic_name} matches the spec"),
            ),
            Condition::new("Degraded", false, "AsExpected", "reconciled without errors"),
        ),
        (None, None) => (
            Condition::new(
                "Ready",
                false,
                "TopicPending",
                format!("topic {topic_name} does not exist yet"),
            ),
            Condition::new("Degraded", false, "AsExpected", "reconciled without errors"),
        ),
    };
    let old_conditions = old.map(|s| s.conditions.as_slice()).unwrap_or(&[]);
    // Keep the last known facts when Kafka could not be asked this time.
    let keep = |f: fn(&KafkaTopicStatus) -> Option<String>| old.and_then(f);
    KafkaTopicStatus {
        conditions: merge_conditions(old_conditions, vec![ready, degraded], generation, now),
        observed_generation: generation,
        topic_name: Some(topic_name.to_string()),
        topic_id: observed
            .and_then(|o| o.topic_id.clone())
            .or_else(|| keep(|s| s.topic_id.clone())),
        partitions: observed
            .map(|o| o.partitions)
            .or_else(|| old.and_then(|s| s.partitions)),
        replication_factor: observed
            .map(|o| o.replication_factor)
            .or_else(|| old.and_then(|s| s.replication_factor)),
        config: observed
            .map(|o| o.effective.clone())
            .or_else(|| old.map(|s| s.config.clone()))
            .unwrap_or_default(),
        // Set by the controller from `super::reassignment`.
        reassignment: None,
        // Set by the controller from the retention policies' resolution.
        policy_config: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::find_condition;
    use std::collections::BTreeMap;

    fn obs() -> ObservedTopic {
        ObservedTopic {
            topic_id: Some("abc".into()),
            partitions: 3,
            replication_factor: 1,
            overrides: BTreeMap::new(),
            effective: BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
            replicas: BTreeMap::new(),
        }
    }

    #[test]
    fn in_sync() {
        let s = topic_status(None, Some(2), "orders", Some(&obs()), &[], "t0");
        let ready = find_condition(&s.conditions, "Ready").unwrap();
        assert!(ready.is_true());
        assert_eq!(ready.reason, "TopicInSync");
        assert_eq!(s.topic_id.as_deref(), Some("abc"));
        assert_eq!(s.partitions, Some(3));
        assert_eq!(s.config["retention.ms"], "1000");
        assert_eq!(s.observed_generation, Some(2));
    }

    #[test]
    fn existing_topic_with_unhonoured_spec_is_ready_and_degraded() {
        let p = Problem {
            reason: "PartitionDecreaseNotAllowed".into(),
            message: "cannot shrink".into(),
        };
        let s = topic_status(None, Some(3), "orders", Some(&obs()), &[p], "t0");
        let ready = find_condition(&s.conditions, "Ready").unwrap();
        assert!(ready.is_true());
        assert_eq!(ready.reason, "TopicExists");
        let degraded = find_condition(&s.conditions, "Degraded").unwrap();
        assert_eq!(degraded.reason, "PartitionDecreaseNotAllowed");
        assert_eq!(s.partitions, Some(3));
    }

    #[test]
    fn problem_without_topic() {
        let p = Problem {
            reason: "ClusterNotFound".into(),
            message: "no KafkaCluster x".into(),
        };
        let s = topic_status(None, Some(1), "orders", None, &[p], "t0");
        let ready = find_condition(&s.conditions, "Ready").unwrap();
        assert!(!ready.is_true());
        assert_eq!(ready.reason, "ClusterNotFound");
        let degraded = find_condition(&s.conditions, "Degraded").unwrap();
        assert!(degraded.is_true());
        assert_eq!(degraded.message, "no KafkaCluster x");
    }

    #[test]
    fn problem_with_existing_topic_keeps_facts() {
        let old = topic_status(None, Some(1), "orders", Some(&obs()), &[], "t0");
        let p = Problem {
            reason: "KafkaUnavailable".into(),
            message: "timeout".into(),
        };
        let s = topic_status(Some(&old), Some(2), "orders", None, &[p], "t1");
        assert_eq!(s.topic_id.as_deref(), Some("abc"));
        assert_eq!(s.partitions, Some(3));
        assert!(find_condition(&s.conditions, "Degraded").unwrap().is_true());
    }
}
