//! Leader election on a `coordination.k8s.io` Lease, so that of several
//! operator replicas exactly one reconciles.
//!
//! Follows client-go's scheme: a candidate takes the Lease when it is free or
//! when its record (holder, renew time) has not changed for the lease duration
//! as measured on the candidate's own monotonic clock (so clock skew between
//! nodes does not matter); the holder renews every retry period and gives up
//! leadership when it has not renewed for the renew deadline (shorter than
//! the lease duration, so it stops before anyone else may start). Writes are
//! compare-and-swap on `resourceVersion`. `decide` is the pure core.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use crate::error::{Error, Result};

/// Leader election settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionConfig {
    /// Lease name (`moldau-operator`).
    pub lease_name: String,
    /// Namespace of the Lease (the operator's).
    pub namespace: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long a Lease is valid without renewal.
    pub lease_duration: Duration,
    /// The holder gives up when it could not renew for this long.
    pub renew_deadline: Duration,
    /// Pause between attempts.
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// Checks the timing invariants (retry < renew deadline < lease duration).
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.lease_duration.is_zero() || self.renew_deadline >= self.lease_duration {
            return Err("the renew deadline must be shorter than the lease duration".into());
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err("the retry period must be shorter than the renew deadline".into());
        }
        if self.identity.is_empty() {
            return Err("the identity must not be empty".into());
        }
        Ok(())
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
        },
    }
}

/// Holder, renew time and resourceVersion of a Lease record.
type RecordKey = (Option<String>, Option<String>, Option<String>);

/// The Lease record fields that count as "changed" when they change.
fn record_key(lease: &Lease) -> RecordKey {
    let spec = lease.spec.clone().unwrap_or_default();
    (
        spec.holder_identity,
        spec.renew_time.map(|t| t.0.to_string()),
        lease.metadata.resource_version.clone(),
    )
}

/// Runs the election for one replica.
pub struct LeaderElector {
    api: Api<Lease>,
    cfg: ElectionConfig,
    observed: Option<(RecordKey, Instant)>,
}

/// Why leadership ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost(pub String);

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaderElector {
    /// An elector using `client` with `cfg`.
    pub fn new(client: kube::Client, cfg: ElectionConfig) -> Self {
        let api = Api::namespaced(client, &cfg.namespace);
        LeaderElector {
            api,
            cfg,
            observed: None,
        }
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.cfg.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// One attempt: returns whether this replica holds the Lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool> {
        let me = self.cfg.identity.clone();
        let Some(mut lease) = self.api.get_opt(&self.cfg.lease_name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.lease_name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: Some(Self::now()),
                    renew_time: Some(Self::now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(e.into()),
            };
        };

        let key = record_key(&lease);
        let now = Instant::now();
        let seen_at = match &self.observed {
            Some((k, at)) if *k == key => *at,
            _ => now,
        };
        self.observed = Some((key, seen_at));
        let spec = lease.spec.clone().unwrap_or_default();
        let record_duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.cfg.lease_duration);
        let decision = decide(
            spec.holder_identity.as_deref(),
            &me,
            now - seen_at,
            record_duration,
        );
        let mut new_spec = spec.clone();
        match decision {
            Decision::Wait { .. } => return Ok(false),
            Decision::Renew => {
                new_spec.renew_time = Some(Self::now());
                new_spec.lease_duration_seconds = Some(self.duration_secs());
            }
            Decision::TakeOver => {
                new_spec.holder_identity = Some(me);
                new_spec.acquire_time = Some(Self::now());
                new_spec.renew_time = Some(Self::now());
                new_spec.lease_duration_seconds = Some(self.duration_secs());
                new_spec.lease_transitions =
                    Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            }
        }
        lease.spec = Some(new_spec);
        match self
            .api
            .replace(&self.cfg.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&mut self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    tracing::info!(identity = %self.cfg.identity, lease = %self.cfg.lease_name, "acquired leadership");
                    return;
                }
                Ok(false) => tracing::debug!("lease held by another replica"),
                Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
            }
            tokio::time::sleep(self.cfg.retry_period).await;
        }
    }

    /// Keeps renewing; returns when leadership is lost (another holder, or no
    /// successful renewal within the renew deadline).
    pub async fn hold(&mut self) -> Lost {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            let left = self
                .cfg
                .renew_deadline
                .saturating_sub(last_renewal.elapsed());
            if left.is_zero() {
                return Lost(format!(
                    "could not renew within {:?}",
                    self.cfg.renew_deadline
                ));
            }
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => last_renewal = Instant::now(),
                Ok(Ok(false)) => return Lost("another replica holds the lease".into()),
                Ok(Err(e)) => tracing::warn!(error = %e, "lease renewal failed"),
                Err(_) => tracing::warn!("lease renewal timed out"),
            }
            if last_renewal.elapsed() >= self.cfg.renew_deadline {
                return Lost(format!(
                    "could not renew within {:?}",
                    self.cfg.renew_deadline
                ));
            }
        }
    }

    /// Gives the Lease up (if held) so another replica can take over at once.
    pub async fn release(&mut self) -> Result<()> {
        let Some(mut lease) = self.api.get_opt(&self.cfg.lease_name).await? else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        lease.spec = Some(spec);
        self.api
            .replace(&self.cfg.lease_name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
            .map_err(|e| Error::Leadership(format!("releasing the lease: {e}")))
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
            Decision::Wait { holder: "b".into() }
        );
        assert_eq!(
            decide(Some("b"), "a", Duration::from_secs(15), D),
            Decision::TakeOver
        );
    }

    #[test]
    fn config_invariants() {
        let mut cfg = ElectionConfig {
            lease_name: "moldau-operator".into(),
            namespace: "ns".into(),
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
    }
}
