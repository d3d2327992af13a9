//! ACLs as cluster metadata (issue 38): Kafka's decisions for CreateAcls,
//! DescribeAcls and DeleteAcls over an [`AclSet`], the authorizer's broker
//! configs, and the conversion of bindings from and to the persisted
//! records — all pure, with no I/O.
//!
//! This module owns:
//!
//! - [`authorizer_from_configs`]: `authorizer.class.name` (Kafka's
//!   [`STANDARD_AUTHORIZER`], or empty for no authorizer; any other class is
//!   a config error naming the accepted ones), `super.users` and
//!   `allow.everyone.if.no.acl.found`, parsed once at start into the broker
//!   config;
//! - [`binding_from_wire`] and [`filter_from_wire`]: a request's `int8`
//!   codes and strings as an [`AclBinding`] / [`AclBindingFilter`], or the
//!   INVALID_REQUEST the request gets;
//! - [`create`], [`delete`], [`describe`]: Kafka's controller semantics
//!   (`AclControlManager`) — each creation judged on its own (an existing
//!   binding is a success that changes nothing), each deletion filter
//!   reports every binding it matched in the set as it was before the
//!   request (a binding matched by two filters is reported by both and
//!   removed once), a describe groups the matching bindings by resource
//!   pattern;
//! - [`from_records`] / [`to_records`]: the
//!   `moldau_coordination::records::AclRecord`s of the cluster record
//!   (cluster mode) or of a standalone broker's `acls.json`.
//!
//! Without an authorizer every one of the three APIs answers
//! SECURITY_DISABLED with Kafka's messages ([`NO_AUTHORIZER`], and
//! DescribeAcls's own [`NO_AUTHORIZER_DESCRIBE`]), as Kafka does; the
//! handlers ask [`require_authorizer`] / [`require_authorizer_to_describe`].
//!
//! Storing, forwarding to the controller and the wire shapes belong to the
//! callers (`controller::{facade, rpc}`, `handlers::acls`). Like the rest of
//! [`crate::security`] this is vocabulary: it imports nothing else of the
//! broker.
//!
//! # Enforcement and differences from Kafka
//!
//! ACLs are enforced by the handlers through `handlers::access` (the
//! three ACL APIs need ALTER, resp. DESCRIBE, on the cluster as in
//! Kafka). Kafka closes the connection of a CreateAcls whose
//! codes are UNKNOWN (a request it cannot parse); Moldau answers that
//! creation INVALID_REQUEST instead. Only Kafka 4's versions (1–3) are
//! served: v0 (no pattern type) was removed in Kafka 4.

use std::collections::BTreeSet;

use moldau_coordination::records::AclRecord;

use super::acl::{
    AclBinding, AclBindingFilter, AclError, AclOperation, AclSet, AuthorizerConfig, PatternType,
    PermissionType, ResourceType, CLUSTER_NAME, SUPER_USERS_CONFIG,
};

/// Broker config: the authorizer's class (Kafka's name).
pub const AUTHORIZER_CLASS_NAME_CONFIG: &str = "authorizer.class.name";
/// Kafka's KRaft authorizer, the only class Moldau accepts.
pub const STANDARD_AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
/// Kafka's message when CreateAcls or DeleteAcls reaches a broker without
/// an authorizer.
pub const NO_AUTHORIZER: &str = "No Authorizer is configured.";
/// Kafka's message when DescribeAcls does (its own words, no full stop).
pub const NO_AUTHORIZER_DESCRIBE: &str = "No Authorizer is configured on the broker";
/// Kafka error code `SECURITY_DISABLED`.
pub const SECURITY_DISABLED_CODE: i16 = 54;
/// Kafka error code `INVALID_REQUEST`.
pub const INVALID_REQUEST_CODE: i16 = 42;

/// An error one creation, one filter or a whole describe is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFailure {
    /// Kafka's error code.
    pub code: i16,
    /// The message.
    pub message: String,
}

impl AclFailure {
    /// An INVALID_REQUEST with `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        AclFailure {
            code: INVALID_REQUEST_CODE,
            message: message.into(),
        }
    }
}

impl From<AclError> for AclFailure {
    fn from(e: AclError) -> Self {
        AclFailure {
            code: e.kafka_error_code(),
            message: e.to_string(),
        }
    }
}

/// The authorizer's configuration from the three configs (`None` when
/// unset): `Ok(None)` without an authorizer (`authorizer.class.name` unset
/// or empty), `Ok(Some(config))` with Kafka's StandardAuthorizer. Err:
/// `(config name, reason)`.
pub fn authorizer_from_configs(
    class_name: Option<&str>,
    super_users: Option<&str>,
    allow_everyone_if_no_acl_found: Option<&str>,
) -> Result<Option<AuthorizerConfig>, (&'static str, String)> {
    match class_name.map(str::trim).unwrap_or("") {
        "" => Ok(None),
        STANDARD_AUTHORIZER => {
            AuthorizerConfig::from_configs(super_users, allow_everyone_if_no_acl_found)
                .map(Some)
                .map_err(|e| match e {
                    AclError::InvalidConfig { key, message } => (key, message),
                    other => (SUPER_USERS_CONFIG, other.to_string()),
                })
        }
        other => Err((
            AUTHORIZER_CLASS_NAME_CONFIG,
            format!(
                "authorizer class {other} is not available in Moldau; accepted: \
                 {STANDARD_AUTHORIZER}, or empty for no authorizer"
            ),
        )),
    }
}

/// SECURITY_DISABLED with Kafka's message for CreateAcls and DeleteAcls
/// unless an authorizer is configured.
pub fn require_authorizer(config: Option<&AuthorizerConfig>) -> Result<(), AclFailure> {
    security_disabled_unless(config, NO_AUTHORIZER)
}

/// SECURITY_DISABLED with Kafka's message for DescribeAcls unless an
/// authorizer is configured.
pub fn require_authorizer_to_describe(config: Option<&AuthorizerConfig>) -> Result<(), AclFailure> {
    security_disabled_unless(config, NO_AUTHORIZER_DESCRIBE)
}

fn security_disabled_unless(
    config: Option<&AuthorizerConfig>,
    message: &str,
) -> Result<(), AclFailure> {
    match config {
        Some(_) => Ok(()),
        None => Err(AclFailure {
            code: SECURITY_DISABLED_CODE,
            message: message.to_owned(),
        }),
    }
}

fn code<T: TryFrom<i8, Error = AclError>>(value: i8) -> Result<T, AclFailure> {
    T::try_from(value).map_err(AclFailure::from)
}

/// One creation of a CreateAcls request as a binding (not yet validated,
/// see [`create`]); an undefined code is INVALID_REQUEST.
#[allow(clippy::too_many_arguments)]
pub fn binding_from_wire(
    resource_type: i8,
    resource_name: &str,
    pattern_type: i8,
    principal: &str,
    host: &str,
    operation: i8,
    permission: i8,
) -> Result<AclBinding, AclFailure> {
    Ok(AclBinding::new(
        code::<ResourceType>(resource_type)?,
        resource_name,
        code::<PatternType>(pattern_type)?,
        principal,
        host,
        code::<AclOperation>(operation)?,
        code::<PermissionType>(permission)?,
    ))
}

/// A DescribeAcls or DeleteAcls filter, validated (an undefined code or an
/// `UNKNOWN` field is INVALID_REQUEST).
#[allow(clippy::too_many_arguments)]
pub fn filter_from_wire(
    resource_type: i8,
    resource_name: Option<&str>,
    pattern_type: i8,
    principal: Option<&str>,
    host: Option<&str>,
    operation: i8,
    permission: i8,
) -> Result<AclBindingFilter, AclFailure> {
    let filter = AclBindingFilter {
        resource_type: code(resource_type)?,
        resource_name: resource_name.map(str::to_owned),
        pattern_type: code(pattern_type)?,
        principal: principal.map(str::to_owned),
        host: host.map(str::to_owned),
        operation: code(operation)?,
        permission: code(permission)?,
    };
    filter.validate()?;
    Ok(filter)
}

/// The checks a creation passes before it is stored: Kafka's broker-side
/// ones (the CLUSTER resource's only name, a non-empty name, with Kafka's
/// messages) and then [`AclBinding::validate`].
pub fn validate_creation(binding: &AclBinding) -> Result<(), AclFailure> {
    if binding.resource_type == ResourceType::Cluster && binding.resource_name != CLUSTER_NAME {
        return Err(AclFailure::invalid(format!(
            "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        )));
    }
    if binding.resource_name.is_empty() {
        return Err(AclFailure::invalid("Invalid empty resource name"));
    }
    binding.validate().map_err(AclFailure::from)
}

/// CreateAcls against `set`: one result per creation, in order; whether
/// `set` changed. A creation already present succeeds without a change.
pub fn create(
    set: &mut AclSet,
    creations: &[Result<AclBinding, AclFailure>],
) -> (Vec<Result<(), AclFailure>>, bool) {
    let mut changed = false;
    let results = creations
        .iter()
        .map(|creation| {
            let binding = creation.as_ref().map_err(Clone::clone)?;
            validate_creation(binding)?;
            changed |= set.insert(binding.clone())?;
            Ok(())
        })
        .collect();
    (results, changed)
}

/// DeleteAcls against `set`: per filter, in order, the bindings it matched
/// in `set` as it was before the request (or why the filter was refused);
/// every matched binding is removed; whether `set` changed.
pub fn delete(
    set: &mut AclSet,
    filters: &[Result<AclBindingFilter, AclFailure>],
) -> (Vec<Result<Vec<AclBinding>, AclFailure>>, bool) {
    let results: Vec<Result<Vec<AclBinding>, AclFailure>> = filters
        .iter()
        .map(|filter| {
            let filter = filter.as_ref().map_err(Clone::clone)?;
            filter.validate()?;
            Ok(set.matching(filter))
        })
        .collect();
    let doomed: BTreeSet<&AclBinding> = results.iter().flatten().flatten().collect();
    let mut changed = false;
    for binding in doomed {
        changed |= set.remove(binding);
    }
    (results, changed)
}

/// A resource pattern of a DescribeAcls answer and its entries (bindings
/// of that pattern).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedResource {
    /// The pattern's resource type.
    pub resource_type: ResourceType,
    /// The pattern's name.
    pub resource_name: String,
    /// The pattern's type.
    pub pattern_type: PatternType,
    /// The bindings of this pattern.
    pub acls: Vec<AclBinding>,
}

/// DescribeAcls: the bindings passing `filter` (validated by
/// [`filter_from_wire`]), grouped by resource pattern in the set's order.
pub fn describe(set: &AclSet, filter: &AclBindingFilter) -> Vec<DescribedResource> {
    let mut out: Vec<DescribedResource> = Vec::new();
    for binding in set.matching(filter) {
        match out.last_mut() {
            Some(last)
                if last.resource_type == binding.resource_type
                    && last.pattern_type == binding.pattern_type
                    && last.resource_name == binding.resource_name =>
            {
                last.acls.push(binding);
            }
            _ => out.push(DescribedResource {
                resource_type: binding.resource_type,
                resource_name: binding.resource_name.clone(),
                pattern_type: binding.pattern_type,
                acls: vec![binding],
            }),
        }
    }
    out
}

/// A binding as persisted.
pub fn to_record(binding: &AclBinding) -> AclRecord {
    AclRecord {
        resource_type: binding.resource_type.name().to_owned(),
        resource_name: binding.resource_name.clone(),
        pattern_type: binding.pattern_type.name().to_owned(),
        principal: binding.principal.clone(),
        host: binding.host.clone(),
        operation: binding.operation.name().to_owned(),
        permission: binding.permission.name().to_owned(),
    }
}

/// A persisted binding back, validated.
pub fn from_record(record: &AclRecord) -> Result<AclBinding, AclError> {
    let binding = AclBinding::new(
        record.resource_type.parse()?,
        record.resource_name.as_str(),
        record.pattern_type.parse()?,
        record.principal.as_str(),
        record.host.as_str(),
        record.operation.parse()?,
        record.permission.parse()?,
    );
    binding.validate()?;
    Ok(binding)
}

/// Every binding of `set` as persisted, in the set's order.
pub fn to_records(set: &AclSet) -> Vec<AclRecord> {
    set.iter().map(|b| to_record(&b)).collect()
}

/// The set the records hold, and why each unusable record was left out.
pub fn from_records(records: &[AclRecord]) -> (AclSet, Vec<String>) {
    let mut set = AclSet::new();
    let mut skipped = Vec::new();
    for record in records {
        match from_record(record).and_then(|b| set.insert(b)) {
            Ok(_) => {}
            Err(e) => skipped.push(format!("ACL {record:?}: {e}")),
        }
    }
    (set, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::acl::{WILDCARD_HOST, WILDCARD_RESOURCE};

    fn b(name: &str, pat: PatternType, who: &str, op: AclOperation) -> AclBinding {
        AclBinding::new(
            ResourceType::Topic,
            name,
            pat,
            who,
            WILDCARD_HOST,
            op,
            PermissionType::Allow,
        )
    }

    fn topic_filter(name: Option<&str>, pat: PatternType) -> AclBindingFilter {
        AclBindingFilter {
            resource_type: ResourceType::Topic,
            resource_name: name.map(str::to_owned),
            pattern_type: pat,
            ..AclBindingFilter::any()
        }
    }

    #[test]
    fn authorizer_config_accepts_the_standard_authorizer_or_none() {
        assert_eq!(authorizer_from_configs(None, None, None), Ok(None));
        assert_eq!(
            authorizer_from_configs(Some(" "), Some("User:a"), None),
            Ok(None)
        );
        let c = authorizer_from_configs(
            Some(STANDARD_AUTHORIZER),
            Some("User:ANONYMOUS;User:admin"),
            Some("true"),
        )
        .unwrap()
        .unwrap();
        assert!(c.allow_everyone_if_no_acl_found);
        assert!(c.is_super_user("User:ANONYMOUS") && c.is_super_user("User:admin"));
        let (key, why) =
            authorizer_from_configs(Some("kafka.security.authorizer.AclAuthorizer"), None, None)
                .unwrap_err();
        assert_eq!(key, AUTHORIZER_CLASS_NAME_CONFIG);
        assert!(why.contains(STANDARD_AUTHORIZER), "{why}");
        let (key, _) =
            authorizer_from_configs(Some(STANDARD_AUTHORIZER), Some("admin"), None).unwrap_err();
        assert_eq!(key, SUPER_USERS_CONFIG);
    }

    #[test]
    fn without_an_authorizer_the_apis_are_security_disabled() {
        let e = require_authorizer(None).unwrap_err();
        assert_eq!((e.code, e.message.as_str()), (54, NO_AUTHORIZER));
        let e = require_authorizer_to_describe(None).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (54, "No Authorizer is configured on the broker")
        );
        assert!(require_authorizer(Some(&AuthorizerConfig::default())).is_ok());
        assert!(require_authorizer_to_describe(Some(&AuthorizerConfig::default())).is_ok());
    }

    #[test]
    fn wire_codes_are_checked() {
        assert!(binding_from_wire(2, "t", 3, "User:a", "*", 3, 3).is_ok());
        for bad in [
            binding_from_wire(9, "t", 3, "User:a", "*", 3, 3),
            binding_from_wire(2, "t", 7, "User:a", "*", 3, 3),
            binding_from_wire(2, "t", 3, "User:a", "*", 42, 3),
            binding_from_wire(2, "t", 3, "User:a", "*", 3, -1),
        ] {
            assert_eq!(bad.unwrap_err().code, INVALID_REQUEST_CODE);
        }
        let f = filter_from_wire(1, None, 1, None, None, 1, 1).unwrap();
        assert_eq!(f, AclBindingFilter::any());
        // UNKNOWN (0) is refused in a filter
        for bad in [
            filter_from_wire(0, None, 1, None, None, 1, 1),
            filter_from_wire(1, None, 0, None, None, 1, 1),
            filter_from_wire(1, None, 1, None, None, 0, 1),
            filter_from_wire(1, None, 1, None, None, 1, 0),
            filter_from_wire(1, None, 9, None, None, 1, 1),
        ] {
            assert_eq!(bad.unwrap_err().code, INVALID_REQUEST_CODE);
        }
    }

    #[test]
    fn creations_are_judged_one_by_one() {
        let mut set = AclSet::new();
        let alice = b(
            "orders",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
        );
        let cluster_bad = AclBinding::new(
            ResourceType::Cluster,
            "my-cluster",
            PatternType::Literal,
            "User:alice",
            "*",
            AclOperation::Alter,
            PermissionType::Allow,
        );
        let empty = b("", PatternType::Literal, "User:alice", AclOperation::Read);
        let no_colon = b("orders", PatternType::Literal, "alice", AclOperation::Read);
        let any_op = b("orders", PatternType::Literal, "User:a", AclOperation::Any);
        let (results, changed) = create(
            &mut set,
            &[
                Ok(alice.clone()),
                Ok(cluster_bad),
                Ok(empty),
                Ok(no_colon),
                Ok(any_op),
                Err(AclFailure::invalid("bad code")),
            ],
        );
        assert!(changed);
        assert_eq!(results[0], Ok(()));
        assert_eq!(
            results[1].as_ref().unwrap_err().message,
            "The only valid name for the CLUSTER resource is kafka-cluster"
        );
        assert_eq!(
            results[2].as_ref().unwrap_err().message,
            "Invalid empty resource name"
        );
        for r in &results[1..] {
            assert_eq!(r.as_ref().unwrap_err().code, INVALID_REQUEST_CODE);
        }
        assert_eq!(set.len(), 1);
        // creating it again succeeds and changes nothing
        let (results, changed) = create(&mut set, &[Ok(alice)]);
        assert_eq!(results, vec![Ok(())]);
        assert!(!changed);
    }

    #[test]
    fn deletions_report_what_each_filter_matched_before_the_request() {
        let lit = b(
            "orders",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
        );
        let pre = b(
            "orders",
            PatternType::Prefixed,
            "User:bob",
            AclOperation::Write,
        );
        let other = b(
            "payments",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
        );
        let mut set = AclSet::from_bindings([lit.clone(), pre.clone(), other.clone()]).unwrap();
        let by_alice = AclBindingFilter {
            principal: Some("User:alice".into()),
            ..AclBindingFilter::any()
        };
        let (results, changed) = delete(
            &mut set,
            &[
                Ok(topic_filter(Some("orders"), PatternType::Any)),
                Ok(by_alice),
                Ok(AclBindingFilter {
                    operation: AclOperation::Unknown,
                    ..AclBindingFilter::any()
                }),
            ],
        );
        assert!(changed);
        assert_eq!(results[0], Ok(vec![lit.clone(), pre]));
        assert_eq!(results[1], Ok(vec![lit, other]));
        assert_eq!(results[2].as_ref().unwrap_err().code, INVALID_REQUEST_CODE);
        assert!(set.is_empty());
        let (results, changed) = delete(&mut set, &[Ok(AclBindingFilter::any())]);
        assert_eq!(results, vec![Ok(vec![])]);
        assert!(!changed);
    }

    #[test]
    fn describe_groups_by_pattern_and_match_finds_applicable_patterns() {
        let a = b(
            "orders",
            PatternType::Literal,
            "User:alice",
            AclOperation::Read,
        );
        let a2 = b(
            "orders",
            PatternType::Literal,
            "User:carol",
            AclOperation::Read,
        );
        let p = b(
            "orders",
            PatternType::Prefixed,
            "User:bob",
            AclOperation::Write,
        );
        let w = b(
            WILDCARD_RESOURCE,
            PatternType::Literal,
            "User:*",
            AclOperation::Describe,
        );
        let set = AclSet::from_bindings([a.clone(), a2.clone(), p.clone(), w.clone()]).unwrap();
        let got = describe(&set, &topic_filter(Some("orders"), PatternType::Any));
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].pattern_type, got[0].acls.clone()),
            (PatternType::Literal, vec![a, a2])
        );
        assert_eq!(
            (got[1].pattern_type, got[1].acls.clone()),
            (PatternType::Prefixed, vec![p.clone()])
        );
        let got = describe(&set, &topic_filter(Some("orders-x"), PatternType::Match));
        let patterns: Vec<(&str, PatternType)> = got
            .iter()
            .map(|r| (r.resource_name.as_str(), r.pattern_type))
            .collect();
        assert_eq!(
            patterns,
            vec![
                (WILDCARD_RESOURCE, PatternType::Literal),
                ("orders", PatternType::Prefixed)
            ]
        );
        assert!(describe(&set, &topic_filter(Some("nothing"), PatternType::Literal)).is_empty());
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_skipped() {
        let a = b(
            "orders",
            PatternType::Prefixed,
            "User:alice",
            AclOperation::All,
        );
        let set = AclSet::from_bindings([a.clone()]).unwrap();
        let records = to_records(&set);
        assert_eq!(records[0].pattern_type, "PREFIXED");
        assert_eq!(records[0].operation, "ALL");
        let mut with_bad = records.clone();
        with_bad.push(AclRecord {
            operation: "REED".into(),
            ..records[0].clone()
        });
        with_bad.push(AclRecord {
            pattern_type: "MATCH".into(),
            ..records[0].clone()
        });
        let (back, skipped) = from_records(&with_bad);
        assert_eq!(back, set);
        assert_eq!(skipped.len(), 2, "{skipped:?}");
    }
}
