//! Who sends a request and what the authorizer lets them do: the one value
//! every handler asks before it acts ([`Access`]), Kafka's
//! `AuthHelper`. The rules of which operation on which resource each API
//! needs live with the handlers (as Kafka's live in `KafkaApis`); the
//! decisions themselves are `security::acl`'s.
//!
//! Without `authorizer.class.name` every request is allowed, as in Kafka.
//! A broker of the cluster (authenticated with `MOLDAU-BROKER`) is always
//! allowed: Kafka's inter-broker principal must be a super user for a
//! cluster to work, and Moldau's brokers are that by construction.

use std::collections::HashSet;

use crate::broker::Broker;
use crate::protocol::principal::ConnectionContext;
use crate::security::acl::{
    operations_to_bits, AclOperation, Authorizer, ResourceType, AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_NAME,
};

/// A request's principal and client host, with the authorizer that judges
/// them (`None`: everything is allowed).
#[derive(Debug, Clone)]
pub struct Access {
    authorizer: Option<Authorizer>,
    principal: String,
    host: String,
}

impl Access {
    /// The access of `ctx`'s requests on `broker`: its authorizer over the
    /// current ACLs, unless it has none or `ctx` is a broker.
    pub fn of(broker: &Broker, ctx: &ConnectionContext) -> Self {
        let authorizer = if ctx.broker().is_some() {
            None
        } else {
            broker.authorizer()
        };
        match authorizer {
            // nothing to ask: no text to build on the hot path
            None => Access {
                authorizer: None,
                principal: String::new(),
                host: String::new(),
            },
            Some(authorizer) => Access {
                authorizer: Some(authorizer),
                principal: ctx.principal.kafka_name(),
                host: ctx.peer.ip().to_string(),
            },
        }
    }

    /// Access with no authorizer: everything is allowed.
    #[cfg(test)]
    pub fn unrestricted() -> Self {
        Access {
            authorizer: None,
            principal: "User:ANONYMOUS".into(),
            host: "127.0.0.1".into(),
        }
    }

    /// `principal` from `host` judged by `authorizer`.
    #[cfg(test)]
    pub fn new(authorizer: Option<Authorizer>, principal: &str, host: &str) -> Self {
        Access {
            authorizer,
            principal: principal.into(),
            host: host.into(),
        }
    }

    /// Whether an authorizer judges the requests (Kafka's
    /// `authorizer.isDefined`).
    pub fn is_restricted(&self) -> bool {
        self.authorizer.is_some()
    }

    /// Whether `operation` on `(resource_type, name)` is allowed.
    pub fn allows(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        self.authorizer.as_ref().is_none_or(|a| {
            a.authorize(&self.principal, &self.host, operation, resource_type, name)
        })
    }

    /// Whether `operation` on the cluster is allowed.
    pub fn allows_cluster(&self, operation: AclOperation) -> bool {
        self.allows(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Whether `operation` on the topic `name` is allowed.
    pub fn allows_topic(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, ResourceType::Topic, name)
    }

    /// Whether `operation` on the group `name` is allowed.
    pub fn allows_group(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, ResourceType::Group, name)
    }

    /// Whether `operation` on the transactional id `name` is allowed.
    pub fn allows_transactional_id(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, ResourceType::TransactionalId, name)
    }

    /// Whether `operation` is allowed on at least one resource of
    /// `resource_type` (Kafka's `authorizeByResourceType`).
    pub fn allows_some(&self, operation: AclOperation, resource_type: ResourceType) -> bool {
        self.authorizer.as_ref().is_none_or(|a| {
            a.authorize_by_resource_type(&self.principal, &self.host, operation, resource_type)
        })
    }

    /// The distinct `names` `operation` on topics is not allowed for,
    /// each asked once (Kafka's `filterByAuthorized`, inverted).
    pub fn denied_topics<'a>(
        &self,
        operation: AclOperation,
        names: impl IntoIterator<Item = &'a str>,
    ) -> HashSet<String> {
        if !self.is_restricted() {
            return HashSet::new();
        }
        let mut asked = HashSet::new();
        let mut denied = HashSet::new();
        for name in names {
            if asked.insert(name) && !self.allows_topic(operation, name) {
                denied.insert(name.to_string());
            }
        }
        denied
    }

    /// The `authorized_operations` field for `(resource_type, name)`:
    /// [`AUTHORIZED_OPERATIONS_OMITTED`] unless the client `asked`; then
    /// the operations allowed of those the resource type supports — all of
    /// them without an authorizer (Kafka's answer without one).
    pub fn authorized_operations(
        &self,
        asked: bool,
        resource_type: ResourceType,
        name: &str,
    ) -> i32 {
        if !asked {
            return AUTHORIZED_OPERATIONS_OMITTED;
        }
        match &self.authorizer {
            None => operations_to_bits(resource_type.supported_operations()),
            Some(a) => {
                a.authorized_operations_bits(&self.principal, &self.host, resource_type, name)
            }
        }
    }

    /// [`Access::authorized_operations`] of the cluster, as Metadata and
    /// DescribeCluster answer it: 0 when DESCRIBE on the cluster is
    /// denied, whatever else would be allowed.
    pub fn cluster_authorized_operations(&self, asked: bool) -> i32 {
        if asked && !self.allows_cluster(AclOperation::Describe) {
            return 0;
        }
        self.authorized_operations(asked, ResourceType::Cluster, CLUSTER_NAME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::acl::{AclBinding, AclSet, AuthorizerConfig, PatternType, PermissionType};

    fn access(bindings: Vec<AclBinding>) -> Access {
        let config = AuthorizerConfig::default();
        let authorizer = Authorizer::new(config, AclSet::from_bindings(bindings).unwrap());
        Access::new(Some(authorizer), "User:alice", "127.0.0.1")
    }

    fn allow(rt: ResourceType, name: &str, op: AclOperation) -> AclBinding {
        AclBinding::new(
            rt,
            name,
            PatternType::Literal,
            "User:alice",
            "*",
            op,
            PermissionType::Allow,
        )
    }

    #[test]
    fn without_an_authorizer_everything_is_allowed() {
        let a = Access::unrestricted();
        assert!(a.allows_topic(AclOperation::Write, "t"));
        assert!(a.allows_cluster(AclOperation::Alter));
        assert!(a.denied_topics(AclOperation::Read, ["a", "b"]).is_empty());
    }

    #[test]
    fn not_asked_is_the_schema_default() {
        let none = Access::unrestricted();
        assert_eq!(
            none.authorized_operations(false, ResourceType::Topic, "t"),
            i32::MIN
        );
        assert_eq!(none.cluster_authorized_operations(false), i32::MIN);
        assert_eq!(
            access(vec![]).cluster_authorized_operations(false),
            i32::MIN
        );
    }

    #[test]
    fn without_an_authorizer_every_supported_operation() {
        // Kafka's bitfields without an authorizer (as its clients decode
        // them): topic READ..ALTER_CONFIGS but CLUSTER_ACTION and
        // IDEMPOTENT_WRITE; group READ, DESCRIBE, DELETE and the configs
        let none = Access::unrestricted();
        assert_eq!(
            none.authorized_operations(true, ResourceType::Topic, "t"),
            0b1101_1111_1000
        );
        assert_eq!(
            none.authorized_operations(true, ResourceType::Group, "g"),
            (1 << 3) | (1 << 8) | (1 << 6) | (1 << 10) | (1 << 11)
        );
        assert_eq!(
            none.cluster_authorized_operations(true),
            (1 << 5) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12) | (1 << 7) | (1 << 8)
        );
    }

    #[test]
    fn with_an_authorizer_what_it_allows() {
        let a = access(vec![
            allow(ResourceType::Topic, "t", AclOperation::Read),
            allow(
                ResourceType::Cluster,
                CLUSTER_NAME,
                AclOperation::IdempotentWrite,
            ),
        ]);
        // READ implies DESCRIBE
        assert_eq!(
            a.authorized_operations(true, ResourceType::Topic, "t"),
            (1 << 3) | (1 << 8)
        );
        assert_eq!(a.authorized_operations(true, ResourceType::Topic, "u"), 0);
        // IDEMPOTENT_WRITE but no DESCRIBE on the cluster: nothing
        assert_eq!(a.cluster_authorized_operations(true), 0);
        let b = access(vec![
            allow(ResourceType::Cluster, CLUSTER_NAME, AclOperation::Describe),
            allow(
                ResourceType::Cluster,
                CLUSTER_NAME,
                AclOperation::IdempotentWrite,
            ),
        ]);
        assert_eq!(b.cluster_authorized_operations(true), (1 << 8) | (1 << 12));
    }

    #[test]
    fn denied_topics_lists_each_denied_name_once() {
        let a = access(vec![allow(ResourceType::Topic, "ok", AclOperation::Read)]);
        let denied = a.denied_topics(AclOperation::Read, ["ok", "no", "no", "other"]);
        assert_eq!(
            denied,
            HashSet::from(["no".to_string(), "other".to_string()])
        );
        // READ implies DESCRIBE, not WRITE
        assert!(a.allows_topic(AclOperation::Describe, "ok"));
        assert!(!a.allows_topic(AclOperation::Write, "ok"));
    }

    #[test]
    fn the_cluster_operations_are_none_without_describe_on_the_cluster() {
        // IDEMPOTENT_WRITE implies nothing else
        let a = access(vec![allow(
            ResourceType::Cluster,
            CLUSTER_NAME,
            AclOperation::IdempotentWrite,
        )]);
        assert_eq!(a.cluster_authorized_operations(true), 0);
        // ALTER implies DESCRIBE (Kafka's implication)
        let a = access(vec![allow(
            ResourceType::Cluster,
            CLUSTER_NAME,
            AclOperation::Alter,
        )]);
        let ops = a.cluster_authorized_operations(true);
        assert_ne!(ops & AclOperation::Alter.bit(), 0);
        assert_ne!(ops & AclOperation::Describe.bit(), 0);
        assert_eq!(ops & AclOperation::Create.bit(), 0);
    }
}
