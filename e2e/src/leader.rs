//! Lease-based leader election for tests: a thin wrapper over
//! `moldau_coordination::lease`, the elector brokers and the operator use
//! (client-go's scheme; every write a compare-and-swap on the Lease's
//! `resourceVersion`; a holder leads only until the start of its last
//! successful renewal plus the lease duration minus a margin, before any
//! other contender may take over).

use std::time::Duration;

use kube::Client;

pub use moldau_coordination::lease::{Attempt, Candidate, LeaderState};

/// Parameters of one contender.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a lease stays valid without renewal.
    pub lease_duration: Duration,
    /// How often the holder renews and others retry.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// The shared elector's settings (margin: one retry period, at most a
    /// quarter of the lease duration).
    pub fn shared(&self) -> moldau_coordination::lease::LeaseConfig {
        moldau_coordination::lease::LeaseConfig::new(
            self.namespace.clone(),
            self.name.clone(),
            self.identity.clone(),
            self.lease_duration,
            self.retry_period,
        )
    }
}

/// A contender running in the background. Dropping it (or [`Elector::stop`])
/// stops renewing without releasing, as a crashed process would.
pub struct Elector {
    inner: moldau_coordination::lease::Elector,
}

impl Elector {
    /// Starts contending.
    pub fn start(client: Client, cfg: LeaseConfig) -> Self {
        Elector {
            inner: moldau_coordination::lease::Elector::start(client, cfg.shared()),
        }
    }

    /// Whether this contender currently leads.
    pub fn is_leader(&self) -> bool {
        self.inner.is_leader()
    }

    pub fn identity(&self) -> &str {
        self.inner.identity()
    }

    /// The current state.
    pub fn state(&self) -> LeaderState {
        self.inner.state()
    }

    /// Stops renewing (without releasing the lease).
    pub fn stop(&self) {
        self.inner.stop();
    }

    /// Stops and releases the lease (clean shutdown).
    pub async fn release(self) -> kube::Result<bool> {
        self.inner.release().await
    }
}
