//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! leaderelection package does it (kube-runtime 5 has no such helper).
//!
//! Every write is a compare-and-swap on the Lease's `resourceVersion`, so two
//! contenders can never both succeed in taking the same expired lease. A
//! holder considers itself leader only until `start of its last successful
//! renewal + lease duration - margin`, which is earlier than the moment any
//! other contender may take the lease over (`renewTime + lease duration`), so
//! at most one contender believes it leads at any time (one machine, one
//! clock).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

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

/// Result of one acquire-or-renew attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the lease (acquired now or renewed).
    Held { transitions: i32 },
    /// Someone else holds a valid lease.
    HeldBy(String),
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// One acquire-or-renew step.
pub async fn try_acquire_or_renew(api: &Api<Lease>, cfg: &LeaseConfig) -> kube::Result<Attempt> {
    let dur_secs = cfg.lease_duration.as_secs().max(1) as i32;
    let existing = api.get_opt(&cfg.name).await?;
    let Some(mut lease) = existing else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(cfg.identity.clone()),
                lease_duration_seconds: Some(dur_secs),
                acquire_time: Some(now_micro()),
                renew_time: Some(now_micro()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Attempt::Held { transitions: 0 }),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::HeldBy(String::new())),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let transitions = spec.lease_transitions.unwrap_or(0);
    if holder == cfg.identity {
        spec.renew_time = Some(now_micro());
        spec.lease_duration_seconds = Some(dur_secs);
        return match api.replace(&cfg.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(Attempt::Held { transitions }),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::HeldBy(String::new())),
            Err(e) => Err(e),
        };
    }
    let valid_for =
        Duration::from_secs(spec.lease_duration_seconds.unwrap_or(dur_secs).max(0) as u64);
    let expired = match &spec.renew_time {
        None => true,
        Some(MicroTime(t)) => {
            let age = Timestamp::now().duration_since(*t);
            holder.is_empty() || age.as_secs_f64() > valid_for.as_secs_f64()
        }
    };
    if !expired {
        return Ok(Attempt::HeldBy(holder));
    }
    let transitions = transitions + 1;
    spec.holder_identity = Some(cfg.identity.clone());
    spec.lease_duration_seconds = Some(dur_secs);
    spec.acquire_time = Some(now_micro());
    spec.renew_time = Some(now_micro());
    spec.lease_transitions = Some(transitions);
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(Attempt::Held { transitions }),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::HeldBy(holder)),
        Err(e) => Err(e),
    }
}

/// A contender running in the background. Dropping it (or [`Elector::stop`])
/// stops renewing without releasing, as a crashed process would.
pub struct Elector {
    task: JoinHandle<()>,
    valid_until: watch::Receiver<Option<Instant>>,
    cfg: Arc<LeaseConfig>,
}

impl Elector {
    /// Starts contending.
    pub fn start(client: Client, cfg: LeaseConfig) -> Self {
        let cfg = Arc::new(cfg);
        let (tx, rx) = watch::channel(None);
        let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
        let c = cfg.clone();
        let margin = c.retry_period.min(c.lease_duration / 4);
        let task = tokio::spawn(async move {
            loop {
                let started = Instant::now();
                match try_acquire_or_renew(&api, &c).await {
                    Ok(Attempt::Held { .. }) => {
                        let _ = tx.send(Some(started + c.lease_duration - margin));
                    }
                    Ok(Attempt::HeldBy(_)) => {
                        let _ = tx.send(None);
                    }
                    Err(e) => {
                        tracing::warn!(identity = %c.identity, "lease attempt failed: {e}");
                    }
                }
                tokio::time::sleep(c.retry_period).await;
            }
        });
        Elector {
            task,
            valid_until: rx,
            cfg,
        }
    }

    /// Whether this contender currently leads.
    pub fn is_leader(&self) -> bool {
        matches!(*self.valid_until.borrow(), Some(t) if Instant::now() < t)
    }

    pub fn identity(&self) -> &str {
        &self.cfg.identity
    }

    /// Stops renewing (without releasing the lease).
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Elector {
    fn drop(&mut self) {
        self.task.abort();
    }
}
