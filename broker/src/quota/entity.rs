//! Client-quota entities and Kafka's precedence rules, as pure functions:
//! which configured entity's quota applies to a connection's user and
//! client id, and the validation of AlterClientQuotas changes.
//!
//! Precedence, most specific first (Kafka's table):
//! 1. user + client id
//! 2. user + default client id
//! 3. user
//! 4. default user + client id
//! 5. default user + default client id
//! 6. default user
//! 7. client id
//! 8. default client id
//!
//! Until client authentication exists every client is the user
//! `ANONYMOUS` (Kafka's name for an unauthenticated principal), so user
//! quotas apply to all clients alike.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
pub use moldau_coordination::records::{ClientQuotaRecord, QuotaEntity, QuotaName};

use crate::topics::TopicError;

/// The user of every client connection until authentication exists.
pub const ANONYMOUS: &str = "ANONYMOUS";

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

/// The entities that may set a quota for `user` and `client_id`, most
/// specific first.
pub fn candidates(user: &str, client_id: &str) -> [QuotaEntity; 8] {
    let e = |user, client_id| QuotaEntity { user, client_id };
    let default = || Some(QuotaName::Default);
    [
        e(name(user), name(client_id)),
        e(name(user), default()),
        e(name(user), None),
        e(default(), name(client_id)),
        e(default(), default()),
        e(default(), None),
        e(None, name(client_id)),
        e(None, default()),
    ]
}

/// The quota `key` that applies to `user` / `client_id`, and the entity it
/// comes from — the first of [`candidates`] that sets it.
pub fn resolve(
    quotas: &ClientQuotas,
    user: &str,
    client_id: &str,
    key: &str,
) -> Option<(QuotaEntity, f64)> {
    candidates(user, client_id).into_iter().find_map(|e| {
        let v = quotas.get(&e)?.get(key)?;
        Some((e, *v))
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

/// Checks an entity: a user and/or a client id, nothing else.
pub fn validate_entity(e: &QuotaEntity) -> Result<(), TopicError> {
    if e.user.is_none() && e.client_id.is_none() {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            "a quota entity names a user, a client id, or both",
        ));
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

    #[test]
    fn kafkas_precedence_most_specific_first() {
        let d = || Some(QuotaName::Default);
        let levels = [
            entity(name("alice"), name("app")),
            entity(name("alice"), d()),
            entity(name("alice"), None),
            entity(d(), name("app")),
            entity(d(), d()),
            entity(d(), None),
            entity(None, name("app")),
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
        for (i, e) in levels.iter().enumerate() {
            assert_eq!(
                resolve(&quotas, "alice", "app", PRODUCER_BYTE_RATE),
                Some((e.clone(), i as f64 + 1.0)),
                "level {}",
                i + 1
            );
            quotas.remove(e);
        }
        assert_eq!(resolve(&quotas, "alice", "app", PRODUCER_BYTE_RATE), None);
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
