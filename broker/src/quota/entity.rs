//! Client-quota entities and Kafka's precedence rules, as pure functions:
//! which configured entity's quota applies to a connection's user and
//! client id, and the validation of AlterClientQuotas changes.
//!
//! Precedence, most specific first (Kafka's table, with Moldau's client-id
//! prefixes — marked ¹ — right after each exact client id):
//! 1. user + client id
//! 2. user + client-id prefix ¹
//! 3. user + default client id
//! 4. user
//! 5. default user + client id
//! 6. default user + client-id prefix ¹
//! 7. default user + default client id
//! 8. default user
//! 9. client id
//! 10. client-id prefix ¹
//! 11. default client id
//!
//! ¹ A client-id prefix (wire entity type `client-id-prefix`, a Moldau
//! extension: Kafka has no prefix entities) matches every client id that
//! starts with it; among several matching prefixes of one level the
//! longest wins. Users have no prefix form. A quota is looked up key by
//! key: the first level that sets the key gives it.
//!
//! A client's user is its authenticated principal's name (a SASL user,
//! issue 38), or `ANONYMOUS` (Kafka's name for an unauthenticated
//! principal) on a PLAINTEXT listener, where user quotas therefore apply
//! to all clients alike.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
pub use moldau_coordination::records::{ClientQuotaRecord, QuotaEntity, QuotaName};

use crate::error::TopicError;

/// The user of an unauthenticated client connection.
pub const ANONYMOUS: &str = "ANONYMOUS";

/// Who a quota is metered for: the connection's user and the request's
/// client id. A bare client id is an anonymous client's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaClient<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
}

impl<'a> From<&'a str> for QuotaClient<'a> {
    fn from(client_id: &'a str) -> Self {
        QuotaClient {
            user: ANONYMOUS,
            client_id,
        }
    }
}

pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";

/// The quota keys Moldau enforces.
pub const QUOTA_KEYS: &[&str] = &[PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE];

/// Every configured quota, by entity.
pub type ClientQuotas = BTreeMap<QuotaEntity, BTreeMap<String, f64>>;

/// The quotas of a cluster record (values that do not parse are left out,
/// logged: the record is validated when written).
pub fn from_records(records: &[ClientQuotaRecord]) -> ClientQuotas {
    records
        .iter()
        .map(|r| {
            let values = r
                .values
                .iter()
                .filter_map(|(k, v)| match v.parse::<f64>() {
                    Ok(v) => Some((k.clone(), v)),
                    Err(_) => {
                        tracing::warn!(key = %k, value = %v, "a client quota that is not a number; ignored");
                        None
                    }
                })
                .collect();
            (r.entity.clone(), values)
        })
        .collect()
}

/// The records of a set of quotas (entities without values left out).
pub fn to_records(quotas: &ClientQuotas) -> Vec<ClientQuotaRecord> {
    quotas
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(entity, values)| ClientQuotaRecord {
            entity: entity.clone(),
            values: values
                .iter()
                .map(|(k, v)| (k.clone(), v.to_string()))
                .collect(),
        })
        .collect()
}

fn name(n: &str) -> Option<QuotaName> {
    Some(QuotaName::Name(n.to_string()))
}

/// How a precedence level names the client id.
#[derive(Clone, Copy)]
enum ClientPart {
    Exact,
    Prefix,
    Default,
    Absent,
}

/// The levels of the precedence table (see the module doc), most specific
/// first: the user part and how the client id is named.
fn levels(user: &str) -> [(Option<QuotaName>, ClientPart); 11] {
    use ClientPart::*;
    let u = || name(user);
    let d = || Some(QuotaName::Default);
    [
        (u(), Exact),
        (u(), Prefix),
        (u(), Default),
        (u(), Absent),
        (d(), Exact),
        (d(), Prefix),
        (d(), Default),
        (d(), Absent),
        (None, Exact),
        (None, Prefix),
        (None, Default),
    ]
}

/// The quota `key` that applies to `user` / `client_id`, and the entity it
/// comes from: the first level of the precedence table that sets it (at a
/// prefix level, the longest matching prefix that sets it).
pub fn resolve(
    quotas: &ClientQuotas,
    user: &str,
    client_id: &str,
    key: &str,
) -> Option<(QuotaEntity, f64)> {
    let lookup = |e: QuotaEntity| {
        let v = quotas.get(&e)?.get(key)?;
        Some((e, *v))
    };
    levels(user).into_iter().find_map(|(user, client)| {
        let e = |client_id| QuotaEntity {
            user: user.clone(),
            client_id,
        };
        match client {
            ClientPart::Exact => lookup(e(name(client_id))),
            ClientPart::Default => lookup(e(Some(QuotaName::Default))),
            ClientPart::Absent => lookup(e(None)),
            // Every prefix of the client id sorts between "" and the client
            // id itself, and of two of them the longer sorts last: the
            // first match walking back from the client id is the longest.
            ClientPart::Prefix => {
                let prefix = |p: &str| e(Some(QuotaName::Prefix(p.to_string())));
                quotas
                    .range(prefix("")..=prefix(client_id))
                    .rev()
                    .find_map(|(entity, values)| match &entity.client_id {
                        Some(QuotaName::Prefix(p)) if client_id.starts_with(p.as_str()) => {
                            Some((entity.clone(), *values.get(key)?))
                        }
                        _ => None,
                    })
            }
        }
    })
}

/// Checks one change of an entity's quota (`None`: remove it).
pub fn validate(key: &str, value: Option<f64>) -> Result<(), TopicError> {
    if !QUOTA_KEYS.contains(&key) {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!("unknown quota {key} (supported: {})", QUOTA_KEYS.join(", ")),
        ));
    }
    match value {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!("{key} must be a positive number, not {v}"),
        )),
        // Kafka types the byte rates as longs
        Some(v) if key != REQUEST_PERCENTAGE && v.fract() != 0.0 => Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!("{key} must be a whole number of bytes per second, not {v}"),
        )),
        _ => Ok(()),
    }
}

/// Checks an entity: a user and/or a client id (or client-id prefix),
/// nothing else; a prefix is non-empty and never a user's.
pub fn validate_entity(e: &QuotaEntity) -> Result<(), TopicError> {
    let invalid = |m: &str| Err(TopicError::new(ResponseError::InvalidRequest, m));
    if e.user.is_none() && e.client_id.is_none() {
        return invalid("a quota entity names a user, a client id, or both");
    }
    if matches!(e.user, Some(QuotaName::Prefix(_))) {
        return invalid("users have no prefix form (only client ids do)");
    }
    if matches!(&e.client_id, Some(QuotaName::Prefix(p)) if p.is_empty()) {
        return invalid("a client-id prefix is not empty");
    }
    Ok(())
}

/// Changes to one entity's quotas: per key a new value, or `None` to
/// remove it.
pub type QuotaChanges = (QuotaEntity, Vec<(String, Option<f64>)>);

/// Applies changes to `quotas`. Validated whole first: nothing changes
/// when one is invalid.
pub fn apply(quotas: &mut ClientQuotas, changes: &[QuotaChanges]) -> Result<(), TopicError> {
    for (entity, ops) in changes {
        validate_entity(entity)?;
        for (k, v) in ops {
            validate(k, *v)?;
        }
    }
    for (entity, ops) in changes {
        let values = quotas.entry(entity.clone()).or_default();
        for (k, v) in ops {
            match v {
                Some(v) => values.insert(k.clone(), *v),
                None => values.remove(k),
            };
        }
        if values.is_empty() {
            quotas.remove(entity);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(user: Option<QuotaName>, client_id: Option<QuotaName>) -> QuotaEntity {
        QuotaEntity { user, client_id }
    }

    fn prefix(p: &str) -> Option<QuotaName> {
        Some(QuotaName::Prefix(p.to_string()))
    }

    #[test]
    fn kafkas_precedence_most_specific_first() {
        let d = || Some(QuotaName::Default);
        let levels = [
            entity(name("alice"), name("app-1")),
            entity(name("alice"), prefix("app-")),
            entity(name("alice"), d()),
            entity(name("alice"), None),
            entity(d(), name("app-1")),
            entity(d(), prefix("app")),
            entity(d(), d()),
            entity(d(), None),
            entity(None, name("app-1")),
            entity(None, prefix("a")),
            entity(None, d()),
        ];
        // with every level set, each lookup finds the most specific one;
        // removing it exposes the next
        let mut quotas: ClientQuotas = levels
            .iter()
            .enumerate()
            .map(|(i, e)| {
                (
                    e.clone(),
                    BTreeMap::from([(PRODUCER_BYTE_RATE.to_string(), i as f64 + 1.0)]),
                )
            })
            .collect();
        // prefixes that do not match never apply
        for e in [
            entity(name("alice"), prefix("app-10")),
            entity(name("alice"), prefix("b")),
            entity(None, prefix("APP")),
            entity(name("bob"), prefix("app")),
        ] {
            quotas.insert(e, BTreeMap::from([(PRODUCER_BYTE_RATE.to_string(), 99.0)]));
        }
        for (i, e) in levels.iter().enumerate() {
            assert_eq!(
                resolve(&quotas, "alice", "app-1", PRODUCER_BYTE_RATE),
                Some((e.clone(), i as f64 + 1.0)),
                "level {}",
                i + 1
            );
            quotas.remove(e);
        }
        assert_eq!(resolve(&quotas, "alice", "app-1", PRODUCER_BYTE_RATE), None);
    }

    #[test]
    fn the_longest_matching_prefix_that_sets_the_key_wins() {
        let mut q = ClientQuotas::new();
        let set = |q: &mut ClientQuotas, p: &str, key: &str, v: f64| {
            apply(q, &[(entity(None, prefix(p)), vec![(key.into(), Some(v))])]).unwrap()
        };
        set(&mut q, "b", PRODUCER_BYTE_RATE, 1.0);
        set(&mut q, "batch-", PRODUCER_BYTE_RATE, 2.0);
        set(&mut q, "batch-eu", CONSUMER_BYTE_RATE, 3.0);
        set(&mut q, "batch-eu-1-and-more", PRODUCER_BYTE_RATE, 4.0);
        set(&mut q, "batch-f", PRODUCER_BYTE_RATE, 5.0);
        let rate = |q: &ClientQuotas, client: &str, key: &str| resolve(q, ANONYMOUS, client, key);
        assert_eq!(
            rate(&q, "batch-eu-1", PRODUCER_BYTE_RATE),
            Some((entity(None, prefix("batch-")), 2.0)),
            "batch-eu sets no producer rate; batch-eu-1-and-more is longer than the id"
        );
        assert_eq!(rate(&q, "batch-eu-1", CONSUMER_BYTE_RATE).unwrap().1, 3.0);
        assert_eq!(
            rate(&q, "batch-f", PRODUCER_BYTE_RATE).unwrap().1,
            5.0,
            "a prefix equal to the id matches"
        );
        assert_eq!(rate(&q, "bulk", PRODUCER_BYTE_RATE).unwrap().1, 1.0);
        assert_eq!(rate(&q, "online", PRODUCER_BYTE_RATE), None);
        assert_eq!(rate(&q, "", PRODUCER_BYTE_RATE), None);
        // multi-byte characters are cut on their boundaries
        set(&mut q, "żó", REQUEST_PERCENTAGE, 7.0);
        assert_eq!(rate(&q, "żółw", REQUEST_PERCENTAGE).unwrap().1, 7.0);
        // an exact client id is more specific than any prefix
        apply(
            &mut q,
            &[(
                entity(None, name("batch-eu-1")),
                vec![(PRODUCER_BYTE_RATE.into(), Some(6.0))],
            )],
        )
        .unwrap();
        assert_eq!(rate(&q, "batch-eu-1", PRODUCER_BYTE_RATE).unwrap().1, 6.0);
        assert_eq!(rate(&q, "batch-eu-2", PRODUCER_BYTE_RATE).unwrap().1, 2.0);
    }

    #[test]
    fn prefixes_are_client_ids_only_and_never_empty() {
        assert!(validate_entity(&entity(None, prefix("a"))).is_ok());
        assert!(validate_entity(&entity(Some(QuotaName::Default), prefix("a"))).is_ok());
        for bad in [entity(None, prefix("")), entity(prefix("a"), None)] {
            assert_eq!(
                validate_entity(&bad).unwrap_err().code,
                ResponseError::InvalidRequest,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn other_users_and_clients_fall_to_their_defaults() {
        let mut q = ClientQuotas::new();
        apply(
            &mut q,
            &[
                (
                    entity(None, name("app")),
                    vec![(CONSUMER_BYTE_RATE.into(), Some(10.0))],
                ),
                (
                    entity(None, Some(QuotaName::Default)),
                    vec![(CONSUMER_BYTE_RATE.into(), Some(99.0))],
                ),
            ],
        )
        .unwrap();
        assert_eq!(
            resolve(&q, ANONYMOUS, "app", CONSUMER_BYTE_RATE).unwrap().1,
            10.0
        );
        assert_eq!(
            resolve(&q, ANONYMOUS, "other", CONSUMER_BYTE_RATE)
                .unwrap()
                .1,
            99.0
        );
        assert_eq!(resolve(&q, ANONYMOUS, "app", PRODUCER_BYTE_RATE), None);
    }

    #[test]
    fn changes_are_validated_whole_and_removals_drop_empty_entities() {
        let mut q = ClientQuotas::new();
        let app = entity(None, name("app"));
        apply(
            &mut q,
            &[(app.clone(), vec![(PRODUCER_BYTE_RATE.into(), Some(5.0))])],
        )
        .unwrap();
        let bad = apply(
            &mut q,
            &[
                (app.clone(), vec![(PRODUCER_BYTE_RATE.into(), None)]),
                (app.clone(), vec![("bogus_rate".into(), Some(1.0))]),
            ],
        );
        assert_eq!(bad.unwrap_err().code, ResponseError::InvalidRequest);
        assert_eq!(q[&app][PRODUCER_BYTE_RATE], 5.0, "nothing applied");
        for v in [0.0, -1.0, f64::NAN, f64::INFINITY, 1.5] {
            assert!(validate(PRODUCER_BYTE_RATE, Some(v)).is_err(), "{v}");
        }
        assert!(validate(REQUEST_PERCENTAGE, Some(12.5)).is_ok());
        assert!(validate_entity(&QuotaEntity::default()).is_err());
        apply(
            &mut q,
            &[(app.clone(), vec![(PRODUCER_BYTE_RATE.into(), None)])],
        )
        .unwrap();
        assert!(q.is_empty());
        // records round-trip
        apply(
            &mut q,
            &[(app.clone(), vec![(REQUEST_PERCENTAGE.into(), Some(12.5))])],
        )
        .unwrap();
        assert_eq!(from_records(&to_records(&q)), q);
    }
}
