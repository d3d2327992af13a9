//! DescribeProducers (API key 61, KIP-664): the active producers of
//! partitions this broker leads, from each partition's producer state —
//! what `kafka-transactions.sh describe-producers` shows (a hanging
//! transaction's start offset among them). A partition not led here is
//! NOT_LEADER_OR_FOLLOWER, one that does not exist
//! UNKNOWN_TOPIC_OR_PARTITION.
//!
//! The last timestamp is the max timestamp of the producer's last batch;
//! -1 when the state came from a producer snapshot (which does not keep
//! it) and the producer has written nothing since.

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use super::access::Access;
use crate::broker::Broker;
use crate::producer::state::ActiveProducer;
use crate::security::acl::AclOperation;

/// DescribeProducers; each topic needs READ on it (else
/// TOPIC_AUTHORIZATION_FAILED), as in Kafka.
pub fn describe_producers(
    broker: &Broker,
    req: DescribeProducersRequest,
    access: &Access,
) -> DescribeProducersResponse {
    let image = broker.image();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.as_str().to_string();
            let allowed = access.allows_topic(AclOperation::Read, &name);
            let partitions = t
                .partition_indexes
                .into_iter()
                .map(|index| {
                    let resp = PartitionResponse::default().with_partition_index(index);
                    let led = if allowed {
                        super::led_partition(broker, &image, &name, index)
                    } else {
                        Err(kafka_protocol::error::ResponseError::TopicAuthorizationFailed)
                    };
                    match led {
                        Ok((partition, _)) => resp
                            .with_active_producers(active_producers(partition.active_producers())),
                        Err(code) => resp.with_error_code(code.code()),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

/// The response's view of a partition's active producers.
fn active_producers(producers: Vec<ActiveProducer>) -> Vec<ProducerState> {
    producers
        .into_iter()
        .map(|p| {
            ProducerState::default()
                .with_producer_id(ProducerId(p.producer_id))
                .with_producer_epoch(p.epoch as i32)
                .with_last_sequence(p.last_sequence)
                .with_last_timestamp(p.last_timestamp)
                .with_coordinator_epoch(p.coordinator_epoch)
                .with_current_txn_start_offset(p.current_txn_start_offset)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::producer::state::ProducerStates;

    #[test]
    fn idempotent_and_transactional_producers() {
        let mut states = ProducerStates::default();
        // an idempotent producer: two batches, sequences 0..=4 and 5..=9
        states.record(7, 2, 0, 4, 0);
        states.record_timestamp(7, 1_000);
        states.record(7, 2, 5, 9, 5);
        states.record_timestamp(7, 2_000);
        // a transactional one, its transaction open at offset 10
        states.record(8, 0, 0, 0, 10);
        states.record_timestamp(8, 3_000);
        states.begin_txn(8, 10);

        let described = active_producers(states.active());
        assert_eq!(described.len(), 2);
        let idem = &described[0];
        assert_eq!(idem.producer_id, ProducerId(7));
        assert_eq!(idem.producer_epoch, 2);
        assert_eq!(idem.last_sequence, 9);
        assert_eq!(idem.last_timestamp, 2_000);
        assert_eq!(idem.coordinator_epoch, -1);
        assert_eq!(idem.current_txn_start_offset, -1);
        let txn = &described[1];
        assert_eq!(txn.producer_id, ProducerId(8));
        assert_eq!(txn.last_sequence, 0);
        assert_eq!(txn.last_timestamp, 3_000);
        assert_eq!(txn.current_txn_start_offset, 10);
    }

    #[test]
    fn a_snapshot_keeps_no_timestamp() {
        let mut states = ProducerStates::default();
        states.record(7, 0, 0, 0, 0);
        states.record_timestamp(7, 1_000);
        let reloaded = ProducerStates::from_snapshot(states.to_snapshot());
        let described = active_producers(reloaded.active());
        assert_eq!(described[0].last_sequence, 0);
        assert_eq!(described[0].last_timestamp, -1);
    }
}
