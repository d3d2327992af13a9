//! The pure planner of the retention-policy edge: from the topics of one
//! cluster as the broker reports them, the `KafkaTopic`s that manage some of
//! them, the policy edge's records of what it changed, and the policies,
//! the config changes for the topics it owns, the records to keep, and each
//! policy's report.
//!
//! Ownership (see [`super::resolve`]): topics managed by a `KafkaTopic` are
//! written by the KafkaTopic reconciler (it applies the same resolution to
//! its `spec.config`); here they are only checked. Topics without one are
//! written here, through IncrementalAlterConfigs, and every key a policy
//! sets on them is recorded with its previous value, so that a policy that
//! goes (or stops matching) gives the topic back its own value.
//!
//! Crash safety: the records are written before the changes
//! ([`ClusterPlan::records_before`]: what is about to be set, plus what is
//! about to be restored) and pruned after them
//! ([`ClusterPlan::records_after`]); a crash in between leaves a record too
//! many, never a policy value taken for the topic's own.

use std::collections::{BTreeMap, BTreeSet};

use crate::crd::{KafkaRetentionPolicy, NonConformingTopic, PolicyConflict};
use crate::kafka::ConfigOp;

use super::resolve::{
    mismatches, own_config, records_for, resolve, ConfigRecord, Resolved, TopicFacts,
};

/// Entries listed at most in a policy's status (the counts are exact).
pub const MAX_LISTED: usize = 50;

/// A topic managed by a `KafkaTopic`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ManagedTopic {
    /// The KafkaTopic's labels.
    pub labels: BTreeMap<String, String>,
    /// Its `spec.config`: the topic's own settings.
    pub spec_config: BTreeMap<String, String>,
}

/// One cluster as the policy edge sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterView {
    /// Every non-internal topic → its topic-level overrides.
    pub overrides: BTreeMap<String, BTreeMap<String, String>>,
    /// Topics managed by a KafkaTopic, by Kafka topic name.
    pub managed: BTreeMap<String, ManagedTopic>,
    /// What the policy edge changed on unmanaged topics.
    pub records: Vec<ConfigRecord>,
}

impl ClusterView {
    /// The facts the resolution needs about `topic`.
    pub fn facts(&self, topic: &str) -> TopicFacts {
        match self.managed.get(topic) {
            Some(m) => TopicFacts {
                name: topic.to_string(),
                labels: Some(m.labels.clone()),
                own: m.spec_config.clone(),
            },
            None => TopicFacts {
                name: topic.to_string(),
                labels: None,
                own: own_config(
                    topic,
                    self.overrides.get(topic).unwrap_or(&BTreeMap::new()),
                    &self.records,
                ),
            },
        }
    }
}

/// What to do to one cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterPlan {
    /// Config changes of unmanaged topics.
    pub alterations: Vec<(String, Vec<ConfigOp>)>,
    /// Records to store before the alterations.
    pub records_before: Vec<ConfigRecord>,
    /// Records to store once every alteration succeeded.
    pub records_after: Vec<ConfigRecord>,
    /// Each topic's resolution.
    pub resolved: BTreeMap<String, Resolved>,
}

/// The changes that bring `actual` to `resolved` on `keys`.
fn ops_for(
    keys: &BTreeSet<String>,
    resolved: &Resolved,
    actual: &BTreeMap<String, String>,
) -> Vec<ConfigOp> {
    keys.iter()
        .filter(|k| actual.get(*k) != resolved.config.get(*k))
        .map(|k| match resolved.config.get(k) {
            Some(v) => ConfigOp::Set(k.clone(), v.clone()),
            None => ConfigOp::Delete(k.clone()),
        })
        .collect()
}

/// Plans `view` against `policies` (the usable ones: see
/// [`super::usable`]).
pub fn plan(view: &ClusterView, policies: &[&KafkaRetentionPolicy]) -> ClusterPlan {
    let mut out = ClusterPlan::default();
    let empty = BTreeMap::new();
    for topic in view.overrides.keys() {
        let facts = view.facts(topic);
        let resolved = resolve(&facts, policies);
        if !view.managed.contains_key(topic) {
            let actual = view.overrides.get(topic).unwrap_or(&empty);
            let recorded: BTreeSet<String> = view
                .records
                .iter()
                .filter(|r| &r.topic == topic)
                .map(|r| r.key.clone())
                .collect();
            let keys: BTreeSet<String> = resolved
                .governed_by
                .keys()
                .cloned()
                .chain(recorded.iter().cloned())
                .collect();
            let ops = ops_for(&keys, &resolved, actual);
            let kept = records_for(topic, &facts.own, &resolved, &view.records);
            // before: everything kept, and the records of keys being restored
            let restoring = view.records.iter().filter(|r| {
                &r.topic == topic
                    && !kept.iter().any(|k| k.key == r.key)
                    && ops.iter().any(|op| op_key(op) == r.key)
            });
            out.records_before.extend(kept.iter().cloned());
            out.records_before.extend(restoring.cloned());
            out.records_after.extend(kept);
            if !ops.is_empty() {
                out.alterations.push((topic.clone(), ops));
            }
        }
        out.resolved.insert(topic.clone(), resolved);
    }
    out
}

fn op_key(op: &ConfigOp) -> &str {
    match op {
        ConfigOp::Set(k, _) | ConfigOp::Delete(k) => k,
    }
}

/// Why `topic` does not carry what `policy` governs of it, or None.
fn mismatch(
    policy: &str,
    resolved: &Resolved,
    actual: &BTreeMap<String, String>,
    managed: bool,
) -> Option<String> {
    let bad = mismatches(resolved, actual, Some(policy));
    if bad.is_empty() {
        return None;
    }
    let who = if managed {
        "; its KafkaTopic reconciler applies it"
    } else {
        ""
    };
    Some(format!("{}{who}", bad.join("; ")))
}

/// One policy's report over a cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicyReport {
    /// Topics the policy matches.
    pub matched: usize,
    /// Of those, topics whose keys it governs are as resolved.
    pub conforming: usize,
    /// The others (at most [`MAX_LISTED`]).
    pub non_conforming: Vec<NonConformingTopic>,
    /// Keys it lost to another policy (at most [`MAX_LISTED`]).
    pub conflicts: Vec<PolicyConflict>,
    /// Total conflicts (the list may be cut).
    pub conflict_count: usize,
}

/// The report of `policy` from the resolutions and the overrides the broker
/// reports (read after the alterations).
pub fn report(
    policy: &str,
    resolved: &BTreeMap<String, Resolved>,
    view: &ClusterView,
) -> PolicyReport {
    let mut out = PolicyReport::default();
    let empty = BTreeMap::new();
    for (topic, r) in resolved {
        if !r.matched_by.iter().any(|p| p == policy) {
            continue;
        }
        out.matched += 1;
        let actual = view.overrides.get(topic).unwrap_or(&empty);
        match mismatch(policy, r, actual, view.managed.contains_key(topic)) {
            None => out.conforming += 1,
            Some(reason) if out.non_conforming.len() < MAX_LISTED => {
                out.non_conforming.push(NonConformingTopic {
                    topic: topic.clone(),
                    reason,
                })
            }
            Some(_) => {}
        }
        for c in r.conflicts.iter().filter(|c| c.policy == policy) {
            out.conflict_count += 1;
            if out.conflicts.len() < MAX_LISTED {
                out.conflicts.push(PolicyConflict {
                    topic: topic.clone(),
                    key: c.key.clone(),
                    winner: c.winner.clone(),
                });
            }
        }
    }
    out
}

/// The topics `deleting` matched that do not yet carry their resolution
/// without it on the keys it governed (`others`: the remaining usable
/// policies). Empty: its finalizer may go.
pub fn not_yet_restored(
    deleting: &KafkaRetentionPolicy,
    view: &ClusterView,
    others: &[&KafkaRetentionPolicy],
) -> Vec<String> {
    let keys: BTreeSet<&String> = deleting
        .spec
        .config
        .keys()
        .chain(deleting.spec.bounds.keys())
        .collect();
    let empty = BTreeMap::new();
    view.overrides
        .keys()
        .filter(|t| super::resolve::matches(deleting, &view.facts(t)))
        .filter(|t| {
            let resolved = resolve(&view.facts(t), others);
            let actual = view.overrides.get(*t).unwrap_or(&empty);
            keys.iter()
                .any(|k| actual.get(*k) != resolved.config.get(*k))
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::resolve::test_support::{map, policy};
    use super::*;

    fn week() -> KafkaRetentionPolicy {
        policy(
            "week",
            serde_json::json!({"selector": {"topicNames": ["logs-*"]}, "mode": "enforce",
                "config": {"retention.ms": "604800000"}}),
        )
    }

    fn view(topics: &[(&str, &[(&str, &str)])]) -> ClusterView {
        ClusterView {
            overrides: topics
                .iter()
                .map(|(t, o)| (t.to_string(), map(o)))
                .collect(),
            ..Default::default()
        }
    }

    /// Applies a plan's alterations to the view, as the broker would.
    fn apply(view: &mut ClusterView, p: &ClusterPlan) {
        for (t, ops) in &p.alterations {
            let o = view.overrides.entry(t.clone()).or_default();
            for op in ops {
                match op {
                    ConfigOp::Set(k, v) => o.insert(k.clone(), v.clone()),
                    ConfigOp::Delete(k) => o.remove(k),
                };
            }
        }
        view.records = p.records_after.clone();
    }

    #[test]
    fn unmanaged_topics_are_set_recorded_and_restored() {
        let p = week();
        let mut v = view(&[
            ("logs-a", &[]),
            (
                "logs-b",
                &[("retention.ms", "1000"), ("segment.bytes", "1048576")],
            ),
            ("orders", &[("retention.ms", "5")]),
        ]);
        let first = plan(&v, &[&p]);
        assert_eq!(
            first.alterations,
            vec![
                (
                    "logs-a".into(),
                    vec![ConfigOp::Set("retention.ms".into(), "604800000".into())]
                ),
                (
                    "logs-b".into(),
                    vec![ConfigOp::Set("retention.ms".into(), "604800000".into())]
                ),
            ]
        );
        assert_eq!(first.records_before, first.records_after);
        assert_eq!(
            first.records_after,
            vec![
                ConfigRecord {
                    topic: "logs-a".into(),
                    key: "retention.ms".into(),
                    previous: None
                },
                ConfigRecord {
                    topic: "logs-b".into(),
                    key: "retention.ms".into(),
                    previous: Some("1000".into())
                },
            ]
        );
        apply(&mut v, &first);
        // level-triggered: nothing more to do, every matched topic conforms
        let again = plan(&v, &[&p]);
        assert!(again.alterations.is_empty());
        let r = report("week", &again.resolved, &v);
        assert_eq!((r.matched, r.conforming), (2, 2));
        // a change behind the operator's back is brought back, the record kept
        v.overrides
            .get_mut("logs-a")
            .unwrap()
            .insert("retention.ms".into(), "1".into());
        let drift = plan(&v, &[&p]);
        assert_eq!(drift.alterations.len(), 1);
        assert_eq!(drift.records_after, first.records_after);
        apply(&mut v, &drift);
        // without the policy: each topic gets its own value back
        let gone = plan(&v, &[]);
        assert_eq!(
            gone.alterations,
            vec![
                (
                    "logs-a".into(),
                    vec![ConfigOp::Delete("retention.ms".into())]
                ),
                (
                    "logs-b".into(),
                    vec![ConfigOp::Set("retention.ms".into(), "1000".into())]
                ),
            ]
        );
        assert_eq!(
            gone.records_before, first.records_after,
            "kept until restored"
        );
        assert!(gone.records_after.is_empty());
        assert_eq!(not_yet_restored(&p, &v, &[]), vec!["logs-a", "logs-b"]);
        apply(&mut v, &gone);
        assert_eq!(
            v.overrides["logs-b"],
            map(&[("retention.ms", "1000"), ("segment.bytes", "1048576")])
        );
        assert!(v.overrides["logs-a"].is_empty());
        assert!(not_yet_restored(&p, &v, &[]).is_empty());
    }

    #[test]
    fn managed_topics_are_checked_not_written() {
        let p = week();
        let mut v = view(&[("logs-kt", &[("retention.ms", "1000")])]);
        v.managed.insert(
            "logs-kt".into(),
            ManagedTopic {
                labels: BTreeMap::new(),
                spec_config: map(&[("retention.ms", "1000")]),
            },
        );
        let pl = plan(&v, &[&p]);
        assert!(pl.alterations.is_empty());
        assert!(pl.records_after.is_empty());
        let r = report("week", &pl.resolved, &v);
        assert_eq!((r.matched, r.conforming), (1, 0));
        assert!(
            r.non_conforming[0].reason.contains("KafkaTopic reconciler"),
            "{:?}",
            r.non_conforming
        );
        // once the KafkaTopic reconciler applied it
        v.overrides
            .get_mut("logs-kt")
            .unwrap()
            .insert("retention.ms".into(), "604800000".into());
        let r = report("week", &plan(&v, &[&p]).resolved, &v);
        assert_eq!((r.matched, r.conforming), (1, 1));
        // deleting the policy waits for the reconciler to restore spec.config
        assert_eq!(not_yet_restored(&p, &v, &[]), vec!["logs-kt"]);
    }

    #[test]
    fn a_crash_between_records_and_changes_loses_no_own_value() {
        let p = week();
        let mut v = view(&[("logs-b", &[("retention.ms", "1000")])]);
        let first = plan(&v, &[&p]);
        // the records were written, the alteration never ran
        v.records = first.records_before.clone();
        let retry = plan(&v, &[&p]);
        assert_eq!(retry.alterations, first.alterations);
        apply(&mut v, &retry);
        // the policy goes; records were written, then a crash before the restore
        let gone = plan(&v, &[]);
        v.records = gone.records_before.clone();
        let retry = plan(&v, &[]);
        assert_eq!(
            retry.alterations,
            vec![(
                "logs-b".into(),
                vec![ConfigOp::Set("retention.ms".into(), "1000".into())]
            )]
        );
    }

    #[test]
    fn conflicts_are_reported_by_the_loser_only() {
        let strict = policy(
            "strict",
            serde_json::json!({"selector": {"topicNames": ["logs-*"]}, "mode": "enforce", "priority": 10,
                "config": {"retention.ms": "1000"}}),
        );
        let v = view(&[("logs-a", &[])]);
        let pl = plan(&v, &[&week(), &strict]);
        assert_eq!(
            pl.alterations[0].1,
            vec![ConfigOp::Set("retention.ms".into(), "1000".into())]
        );
        let loser = report("week", &pl.resolved, &v);
        assert_eq!(loser.conflict_count, 1);
        assert_eq!(loser.conflicts[0].winner, "strict");
        assert_eq!(report("strict", &pl.resolved, &v).conflict_count, 0);
    }

    #[test]
    fn a_selector_matching_nothing_reports_zero() {
        let p = policy(
            "none",
            serde_json::json!({"selector": {"topicNames": ["nothing-*"]}, "config": {"retention.ms": "1"}}),
        );
        let v = view(&[("logs-a", &[])]);
        let pl = plan(&v, &[&p]);
        assert!(pl.alterations.is_empty());
        assert_eq!(report("none", &pl.resolved, &v), PolicyReport::default());
    }

    #[test]
    fn reports_list_at_most_max_listed() {
        let p = week();
        let names: Vec<String> = (0..MAX_LISTED + 5).map(|i| format!("logs-{i}")).collect();
        let mut v = ClusterView::default();
        for n in &names {
            v.overrides.insert(n.clone(), BTreeMap::new());
            v.managed.insert(n.clone(), ManagedTopic::default());
        }
        let r = report("week", &plan(&v, &[&p]).resolved, &v);
        assert_eq!(r.matched, MAX_LISTED + 5);
        assert_eq!(r.non_conforming.len(), MAX_LISTED);
    }
}
