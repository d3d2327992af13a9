//! Kubernetes Events for the operator's important transitions, each also
//! logged (info, or warn for a Warning). Publishing is best effort: a
//! failed Event is logged, never fails a reconcile.
//!
//! Repeats fold as in kube's `Recorder` (one Event whose series count grows)
//! only when the note is the same too: kube folds by object, reason and
//! action alone, which turned "scaled from 3 to 1" into a repeat count on
//! "scaled from 1 to 3". Each distinct note gets its own recorder (its own
//! fold cache), dropped after [`FOLD_WINDOW`] unused.
//!
//! [`EventSpec`] (warning or not, reason, note) is what the pure planners
//! (`cluster::status`, `cluster::scaling`, `topic::status`, the rebalance
//! lifecycle) return for an Event: plain data, defined here with its
//! publisher so that they share it without importing each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

/// An Event to publish: `(warning, reason, note)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable note.
    pub note: String,
}

/// Controller name shown as the Event's reporting controller.
pub const REPORTER: &str = "moldau-operator";

/// How long an unused fold cache is kept: kube's own cache keeps an Event
/// for six minutes.
pub const FOLD_WINDOW: Duration = Duration::from_secs(6 * 60);

/// What identifies a repeat: the object, the type, action, reason and note.
type FoldKey = (String, bool, String, String, String);

/// Publishes Events.
#[derive(Clone)]
pub struct Events {
    client: Client,
    reporter: Reporter,
    recorders: Arc<Mutex<HashMap<FoldKey, (Instant, Recorder)>>>,
}

/// The fold key of an Event about `object`.
fn fold_key(object: &ObjectReference, action: &str, spec: &EventSpec) -> FoldKey {
    let who = format!(
        "{}/{}/{}/{}",
        object.kind.as_deref().unwrap_or_default(),
        object.namespace.as_deref().unwrap_or_default(),
        object.name.as_deref().unwrap_or_default(),
        object.uid.as_deref().unwrap_or_default()
    );
    (
        who,
        spec.warning,
        action.to_string(),
        spec.reason.clone(),
        spec.note.clone(),
    )
}

/// Truncates `s` to at most `max` bytes on a char boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl Events {
    /// A publisher reporting as `moldau-operator` with `instance` (the pod name).
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: REPORTER.into(),
            instance,
        };
        Events {
            client,
            reporter,
            recorders: Arc::default(),
        }
    }

    /// The recorder that folds repeats of exactly this Event.
    fn recorder_for(&self, key: FoldKey) -> Recorder {
        let now = Instant::now();
        let mut recorders = self.recorders.lock().unwrap_or_else(|e| e.into_inner());
        recorders.retain(|_, (used, _)| now.duration_since(*used) < FOLD_WINDOW);
        let entry = recorders.entry(key).or_insert_with(|| {
            (
                now,
                Recorder::new(self.client.clone(), self.reporter.clone()),
            )
        });
        entry.0 = now;
        entry.1.clone()
    }

    /// Publishes one Event about `object`.
    pub async fn publish(&self, object: &ObjectReference, action: &str, spec: &EventSpec) {
        let event = Event {
            type_: if spec.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: truncate(&spec.reason, 128),
            note: Some(truncate(&spec.note, 1000)),
            action: truncate(action, 128),
            secondary: None,
        };
        // Every Event is an action or a refusal: it goes to the log too, so
        // `kubectl logs` of the operator tells the same story.
        let (kind, ns, name) = (
            object.kind.as_deref().unwrap_or_default(),
            object.namespace.as_deref().unwrap_or_default(),
            object.name.as_deref().unwrap_or_default(),
        );
        if spec.warning {
            tracing::warn!(kind, namespace = ns, name, action, reason = %spec.reason, "{}", spec.note);
        } else {
            tracing::info!(kind, namespace = ns, name, action, reason = %spec.reason, "{}", spec.note);
        }
        let recorder = self.recorder_for(fold_key(object, action, spec));
        if let Err(e) = recorder.publish(&event, object).await {
            tracing::warn!(error = %e, reason = %spec.reason, "could not publish Event");
        }
    }

    /// Publishes a Normal Event.
    pub async fn normal(&self, object: &ObjectReference, action: &str, reason: &str, note: String) {
        self.publish(
            object,
            action,
            &EventSpec {
                warning: false,
                reason: reason.into(),
                note,
            },
        )
        .await
    }

    /// Publishes a Warning Event.
    pub async fn warning(
        &self,
        object: &ObjectReference,
        action: &str,
        reason: &str,
        note: String,
    ) {
        self.publish(
            object,
            action,
            &EventSpec {
                warning: true,
                reason: reason.into(),
                note,
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_note_on_the_same_object_is_a_repeat() {
        let object = ObjectReference {
            kind: Some("KafkaCluster".into()),
            namespace: Some("ns".into()),
            name: Some("demo".into()),
            uid: Some("u1".into()),
            ..Default::default()
        };
        let spec = |note: &str| EventSpec {
            warning: false,
            reason: "ClusterScaled".into(),
            note: note.into(),
        };
        let up = fold_key(&object, "Scale", &spec("scaled from 1 to 3 brokers"));
        assert_eq!(
            up,
            fold_key(&object, "Scale", &spec("scaled from 1 to 3 brokers"))
        );
        assert_ne!(
            up,
            fold_key(&object, "Scale", &spec("scaled from 3 to 1 brokers"))
        );
        let mut other = object.clone();
        other.name = Some("other".into());
        assert_ne!(
            up,
            fold_key(&other, "Scale", &spec("scaled from 1 to 3 brokers"))
        );
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(super::truncate("abc", 5), "abc");
        assert_eq!(super::truncate("äbc", 1), "");
        assert_eq!(super::truncate("äbc", 2), "ä");
    }
}
