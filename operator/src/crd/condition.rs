//! The status condition type shared by every Moldau resource (the usual
//! Kubernetes shape: type, status, reason, message, lastTransitionTime,
//! observedGeneration) and the pure helper that merges a freshly computed
//! condition into an existing list without resetting transition times.

use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One status condition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Ready`, `Progressing`, `Degraded`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable CamelCase reason.
    pub reason: String,
    /// Human-readable explanation.
    #[serde(default)]
    pub message: String,
    /// RFC 3339 time of the last change of `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The `metadata.generation` this condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// A condition without a transition time (set by [`merge_conditions`]).
    pub fn new(type_: &str, status: bool, reason: &str, message: impl Into<String>) -> Self {
        Condition {
            type_: type_.to_string(),
            status: if status { "True" } else { "False" }.to_string(),
            reason: reason.to_string(),
            message: message.into(),
            last_transition_time: None,
            observed_generation: None,
        }
    }

    /// Whether `status` is `True`.
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// Formats a timestamp the way Kubernetes does (RFC 3339, second precision).
pub fn format_time(now: Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Merges `fresh` conditions into `old`: a condition whose status did not change
/// keeps its old `lastTransitionTime`; others get `now`. Every condition gets
/// `generation` as `observedGeneration`. Conditions of types absent from `fresh`
/// are dropped. The result follows the order of `fresh`.
pub fn merge_conditions(
    old: &[Condition],
    fresh: Vec<Condition>,
    generation: Option<i64>,
    now: &str,
) -> Vec<Condition> {
    fresh
        .into_iter()
        .map(|mut c| {
            let previous = old.iter().find(|o| o.type_ == c.type_);
            c.last_transition_time = match previous {
                Some(p) if p.status == c.status && p.last_transition_time.is_some() => {
                    p.last_transition_time.clone()
                }
                _ => Some(now.to_string()),
            };
            c.observed_generation = generation;
            c
        })
        .collect()
}

/// Finds a condition by type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_transition_time_when_status_is_unchanged() {
        let old = merge_conditions(
            &[],
            vec![Condition::new("Ready", true, "Ok", "fine")],
            Some(1),
            "2026-01-01T00:00:00Z",
        );
        let merged = merge_conditions(
            &old,
            vec![Condition::new("Ready", true, "StillOk", "fine")],
            Some(2),
            "2026-01-02T00:00:00Z",
        );
        assert_eq!(
            merged[0].last_transition_time.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(merged[0].reason, "StillOk");
        assert_eq!(merged[0].observed_generation, Some(2));
    }

    #[test]
    fn merge_sets_transition_time_when_status_flips() {
        let old = merge_conditions(
            &[],
            vec![Condition::new("Ready", true, "Ok", "")],
            None,
            "2026-01-01T00:00:00Z",
        );
        let merged = merge_conditions(
            &old,
            vec![Condition::new("Ready", false, "Broken", "")],
            None,
            "2026-01-02T00:00:00Z",
        );
        assert_eq!(
            merged[0].last_transition_time.as_deref(),
            Some("2026-01-02T00:00:00Z")
        );
        assert!(!merged[0].is_true());
    }

    #[test]
    fn time_is_rfc3339_seconds() {
        let t: Timestamp = "2026-11-29T12:00:00.123Z".parse().unwrap();
        assert_eq!(format_time(t), "2026-11-29T12:00:00Z");
    }
}
