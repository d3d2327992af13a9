//! What one client may take of a broker: connection slots (in all and per
//! client IP) and the bytes of requests in flight across the broker.
//!
//! Kafka's names and meaning: `max.connections`, `max.connections.per.ip`
//! (with `max.connections.per.ip.overrides`), `queued.max.request.bytes`.
//! A connection over a limit is accepted and closed at once, as Kafka does.
//! Request bytes are reserved as they arrive, a 64 KiB chunk ahead of the
//! buffer (`frame::FrameReader::read_body`), and released when the
//! response is written, so a flood of large frames waits (those clients are
//! simply not read) instead of exhausting memory, and a client that
//! announces a large frame but sends little holds little. A connection
//! reads at most a few requests ahead of the one it handles
//! (`connection::READ_AHEAD_REQUESTS`), and at most
//! `frame::READ_BUFFER_BYTES` past the frames it has taken; further
//! pipelined requests wait in the socket's kernel buffer, which bounds them.
//!
//! This module holds counters only; the accept loop and the connection task
//! (`server`, `protocol::connection`) call it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::parse_per_ip_overrides;

/// Connection limits, from the broker config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimitSettings {
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// Per-IP limits that replace `max_connections_per_ip` for those IPs.
    pub per_ip_overrides: HashMap<IpAddr, usize>,
}

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max.connections` reached.
    Broker,
    /// `max.connections.per.ip` (or its override) reached for this IP.
    PerIp,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Broker => "max_connections",
            Refusal::PerIp => "max_connections_per_ip",
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// Open connections, counted in all and per IP, and the limits they are
/// held to (replaced at run time by dynamic broker configs: a lower limit
/// refuses new connections and leaves open ones alone, as in Kafka).
#[derive(Debug)]
pub struct ConnectionLimiter {
    settings: Mutex<ConnectionLimitSettings>,
    counts: Mutex<Counts>,
}

/// A connection slot; dropping it frees the slot.
#[derive(Debug)]
pub struct ConnectionSlot {
    limiter: Arc<ConnectionLimiter>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut c = self.limiter.counts.lock();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_ip.remove(&self.ip);
            }
        }
    }
}

impl ConnectionLimiter {
    pub fn new(settings: ConnectionLimitSettings) -> Arc<Self> {
        Arc::new(Self {
            settings: Mutex::new(settings),
            counts: Mutex::new(Counts::default()),
        })
    }

    /// The limits in force.
    pub fn settings(&self) -> ConnectionLimitSettings {
        self.settings.lock().clone()
    }

    /// Replaces the limits; returns whether they changed. Open connections
    /// stay; the new limits decide about the next ones.
    pub fn set_settings(&self, settings: ConnectionLimitSettings) -> bool {
        let mut s = self.settings.lock();
        if *s == settings {
            return false;
        }
        *s = settings;
        true
    }

    /// Takes a slot for a new connection from `ip`, or says which limit
    /// refuses it.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, Refusal> {
        let (max_connections, per_ip_max) = {
            let s = self.settings.lock();
            let per_ip = s
                .per_ip_overrides
                .get(&ip)
                .copied()
                .unwrap_or(s.max_connections_per_ip);
            (s.max_connections, per_ip)
        };
        let mut c = self.counts.lock();
        if c.total >= max_connections {
            return Err(Refusal::Broker);
        }
        let mine = c.per_ip.get(&ip).copied().unwrap_or(0);
        if mine >= per_ip_max {
            return Err(Refusal::PerIp);
        }
        c.total += 1;
        *c.per_ip.entry(ip).or_insert(0) += 1;
        Ok(ConnectionSlot {
            limiter: self.clone(),
            ip,
        })
    }

    pub fn open(&self) -> usize {
        self.counts.lock().total
    }
}

/// Bytes of requests in flight across the broker (`queued.max.request.bytes`).
#[derive(Debug)]
pub struct RequestBudget {
    semaphore: Arc<Semaphore>,
    capacity: usize,
}

impl RequestBudget {
    /// A budget of `capacity` bytes. It is raised to `largest_frame` when
    /// smaller, so that every frame the broker accepts can be admitted.
    pub fn new(capacity: usize, largest_frame: usize) -> Self {
        let capacity = capacity.max(largest_frame).min(Semaphore::MAX_PERMITS);
        Self {
            semaphore: Arc::new(Semaphore::new(capacity)),
            capacity,
        }
    }

    /// Waits until `bytes` can be reserved; the permit releases them on drop.
    pub async fn reserve(&self, bytes: usize) -> OwnedSemaphorePermit {
        let n = u32::try_from(bytes.min(self.capacity)).unwrap_or(u32::MAX);
        self.semaphore
            .clone()
            .acquire_many_owned(n)
            .await
            .expect("the request budget's semaphore is never closed")
    }

    /// Bytes reserved right now.
    pub fn in_use(&self) -> usize {
        self.capacity
            .saturating_sub(self.semaphore.available_permits())
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl ConnectionLimitSettings {
    /// The limits of a broker config (static, or effective with dynamic
    /// values laid over it). Unless `max.connections` is set (statically
    /// or dynamically), it is capped at half the open-files limit: the
    /// other half stays for segment and index files, so clients can never
    /// lock the logs out of descriptors. An explicit setting is honoured
    /// as given.
    pub fn from_config(c: &crate::config::BrokerConfig) -> Result<Self, String> {
        let by_files = crate::resources::nofile_limits()
            .ok()
            .filter(|&(soft, _)| soft != libc::RLIM_INFINITY)
            .map(|(soft, _)| usize::try_from(soft / 2).unwrap_or(usize::MAX))
            .unwrap_or(usize::MAX);
        let explicit =
            c.raw.contains_key("max.connections") || c.dynamic.contains_key("max.connections");
        Ok(Self {
            max_connections: if explicit {
                c.max_connections
            } else {
                c.max_connections.min(by_files)
            },
            max_connections_per_ip: c.max_connections_per_ip,
            per_ip_overrides: parse_per_ip_overrides(&c.max_connections_per_ip_overrides)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(total: usize, per_ip: usize) -> Arc<ConnectionLimiter> {
        ConnectionLimiter::new(ConnectionLimitSettings {
            max_connections: total,
            max_connections_per_ip: per_ip,
            per_ip_overrides: parse_per_ip_overrides("127.0.0.9:0, [::1]:5").unwrap(),
        })
    }

    #[test]
    fn slots_are_counted_per_ip_and_in_all_and_freed_on_drop() {
        let l = limiter(3, 2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let a1 = l.admit(a).unwrap();
        let _a2 = l.admit(a).unwrap();
        assert_eq!(l.admit(a).unwrap_err(), Refusal::PerIp);
        let b1 = l.admit(b).unwrap();
        assert_eq!(l.admit(b).unwrap_err(), Refusal::Broker);
        assert_eq!(l.open(), 3);
        drop(a1);
        assert_eq!(l.open(), 2);
        let _a3 = l.admit(a).expect("a slot freed by drop");
        drop(b1);
        let _b2 = l.admit(b).unwrap();
    }

    #[test]
    fn overrides_replace_the_per_ip_limit() {
        let l = limiter(100, 2);
        let blocked: IpAddr = "127.0.0.9".parse().unwrap();
        assert_eq!(l.admit(blocked).unwrap_err(), Refusal::PerIp);
        let v6: IpAddr = "::1".parse().unwrap();
        let slots: Vec<_> = (0..5).map(|_| l.admit(v6).unwrap()).collect();
        assert_eq!(l.admit(v6).unwrap_err(), Refusal::PerIp);
        assert_eq!(slots.len(), 5);
        assert!(parse_per_ip_overrides("nohost").is_err());
        assert!(parse_per_ip_overrides("example:3").is_err());
        assert!(parse_per_ip_overrides("").unwrap().is_empty());
    }

    #[test]
    fn new_limits_decide_about_new_connections_and_keep_open_ones() {
        let l = limiter(100, 3);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let open: Vec<_> = (0..3).map(|_| l.admit(a).unwrap()).collect();
        let mut lower = l.settings();
        lower.max_connections_per_ip = 1;
        assert!(l.set_settings(lower.clone()));
        assert!(!l.set_settings(lower.clone()), "unchanged");
        assert_eq!(l.admit(a).unwrap_err(), Refusal::PerIp);
        assert_eq!(l.open(), 3, "open connections stay");
        // an override for this IP wins over the lowered default
        lower.per_ip_overrides.insert(a, 4);
        l.set_settings(lower.clone());
        let _fourth = l.admit(a).unwrap();
        assert_eq!(l.admit(a).unwrap_err(), Refusal::PerIp);
        lower.max_connections = 4;
        lower.per_ip_overrides.clear();
        lower.max_connections_per_ip = 10;
        l.set_settings(lower);
        assert_eq!(l.admit(a).unwrap_err(), Refusal::Broker);
        drop(open);
        let _again = l.admit(a).unwrap();
    }

    #[test]
    fn settings_come_from_the_effective_config() {
        let static_config =
            crate::config::BrokerConfig::load(None, &["max.connections.per.ip=7".into()]).unwrap();
        let s = ConnectionLimitSettings::from_config(&static_config).unwrap();
        assert_eq!(s.max_connections_per_ip, 7);
        let mut dynamic = crate::config_values::BrokerConfigs::new();
        let default = dynamic.entry(String::new()).or_default();
        default.insert("max.connections.per.ip".into(), "2".into());
        default.insert("max.connections".into(), "5".into());
        default.insert(
            "max.connections.per.ip.overrides".into(),
            "127.0.0.3:9".into(),
        );
        let eff = crate::dynamic_config::effective(&static_config, &dynamic, 1).unwrap();
        let s = ConnectionLimitSettings::from_config(&eff).unwrap();
        assert_eq!((s.max_connections, s.max_connections_per_ip), (5, 2));
        assert_eq!(
            s.per_ip_overrides[&"127.0.0.3".parse::<IpAddr>().unwrap()],
            9
        );
    }

    #[tokio::test]
    async fn the_budget_holds_back_frames_until_bytes_are_released() {
        let budget = Arc::new(RequestBudget::new(100, 10));
        let first = budget.reserve(70).await;
        assert_eq!(budget.in_use(), 70);
        let b = budget.clone();
        let waiting = tokio::spawn(async move { b.reserve(50).await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "70 + 50 exceeds the budget of 100");
        drop(first);
        let second = waiting.await.unwrap();
        assert_eq!(budget.in_use(), 50);
        drop(second);
        assert_eq!(budget.in_use(), 0);
        // a budget smaller than the largest frame grows to it
        assert_eq!(RequestBudget::new(10, 1000).capacity(), 1000);
    }
}
