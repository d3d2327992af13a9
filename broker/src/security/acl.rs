//! Kafka's authorizer semantics over a set of ACL bindings, as pure code.
//!
//! This module owns the *rules* of Kafka's ACL authorizer (the KRaft
//! `StandardAuthorizer`, which kept the semantics of the older ZooKeeper
//! `AclAuthorizer`): nothing here does I/O, stores anything durably or knows
//! the wire protocol. The wire edge turns requests into the types below, the
//! metadata image keeps an [`AclSet`] up to date, and every handler asks one
//! [`Authorizer`].
//!
//! What it provides:
//!
//! - the vocabulary with Kafka's numeric codes: [`ResourceType`],
//!   [`PatternType`], [`AclOperation`], [`PermissionType`], each converting
//!   from and to `i8` (strictly: a code Kafka does not define is an error);
//! - [`AclBinding`] (one ACL: a resource pattern and an access control entry)
//!   with [`AclBinding::validate`], the checks Kafka's controller makes before
//!   `CreateAcls` stores a binding;
//! - [`AclBindingFilter`] with Kafka's matching for `DescribeAcls` and
//!   `DeleteAcls` (`ANY`, the `MATCH` pattern type, `None` as "any");
//! - [`AclSet`], the bindings indexed by resource type, then by literal name
//!   and by prefix, so that one authorization looks up only the patterns that
//!   can match the resource (the exact name, the wildcard `*` and the
//!   prefixes of the name);
//! - [`Authorizer`]: [`Authorizer::authorize`] (super users, deny before
//!   allow, operation implications, `allow.everyone.if.no.acl.found`),
//!   [`Authorizer::authorize_by_resource_type`] (Kafka's
//!   `authorizeByResourceType`, used e.g. for an idempotent producer without
//!   `IDEMPOTENT_WRITE` on the cluster but with `WRITE` on some topic) and
//!   [`Authorizer::authorized_operations`] (the `authorized_operations`
//!   bitfield of `Metadata`, `DescribeCluster` and `DescribeGroups`).
//!
//! Principals are strings `"Type:name"` (`"User:alice"`); the wildcard
//! principal is `"User:*"` only (Kafka has no wildcard for other types).
//! Hosts are compared as strings: an ACL's host is `"*"` or must equal the
//! textual client address the caller passes (Kafka uses Java's
//! `InetAddress.getHostAddress()` text; the wire layer picks the form).
//!
//! Deliberate differences from Kafka, all stricter and harmless to clients:
//! a principal must have a non-empty type *and* a non-empty name (Kafka only
//! checks for the colon), and authorization questions asked with a filter
//! value (`ANY`/`UNKNOWN` operation or resource type) are denied rather than
//! thrown as a programming error.
//!
//! Not here: the `CreateAcls`/`DescribeAcls`/`DeleteAcls` decisions and ACLs
//! as metadata records (`security::acl_admin`); later work of issue 38:
//! enforcement in the handlers, audit logging, and the "authorizer not
//! ready" state of a broker that has not loaded its ACLs yet.
//!
//! This module imports nothing of the broker.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The literal resource name that matches every resource of its type.
pub const WILDCARD_RESOURCE: &str = "*";
/// The principal that matches every principal (of any type, as in Kafka).
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The host that matches every client address.
pub const WILDCARD_HOST: &str = "*";
/// The only name of the `CLUSTER` resource that Kafka ever authorizes.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// Broker config: semicolon-separated principals that bypass all ACLs.
pub const SUPER_USERS_CONFIG: &str = "super.users";
/// Broker config: whether a resource without any ACL is open to everyone.
pub const ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG: &str = "allow.everyone.if.no.acl.found";
/// The `authorized_operations` value of a response when the client did not
/// ask for them (Kafka's `Integer.MIN_VALUE`).
pub const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// Kafka error code `INVALID_REQUEST`.
const INVALID_REQUEST_CODE: i16 = 42;
/// Kafka error code `INVALID_CONFIG`.
const INVALID_CONFIG_CODE: i16 = 40;

/// The resource name `authorize_by_resource_type` first authorizes, exactly
/// as Kafka's default implementation does, so that super users (and, with
/// `allow.everyone.if.no.acl.found`, everyone when no ACL applies to an
/// arbitrary name) are allowed whatever the DENY ACLs say.
const PROBE_RESOURCE_NAME: &str = "hardcode";

/// Why an ACL value, binding or filter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// A numeric code that Kafka does not define for this enum.
    #[error("unknown {kind} code {code}")]
    UnknownCode {
        /// Which enum (`"resource type"`, `"operation"`, ...).
        kind: &'static str,
        /// The code received.
        code: i8,
    },
    /// A name that is not one of Kafka's names for this enum.
    #[error("unknown {kind} name {name:?}")]
    UnknownName {
        /// Which enum (`"resource type"`, `"operation"`, ...).
        kind: &'static str,
        /// The name received.
        name: String,
    },
    /// A binding or filter that Kafka answers with `INVALID_REQUEST`.
    #[error("{0}")]
    InvalidRequest(String),
    /// An authorizer config value that cannot be used.
    #[error("invalid value for `{key}`: {message}")]
    InvalidConfig {
        /// The config key.
        key: &'static str,
        /// What is wrong with its value.
        message: String,
    },
}

impl AclError {
    /// The Kafka error code a response carries for this error.
    pub fn kafka_error_code(&self) -> i16 {
        match self {
            AclError::UnknownCode { .. }
            | AclError::UnknownName { .. }
            | AclError::InvalidRequest(_) => INVALID_REQUEST_CODE,
            AclError::InvalidConfig { .. } => INVALID_CONFIG_CODE,
        }
    }
}

/// Declares one of Kafka's small ACL enums: the numeric codes, Kafka's
/// upper-case names, strict `i8` conversions, `Display` and `FromStr`.
macro_rules! kafka_acl_enum {
    (
        $(#[$meta:meta])*
        $name:ident, $kind:literal,
        { $( $(#[$vmeta:meta])* $variant:ident = $code:literal, $text:literal; )+ }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $code, )+
        }

        impl $name {
            /// Every value, in code order.
            pub const VALUES: &'static [$name] = &[$($name::$variant),+];

            /// Kafka's numeric code.
            pub const fn code(self) -> i8 {
                self as i8
            }

            /// Kafka's name (as `kafka-acls` and the Java enum spell it).
            pub const fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl TryFrom<i8> for $name {
            type Error = AclError;

            fn try_from(code: i8) -> Result<Self, AclError> {
                match code {
                    $( $code => Ok($name::$variant), )+
                    _ => Err(AclError::UnknownCode { kind: $kind, code }),
                }
            }
        }

        impl From<$name> for i8 {
            fn from(value: $name) -> i8 {
                value.code()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $name {
            type Err = AclError;

            /// Case-insensitive, as Kafka's `fromString`; unlike Kafka an
            /// unknown name is an error instead of `UNKNOWN`.
            fn from_str(s: &str) -> Result<Self, AclError> {
                let wanted = s.trim();
                Self::VALUES
                    .iter()
                    .copied()
                    .find(|v| v.name().eq_ignore_ascii_case(wanted))
                    .ok_or_else(|| AclError::UnknownName {
                        kind: $kind,
                        name: s.to_owned(),
                    })
            }
        }
    };
}

kafka_acl_enum! {
    /// The kind of resource an ACL protects (Kafka's `ResourceType`).
    ResourceType, "resource type", {
        /// Not a value a client should send.
        Unknown = 0, "UNKNOWN";
        /// Filter only: every resource type.
        Any = 1, "ANY";
        /// A topic.
        Topic = 2, "TOPIC";
        /// A consumer (or share/streams) group.
        Group = 3, "GROUP";
        /// The cluster itself; its only name is [`CLUSTER_NAME`].
        Cluster = 4, "CLUSTER";
        /// A transactional id.
        TransactionalId = 5, "TRANSACTIONAL_ID";
        /// A delegation token.
        DelegationToken = 6, "DELEGATION_TOKEN";
        /// A user (for delegation tokens on behalf of others).
        User = 7, "USER";
    }
}

kafka_acl_enum! {
    /// How an ACL's resource name matches resource names (Kafka's
    /// `PatternType`).
    PatternType, "pattern type", {
        /// Not a value a client should send.
        Unknown = 0, "UNKNOWN";
        /// Filter only: any pattern type, names compared exactly.
        Any = 1, "ANY";
        /// Filter only: every pattern that would match the filter's name.
        Match = 2, "MATCH";
        /// The exact name, or every name if it is [`WILDCARD_RESOURCE`].
        Literal = 3, "LITERAL";
        /// Every name starting with the pattern's name.
        Prefixed = 4, "PREFIXED";
    }
}

kafka_acl_enum! {
    /// What an ACL allows or denies doing (Kafka's `AclOperation`).
    AclOperation, "operation", {
        /// Not a value a client should send.
        Unknown = 0, "UNKNOWN";
        /// Filter only: every operation.
        Any = 1, "ANY";
        /// In an ACL: every operation.
        All = 2, "ALL";
        /// Read.
        Read = 3, "READ";
        /// Write.
        Write = 4, "WRITE";
        /// Create.
        Create = 5, "CREATE";
        /// Delete.
        Delete = 6, "DELETE";
        /// Alter.
        Alter = 7, "ALTER";
        /// Describe.
        Describe = 8, "DESCRIBE";
        /// Inter-broker actions on the cluster.
        ClusterAction = 9, "CLUSTER_ACTION";
        /// Describe configs.
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        /// Alter configs.
        AlterConfigs = 11, "ALTER_CONFIGS";
        /// Idempotent produce (on the cluster).
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        /// Create delegation tokens (on a user).
        CreateTokens = 13, "CREATE_TOKENS";
        /// Describe delegation tokens (on a user).
        DescribeTokens = 14, "DESCRIBE_TOKENS";
        /// Two-phase commit of a transaction (KIP-939).
        TwoPhaseCommit = 15, "TWO_PHASE_COMMIT";
    }
}

kafka_acl_enum! {
    /// Whether an ACL allows or denies (Kafka's `AclPermissionType`).
    PermissionType, "permission type", {
        /// Not a value a client should send.
        Unknown = 0, "UNKNOWN";
        /// Filter only: both.
        Any = 1, "ANY";
        /// Denies; a matching DENY wins over every ALLOW.
        Deny = 2, "DENY";
        /// Allows.
        Allow = 3, "ALLOW";
    }
}

impl ResourceType {
    /// Whether this is a filter value (`ANY`) or `UNKNOWN`, which no binding
    /// and no authorization question may carry.
    pub const fn is_concrete(self) -> bool {
        !matches!(self, ResourceType::Unknown | ResourceType::Any)
    }

    /// The operations that make sense on this resource type, in Kafka's
    /// order (`AclEntry.supportedOperations`): what
    /// [`Authorizer::authorized_operations`] reports on. Empty for `ANY` and
    /// `UNKNOWN`.
    pub const fn supported_operations(self) -> &'static [AclOperation] {
        use AclOperation as Op;
        match self {
            ResourceType::Topic => &[
                Op::Read,
                Op::Write,
                Op::Create,
                Op::Describe,
                Op::Delete,
                Op::Alter,
                Op::DescribeConfigs,
                Op::AlterConfigs,
            ],
            ResourceType::Group => &[
                Op::Read,
                Op::Describe,
                Op::Delete,
                Op::DescribeConfigs,
                Op::AlterConfigs,
            ],
            ResourceType::Cluster => &[
                Op::Create,
                Op::ClusterAction,
                Op::DescribeConfigs,
                Op::AlterConfigs,
                Op::IdempotentWrite,
                Op::Alter,
                Op::Describe,
            ],
            ResourceType::TransactionalId => &[Op::Describe, Op::Write, Op::TwoPhaseCommit],
            ResourceType::DelegationToken => &[Op::Describe],
            ResourceType::User => &[Op::CreateTokens, Op::DescribeTokens],
            ResourceType::Unknown | ResourceType::Any => &[],
        }
    }
}

impl AclOperation {
    /// Whether this is a filter value (`ANY`) or `UNKNOWN`.
    pub const fn is_concrete(self) -> bool {
        !matches!(self, AclOperation::Unknown | AclOperation::Any)
    }

    /// Whether an ALLOW ACL for `self` allows `requested`: `ALL` allows
    /// everything; READ, WRITE, DELETE and ALTER also allow DESCRIBE;
    /// ALTER_CONFIGS also allows DESCRIBE_CONFIGS. (A DENY ACL denies only
    /// its own operation, or everything for `ALL`: see
    /// [`AclOperation::deny_covers`].)
    pub fn allow_covers(self, requested: AclOperation) -> bool {
        use AclOperation as Op;
        if self == Op::All || self == requested {
            return true;
        }
        match requested {
            Op::Describe => matches!(self, Op::Read | Op::Write | Op::Delete | Op::Alter),
            Op::DescribeConfigs => self == Op::AlterConfigs,
            _ => false,
        }
    }

    /// Whether a DENY ACL for `self` denies `requested`: only the same
    /// operation, or any operation for `ALL` (no implications).
    pub fn deny_covers(self, requested: AclOperation) -> bool {
        self == AclOperation::All || self == requested
    }

    /// The bit of this operation in Kafka's `authorized_operations` field.
    pub fn bit(self) -> i32 {
        1i32.checked_shl(u32::from(self.code().unsigned_abs()))
            .unwrap_or(0)
    }
}

impl PatternType {
    /// Whether a binding may be stored with this pattern type (`LITERAL` or
    /// `PREFIXED`).
    pub const fn is_concrete(self) -> bool {
        matches!(self, PatternType::Literal | PatternType::Prefixed)
    }
}

impl PermissionType {
    /// Whether this is `ALLOW` or `DENY`.
    pub const fn is_concrete(self) -> bool {
        matches!(self, PermissionType::Allow | PermissionType::Deny)
    }
}

/// Splits a principal `"Type:name"` at its first colon; both parts must be
/// non-empty (the name may itself contain colons).
pub fn parse_principal(principal: &str) -> Result<(&str, &str), AclError> {
    match principal.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok((kind, name)),
        Some(_) => Err(AclError::InvalidRequest(format!(
            "principal `{principal}` must have a non-empty type and name (`Type:name`)"
        ))),
        None => Err(AclError::InvalidRequest(format!(
            "could not parse principal `{principal}`: no colon separates the principal type from the principal name"
        ))),
    }
}

/// One ACL: who (`principal` from `host`) may or may not (`permission`) do
/// what (`operation`) to which resources (`resource_type`, `resource_name`
/// read through `pattern_type`). Kafka's `AclBinding`, flattened as on the
/// wire.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    /// The type of the resources.
    pub resource_type: ResourceType,
    /// A name, a prefix, or [`WILDCARD_RESOURCE`].
    pub resource_name: String,
    /// `LITERAL` or `PREFIXED` once validated.
    pub pattern_type: PatternType,
    /// `"Type:name"`, e.g. `"User:alice"`, or [`WILDCARD_PRINCIPAL`].
    pub principal: String,
    /// A client address or [`WILDCARD_HOST`].
    pub host: String,
    /// The operation allowed or denied (`ALL` for every one).
    pub operation: AclOperation,
    /// `ALLOW` or `DENY` once validated.
    pub permission: PermissionType,
}

impl AclBinding {
    /// A binding from its seven fields (not validated: see
    /// [`AclBinding::validate`]).
    pub fn new(
        resource_type: ResourceType,
        resource_name: impl Into<String>,
        pattern_type: PatternType,
        principal: impl Into<String>,
        host: impl Into<String>,
        operation: AclOperation,
        permission: PermissionType,
    ) -> Self {
        AclBinding {
            resource_type,
            resource_name: resource_name.into(),
            pattern_type,
            principal: principal.into(),
            host: host.into(),
            operation,
            permission,
        }
    }

    /// The checks Kafka makes before storing a binding of `CreateAcls`:
    /// a concrete resource type, pattern type (`LITERAL` or `PREFIXED`),
    /// operation (anything but `ANY`/`UNKNOWN`) and permission (`ALLOW` or
    /// `DENY`); a non-empty resource name (so no empty prefix); a principal
    /// `"Type:name"`. A `PREFIXED` `"*"` is accepted as Kafka does; it is just
    /// the prefix `*`, not a wildcard. The error is `INVALID_REQUEST`.
    pub fn validate(&self) -> Result<(), AclError> {
        if !self.resource_type.is_concrete() {
            return Err(AclError::InvalidRequest(format!(
                "invalid resource type {} for an ACL binding",
                self.resource_type
            )));
        }
        if !self.pattern_type.is_concrete() {
            return Err(AclError::InvalidRequest(format!(
                "invalid pattern type {} for an ACL binding: only LITERAL and PREFIXED can be created",
                self.pattern_type
            )));
        }
        if !self.operation.is_concrete() {
            return Err(AclError::InvalidRequest(format!(
                "invalid operation {} for an ACL binding",
                self.operation
            )));
        }
        if !self.permission.is_concrete() {
            return Err(AclError::InvalidRequest(format!(
                "invalid permission type {} for an ACL binding: only ALLOW and DENY can be created",
                self.permission
            )));
        }
        if self.resource_name.is_empty() {
            return Err(AclError::InvalidRequest(
                "resource name of an ACL binding must not be empty".to_owned(),
            ));
        }
        parse_principal(&self.principal)?;
        Ok(())
    }

    /// The filter matching exactly this binding (Kafka's `toFilter`).
    pub fn to_filter(&self) -> AclBindingFilter {
        AclBindingFilter {
            resource_type: self.resource_type,
            resource_name: Some(self.resource_name.clone()),
            pattern_type: self.pattern_type,
            principal: Some(self.principal.clone()),
            host: Some(self.host.clone()),
            operation: self.operation,
            permission: self.permission,
        }
    }
}

/// A filter over bindings for `DescribeAcls` and `DeleteAcls` (Kafka's
/// `AclBindingFilter`). `ANY` in an enum field and `None` in a string field
/// match every value; principal and host, when given, are compared exactly
/// (a filter for `"User:alice"` does not return `"User:*"` bindings).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AclBindingFilter {
    /// A type, or `ANY`.
    pub resource_type: ResourceType,
    /// A name, or `None` for any.
    pub resource_name: Option<String>,
    /// `ANY` (names compared exactly), `MATCH` (patterns that match the
    /// name), or one pattern type.
    pub pattern_type: PatternType,
    /// A principal, or `None` for any.
    pub principal: Option<String>,
    /// A host, or `None` for any.
    pub host: Option<String>,
    /// An operation, or `ANY`.
    pub operation: AclOperation,
    /// A permission type, or `ANY`.
    pub permission: PermissionType,
}

impl Default for AclBindingFilter {
    fn default() -> Self {
        Self::any()
    }
}

impl AclBindingFilter {
    /// The filter matching every binding.
    pub fn any() -> Self {
        AclBindingFilter {
            resource_type: ResourceType::Any,
            resource_name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: AclOperation::Any,
            permission: PermissionType::Any,
        }
    }

    /// Kafka refuses filters with an `UNKNOWN` field (`INVALID_REQUEST`).
    pub fn validate(&self) -> Result<(), AclError> {
        let unknown = if self.resource_type == ResourceType::Unknown {
            Some("resource type")
        } else if self.pattern_type == PatternType::Unknown {
            Some("pattern type")
        } else if self.operation == AclOperation::Unknown {
            Some("operation")
        } else if self.permission == PermissionType::Unknown {
            Some("permission type")
        } else {
            None
        };
        match unknown {
            Some(field) => Err(AclError::InvalidRequest(format!(
                "ACL filter has an UNKNOWN {field}"
            ))),
            None => Ok(()),
        }
    }

    /// Whether `binding` passes this filter.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.matches_pattern(
            binding.resource_type,
            &binding.resource_name,
            binding.pattern_type,
        ) && self.matches_entry(
            &binding.principal,
            &binding.host,
            binding.operation,
            binding.permission,
        )
    }

    /// The resource half of [`AclBindingFilter::matches`] (Kafka's
    /// `ResourcePatternFilter.matches`).
    fn matches_pattern(
        &self,
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
    ) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match)
            && self.pattern_type != pattern_type
        {
            return false;
        }
        let Some(wanted) = self.resource_name.as_deref() else {
            return true;
        };
        if self.pattern_type != PatternType::Match {
            // ANY, or the binding's own pattern type: names compare exactly.
            return wanted == name;
        }
        // MATCH: the patterns that would match a resource named `wanted`.
        match pattern_type {
            PatternType::Literal => wanted == name || name == WILDCARD_RESOURCE,
            PatternType::Prefixed => wanted.starts_with(name),
            _ => false,
        }
    }

    /// The entry half of [`AclBindingFilter::matches`] (Kafka's
    /// `AccessControlEntryFilter.matches`).
    fn matches_entry(
        &self,
        principal: &str,
        host: &str,
        operation: AclOperation,
        permission: PermissionType,
    ) -> bool {
        self.principal.as_deref().is_none_or(|p| p == principal)
            && self.host.as_deref().is_none_or(|h| h == host)
            && (self.operation == AclOperation::Any || self.operation == operation)
            && (self.permission == PermissionType::Any || self.permission == permission)
    }
}

/// The access control entry half of a binding, as stored under its pattern.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Entry {
    principal: String,
    host: String,
    operation: AclOperation,
    permission: PermissionType,
}

/// Entries by pattern name; a `BTreeSet` dedups and keeps a stable order.
type EntriesByName = BTreeMap<String, BTreeSet<Entry>>;

/// The bindings of one resource type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TypeAcls {
    literal: EntriesByName,
    prefixed: EntriesByName,
}

impl TypeAcls {
    fn names(&self, pattern_type: PatternType) -> Option<&EntriesByName> {
        match pattern_type {
            PatternType::Literal => Some(&self.literal),
            PatternType::Prefixed => Some(&self.prefixed),
            _ => None,
        }
    }

    fn names_mut(&mut self, pattern_type: PatternType) -> Option<&mut EntriesByName> {
        match pattern_type {
            PatternType::Literal => Some(&mut self.literal),
            PatternType::Prefixed => Some(&mut self.prefixed),
            _ => None,
        }
    }

    /// Every `(pattern type, pattern name, entries)` of this type.
    fn patterns(&self) -> impl Iterator<Item = (PatternType, &str, &BTreeSet<Entry>)> + '_ {
        let literal = self
            .literal
            .iter()
            .map(|(n, e)| (PatternType::Literal, n.as_str(), e));
        let prefixed = self
            .prefixed
            .iter()
            .map(|(n, e)| (PatternType::Prefixed, n.as_str(), e));
        literal.chain(prefixed)
    }

    /// The patterns that match a resource named `name`: the literal name,
    /// the literal wildcard, and every prefixed pattern that is a prefix of
    /// `name` (found by looking up each prefix of `name`, not by scanning).
    fn patterns_matching<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (PatternType, &'a str, &'a BTreeSet<Entry>)> + 'a {
        let exact = self.literal.get_key_value(name);
        let wildcard = if name == WILDCARD_RESOURCE {
            None
        } else {
            self.literal.get_key_value(WILDCARD_RESOURCE)
        };
        let literal = exact
            .into_iter()
            .chain(wildcard)
            .map(|(n, e)| (PatternType::Literal, n.as_str(), e));
        let prefix_lengths = if self.prefixed.is_empty() {
            0..0
        } else {
            1..name.len() + 1
        };
        let prefixed = prefix_lengths
            .filter_map(move |len| name.get(..len))
            .filter_map(move |prefix| self.prefixed.get_key_value(prefix))
            .map(|(n, e)| (PatternType::Prefixed, n.as_str(), e));
        literal.chain(prefixed)
    }
}

/// An ACL as the authorizer matched it, borrowed from the [`AclSet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchedAcl<'a> {
    /// The binding's resource type.
    pub resource_type: ResourceType,
    /// The binding's pattern type.
    pub pattern_type: PatternType,
    /// The binding's resource name (the literal name, `*` or the prefix).
    pub resource_name: &'a str,
    /// The binding's principal.
    pub principal: &'a str,
    /// The binding's host.
    pub host: &'a str,
    /// The binding's operation.
    pub operation: AclOperation,
    /// The binding's permission.
    pub permission: PermissionType,
}

impl MatchedAcl<'_> {
    /// Whether this ACL is about `principal` (itself or [`WILDCARD_PRINCIPAL`])
    /// connecting from `host` (itself or [`WILDCARD_HOST`]).
    pub fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == host || self.host == WILDCARD_HOST)
    }

    /// An owned copy of the binding.
    pub fn to_binding(&self) -> AclBinding {
        AclBinding::new(
            self.resource_type,
            self.resource_name,
            self.pattern_type,
            self.principal,
            self.host,
            self.operation,
            self.permission,
        )
    }
}

/// A set of valid, distinct ACL bindings, indexed for authorization.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclSet {
    by_type: BTreeMap<ResourceType, TypeAcls>,
    len: usize,
}

impl AclSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A set of the given bindings (validated; duplicates collapse).
    pub fn from_bindings(bindings: impl IntoIterator<Item = AclBinding>) -> Result<Self, AclError> {
        let mut set = Self::new();
        for binding in bindings {
            set.insert(binding)?;
        }
        Ok(set)
    }

    /// The number of bindings.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no binding.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a binding after [`AclBinding::validate`]; `Ok(false)` if it was
    /// already there (creating an existing ACL succeeds in Kafka).
    pub fn insert(&mut self, binding: AclBinding) -> Result<bool, AclError> {
        binding.validate()?;
        let AclBinding {
            resource_type,
            resource_name,
            pattern_type,
            principal,
            host,
            operation,
            permission,
        } = binding;
        let Some(names) = self
            .by_type
            .entry(resource_type)
            .or_default()
            .names_mut(pattern_type)
        else {
            // Unreachable after validate: only LITERAL and PREFIXED pass.
            return Err(AclError::InvalidRequest(format!(
                "invalid pattern type {pattern_type} for an ACL binding"
            )));
        };
        let added = names.entry(resource_name).or_default().insert(Entry {
            principal,
            host,
            operation,
            permission,
        });
        if added {
            self.len += 1;
        }
        Ok(added)
    }

    /// Removes one binding; whether it was there.
    pub fn remove(&mut self, binding: &AclBinding) -> bool {
        let Some(acls) = self.by_type.get_mut(&binding.resource_type) else {
            return false;
        };
        let Some(names) = acls.names_mut(binding.pattern_type) else {
            return false;
        };
        let Some(entries) = names.get_mut(&binding.resource_name) else {
            return false;
        };
        let entry = Entry {
            principal: binding.principal.clone(),
            host: binding.host.clone(),
            operation: binding.operation,
            permission: binding.permission,
        };
        if !entries.remove(&entry) {
            return false;
        }
        if entries.is_empty() {
            names.remove(&binding.resource_name);
        }
        if acls.literal.is_empty() && acls.prefixed.is_empty() {
            self.by_type.remove(&binding.resource_type);
        }
        self.len -= 1;
        true
    }

    /// Whether the set holds this binding.
    pub fn contains(&self, binding: &AclBinding) -> bool {
        self.by_type
            .get(&binding.resource_type)
            .and_then(|acls| acls.names(binding.pattern_type))
            .and_then(|names| names.get(&binding.resource_name))
            .is_some_and(|entries| {
                entries.iter().any(|e| {
                    e.principal == binding.principal
                        && e.host == binding.host
                        && e.operation == binding.operation
                        && e.permission == binding.permission
                })
            })
    }

    /// Every binding, in a stable order (resource type, literal before
    /// prefixed, name, entry).
    pub fn iter(&self) -> impl Iterator<Item = AclBinding> + '_ {
        self.matched(None).map(|acl| acl.to_binding())
    }

    /// The bindings passing `filter` (`DescribeAcls`); validating the filter
    /// is the caller's ([`AclBindingFilter::validate`]).
    pub fn matching(&self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        self.matched(Some(filter.resource_type))
            .map(|acl| acl.to_binding())
            .filter(|binding| filter.matches(binding))
            .collect()
    }

    /// Removes and returns the bindings passing `filter` (`DeleteAcls`).
    pub fn remove_matching(&mut self, filter: &AclBindingFilter) -> Vec<AclBinding> {
        let removed = self.matching(filter);
        for binding in &removed {
            self.remove(binding);
        }
        removed
    }

    /// Every ACL of `resource_type` (all types for `None` or `ANY`).
    fn matched(
        &self,
        resource_type: Option<ResourceType>,
    ) -> impl Iterator<Item = MatchedAcl<'_>> + '_ {
        let wanted = resource_type.filter(|t| *t != ResourceType::Any);
        self.by_type
            .iter()
            .filter(move |(t, _)| wanted.is_none_or(|w| w == **t))
            .flat_map(|(t, acls)| {
                acls.patterns()
                    .flat_map(move |(pattern_type, name, entries)| {
                        entries
                            .iter()
                            .map(move |e| matched_acl(*t, pattern_type, name, e))
                    })
            })
    }

    /// The ACLs whose pattern matches the resource `(resource_type, name)`,
    /// whoever they are for.
    fn matching_resource<'a>(
        &'a self,
        resource_type: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = MatchedAcl<'a>> + 'a {
        self.by_type
            .get(&resource_type)
            .into_iter()
            .flat_map(move |acls| acls.patterns_matching(name))
            .flat_map(move |(pattern_type, pattern, entries)| {
                entries
                    .iter()
                    .map(move |e| matched_acl(resource_type, pattern_type, pattern, e))
            })
    }
}

fn matched_acl<'a>(
    resource_type: ResourceType,
    pattern_type: PatternType,
    resource_name: &'a str,
    entry: &'a Entry,
) -> MatchedAcl<'a> {
    MatchedAcl {
        resource_type,
        pattern_type,
        resource_name,
        principal: &entry.principal,
        host: &entry.host,
        operation: entry.operation,
        permission: entry.permission,
    }
}

/// The authorizer's configuration (Kafka's `super.users` and
/// `allow.everyone.if.no.acl.found`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals (`"Type:name"`) allowed everything, whatever the ACLs.
    pub super_users: BTreeSet<String>,
    /// Whether a resource that no ACL's pattern matches is open to everyone
    /// (default `false`: denied).
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// The configuration from the two config values as strings (`None`
    /// when unset).
    pub fn from_configs(
        super_users: Option<&str>,
        allow_everyone_if_no_acl_found: Option<&str>,
    ) -> Result<Self, AclError> {
        Ok(AuthorizerConfig {
            super_users: match super_users {
                Some(value) => Self::parse_super_users(value)?,
                None => BTreeSet::new(),
            },
            allow_everyone_if_no_acl_found: allow_everyone_if_no_acl_found
                .is_some_and(Self::parse_allow_everyone),
        })
    }

    /// Parses `super.users`: principals separated by `;`, each trimmed,
    /// empty ones skipped, each a valid `"Type:name"`.
    pub fn parse_super_users(value: &str) -> Result<BTreeSet<String>, AclError> {
        let mut users = BTreeSet::new();
        for user in value.split(';').map(str::trim).filter(|u| !u.is_empty()) {
            parse_principal(user).map_err(|e| AclError::InvalidConfig {
                key: SUPER_USERS_CONFIG,
                message: e.to_string(),
            })?;
            users.insert(user.to_owned());
        }
        Ok(users)
    }

    /// Parses `allow.everyone.if.no.acl.found` as Kafka does: `true` in any
    /// case (trimmed) is true, anything else false.
    pub fn parse_allow_everyone(value: &str) -> bool {
        value.trim().eq_ignore_ascii_case("true")
    }

    /// Whether `principal` is a super user.
    pub fn is_super_user(&self, principal: &str) -> bool {
        self.super_users.contains(principal)
    }
}

/// An authorization decision and why it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<'a> {
    /// The principal is a super user.
    SuperUser,
    /// This DENY ACL matched (it wins over every ALLOW).
    DeniedByAcl(MatchedAcl<'a>),
    /// This ALLOW ACL matched and no DENY did.
    AllowedByAcl(MatchedAcl<'a>),
    /// No ACL's pattern matches the resource at all:
    /// `allow.everyone.if.no.acl.found` decided.
    NoAclFound {
        /// The config's value.
        allowed: bool,
    },
    /// ACLs exist for the resource but none allows this principal, host and
    /// operation.
    NoMatchingAcl,
    /// The operation or resource type was a filter value (`ANY`) or
    /// `UNKNOWN`: not a question that can be allowed.
    InvalidAction,
}

impl Decision<'_> {
    /// Whether the action is allowed.
    pub fn is_allowed(&self) -> bool {
        match self {
            Decision::SuperUser | Decision::AllowedByAcl(_) => true,
            Decision::NoAclFound { allowed } => *allowed,
            Decision::DeniedByAcl(_) | Decision::NoMatchingAcl | Decision::InvalidAction => false,
        }
    }
}

/// Kafka's ACL authorizer: a configuration and a set of ACLs, both shared
/// (an authorizer per request costs two reference counts, see
/// [`Authorizer::shared`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Authorizer {
    config: Arc<AuthorizerConfig>,
    acls: Arc<AclSet>,
}

impl Authorizer {
    /// An authorizer over `acls`.
    pub fn new(config: AuthorizerConfig, acls: AclSet) -> Self {
        Authorizer {
            config: Arc::new(config),
            acls: Arc::new(acls),
        }
    }

    /// An authorizer over a shared configuration and ACL set (the broker's
    /// config and the metadata image's ACLs), without copying either.
    pub fn shared(config: Arc<AuthorizerConfig>, acls: Arc<AclSet>) -> Self {
        Authorizer { config, acls }
    }

    /// The configuration.
    pub fn config(&self) -> &AuthorizerConfig {
        &self.config
    }

    /// The ACLs.
    pub fn acls(&self) -> &AclSet {
        &self.acls
    }

    /// The ACLs, to apply `CreateAcls`/`DeleteAcls` or metadata records.
    pub fn acls_mut(&mut self) -> &mut AclSet {
        Arc::make_mut(&mut self.acls)
    }

    /// Whether `principal` connecting from `host` may do `operation` on the
    /// resource `(resource_type, resource_name)`: see
    /// [`Authorizer::decide`].
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> bool {
        self.decide(principal, host, operation, resource_type, resource_name)
            .is_allowed()
    }

    /// Kafka's decision, in this order: super users are allowed; among the
    /// ACLs whose pattern matches the resource (literal name, literal `*`,
    /// prefixes of the name) and whose principal (itself or `User:*`) and
    /// host (itself or `*`) match, a DENY for the operation (or `ALL`)
    /// denies; else an ALLOW covering the operation (see
    /// [`AclOperation::allow_covers`]) allows; else, if no ACL at all matches
    /// the resource, `allow.everyone.if.no.acl.found` decides; else denied.
    pub fn decide<'a>(
        &'a self,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: &'a str,
    ) -> Decision<'a> {
        if !operation.is_concrete() || !resource_type.is_concrete() {
            return Decision::InvalidAction;
        }
        if self.config.is_super_user(principal) {
            return Decision::SuperUser;
        }
        let mut resource_has_acls = false;
        let mut allowed_by = None;
        for acl in self.acls.matching_resource(resource_type, resource_name) {
            resource_has_acls = true;
            if !acl.applies_to(principal, host) {
                continue;
            }
            match acl.permission {
                PermissionType::Deny if acl.operation.deny_covers(operation) => {
                    return Decision::DeniedByAcl(acl);
                }
                PermissionType::Allow if acl.operation.allow_covers(operation) => {
                    allowed_by.get_or_insert(acl);
                }
                _ => {}
            }
        }
        match allowed_by {
            Some(acl) => Decision::AllowedByAcl(acl),
            None if !resource_has_acls => Decision::NoAclFound {
                allowed: self.config.allow_everyone_if_no_acl_found,
            },
            None => Decision::NoMatchingAcl,
        }
    }

    /// Whether `principal` from `host` may do `operation` on at least one
    /// resource of `resource_type` (Kafka's `authorizeByResourceType`, as
    /// its default implementation, which the `StandardAuthorizer` uses):
    ///
    /// 1. if [`Authorizer::authorize`] allows the operation on a resource of
    ///    that type with Kafka's probe name `hardcode`, allowed (super users;
    ///    a wildcard ALLOW; `allow.everyone.if.no.acl.found` when no ACL
    ///    applies to that name);
    /// 2. among the ACLs of that type for this principal (or `User:*`) and
    ///    host (or `*`) whose operation is exactly `operation` or `ALL` (no
    ///    implications here): a DENY on the literal `*` denies; an ALLOW on
    ///    the literal `*` allows;
    /// 3. else allowed if some other ALLOW pattern is not dominated by a
    ///    DENY: a literal ALLOW is dominated by a literal DENY of the same
    ///    name; any ALLOW is dominated by a prefixed DENY that is a prefix of
    ///    its name (or equal to it);
    /// 4. else denied.
    ///
    /// Used by `InitProducerId` for an idempotent producer without
    /// `IDEMPOTENT_WRITE` on the cluster (`WRITE` on any topic suffices),
    /// see [`Authorizer::authorize_any_topic_write`].
    pub fn authorize_by_resource_type(
        &self,
        principal: &str,
        host: &str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        if !operation.is_concrete() || !resource_type.is_concrete() {
            return false;
        }
        if self.authorize(
            principal,
            host,
            operation,
            resource_type,
            PROBE_RESOURCE_NAME,
        ) {
            return true;
        }
        let mut deny_literal: HashSet<&str> = HashSet::new();
        let mut deny_prefixed: HashSet<&str> = HashSet::new();
        let mut allows: Vec<(PatternType, &str)> = Vec::new();
        let mut wildcard_allow = false;
        for acl in self.acls.matched(Some(resource_type)) {
            if !acl.applies_to(principal, host) {
                continue;
            }
            if acl.operation != operation && acl.operation != AclOperation::All {
                continue;
            }
            let is_wildcard =
                acl.pattern_type == PatternType::Literal && acl.resource_name == WILDCARD_RESOURCE;
            match (acl.permission, acl.pattern_type) {
                (PermissionType::Deny, _) if is_wildcard => return false,
                (PermissionType::Deny, PatternType::Literal) => {
                    deny_literal.insert(acl.resource_name);
                }
                (PermissionType::Deny, PatternType::Prefixed) => {
                    deny_prefixed.insert(acl.resource_name);
                }
                (PermissionType::Allow, _) if is_wildcard => wildcard_allow = true,
                (PermissionType::Allow, pattern_type) => {
                    allows.push((pattern_type, acl.resource_name));
                }
                _ => {}
            }
        }
        if wildcard_allow {
            return true;
        }
        allows.iter().any(|&(pattern_type, name)| {
            let literal_denied =
                pattern_type == PatternType::Literal && deny_literal.contains(name);
            let prefix_denied = (1..name.len() + 1)
                .filter_map(|len| name.get(..len))
                .any(|prefix| deny_prefixed.contains(prefix));
            !literal_denied && !prefix_denied
        })
    }

    /// Whether an idempotent producer may produce: `IDEMPOTENT_WRITE` on
    /// the cluster, or `WRITE` on at least one topic (what Kafka checks for
    /// `InitProducerId` without a transactional id).
    pub fn authorize_any_topic_write(&self, principal: &str, host: &str) -> bool {
        self.authorize(
            principal,
            host,
            AclOperation::IdempotentWrite,
            ResourceType::Cluster,
            CLUSTER_NAME,
        ) || self.authorize_by_resource_type(
            principal,
            host,
            AclOperation::Write,
            ResourceType::Topic,
        )
    }

    /// The operations of [`ResourceType::supported_operations`] that
    /// `principal` from `host` may do on `(resource_type, resource_name)`,
    /// in Kafka's order.
    pub fn authorized_operations(
        &self,
        principal: &str,
        host: &str,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> Vec<AclOperation> {
        resource_type
            .supported_operations()
            .iter()
            .copied()
            .filter(|op| self.authorize(principal, host, *op, resource_type, resource_name))
            .collect()
    }

    /// [`Authorizer::authorized_operations`] as Kafka's `int32` bitfield
    /// (bit `1 << code` per operation).
    pub fn authorized_operations_bits(
        &self,
        principal: &str,
        host: &str,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> i32 {
        operations_to_bits(&self.authorized_operations(
            principal,
            host,
            resource_type,
            resource_name,
        ))
    }
}

/// Kafka's `authorized_operations` encoding: bit `1 << code` per operation.
pub fn operations_to_bits(operations: &[AclOperation]) -> i32 {
    operations.iter().fold(0, |bits, op| bits | op.bit())
}

/// The operations of an `authorized_operations` bitfield, in code order
/// ([`AUTHORIZED_OPERATIONS_OMITTED`] and bits of no operation decode to
/// nothing).
pub fn operations_from_bits(bits: i32) -> Vec<AclOperation> {
    if bits == AUTHORIZED_OPERATIONS_OMITTED {
        return Vec::new();
    }
    AclOperation::VALUES
        .iter()
        .copied()
        .filter(|op| bits & op.bit() != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use AclOperation as Op;
    use PatternType as Pat;
    use PermissionType as Perm;
    use ResourceType as Res;

    const ALICE: &str = "User:alice";
    const BOB: &str = "User:bob";
    // hosts are matched as text, never dialed
    const HOST: &str = "127.0.0.2";
    const OTHER_HOST: &str = "127.0.0.3";

    fn acl(
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        principal: &str,
        host: &str,
        operation: AclOperation,
        permission: PermissionType,
    ) -> AclBinding {
        AclBinding::new(
            resource_type,
            name,
            pattern_type,
            principal,
            host,
            operation,
            permission,
        )
    }

    fn allow(
        res: ResourceType,
        name: &str,
        pat: PatternType,
        who: &str,
        op: AclOperation,
    ) -> AclBinding {
        acl(res, name, pat, who, WILDCARD_HOST, op, Perm::Allow)
    }

    fn deny(
        res: ResourceType,
        name: &str,
        pat: PatternType,
        who: &str,
        op: AclOperation,
    ) -> AclBinding {
        acl(res, name, pat, who, WILDCARD_HOST, op, Perm::Deny)
    }

    fn authorizer(bindings: Vec<AclBinding>) -> Authorizer {
        authorizer_with(AuthorizerConfig::default(), bindings)
    }

    fn authorizer_with(config: AuthorizerConfig, bindings: Vec<AclBinding>) -> Authorizer {
        let set = AclSet::from_bindings(bindings);
        assert!(set.is_ok(), "{set:?}");
        Authorizer::new(config, set.unwrap_or_default())
    }

    fn allow_everyone() -> AuthorizerConfig {
        AuthorizerConfig {
            allow_everyone_if_no_acl_found: true,
            ..AuthorizerConfig::default()
        }
    }

    fn can(a: &Authorizer, who: &str, op: AclOperation, res: ResourceType, name: &str) -> bool {
        a.authorize(who, HOST, op, res, name)
    }

    // ---- vocabulary -----------------------------------------------------

    #[test]
    fn codes_match_kafka() {
        assert_eq!(Res::Unknown.code(), 0);
        assert_eq!(Res::Any.code(), 1);
        assert_eq!(Res::Topic.code(), 2);
        assert_eq!(Res::Group.code(), 3);
        assert_eq!(Res::Cluster.code(), 4);
        assert_eq!(Res::TransactionalId.code(), 5);
        assert_eq!(Res::DelegationToken.code(), 6);
        assert_eq!(Res::User.code(), 7);
        assert_eq!(Pat::Unknown.code(), 0);
        assert_eq!(Pat::Any.code(), 1);
        assert_eq!(Pat::Match.code(), 2);
        assert_eq!(Pat::Literal.code(), 3);
        assert_eq!(Pat::Prefixed.code(), 4);
        let ops: Vec<i8> = Op::VALUES.iter().map(|o| o.code()).collect();
        assert_eq!(ops, (0..=15).collect::<Vec<i8>>());
        assert_eq!(Op::ClusterAction.code(), 9);
        assert_eq!(Op::IdempotentWrite.code(), 12);
        assert_eq!(Op::TwoPhaseCommit.code(), 15);
        assert_eq!(Perm::Unknown.code(), 0);
        assert_eq!(Perm::Any.code(), 1);
        assert_eq!(Perm::Deny.code(), 2);
        assert_eq!(Perm::Allow.code(), 3);
    }

    #[test]
    fn i8_conversions_round_trip_and_reject_undefined_codes() {
        for r in Res::VALUES {
            assert_eq!(Res::try_from(i8::from(*r)), Ok(*r));
        }
        for p in Pat::VALUES {
            assert_eq!(Pat::try_from(i8::from(*p)), Ok(*p));
        }
        for o in Op::VALUES {
            assert_eq!(Op::try_from(i8::from(*o)), Ok(*o));
        }
        for p in Perm::VALUES {
            assert_eq!(Perm::try_from(i8::from(*p)), Ok(*p));
        }
        assert_eq!(
            Res::try_from(8),
            Err(AclError::UnknownCode {
                kind: "resource type",
                code: 8
            })
        );
        assert!(Res::try_from(-1).is_err());
        assert!(Pat::try_from(5).is_err());
        assert!(Op::try_from(16).is_err());
        assert!(Op::try_from(i8::MIN).is_err());
        assert!(Perm::try_from(4).is_err());
        assert_eq!(
            Op::try_from(99).map_err(|e| e.kafka_error_code()),
            Err(INVALID_REQUEST_CODE)
        );
    }

    #[test]
    fn names_display_and_parse_case_insensitively() {
        assert_eq!(Res::TransactionalId.to_string(), "TRANSACTIONAL_ID");
        assert_eq!(Op::DescribeConfigs.to_string(), "DESCRIBE_CONFIGS");
        assert_eq!(Pat::Prefixed.to_string(), "PREFIXED");
        assert_eq!(Perm::Allow.to_string(), "ALLOW");
        assert_eq!("topic".parse::<Res>(), Ok(Res::Topic));
        assert_eq!(" Cluster_Action ".parse::<Op>(), Ok(Op::ClusterAction));
        assert_eq!("literal".parse::<Pat>(), Ok(Pat::Literal));
        assert_eq!("DENY".parse::<Perm>(), Ok(Perm::Deny));
        assert!(matches!(
            "reed".parse::<Op>(),
            Err(AclError::UnknownName {
                kind: "operation",
                ..
            })
        ));
    }

    #[test]
    fn supported_operations_per_resource_type() {
        assert_eq!(Res::Topic.supported_operations().len(), 8);
        assert_eq!(
            Res::Group.supported_operations(),
            &[
                Op::Read,
                Op::Describe,
                Op::Delete,
                Op::DescribeConfigs,
                Op::AlterConfigs
            ]
        );
        assert!(Res::Cluster
            .supported_operations()
            .contains(&Op::IdempotentWrite));
        assert!(Res::Cluster
            .supported_operations()
            .contains(&Op::ClusterAction));
        assert_eq!(
            Res::TransactionalId.supported_operations(),
            &[Op::Describe, Op::Write, Op::TwoPhaseCommit]
        );
        assert_eq!(Res::DelegationToken.supported_operations(), &[Op::Describe]);
        assert_eq!(
            Res::User.supported_operations(),
            &[Op::CreateTokens, Op::DescribeTokens]
        );
        assert!(Res::Any.supported_operations().is_empty());
        assert!(Res::Unknown.supported_operations().is_empty());
        for r in Res::VALUES {
            assert!(!r.supported_operations().contains(&Op::All));
        }
    }

    // ---- binding validation (CreateAcls) --------------------------------

    #[test]
    fn valid_bindings_pass() {
        let ok = [
            allow(Res::Topic, "orders", Pat::Literal, ALICE, Op::Read),
            allow(Res::Topic, "*", Pat::Literal, "User:*", Op::All),
            deny(Res::Group, "app-", Pat::Prefixed, "Group:eng", Op::Read),
            allow(
                Res::Cluster,
                CLUSTER_NAME,
                Pat::Literal,
                "User:a:b",
                Op::ClusterAction,
            ),
            // Kafka accepts a PREFIXED "*": it is the prefix `*`, no wildcard.
            allow(Res::Topic, "*", Pat::Prefixed, ALICE, Op::Read),
        ];
        for b in ok {
            assert_eq!(b.validate(), Ok(()), "{b:?}");
        }
    }

    #[test]
    fn filter_values_and_unknowns_are_refused_in_bindings() {
        let base = allow(Res::Topic, "orders", Pat::Literal, ALICE, Op::Read);
        let mut bad = Vec::new();
        for r in [Res::Any, Res::Unknown] {
            bad.push(AclBinding {
                resource_type: r,
                ..base.clone()
            });
        }
        for p in [Pat::Any, Pat::Match, Pat::Unknown] {
            bad.push(AclBinding {
                pattern_type: p,
                ..base.clone()
            });
        }
        for o in [Op::Any, Op::Unknown] {
            bad.push(AclBinding {
                operation: o,
                ..base.clone()
            });
        }
        for p in [Perm::Any, Perm::Unknown] {
            bad.push(AclBinding {
                permission: p,
                ..base.clone()
            });
        }
        for b in bad {
            let err = b.validate();
            assert!(
                matches!(err, Err(AclError::InvalidRequest(_))),
                "{b:?}: {err:?}"
            );
            assert_eq!(
                err.map_err(|e| e.kafka_error_code()),
                Err(INVALID_REQUEST_CODE)
            );
        }
    }

    #[test]
    fn empty_names_and_bad_principals_are_refused() {
        for pat in [Pat::Literal, Pat::Prefixed] {
            let b = allow(Res::Topic, "", pat, ALICE, Op::Read);
            assert!(
                matches!(b.validate(), Err(AclError::InvalidRequest(m)) if m.contains("empty"))
            );
        }
        for who in ["alice", "", ":alice", "User:"] {
            let b = allow(Res::Topic, "t", Pat::Literal, who, Op::Read);
            assert!(
                matches!(b.validate(), Err(AclError::InvalidRequest(_))),
                "{who:?}"
            );
        }
        assert_eq!(parse_principal("User:a:b"), Ok(("User", "a:b")));
    }

    // ---- filters (DescribeAcls / DeleteAcls) ----------------------------

    fn name_filter(pat: PatternType, name: Option<&str>) -> AclBindingFilter {
        AclBindingFilter {
            resource_type: Res::Topic,
            resource_name: name.map(str::to_owned),
            pattern_type: pat,
            ..AclBindingFilter::any()
        }
    }

    #[test]
    fn any_filter_matches_everything() {
        let f = AclBindingFilter::default();
        assert_eq!(f.validate(), Ok(()));
        assert!(f.matches(&allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read)));
        assert!(f.matches(&deny(Res::Group, "g", Pat::Prefixed, BOB, Op::All)));
        assert!(f.matches(&acl(
            Res::Cluster,
            CLUSTER_NAME,
            Pat::Literal,
            ALICE,
            HOST,
            Op::Alter,
            Perm::Allow
        )));
    }

    #[test]
    fn match_pattern_type_finds_every_pattern_that_applies_to_a_name() {
        let f = name_filter(Pat::Match, Some("orders-eu"));
        let yes = [
            allow(Res::Topic, "orders-eu", Pat::Literal, ALICE, Op::Read),
            allow(Res::Topic, "*", Pat::Literal, ALICE, Op::Read),
            allow(Res::Topic, "orders-", Pat::Prefixed, ALICE, Op::Read),
            allow(Res::Topic, "orders-eu", Pat::Prefixed, ALICE, Op::Read),
        ];
        let no = [
            allow(Res::Topic, "orders", Pat::Literal, ALICE, Op::Read),
            allow(Res::Topic, "orders-eu-1", Pat::Prefixed, ALICE, Op::Read),
            allow(Res::Topic, "*", Pat::Prefixed, ALICE, Op::Read),
            allow(Res::Group, "orders-eu", Pat::Literal, ALICE, Op::Read),
        ];
        for b in &yes {
            assert!(f.matches(b), "{b:?}");
        }
        for b in &no {
            assert!(!f.matches(b), "{b:?}");
        }
        // MATCH without a name matches every pattern of the type.
        let all = name_filter(Pat::Match, None);
        assert!(yes.iter().chain(&no[..3]).all(|b| all.matches(b)));
    }

    #[test]
    fn any_and_concrete_pattern_types_compare_names_exactly() {
        let literal_star = allow(Res::Topic, "*", Pat::Literal, ALICE, Op::Read);
        let literal_t = allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read);
        let prefixed_t = allow(Res::Topic, "t", Pat::Prefixed, ALICE, Op::Read);
        let prefixed_tx = allow(Res::Topic, "tx", Pat::Prefixed, ALICE, Op::Read);

        let any_t = name_filter(Pat::Any, Some("t"));
        assert!(any_t.matches(&literal_t));
        assert!(any_t.matches(&prefixed_t));
        assert!(!any_t.matches(&literal_star));
        assert!(!any_t.matches(&prefixed_tx));

        let lit_t = name_filter(Pat::Literal, Some("t"));
        assert!(lit_t.matches(&literal_t));
        assert!(!lit_t.matches(&prefixed_t));
        assert!(!lit_t.matches(&literal_star));

        let lit_star = name_filter(Pat::Literal, Some("*"));
        assert!(lit_star.matches(&literal_star));
        assert!(!lit_star.matches(&literal_t));

        let pre = name_filter(Pat::Prefixed, None);
        assert!(pre.matches(&prefixed_t) && pre.matches(&prefixed_tx));
        assert!(!pre.matches(&literal_t));
    }

    #[test]
    fn entry_fields_filter_exactly_or_not_at_all() {
        let wildcard_user = acl(
            Res::Topic,
            "t",
            Pat::Literal,
            "User:*",
            HOST,
            Op::Read,
            Perm::Allow,
        );
        let alice = acl(
            Res::Topic,
            "t",
            Pat::Literal,
            ALICE,
            HOST,
            Op::Write,
            Perm::Deny,
        );
        let by_alice = AclBindingFilter {
            principal: Some(ALICE.into()),
            ..AclBindingFilter::any()
        };
        assert!(by_alice.matches(&alice));
        assert!(
            !by_alice.matches(&wildcard_user),
            "a principal filter does not expand User:*"
        );
        let by_host = AclBindingFilter {
            host: Some("*".into()),
            ..AclBindingFilter::any()
        };
        assert!(!by_host.matches(&alice), "a host filter does not expand *");
        let by_op = AclBindingFilter {
            operation: Op::Write,
            ..AclBindingFilter::any()
        };
        assert!(by_op.matches(&alice) && !by_op.matches(&wildcard_user));
        let by_perm = AclBindingFilter {
            permission: Perm::Allow,
            ..AclBindingFilter::any()
        };
        assert!(!by_perm.matches(&alice) && by_perm.matches(&wildcard_user));
        let by_type = AclBindingFilter {
            resource_type: Res::Group,
            ..AclBindingFilter::any()
        };
        assert!(!by_type.matches(&alice));
    }

    #[test]
    fn filters_with_unknown_fields_are_invalid() {
        let cases = [
            AclBindingFilter {
                resource_type: Res::Unknown,
                ..AclBindingFilter::any()
            },
            AclBindingFilter {
                pattern_type: Pat::Unknown,
                ..AclBindingFilter::any()
            },
            AclBindingFilter {
                operation: Op::Unknown,
                ..AclBindingFilter::any()
            },
            AclBindingFilter {
                permission: Perm::Unknown,
                ..AclBindingFilter::any()
            },
        ];
        for f in cases {
            assert!(
                matches!(f.validate(), Err(AclError::InvalidRequest(_))),
                "{f:?}"
            );
        }
        assert_eq!(name_filter(Pat::Match, Some("x")).validate(), Ok(()));
    }

    #[test]
    fn to_filter_matches_only_its_binding() {
        let b = allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read);
        let f = b.to_filter();
        assert!(f.matches(&b));
        assert!(!f.matches(&AclBinding {
            operation: Op::Write,
            ..b.clone()
        }));
        assert!(!f.matches(&AclBinding {
            pattern_type: Pat::Prefixed,
            ..b.clone()
        }));
    }

    // ---- the set ---------------------------------------------------------

    #[test]
    fn set_inserts_dedups_removes_and_describes() {
        let mut set = AclSet::new();
        let a = allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read);
        let b = deny(Res::Topic, "t", Pat::Prefixed, BOB, Op::Write);
        let c = allow(Res::Group, "g", Pat::Literal, ALICE, Op::Read);
        assert_eq!(set.insert(a.clone()), Ok(true));
        assert_eq!(set.insert(a.clone()), Ok(false));
        assert_eq!(set.insert(b.clone()), Ok(true));
        assert_eq!(set.insert(c.clone()), Ok(true));
        assert_eq!(set.len(), 3);
        assert!(set.contains(&a) && set.contains(&b) && set.contains(&c));
        assert!(!set.contains(&AclBinding {
            host: HOST.into(),
            ..a.clone()
        }));

        let invalid = allow(Res::Topic, "", Pat::Prefixed, ALICE, Op::Read);
        assert!(set.insert(invalid).is_err());
        assert_eq!(set.len(), 3);

        let mut all: Vec<AclBinding> = set.iter().collect();
        all.sort();
        let mut expected = vec![a.clone(), b.clone(), c.clone()];
        expected.sort();
        assert_eq!(all, expected);

        let topics = AclBindingFilter {
            resource_type: Res::Topic,
            ..AclBindingFilter::any()
        };
        assert_eq!(set.matching(&topics).len(), 2);

        let removed = set.remove_matching(&AclBindingFilter {
            principal: Some(ALICE.into()),
            ..AclBindingFilter::any()
        });
        assert_eq!(removed.len(), 2);
        assert!(removed.contains(&a) && removed.contains(&c));
        assert_eq!(set.len(), 1);
        assert!(set.remove(&b));
        assert!(!set.remove(&b));
        assert!(set.is_empty());
        assert_eq!(set, AclSet::new(), "empty indexes are dropped");
    }

    // ---- authorize -------------------------------------------------------

    #[test]
    fn no_acls_denies_by_default_and_allows_with_allow_everyone() {
        let closed = authorizer(vec![]);
        assert!(!can(&closed, ALICE, Op::Read, Res::Topic, "t"));
        assert_eq!(
            closed.decide(ALICE, HOST, Op::Read, Res::Topic, "t"),
            Decision::NoAclFound { allowed: false }
        );
        let open = authorizer_with(allow_everyone(), vec![]);
        assert!(can(&open, ALICE, Op::Read, Res::Topic, "t"));
    }

    #[test]
    fn allow_everyone_only_applies_to_resources_without_any_acl() {
        let a = authorizer_with(
            allow_everyone(),
            vec![allow(Res::Topic, "t", Pat::Literal, BOB, Op::Read)],
        );
        // t has an ACL (for bob): alice is denied, even with allow.everyone.
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "t"));
        assert_eq!(
            a.decide(ALICE, HOST, Op::Read, Res::Topic, "t"),
            Decision::NoMatchingAcl
        );
        // bob may read but nothing else: the resource has ACLs.
        assert!(!can(&a, BOB, Op::Write, Res::Topic, "t"));
        // other resources (and other types of the same name) have none.
        assert!(can(&a, ALICE, Op::Read, Res::Topic, "u"));
        assert!(can(&a, ALICE, Op::Read, Res::Group, "t"));
        // a prefixed or wildcard ACL counts as an ACL on the resource.
        let b = authorizer_with(
            allow_everyone(),
            vec![
                allow(Res::Topic, "pay", Pat::Prefixed, BOB, Op::Read),
                allow(Res::Group, "*", Pat::Literal, BOB, Op::Read),
            ],
        );
        assert!(!can(&b, ALICE, Op::Read, Res::Topic, "payments"));
        assert!(can(&b, ALICE, Op::Read, Res::Topic, "pa"));
        assert!(!can(&b, ALICE, Op::Read, Res::Group, "anything"));
    }

    #[test]
    fn super_users_are_allowed_everything_despite_denies() {
        let config = AuthorizerConfig::from_configs(Some("User:admin; User:ops ;"), None);
        assert!(config.is_ok());
        let a = authorizer_with(
            config.unwrap_or_default(),
            vec![deny(Res::Topic, "*", Pat::Literal, "User:*", Op::All)],
        );
        assert!(can(&a, "User:admin", Op::Delete, Res::Topic, "t"));
        assert!(can(
            &a,
            "User:ops",
            Op::ClusterAction,
            Res::Cluster,
            CLUSTER_NAME
        ));
        assert_eq!(
            a.decide("User:ops", HOST, Op::Read, Res::Topic, "t"),
            Decision::SuperUser
        );
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "t"));
        // Super users match exactly: no wildcard, case-sensitive.
        assert!(!can(&a, "User:Admin", Op::Read, Res::Topic, "t"));
    }

    #[test]
    fn deny_wins_over_allow() {
        let a = authorizer(vec![
            allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read),
            deny(Res::Topic, "t", Pat::Literal, ALICE, Op::Read),
        ]);
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "t"));
        assert!(matches!(
            a.decide(ALICE, HOST, Op::Read, Res::Topic, "t"),
            Decision::DeniedByAcl(m) if m.permission == Perm::Deny
        ));
        // A deny through a wildcard principal, prefix or wildcard resource.
        let b = authorizer(vec![
            allow(Res::Topic, "*", Pat::Literal, ALICE, Op::All),
            deny(Res::Topic, "secret-", Pat::Prefixed, "User:*", Op::Read),
        ]);
        assert!(can(&b, ALICE, Op::Read, Res::Topic, "public"));
        assert!(!can(&b, ALICE, Op::Read, Res::Topic, "secret-keys"));
        assert!(can(&b, ALICE, Op::Write, Res::Topic, "secret-keys"));
    }

    #[test]
    fn principal_matches_itself_or_user_wildcard_only() {
        let a = authorizer(vec![allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read)]);
        assert!(can(&a, ALICE, Op::Read, Res::Topic, "t"));
        assert!(!can(&a, BOB, Op::Read, Res::Topic, "t"));
        assert!(!can(&a, "User:Alice", Op::Read, Res::Topic, "t"));
        assert!(!can(&a, "Group:alice", Op::Read, Res::Topic, "t"));

        let b = authorizer(vec![allow(
            Res::Topic,
            "t",
            Pat::Literal,
            "User:*",
            Op::Read,
        )]);
        assert!(can(&b, BOB, Op::Read, Res::Topic, "t"));
        // Kafka's wildcard principal is User:* and matches every type.
        assert!(can(&b, "Group:eng", Op::Read, Res::Topic, "t"));

        let c = authorizer(vec![allow(
            Res::Topic,
            "t",
            Pat::Literal,
            "Group:*",
            Op::Read,
        )]);
        assert!(!can(&c, "Group:eng", Op::Read, Res::Topic, "t"));
    }

    #[test]
    fn host_matches_itself_or_wildcard() {
        let a = authorizer(vec![
            acl(
                Res::Topic,
                "t",
                Pat::Literal,
                ALICE,
                HOST,
                Op::Read,
                Perm::Allow,
            ),
            acl(
                Res::Topic,
                "u",
                Pat::Literal,
                ALICE,
                WILDCARD_HOST,
                Op::Read,
                Perm::Allow,
            ),
        ]);
        assert!(a.authorize(ALICE, HOST, Op::Read, Res::Topic, "t"));
        assert!(!a.authorize(ALICE, OTHER_HOST, Op::Read, Res::Topic, "t"));
        assert!(a.authorize(ALICE, OTHER_HOST, Op::Read, Res::Topic, "u"));
        // A deny for one host only.
        let b = authorizer(vec![
            allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read),
            acl(
                Res::Topic,
                "t",
                Pat::Literal,
                ALICE,
                OTHER_HOST,
                Op::Read,
                Perm::Deny,
            ),
        ]);
        assert!(b.authorize(ALICE, HOST, Op::Read, Res::Topic, "t"));
        assert!(!b.authorize(ALICE, OTHER_HOST, Op::Read, Res::Topic, "t"));
    }

    #[test]
    fn resource_patterns_literal_wildcard_and_prefixed() {
        let a = authorizer(vec![
            allow(Res::Topic, "exact", Pat::Literal, ALICE, Op::Read),
            allow(Res::Topic, "logs-", Pat::Prefixed, ALICE, Op::Read),
            allow(Res::Group, "*", Pat::Literal, ALICE, Op::Read),
            allow(Res::Topic, "ü", Pat::Prefixed, ALICE, Op::Read),
        ]);
        assert!(can(&a, ALICE, Op::Read, Res::Topic, "exact"));
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "exactly"));
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "Exact"));
        assert!(can(&a, ALICE, Op::Read, Res::Topic, "logs-"));
        assert!(can(&a, ALICE, Op::Read, Res::Topic, "logs-app"));
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "logs"));
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "my-logs-app"));
        assert!(can(&a, ALICE, Op::Read, Res::Group, "any-group"));
        assert!(can(&a, ALICE, Op::Read, Res::Group, "*"));
        assert!(
            !can(&a, ALICE, Op::Read, Res::Topic, "*"),
            "a group wildcard is not a topic one"
        );
        assert!(can(&a, ALICE, Op::Read, Res::Topic, "über"));
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "u"));
        // A prefixed "*" is not a wildcard.
        let b = authorizer(vec![allow(Res::Topic, "*", Pat::Prefixed, ALICE, Op::Read)]);
        assert!(!can(&b, ALICE, Op::Read, Res::Topic, "t"));
        assert!(can(&b, ALICE, Op::Read, Res::Topic, "*t"));
    }

    #[test]
    fn all_operation_allows_and_denies_everything() {
        let a = authorizer(vec![allow(Res::Topic, "t", Pat::Literal, ALICE, Op::All)]);
        for op in Res::Topic.supported_operations() {
            assert!(can(&a, ALICE, *op, Res::Topic, "t"), "{op}");
        }
        let b = authorizer(vec![
            allow(Res::Topic, "t", Pat::Literal, ALICE, Op::All),
            deny(Res::Topic, "t", Pat::Literal, ALICE, Op::All),
        ]);
        for op in Res::Topic.supported_operations() {
            assert!(!can(&b, ALICE, *op, Res::Topic, "t"), "{op}");
        }
    }

    #[test]
    fn allow_implications_describe_and_describe_configs() {
        for op in [Op::Read, Op::Write, Op::Delete, Op::Alter] {
            let a = authorizer(vec![allow(Res::Topic, "t", Pat::Literal, ALICE, op)]);
            assert!(
                can(&a, ALICE, Op::Describe, Res::Topic, "t"),
                "{op} implies DESCRIBE"
            );
            assert!(!can(&a, ALICE, Op::DescribeConfigs, Res::Topic, "t"));
        }
        for op in [
            Op::Create,
            Op::AlterConfigs,
            Op::DescribeConfigs,
            Op::ClusterAction,
        ] {
            let a = authorizer(vec![allow(Res::Topic, "t", Pat::Literal, ALICE, op)]);
            assert!(
                !can(&a, ALICE, Op::Describe, Res::Topic, "t"),
                "{op} does not imply DESCRIBE"
            );
        }
        let a = authorizer(vec![allow(
            Res::Topic,
            "t",
            Pat::Literal,
            ALICE,
            Op::AlterConfigs,
        )]);
        assert!(can(&a, ALICE, Op::DescribeConfigs, Res::Topic, "t"));
        // Implications go one way only.
        let b = authorizer(vec![allow(
            Res::Topic,
            "t",
            Pat::Literal,
            ALICE,
            Op::Describe,
        )]);
        assert!(!can(&b, ALICE, Op::Read, Res::Topic, "t"));
        let c = authorizer(vec![allow(
            Res::Topic,
            "t",
            Pat::Literal,
            ALICE,
            Op::DescribeConfigs,
        )]);
        assert!(!can(&c, ALICE, Op::AlterConfigs, Res::Topic, "t"));
        // Groups: READ on a group implies DESCRIBE (DescribeGroups).
        let g = authorizer(vec![allow(Res::Group, "g", Pat::Literal, ALICE, Op::Read)]);
        assert!(can(&g, ALICE, Op::Describe, Res::Group, "g"));
    }

    #[test]
    fn deny_has_no_implications() {
        let a = authorizer(vec![
            allow(Res::Topic, "t", Pat::Literal, ALICE, Op::All),
            deny(Res::Topic, "t", Pat::Literal, ALICE, Op::Read),
            deny(Res::Topic, "t", Pat::Literal, ALICE, Op::AlterConfigs),
        ]);
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "t"));
        assert!(
            can(&a, ALICE, Op::Describe, Res::Topic, "t"),
            "DENY READ does not deny DESCRIBE"
        );
        assert!(!can(&a, ALICE, Op::AlterConfigs, Res::Topic, "t"));
        assert!(can(&a, ALICE, Op::DescribeConfigs, Res::Topic, "t"));
        // DENY DESCRIBE with ALLOW READ: describe denied, read allowed.
        let b = authorizer(vec![
            allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read),
            deny(Res::Topic, "t", Pat::Literal, ALICE, Op::Describe),
        ]);
        assert!(can(&b, ALICE, Op::Read, Res::Topic, "t"));
        assert!(!can(&b, ALICE, Op::Describe, Res::Topic, "t"));
    }

    #[test]
    fn filter_values_are_never_authorized() {
        let a = authorizer_with(
            AuthorizerConfig {
                super_users: ["User:admin".to_owned()].into(),
                allow_everyone_if_no_acl_found: true,
            },
            vec![allow(Res::Topic, "*", Pat::Literal, "User:*", Op::All)],
        );
        for op in [Op::Any, Op::Unknown] {
            assert_eq!(
                a.decide("User:admin", HOST, op, Res::Topic, "t"),
                Decision::InvalidAction
            );
        }
        for res in [Res::Any, Res::Unknown] {
            assert!(!a.authorize("User:admin", HOST, Op::Read, res, "t"));
        }
        assert!(!a.authorize_by_resource_type("User:admin", HOST, Op::Any, Res::Topic));
        assert!(!a.authorize_by_resource_type("User:admin", HOST, Op::Read, Res::Any));
    }

    #[test]
    fn decision_reports_the_matching_acl() {
        let a = authorizer(vec![allow(
            Res::Topic,
            "logs-",
            Pat::Prefixed,
            "User:*",
            Op::Write,
        )]);
        match a.decide(ALICE, HOST, Op::Describe, Res::Topic, "logs-1") {
            Decision::AllowedByAcl(m) => {
                assert_eq!(
                    m.to_binding(),
                    allow(Res::Topic, "logs-", Pat::Prefixed, "User:*", Op::Write)
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    // ---- authorize_by_resource_type --------------------------------------

    fn by_type(a: &Authorizer, op: AclOperation, res: ResourceType) -> bool {
        a.authorize_by_resource_type(ALICE, HOST, op, res)
    }

    #[test]
    fn by_type_without_acls_follows_allow_everyone_and_super_users() {
        assert!(!by_type(&authorizer(vec![]), Op::Write, Res::Topic));
        assert!(by_type(
            &authorizer_with(allow_everyone(), vec![]),
            Op::Write,
            Res::Topic
        ));
        let su = AuthorizerConfig {
            super_users: [ALICE.to_owned()].into(),
            ..Default::default()
        };
        let a = authorizer_with(
            su,
            vec![deny(Res::Topic, "*", Pat::Literal, ALICE, Op::All)],
        );
        assert!(by_type(&a, Op::Write, Res::Topic));
    }

    #[test]
    fn by_type_allows_with_one_undominated_allow() {
        let a = authorizer(vec![allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Write)]);
        assert!(by_type(&a, Op::Write, Res::Topic));
        assert!(!by_type(&a, Op::Read, Res::Topic));
        assert!(!by_type(&a, Op::Write, Res::Group));
        assert!(!a.authorize_by_resource_type(BOB, HOST, Op::Write, Res::Topic));

        let all = authorizer(vec![allow(Res::Topic, "t-", Pat::Prefixed, ALICE, Op::All)]);
        assert!(by_type(&all, Op::Write, Res::Topic));

        let wildcard_principal = authorizer(vec![allow(
            Res::Topic,
            "t",
            Pat::Literal,
            "User:*",
            Op::Write,
        )]);
        assert!(by_type(&wildcard_principal, Op::Write, Res::Topic));

        let other_host = authorizer(vec![acl(
            Res::Topic,
            "t",
            Pat::Literal,
            ALICE,
            OTHER_HOST,
            Op::Write,
            Perm::Allow,
        )]);
        assert!(!by_type(&other_host, Op::Write, Res::Topic));
    }

    #[test]
    fn by_type_has_no_operation_implications_except_through_the_probe() {
        // ALLOW READ on a literal topic: authorize() would allow DESCRIBE on
        // it, but authorizeByResourceType compares operations exactly.
        let a = authorizer(vec![allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read)]);
        assert!(!by_type(&a, Op::Describe, Res::Topic));
        // Through the literal wildcard the probe authorize() does apply them.
        let b = authorizer(vec![allow(Res::Topic, "*", Pat::Literal, ALICE, Op::Read)]);
        assert!(by_type(&b, Op::Describe, Res::Topic));
    }

    #[test]
    fn by_type_denies_when_every_allow_is_dominated() {
        let cases = [
            // literal allow, literal deny of the same name
            (
                allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Write),
                deny(Res::Topic, "t", Pat::Literal, ALICE, Op::Write),
            ),
            // literal allow under a prefixed deny
            (
                allow(Res::Topic, "team-a.t", Pat::Literal, ALICE, Op::Write),
                deny(Res::Topic, "team-", Pat::Prefixed, ALICE, Op::Write),
            ),
            // prefixed allow under a shorter prefixed deny
            (
                allow(Res::Topic, "team-a.", Pat::Prefixed, ALICE, Op::Write),
                deny(Res::Topic, "team-", Pat::Prefixed, ALICE, Op::Write),
            ),
            // prefixed allow under the same prefixed deny
            (
                allow(Res::Topic, "team-", Pat::Prefixed, ALICE, Op::Write),
                deny(Res::Topic, "team-", Pat::Prefixed, "User:*", Op::All),
            ),
        ];
        for (allowed, denied) in cases {
            let a = authorizer(vec![allowed.clone(), denied.clone()]);
            assert!(
                !by_type(&a, Op::Write, Res::Topic),
                "{allowed:?} / {denied:?}"
            );
        }
    }

    #[test]
    fn by_type_allows_when_the_deny_does_not_dominate() {
        let cases = [
            // a literal deny does not dominate a prefixed allow of that name
            (
                allow(Res::Topic, "team-", Pat::Prefixed, ALICE, Op::Write),
                deny(Res::Topic, "team-", Pat::Literal, ALICE, Op::Write),
            ),
            // a longer prefixed deny leaves part of a shorter prefix allowed
            (
                allow(Res::Topic, "team-", Pat::Prefixed, ALICE, Op::Write),
                deny(Res::Topic, "team-a", Pat::Prefixed, ALICE, Op::Write),
            ),
            // a deny for another principal, host or operation does not count
            (
                allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Write),
                deny(Res::Topic, "t", Pat::Literal, BOB, Op::Write),
            ),
            (
                allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Write),
                acl(
                    Res::Topic,
                    "t",
                    Pat::Literal,
                    ALICE,
                    OTHER_HOST,
                    Op::Write,
                    Perm::Deny,
                ),
            ),
            (
                allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Write),
                deny(Res::Topic, "t", Pat::Literal, ALICE, Op::Read),
            ),
        ];
        for (allowed, denied) in cases {
            let a = authorizer(vec![allowed.clone(), denied.clone()]);
            assert!(
                by_type(&a, Op::Write, Res::Topic),
                "{allowed:?} / {denied:?}"
            );
        }
        // One dominated allow and one free allow: allowed.
        let a = authorizer(vec![
            allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Write),
            deny(Res::Topic, "t", Pat::Literal, ALICE, Op::Write),
            allow(Res::Topic, "u", Pat::Literal, ALICE, Op::Write),
        ]);
        assert!(by_type(&a, Op::Write, Res::Topic));
    }

    #[test]
    fn by_type_wildcards() {
        // A wildcard deny denies whatever else allows.
        let a = authorizer(vec![
            allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Write),
            allow(Res::Topic, "*", Pat::Literal, ALICE, Op::Write),
            deny(Res::Topic, "*", Pat::Literal, "User:*", Op::Write),
        ]);
        assert!(!by_type(&a, Op::Write, Res::Topic));
        // A wildcard allow allows despite literal and prefixed denies.
        let b = authorizer(vec![
            allow(Res::Topic, "*", Pat::Literal, ALICE, Op::Write),
            deny(Res::Topic, "h", Pat::Prefixed, ALICE, Op::Write),
            deny(Res::Topic, "t", Pat::Literal, ALICE, Op::Write),
        ]);
        assert!(by_type(&b, Op::Write, Res::Topic));
    }

    #[test]
    fn idempotent_write_via_cluster_or_any_topic() {
        let none = authorizer(vec![allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read)]);
        assert!(!none.authorize_any_topic_write(ALICE, HOST));
        let topic = authorizer(vec![allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Write)]);
        assert!(topic.authorize_any_topic_write(ALICE, HOST));
        let cluster = authorizer(vec![allow(
            Res::Cluster,
            CLUSTER_NAME,
            Pat::Literal,
            ALICE,
            Op::IdempotentWrite,
        )]);
        assert!(cluster.authorize_any_topic_write(ALICE, HOST));
        assert!(!cluster.authorize_any_topic_write(BOB, HOST));
    }

    // ---- authorized_operations -------------------------------------------

    #[test]
    fn authorized_operations_lists_supported_allowed_operations() {
        let a = authorizer(vec![
            allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read),
            allow(Res::Topic, "t", Pat::Literal, ALICE, Op::AlterConfigs),
        ]);
        let ops = a.authorized_operations(ALICE, HOST, Res::Topic, "t");
        assert_eq!(
            ops,
            vec![
                Op::Read,
                Op::Describe,
                Op::DescribeConfigs,
                Op::AlterConfigs
            ]
        );
        let bits = a.authorized_operations_bits(ALICE, HOST, Res::Topic, "t");
        assert_eq!(bits, (1 << 3) | (1 << 8) | (1 << 10) | (1 << 11));
        assert_eq!(operations_from_bits(bits), {
            let mut sorted = ops.clone();
            sorted.sort();
            sorted
        });
        assert!(a
            .authorized_operations(BOB, HOST, Res::Topic, "t")
            .is_empty());
        assert_eq!(a.authorized_operations_bits(BOB, HOST, Res::Topic, "t"), 0);
    }

    #[test]
    fn authorized_operations_for_super_users_and_all() {
        let su = AuthorizerConfig {
            super_users: [ALICE.to_owned()].into(),
            ..Default::default()
        };
        let a = authorizer_with(su, vec![]);
        assert_eq!(
            a.authorized_operations(ALICE, HOST, Res::Cluster, CLUSTER_NAME),
            Res::Cluster.supported_operations()
        );
        let b = authorizer(vec![allow(Res::Group, "g", Pat::Literal, ALICE, Op::All)]);
        assert_eq!(
            b.authorized_operations(ALICE, HOST, Res::Group, "g"),
            Res::Group.supported_operations()
        );
        // ALL is never reported as an operation of its own.
        assert_eq!(
            b.authorized_operations_bits(ALICE, HOST, Res::Group, "g") & Op::All.bit(),
            0
        );
        assert!(b
            .authorized_operations(ALICE, HOST, Res::Any, "g")
            .is_empty());
    }

    #[test]
    fn bitfield_encoding() {
        assert_eq!(Op::Unknown.bit(), 1);
        assert_eq!(Op::Read.bit(), 8);
        assert_eq!(Op::TwoPhaseCommit.bit(), 1 << 15);
        assert_eq!(operations_to_bits(&[]), 0);
        assert_eq!(operations_to_bits(&[Op::Read, Op::Read, Op::Write]), 8 | 16);
        assert!(operations_from_bits(AUTHORIZED_OPERATIONS_OMITTED).is_empty());
        assert_eq!(operations_from_bits(1 << 20), Vec::<AclOperation>::new());
    }

    // ---- configuration ---------------------------------------------------

    #[test]
    fn config_parsing() {
        let c = AuthorizerConfig::from_configs(Some(" User:a ;;User:b:c; "), Some(" TRUE "));
        assert_eq!(
            c,
            Ok(AuthorizerConfig {
                super_users: ["User:a".to_owned(), "User:b:c".to_owned()].into(),
                allow_everyone_if_no_acl_found: true,
            })
        );
        assert_eq!(
            AuthorizerConfig::from_configs(None, None),
            Ok(AuthorizerConfig::default())
        );
        assert!(!AuthorizerConfig::parse_allow_everyone("yes"));
        assert!(!AuthorizerConfig::parse_allow_everyone("false"));
        let bad = AuthorizerConfig::from_configs(Some("User:a;admin"), None);
        assert!(matches!(
            bad,
            Err(AclError::InvalidConfig {
                key: SUPER_USERS_CONFIG,
                ..
            })
        ));
        assert_eq!(
            bad.map_err(|e| e.kafka_error_code()),
            Err(INVALID_CONFIG_CODE)
        );
    }

    #[test]
    fn acls_mut_changes_decisions() {
        let mut a = authorizer(vec![]);
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "t"));
        let b = allow(Res::Topic, "t", Pat::Literal, ALICE, Op::Read);
        assert_eq!(a.acls_mut().insert(b.clone()), Ok(true));
        assert!(can(&a, ALICE, Op::Read, Res::Topic, "t"));
        assert!(a.acls_mut().remove(&b));
        assert!(!can(&a, ALICE, Op::Read, Res::Topic, "t"));
        assert_eq!(a.acls().len(), 0);
    }
}
