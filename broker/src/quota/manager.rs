//! Enforcement of client quotas on one broker (Kafka's
//! `ClientQuotaManager`): a rate meter per quota kind and client, fed by
//! the produce path (bytes in), the fetch path (bytes out) and the request
//! path (handling time), and the throttle time a client over its quota
//! must wait. The connection then carries `throttle_time_ms` in its
//! response and is muted for that long (KIP-219), so a client that ignores
//! the field cannot get around it.
//!
//! A quota set on an entity with a default part (e.g. the default client
//! id) is a quota *per* client, as in Kafka: each client id gets its own
//! meter. A quota on a client-id prefix (a Moldau extension) is shared by
//! all the clients it matches, like a named entity's. Brokers' replication traffic is never counted here (replication
//! has its own throttles).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::entity::{
    resolve, ClientQuotas, QuotaClient, QuotaEntity, QuotaName, CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
};
use super::meter::{throttle_ms, RateMeter, WINDOWS};

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    /// Bytes produced per second (`producer_byte_rate`).
    Produce,
    /// Bytes fetched per second (`consumer_byte_rate`).
    Fetch,
    /// Request-handling time, as a percentage of one thread
    /// (`request_percentage`).
    Request,
}

impl QuotaKind {
    pub fn key(self) -> &'static str {
        match self {
            Self::Produce => PRODUCER_BYTE_RATE,
            Self::Fetch => CONSUMER_BYTE_RATE,
            Self::Request => REQUEST_PERCENTAGE,
        }
    }

    /// A limit in the meter's unit per second: bytes, or milliseconds of
    /// handling (100 % of one thread = 1000 ms per second).
    fn limit_per_second(self, quota: f64) -> f64 {
        match self {
            Self::Request => quota * 10.0,
            _ => quota,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Produce => "produce",
            Self::Fetch => "fetch",
            Self::Request => "request",
        }
    }
}

/// The meter's entity for a client: the matched entity with its default
/// parts replaced by the client's own names (one meter per client). A
/// client-id prefix stays: the clients it matches share one meter.
fn metered(entity: &QuotaEntity, user: &str, client_id: &str) -> QuotaEntity {
    let own = |part: &Option<QuotaName>, name: &str| {
        part.as_ref().map(|p| match p {
            QuotaName::Prefix(_) => p.clone(),
            _ => QuotaName::Name(name.to_string()),
        })
    };
    QuotaEntity {
        user: own(&entity.user, user),
        client_id: own(&entity.client_id, client_id),
    }
}

/// Labels of the quota metrics: kind and client id.
pub type QuotaLabels = Vec<(String, String)>;

#[derive(Debug, Default)]
pub struct QuotaManager {
    meters: Mutex<HashMap<(QuotaKind, QuotaEntity), Arc<RateMeter>>>,
    /// `moldau_quota_throttle_time_ms_total{kind, client_id}`.
    pub throttle_time: Family<QuotaLabels, Counter>,
    /// `moldau_quota_recorded_total{kind, client_id}`: bytes, or handling
    /// milliseconds, counted against a quota.
    pub recorded: Family<QuotaLabels, Counter>,
}

/// Meters idle for this long are forgotten (Kafka expires quota sensors
/// after an hour of inactivity).
const IDLE_SECONDS: i64 = 3600;
/// Above this many meters, idle ones are swept.
const SWEEP_ABOVE: usize = 10_000;

impl QuotaManager {
    /// A manager whose metrics are the given families (the broker's
    /// `/metrics` registers the same ones).
    pub fn with_metrics(
        throttle_time: Family<QuotaLabels, Counter>,
        recorded: Family<QuotaLabels, Counter>,
    ) -> Self {
        Self {
            meters: Mutex::default(),
            throttle_time,
            recorded,
        }
    }

    /// The meter of `client_id`'s `kind` quota and the quota, if one
    /// applies.
    fn meter(
        &self,
        quotas: &ClientQuotas,
        client: QuotaClient<'_>,
        kind: QuotaKind,
        now_ms: i64,
    ) -> Option<(Arc<RateMeter>, f64)> {
        if quotas.is_empty() {
            return None;
        }
        let (entity, quota) = resolve(quotas, client.user, client.client_id, kind.key())?;
        let mut meters = self.meters.lock();
        if meters.len() > SWEEP_ABOVE {
            let now_s = now_ms.div_euclid(1000);
            meters.retain(|_, m| m.last_second().is_some_and(|s| now_s - s < IDLE_SECONDS));
        }
        let meter = meters
            .entry((kind, metered(&entity, client.user, client.client_id)))
            .or_default()
            .clone();
        Some((meter, quota))
    }

    /// Whether `client_id` has a `kind` quota.
    pub fn applies<'a>(
        quotas: &ClientQuotas,
        client: impl Into<QuotaClient<'a>>,
        kind: QuotaKind,
    ) -> bool {
        let c = client.into();
        !quotas.is_empty() && resolve(quotas, c.user, c.client_id, kind.key()).is_some()
    }

    /// What `client_id` may use of `kind` in one quota window (one
    /// second): Kafka caps a throttled consumer's fetch size at this, so
    /// one response is never a burst of many seconds' worth.
    pub fn window_limit<'a>(
        quotas: &ClientQuotas,
        client: impl Into<QuotaClient<'a>>,
        kind: QuotaKind,
    ) -> Option<f64> {
        if quotas.is_empty() {
            return None;
        }
        let c = client.into();
        resolve(quotas, c.user, c.client_id, kind.key())
            .map(|(_, quota)| kind.limit_per_second(quota))
    }

    /// Counts `amount` for client `client_id` (user `ANONYMOUS`) against
    /// its `kind` quota, if one applies; returns the throttle time in ms
    /// (0 within the quota or without one).
    pub fn record<'a>(
        &self,
        quotas: &ClientQuotas,
        client: impl Into<QuotaClient<'a>>,
        kind: QuotaKind,
        amount: f64,
        now_ms: i64,
    ) -> i32 {
        let client = client.into();
        let client_id = client.client_id;
        let Some((meter, quota)) = self.meter(quotas, client, kind, now_ms) else {
            return 0;
        };
        meter.record(amount, now_ms);
        let throttle = Self::throttle_of(&meter, kind, quota, now_ms);
        let labels = vec![
            ("kind".to_string(), kind.label().to_string()),
            ("client_id".to_string(), client_id.to_string()),
        ];
        self.recorded
            .get_or_create(&labels)
            .inc_by(amount.max(0.0) as u64);
        if throttle > 0 {
            self.throttle_time
                .get_or_create(&labels)
                .inc_by(throttle as u64);
        }
        throttle
    }

    /// The throttle `client_id` is under for `kind` now, recording nothing
    /// (a request's own cost is known only once it has been handled).
    pub fn throttle_now<'a>(
        &self,
        quotas: &ClientQuotas,
        client: impl Into<QuotaClient<'a>>,
        kind: QuotaKind,
        now_ms: i64,
    ) -> i32 {
        match self.meter(quotas, client.into(), kind, now_ms) {
            Some((meter, quota)) => Self::throttle_of(&meter, kind, quota, now_ms),
            None => 0,
        }
    }

    fn throttle_of(meter: &RateMeter, kind: QuotaKind, quota: f64, now_ms: i64) -> i32 {
        let (rate, span_ms) = meter.rate(now_ms);
        throttle_ms(
            rate,
            kind.limit_per_second(quota),
            span_ms.min(WINDOWS * 1000),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn quotas(entity: QuotaEntity, key: &str, v: f64) -> ClientQuotas {
        BTreeMap::from([(entity, BTreeMap::from([(key.to_string(), v)]))])
    }

    #[test]
    fn a_client_over_its_byte_rate_is_throttled_and_others_are_not() {
        let q = quotas(
            QuotaEntity {
                user: None,
                client_id: Some(QuotaName::Name("slow".into())),
            },
            PRODUCER_BYTE_RATE,
            1000.0,
        );
        let m = QuotaManager::default();
        let t0 = 1_000_000;
        assert_eq!(m.record(&q, "slow", QuotaKind::Produce, 500.0, t0), 0);
        // 3000 B in the first second: 2 s of silence bring it to 1000 B/s
        assert_eq!(
            m.record(&q, "slow", QuotaKind::Produce, 2500.0, t0 + 10),
            2000
        );
        assert_eq!(
            m.record(&q, "fast", QuotaKind::Produce, 1e9, t0),
            0,
            "no quota"
        );
        assert_eq!(
            m.record(&q, "slow", QuotaKind::Fetch, 1e9, t0),
            0,
            "another kind"
        );
    }

    #[test]
    fn a_default_quota_meters_each_client_on_its_own() {
        let q = quotas(
            QuotaEntity {
                user: None,
                client_id: Some(QuotaName::Default),
            },
            CONSUMER_BYTE_RATE,
            1000.0,
        );
        let m = QuotaManager::default();
        let t0 = 1_000_000;
        assert!(m.record(&q, "a", QuotaKind::Fetch, 1500.0, t0) > 0);
        assert_eq!(
            m.record(&q, "b", QuotaKind::Fetch, 900.0, t0),
            0,
            "b has its own meter"
        );
    }

    #[test]
    fn the_clients_of_a_prefix_share_its_meter() {
        let q = quotas(
            QuotaEntity {
                user: None,
                client_id: Some(QuotaName::Prefix("batch-".into())),
            },
            PRODUCER_BYTE_RATE,
            1000.0,
        );
        let m = QuotaManager::default();
        let t0 = 1_000_000;
        assert_eq!(m.record(&q, "batch-1", QuotaKind::Produce, 600.0, t0), 0);
        assert!(
            m.record(&q, "batch-2", QuotaKind::Produce, 600.0, t0) > 0,
            "1200 B of the prefix's 1000 B/s"
        );
        assert_eq!(
            m.record(&q, "online", QuotaKind::Produce, 1e9, t0),
            0,
            "no match"
        );
    }

    #[test]
    fn request_percentage_is_a_share_of_one_threads_time() {
        let q = quotas(
            QuotaEntity {
                user: Some(QuotaName::Default),
                client_id: None,
            },
            REQUEST_PERCENTAGE,
            10.0,
        );
        let m = QuotaManager::default();
        let t0 = 1_000_000;
        // 10 % of a thread = 100 ms of handling per second
        assert_eq!(m.record(&q, "c", QuotaKind::Request, 100.0, t0), 0);
        assert_eq!(m.record(&q, "c", QuotaKind::Request, 100.0, t0 + 1), 1000);
    }

    #[test]
    fn the_throttle_now_records_nothing_and_the_window_limit_is_one_seconds_quota() {
        let q = quotas(
            QuotaEntity {
                user: None,
                client_id: Some(QuotaName::Name("c".into())),
            },
            REQUEST_PERCENTAGE,
            10.0,
        );
        let m = QuotaManager::default();
        let t0 = 1_000_000;
        assert_eq!(m.throttle_now(&q, "c", QuotaKind::Request, t0), 0);
        m.record(&q, "c", QuotaKind::Request, 300.0, t0);
        assert_eq!(m.throttle_now(&q, "c", QuotaKind::Request, t0 + 1), 2000);
        assert_eq!(
            m.throttle_now(&q, "c", QuotaKind::Request, t0 + 2),
            2000,
            "unchanged"
        );
        assert_eq!(
            QuotaManager::window_limit(&q, "c", QuotaKind::Request),
            Some(100.0)
        );
        assert_eq!(
            QuotaManager::window_limit(&q, "d", QuotaKind::Request),
            None
        );
        assert!(QuotaManager::applies(&q, "c", QuotaKind::Request));
        assert!(!QuotaManager::applies(&q, "c", QuotaKind::Fetch));
    }
}
