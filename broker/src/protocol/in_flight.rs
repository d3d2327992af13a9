//! Requests being handled, each with the time by which it must have been
//! answered: its own timeout where the request carries one (a produce's
//! `timeout_ms`, a fetch's `max_wait_ms`, a join's rebalance timeout),
//! else [`DEFAULT_DEADLINE`], plus [`GRACE`]. A broker never holds a
//! request past that, so any request found past its deadline is a bug
//! (an `acks=all` produce waiting on a high watermark that no longer
//! moves, a handler that never returns): `/metrics` reports them
//! (`moldau_requests_overdue`, at the time of the scrape) and counts those
//! answered late (`moldau_requests_answered_overdue_total`), and the log
//! names each once it is overdue. Issue 40's unexplained producer stall is
//! what this watches for.
//!
//! Owns only this registry; it decides nothing about the requests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use parking_lot::Mutex;

/// The deadline of a request that names no timeout of its own: the
/// clients' default `request.timeout.ms`.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);
/// Time beyond a request's own timeout before it counts as overdue.
pub const GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
struct Entry {
    api: ApiKey,
    deadline: Instant,
}

/// The registry of requests in flight on every connection of a broker.
#[derive(Debug, Default)]
pub struct InFlight {
    next: AtomicU64,
    entries: Mutex<HashMap<u64, Entry>>,
}

/// A request's place in the registry; answered (removed) when dropped.
#[derive(Debug)]
pub struct Tracked<'a> {
    registry: &'a InFlight,
    id: u64,
    deadline: Instant,
}

impl Tracked<'_> {
    /// Whether the request is answered past its deadline (call when it is).
    pub fn overdue_at(&self, now: Instant) -> bool {
        now > self.deadline
    }
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.registry.entries.lock().remove(&self.id);
    }
}

impl InFlight {
    /// Registers a request of `api` received at `now` that may take
    /// `own_timeout` (none: [`DEFAULT_DEADLINE`]).
    pub fn track(&self, api: ApiKey, own_timeout: Option<Duration>, now: Instant) -> Tracked<'_> {
        let deadline = now + own_timeout.unwrap_or(DEFAULT_DEADLINE) + GRACE;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.entries.lock().insert(id, Entry { api, deadline });
        Tracked {
            registry: self,
            id,
            deadline,
        }
    }

    /// The requests past their deadline at `now`, by API (for `/metrics`
    /// and the log).
    pub fn overdue(&self, now: Instant) -> Vec<(ApiKey, Duration)> {
        self.entries
            .lock()
            .values()
            .filter(|e| now > e.deadline)
            .map(|e| (e.api, now - e.deadline))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_past_its_own_timeout_and_the_grace_is_overdue_until_answered() {
        let registry = InFlight::default();
        let t0 = Instant::now();
        let produce = registry.track(ApiKey::Produce, Some(Duration::from_secs(2)), t0);
        let metadata = registry.track(ApiKey::Metadata, None, t0);
        assert!(registry.overdue(t0 + Duration::from_secs(7)).is_empty());
        let late = registry.overdue(t0 + Duration::from_secs(8));
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].0, ApiKey::Produce);
        assert!(produce.overdue_at(t0 + Duration::from_secs(8)));
        assert!(!metadata.overdue_at(t0 + Duration::from_secs(8)));
        drop(produce);
        assert!(registry.overdue(t0 + Duration::from_secs(8)).is_empty());
        assert_eq!(registry.overdue(t0 + Duration::from_secs(36)).len(), 1);
        drop(metadata);
        assert!(registry.entries.lock().is_empty());
    }
}
