//! The replica manager: applies each metadata image's roles to the
//! partitions this broker holds (leader or follower, in which epoch), keeps
//! exactly one [`Fetcher`] per leader broker it follows partitions of, and
//! sends the ISR changes its leaders propose to the controller — those of
//! followers that caught up (from the fetch handler) and those of followers
//! that fell behind (checked every half `replica.lag.time.max.ms`).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use super::fetcher::{FetchSet, Fetcher};
use super::settings::FetchSettings;
use super::throttle::{self, RateQuota};
use crate::broker::Broker;
use crate::controller::link::ControllerLink;
use crate::image::MetadataImage;
use crate::partition::{IsrProposal, Partition};
use crate::security::tls::TlsState;
use crate::topics::TopicManager;

#[derive(Debug)]
pub struct ReplicaManager {
    node: i32,
    settings: FetchSettings,
    /// The address followers' connections leave from (the listener's), so
    /// a cut between two brokers' addresses separates them.
    bind: OnceLock<IpAddr>,
    /// The inter-broker listener's TLS, when it is a TLS listener: fetchers
    /// dial the leaders' listener with it.
    tls: OnceLock<Arc<TlsState>>,
    /// This process's registration: fetchers authenticate with it.
    incarnation: OnceLock<uuid::Uuid>,
    fetchers: Mutex<HashMap<i32, Fetcher>>,
    proposals: mpsc::UnboundedSender<IsrProposal>,
    pending: Mutex<Option<mpsc::UnboundedReceiver<IsrProposal>>>,
}

impl ReplicaManager {
    pub fn new(node: i32, settings: FetchSettings) -> Self {
        let (proposals, rx) = mpsc::unbounded_channel();
        Self {
            node,
            settings,
            bind: OnceLock::new(),
            incarnation: OnceLock::new(),
            tls: OnceLock::new(),
            fetchers: Mutex::new(HashMap::new()),
            proposals,
            pending: Mutex::new(Some(rx)),
        }
    }

    /// Followers' connections leave from `ip` (the listener's address,
    /// when it is a specific one).
    pub fn bind_to(&self, ip: IpAddr) {
        if !ip.is_unspecified() {
            let _ = self.bind.set(ip);
        }
    }

    /// Connections to other brokers use TLS (set once, at start, on a
    /// TLS listener: the other brokers' listeners are TLS too).
    pub fn use_tls(&self, tls: Arc<TlsState>) {
        let _ = self.tls.set(tls);
    }

    /// The TLS connections to other brokers use, if any.
    pub fn tls(&self) -> Option<Arc<TlsState>> {
        self.tls.get().cloned()
    }

    /// The incarnation this process registers with (set once, at start).
    pub fn set_incarnation(&self, incarnation: uuid::Uuid) {
        let _ = self.incarnation.set(incarnation);
    }

    /// The address this broker's connections to others leave from, if set.
    pub fn bind_address(&self) -> Option<IpAddr> {
        self.bind.get().copied()
    }

    /// The incarnation this process registered with, once it has.
    pub fn incarnation(&self) -> Option<uuid::Uuid> {
        self.incarnation.get().copied()
    }

    /// Queues an ISR change for the controller.
    pub fn propose(&self, p: IsrProposal) {
        let _ = self.proposals.send(p);
    }

    /// Gives every partition held here its role in `image` and points the
    /// fetchers at the leaders of the partitions followed. Call before the
    /// image is installed, so no request sees a role the partition does
    /// not have yet. Needs a Tokio runtime (fetchers are tasks).
    pub fn apply_image(&self, topics: &TopicManager, image: &MetadataImage) {
        self.apply_dynamic_configs(image);
        let mut follow: HashMap<i32, Vec<Arc<Partition>>> = HashMap::new();
        let mut throttled: HashMap<i32, BTreeSet<(String, i32)>> = HashMap::new();
        for topic in topics.all() {
            let Some(t) = image
                .topic(&topic.meta.name)
                .filter(|t| t.id == topic.meta.id)
            else {
                continue;
            };
            for p in &topic.partitions {
                let Some(pi) = t.partition(p.index) else {
                    continue;
                };
                if !pi.replicas.contains(&self.node) {
                    continue;
                }
                if let Err(e) = p.apply_image(self.node, pi) {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "cannot take the partition's role");
                    continue;
                }
                if pi.leader != self.node && pi.leader >= 0 {
                    follow.entry(pi.leader).or_default().push(p.clone());
                    let config = t.configs.get(throttle::FOLLOWER_REPLICAS);
                    let in_sync = pi.isr.contains(&self.node);
                    if throttle::throttled(config.map(String::as_str), p.index, self.node, in_sync)
                    {
                        throttled
                            .entry(pi.leader)
                            .or_default()
                            .insert((p.topic.clone(), p.index));
                    }
                }
            }
        }
        // a leader not in service has no fetcher: its partitions wait
        let follow: Vec<(i32, String, Vec<Arc<Partition>>)> = follow
            .into_iter()
            .filter_map(|(leader, partitions)| {
                let b = image.broker(leader)?;
                Some((leader, format!("{}:{}", b.host, b.port), partitions))
            })
            .collect();
        let mut fetchers = self.fetchers.lock();
        let unfollowed: Vec<i32> = fetchers
            .keys()
            .filter(|leader| !follow.iter().any(|(l, _, _)| l == *leader))
            .copied()
            .collect();
        for leader in unfollowed {
            if let Some(f) = fetchers.remove(&leader) {
                f.retire();
            }
        }
        for (leader, address, partitions) in follow {
            let set = FetchSet {
                address,
                partitions,
                throttled: throttled.remove(&leader).unwrap_or_default(),
            };
            match fetchers.get(&leader) {
                Some(f) => f.update(set),
                None => {
                    let f = Fetcher::start(
                        self.node,
                        leader,
                        self.settings.clone(),
                        self.bind.get().copied(),
                        self.tls.get().cloned(),
                        self.incarnation.get().copied(),
                        set,
                    );
                    fetchers.insert(leader, f);
                }
            }
        }
    }

    /// Takes the replication throttle rates of an image's dynamic broker
    /// configs (else the static properties).
    pub fn apply_dynamic_configs(&self, image: &MetadataImage) {
        use crate::dynamic_config::{rate, FOLLOWER_THROTTLED_RATE, LEADER_THROTTLED_RATE};
        let s = &self.settings;
        let configs = &image.broker_configs;
        s.leader_quota.set_limit(rate(
            configs,
            self.node,
            LEADER_THROTTLED_RATE,
            s.leader_rate,
        ));
        s.follower_quota.set_limit(rate(
            configs,
            self.node,
            FOLLOWER_THROTTLED_RATE,
            s.follower_rate,
        ));
    }

    /// The leader-side replication throttle (the fetch handler counts
    /// what it sends to throttled followers).
    pub fn leader_quota(&self) -> &RateQuota {
        &self.settings.leader_quota
    }

    /// Stops every fetcher (shutdown).
    pub fn stop(&self) {
        self.fetchers.lock().clear();
    }

    /// The leaders this broker fetches from (for tests and metrics).
    pub fn fetching_from(&self) -> Vec<i32> {
        let mut v: Vec<i32> = self.fetchers.lock().keys().copied().collect();
        v.sort_unstable();
        v
    }
}

/// Sends ISR changes to the controller until `shutdown`: those proposed
/// by fetches, and shrinks of followers that fell behind.
pub async fn run_isr_changes(
    broker: Arc<Broker>,
    link: Arc<ControllerLink>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(mut proposals) = broker.replicas.pending.lock().take() else {
        return;
    };
    let lag = broker.replicas.settings.lag_max_ms;
    let mut tick = tokio::time::interval(Duration::from_millis((lag / 2).clamp(50, 30_000) as u64));
    loop {
        tokio::select! {
            Some(p) = proposals.recv() => send(&broker, &link, p),
            _ = tick.tick() => {
                for topic in broker.topics.all() {
                    for p in &topic.partitions {
                        if let Some(shrink) = p.isr_shrink(lag) {
                            tracing::warn!(topic = %shrink.topic, partition = shrink.index, isr = ?shrink.isr, "followers fell behind; shrinking the ISR");
                            send(&broker, &link, shrink);
                        }
                    }
                }
            }
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
        }
    }
}

/// One ISR change, in its own task (one per partition is pending at most).
fn send(broker: &Arc<Broker>, link: &Arc<ControllerLink>, p: IsrProposal) {
    let (broker, link) = (broker.clone(), link.clone());
    tokio::spawn(async move {
        let answer = match link.alter_partition(&p).await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cannot send an ISR change");
                None
            }
        };
        if answer.is_some() {
            if p.shrink {
                broker.metrics.isr_shrinks.inc();
            } else {
                broker.metrics.isr_expands.inc();
            }
        }
        if let Some(partition) = broker.topics.partition(&p.topic, p.index) {
            partition.isr_answered(&p, answer);
        }
    });
}
