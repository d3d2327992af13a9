//! DescribeUserScramCredentials and AlterUserScramCredentials v0 (KIP-554),
//! what `kafka-configs --entity-type users --add-config 'SCRAM-SHA-512=[…]'`
//! and Admin clients use. This module owns only the wire shapes: the rules
//! are [`crate::security::credentials`]'s, describes read the metadata
//! image, and alterations go through the
//! [`Controller`](crate::controller::Controller) (a standalone broker's own
//! file, or the active controller's cluster record).
//!
//! Describing needs DESCRIBE on the cluster, altering ALTER (Kafka's
//! rules): without it, CLUSTER_AUTHORIZATION_FAILED.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    alter_user_scram_credentials_response, describe_user_scram_credentials_response,
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::security::acl::AclOperation;
use crate::security::credentials::{self, Deletion, Upsertion};

pub fn describe(
    broker: &Broker,
    req: DescribeUserScramCredentialsRequest,
    access: &Access,
) -> DescribeUserScramCredentialsResponse {
    if !access.allows_cluster(AclOperation::Describe) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("no DESCRIBE on the cluster")));
    }
    let image = broker.image();
    let users: Option<Vec<String>> = req
        .users
        .map(|users| users.into_iter().map(|u| u.name.to_string()).collect());
    let results = credentials::describe(&image.scram_credentials, users.as_deref())
        .into_iter()
        .map(|d| {
            let out = describe_user_scram_credentials_response::DescribeUserScramCredentialsResult::default()
                .with_user(str_bytes(&d.user));
            match d.result {
                Ok(infos) => out.with_error_message(None).with_credential_infos(
                    infos
                        .into_iter()
                        .map(|(mechanism, iterations)| {
                            describe_user_scram_credentials_response::CredentialInfo::default()
                                .with_mechanism(mechanism.id())
                                .with_iterations(i32::try_from(iterations).unwrap_or(i32::MAX))
                        })
                        .collect(),
                ),
                Err((code, message)) => out
                    .with_error_code(code.code())
                    .with_error_message(Some(str_bytes(&message))),
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse::default()
        .with_error_message(None)
        .with_results(results)
}

pub fn alter(
    broker: &Broker,
    req: AlterUserScramCredentialsRequest,
    access: &Access,
) -> AlterUserScramCredentialsResponse {
    let deletions: Vec<Deletion> = req
        .deletions
        .iter()
        .map(|d| Deletion {
            user: d.name.to_string(),
            mechanism: d.mechanism,
        })
        .collect();
    let upsertions: Vec<Upsertion> = req
        .upsertions
        .iter()
        .map(|u| Upsertion {
            user: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        })
        .collect();
    let controller = crate::controller::Controller::new(broker);
    let altered = if access.allows_cluster(AclOperation::Alter) {
        controller.alter_scram_credentials(&deletions, &upsertions)
    } else {
        Err(crate::error::TopicError::new(
            ResponseError::ClusterAuthorizationFailed,
            "no ALTER on the cluster",
        ))
    };
    let results = match altered {
        Ok(results) => results
            .into_iter()
            .map(|r| {
                let out =
                    alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                        .with_user(str_bytes(&r.user));
                match r.error {
                    None => out.with_error_message(None),
                    Some((code, message)) => out
                        .with_error_code(code.code())
                        .with_error_message(Some(str_bytes(&message))),
                }
            })
            .collect(),
        // the whole request failed: every user named hears why, once
        Err(e) => {
            let mut users: Vec<&str> = deletions
                .iter()
                .map(|d| d.user.as_str())
                .chain(upsertions.iter().map(|u| u.user.as_str()))
                .collect();
            let mut seen = std::collections::BTreeSet::new();
            users.retain(|u| seen.insert(*u));
            users
                .into_iter()
                .map(|user| {
                    alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                        .with_user(str_bytes(user))
                        .with_error_code(e.code.code())
                        .with_error_message(Some(str_bytes(&e.message)))
                })
                .collect()
        }
    };
    AlterUserScramCredentialsResponse::default().with_results(results)
}
