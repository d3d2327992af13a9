//! Kubernetes Events for the operator's important transitions. Publishing is
//! best effort: a failed Event is logged, never fails a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

use crate::cluster::status::EventSpec;

/// Controller name shown as the Event's reporting controller.
pub const REPORTER: &str = "moldau-operator";

/// Publishes Events.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
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
            recorder: Recorder::new(client, reporter),
        }
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
        if let Err(e) = self.recorder.publish(&event, object).await {
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
    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(super::truncate("abc", 5), "abc");
        assert_eq!(super::truncate("äbc", 1), "");
        assert_eq!(super::truncate("äbc", 2), "ä");
    }
}
