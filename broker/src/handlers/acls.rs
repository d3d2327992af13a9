//! CreateAcls, DescribeAcls and DeleteAcls v1–3, what `kafka-acls --add /
//! --list / --remove` and Admin clients use. This module owns only the
//! wire shapes: the rules are [`crate::security::acl_admin`]'s, describes
//! read the metadata image, and changes go through the
//! [`Controller`](crate::controller::Controller) (a standalone broker's
//! `acls.json`, or the active controller's cluster record).
//!
//! Without an authorizer (`authorizer.class.name` unset) each answers
//! SECURITY_DISABLED, "No Authorizer is configured." (DescribeAcls: "No
//! Authorizer is configured on the broker"), as Kafka does.
//!
//! Creating and deleting need ALTER on the cluster, describing DESCRIBE
//! (else CLUSTER_AUTHORIZATION_FAILED), as in Kafka.

use kafka_protocol::messages::{
    create_acls_response, delete_acls_response, describe_acls_response, CreateAclsRequest,
    CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::error::TopicError;
use crate::security::acl::{AclBinding, AclOperation};
use crate::security::acl_admin::{self, AclFailure};

fn creation_result(r: Result<(), AclFailure>) -> create_acls_response::AclCreationResult {
    let out = create_acls_response::AclCreationResult::default();
    match r {
        Ok(()) => out.with_error_message(None),
        Err(f) => out
            .with_error_code(f.code)
            .with_error_message(Some(str_bytes(&f.message))),
    }
}

/// The refusal of a request that needs `operation` on the cluster.
fn cluster_denied(access: &Access, operation: AclOperation) -> Result<(), AclFailure> {
    if access.allows_cluster(operation) {
        return Ok(());
    }
    Err(AclFailure {
        code: kafka_protocol::error::ResponseError::ClusterAuthorizationFailed.code(),
        message: format!("no {operation} on the cluster"),
    })
}

/// The same failure for each of a request's `n` items: what a request
/// refused, or failed by the controller, as a whole answers.
fn each_fails<T>(n: usize, f: AclFailure) -> Vec<Result<T, AclFailure>> {
    (0..n).map(|_| Err(f.clone())).collect()
}

/// A controller's failure of a whole request, as each item hears it.
fn whole_request_failure(e: TopicError) -> AclFailure {
    AclFailure {
        code: e.code.code(),
        message: e.message,
    }
}

pub fn create(broker: &Broker, req: CreateAclsRequest, access: &Access) -> CreateAclsResponse {
    let refused = acl_admin::require_authorizer(broker.authorizer_config())
        .and_then(|()| cluster_denied(access, AclOperation::Alter));
    let results = match refused {
        Err(f) => each_fails(req.creations.len(), f),
        Ok(()) => {
            let creations: Vec<Result<AclBinding, AclFailure>> = req
                .creations
                .iter()
                .map(|c| {
                    acl_admin::binding_from_wire(
                        c.resource_type,
                        &c.resource_name,
                        c.resource_pattern_type,
                        &c.principal,
                        &c.host,
                        c.operation,
                        c.permission_type,
                    )
                })
                .collect();
            crate::controller::Controller::new(broker)
                .create_acls(&creations)
                // the whole request failed: every creation hears why
                .unwrap_or_else(|e| each_fails(creations.len(), whole_request_failure(e)))
        }
    };
    CreateAclsResponse::default().with_results(results.into_iter().map(creation_result).collect())
}

pub fn describe(
    broker: &Broker,
    req: DescribeAclsRequest,
    access: &Access,
) -> DescribeAclsResponse {
    let filter = acl_admin::require_authorizer_to_describe(broker.authorizer_config())
        .and_then(|()| cluster_denied(access, AclOperation::Describe))
        .and_then(|()| {
            acl_admin::filter_from_wire(
                req.resource_type_filter,
                req.resource_name_filter.as_deref(),
                req.pattern_type_filter,
                req.principal_filter.as_deref(),
                req.host_filter.as_deref(),
                req.operation,
                req.permission_type,
            )
        });
    let filter = match filter {
        Ok(filter) => filter,
        Err(f) => {
            return DescribeAclsResponse::default()
                .with_error_code(f.code)
                .with_error_message(Some(str_bytes(&f.message)))
        }
    };
    let image = broker.image();
    let resources = acl_admin::describe(&image.acls, &filter)
        .into_iter()
        .map(|r| {
            describe_acls_response::DescribeAclsResource::default()
                .with_resource_type(r.resource_type.code())
                .with_resource_name(str_bytes(&r.resource_name))
                .with_pattern_type(r.pattern_type.code())
                .with_acls(
                    r.acls
                        .iter()
                        .map(|b| {
                            describe_acls_response::AclDescription::default()
                                .with_principal(str_bytes(&b.principal))
                                .with_host(str_bytes(&b.host))
                                .with_operation(b.operation.code())
                                .with_permission_type(b.permission.code())
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeAclsResponse::default()
        .with_error_message(None)
        .with_resources(resources)
}

fn filter_result(
    r: Result<Vec<AclBinding>, AclFailure>,
) -> delete_acls_response::DeleteAclsFilterResult {
    let out = delete_acls_response::DeleteAclsFilterResult::default();
    match r {
        Ok(matching) => out.with_error_message(None).with_matching_acls(
            matching
                .iter()
                .map(|b| {
                    delete_acls_response::DeleteAclsMatchingAcl::default()
                        .with_error_message(None)
                        .with_resource_type(b.resource_type.code())
                        .with_resource_name(str_bytes(&b.resource_name))
                        .with_pattern_type(b.pattern_type.code())
                        .with_principal(str_bytes(&b.principal))
                        .with_host(str_bytes(&b.host))
                        .with_operation(b.operation.code())
                        .with_permission_type(b.permission.code())
                })
                .collect(),
        ),
        Err(f) => out
            .with_error_code(f.code)
            .with_error_message(Some(str_bytes(&f.message))),
    }
}

pub fn delete(broker: &Broker, req: DeleteAclsRequest, access: &Access) -> DeleteAclsResponse {
    let refused = acl_admin::require_authorizer(broker.authorizer_config())
        .and_then(|()| cluster_denied(access, AclOperation::Alter));
    let results = match refused {
        Err(f) => each_fails(req.filters.len(), f),
        Ok(()) => {
            let filters: Vec<_> = req
                .filters
                .iter()
                .map(|f| {
                    acl_admin::filter_from_wire(
                        f.resource_type_filter,
                        f.resource_name_filter.as_deref(),
                        f.pattern_type_filter,
                        f.principal_filter.as_deref(),
                        f.host_filter.as_deref(),
                        f.operation,
                        f.permission_type,
                    )
                })
                .collect();
            crate::controller::Controller::new(broker)
                .delete_acls(&filters)
                .unwrap_or_else(|e| each_fails(filters.len(), whole_request_failure(e)))
        }
    };
    DeleteAclsResponse::default()
        .with_filter_results(results.into_iter().map(filter_result).collect())
}
