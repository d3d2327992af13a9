//! The strict check of a broker's Kafka-named properties, shared by
//! `moldau-broker --check-config` and the operator (which refuses a
//! `KafkaCluster.spec.config` before rolling a single broker, so a bad value
//! never becomes a crash-looping pod).
//!
//! Two rules:
//! - every value parses exactly as the broker parses it at start
//!   ([`BrokerConfig::from_properties`] and the topic-default keys of
//!   [`crate::topic_config::validate_broker_keys`]): the same code, so the
//!   check and the broker never disagree;
//! - every key is a broker config name: one Moldau reads, or one Apache
//!   Kafka 4.4 defines (`kafka_broker_config_names.txt`). Kafka names that
//!   Moldau has no use for (`num.io.threads`, …) are accepted, as Kafka
//!   accepts them; a name neither knows (`log.retention.msx`) is a typo,
//!   and is reported with the closest known name. The broker itself only
//!   warns about such keys at start, as Kafka does.
//!
//! Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use crate::config::BrokerConfig;

/// Broker configs that are Moldau's own (not in Kafka's list).
pub const MOLDAU_BROKER_CONFIGS: &[&str] = &[
    "controller.lease.duration.ms",
    "controller.lease.retry.ms",
    "min.incremental.fetch.session.eviction.ms",
    "socket.request.read.timeout.ms",
    // how often a TLS listener's PEM files are checked for rotation
    "ssl.reload.interval.ms",
    "transaction.version",
];

/// The configs of Kafka's StandardAuthorizer, which a broker's properties
/// carry beside `authorizer.class.name` but Kafka's broker config table
/// does not list (the authorizer defines them).
pub const AUTHORIZER_CONFIGS: &[&str] = &["super.users", "allow.everyone.if.no.acl.found"];

/// Every broker config name Kafka 4.4 defines (and 4.1, see the file).
fn kafka_names() -> &'static BTreeSet<&'static str> {
    static NAMES: OnceLock<BTreeSet<&'static str>> = OnceLock::new();
    NAMES.get_or_init(|| {
        include_str!("kafka_broker_config_names.txt")
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect()
    })
}

/// Whether `key` is a broker config name Moldau or Kafka knows: a listed
/// name, or one with Kafka's per-listener prefix `listener.name.<name>.`
/// (`listener.name.client.sasl.enabled.mechanisms`, and the per-mechanism
/// `listener.name.<name>.<mechanism>.sasl.*`).
pub fn is_known(key: &str) -> bool {
    if kafka_names().contains(key)
        || MOLDAU_BROKER_CONFIGS.contains(&key)
        || AUTHORIZER_CONFIGS.contains(&key)
    {
        return true;
    }
    let Some((_, config)) = key
        .strip_prefix("listener.name.")
        .and_then(|rest| rest.split_once('.'))
    else {
        return false;
    };
    // `listener.name.<l>.<mechanism>.<config>`: Kafka's per-mechanism
    // prefix (`sasl.jaas.config`, `sasl.server.callback.handler.class`,
    // `sasl.oauthbearer.*`, …)
    let per_mechanism = config
        .split_once('.')
        .is_some_and(|(_, c)| c.starts_with("sasl.") && kafka_names().contains(c));
    per_mechanism || kafka_names().contains(config) || MOLDAU_BROKER_CONFIGS.contains(&config)
}

/// One problem of a set of broker properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The property at fault.
    pub key: String,
    /// Why, in a sentence a user can act on.
    pub message: String,
}

impl std::fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Checks broker properties; empty when the broker would start with them.
/// Unknown keys are all listed; of the value errors, the first the broker
/// would stop at.
pub fn check(props: &BTreeMap<String, String>) -> Vec<ConfigProblem> {
    let mut problems: Vec<ConfigProblem> = props
        .keys()
        .filter(|k| !is_known(k))
        .map(|k| ConfigProblem {
            key: k.clone(),
            message: match closest_known(k) {
                Some(near) => format!("unknown broker config (did you mean {near}?)"),
                None => "unknown broker config".into(),
            },
        })
        .collect();
    match BrokerConfig::from_properties(props.clone()) {
        Err(crate::config::ConfigError::Invalid { key, value, reason }) => {
            problems.push(ConfigProblem {
                key,
                message: format!("invalid value {value:?}: {reason}"),
            })
        }
        Err(e) => problems.push(ConfigProblem {
            key: String::new(),
            message: e.to_string(),
        }),
        Ok(config) => {
            if let Err(e) = crate::topic_config::validate_broker_keys(&config) {
                let (key, message) = e.split_once(": ").unwrap_or(("", e.as_str()));
                problems.push(ConfigProblem {
                    key: key.to_string(),
                    message: message.to_string(),
                });
            }
        }
    }
    problems
}

/// The known name nearest to `key` (at most two edits away), if any.
fn closest_known(key: &str) -> Option<&'static str> {
    kafka_names()
        .iter()
        .copied()
        .chain(MOLDAU_BROKER_CONFIGS.iter().copied())
        .map(|name| (edit_distance(key, name), name))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, name)| name)
}

/// Levenshtein distance over bytes (config names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn what_the_broker_reads_and_what_kafka_defines_is_accepted() {
        let ok = props(&[
            ("log.retention.ms", "1000"),
            ("num.partitions", "3"),
            ("num.io.threads", "8"),
            ("controller.lease.duration.ms", "4000"),
            ("leader.replication.throttled.rate", "1000000"),
            ("compression.type", "lz4"),
        ]);
        assert_eq!(check(&ok), vec![]);
    }

    #[test]
    fn the_authorizer_s_own_configs_are_known() {
        let ok = props(&[
            (
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            ),
            ("super.users", "User:admin;User:CN=broker,O=moldau.io"),
            ("allow.everyone.if.no.acl.found", "false"),
        ]);
        assert_eq!(check(&ok), vec![]);
    }

    #[test]
    fn a_tls_listener_s_configs_are_accepted_with_and_without_the_listener_prefix() {
        let ok = props(&[
            ("listeners", "SECURE://127.0.0.1:9093"),
            ("listener.security.protocol.map", "SECURE:SSL"),
            ("listener.name.secure.ssl.keystore.type", "PEM"),
            (
                "listener.name.secure.ssl.keystore.location",
                "/tls/broker.pem",
            ),
            ("ssl.truststore.type", "PEM"),
            ("ssl.truststore.location", "/tls/ca.pem"),
            ("listener.name.secure.ssl.client.auth", "required"),
            ("ssl.enabled.protocols", "TLSv1.2,TLSv1.3"),
            (
                "ssl.principal.mapping.rules",
                "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
            ),
            ("ssl.reload.interval.ms", "2000"),
            ("listener.name.secure.ssl.reload.interval.ms", "1000"),
        ]);
        assert_eq!(check(&ok), vec![]);
        let mut bad = ok.clone();
        bad.insert(
            "listener.name.secure.ssl.client.auth".into(),
            "sometimes".into(),
        );
        let problems = check(&bad);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].message.contains("ssl.client.auth"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_bad_value_is_refused_as_the_broker_would_refuse_it() {
        let problems = check(&props(&[("num.partitions", "abc")]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].key, "num.partitions");
        assert!(problems[0].message.contains("\"abc\""), "{problems:?}");
        assert!(BrokerConfig::from_properties(props(&[("num.partitions", "abc")])).is_err());
        let problems = check(&props(&[("compression.type", "brotli")]));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].key, "compression.type");
    }

    #[test]
    fn a_misspelled_key_is_refused_with_the_name_meant() {
        let problems = check(&props(&[
            ("log.retention.msx", "1000"),
            ("zzz.not.a.config", "1"),
        ]));
        assert_eq!(
            problems,
            vec![
                ConfigProblem {
                    key: "log.retention.msx".into(),
                    message: "unknown broker config (did you mean log.retention.ms?)".into(),
                },
                ConfigProblem {
                    key: "zzz.not.a.config".into(),
                    message: "unknown broker config".into(),
                },
            ]
        );
    }

    #[test]
    fn every_key_the_broker_reads_is_known() {
        // The typed keys of BrokerConfig: each must be accepted by name.
        for def in crate::topic_config::TOPIC_CONFIGS {
            if let Some(key) = def.broker_key {
                assert!(is_known(key), "{key}");
            }
        }
        for def in crate::dynamic_config::DYNAMIC_BROKER_CONFIGS {
            assert!(is_known(def.name), "{}", def.name);
        }
        assert!(kafka_names().len() > 300);
    }

    #[test]
    fn every_key_from_properties_reads_is_known() {
        // the match arms of BrokerConfig::from_properties, read from its source
        let source = include_str!("config.rs");
        let body = &source[source.find("pub fn from_properties").unwrap()..];
        let body = &body[..body.find("c.raw = props;").unwrap()];
        let keys: Vec<&str> = body
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with('"') && l.contains("\" =>"))
            .filter_map(|l| l.split('"').nth(1))
            .collect();
        assert!(keys.len() > 40, "{keys:?}");
        for key in keys {
            assert!(is_known(key), "{key}");
        }
    }

    #[test]
    fn per_listener_keys_are_known_by_their_config() {
        for key in [
            "listener.name.client.sasl.enabled.mechanisms",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            "listener.name.external.scram-sha-256.sasl.jaas.config",
        ] {
            assert!(is_known(key), "{key}");
        }
        for key in [
            "listener.name.client",
            "listener.name.client.no.such.config",
            "listener.names.client.sasl.enabled.mechanisms",
        ] {
            assert!(!is_known(key), "{key}");
        }
    }

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("abc", "abd"), 1);
        assert_eq!(edit_distance("abc", "ab"), 1);
        assert_eq!(edit_distance("", "ab"), 2);
        assert_eq!(edit_distance("log.retention.msx", "log.retention.ms"), 1);
    }
}
