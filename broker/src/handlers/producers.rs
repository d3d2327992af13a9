//! InitProducerId for idempotent producers: a new producer id with epoch 0,
//! or (v3+, KIP-360) the same id with its epoch bumped when the producer
//! asks to recover from a sequence error.
//!
//! Transactional producers (a non-null `transactional_id`) go to the
//! transaction coordinator (`transactions::init_producer_id`): this broker
//! must lead the id's `__transaction_state` partition (else
//! NOT_COORDINATOR), and the id keeps its producer id across instances,
//! each new one fencing the last with a bumped epoch.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::access::Access;
use crate::broker::Broker;
use crate::security::acl::{AclOperation, ResourceType};

/// InitProducerId. A transactional producer needs WRITE on its
/// transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), an
/// idempotent one IDEMPOTENT_WRITE on the cluster or WRITE on some topic
/// (else CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
pub fn init_producer_id(
    broker: &Broker,
    req: InitProducerIdRequest,
    version: i16,
    access: &Access,
) -> InitProducerIdResponse {
    let resp = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    match &req.transactional_id {
        None if access.is_restricted()
            && !access.allows_cluster(AclOperation::IdempotentWrite)
            && !access.allows_some(AclOperation::Write, ResourceType::Topic) =>
        {
            return resp.with_error_code(ResponseError::ClusterAuthorizationFailed.code())
        }
        None => {}
        Some(id) if id.0.is_empty() => {
            return resp.with_error_code(ResponseError::InvalidRequest.code())
        }
        Some(id) if !access.allows_transactional_id(AclOperation::Write, id) => {
            return resp.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
        }
        Some(id) => {
            let producer =
                crate::txn::vocab::ProducerIdAndEpoch::new(req.producer_id.0, req.producer_epoch);
            return match super::transactions::init_producer_id(
                broker,
                id.0.as_str(),
                req.transaction_timeout_ms,
                producer,
                version,
            ) {
                Ok(p) => resp
                    .with_producer_id(ProducerId(p.producer_id))
                    .with_producer_epoch(p.epoch),
                Err(e) => resp.with_error_code(e.code()),
            };
        }
    }
    let pid = req.producer_id.0;
    let epoch = req.producer_epoch;
    if pid >= 0
        && epoch >= 0
        && crate::controller::Controller::new(broker).producer_id_issued(pid)
        && epoch < i16::MAX - 1
    {
        return resp
            .with_producer_id(ProducerId(pid))
            .with_producer_epoch(epoch + 1);
    }
    match crate::controller::Controller::new(broker).allocate_producer_id() {
        Ok(id) => resp.with_producer_id(ProducerId(id)).with_producer_epoch(0),
        Err(e) => {
            tracing::warn!(error = %e, "allocating a producer id failed");
            resp.with_error_code(e.code.code())
        }
    }
}
