//! Pure resolution of `KafkaRetentionPolicy` objects against topics.
//!
//! Ownership of config keys (so the policy edge never fights the KafkaTopic
//! reconciler): a topic has exactly one writer. A topic managed by a
//! `KafkaTopic` is written only by the KafkaTopic reconciler, which is to
//! apply `resolve(spec.config, policies).config` instead of `spec.config`;
//! a topic without a `KafkaTopic` (created by an application) is written
//! only by the policy reconciler. Either way the desired overrides of a
//! topic are [`Resolved::config`], so both agree on every key.
//!
//! A topic's *own* settings are its `KafkaTopic`'s `spec.config`; for a
//! topic without one they are its overrides with every key a policy set
//! replaced by the value it had before ([`own_config`] over the
//! [`ConfigRecord`]s). Resolving without a deleted policy therefore
//! restores the topic's own settings, or the broker default where it had
//! none.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::crd::{KafkaRetentionPolicy, PolicyMode};

/// Whether `name` matches glob `pattern` (`*` any run, `?` one character).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // iterative matcher with backtracking to the last `*`
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// A topic as the resolution sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TopicFacts {
    /// Kafka topic name.
    pub name: String,
    /// Labels of its `KafkaTopic`; None when no KafkaTopic manages it.
    pub labels: Option<BTreeMap<String, String>>,
    /// Its own settings (see the module docs).
    pub own: BTreeMap<String, String>,
}

/// Whether `policy`'s selector matches `topic`.
pub fn matches(policy: &KafkaRetentionPolicy, topic: &TopicFacts) -> bool {
    if topic.name.starts_with("__") {
        return false;
    }
    let sel = &policy.spec.selector;
    if sel.match_labels.is_empty() && sel.topic_names.is_empty() {
        return false;
    }
    let by_name =
        sel.topic_names.is_empty() || sel.topic_names.iter().any(|p| glob_match(p, &topic.name));
    let by_labels = sel.match_labels.is_empty()
        || topic
            .labels
            .as_ref()
            .is_some_and(|l| sel.match_labels.iter().all(|(k, v)| l.get(k) == Some(v)));
    by_name && by_labels
}

/// Problems of a policy's spec that keep it from being applied at all. Its
/// keys must be Kafka topic configs, as the broker lists them
/// ([`moldau_broker::topic_config::is_kafka_topic_config`]).
pub fn validate(policy: &KafkaRetentionPolicy) -> Vec<String> {
    let s = &policy.spec;
    let mut out = Vec::new();
    for k in s.config.keys().chain(s.bounds.keys()) {
        if !moldau_broker::topic_config::is_kafka_topic_config(k) {
            out.push(format!("{k} is not a Kafka topic config"));
        }
    }
    for k in s.config.keys().chain(s.bounds.keys()) {
        if crate::topic::plan::REASSIGNMENT_CONFIGS.contains(&k.as_str()) {
            out.push(format!(
                "{k} belongs to partition reassignments, not to policies"
            ));
        }
    }
    if s.mode == PolicyMode::Default && !s.bounds.is_empty() {
        out.push("bounds apply in mode enforce only".into());
    }
    for (k, b) in &s.bounds {
        if let (Some(min), Some(max)) = (b.min, b.max) {
            if min > max {
                out.push(format!("{k}: min {min} is above max {max}"));
            }
        }
        if let Some(v) = s.config.get(k) {
            match v.parse::<i64>() {
                Err(_) => out.push(format!(
                    "{k}: {v:?} is not a number, so it cannot have bounds"
                )),
                Ok(n) if b.min.is_some_and(|m| n < m) => out.push(format!(
                    "{k}: {n} is below the floor {}",
                    b.min.unwrap_or_default()
                )),
                Ok(n) if b.max.is_some_and(|m| n > m) => out.push(format!(
                    "{k}: {n} is above the ceiling {}",
                    b.max.unwrap_or_default()
                )),
                Ok(_) => {}
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A policy that governs a key of a topic but lost it to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The losing policy.
    pub policy: String,
    /// The key.
    pub key: String,
    /// The policy that governs it.
    pub winner: String,
}

/// The resolution of one topic.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// The topic's desired overrides: its own settings with the policies'
    /// values applied.
    pub config: BTreeMap<String, String>,
    /// Key → the policy that decided its value (keys where a policy changed
    /// or filled in the topic's own setting).
    pub set_by: BTreeMap<String, String>,
    /// Key → the policy that governs it (decided or left the own value).
    pub governed_by: BTreeMap<String, String>,
    /// Policies matching the topic, in precedence order.
    pub matched_by: Vec<String>,
    /// Losing policies per key.
    pub conflicts: Vec<Conflict>,
    /// Policy → notes (an own value clamped into bounds).
    pub notes: Vec<(String, String)>,
}

/// Precedence order: highest priority, then name.
fn ordered<'a>(policies: &[&'a KafkaRetentionPolicy]) -> Vec<&'a KafkaRetentionPolicy> {
    let mut v: Vec<&KafkaRetentionPolicy> = policies.to_vec();
    v.sort_by(|a, b| {
        b.spec
            .priority
            .cmp(&a.spec.priority)
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    v
}

/// Resolves `topic` against `policies` (those of its cluster; deleting and
/// invalid ones must be left out by the caller: a policy that is gone
/// simply no longer contributes, which restores the topic's own settings).
pub fn resolve(topic: &TopicFacts, policies: &[&KafkaRetentionPolicy]) -> Resolved {
    let mut out = Resolved {
        config: topic.own.clone(),
        ..Default::default()
    };
    let matching: Vec<&KafkaRetentionPolicy> = ordered(policies)
        .into_iter()
        .filter(|p| matches(p, topic))
        .collect();
    out.matched_by = matching.iter().map(|p| p.name_any()).collect();
    for p in &matching {
        let name = p.name_any();
        let keys: std::collections::BTreeSet<&String> =
            p.spec.config.keys().chain(p.spec.bounds.keys()).collect();
        for key in keys {
            if let Some(winner) = out.governed_by.get(key) {
                out.conflicts.push(Conflict {
                    policy: name.clone(),
                    key: key.clone(),
                    winner: winner.clone(),
                });
                continue;
            }
            out.governed_by.insert(key.clone(), name.clone());
            let own = topic.own.get(key);
            let wanted = p.spec.config.get(key);
            let value = match (p.spec.mode, p.spec.bounds.get(key)) {
                (PolicyMode::Default, _) => own.or(wanted).cloned(),
                (PolicyMode::Enforce, None) => wanted.or(own).cloned(),
                (PolicyMode::Enforce, Some(b)) => {
                    match own.and_then(|v| v.parse::<i64>().ok()) {
                        Some(n) => {
                            let clamped = n
                                .max(b.min.unwrap_or(i64::MIN))
                                .min(b.max.unwrap_or(i64::MAX));
                            if clamped != n {
                                out.notes.push((
                                    name.clone(),
                                    format!(
                                        "{}: own {key}={n} is outside its bounds, set to {clamped}",
                                        topic.name
                                    ),
                                ));
                            }
                            Some(clamped.to_string())
                        }
                        // no (numeric) own value: the policy's value, else the nearest bound
                        None => wanted
                            .cloned()
                            .or_else(|| b.min.or(b.max).map(|n| n.to_string())),
                    }
                }
            };
            if let Some(v) = value {
                if own != Some(&v) {
                    out.set_by.insert(key.clone(), name.clone());
                }
                out.config.insert(key.clone(), v);
            }
        }
    }
    out
}

/// Why a topic does not conform to its resolution: each governed key (of
/// `policy` only, when given) whose actual override differs, as "KEY is
/// VALUE (want VALUE)". Empty: it conforms.
pub fn mismatches(
    resolved: &Resolved,
    actual: &BTreeMap<String, String>,
    policy: Option<&str>,
) -> Vec<String> {
    let shown = |v: Option<&String>| v.map(String::as_str).unwrap_or("unset").to_string();
    resolved
        .governed_by
        .iter()
        .filter(|(_, p)| policy.is_none_or(|want| p.as_str() == want))
        .map(|(k, _)| k)
        .filter(|k| actual.get(*k) != resolved.config.get(*k))
        .map(|k| {
            format!(
                "{k} is {} (want {})",
                shown(actual.get(k)),
                shown(resolved.config.get(k))
            )
        })
        .collect()
}

/// What a policy changed on a topic without a KafkaTopic: the value the key
/// had before (None: unset, i.e. the broker default).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConfigRecord {
    /// Topic.
    pub topic: String,
    /// Key.
    pub key: String,
    /// The topic's own value before any policy set it.
    pub previous: Option<String>,
}

/// The own settings of a topic without a KafkaTopic: its current overrides
/// with each key a policy recorded set back to its previous value.
pub fn own_config(
    topic: &str,
    overrides: &BTreeMap<String, String>,
    records: &[ConfigRecord],
) -> BTreeMap<String, String> {
    let mut own = overrides.clone();
    for r in records.iter().filter(|r| r.topic == topic) {
        match &r.previous {
            Some(v) => own.insert(r.key.clone(), v.clone()),
            None => own.remove(&r.key),
        };
    }
    own
}

/// The records to keep after resolving a topic without a KafkaTopic: one
/// per key some policy sets, carrying the first recorded previous value
/// (or the own value, when no policy had set it before).
pub fn records_for(
    topic: &str,
    own: &BTreeMap<String, String>,
    resolved: &Resolved,
    old: &[ConfigRecord],
) -> Vec<ConfigRecord> {
    resolved
        .set_by
        .keys()
        .map(|key| {
            old.iter()
                .find(|r| r.topic == topic && &r.key == key)
                .cloned()
                .unwrap_or_else(|| ConfigRecord {
                    topic: topic.to_string(),
                    key: key.clone(),
                    previous: own.get(key).cloned(),
                })
        })
        .collect()
}

/// Fixtures shared by the retention modules' unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::collections::BTreeMap;

    use crate::crd::KafkaRetentionPolicy;

    /// A policy of cluster `c` in namespace `ns` with `spec` (clusterRef added).
    pub fn policy(name: &str, spec: serde_json::Value) -> KafkaRetentionPolicy {
        let mut spec = spec;
        spec["clusterRef"] = "c".into();
        let mut p = KafkaRetentionPolicy::new(name, serde_json::from_value(spec).unwrap());
        p.metadata.namespace = Some("ns".into());
        p
    }

    /// A string map from pairs.
    pub fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{map, policy};
    use super::*;

    fn topic(name: &str, labels: Option<&[(&str, &str)]>, own: &[(&str, &str)]) -> TopicFacts {
        TopicFacts {
            name: name.into(),
            labels: labels.map(map),
            own: map(own),
        }
    }

    #[test]
    fn globs() {
        assert!(glob_match("logs-*", "logs-app"));
        assert!(glob_match("logs-*", "logs-"));
        assert!(!glob_match("logs-*", "log-app"));
        assert!(glob_match("*.events.*", "a.events.b"));
        assert!(glob_match("t?", "t1"));
        assert!(!glob_match("t?", "t12"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("a*b*c", "aXXbYYbZc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("exact", "exact"));
    }

    #[test]
    fn matching_by_name_labels_or_both() {
        let by_name = policy(
            "n",
            serde_json::json!({"selector": {"topicNames": ["logs-*"]}}),
        );
        let by_label = policy(
            "l",
            serde_json::json!({"selector": {"matchLabels": {"team": "a"}}}),
        );
        let both = policy(
            "b",
            serde_json::json!({"selector": {"topicNames": ["logs-*"], "matchLabels": {"team": "a"}}}),
        );
        let app_topic = topic("logs-x", None, &[]);
        let kt_topic = topic("logs-y", Some(&[("team", "a")]), &[]);
        let other = topic("orders", Some(&[("team", "a")]), &[]);
        assert!(matches(&by_name, &app_topic));
        assert!(!matches(&by_label, &app_topic), "no KafkaTopic, no labels");
        assert!(!matches(&both, &app_topic));
        assert!(matches(&both, &kt_topic));
        assert!(matches(&by_label, &other));
        assert!(!matches(&both, &other));
        assert!(!matches(&by_name, &topic("__consumer_offsets", None, &[])));
        let any = policy(
            "any",
            serde_json::json!({"selector": {"topicNames": ["*"]}}),
        );
        assert!(
            !matches(&any, &topic("__consumer_offsets", None, &[])),
            "internal topics never match"
        );
        let empty = policy("e", serde_json::json!({"selector": {}}));
        assert!(!matches(&empty, &app_topic));
    }

    #[test]
    fn default_fills_in_only_unset_keys() {
        let p = policy(
            "p",
            serde_json::json!({"selector": {"topicNames": ["*"]},
                "config": {"retention.ms": "1000", "cleanup.policy": "delete"}}),
        );
        let r = resolve(&topic("t", None, &[("retention.ms", "5")]), &[&p]);
        assert_eq!(
            r.config,
            map(&[("retention.ms", "5"), ("cleanup.policy", "delete")])
        );
        assert_eq!(r.set_by, map(&[("cleanup.policy", "p")]));
        assert_eq!(r.governed_by.len(), 2);
    }

    #[test]
    fn enforce_overrides_and_bounds_clamp() {
        let p = policy(
            "p",
            serde_json::json!({"selector": {"topicNames": ["*"]}, "mode": "enforce",
                "config": {"cleanup.policy": "delete", "retention.ms": "86400000"},
                "bounds": {"retention.ms": {"min": 3600000, "max": 604800000}}}),
        );
        assert!(validate(&p).is_empty(), "{:?}", validate(&p));
        // own value within bounds: kept
        let r = resolve(
            &topic(
                "t",
                None,
                &[("retention.ms", "7200000"), ("cleanup.policy", "compact")],
            ),
            &[&p],
        );
        assert_eq!(r.config["retention.ms"], "7200000");
        assert_eq!(
            r.config["cleanup.policy"], "delete",
            "enforced without bounds"
        );
        assert_eq!(r.set_by, map(&[("cleanup.policy", "p")]));
        // below the floor / above the ceiling: clamped, with a note
        let r = resolve(&topic("t", None, &[("retention.ms", "1")]), &[&p]);
        assert_eq!(r.config["retention.ms"], "3600000");
        assert_eq!(r.notes.len(), 1);
        let r = resolve(
            &topic("t", None, &[("retention.ms", "999999999999")]),
            &[&p],
        );
        assert_eq!(r.config["retention.ms"], "604800000");
        // unset: the policy's value
        let r = resolve(&topic("t", None, &[]), &[&p]);
        assert_eq!(r.config["retention.ms"], "86400000");
    }

    #[test]
    fn precedence_is_priority_then_name_with_conflicts_reported() {
        let low = policy(
            "a-low",
            serde_json::json!({"selector": {"topicNames": ["*"]}, "mode": "enforce",
                "config": {"retention.ms": "1", "segment.bytes": "1048576"}}),
        );
        let high = policy(
            "z-high",
            serde_json::json!({"selector": {"topicNames": ["*"]}, "mode": "enforce", "priority": 10,
                "config": {"retention.ms": "2"}}),
        );
        let r = resolve(&topic("t", None, &[]), &[&low, &high]);
        assert_eq!(
            r.config,
            map(&[("retention.ms", "2"), ("segment.bytes", "1048576")])
        );
        assert_eq!(r.matched_by, vec!["z-high", "a-low"]);
        assert_eq!(
            r.conflicts,
            vec![Conflict {
                policy: "a-low".into(),
                key: "retention.ms".into(),
                winner: "z-high".into()
            }]
        );
        // same priority: the name decides
        let b = policy(
            "b",
            serde_json::json!({"selector": {"topicNames": ["*"]}, "mode": "enforce", "config": {"retention.ms": "3"}}),
        );
        let r = resolve(&topic("t", None, &[]), &[&b, &low]);
        assert_eq!(r.config["retention.ms"], "1");
    }

    #[test]
    fn bad_input_is_reported() {
        let p = policy(
            "p",
            serde_json::json!({"selector": {"topicNames": ["*"]}, "mode": "enforce",
                "config": {"retention.ms": "10", "no.such.config": "1", "cleanup.policy": "delete"},
                "bounds": {"retention.ms": {"min": 3600000}, "cleanup.policy": {"min": 1, "max": 0}}}),
        );
        let problems = validate(&p);
        assert!(
            problems.iter().any(|m| m.contains("no.such.config is not")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|m| m.contains("below the floor")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|m| m.contains("not a number")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|m| m.contains("above max")),
            "{problems:?}"
        );
        let d = policy(
            "d",
            serde_json::json!({"selector": {"topicNames": ["*"]},
                "config": {"retention.ms": "10"}, "bounds": {"retention.ms": {"min": 1}}}),
        );
        assert_eq!(validate(&d), vec!["bounds apply in mode enforce only"]);
        // the broker's list, without Kafka's internal (tests-only) config
        let internal = policy(
            "i",
            serde_json::json!({"selector": {"topicNames": ["*"]},
                "config": {"internal.segment.bytes": "1024", "segment.bytes": "1048576"}}),
        );
        assert_eq!(
            validate(&internal),
            vec!["internal.segment.bytes is not a Kafka topic config"]
        );
        let throttle = policy(
            "t",
            serde_json::json!({"selector": {"topicNames": ["*"]},
                "config": {"leader.replication.throttled.replicas": "*"}}),
        );
        assert_eq!(
            validate(&throttle),
            vec!["leader.replication.throttled.replicas belongs to partition reassignments, not to policies"]
        );
    }

    #[test]
    fn deleting_a_policy_restores_the_topics_own_settings() {
        let p = policy(
            "p",
            serde_json::json!({"selector": {"topicNames": ["app-*"]}, "mode": "enforce",
                "config": {"retention.ms": "1000", "segment.bytes": "1048576"}}),
        );
        // a topic created by an application with its own retention.ms
        let overrides = map(&[("retention.ms", "5000")]);
        let own = own_config("app-1", &overrides, &[]);
        let facts = TopicFacts {
            name: "app-1".into(),
            labels: None,
            own: own.clone(),
        };
        let r = resolve(&facts, &[&p]);
        let records = records_for("app-1", &own, &r, &[]);
        assert_eq!(records.len(), 2);
        // the broker now has the policy's values
        let applied = r.config.clone();
        assert!(mismatches(&r, &applied, None).is_empty());
        assert!(!mismatches(&r, &overrides, None).is_empty());
        // next reconcile: own settings are recovered from the records
        let own2 = own_config("app-1", &applied, &records);
        assert_eq!(own2, overrides);
        let r2 = resolve(
            &TopicFacts {
                own: own2.clone(),
                ..facts.clone()
            },
            &[&p],
        );
        assert_eq!(r2.config, applied, "stable");
        assert_eq!(records_for("app-1", &own2, &r2, &records), records);
        // the policy is deleted: resolution without it is the own settings
        let r3 = resolve(
            &TopicFacts {
                own: own2,
                ..facts.clone()
            },
            &[],
        );
        assert_eq!(r3.config, overrides);
        assert!(r3.set_by.is_empty());
        // a KafkaTopic's own settings are its spec.config: same rule
        let kt = topic("app-2", Some(&[]), &[("cleanup.policy", "compact")]);
        assert_eq!(resolve(&kt, &[]).config, kt.own);
        assert_eq!(resolve(&kt, &[&p]).config.len(), 3);
    }
}
