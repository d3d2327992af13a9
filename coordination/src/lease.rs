//! Leader election on a `coordination.k8s.io/v1` Lease: the one elector the
//! brokers (controller election), the operator (one reconciling replica) and
//! the end-to-end tests share.
//!
//! The scheme is client-go's `leaderelection`:
//!
//! - A candidate takes the Lease when it has no holder, or when its record
//!   (holder, renew time, resourceVersion) has not changed for the record's
//!   lease duration **as measured on the candidate's own monotonic clock**
//!   from the moment it first saw that record ([`Observer`]). Wall-clock
//!   timestamps in the Lease are written for humans and never compared, so
//!   clock skew between nodes cannot shorten anyone's lease.
//! - The holder renews every retry period. It considers itself leader only
//!   until *start of its last successful renewal + renew deadline*, where
//!   the renew deadline is the lease duration minus a margin
//!   ([`LeaseConfig::renew_deadline`]). Any other candidate saw the renewed
//!   record only after the renewal started, and waits a whole lease duration
//!   from then, so the holder stops acting strictly before anyone else may
//!   start.
//! - Every write (create, renew, take over, release) is a compare-and-swap on
//!   the Lease's `resourceVersion` (a replace carrying the version read), so
//!   two candidates can never both take the same expired Lease.
//! - [`Elector::release`] on clean shutdown clears the holder, so the next
//!   candidate takes over at its next attempt instead of after a lease
//!   duration.
//!
//! [`decide`] is the pure core; [`Candidate`] makes one attempt at a time;
//! [`Elector`] runs attempts in a background task and publishes
//! [`LeaderState`] through a `tokio::sync::watch` channel.
//!
//! Leadership is only ever an optimisation for the metadata: what keeps a
//! deposed controller from corrupting it is the epoch fencing of
//! [`crate::store`], which holds even for a holder paused past its `until`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Settings of one candidate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This candidate's identity (its pod name, or a unique id).
    pub identity: String,
    /// How long a Lease is valid without renewal (written into the Lease;
    /// other candidates use the duration they read).
    pub lease_duration: Duration,
    /// The holder acts as leader only until the start of its last successful
    /// renewal plus this (lease duration minus a safety margin).
    pub renew_deadline: Duration,
    /// Pause between attempts (renewals by the holder, polls by the others).
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// A config whose renew deadline is the lease duration minus a margin of
    /// one retry period (at most a quarter of the lease duration).
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
        lease_duration: Duration,
        retry_period: Duration,
    ) -> Self {
        let margin = retry_period.min(lease_duration / 4);
        LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration,
            renew_deadline: lease_duration.saturating_sub(margin),
            retry_period,
        }
    }

    /// Checks the timing invariants (0 < retry < renew deadline < lease
    /// duration) and that the identity is set.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_duration.is_zero() || self.renew_deadline >= self.lease_duration {
            return Err("the renew deadline must be shorter than the lease duration".into());
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err("the retry period must be shorter than the renew deadline".into());
        }
        if self.identity.is_empty() {
            return Err("the identity must not be empty".into());
        }
        if self.name.is_empty() || self.namespace.is_empty() {
            return Err("the Lease name and namespace must not be empty".into());
        }
        Ok(())
    }

    fn duration_secs(&self) -> i32 {
        // The Lease holds whole seconds: round up, so the others never wait
        // less than we assume.
        let d = self.lease_duration;
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
    }
}

/// What a candidate should do with the Lease it just read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The Lease is free or expired: take it.
    TakeOver,
    /// We hold it: renew it.
    Renew,
    /// Someone else holds a live Lease.
    Wait {
        /// The holder.
        holder: String,
        /// How long until it expires if its record stays unchanged.
        expires_in: Duration,
    },
}

/// Decides from the holder, how long (on our clock) the record has not
/// changed, and the record's lease duration.
pub fn decide(
    holder: Option<&str>,
    me: &str,
    unchanged_for: Duration,
    lease_duration: Duration,
) -> Decision {
    match holder {
        None | Some("") => Decision::TakeOver,
        Some(h) if h == me => Decision::Renew,
        Some(_) if unchanged_for >= lease_duration => Decision::TakeOver,
        Some(h) => Decision::Wait {
            holder: h.to_string(),
            expires_in: lease_duration - unchanged_for,
        },
    }
}

/// Remembers since when (on the local monotonic clock) a Lease record has
/// been unchanged. Pure: the caller passes the time.
#[derive(Clone, Debug, Default)]
pub struct Observer<K> {
    seen: Option<(K, Instant)>,
}

impl<K: PartialEq> Observer<K> {
    /// Records that `key` was read at `now`; returns how long it has been
    /// unchanged (zero for a record not seen before).
    pub fn observe(&mut self, key: K, now: Instant) -> Duration {
        let since = match &self.seen {
            Some((k, at)) if *k == key => *at,
            _ => now,
        };
        self.seen = Some((key, since));
        now.saturating_duration_since(since)
    }

    /// Forgets the record (after our own write changed it).
    pub fn reset(&mut self) {
        self.seen = None;
    }
}

/// Holder, renew time and resourceVersion: the fields that count as
/// "changed" when they change.
type RecordKey = (Option<String>, Option<String>, Option<String>);

fn record_key(lease: &Lease) -> RecordKey {
    let spec = lease.spec.clone().unwrap_or_default();
    (
        spec.holder_identity,
        spec.renew_time.map(|t| t.0.to_string()),
        lease.metadata.resource_version.clone(),
    )
}

/// The result of one acquire-or-renew attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the Lease (created, renewed or taken over just now).
    Held {
        /// The Lease's `leaseTransitions` after our write.
        transitions: i32,
    },
    /// Someone else holds it, or our compare-and-swap lost a race.
    NotHeld {
        /// The holder, when known.
        holder: Option<String>,
        /// When to look again at the latest (the Lease may expire then).
        retry_in: Option<Duration>,
    },
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// One candidate, one attempt at a time (no background task): the building
/// block of [`Elector`], usable directly by callers that run their own loop.
pub struct Candidate {
    api: Api<Lease>,
    cfg: LeaseConfig,
    observer: Observer<RecordKey>,
}

impl Candidate {
    /// A candidate using `client` with `cfg`.
    pub fn new(client: Client, cfg: LeaseConfig) -> Self {
        Candidate {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observer: Observer::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// Reads the Lease and creates, renews or takes it over as [`decide`]
    /// says. One GET plus at most one write (a create, or a replace carrying
    /// the resourceVersion read). A lost compare-and-swap is `NotHeld`, not
    /// an error.
    pub async fn try_acquire_or_renew(&mut self) -> kube::Result<Attempt> {
        let me = self.cfg.identity.clone();
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(self.cfg.duration_secs()),
                    acquire_time: Some(now_micro()),
                    renew_time: Some(now_micro()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Attempt::Held { transitions: 0 }),
                Err(e) if is_conflict(&e) => Ok(Attempt::NotHeld {
                    holder: None,
                    retry_in: None,
                }),
                Err(e) => Err(e),
            };
        };

        let unchanged_for = self.observer.observe(record_key(&lease), Instant::now());
        let spec = lease.spec.clone().unwrap_or_default();
        let record_duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.cfg.lease_duration);
        let transitions = spec.lease_transitions.unwrap_or(0);
        tracing::debug!(
            holder = ?spec.holder_identity,
            ?unchanged_for,
            ?record_duration,
            "lease observed"
        );
        let mut new_spec = spec.clone();
        let transitions = match decide(
            spec.holder_identity.as_deref(),
            &me,
            unchanged_for,
            record_duration,
        ) {
            Decision::Wait { holder, expires_in } => {
                return Ok(Attempt::NotHeld {
                    holder: Some(holder),
                    retry_in: Some(expires_in),
                })
            }
            Decision::Renew => {
                new_spec.renew_time = Some(now_micro());
                new_spec.lease_duration_seconds = Some(self.cfg.duration_secs());
                transitions
            }
            Decision::TakeOver => {
                let t = transitions.saturating_add(1);
                new_spec.holder_identity = Some(me);
                new_spec.acquire_time = Some(now_micro());
                new_spec.renew_time = Some(now_micro());
                new_spec.lease_duration_seconds = Some(self.cfg.duration_secs());
                new_spec.lease_transitions = Some(t);
                t
            }
        };
        lease.spec = Some(new_spec);
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.observer.reset();
                Ok(Attempt::Held { transitions })
            }
            Err(e) if is_conflict(&e) => Ok(Attempt::NotHeld {
                holder: spec.holder_identity.filter(|h| !h.is_empty()),
                retry_in: None,
            }),
            Err(e) => Err(e),
        }
    }

    /// Clears the holder when it is us (a CAS write), so another candidate
    /// can take over at once. Returns whether we held the Lease.
    pub async fn release(&mut self) -> kube::Result<bool> {
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            return Ok(false);
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now_micro());
        lease.spec = Some(spec);
        self.api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await?;
        Ok(true)
    }
}

/// What an [`Elector`] currently believes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderState {
    /// We hold the Lease and may act as leader until `until` (and no later,
    /// whatever this channel says then: check [`LeaderState::is_leading`]).
    Leading {
        /// Start of the last successful renewal + the renew deadline.
        until: Instant,
        /// The Lease's `leaseTransitions` (grows with every change of holder).
        transitions: i32,
    },
    /// Someone else leads, or nobody we know of.
    Following {
        /// The holder, when known.
        holder: Option<String>,
    },
}

impl LeaderState {
    /// Whether this state allows acting as leader now.
    pub fn is_leading(&self) -> bool {
        self.is_leading_at(Instant::now())
    }

    /// Whether this state allows acting as leader at `now`.
    pub fn is_leading_at(&self, now: Instant) -> bool {
        matches!(self, LeaderState::Leading { until, .. } if now < *until)
    }
}

/// A candidate contending in a background tokio task. Dropping it (or
/// [`Elector::stop`]) stops renewing without releasing, as a crashed process
/// would; [`Elector::release`] is the clean shutdown.
pub struct Elector {
    task: JoinHandle<()>,
    state: watch::Receiver<LeaderState>,
    tx: Arc<watch::Sender<LeaderState>>,
    cfg: LeaseConfig,
    client: Client,
}

impl Elector {
    /// Starts contending (must be called inside a tokio runtime).
    pub fn start(client: Client, cfg: LeaseConfig) -> Self {
        let (tx, rx) = watch::channel(LeaderState::Following { holder: None });
        let tx = Arc::new(tx);
        let candidate = Candidate::new(client.clone(), cfg.clone());
        let task = tokio::spawn(run(candidate, tx.clone()));
        Elector {
            task,
            state: rx,
            tx,
            cfg,
            client,
        }
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.cfg.identity
    }

    /// The current state.
    pub fn state(&self) -> LeaderState {
        self.state.borrow().clone()
    }

    /// A receiver of every state change.
    pub fn subscribe(&self) -> watch::Receiver<LeaderState> {
        self.state.clone()
    }

    /// Whether this candidate may act as leader now.
    pub fn is_leader(&self) -> bool {
        self.state.borrow().is_leading()
    }

    /// Waits until this candidate leads; returns the Lease transitions.
    /// Never returns once the elector was stopped.
    pub async fn leading(&self) -> i32 {
        let mut rx = self.state.clone();
        loop {
            if let LeaderState::Leading { transitions, until } = *rx.borrow_and_update() {
                if Instant::now() < until {
                    return transitions;
                }
            }
            if rx.changed().await.is_err() {
                // The task ended (stopped): never leads again.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits until this candidate, having led, no longer may: another holder
    /// took over or its `until` passed without a renewal. Returns at once
    /// when it does not lead now.
    pub async fn lost(&self) {
        let mut rx = self.state.clone();
        loop {
            let until = match *rx.borrow_and_update() {
                LeaderState::Leading { until, .. } => until,
                LeaderState::Following { .. } => return,
            };
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep_until(until.into()) => return,
            }
        }
    }

    /// Stops renewing (without releasing the Lease): the others take over
    /// after a lease duration.
    pub fn stop(&self) {
        self.task.abort();
        self.tx
            .send_replace(LeaderState::Following { holder: None });
    }

    /// Stops contending and, when holding the Lease, clears its holder so the
    /// next candidate takes over at once. Returns whether we held it.
    pub async fn release(&self) -> kube::Result<bool> {
        self.stop();
        // Wait for the task to be gone, so no renewal of ours follows.
        let task = self.task.abort_handle();
        while !task.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut candidate = Candidate::new(self.client.clone(), self.cfg.clone());
        // A renewal already sent may still land and win the CAS: retry.
        let mut tries = 0;
        loop {
            match candidate.release().await {
                Err(e) if is_conflict(&e) && tries < 3 => tries += 1,
                other => return other,
            }
        }
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The background loop: attempt, publish, sleep.
async fn run(mut candidate: Candidate, tx: Arc<watch::Sender<LeaderState>>) {
    let cfg = candidate.config().clone();
    let mut until: Option<Instant> = None;
    loop {
        let started = Instant::now();
        // A holder's attempt must not outlive its leadership.
        let budget = until
            .map(|u| u.saturating_duration_since(started))
            .unwrap_or(cfg.renew_deadline)
            .max(Duration::from_millis(1));
        let mut next = cfg.retry_period;
        match tokio::time::timeout(budget, candidate.try_acquire_or_renew()).await {
            Ok(Ok(Attempt::Held { transitions })) => {
                let u = started + cfg.renew_deadline;
                until = Some(u);
                tx.send_replace(LeaderState::Leading {
                    until: u,
                    transitions,
                });
            }
            Ok(Ok(Attempt::NotHeld { holder, retry_in })) => {
                if until.take().is_some() {
                    tracing::warn!(identity = %cfg.identity, lease = %cfg.name, ?holder, "lost the lease");
                }
                tx.send_replace(LeaderState::Following { holder });
                if let Some(r) = retry_in {
                    // Look again right when the Lease may expire.
                    next = next.min(r + Duration::from_millis(10));
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(identity = %cfg.identity, lease = %cfg.name, error = %e, "lease attempt failed");
            }
            Err(_) => {
                tracing::warn!(identity = %cfg.identity, lease = %cfg.name, "lease attempt timed out");
            }
        }
        if let Some(u) = until {
            let now = Instant::now();
            if now >= u {
                tracing::warn!(identity = %cfg.identity, lease = %cfg.name, "could not renew the lease in time; stepping down");
                until = None;
                tx.send_replace(LeaderState::Following { holder: None });
            } else {
                next = next.min(u - now);
            }
        }
        tokio::time::sleep(next).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    #[test]
    fn free_lease_is_taken() {
        assert_eq!(decide(None, "a", Duration::ZERO, D), Decision::TakeOver);
        assert_eq!(decide(Some(""), "a", Duration::ZERO, D), Decision::TakeOver);
    }

    #[test]
    fn own_lease_is_renewed() {
        assert_eq!(
            decide(Some("a"), "a", Duration::from_secs(100), D),
            Decision::Renew
        );
    }

    #[test]
    fn live_lease_of_another_is_respected_until_it_expires() {
        assert_eq!(
            decide(Some("b"), "a", Duration::from_secs(14), D),
            Decision::Wait {
                holder: "b".into(),
                expires_in: Duration::from_secs(1)
            }
        );
        assert_eq!(
            decide(Some("b"), "a", Duration::from_secs(15), D),
            Decision::TakeOver
        );
    }

    #[test]
    fn the_observer_counts_from_the_first_sight_of_a_record() {
        let t0 = Instant::now();
        let mut o = Observer::default();
        assert_eq!(o.observe("r1", t0), Duration::ZERO);
        assert_eq!(o.observe("r1", t0 + D), D);
        // A changed record (a renewal) restarts the count.
        assert_eq!(o.observe("r2", t0 + D * 2), Duration::ZERO);
        assert_eq!(o.observe("r2", t0 + D * 3), D);
        o.reset();
        assert_eq!(o.observe("r2", t0 + D * 4), Duration::ZERO);
    }

    #[test]
    fn the_holder_stops_before_anyone_may_take_over() {
        // The holder renews at `start`; the write lands at `start + w`; a
        // rival first sees the new record at `start + w + r` and may take
        // over once it has been unchanged for the lease duration.
        let cfg = LeaseConfig::new(
            "ns",
            "l",
            "a",
            Duration::from_secs(4),
            Duration::from_millis(500),
        );
        assert!(cfg.validate().is_ok());
        let start = Instant::now();
        let holder = LeaderState::Leading {
            until: start + cfg.renew_deadline,
            transitions: 0,
        };
        for (w, r) in [(0, 0), (10, 0), (0, 300), (200, 400)] {
            let seen = start + Duration::from_millis(w + r);
            let mut o = Observer::default();
            o.observe("k", seen);
            let mut t = seen;
            while decide(Some("a"), "b", o.observe("k", t), cfg.lease_duration)
                != Decision::TakeOver
            {
                assert!(t < start + Duration::from_secs(10));
                t += Duration::from_millis(1);
            }
            assert!(!holder.is_leading_at(t), "both lead at {:?}", t - start);
            assert!(holder.is_leading_at(start + cfg.renew_deadline - Duration::from_millis(1)));
        }
    }

    #[test]
    fn config_invariants() {
        let mut cfg = LeaseConfig {
            namespace: "ns".into(),
            name: "moldau-operator".into(),
            identity: "pod-a".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        assert!(cfg.validate().is_ok());
        cfg.renew_deadline = Duration::from_secs(15);
        assert!(cfg.validate().is_err());
        cfg.renew_deadline = Duration::from_secs(10);
        cfg.retry_period = Duration::from_secs(10);
        assert!(cfg.validate().is_err());
        cfg.retry_period = Duration::from_secs(2);
        cfg.identity.clear();
        assert!(cfg.validate().is_err());
        let d = LeaseConfig::new(
            "ns",
            "l",
            "me",
            Duration::from_secs(15),
            Duration::from_secs(2),
        );
        assert_eq!(d.renew_deadline, Duration::from_secs(13));
        assert!(d.validate().is_ok());
        // Whole seconds in the Lease, rounded up.
        let mut s = d.clone();
        s.lease_duration = Duration::from_millis(1500);
        assert_eq!(s.duration_secs(), 2);
    }
}
