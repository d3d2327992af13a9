//! Pure status logic of a `KafkaTopic`: `Ready` and `Degraded` conditions plus
//! the observed partitions, replication factor, topic id and effective config,
//! and the Warning Event a refusal deserves ([`problem_event`]).

use crate::cluster::status::Problem;
use crate::crd::{find_condition, merge_conditions, Condition, KafkaTopicStatus};
use crate::events::EventSpec;

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

/// The Warning Event of a `Degraded=True` status: whenever its reason or
/// its message differs from the old status's, so every distinct refusal is
/// told (a second bad spec with the same reason too), and a refusal that
/// stays the same is told once.
pub fn problem_event(old: Option<&KafkaTopicStatus>, new: &KafkaTopicStatus) -> Option<EventSpec> {
    let now = find_condition(&new.conditions, "Degraded").filter(|c| c.is_true())?;
    let was = old
        .and_then(|s| find_condition(&s.conditions, "Degraded"))
        .filter(|c| c.is_true());
    if was.is_some_and(|w| w.reason == now.reason && w.message == now.message) {
        return None;
    }
    Some(EventSpec {
        warning: true,
        reason: now.reason.clone(),
        note: now.message.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn every_distinct_refusal_is_an_event_once() {
        let problem = |reason: &str, message: &str| Problem {
            reason: reason.into(),
            message: message.into(),
        };
        let ok = topic_status(None, Some(1), "orders", Some(&obs()), &[], "t0");
        assert_eq!(problem_event(None, &ok), None);
        let first = [problem("InvalidConfig", "spec.config keys: A")];
        let s1 = topic_status(Some(&ok), Some(2), "orders", Some(&obs()), &first, "t1");
        let e = problem_event(Some(&ok), &s1).expect("first refusal");
        assert!(e.warning);
        assert_eq!(
            (e.reason.as_str(), e.note.as_str()),
            ("InvalidConfig", "spec.config keys: A")
        );
        // the same refusal again: no repeat
        let again = topic_status(Some(&s1), Some(2), "orders", Some(&obs()), &first, "t2");
        assert_eq!(problem_event(Some(&s1), &again), None);
        // another refusal with the same reason: its own Event
        let second = [problem("InvalidConfig", "spec.config keys: B")];
        let s2 = topic_status(Some(&s1), Some(3), "orders", Some(&obs()), &second, "t3");
        let e = problem_event(Some(&s1), &s2).expect("a second, different refusal");
        assert_eq!(e.note, "spec.config keys: B");
        // a new reason too
        let third = [problem("ReplicationFactorChangeUnsupported", "x")];
        let s3 = topic_status(Some(&s2), Some(4), "orders", Some(&obs()), &third, "t4");
        assert_eq!(
            problem_event(Some(&s2), &s3).unwrap().reason,
            "ReplicationFactorChangeUnsupported"
        );
        // back in sync: nothing
        let s4 = topic_status(Some(&s3), Some(5), "orders", Some(&obs()), &[], "t5");
        assert_eq!(problem_event(Some(&s3), &s4), None);
    }
}
