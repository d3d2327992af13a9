//! Client telemetry (KIP-714): the broker side of GetTelemetrySubscriptions
//! and PushTelemetry, and the client metrics it shows on `/metrics`.
//!
//! Owns the client instances (what each was told to push, when it last
//! asked and pushed, whether it said it is terminating) and the values
//! they pushed; the rules of both APIs are Kafka 4.4's
//! `ClientMetricsManager`'s (see [`ClientTelemetry::get_subscription`] and
//! [`ClientTelemetry::push`]). It does not own the client-metrics
//! resources: those are cluster metadata, stored with the dynamic broker
//! configs under the entity `client-metrics:<name>` ([`ENTITY_PREFIX`]) —
//! the standalone broker's local file, in cluster mode the controller's
//! cluster record — and read here from the metadata image the handler
//! passes in. Nothing here does I/O.
//!
//! Bounded memory, whatever clients send (each cap documented in the
//! README):
//! - at most [`MAX_CLIENT_INSTANCES`] instances (Kafka's cache size); a new
//!   one beyond evicts the one seen longest ago, as Kafka's LRU cache does;
//! - a payload over `telemetry.max.bytes` is refused before it is read;
//!   one is decompressed into at most [`MAX_DECOMPRESSED_BYTES`], and
//!   payloads are decoded one at a time;
//! - the values of at most [`MAX_CLIENTS_SHOWN`] clients are kept, each at
//!   most [`MAX_SERIES_PER_CLIENT`] series, [`MAX_SERIES`] in all, every
//!   label value cut to [`MAX_LABEL_BYTES`]; what is over a cap is dropped
//!   and counted, never stored;
//! - a client's values expire 3 push intervals after its last push, and
//!   with its terminating push; an instance 3 intervals after it was last
//!   seen.

pub mod otlp;
pub mod subscriptions;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use uuid::Uuid;

use subscriptions::{ClientMetadata, Matched, Subscription};

pub use subscriptions::{entity_of, resource_name, ENTITY_PREFIX};

/// Kafka's `telemetry.max.bytes` default: the largest payload a push may carry.
pub const DEFAULT_TELEMETRY_MAX_BYTES: i32 = 1024 * 1024;
/// Kafka's client instance cache size (`ClientMetricsManager`).
pub const MAX_CLIENT_INSTANCES: usize = 16_384;
/// The most bytes one payload may decompress to (Kafka has no such bound).
pub const MAX_DECOMPRESSED_BYTES: usize = 4 * 1024 * 1024;
/// The most clients whose values `/metrics` shows.
pub const MAX_CLIENTS_SHOWN: usize = 1000;
/// The most series (name and attributes) shown per client.
pub const MAX_SERIES_PER_CLIENT: usize = 200;
/// The most series shown in all.
pub const MAX_SERIES: usize = 50_000;
/// The most bytes of a label value (client id, metric name, attributes).
pub const MAX_LABEL_BYTES: usize = 128;
/// Compression types the broker accepts (Kafka's order: zstd, lz4, gzip, snappy).
pub const ACCEPTED_COMPRESSION_TYPES: [i8; 4] = [4, 3, 1, 2];

/// The time of a get or push that never happened (Kafka's 0 in epoch
/// milliseconds: long enough ago for any interval).
const NEVER: i64 = i64::MIN / 4;

/// How often expired state is swept at most (besides every scrape).
const SWEEP_EVERY_MS: i64 = 1000;

/// What a GetTelemetrySubscriptions answers.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionAnswer {
    pub client_instance_id: Uuid,
    pub subscription_id: i32,
    pub push_interval_ms: i32,
    pub requested_metrics: Vec<String>,
}

/// One push, as the handler hands it over.
#[derive(Debug, Clone)]
pub struct Push<'a> {
    pub client_instance_id: Uuid,
    pub subscription_id: i32,
    pub terminating: bool,
    pub compression_type: i8,
    pub metrics: &'a [u8],
}

/// A refused request: Kafka's error code and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub code: ResponseError,
    pub message: String,
}

fn refused(code: ResponseError, message: impl Into<String>) -> Refused {
    Refused {
        code,
        message: message.into(),
    }
}

/// One client instance (Kafka's `ClientMetricsInstance`).
#[derive(Debug, Clone)]
struct Instance {
    matched: Matched,
    subscription_id: i32,
    last_get_ms: i64,
    last_push_ms: i64,
    /// The last refusal of a push or get, for the retries Kafka lets
    /// through early (a client that was told its subscription is stale or
    /// its compression unsupported may ask again at once).
    last_error: Option<ResponseError>,
    terminating: bool,
    last_seen_ms: i64,
}

impl Instance {
    fn new(id: Uuid, matched: Matched, now_ms: i64) -> Self {
        Instance {
            subscription_id: subscriptions::subscription_id(&matched, id),
            matched,
            last_get_ms: NEVER,
            last_push_ms: NEVER,
            last_error: None,
            terminating: false,
            last_seen_ms: now_ms,
        }
    }

    fn expires_at(&self) -> i64 {
        self.last_seen_ms
            .saturating_add(3 * i64::from(self.matched.interval_ms))
    }

    /// Kafka's `maybeUpdateGetRequestTimestamp`: a get at least one
    /// interval after the last get or push.
    fn may_get(&mut self, now_ms: i64) -> bool {
        let last = self.last_get_ms.max(self.last_push_ms);
        let ok = now_ms - last >= i64::from(self.matched.interval_ms);
        if ok {
            self.last_get_ms = now_ms;
        }
        ok
    }

    /// Kafka's `maybeUpdatePushRequestTimestamp`: the first push after a
    /// get, or one at least an interval after the last push.
    fn may_push(&mut self, now_ms: i64) -> bool {
        let ok = self.last_get_ms > self.last_push_ms
            || now_ms - self.last_push_ms >= i64::from(self.matched.interval_ms);
        if ok {
            self.last_push_ms = now_ms;
        }
        ok
    }
}

/// The values one client pushed last.
#[derive(Debug, Clone)]
struct Shown {
    client_id: String,
    samples: Vec<otlp::Sample>,
    expires_at_ms: i64,
}

/// Why pushed values were not shown (the `reason` of
/// `moldau_client_telemetry_dropped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dropped {
    /// The client was over [`MAX_CLIENTS_SHOWN`].
    Clients,
    /// Series over [`MAX_SERIES_PER_CLIENT`] or [`MAX_SERIES`].
    Series,
}

impl Dropped {
    pub fn name(self) -> &'static str {
        match self {
            Dropped::Clients => "clients",
            Dropped::Series => "series",
        }
    }
}

#[derive(Debug, Default)]
struct State {
    instances: HashMap<Uuid, Instance>,
    shown: HashMap<Uuid, Shown>,
    series: usize,
    last_sweep_ms: i64,
    dropped: BTreeMap<&'static str, u64>,
}

impl State {
    fn sweep(&mut self, now_ms: i64) {
        self.last_sweep_ms = now_ms;
        self.instances.retain(|_, i| i.expires_at() > now_ms);
        self.shown.retain(|_, s| s.expires_at_ms > now_ms);
        self.series = self.shown.values().map(|s| s.samples.len()).sum();
    }

    fn maybe_sweep(&mut self, now_ms: i64) {
        if now_ms - self.last_sweep_ms >= SWEEP_EVERY_MS {
            self.sweep(now_ms);
        }
    }

    fn drop_shown(&mut self, id: &Uuid) {
        if let Some(s) = self.shown.remove(id) {
            self.series -= s.samples.len();
        }
    }

    /// The instance `id`, made (or remade, when the resources it matches
    /// changed: Kafka's subscription version) from `matched` now.
    fn instance(&mut self, id: Uuid, matched: Matched, now_ms: i64) -> &mut Instance {
        let stale = self
            .instances
            .get(&id)
            .is_some_and(|i| i.matched != matched);
        if stale || !self.instances.contains_key(&id) {
            if !self.instances.contains_key(&id) && self.instances.len() >= MAX_CLIENT_INSTANCES {
                self.sweep(now_ms);
                if self.instances.len() >= MAX_CLIENT_INSTANCES {
                    // Kafka's LRU: the instance seen longest ago goes
                    if let Some(oldest) = self
                        .instances
                        .iter()
                        .min_by_key(|(_, i)| i.last_seen_ms)
                        .map(|(id, _)| *id)
                    {
                        self.instances.remove(&oldest);
                        self.drop_shown(&oldest);
                    }
                }
            }
            self.instances
                .insert(id, Instance::new(id, matched, now_ms));
        }
        let instance = self.instances.get_mut(&id).expect("inserted above");
        instance.last_seen_ms = now_ms;
        instance
    }

    fn count_dropped(&mut self, why: Dropped, n: u64) {
        if n > 0 {
            *self.dropped.entry(why.name()).or_default() += n;
        }
    }

    /// Shows `samples` as client `id`'s values (replacing what it pushed
    /// before), within the caps.
    fn show(&mut self, id: Uuid, client_id: &str, samples: Vec<otlp::Sample>, expires_at_ms: i64) {
        self.drop_shown(&id);
        let room = MAX_SERIES
            .saturating_sub(self.series)
            .min(MAX_SERIES_PER_CLIENT);
        if self.shown.len() >= MAX_CLIENTS_SHOWN || room == 0 {
            self.count_dropped(Dropped::Clients, 1);
            return;
        }
        let mut kept: Vec<otlp::Sample> = Vec::with_capacity(samples.len().min(room));
        let mut over = 0u64;
        for s in samples {
            if kept.len() >= room {
                over += 1;
                continue;
            }
            let s = otlp::Sample {
                name: truncate(&s.name),
                attributes: truncate(&s.attributes),
                value: s.value,
            };
            // a point repeated in one payload (or two cut to the same
            // label) is one series: the last value counts
            match kept
                .iter_mut()
                .find(|k| k.name == s.name && k.attributes == s.attributes)
            {
                Some(k) => k.value = s.value,
                None => kept.push(s),
            }
        }
        self.count_dropped(Dropped::Series, over);
        self.series += kept.len();
        self.shown.insert(
            id,
            Shown {
                client_id: truncate(client_id),
                samples: kept,
                expires_at_ms,
            },
        );
    }
}

/// `s` cut to at most [`MAX_LABEL_BYTES`], on a character boundary.
fn truncate(s: &str) -> String {
    if s.len() <= MAX_LABEL_BYTES {
        return s.to_string();
    }
    let mut end = MAX_LABEL_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The client-metrics resources of the dynamic configs, compiled once per
/// change of them.
#[derive(Default, Debug)]
struct Compiled {
    source: BTreeMap<String, BTreeMap<String, String>>,
    subscriptions: Arc<Vec<Subscription>>,
}

/// The broker's client telemetry state.
#[derive(Default, Debug)]
pub struct ClientTelemetry {
    state: Mutex<State>,
    compiled: Mutex<Compiled>,
    /// Held while a payload is decompressed and decoded: one payload's
    /// transient memory at a time, whatever the number of pushers.
    decoding: Mutex<()>,
}

/// One shown value: `(client_instance_id, client_id, name, attributes, value)`.
pub type ShownValue = (String, String, String, String, f64);

impl ClientTelemetry {
    /// The compiled resources of `configs` (the image's dynamic configs,
    /// whose `client-metrics:` entities are the resources).
    pub fn subscriptions(
        &self,
        configs: &crate::config_values::BrokerConfigs,
    ) -> Arc<Vec<Subscription>> {
        let source: BTreeMap<String, BTreeMap<String, String>> = configs
            .iter()
            .filter_map(|(entity, c)| Some((resource_name(entity)?.to_string(), c.clone())))
            .collect();
        let mut compiled = self.compiled.lock();
        if compiled.source != source || compiled.subscriptions.len() != source.len() {
            compiled.subscriptions = Arc::new(
                source
                    .iter()
                    .map(|(name, c)| Subscription::compile(name, c))
                    .collect(),
            );
            compiled.source = source;
        }
        compiled.subscriptions.clone()
    }

    /// GetTelemetrySubscriptions, with Kafka's rules: a zero id gets a new
    /// one; the subscription is what the client matches now; a second ask
    /// within the push interval is THROTTLING_QUOTA_EXCEEDED unless the
    /// client was just told its subscription id is stale or its
    /// compression unsupported.
    pub fn get_subscription(
        &self,
        requested_id: Uuid,
        client: &ClientMetadata,
        subscriptions: &[Subscription],
        now_ms: i64,
    ) -> Result<SubscriptionAnswer, Refused> {
        let id = if requested_id.is_nil() {
            new_instance_id()
        } else {
            requested_id
        };
        let mut client = client.clone();
        client.client_instance_id = subscriptions::kafka_uuid(id);
        let matched = subscriptions::matched(subscriptions, &client);
        let mut state = self.state.lock();
        state.maybe_sweep(now_ms);
        let instance = state.instance(id, matched, now_ms);
        if !instance.may_get(now_ms)
            && !matches!(
                instance.last_error,
                Some(
                    ResponseError::UnknownSubscriptionId
                        | ResponseError::UnsupportedCompressionType
                )
            )
        {
            return Err(refused(
                ResponseError::ThrottlingQuotaExceeded,
                format!(
                    "Request from the client [{id}] arrived before the next push interval time"
                ),
            ));
        }
        instance.last_error = None;
        Ok(SubscriptionAnswer {
            client_instance_id: id,
            subscription_id: instance.subscription_id,
            push_interval_ms: instance.matched.interval_ms,
            requested_metrics: instance.matched.metrics.iter().cloned().collect(),
        })
    }

    /// PushTelemetry, with Kafka's checks in Kafka's order: a zero (or
    /// reserved) instance id and a push after a terminating one are
    /// INVALID_REQUEST; a push within the interval (not terminating)
    /// THROTTLING_QUOTA_EXCEEDED; a stale subscription id
    /// UNKNOWN_SUBSCRIPTION_ID; an unknown compression
    /// UNSUPPORTED_COMPRESSION_TYPE; a payload over `max_bytes`
    /// TELEMETRY_TOO_LARGE; one that does not decompress or decode
    /// INVALID_RECORD. An accepted payload's values replace what the client
    /// showed before; a terminating push drops them.
    pub fn push(
        &self,
        push: &Push<'_>,
        client: &ClientMetadata,
        subscriptions: &[Subscription],
        max_bytes: i32,
        now_ms: i64,
    ) -> Result<(), Refused> {
        let id = push.client_instance_id;
        if id.is_nil() || id == Uuid::from_u128(1) {
            return Err(refused(
                ResponseError::InvalidRequest,
                format!("Invalid request from the client [{id}], invalid client instance id"),
            ));
        }
        let mut client = client.clone();
        client.client_instance_id = subscriptions::kafka_uuid(id);
        let matched = subscriptions::matched(subscriptions, &client);
        let interval_ms = {
            let mut state = self.state.lock();
            state.maybe_sweep(now_ms);
            let instance = state.instance(id, matched, now_ms);
            let checked = check_push(instance, push, max_bytes, now_ms);
            instance.terminating |= push.terminating;
            if let Err(e) = &checked {
                instance.last_error = Some(e.code);
            }
            let interval_ms = instance.matched.interval_ms;
            if push.terminating {
                state.drop_shown(&id);
            }
            checked?;
            interval_ms
        };
        if push.metrics.is_empty() {
            return Ok(());
        }
        let samples = {
            let _one_at_a_time = self.decoding.lock();
            decode_payload(push.compression_type, push.metrics)
        };
        let mut state = self.state.lock();
        let samples = match samples {
            Ok(s) => s,
            Err(e) => {
                if let Some(i) = state.instances.get_mut(&id) {
                    i.last_error = Some(e.code);
                }
                return Err(e);
            }
        };
        if !push.terminating {
            let expires = now_ms.saturating_add(3 * i64::from(interval_ms));
            state.show(id, &client.client_id, samples, expires);
        }
        if let Some(i) = state.instances.get_mut(&id) {
            i.last_error = None;
        }
        Ok(())
    }

    /// Every value shown now (expired ones swept first), and the dropped
    /// counts by reason.
    pub fn shown(&self, now_ms: i64) -> (Vec<ShownValue>, Vec<(&'static str, u64)>) {
        let mut state = self.state.lock();
        state.sweep(now_ms);
        let values = state
            .shown
            .iter()
            .flat_map(|(id, s)| {
                let id = subscriptions::kafka_uuid(*id);
                s.samples.iter().map(move |sample| {
                    (
                        id.clone(),
                        s.client_id.clone(),
                        sample.name.clone(),
                        sample.attributes.clone(),
                        sample.value,
                    )
                })
            })
            .collect();
        let dropped = state.dropped.iter().map(|(k, v)| (*k, *v)).collect();
        (values, dropped)
    }

    /// How many client instances are tracked now.
    pub fn instances(&self) -> usize {
        self.state.lock().instances.len()
    }
}

/// A new client instance id: random, never zero or reserved.
fn new_instance_id() -> Uuid {
    loop {
        let id = Uuid::new_v4();
        if id.as_u128() > 1 {
            return id;
        }
    }
}

/// Kafka's `validatePushRequest`, in its order.
fn check_push(
    instance: &mut Instance,
    push: &Push<'_>,
    max_bytes: i32,
    now_ms: i64,
) -> Result<(), Refused> {
    let id = push.client_instance_id;
    if instance.terminating {
        return Err(refused(
            ResponseError::InvalidRequest,
            format!("Client [{id}] sent the previous request with state terminating to TRUE, can not accept any requests after that"),
        ));
    }
    if !instance.may_push(now_ms) && !push.terminating {
        return Err(refused(
            ResponseError::ThrottlingQuotaExceeded,
            format!("Request from the client [{id}] arrived before the next push interval time"),
        ));
    }
    if push.subscription_id != instance.subscription_id {
        return Err(refused(
            ResponseError::UnknownSubscriptionId,
            format!("Unknown client subscription id for the client [{id}]"),
        ));
    }
    if !(0..=4).contains(&push.compression_type) {
        return Err(refused(
            ResponseError::UnsupportedCompressionType,
            format!(
                "Unknown compression type [{}] is received in telemetry request from [{id}]",
                push.compression_type
            ),
        ));
    }
    if push.metrics.len() > usize::try_from(max_bytes).unwrap_or(0) {
        return Err(refused(
            ResponseError::TelemetryTooLarge,
            format!("Telemetry request from [{id}] is larger than the maximum allowed size [{max_bytes}]"),
        ));
    }
    Ok(())
}

/// Decompresses (bounded) and decodes a payload into its samples, at most
/// one more than [`MAX_SERIES_PER_CLIENT`] (so that going over is seen
/// and counted).
pub fn decode_payload(compression_type: i8, payload: &[u8]) -> Result<Vec<otlp::Sample>, Refused> {
    use crate::storage::compression;
    let invalid = |why: String| refused(ResponseError::InvalidRecord, why);
    let codec =
        compression::codec_of(compression_type as u8).map_err(|e| invalid(e.to_string()))?;
    let plain;
    let bytes = if matches!(codec, kafka_protocol::records::Compression::None) {
        payload
    } else {
        plain = compression::decompress_all(payload, codec, MAX_DECOMPRESSED_BYTES)
            .map_err(|e| invalid(format!("telemetry payload: {e}")))?;
        &plain[..]
    };
    if bytes.len() > MAX_DECOMPRESSED_BYTES {
        return Err(invalid(format!(
            "telemetry payload larger than {MAX_DECOMPRESSED_BYTES} bytes"
        )));
    }
    let data = otlp::decode(bytes)
        .map_err(|e| invalid(format!("telemetry payload is not OTLP MetricsData: {e}")))?;
    Ok(otlp::samples(&data, MAX_SERIES_PER_CLIENT + 1))
}

#[cfg(test)]
mod tests;
