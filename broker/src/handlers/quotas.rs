//! DescribeClientQuotas and AlterClientQuotas (KIP-546), what
//! `kafka-configs --entity-type users|clients` and Admin clients use. The
//! wire shapes and filters live here; the quotas are the image's, changed
//! through the [`Controller`](crate::controller::Controller). Entity types
//! `user` and `client-id`; `ip` quotas are not supported (INVALID_REQUEST).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    alter_client_quotas_response, describe_client_quotas_response, AlterClientQuotasRequest,
    AlterClientQuotasResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::broker::Broker;
use crate::quota::{QuotaEntity, QuotaName};
use crate::topics::TopicError;

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";

fn invalid(message: String) -> TopicError {
    TopicError::new(ResponseError::InvalidRequest, message)
}

/// An entity from `(type, name or None for the default)` parts.
fn entity_of<'a>(
    parts: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<QuotaEntity, TopicError> {
    let mut e = QuotaEntity::default();
    for (kind, name) in parts {
        let value = Some(match name {
            Some(n) => QuotaName::Name(n.to_string()),
            None => QuotaName::Default,
        });
        let slot = match kind {
            USER => &mut e.user,
            CLIENT_ID => &mut e.client_id,
            other => {
                return Err(invalid(format!(
                    "quota entity type {other:?} is not supported (user, client-id)"
                )))
            }
        };
        if slot.is_some() {
            return Err(invalid(format!("quota entity type {kind} given twice")));
        }
        *slot = value;
    }
    crate::quota::entity::validate_entity(&e)?;
    Ok(e)
}

/// The wire parts of an entity.
fn parts_of(e: &QuotaEntity) -> Vec<(&'static str, Option<StrBytes>)> {
    [(USER, &e.user), (CLIENT_ID, &e.client_id)]
        .into_iter()
        .filter_map(|(kind, part)| {
            let name = match part.as_ref()? {
                QuotaName::Default => None,
                QuotaName::Name(n) => Some(str_bytes(n)),
            };
            Some((kind, name))
        })
        .collect()
}

pub fn alter(broker: &Broker, req: AlterClientQuotasRequest) -> AlterClientQuotasResponse {
    let controller = broker.controller();
    let entries = req
        .entries
        .into_iter()
        .map(|entry| {
            let outcome = entity_of(entry.entity.iter().map(|p| {
                (
                    p.entity_type.as_str(),
                    p.entity_name.as_ref().map(|n| n.as_str()),
                )
            }))
            .and_then(|e| {
                let ops = entry
                    .ops
                    .iter()
                    .map(|o| (o.key.to_string(), (!o.remove).then_some(o.value)))
                    .collect();
                controller.alter_client_quotas(&e, ops, req.validate_only)
            });
            let out = alter_client_quotas_response::EntryData::default().with_entity(
                entry
                    .entity
                    .into_iter()
                    .map(|p| {
                        alter_client_quotas_response::EntityData::default()
                            .with_entity_type(p.entity_type)
                            .with_entity_name(p.entity_name)
                    })
                    .collect(),
            );
            match outcome {
                Ok(()) => out.with_error_message(None),
                Err(e) => out
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(&e.message))),
            }
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

/// Whether `part` (an entity's part of one kind) passes a filter component.
fn component_matches(c: &ComponentData, part: &Option<QuotaName>) -> Result<bool, TopicError> {
    Ok(match (c.match_type, part) {
        (_, None) => false,
        // EXACT: the named entity
        (0, Some(QuotaName::Name(n))) => c._match.as_ref().is_some_and(|m| m.as_str() == n),
        (0, Some(QuotaName::Default)) => false,
        // DEFAULT
        (1, Some(p)) => *p == QuotaName::Default,
        // SPECIFIED: any named one
        (2, Some(p)) => matches!(p, QuotaName::Name(_)),
        (other, _) => return Err(invalid(format!("unknown match type {other}"))),
    })
}

fn described(e: &QuotaEntity, req: &DescribeClientQuotasRequest) -> Result<bool, TopicError> {
    let mut filtered = 0;
    for c in &req.components {
        let part = match c.entity_type.as_str() {
            USER => &e.user,
            CLIENT_ID => &e.client_id,
            other => {
                return Err(invalid(format!(
                    "quota entity type {other:?} is not supported (user, client-id)"
                )))
            }
        };
        if !component_matches(c, part)? {
            return Ok(false);
        }
        filtered += 1;
    }
    let parts = usize::from(e.user.is_some()) + usize::from(e.client_id.is_some());
    // strict: only entities with exactly the filtered parts
    Ok(!req.strict || parts == filtered)
}

pub fn describe(broker: &Broker, req: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse {
    let image = broker.image();
    let mut entries = Vec::new();
    for (e, values) in &image.client_quotas {
        match described(e, &req) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(err) => {
                return DescribeClientQuotasResponse::default()
                    .with_error_code(err.code.code())
                    .with_error_message(Some(str_bytes(&err.message)))
                    .with_entries(None)
            }
        }
        entries.push(
            describe_client_quotas_response::EntryData::default()
                .with_entity(
                    parts_of(e)
                        .into_iter()
                        .map(|(kind, name)| {
                            describe_client_quotas_response::EntityData::default()
                                .with_entity_type(str_bytes(kind))
                                .with_entity_name(name)
                        })
                        .collect(),
                )
                .with_values(
                    values
                        .iter()
                        .map(|(k, v)| {
                            describe_client_quotas_response::ValueData::default()
                                .with_key(str_bytes(k))
                                .with_value(*v)
                        })
                        .collect(),
                ),
        );
    }
    DescribeClientQuotasResponse::default()
        .with_error_message(None)
        .with_entries(Some(entries))
}
