//! Broker containers that crash-loop or restart over and over, from what
//! the pods' container statuses say (restart count, waiting reason, last
//! termination): pure, for the cluster's status (`Degraded=True
//! BrokerCrashLooping` with the last termination, and what a not-Ready
//! broker is doing). [`ContainerRestarts`] is read from each pod by
//! [`super::pods::pod_state`]; nothing here reads the API server or keeps
//! history.
//!
//! A restart count only grows over a pod's life, so "restarting now" is
//! read from the time of the last termination: a container restarts
//! repeatedly when it restarted at least [`CRASH_LOOP_RESTARTS`] times
//! and either waits in `CrashLoopBackOff` now or, not Ready, last
//! terminated less than [`RECENT_RESTART_SECONDS`] ago (longer than the
//! kubelet's largest back-off, 5 minutes, so a crash loop does not flap
//! between its crashes, when the container runs but is not Ready yet). A
//! container that is Ready again has recovered: the condition clears then,
//! not ten minutes later.
//! A broker that restarted once (a kill, an eviction of its process) is
//! not a crash loop; its pod is simply not Ready for a while.

use k8s_openapi::jiff::Timestamp;

use super::pods::{ContainerRestarts, PodState, Termination};

/// Restarts from which a container that keeps restarting is reported.
pub const CRASH_LOOP_RESTARTS: i32 = 3;
/// How recent the last termination must be to count as restarting now.
pub const RECENT_RESTART_SECONDS: i64 = 600;
/// The kubelet's waiting reason between the restarts of a failing container.
pub const CRASH_LOOP_BACK_OFF: &str = "CrashLoopBackOff";
/// At most this many bytes of a termination message go into a condition.
pub const MESSAGE_BYTES: usize = 512;

// `Termination` is plain data of `super::pods`; how a crash is told is
// this module's.
impl Termination {
    /// `Error, exit code 1: <message>` (the message trimmed and bounded).
    pub fn describe(&self) -> String {
        let mut out = self.reason.clone().unwrap_or_else(|| "terminated".into());
        out.push_str(&format!(", exit code {}", self.exit_code));
        if let Some(signal) = self.signal {
            out.push_str(&format!(", signal {signal}"));
        }
        let message = self
            .message
            .as_deref()
            .map(|m| m.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|m| !m.is_empty());
        if let Some(m) = message {
            // The end: a log's tail (FallbackToLogsOnError) ends with the
            // error that stopped the container.
            let cut = tail(&m, MESSAGE_BYTES);
            let more = if cut.len() < m.len() { "…" } else { "" };
            out.push_str(&format!(": {more}{cut}"));
        }
        out
    }
}

/// The last `max` bytes of `s` at most (on a character boundary).
fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// A broker container that keeps restarting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashLoop {
    /// Broker id (pod ordinal).
    pub broker: i32,
    /// Pod name.
    pub pod: String,
    /// The container.
    pub container: ContainerRestarts,
}

impl CrashLoop {
    /// `broker 1 (pod demo-1): container broker restarted 4 times, last
    /// terminated at T: Error, exit code 1: <message>`. It says nothing of
    /// the container's state now (running or backing off), so it stays the
    /// same between two crashes.
    pub fn describe(&self) -> String {
        let c = &self.container;
        let kind = if c.init {
            "init container"
        } else {
            "container"
        };
        let mut out = format!(
            "broker {} (pod {}): {kind} {} restarted {} times",
            self.broker, self.pod, c.name, c.restart_count
        );
        if let Some(t) = &c.last_termination {
            let at = t
                .finished_at
                .as_deref()
                .map(|f| format!(" at {f}"))
                .unwrap_or_default();
            out.push_str(&format!(", last terminated{at}: {}", t.describe()));
        }
        out
    }
}

fn seconds_since(at: &str, now: &str) -> Option<i64> {
    let (a, b) = (
        at.parse::<Timestamp>().ok()?,
        now.parse::<Timestamp>().ok()?,
    );
    Some(b.as_second() - a.as_second())
}

/// Whether `c` restarts repeatedly as of `now` (RFC 3339).
pub fn restarts_repeatedly(c: &ContainerRestarts, now: &str) -> bool {
    if c.restart_count < CRASH_LOOP_RESTARTS {
        return false;
    }
    if c.waiting_reason.as_deref() == Some(CRASH_LOOP_BACK_OFF) {
        return true;
    }
    !c.ready
        && c.last_termination
            .as_ref()
            .and_then(|t| t.finished_at.as_deref())
            .and_then(|f| seconds_since(f, now))
            .is_some_and(|s| s < RECENT_RESTART_SECONDS)
}

/// The broker containers of `pods` (those not being deleted) that restart
/// repeatedly as of `now`, by broker id; one per pod, the one restarted
/// most.
pub fn crash_loops(pods: &[PodState], now: &str) -> Vec<CrashLoop> {
    let mut out: Vec<CrashLoop> = pods
        .iter()
        .filter(|p| !p.terminating)
        .filter_map(|p| {
            p.containers
                .iter()
                .filter(|c| restarts_repeatedly(c, now))
                .max_by_key(|c| c.restart_count)
                .map(|c| CrashLoop {
                    broker: p.ordinal,
                    pod: p.name.clone(),
                    container: c.clone(),
                })
        })
        .collect();
    out.sort_by_key(|c| c.broker);
    out
}

/// What a pod that is not Ready is doing, when its containers say more than
/// "not Ready": waiting (`CrashLoopBackOff`, `ImagePullBackOff`, …) with its
/// restarts and last termination. None when nothing is known.
pub fn not_ready_detail(pod: &PodState) -> Option<String> {
    let c = pod
        .containers
        .iter()
        .filter(|c| c.waiting_reason.is_some() || c.restart_count > 0)
        .max_by_key(|c| (c.waiting_reason.is_some(), c.restart_count))?;
    let mut parts = Vec::new();
    if let Some(w) = &c.waiting_reason {
        parts.push(w.clone());
    }
    if c.restart_count > 0 {
        parts.push(format!("restarted {} times", c.restart_count));
    }
    if let Some(t) = &c.last_termination {
        parts.push(format!("last terminated: {}", t.describe()));
    }
    Some(parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(restarts: i32, waiting: Option<&str>, finished: Option<&str>) -> ContainerRestarts {
        ContainerRestarts {
            name: "broker".into(),
            init: false,
            restart_count: restarts,
            ready: false,
            waiting_reason: waiting.map(Into::into),
            last_termination: (restarts > 0).then(|| Termination {
                reason: Some("Error".into()),
                exit_code: 1,
                signal: None,
                message: Some("no Kubernetes credentials\n".into()),
                finished_at: finished.map(Into::into),
            }),
        }
    }

    fn pod(ordinal: i32, containers: Vec<ContainerRestarts>) -> PodState {
        PodState {
            name: format!("demo-{ordinal}"),
            ordinal,
            revision: Some("r".into()),
            ready: false,
            terminating: false,
            containers,
        }
    }

    const NOW: &str = "2026-12-02T10:10:00Z";

    #[test]
    fn a_container_in_crash_loop_back_off_after_repeated_restarts_is_a_crash_loop() {
        let looping = broker(4, Some(CRASH_LOOP_BACK_OFF), None);
        assert!(restarts_repeatedly(&looping, NOW));
        // between two crashes it runs: still one, by the last termination
        let running = broker(4, None, Some("2026-12-02T10:05:30Z"));
        assert!(restarts_repeatedly(&running, NOW));
        // one restart (a kill -9) is not a crash loop
        assert!(!restarts_repeatedly(
            &broker(1, Some(CRASH_LOOP_BACK_OFF), None),
            NOW
        ));
        // old restarts, running fine for more than 10 minutes: over
        assert!(!restarts_repeatedly(
            &broker(7, None, Some("2026-12-02T09:59:59Z")),
            NOW
        ));
        assert!(!restarts_repeatedly(&broker(7, None, None), NOW));
        // Ready again after its last crash: recovered at once
        let mut recovered = running.clone();
        recovered.ready = true;
        assert!(!restarts_repeatedly(&recovered, NOW));
    }

    #[test]
    fn crash_loops_name_the_broker_and_the_last_termination() {
        let pods = vec![
            pod(0, vec![broker(0, None, None)]),
            pod(
                2,
                vec![broker(
                    5,
                    Some(CRASH_LOOP_BACK_OFF),
                    Some("2026-12-02T10:09:00Z"),
                )],
            ),
            pod(1, vec![broker(3, None, Some("2026-12-02T10:08:00Z"))]),
        ];
        let loops = crash_loops(&pods, NOW);
        assert_eq!(
            loops.iter().map(|l| l.broker).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(
            loops[1].describe(),
            "broker 2 (pod demo-2): container broker restarted 5 times, last terminated at \
             2026-12-02T10:09:00Z: Error, exit code 1: no Kubernetes credentials"
        );
        // a pod being deleted is not reported
        let mut gone = pods[2].clone();
        gone.terminating = true;
        assert!(crash_loops(&[gone], NOW).is_empty());
    }

    #[test]
    fn a_long_termination_message_is_bounded() {
        let mut c = broker(3, Some(CRASH_LOOP_BACK_OFF), None);
        c.last_termination.as_mut().unwrap().message = Some(format!(
            "{}\nerror: the data directory is held",
            "é".repeat(5000)
        ));
        let d = c.last_termination.as_ref().unwrap().describe();
        assert!(d.len() < MESSAGE_BYTES + 64, "{}", d.len());
        // the end is kept: where a log's tail says why it stopped
        assert!(d.contains(": …é"), "{d}");
        assert!(d.ends_with("error: the data directory is held"), "{d}");
    }

    #[test]
    fn what_a_pod_not_ready_is_doing() {
        assert_eq!(not_ready_detail(&pod(0, vec![broker(0, None, None)])), None);
        let p = pod(1, vec![broker(2, Some(CRASH_LOOP_BACK_OFF), None)]);
        assert_eq!(
            not_ready_detail(&p).as_deref(),
            Some(
                "CrashLoopBackOff, restarted 2 times, last terminated: Error, exit code 1: \
                 no Kubernetes credentials"
            )
        );
    }
}
