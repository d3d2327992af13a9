//! CreateAcls, DescribeAcls and DeleteAcls (KIP-140) on the admin
//! connection, with ACL bindings as plain values carrying Kafka's wire codes.
//! Deletion goes binding by binding with exact filters (no ANY fields), so
//! it removes exactly the bindings named and nothing that merely matches.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;

use super::{AdminClient, KafkaError};

/// Kafka's resource type codes.
pub mod resource {
    /// ANY (filters only).
    pub const ANY: i8 = 1;
    /// TOPIC.
    pub const TOPIC: i8 = 2;
    /// GROUP.
    pub const GROUP: i8 = 3;
    /// CLUSTER.
    pub const CLUSTER: i8 = 4;
    /// TRANSACTIONAL_ID.
    pub const TRANSACTIONAL_ID: i8 = 5;
}

/// Kafka's pattern type codes.
pub mod pattern {
    /// ANY (filters only).
    pub const ANY: i8 = 1;
    /// LITERAL.
    pub const LITERAL: i8 = 3;
    /// PREFIXED.
    pub const PREFIXED: i8 = 4;
}

/// Kafka's operation codes.
pub mod operation {
    /// ANY (filters only).
    pub const ANY: i8 = 1;
    /// ALL.
    pub const ALL: i8 = 2;
    /// READ.
    pub const READ: i8 = 3;
    /// WRITE.
    pub const WRITE: i8 = 4;
    /// CREATE.
    pub const CREATE: i8 = 5;
    /// DELETE.
    pub const DELETE: i8 = 6;
    /// ALTER.
    pub const ALTER: i8 = 7;
    /// DESCRIBE.
    pub const DESCRIBE: i8 = 8;
    /// CLUSTER_ACTION.
    pub const CLUSTER_ACTION: i8 = 9;
    /// DESCRIBE_CONFIGS.
    pub const DESCRIBE_CONFIGS: i8 = 10;
    /// ALTER_CONFIGS.
    pub const ALTER_CONFIGS: i8 = 11;
    /// IDEMPOTENT_WRITE.
    pub const IDEMPOTENT_WRITE: i8 = 12;
}

/// Kafka's permission type codes.
pub mod permission {
    /// ANY (filters only).
    pub const ANY: i8 = 1;
    /// DENY.
    pub const DENY: i8 = 2;
    /// ALLOW.
    pub const ALLOW: i8 = 3;
}

/// Kafka's name of the cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// One ACL binding: a resource pattern and an access control entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    /// Resource type code ([`resource`]).
    pub resource_type: i8,
    /// Resource name.
    pub resource_name: String,
    /// Pattern type code ([`pattern`]).
    pub pattern_type: i8,
    /// Principal, e.g. `User:alice`.
    pub principal: String,
    /// Host (`*`: any).
    pub host: String,
    /// Operation code ([`operation`]).
    pub operation: i8,
    /// Permission code ([`permission`]).
    pub permission: i8,
}

impl std::fmt::Display for AclBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} on resource type {} {:?} (pattern {}) from host {} operation {}",
            if self.permission == permission::DENY {
                "DENY"
            } else {
                "ALLOW"
            },
            self.principal,
            self.resource_type,
            self.resource_name,
            self.pattern_type,
            self.host,
            self.operation
        )
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

impl AdminClient {
    /// Every ACL binding of `principal` (all resources, hosts, operations).
    pub async fn describe_acls(&mut self, principal: &str) -> Result<Vec<AclBinding>, KafkaError> {
        let req = DescribeAclsRequest::default()
            .with_resource_type_filter(resource::ANY)
            .with_resource_name_filter(None)
            .with_pattern_type_filter(pattern::ANY)
            .with_principal_filter(Some(s(principal)))
            .with_host_filter(None)
            .with_operation(operation::ANY)
            .with_permission_type(permission::ANY);
        let resp = self.call(req, "DescribeAcls").await?;
        if resp.error_code != 0 {
            return Err(KafkaError::broker(
                "DescribeAcls",
                resp.error_code,
                resp.error_message.map(|m| m.to_string()),
            ));
        }
        let mut out: Vec<AclBinding> = resp
            .resources
            .into_iter()
            .flat_map(|r| {
                r.acls.into_iter().map(move |a| AclBinding {
                    resource_type: r.resource_type,
                    resource_name: r.resource_name.to_string(),
                    pattern_type: r.pattern_type,
                    principal: a.principal.to_string(),
                    host: a.host.to_string(),
                    operation: a.operation,
                    permission: a.permission_type,
                })
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Creates `acls`; each binding's outcome in order (the broker accepts
    /// or refuses each on its own).
    pub async fn create_acls(
        &mut self,
        acls: &[AclBinding],
    ) -> Result<Vec<(AclBinding, Result<(), KafkaError>)>, KafkaError> {
        if acls.is_empty() {
            return Ok(Vec::new());
        }
        let req = CreateAclsRequest::default().with_creations(
            acls.iter()
                .map(|a| {
                    AclCreation::default()
                        .with_resource_type(a.resource_type)
                        .with_resource_name(s(&a.resource_name))
                        .with_resource_pattern_type(a.pattern_type)
                        .with_principal(s(&a.principal))
                        .with_host(s(&a.host))
                        .with_operation(a.operation)
                        .with_permission_type(a.permission)
                })
                .collect(),
        );
        let resp = self.call(req, "CreateAcls").await?;
        if resp.results.len() != acls.len() {
            return Err(KafkaError::Protocol(format!(
                "CreateAcls answered {} results for {} creations",
                resp.results.len(),
                acls.len()
            )));
        }
        Ok(acls
            .iter()
            .cloned()
            .zip(resp.results)
            .map(|(a, r)| {
                let outcome = if r.error_code == 0 {
                    Ok(())
                } else {
                    Err(KafkaError::broker(
                        "CreateAcls",
                        r.error_code,
                        r.error_message.map(|m| m.to_string()),
                    ))
                };
                (a, outcome)
            })
            .collect())
    }

    /// Deletes exactly `acls` (one exact filter each); each binding's
    /// outcome in order.
    pub async fn delete_acls(
        &mut self,
        acls: &[AclBinding],
    ) -> Result<Vec<(AclBinding, Result<(), KafkaError>)>, KafkaError> {
        if acls.is_empty() {
            return Ok(Vec::new());
        }
        let req = DeleteAclsRequest::default().with_filters(
            acls.iter()
                .map(|a| {
                    DeleteAclsFilter::default()
                        .with_resource_type_filter(a.resource_type)
                        .with_resource_name_filter(Some(s(&a.resource_name)))
                        .with_pattern_type_filter(a.pattern_type)
                        .with_principal_filter(Some(s(&a.principal)))
                        .with_host_filter(Some(s(&a.host)))
                        .with_operation(a.operation)
                        .with_permission_type(a.permission)
                })
                .collect(),
        );
        let resp = self.call(req, "DeleteAcls").await?;
        if resp.filter_results.len() != acls.len() {
            return Err(KafkaError::Protocol(format!(
                "DeleteAcls answered {} results for {} filters",
                resp.filter_results.len(),
                acls.len()
            )));
        }
        Ok(acls
            .iter()
            .cloned()
            .zip(resp.filter_results)
            .map(|(a, r)| {
                let outcome = if r.error_code == 0 {
                    Ok(())
                } else {
                    Err(KafkaError::broker(
                        "DeleteAcls",
                        r.error_code,
                        r.error_message.map(|m| m.to_string()),
                    ))
                };
                (a, outcome)
            })
            .collect())
    }
}
