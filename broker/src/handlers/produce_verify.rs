//! KIP-890 on the produce path: before a partition leader takes the first
//! transactional batch of a producer's transaction, it asks the
//! transaction's coordinator whether the partition was added to the
//! transaction (part 1: AddPartitionsToTxn verify-only), or, for a
//! transaction version 2 client (Produce v12+, which leaves the adding to
//! the broker), to add it (part 2: AddPartitionsToTxn v5 without
//! verify-only; `transactions::ask_coordinator`). A batch for a partition
//! never added, or one sent after its transaction ended, would otherwise
//! open a transaction there that no coordinator will ever end — a hanging
//! transaction holding the last stable offset back for good; under part 2
//! a late batch of an ended transaction carries the epoch that end bumped
//! past, and the coordinator refuses to add it.
//!
//! A confirmed partition remembers the producer ([`Partition::verified`])
//! until its batch opens the transaction or a marker ends one, and the
//! append checks that under the partition's lock
//! ([`Partition::append_verified`]), so a transaction that ended between
//! the question and the append is refused too. Later batches of an open
//! transaction need no question. The part 1 question is off with
//! `transaction.partition.verification.enable=false`; the part 2 add is
//! not (nothing else would add the partition), as in Kafka.
//!
//! Errors as Kafka gives them to producers ([`produce_error`]): a partition
//! not in the transaction INVALID_TXN_STATE, a fenced producer
//! INVALID_PRODUCER_EPOCH, a coordinator that cannot answer now
//! NOT_ENOUGH_REPLICAS (retried by every client, no metadata refresh); a
//! request with transactional batches but no transactional id
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED, one mixing producers
//! INVALID_PRODUCER_ID_MAPPING.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ProduceRequest;

use super::transactions::Ask;
use crate::broker::Broker;
use crate::partition::Partition;
use crate::storage::batch::BatchHeader;
use crate::txn::vocab::{ProducerIdAndEpoch, TopicPartition};

/// The partitions of a produce request refused before their append:
/// `(topic, partition)` → (error, message).
pub type Refused = HashMap<(String, i32), (ResponseError, String)>;

/// A transactional batch's partition: where, and from which producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionalWrite {
    pub topic: String,
    pub partition: i32,
    pub producer_id: i64,
    pub epoch: i16,
}

/// The partitions of `req` whose first batch is transactional. A record
/// set whose header does not parse is left to the produce path's checks.
pub fn transactional_writes(req: &ProduceRequest) -> Vec<TransactionalWrite> {
    req.topic_data
        .iter()
        .flat_map(|t| {
            t.partition_data.iter().filter_map(move |p| {
                let header = BatchHeader::parse(p.records.as_deref()?).ok()?;
                (header.is_transactional() && header.producer_id >= 0).then(|| TransactionalWrite {
                    topic: t.name.0.as_str().to_string(),
                    partition: p.index,
                    producer_id: header.producer_id,
                    epoch: header.producer_epoch,
                })
            })
        })
        .collect()
}

/// The first Produce version whose transactional batches ask the
/// coordinator to add their partition (a transaction version 2 client).
pub const ADD_FROM_PRODUCE_VERSION: i16 = 12;

/// What a producer (of Produce `version`) is told when its coordinator's
/// verification of a partition failed with `error` (Kafka's translation
/// for produce). A version 2 client (v12+) knows TRANSACTION_ABORTABLE and
/// aborts on it; older ones get INVALID_TXN_STATE.
pub fn produce_error(error: ResponseError, version: i16) -> ResponseError {
    use ResponseError::*;
    match error {
        TransactionAbortable if version >= ADD_FROM_PRODUCE_VERSION => TransactionAbortable,
        TransactionAbortable => InvalidTxnState,
        ProducerFenced => InvalidProducerEpoch,
        ConcurrentTransactions
        | NetworkException
        | CoordinatorLoadInProgress
        | CoordinatorNotAvailable
        | NotCoordinator => NotEnoughReplicas,
        other => other,
    }
}

/// Verifies the transactional partitions of `req` that need it; returns
/// the refused ones. Cheap when the request has no transactional batch (a
/// header parse per partition); a question to the coordinator runs on the
/// blocking pool.
/// `refused` holds the partitions refused already (by the ACLs), which
/// are never asked about.
pub async fn verify(
    broker: &Arc<Broker>,
    req: &ProduceRequest,
    version: i16,
    mut refused: Refused,
) -> Refused {
    let ask = Ask::for_version(version, ADD_FROM_PRODUCE_VERSION);
    if ask == Ask::Verify
        && !broker
            .topics
            .static_broker_config()
            .transaction_partition_verification_enable
    {
        return refused;
    }
    let mut writes = transactional_writes(req);
    writes.retain(|w| !refused.contains_key(&(w.topic.clone(), w.partition)));
    if writes.is_empty() {
        return refused;
    }
    let refuse_all = |refused: &mut Refused, code: ResponseError, why: &str| {
        for w in &writes {
            refused.insert((w.topic.clone(), w.partition), (code, why.to_string()));
        }
    };
    let Some(transactional_id) = req.transactional_id.as_ref().map(|t| t.0.to_string()) else {
        refuse_all(
            &mut refused,
            ResponseError::TransactionalIdAuthorizationFailed,
            "transactional records without a transactional id",
        );
        return refused;
    };
    let producers: BTreeSet<(i64, i16)> = writes.iter().map(|w| (w.producer_id, w.epoch)).collect();
    let [(producer_id, epoch)] = producers.into_iter().collect::<Vec<_>>()[..] else {
        refuse_all(
            &mut refused,
            ResponseError::InvalidProducerIdMapping,
            "transactional records of more than one producer",
        );
        return refused;
    };
    let image = broker.image();
    let pending: Vec<(TopicPartition, Arc<Partition>)> = writes
        .iter()
        .filter_map(|w| {
            let (partition, _) =
                super::led_partition(broker, &image, &w.topic, w.partition).ok()?;
            partition
                .needs_verification(producer_id, epoch)
                .then(|| (TopicPartition::new(&w.topic, w.partition), partition))
        })
        .collect();
    if pending.is_empty() {
        return refused;
    }
    let asked: BTreeSet<TopicPartition> = pending.iter().map(|(tp, _)| tp.clone()).collect();
    let producer = ProducerIdAndEpoch::new(producer_id, epoch);
    let b = broker.clone();
    let id = transactional_id.clone();
    let answer = tokio::task::spawn_blocking(move || {
        super::transactions::ask_coordinator(&b, &id, producer, &asked, ask)
    })
    .await
    .unwrap_or(Err(ResponseError::UnknownServerError));
    match answer {
        Ok(per) => {
            for (tp, partition) in pending {
                match per.iter().find(|(p, _)| *p == tp).map(|(_, e)| *e) {
                    Some(None) => partition.verified(producer_id, epoch),
                    found => {
                        let error = found.flatten().unwrap_or(ResponseError::UnknownServerError);
                        refused.insert(
                            (tp.topic.clone(), tp.partition),
                            (
                                produce_error(error, version),
                                format!("{tp} is not in transaction {transactional_id}: {error:?}"),
                            ),
                        );
                    }
                }
            }
        }
        Err(error) => {
            for (tp, _) in pending {
                refused.insert(
                    (tp.topic.clone(), tp.partition),
                    (
                        produce_error(error, version),
                        format!(
                            "verifying {tp} with the coordinator of {transactional_id}: {error:?}"
                        ),
                    ),
                );
            }
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::StrBytes;

    use crate::storage::batch::BatchBuilder;

    fn data(index: i32, pid: i64, transactional: bool) -> PartitionProduceData {
        let mut b = BatchBuilder::new().producer(pid, 3, 0);
        if transactional {
            b = b.transactional();
        }
        let records = b
            .record(None, Some(Bytes::from_static(b"v")), 1)
            .encode()
            .unwrap();
        PartitionProduceData::default()
            .with_index(index)
            .with_records(Some(Bytes::from(records)))
    }

    #[test]
    fn only_transactional_batches_are_verified() {
        let req = ProduceRequest::default().with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_data(vec![
                data(0, 7, true),
                data(1, 7, false),
                PartitionProduceData::default()
                    .with_index(2)
                    .with_records(Some(Bytes::from_static(b"garbage"))),
                data(3, 7, true),
            ])]);
        let writes = transactional_writes(&req);
        assert_eq!(
            writes.iter().map(|w| w.partition).collect::<Vec<_>>(),
            vec![0, 3]
        );
        assert_eq!((writes[0].producer_id, writes[0].epoch), (7, 3));
    }

    #[test]
    fn coordinator_answers_become_the_errors_producers_expect() {
        use ResponseError::*;
        assert_eq!(produce_error(TransactionAbortable, 11), InvalidTxnState);
        assert_eq!(
            produce_error(TransactionAbortable, 12),
            TransactionAbortable,
            "a transaction version 2 client aborts"
        );
        assert_eq!(produce_error(ProducerFenced, 12), InvalidProducerEpoch);
        for retried in [
            ConcurrentTransactions,
            CoordinatorLoadInProgress,
            CoordinatorNotAvailable,
            NotCoordinator,
            NetworkException,
        ] {
            assert_eq!(produce_error(retried, 12), NotEnoughReplicas, "{retried:?}");
        }
        assert_eq!(
            produce_error(InvalidProducerIdMapping, 11),
            InvalidProducerIdMapping
        );
    }
}
