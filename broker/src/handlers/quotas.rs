//! DescribeClientQuotas and AlterClientQuotas (KIP-546), what
//! `kafka-configs --entity-type users|clients` and Admin clients use. The
//! wire shapes and filters live here; the quotas are the image's, changed
//! through the [`Controller`](crate::controller::Controller). Entity types
//! `user` and `client-id`, and Moldau's extension `client-id-prefix` (the
//! name is the prefix; it has no default form and does not combine with
//! `client-id`); `ip` quotas are not supported (INVALID_REQUEST).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    alter_client_quotas_response, describe_client_quotas_response, AlterClientQuotasRequest,
    AlterClientQuotasResponse, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::error::TopicError;
use crate::quota::{QuotaEntity, QuotaName};
use crate::security::acl::AclOperation;

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
/// Moldau's extension: the client ids starting with the entity name.
const CLIENT_ID_PREFIX: &str = "client-id-prefix";
const SUPPORTED: &str = "user, client-id, client-id-prefix";

fn invalid(message: String) -> TopicError {
    TopicError::new(ResponseError::InvalidRequest, message)
}

/// An entity from `(type, name or None for the default)` parts.
fn entity_of<'a>(
    parts: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<QuotaEntity, TopicError> {
    let mut e = QuotaEntity::default();
    for (kind, name) in parts {
        let value = Some(match (kind, name) {
            (CLIENT_ID_PREFIX, Some(n)) => QuotaName::Prefix(n.to_string()),
            (CLIENT_ID_PREFIX, None) => {
                return Err(invalid(format!(
                    "{CLIENT_ID_PREFIX} has no default form: name the prefix"
                )))
            }
            (_, Some(n)) => QuotaName::Name(n.to_string()),
            (_, None) => QuotaName::Default,
        });
        let slot = match kind {
            USER => &mut e.user,
            CLIENT_ID | CLIENT_ID_PREFIX => &mut e.client_id,
            other => {
                return Err(invalid(format!(
                    "quota entity type {other:?} is not supported ({SUPPORTED})"
                )))
            }
        };
        if slot.is_some() {
            return Err(invalid(if kind == USER {
                format!("quota entity type {kind} given twice")
            } else {
                format!("one client-id part per entity: {CLIENT_ID} or {CLIENT_ID_PREFIX}, once")
            }));
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
            Some(match part.as_ref()? {
                QuotaName::Default => (kind, None),
                QuotaName::Name(n) => (kind, Some(str_bytes(n))),
                QuotaName::Prefix(p) => (CLIENT_ID_PREFIX, Some(str_bytes(p))),
            })
        })
        .collect()
}

/// AlterClientQuotas; it needs ALTER_CONFIGS on the cluster (else each
/// entry is answered CLUSTER_AUTHORIZATION_FAILED, as Kafka does).
pub fn alter(
    broker: &Broker,
    req: AlterClientQuotasRequest,
    access: &Access,
) -> AlterClientQuotasResponse {
    let controller = crate::controller::Controller::new(broker);
    let allowed = access.allows_cluster(AclOperation::AlterConfigs);
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
                if !allowed {
                    return Err(TopicError::new(
                        ResponseError::ClusterAuthorizationFailed,
                        "no ALTER_CONFIGS on the cluster",
                    ));
                }
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

/// Whether `part` (an entity's part of one kind) passes a filter component
/// (`prefix`: a `client-id-prefix` component, which sees only prefixes; the
/// other kinds never see them).
fn component_matches(
    c: &ComponentData,
    part: &Option<QuotaName>,
    prefix: bool,
) -> Result<bool, TopicError> {
    if prefix {
        return Ok(match (c.match_type, part) {
            (0, Some(QuotaName::Prefix(p))) => c._match.as_ref().is_some_and(|m| m.as_str() == p),
            (1, _) => {
                return Err(invalid(format!(
                    "{CLIENT_ID_PREFIX} has no default form to match"
                )))
            }
            (2, Some(p)) => matches!(p, QuotaName::Prefix(_)),
            (0 | 2, _) => false,
            (other, _) => return Err(invalid(format!("unknown match type {other}"))),
        });
    }
    Ok(match (c.match_type, part) {
        (0..=2, Some(QuotaName::Prefix(_))) => false,
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
        let (part, prefix) = match c.entity_type.as_str() {
            USER => (&e.user, false),
            CLIENT_ID => (&e.client_id, false),
            CLIENT_ID_PREFIX => (&e.client_id, true),
            other => {
                return Err(invalid(format!(
                    "quota entity type {other:?} is not supported ({SUPPORTED})"
                )))
            }
        };
        if !component_matches(c, part, prefix)? {
            return Ok(false);
        }
        filtered += 1;
    }
    let parts = usize::from(e.user.is_some()) + usize::from(e.client_id.is_some());
    // strict: only entities with exactly the filtered parts
    Ok(!req.strict || parts == filtered)
}

/// DescribeClientQuotas; it needs DESCRIBE_CONFIGS on the cluster (else
/// CLUSTER_AUTHORIZATION_FAILED).
pub fn describe(
    broker: &Broker,
    req: DescribeClientQuotasRequest,
    access: &Access,
) -> DescribeClientQuotasResponse {
    if !access.allows_cluster(AclOperation::DescribeConfigs) {
        return DescribeClientQuotasResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("no DESCRIBE_CONFIGS on the cluster")))
            .with_entries(None);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(parts: &[(&str, Option<&str>)]) -> Result<QuotaEntity, TopicError> {
        entity_of(parts.iter().copied())
    }

    fn component(kind: &str, match_type: i8, name: Option<&str>) -> ComponentData {
        ComponentData::default()
            .with_entity_type(str_bytes(kind))
            .with_match_type(match_type)
            .with_match(name.map(str_bytes))
    }

    fn describes(e: &QuotaEntity, components: Vec<ComponentData>, strict: bool) -> bool {
        let req = DescribeClientQuotasRequest::default()
            .with_components(components)
            .with_strict(strict);
        described(e, &req).unwrap()
    }

    #[test]
    fn client_id_prefix_entities_on_the_wire() {
        let e = entity(&[(USER, None), (CLIENT_ID_PREFIX, Some("batch-"))]).unwrap();
        assert_eq!(e.client_id, Some(QuotaName::Prefix("batch-".into())));
        assert_eq!(
            parts_of(&e),
            vec![(USER, None), (CLIENT_ID_PREFIX, Some(str_bytes("batch-")))]
        );
        for bad in [
            vec![(CLIENT_ID_PREFIX, Some("a")), (CLIENT_ID, Some("a"))],
            vec![(CLIENT_ID, None), (CLIENT_ID_PREFIX, Some("a"))],
            vec![(CLIENT_ID_PREFIX, None)],
            vec![(CLIENT_ID_PREFIX, Some(""))],
            vec![("user-prefix", Some("a"))],
        ] {
            assert_eq!(
                entity(&bad).unwrap_err().code,
                ResponseError::InvalidRequest,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn describe_filters_see_prefixes_only_through_their_own_type() {
        let p = entity(&[(CLIENT_ID_PREFIX, Some("batch-"))]).unwrap();
        let up = entity(&[(USER, Some("u")), (CLIENT_ID_PREFIX, Some("batch-"))]).unwrap();
        let exact = entity(&[(CLIENT_ID, Some("batch-"))]).unwrap();
        let c = component;
        // EXACT on the prefix
        assert!(describes(
            &p,
            vec![c(CLIENT_ID_PREFIX, 0, Some("batch-"))],
            false
        ));
        assert!(!describes(
            &p,
            vec![c(CLIENT_ID_PREFIX, 0, Some("batch"))],
            false
        ));
        assert!(!describes(
            &exact,
            vec![c(CLIENT_ID_PREFIX, 0, Some("batch-"))],
            false
        ));
        assert!(!describes(&p, vec![c(CLIENT_ID, 0, Some("batch-"))], false));
        // SPECIFIED
        assert!(describes(&p, vec![c(CLIENT_ID_PREFIX, 2, None)], false));
        assert!(!describes(
            &exact,
            vec![c(CLIENT_ID_PREFIX, 2, None)],
            false
        ));
        assert!(!describes(&p, vec![c(CLIENT_ID, 2, None)], false));
        // strict: only entities with exactly the filtered parts
        assert!(describes(&up, vec![c(CLIENT_ID_PREFIX, 2, None)], false));
        assert!(!describes(&up, vec![c(CLIENT_ID_PREFIX, 2, None)], true));
        assert!(describes(
            &up,
            vec![c(USER, 0, Some("u")), c(CLIENT_ID_PREFIX, 2, None)],
            true
        ));
        // a prefix has no default
        let req = DescribeClientQuotasRequest::default().with_components(vec![c(
            CLIENT_ID_PREFIX,
            1,
            None,
        )]);
        assert_eq!(
            described(&p, &req).unwrap_err().code,
            ResponseError::InvalidRequest
        );
    }
}
