//! Client-metrics resources (KIP-714, config resource type 16): their
//! configs' rules, and which of them a client matches.
//!
//! A resource has a name and three configs, as in Kafka 4.4's
//! `ClientMetricsConfigs`: `metrics` (a comma list of metric name
//! prefixes, `*` for all; empty: none), `interval.ms` (the push interval,
//! 100..=3600000, default 300000) and `match` (a comma list of
//! `selector=regex`, the selectors being [`SELECTORS`]; empty: every
//! client). A client matches a resource when every selector's regex
//! matches the whole of the client's value for it. A client's
//! subscription merges every resource it matches: the union of their
//! metrics (`*` alone when any has `*`), the smallest interval.
//!
//! This module is pure: it does not know where resources are stored (see
//! [`crate::telemetry`] for that) and holds no state.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;

use crate::error::TopicError;

/// Where client-metrics resources live among the dynamic config entities
/// (`client-metrics:<name>`).
pub const ENTITY_PREFIX: &str = "client-metrics:";

/// The resource name of a dynamic config entity, if it is a client-metrics one.
pub fn resource_name(entity: &str) -> Option<&str> {
    entity.strip_prefix(ENTITY_PREFIX)
}

/// The entity a client-metrics resource is stored under.
pub fn entity_of(name: &str) -> String {
    format!("{ENTITY_PREFIX}{name}")
}

/// Kafka's config names of a client-metrics resource.
pub const METRICS: &str = "metrics";
pub const INTERVAL_MS: &str = "interval.ms";
pub const MATCH: &str = "match";
pub const CONFIG_NAMES: [&str; 3] = [METRICS, INTERVAL_MS, MATCH];

/// Kafka's default push interval (`ClientMetricsConfigs`).
pub const DEFAULT_INTERVAL_MS: i32 = 300_000;
const MIN_INTERVAL_MS: i32 = 100;
const MAX_INTERVAL_MS: i32 = 3_600_000;

/// `*`: every metric.
pub const ALL_METRICS: &str = "*";

/// The client selectors a `match` may name (Kafka's).
pub const SELECTORS: [&str; 6] = [
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
];

/// The most bytes one compiled `match` regex may take: a hostile pattern
/// (`(a{1000}){1000}`) is refused instead of growing the broker. Far
/// above any selector an operator writes.
const REGEX_SIZE_LIMIT: usize = 256 * 1024;

/// A client instance id as Kafka writes one (`Uuid.toString`: URL-safe
/// base64 of its 16 bytes, no padding), as clients and tools print it and
/// `client_instance_id` selectors match it.
pub fn kafka_uuid(id: uuid::Uuid) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

/// The default value of a config (what DescribeConfigs reports when unset).
pub fn default_value(name: &str) -> Option<String> {
    match name {
        METRICS | MATCH => Some(String::new()),
        INTERVAL_MS => Some(DEFAULT_INTERVAL_MS.to_string()),
        _ => None,
    }
}

fn invalid(message: String) -> TopicError {
    TopicError::new(ResponseError::InvalidConfig, message)
}

fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

/// Checks a resource's name and its whole set of configs, with Kafka's
/// rules and refusals: INVALID_REQUEST for an empty name, an unknown
/// config or an interval out of range; INVALID_CONFIG for an interval
/// that is no number and a bad `match`.
pub fn validate(name: &str, configs: &BTreeMap<String, String>) -> Result<(), TopicError> {
    if name.trim().is_empty() {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            "Subscription name can't be empty",
        ));
    }
    for (k, v) in configs {
        match k.as_str() {
            METRICS => {}
            INTERVAL_MS => {
                parse_interval(v)?;
            }
            MATCH => {
                parse_match(v)?;
            }
            other => {
                return Err(TopicError::new(
                    ResponseError::InvalidRequest,
                    format!("Unknown client metrics configuration: {other}"),
                ))
            }
        }
    }
    Ok(())
}

fn parse_interval(v: &str) -> Result<i32, TopicError> {
    let n: i32 = v
        .trim()
        .parse()
        .map_err(|_| invalid(format!("Invalid value {v} for {INTERVAL_MS}")))?;
    if !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&n) {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!(
            "Invalid value {n} for {INTERVAL_MS}, interval must be between 100 and 3600000 (1 hour)"
        ),
        ));
    }
    Ok(n)
}

/// `selector=regex,…` compiled; every regex anchored to the whole value
/// (Java's `Matcher.matches`).
fn parse_match(v: &str) -> Result<Vec<(String, regex::Regex)>, TopicError> {
    list(v)
        .map(|pair| {
            // Java's `split("=")` must give two parts: one `=`
            let (key, pattern) = pair
                .split_once('=')
                .filter(|(_, p)| !p.contains('=') && !p.is_empty())
                .ok_or_else(|| invalid(format!("Illegal client matching pattern: {pair}")))?;
            let key = key.trim();
            if !SELECTORS.contains(&key) {
                return Err(invalid(format!("Illegal client matching pattern: {pair}")));
            }
            let re = regex::RegexBuilder::new(&format!("^(?:{})$", pattern.trim()))
                .size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| invalid(format!("Illegal regex pattern {pattern}: {e}")))?;
            Ok((key.to_string(), re))
        })
        .collect()
}

/// One client-metrics resource, compiled.
#[derive(Debug, Clone)]
pub struct Subscription {
    pub name: String,
    pub metrics: BTreeSet<String>,
    pub interval_ms: i32,
    matchers: Vec<(String, regex::Regex)>,
}

impl Subscription {
    /// Compiles a stored resource (already validated when it was set; a
    /// value that no longer parses falls back to the default, so one bad
    /// record cannot stop telemetry for everyone).
    pub fn compile(name: &str, configs: &BTreeMap<String, String>) -> Self {
        Subscription {
            name: name.to_string(),
            metrics: configs
                .get(METRICS)
                .map(|v| list(v).map(str::to_string).collect())
                .unwrap_or_default(),
            interval_ms: configs
                .get(INTERVAL_MS)
                .and_then(|v| parse_interval(v).ok())
                .unwrap_or(DEFAULT_INTERVAL_MS),
            matchers: configs
                .get(MATCH)
                .and_then(|v| parse_match(v).ok())
                .unwrap_or_default(),
        }
    }

    /// Whether a client with these selector values matches every regex
    /// (a selector the client has no value for matches only a regex that
    /// takes the empty string).
    pub fn matches(&self, client: &ClientMetadata) -> bool {
        self.matchers
            .iter()
            .all(|(key, re)| re.is_match(client.value(key)))
    }
}

/// What a client is matched by (Kafka's `ClientMetricsInstanceMetadata`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientMetadata {
    pub client_instance_id: String,
    pub client_id: String,
    pub client_software_name: String,
    pub client_software_version: String,
    pub client_source_address: String,
    pub client_source_port: String,
}

impl ClientMetadata {
    fn value(&self, selector: &str) -> &str {
        match selector {
            "client_instance_id" => &self.client_instance_id,
            "client_id" => &self.client_id,
            "client_software_name" => &self.client_software_name,
            "client_software_version" => &self.client_software_version,
            "client_source_address" => &self.client_source_address,
            "client_source_port" => &self.client_source_port,
            _ => "",
        }
    }
}

/// What a client is asked to push: metric name prefixes (empty: none;
/// `["*"]`: all) and how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    pub metrics: BTreeSet<String>,
    pub interval_ms: i32,
}

/// The subscription of `client`: every resource it matches merged, as
/// Kafka's `createClientInstance` does; none matched: no metrics, the
/// default interval.
pub fn matched(subscriptions: &[Subscription], client: &ClientMetadata) -> Matched {
    let mut metrics = BTreeSet::new();
    let mut interval_ms = DEFAULT_INTERVAL_MS;
    let mut all = false;
    for s in subscriptions.iter().filter(|s| s.matches(client)) {
        all |= s.metrics.contains(ALL_METRICS);
        metrics.extend(s.metrics.iter().cloned());
        interval_ms = interval_ms.min(s.interval_ms);
    }
    if all {
        metrics = [ALL_METRICS.to_string()].into();
    }
    Matched {
        metrics,
        interval_ms,
    }
}

/// The subscription id, as Kafka computes it: CRC-32C of the metrics
/// set's Java `toString` followed by the interval, XOR the client
/// instance id's Java `hashCode`. Kafka's set is a `HashSet` (its order
/// is Java's hashing); Moldau's is sorted, so with several prefixes the id
/// differs from what Kafka would send. The id is opaque to clients, which
/// only echo it back.
pub fn subscription_id(m: &Matched, client_instance_id: uuid::Uuid) -> i32 {
    let set = m.metrics.iter().cloned().collect::<Vec<_>>().join(", ");
    let text = format!("[{set}]{}", m.interval_ms);
    let crc = crc32c::crc32c(text.as_bytes()) as i32;
    let (msb, lsb) = client_instance_id.as_u64_pair();
    let hilo = msb ^ lsb;
    let hash = ((hilo >> 32) as i32) ^ (hilo as i32);
    crc ^ hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn client(id: &str, software: &str) -> ClientMetadata {
        ClientMetadata {
            client_id: id.into(),
            client_software_name: software.into(),
            ..Default::default()
        }
    }

    #[test]
    fn configs_follow_kafkas_rules() {
        validate("s", &configs(&[("metrics", "a,b"), ("interval.ms", "100")])).unwrap();
        for bad in ["99", "3600001"] {
            let e = validate("s", &configs(&[("interval.ms", bad)])).unwrap_err();
            assert_eq!(e.code, ResponseError::InvalidRequest, "{bad}");
        }
        for bad in ["x", ""] {
            let e = validate("s", &configs(&[("interval.ms", bad)])).unwrap_err();
            assert_eq!(e.code, ResponseError::InvalidConfig, "{bad}");
        }
        assert!(validate("s", &configs(&[("match", "client_id=a=b")])).is_err());
        assert!(validate("s", &configs(&[("match", "client_id=a.*")])).is_ok());
        assert!(validate("s", &configs(&[("match", "bogus=a")])).is_err());
        assert!(validate("s", &configs(&[("match", "client_id")])).is_err());
        assert!(validate("s", &configs(&[("match", "client_id=(")])).is_err());
        assert_eq!(
            validate("s", &configs(&[("colour", "red")]))
                .unwrap_err()
                .code,
            ResponseError::InvalidRequest
        );
        assert_eq!(
            validate("", &BTreeMap::new()).unwrap_err().code,
            ResponseError::InvalidRequest
        );
        // a pattern compiling to a huge automaton is refused, not built
        let huge = "client_id=((a{100}){100}){100}";
        assert!(validate("s", &configs(&[("match", huge)])).is_err());
    }

    #[test]
    fn selectors_match_the_whole_value() {
        let s = Subscription::compile(
            "s",
            &configs(&[(
                "match",
                "client_id=prod.*,client_software_name=apache-kafka-java",
            )]),
        );
        assert!(s.matches(&client("producer-1", "apache-kafka-java")));
        assert!(!s.matches(&client("producer-1", "librdkafka")));
        assert!(!s.matches(&client("my-producer", "apache-kafka-java")));
        // no match: every client
        let all = Subscription::compile("all", &configs(&[("metrics", "x")]));
        assert!(all.matches(&client("", "")));
    }

    #[test]
    fn matched_subscriptions_merge() {
        let subs = vec![
            Subscription::compile(
                "a",
                &configs(&[
                    ("metrics", "org.apache.kafka.producer."),
                    ("interval.ms", "60000"),
                    ("match", "client_id=p.*"),
                ]),
            ),
            Subscription::compile(
                "b",
                &configs(&[
                    ("metrics", "org.apache.kafka.consumer."),
                    ("interval.ms", "1000"),
                ]),
            ),
            Subscription::compile(
                "c",
                &configs(&[("metrics", "*"), ("match", "client_id=star")]),
            ),
        ];
        let m = matched(&subs, &client("p1", ""));
        assert_eq!(m.interval_ms, 1000);
        assert_eq!(
            m.metrics.iter().map(String::as_str).collect::<Vec<_>>(),
            ["org.apache.kafka.consumer.", "org.apache.kafka.producer."]
        );
        let m = matched(&subs, &client("star", ""));
        assert_eq!(m.metrics, [ALL_METRICS.to_string()].into());
        // nothing matched: no metrics, Kafka's default interval
        let m = matched(&subs[..1], &client("other", ""));
        assert!(m.metrics.is_empty());
        assert_eq!(m.interval_ms, DEFAULT_INTERVAL_MS);
    }

    #[test]
    fn instance_ids_print_as_kafkas() {
        // Kafka's Uuid.toString of 0x0fa3…: base64url, no padding
        let id = uuid::Uuid::from_u128(0x0e9f_9b53_73cf_4943_9381_1495_4651_c752);
        assert_eq!(kafka_uuid(id), "Dp-bU3PPSUOTgRSVRlHHUg");
        assert_eq!(kafka_uuid(uuid::Uuid::nil()), "AAAAAAAAAAAAAAAAAAAAAA");
    }

    #[test]
    fn subscription_id_is_kafkas_checksum() {
        let id = uuid::Uuid::nil();
        let m = Matched {
            metrics: ["a".to_string()].into(),
            interval_ms: 1000,
        };
        // CRC-32C("[a]1000"), the nil uuid hashing to 0
        assert_eq!(subscription_id(&m, id), crc32c::crc32c(b"[a]1000") as i32);
        let other = Matched {
            interval_ms: 2000,
            ..m.clone()
        };
        assert_ne!(subscription_id(&m, id), subscription_id(&other, id));
        let client = uuid::Uuid::from_u64_pair(1 << 32, 3);
        assert_eq!(
            subscription_id(&m, client),
            subscription_id(&m, id) ^ (1 ^ 3)
        );
    }
}
