//! Replication throttles, as Kafka has them for moving replicas without
//! starving clients: which replicas are throttled (the topic configs
//! `leader.replication.throttled.replicas` and
//! `follower.replication.throttled.replicas`, each `*` or a list of
//! `partition:broker` entries — an entry throttles that partition on that
//! broker) and one byte-rate quota per direction and broker
//! (`leader.replication.throttled.rate`,
//! `follower.replication.throttled.rate`).
//!
//! Kafka's rules, kept here: only a replica outside the ISR is throttled
//! (an in-sync follower is never slowed, so acks=all is unaffected); while
//! the rate of throttled bytes over the last [`WINDOWS`] seconds is above
//! the limit, a leader answers a throttled partition's fetch without data
//! and a follower leaves it out of its fetch. Pure decisions plus a small
//! rate meter; the fetch paths consult them.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// The leader-side topic config.
pub const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
/// The follower-side topic config.
pub const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";
/// How many one-second windows the rate is measured over (Kafka's
/// `replication.quota.window.num` default).
pub const WINDOWS: i64 = 11;

/// A throttled-replicas config value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ThrottledReplicas {
    #[default]
    None,
    /// `*`: every replica of the topic.
    All,
    /// `partition:broker` entries.
    Listed(BTreeSet<(i32, i32)>),
}

impl ThrottledReplicas {
    /// Parses `*`, an empty value, or `p:b,p:b,…` (whitespace allowed).
    pub fn parse(value: &str) -> Result<Self, String> {
        let value = value.trim();
        if value.is_empty() {
            return Ok(Self::None);
        }
        if value == "*" {
            return Ok(Self::All);
        }
        let mut listed = BTreeSet::new();
        for entry in value.split(',') {
            let (p, b) = entry.trim().split_once(':').ok_or_else(|| {
                format!("{entry:?} is not partition:broker (expected * or a list of them)")
            })?;
            let number = |s: &str| {
                s.trim()
                    .parse::<i32>()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| format!("{entry:?}: {s:?} is not a partition or broker id"))
            };
            listed.insert((number(p)?, number(b)?));
        }
        Ok(Self::Listed(listed))
    }

    /// Whether `partition` is throttled on broker `broker`.
    pub fn contains(&self, partition: i32, broker: i32) -> bool {
        match self {
            Self::None => false,
            Self::All => true,
            Self::Listed(l) => l.contains(&(partition, broker)),
        }
    }
}

/// Whether a replica of `partition` on `broker` is throttled now, given
/// the topic's config value (absent: not throttled) and whether the
/// replica concerned is in the ISR.
pub fn throttled(config: Option<&str>, partition: i32, broker: i32, in_sync: bool) -> bool {
    !in_sync
        && config
            .and_then(|v| ThrottledReplicas::parse(v).ok())
            .is_some_and(|t| t.contains(partition, broker))
}

/// A byte-rate limit measured over the last [`WINDOWS`] one-second
/// windows; `u64::MAX` is no limit. The limit can change at run time.
#[derive(Debug)]
pub struct RateQuota {
    limit: AtomicU64,
    /// `(second, bytes)` of the recent windows, oldest first.
    windows: Mutex<VecDeque<(i64, u64)>>,
}

impl RateQuota {
    pub fn new(bytes_per_second: u64) -> Self {
        Self {
            limit: AtomicU64::new(bytes_per_second),
            windows: Mutex::new(VecDeque::new()),
        }
    }

    pub fn set_limit(&self, bytes_per_second: u64) {
        self.limit.store(bytes_per_second, Ordering::Relaxed);
    }

    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Counts `bytes` sent or received at `now_ms`.
    pub fn record(&self, bytes: u64, now_ms: i64) {
        if bytes == 0 || self.limit() == u64::MAX {
            return;
        }
        let second = now_ms.div_euclid(1000);
        let mut w = self.windows.lock();
        match w.back_mut() {
            Some((s, b)) if *s == second => *b = b.saturating_add(bytes),
            _ => w.push_back((second, bytes)),
        }
        while w.front().is_some_and(|(s, _)| *s <= second - WINDOWS) {
            w.pop_front();
        }
    }

    /// Whether the rate over the recent windows is above the limit (the
    /// elapsed time counts from the oldest window kept, at least one
    /// second, so a first burst is not judged over a sliver of time).
    pub fn exceeded(&self, now_ms: i64) -> bool {
        let limit = self.limit();
        if limit == u64::MAX {
            return false;
        }
        let second = now_ms.div_euclid(1000);
        let w = self.windows.lock();
        let recent = w.iter().filter(|(s, _)| *s > second - WINDOWS);
        let (oldest, total) = recent.fold((second, 0u64), |(o, t), (s, b)| {
            (o.min(*s), t.saturating_add(*b))
        });
        let elapsed_ms = (now_ms - oldest * 1000).max(1000) as u64;
        total.saturating_mul(1000) / elapsed_ms > limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_replica_lists_parse_as_kafka_writes_them() {
        assert_eq!(ThrottledReplicas::parse(""), Ok(ThrottledReplicas::None));
        assert_eq!(ThrottledReplicas::parse(" * "), Ok(ThrottledReplicas::All));
        let l = ThrottledReplicas::parse("0:101, 0:102,1:101").unwrap();
        assert!(l.contains(0, 101) && l.contains(0, 102) && l.contains(1, 101));
        assert!(!l.contains(1, 102) && !l.contains(2, 101));
        for bad in ["0", "a:1", "0:-1", "0:1,", "0:1;1:2"] {
            assert!(ThrottledReplicas::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_listed_replicas_outside_the_isr_are_throttled() {
        assert!(throttled(Some("0:2"), 0, 2, false));
        assert!(!throttled(Some("0:2"), 0, 2, true), "in sync: never slowed");
        assert!(!throttled(Some("0:2"), 0, 3, false));
        assert!(!throttled(Some("0:2"), 1, 2, false));
        assert!(throttled(Some("*"), 7, 9, false));
        assert!(!throttled(None, 0, 2, false));
        assert!(!throttled(Some("garbage"), 0, 2, false));
    }

    #[test]
    fn the_rate_is_measured_over_the_recent_windows() {
        let q = RateQuota::new(1000);
        let t0 = 1_000_000;
        assert!(!q.exceeded(t0));
        q.record(900, t0);
        assert!(!q.exceeded(t0 + 10), "900 B within the first second");
        q.record(200, t0 + 20);
        assert!(q.exceeded(t0 + 30), "1100 B in one second");
        // two seconds later the same bytes are 550 B/s
        assert!(!q.exceeded(t0 + 2000));
        // and after the windows pass they no longer count
        q.record(10_000, t0 + 3000);
        assert!(q.exceeded(t0 + 3000));
        assert!(!q.exceeded(t0 + 3000 + WINDOWS * 1000));
        // no limit: never exceeded, nothing kept
        let free = RateQuota::new(u64::MAX);
        free.record(u64::MAX, t0);
        assert!(!free.exceeded(t0));
        free.set_limit(1);
        assert!(!free.exceeded(t0), "nothing was counted while unlimited");
        free.record(10, t0);
        assert!(free.exceeded(t0));
    }
}
