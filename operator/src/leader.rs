//! Leader election on a `coordination.k8s.io` Lease, so that of several
//! operator replicas exactly one reconciles.
//!
//! A thin wrapper over `moldau_coordination::lease`, the one elector the
//! brokers, the operator and the tests share (client-go's scheme: expiry
//! measured on the candidate's own monotonic clock, every write a
//! compare-and-swap on `resourceVersion`, the holder stepping down at the
//! renew deadline, before anyone else may take over). This module keeps the
//! operator's flag-shaped [`ElectionConfig`] and the acquire / hold /
//! release calls of `main`.

use std::time::Duration;

pub use moldau_coordination::lease::{decide, Decision, LeaderState};
use moldau_coordination::lease::{Attempt, Candidate, Elector, LeaseConfig};

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
        self.lease_config().validate()
    }

    /// The shared elector's settings.
    pub fn lease_config(&self) -> LeaseConfig {
        LeaseConfig {
            namespace: self.namespace.clone(),
            name: self.lease_name.clone(),
            identity: self.identity.clone(),
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        }
    }
}

/// Runs the election for one replica.
pub struct LeaderElector {
    client: kube::Client,
    cfg: ElectionConfig,
    candidate: Candidate,
    elector: Option<Elector>,
}

/// Why leadership ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost(pub String);

impl LeaderElector {
    /// An elector using `client` with `cfg`.
    pub fn new(client: kube::Client, cfg: ElectionConfig) -> Self {
        let candidate = Candidate::new(client.clone(), cfg.lease_config());
        LeaderElector {
            client,
            cfg,
            candidate,
            elector: None,
        }
    }

    /// One attempt (outside the background elector): returns whether this
    /// replica holds the Lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool> {
        Ok(matches!(
            self.candidate.try_acquire_or_renew().await?,
            Attempt::Held { .. }
        ))
    }

    /// Waits until this replica holds the Lease (contending in the
    /// background from the first call on).
    pub async fn acquire(&mut self) {
        let (client, cfg) = (self.client.clone(), self.cfg.lease_config());
        let elector = self
            .elector
            .get_or_insert_with(|| Elector::start(client, cfg));
        let transitions = elector.leading().await;
        tracing::info!(identity = %self.cfg.identity, lease = %self.cfg.lease_name, transitions, "acquired leadership");
    }

    /// Keeps renewing (in the background); returns when leadership is lost
    /// (another holder, or no successful renewal within the renew deadline).
    pub async fn hold(&mut self) -> Lost {
        let Some(elector) = &self.elector else {
            return Lost("never acquired".into());
        };
        elector.lost().await;
        match elector.state() {
            LeaderState::Following {
                holder: Some(holder),
            } => Lost(format!("another replica ({holder}) holds the lease")),
            _ => Lost(format!(
                "could not renew within {:?}",
                self.cfg.renew_deadline
            )),
        }
    }

    /// Gives the Lease up (if held) so another replica can take over at once.
    pub async fn release(&mut self) -> Result<()> {
        let res = match self.elector.take() {
            Some(elector) => elector.release().await,
            None => self.candidate.release().await,
        };
        res.map(|_| ())
            .map_err(|e| Error::Leadership(format!("releasing the lease: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ElectionConfig {
        ElectionConfig {
            lease_name: "moldau-operator".into(),
            namespace: "ns".into(),
            identity: "pod-a".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    #[test]
    fn config_invariants() {
        let mut cfg = cfg();
        assert!(cfg.validate().is_ok());
        cfg.renew_deadline = Duration::from_secs(15);
        assert!(cfg.validate().is_err());
        cfg.renew_deadline = Duration::from_secs(10);
        cfg.retry_period = Duration::from_secs(10);
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn flags_map_onto_the_shared_elector() {
        let l = cfg().lease_config();
        assert_eq!(l.name, "moldau-operator");
        assert_eq!(l.namespace, "ns");
        assert_eq!(l.identity, "pod-a");
        assert_eq!(l.renew_deadline, Duration::from_secs(10));
        assert_eq!(
            decide(Some("pod-a"), "pod-a", Duration::ZERO, l.lease_duration),
            Decision::Renew
        );
    }
}
