//! A broker pod as the planners see it: [`PodState`] (ordinal, revision,
//! readiness, and its containers' [`ContainerRestarts`] with their last
//! [`Termination`]), read from a `Pod` by [`pod_state`]. Pure data and a
//! pure reader, below everything that decides about pods: `rollout` (which
//! pod to roll), `restarts` (which crash-loop), `status`, the controller,
//! and `crate::brokers` (the Ready pods' addresses).

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use crate::crd::format_time;

/// What the planner (and the status) knows about one broker pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodState {
    /// Pod name.
    pub name: String,
    /// StatefulSet ordinal.
    pub ordinal: i32,
    /// Its `controller-revision-hash` label.
    pub revision: Option<String>,
    /// Ready condition is True.
    pub ready: bool,
    /// Has a deletionTimestamp.
    pub terminating: bool,
    /// Its containers' restarts (for the status, see [`super::restarts`]).
    pub containers: Vec<ContainerRestarts>,
}

/// One container's restart history, as its pod's status reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerRestarts {
    /// Container name.
    pub name: String,
    /// An init container.
    pub init: bool,
    /// `restartCount`.
    pub restart_count: i32,
    /// `ready`: running and passing its readiness probe now.
    pub ready: bool,
    /// `state.waiting.reason`, while it waits.
    pub waiting_reason: Option<String>,
    /// `lastState.terminated`.
    pub last_termination: Option<Termination>,
}

/// How a container last terminated (`lastState.terminated`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Termination {
    /// `reason` (`Error`, `OOMKilled`, …).
    pub reason: Option<String>,
    /// `exitCode`.
    pub exit_code: i32,
    /// `signal`, when a signal ended it.
    pub signal: Option<i32>,
    /// `message`: the termination log, or the log's tail with
    /// `FallbackToLogsOnError`.
    pub message: Option<String>,
    /// `finishedAt` (RFC 3339).
    pub finished_at: Option<String>,
}

/// The planner's view of a pod.
pub fn pod_state(pod: &Pod) -> Option<PodState> {
    let name = pod.metadata.name.clone()?;
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let ordinal = labels
        .get("apps.kubernetes.io/pod-index")
        .and_then(|v| v.parse().ok())
        .or_else(|| name.rsplit('-').next().and_then(|v| v.parse().ok()))?;
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let status = pod.status.as_ref();
    let statuses = |list: Option<&Vec<ContainerStatus>>, init: bool| {
        list.into_iter()
            .flatten()
            .map(move |c| container_restarts(c, init))
            .collect::<Vec<_>>()
    };
    let mut containers = statuses(
        status.and_then(|s| s.init_container_statuses.as_ref()),
        true,
    );
    containers.extend(statuses(
        status.and_then(|s| s.container_statuses.as_ref()),
        false,
    ));
    Some(PodState {
        name,
        ordinal,
        revision: labels.get("controller-revision-hash").cloned(),
        ready,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        containers,
    })
}

/// A container's restarts as its status reports them.
fn container_restarts(c: &ContainerStatus, init: bool) -> ContainerRestarts {
    ContainerRestarts {
        name: c.name.clone(),
        init,
        restart_count: c.restart_count,
        ready: c.ready,
        waiting_reason: c
            .state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.clone()),
        last_termination: c
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| Termination {
                reason: t.reason.clone(),
                exit_code: t.exit_code,
                signal: t.signal,
                message: t.message.clone(),
                finished_at: t.finished_at.as_ref().map(|f| format_time(f.0)),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use std::collections::BTreeMap;

    fn pod(name: &str, labels: &[(&str, &str)], ready: bool) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        p.status = Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    #[test]
    fn pod_state_reads_index_revision_and_readiness() {
        let p = pod(
            "demo-2",
            &[
                ("apps.kubernetes.io/pod-index", "2"),
                ("controller-revision-hash", "demo-abc"),
            ],
            true,
        );
        let s = pod_state(&p).unwrap();
        assert_eq!(s.ordinal, 2);
        assert_eq!(s.revision.as_deref(), Some("demo-abc"));
        assert!(s.ready);
        // ordinal from the name when the label is missing
        let s = pod_state(&pod("demo-7", &[], false)).unwrap();
        assert_eq!(s.ordinal, 7);
        assert!(!s.ready);
        assert!(pod_state(&pod("nonsense", &[], false)).is_none());
    }

    #[test]
    fn pod_state_reads_the_containers_restarts_and_last_termination() {
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateTerminated, ContainerStateWaiting,
        };
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let mut p = pod("demo-1", &[], false);
        let finished: k8s_openapi::jiff::Timestamp = "2026-12-02T10:00:00Z".parse().unwrap();
        p.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
            name: "broker".into(),
            restart_count: 4,
            state: Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("CrashLoopBackOff".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            last_state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 1,
                    reason: Some("Error".into()),
                    message: Some("no Kubernetes credentials".into()),
                    finished_at: Some(Time(finished)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        let s = pod_state(&p).unwrap();
        assert_eq!(
            s.containers,
            vec![ContainerRestarts {
                name: "broker".into(),
                init: false,
                restart_count: 4,
                ready: false,
                waiting_reason: Some("CrashLoopBackOff".into()),
                last_termination: Some(Termination {
                    reason: Some("Error".into()),
                    exit_code: 1,
                    signal: None,
                    message: Some("no Kubernetes credentials".into()),
                    finished_at: Some("2026-12-02T10:00:00Z".into()),
                }),
            }]
        );
    }
}
