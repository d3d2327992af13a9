//! DescribeClientQuotas and AlterClientQuotas (KIP-546) on the admin
//! connection, with entities as typed values (`user` and `client-id` parts,
//! each a name or the default; a client id may be Moldau's
//! `client-id-prefix` instead).

use std::collections::BTreeMap;

use kafka_protocol::messages::{
    alter_client_quotas_request, AlterClientQuotasRequest, DescribeClientQuotasRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::{AdminClient, KafkaError};

/// Kafka's entity type of users.
pub const USER: &str = "user";
/// Kafka's entity type of client ids.
pub const CLIENT_ID: &str = "client-id";
/// Moldau's entity type of client-id prefixes (an extension of Kafka's).
pub const CLIENT_ID_PREFIX: &str = "client-id-prefix";

/// One part of a quota entity: a name, or the default (`<default>`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityName {
    /// The default entity of this type.
    Default,
    /// An exact name.
    Name(String),
    /// Client ids starting with this prefix (client-id parts only; sent as
    /// entity type `client-id-prefix`).
    Prefix(String),
}

/// A quota entity: a user part, a client-id part, or both.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaEntity {
    /// The user part.
    pub user: Option<EntityName>,
    /// The client-id part.
    pub client_id: Option<EntityName>,
}

impl std::fmt::Display for QuotaEntity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let part = |n: &EntityName| match n {
            EntityName::Default => "<default>".to_string(),
            EntityName::Name(n) | EntityName::Prefix(n) => n.clone(),
        };
        let mut parts = Vec::new();
        if let Some(u) = &self.user {
            parts.push(format!("user={}", part(u)));
        }
        match &self.client_id {
            Some(c @ EntityName::Prefix(_)) => parts.push(format!("client-id-prefix={}", part(c))),
            Some(c) => parts.push(format!("client-id={}", part(c))),
            None => {}
        }
        f.write_str(&parts.join(","))
    }
}

/// Quota values of entities: entity → key → value.
pub type ClientQuotas = BTreeMap<QuotaEntity, BTreeMap<String, f64>>;

/// The changes to one entity: key → `Some(value)` to set, `None` to remove.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaAlteration {
    /// The entity.
    pub entity: QuotaEntity,
    /// The operations on its keys.
    pub ops: BTreeMap<String, Option<f64>>,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn entity_of<'a>(
    parts: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<QuotaEntity, KafkaError> {
    let mut e = QuotaEntity::default();
    for (kind, name) in parts {
        let name = match (kind, name) {
            (CLIENT_ID_PREFIX, n) => EntityName::Prefix(n.unwrap_or_default().to_string()),
            (_, Some(n)) => EntityName::Name(n.to_string()),
            (_, None) => EntityName::Default,
        };
        match kind {
            USER => e.user = Some(name),
            CLIENT_ID | CLIENT_ID_PREFIX => e.client_id = Some(name),
            other => {
                return Err(KafkaError::Protocol(format!(
                    "unknown quota entity type {other:?}"
                )))
            }
        }
    }
    Ok(e)
}

fn wire_parts(e: &QuotaEntity) -> Vec<(&'static str, Option<StrBytes>)> {
    [(USER, &e.user), (CLIENT_ID, &e.client_id)]
        .into_iter()
        .filter_map(|(kind, part)| {
            Some(match part.as_ref()? {
                EntityName::Default => (kind, None),
                EntityName::Name(n) => (kind, Some(s(n))),
                EntityName::Prefix(p) => (CLIENT_ID_PREFIX, Some(s(p))),
            })
        })
        .collect()
}

impl AdminClient {
    /// Every client quota the broker has (user, client-id and
    /// client-id-prefix entities).
    pub async fn describe_client_quotas(&mut self) -> Result<ClientQuotas, KafkaError> {
        let req = DescribeClientQuotasRequest::default()
            .with_components(Vec::new())
            .with_strict(false);
        let resp = self.call(req, "DescribeClientQuotas").await?;
        if resp.error_code != 0 {
            return Err(KafkaError::broker(
                "DescribeClientQuotas",
                resp.error_code,
                resp.error_message.map(|m| m.to_string()),
            ));
        }
        let mut out = ClientQuotas::new();
        for entry in resp.entries.unwrap_or_default() {
            let entity = entity_of(entry.entity.iter().map(|p| {
                (
                    p.entity_type.as_str(),
                    p.entity_name.as_ref().map(|n| n.as_str()),
                )
            }))?;
            let values = out.entry(entity).or_default();
            for v in entry.values {
                values.insert(v.key.to_string(), v.value);
            }
        }
        Ok(out)
    }

    /// Applies alterations; returns each entity's outcome (the broker
    /// accepts or refuses each entity on its own).
    pub async fn alter_client_quotas(
        &mut self,
        alterations: &[QuotaAlteration],
    ) -> Result<Vec<(QuotaEntity, Result<(), KafkaError>)>, KafkaError> {
        if alterations.is_empty() {
            return Ok(Vec::new());
        }
        let entries = alterations
            .iter()
            .map(|a| {
                alter_client_quotas_request::EntryData::default()
                    .with_entity(
                        wire_parts(&a.entity)
                            .into_iter()
                            .map(|(kind, name)| {
                                alter_client_quotas_request::EntityData::default()
                                    .with_entity_type(s(kind))
                                    .with_entity_name(name)
                            })
                            .collect(),
                    )
                    .with_ops(
                        a.ops
                            .iter()
                            .map(|(k, v)| {
                                alter_client_quotas_request::OpData::default()
                                    .with_key(s(k))
                                    .with_value(v.unwrap_or(0.0))
                                    .with_remove(v.is_none())
                            })
                            .collect(),
                    )
            })
            .collect();
        let req = AlterClientQuotasRequest::default()
            .with_entries(entries)
            .with_validate_only(false);
        let resp = self.call(req, "AlterClientQuotas").await?;
        resp.entries
            .into_iter()
            .map(|entry| {
                let entity = entity_of(entry.entity.iter().map(|p| {
                    (
                        p.entity_type.as_str(),
                        p.entity_name.as_ref().map(|n| n.as_str()),
                    )
                }))?;
                let outcome = if entry.error_code == 0 {
                    Ok(())
                } else {
                    Err(KafkaError::broker(
                        "AlterClientQuotas",
                        entry.error_code,
                        entry.error_message.map(|m| m.to_string()),
                    ))
                };
                Ok((entity, outcome))
            })
            .collect()
    }
}
