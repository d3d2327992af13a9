//! The transaction coordinator's APIs on the wire (issue 37):
//! InitProducerId with a transactional id (see `producers`),
//! AddPartitionsToTxn (v0–v3, and v4+'s batches incl. KIP-890's
//! verify-only form a partition leader sends), AddOffsetsToTxn, EndTxn,
//! DescribeTransactions and ListTransactions. Each translates the request
//! into a call of [`crate::txn_coordinator`] (blocking: it appends to
//! `__transaction_state` and waits for its replicas) and its answer back,
//! with the error codes older versions understand
//! ([`state::error_for_version`]). Ends whose markers are due are driven
//! right after the reply is decided, on the blocking pool; the
//! coordinator's tick retries whatever is left.
//!
//! Owns no state; the coordinator's rules live in `txn::state`.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{self, TopicData};
use kafka_protocol::messages::list_transactions_response;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    EndTxnRequest, EndTxnResponse, ListTransactionsRequest, ListTransactionsResponse, ProducerId,
    TopicName, TransactionalId,
};

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::security::acl::AclOperation;
use crate::txn::marker::TxnResult;
use crate::txn::state::{self, AddPartitions, EndTxn, TxnApi, TxnState};
use crate::txn::vocab::{ProducerIdAndEpoch, TopicPartition, TransactionVersion};

/// WriteTxnMarkers for the partitions this broker leads, answered in
/// process for its own transaction coordinator (as a broker would be).
pub fn write_markers_locally(
    broker: &Broker,
    req: kafka_protocol::messages::WriteTxnMarkersRequest,
) -> kafka_protocol::messages::WriteTxnMarkersResponse {
    super::txn_markers::handle(broker, req, true)
}

/// The producer ids the coordinator hands out: the controller's.
fn producer_ids(broker: &Broker) -> impl FnMut() -> Result<i64, ResponseError> + '_ {
    move || {
        crate::controller::Controller::new(broker)
            .allocate_producer_id()
            .map_err(|e| e.code)
    }
}

/// Drives `id`'s prepared transaction (its markers, then its completion).
/// Failures are left to the coordinator's tick.
pub fn complete(broker: &Broker, transactional_id: &str) {
    let Some(markers) = broker.marker_sender() else {
        return;
    };
    if let Err(e) = broker
        .txns
        .complete(&broker.topics, markers.as_ref(), transactional_id)
    {
        tracing::debug!(transactional_id, error = ?e, "completing a transaction deferred to the tick");
    }
}

/// InitProducerId with a transactional id: (producer id, epoch) or the
/// error code for `version`.
pub fn init_producer_id(
    broker: &Broker,
    transactional_id: &str,
    timeout_ms: i32,
    producer: ProducerIdAndEpoch,
    version: i16,
) -> Result<ProducerIdAndEpoch, ResponseError> {
    let code = |e| state::error_for_version(TxnApi::InitProducerId, version, e);
    if let Err(e) = crate::controller::Controller::new(broker).ensure_transaction_topic() {
        tracing::warn!(error = %e, "cannot create __transaction_state yet");
        return Err(ResponseError::CoordinatorNotAvailable);
    }
    let mut ids = producer_ids(broker);
    let (reply, markers) = broker
        .txns
        .init_producer_id(
            &broker.topics,
            &mut ids,
            transactional_id,
            timeout_ms,
            producer,
        )
        .map_err(code)?;
    if markers {
        complete(broker, transactional_id);
    }
    reply.map_err(code)
}

fn partitions_of(topics: &[AddPartitionsToTxnTopic]) -> BTreeSet<TopicPartition> {
    topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(t.name.0.as_str(), *p))
        })
        .collect()
}

/// Every partition of `topics` with `code`, or with its own code.
fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    code: impl Fn(&TopicPartition) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|p| {
                            let tp = TopicPartition::new(t.name.0.as_str(), *p);
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*p)
                                .with_partition_error_code(code(&tp))
                        })
                        .collect(),
                )
        })
        .collect()
}

/// One transaction of an AddPartitionsToTxn request.
fn add_one(
    broker: &Broker,
    id: &str,
    producer: ProducerIdAndEpoch,
    verify_only: bool,
    topics: &[AddPartitionsToTxnTopic],
    version: i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let partitions = partitions_of(topics);
    // Unknown topics or partitions refuse the whole request, as in Kafka:
    // the bad ones UNKNOWN_TOPIC_OR_PARTITION, the rest OPERATION_NOT_ATTEMPTED.
    let image = broker.image();
    let unknown: BTreeSet<&TopicPartition> = partitions
        .iter()
        .filter(|tp| image.partition(&tp.topic, tp.partition).is_none())
        .collect();
    if !unknown.is_empty() {
        return topic_results(topics, |tp| {
            if unknown.contains(tp) {
                ResponseError::UnknownTopicOrPartition.code()
            } else {
                ResponseError::OperationNotAttempted.code()
            }
        });
    }
    let fenced = |e| state::error_for_version(TxnApi::AddPartitionsToTxn, version, e);
    if verify_only {
        return match broker.txns.verify_partitions(id, producer, &partitions) {
            Ok(per) => topic_results(topics, |tp| {
                per.iter()
                    .find(|(p, _)| p == tp)
                    .and_then(|(_, e)| *e)
                    .map_or(0, |e| e.code())
            }),
            Err(e) => topic_results(topics, |_| fenced(e).code()),
        };
    }
    let req = AddPartitions {
        producer,
        partitions,
        // v0–v3 come from clients adding partitions explicitly (the older
        // rules); v4+ from a partition leader or group coordinator adding
        // them for a version 2 client's produce or offset commit, as Kafka
        // infers it (`transactionVersionForAddPartitionsToTxn`)
        client_tv: if version > 3 {
            TransactionVersion::V2
        } else {
            TransactionVersion::V0
        },
    };
    let result = broker.txns.add_partitions(&broker.topics, id, &req);
    topic_results(topics, |_| match result {
        Ok(()) => 0,
        Err(e) => fenced(e).code(),
    })
}

/// A client's AddPartitionsToTxn (v0–v3) refused by the ACLs, as Kafka
/// refuses it: without WRITE on the transactional id every partition
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED; with topics it may not WRITE,
/// those TOPIC_AUTHORIZATION_FAILED and the rest OPERATION_NOT_ATTEMPTED.
fn refused_adds(
    access: &Access,
    id: &str,
    topics: &[AddPartitionsToTxnTopic],
) -> Option<Vec<AddPartitionsToTxnTopicResult>> {
    if !access.allows_transactional_id(AclOperation::Write, id) {
        let code = ResponseError::TransactionalIdAuthorizationFailed.code();
        return Some(topic_results(topics, |_| code));
    }
    let denied = access.denied_topics(
        AclOperation::Write,
        topics.iter().map(|t| t.name.0.as_str()),
    );
    (!denied.is_empty()).then(|| {
        topic_results(topics, |tp| {
            if denied.contains(&tp.topic) {
                ResponseError::TopicAuthorizationFailed.code()
            } else {
                ResponseError::OperationNotAttempted.code()
            }
        })
    })
}

/// AddPartitionsToTxn: v0–v3 from a client ([`refused_adds`] for its
/// ACLs), v4+ batched from partition leaders, which needs CLUSTER_ACTION
/// on the cluster (else CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
pub fn add_partitions_to_txn(
    broker: &Broker,
    req: AddPartitionsToTxnRequest,
    version: i16,
    access: &Access,
) -> AddPartitionsToTxnResponse {
    if version <= 3 {
        if let Some(refused) = refused_adds(
            access,
            req.v3_and_below_transactional_id.0.as_str(),
            &req.v3_and_below_topics,
        ) {
            return AddPartitionsToTxnResponse::default()
                .with_results_by_topic_v3_and_below(refused);
        }
        let producer = ProducerIdAndEpoch::new(
            req.v3_and_below_producer_id.0,
            req.v3_and_below_producer_epoch,
        );
        let results = add_one(
            broker,
            req.v3_and_below_transactional_id.0.as_str(),
            producer,
            false,
            &req.v3_and_below_topics,
            version,
        );
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
    }
    if !access.allows_cluster(AclOperation::ClusterAction) {
        return AddPartitionsToTxnResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let results = req
        .transactions
        .into_iter()
        .map(|t| {
            let producer = ProducerIdAndEpoch::new(t.producer_id.0, t.producer_epoch);
            let results = add_one(
                broker,
                t.transactional_id.0.as_str(),
                producer,
                t.verify_only,
                &t.topics,
                version,
            );
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id)
                .with_topic_results(results)
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}

/// The `__consumer_offsets` partition of `group` in the cluster's image.
fn offsets_partition_of(broker: &Broker, group: &str) -> i32 {
    let offsets_partitions = broker
        .image()
        .topic(crate::group::offsets::OFFSETS_TOPIC)
        .map(|t| i32::try_from(t.partitions.len()).unwrap_or(i32::MAX))
        .unwrap_or(broker.groups.settings().offsets_partitions);
    crate::group::offsets::partition_for(group, offsets_partitions)
}

/// What a partition leader or group coordinator asks of a transaction's
/// coordinator before it takes a transactional write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Whether the partitions are in the transaction (KIP-890 part 1: the
    /// client added them itself).
    Verify,
    /// Add them (KIP-890 part 2: a transaction version 2 client's Produce
    /// v12+ or TxnOffsetCommit v5+ adds its partition implicitly).
    Add,
}

impl Ask {
    /// The ask a write of `api_version` makes: `Add` from the version
    /// where the client leaves the adding to the broker
    /// (`add_from_version`: Produce 12, TxnOffsetCommit 5).
    pub fn for_version(api_version: i16, add_from_version: i16) -> Self {
        if api_version >= add_from_version {
            Ask::Add
        } else {
            Ask::Verify
        }
    }
}

/// Before a transactional offset commit (TxnOffsetCommit of
/// `api_version`) for `group`: whether `transactional_id`'s transaction
/// (of `producer`) has added the group's offsets partition
/// (AddOffsetsToTxn), or from v5 on, adding it; asked of its coordinator
/// ([`ask_coordinator`]); see [`verification_answer`] for the answers.
/// Blocking.
pub fn verify_offsets_added(
    broker: &Broker,
    transactional_id: &str,
    producer: (i64, i16),
    group: &str,
    api_version: i16,
) -> Result<(), ResponseError> {
    let tp = TopicPartition::new(
        crate::group::offsets::OFFSETS_TOPIC,
        offsets_partition_of(broker, group),
    );
    let producer = ProducerIdAndEpoch::new(producer.0, producer.1);
    verification_answer(ask_coordinator(
        broker,
        transactional_id,
        producer,
        &BTreeSet::from([tp]),
        Ask::for_version(api_version, 5),
    ))
}

/// The local coordinator's answer to `ask`, in the shape of a
/// verification's.
fn ask_locally(
    broker: &Broker,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    partitions: &BTreeSet<TopicPartition>,
    ask: Ask,
) -> Result<Vec<(TopicPartition, Option<ResponseError>)>, ResponseError> {
    match ask {
        Ask::Verify => broker
            .txns
            .verify_partitions(transactional_id, producer, partitions),
        Ask::Add => {
            let req = AddPartitions {
                producer,
                partitions: partitions.clone(),
                client_tv: TransactionVersion::V2,
            };
            broker
                .txns
                .add_partitions(&broker.topics, transactional_id, &req)?;
            Ok(partitions.iter().map(|tp| (tp.clone(), None)).collect())
        }
    }
}

/// Asks `transactional_id`'s coordinator whether `partitions` are in the
/// transaction of `producer` ([`Ask::Verify`]), as Kafka's partition
/// leaders ask it (KIP-890's verification), or to add them
/// ([`Ask::Add`]): in process when this broker coordinates the id, else
/// over the brokers' transaction channel (AddPartitionsToTxn v5,
/// verify-only or not). Per partition `None` when it is (now) in the
/// transaction; the coordinator's refusal (PRODUCER_FENCED,
/// INVALID_PRODUCER_ID_MAPPING, CONCURRENT_TRANSACTIONS, NOT_COORDINATOR,
/// …); COORDINATOR_NOT_AVAILABLE when no coordinator can be reached;
/// COORDINATOR_LOAD_IN_PROGRESS when the image names this broker, which
/// has not loaded the id yet. Blocking.
pub fn ask_coordinator(
    broker: &Broker,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    partitions: &BTreeSet<TopicPartition>,
    ask: Ask,
) -> Result<Vec<(TopicPartition, Option<ResponseError>)>, ResponseError> {
    match ask_locally(broker, transactional_id, producer, partitions, ask) {
        Err(ResponseError::NotCoordinator) => {}
        local => return local,
    }
    use crate::replication::markers::{route_in, Route};
    let state_partition = TopicPartition::new(
        crate::txn::vocab::TRANSACTION_STATE_TOPIC,
        broker.txns.partition_of(transactional_id),
    );
    // the coordinator is the leader of the id's partition, found as the
    // markers find a partition's leader
    let (Route::Leader(node, address), Some(channel)) = (
        route_in(&broker.image(), &state_partition),
        broker.txn_channel(),
    ) else {
        return Err(ResponseError::CoordinatorNotAvailable);
    };
    let coordinator = (node, address);
    if coordinator.0 == broker.node_id {
        return Err(ResponseError::CoordinatorLoadInProgress);
    }
    let request = ask_request(transactional_id, producer, partitions, ask);
    match channel.verify(&coordinator, request) {
        Ok(response) => verified(&response, transactional_id),
        Err(e) => {
            tracing::warn!(transactional_id, coordinator = coordinator.0, error = %e, "could not ask a transaction coordinator to verify partitions");
            Err(ResponseError::CoordinatorNotAvailable)
        }
    }
}

/// AddPartitionsToTxn (v4+) asking whether `partitions` are in the
/// transaction, or adding them.
fn ask_request(
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    partitions: &BTreeSet<TopicPartition>,
    ask: Ask,
) -> AddPartitionsToTxnRequest {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTransaction;
    let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(str_bytes(transactional_id)))
            .with_producer_id(ProducerId(producer.producer_id))
            .with_producer_epoch(producer.epoch)
            .with_verify_only(ask == Ask::Verify)
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(topic, partitions)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(str_bytes(topic)))
                            .with_partitions(partitions)
                    })
                    .collect(),
            ),
    ])
}

/// A verification's answer as the coordinator would give it in process:
/// its top-level error, or each partition's.
fn verified(
    response: &AddPartitionsToTxnResponse,
    transactional_id: &str,
) -> Result<Vec<(TopicPartition, Option<ResponseError>)>, ResponseError> {
    if let Some(e) = ResponseError::try_from_code(response.error_code) {
        return Err(e);
    }
    let Some(result) = response
        .results_by_transaction
        .iter()
        .find(|r| r.transactional_id.0.as_str() == transactional_id)
    else {
        return Err(ResponseError::UnknownServerError);
    };
    Ok(result
        .topic_results
        .iter()
        .flat_map(|t| {
            t.results_by_partition.iter().map(|p| {
                (
                    TopicPartition::new(t.name.0.as_str(), p.partition_index),
                    ResponseError::try_from_code(p.partition_error_code),
                )
            })
        })
        .collect())
}

/// What a transactional offset commit (TxnOffsetCommit up to v4) is told
/// after its verification: nothing when the offsets partition is in the
/// transaction; INVALID_TXN_STATE when it is not (the answer Kafka gave
/// clients before TRANSACTION_ABORTABLE); a coordinator that moved or is
/// loading, COORDINATOR_LOAD_IN_PROGRESS (retried); the coordinator's
/// other refusals (PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING,
/// CONCURRENT_TRANSACTIONS) as they are.
pub fn verification_answer(
    verified: Result<Vec<(TopicPartition, Option<ResponseError>)>, ResponseError>,
) -> Result<(), ResponseError> {
    match verified {
        Ok(per) if per.is_empty() => Err(ResponseError::UnknownServerError),
        Ok(per) => match per.into_iter().find_map(|(_, e)| e) {
            None => Ok(()),
            Some(ResponseError::TransactionAbortable) => Err(ResponseError::InvalidTxnState),
            Some(other) => Err(other),
        },
        Err(ResponseError::NotCoordinator) | Err(ResponseError::CoordinatorLoadInProgress) => {
            Err(ResponseError::CoordinatorLoadInProgress)
        }
        Err(e) => Err(e),
    }
}

/// AddOffsetsToTxn; it needs WRITE on the transactional id (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and READ on the group (else
/// GROUP_AUTHORIZATION_FAILED).
pub fn add_offsets_to_txn(
    broker: &Broker,
    req: AddOffsetsToTxnRequest,
    version: i16,
    access: &Access,
) -> AddOffsetsToTxnResponse {
    if !access.allows_transactional_id(AclOperation::Write, &req.transactional_id) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
    }
    if !access.allows_group(AclOperation::Read, &req.group_id) {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let index = offsets_partition_of(broker, req.group_id.0.as_str());
    let producer = ProducerIdAndEpoch::new(req.producer_id.0, req.producer_epoch);
    let client_tv = TransactionVersion::V0;
    let code = match broker.txns.add_offsets(
        &broker.topics,
        req.transactional_id.0.as_str(),
        producer,
        index,
        client_tv,
    ) {
        Ok(()) => 0,
        Err(e) => state::error_for_version(TxnApi::AddOffsetsToTxn, version, e).code(),
    };
    AddOffsetsToTxnResponse::default().with_error_code(code)
}

/// EndTxn; it needs WRITE on the transactional id (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
pub fn end_txn(
    broker: &Broker,
    req: EndTxnRequest,
    version: i16,
    access: &Access,
) -> EndTxnResponse {
    let id = req.transactional_id.0.as_str();
    if !access.allows_transactional_id(AclOperation::Write, id) {
        return EndTxnResponse::default()
            .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
    }
    let end = EndTxn {
        producer: ProducerIdAndEpoch::new(req.producer_id.0, req.producer_epoch),
        result: TxnResult::from_committed(req.committed),
        client_tv: TransactionVersion::of_end_txn_request(version),
    };
    let mut ids = producer_ids(broker);
    let result = broker.txns.end_txn(&broker.topics, &mut ids, id, &end);
    drop(ids);
    match result {
        Ok((reply, markers)) => {
            if markers {
                complete(broker, id);
            }
            EndTxnResponse::default()
                .with_producer_id(ProducerId(reply.producer_id))
                .with_producer_epoch(reply.epoch)
        }
        Err(e) => EndTxnResponse::default()
            .with_error_code(state::error_for_version(TxnApi::EndTxn, version, e).code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1),
    }
}

/// DescribeTransactions; each id needs DESCRIBE on it (else
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and only the partitions of
/// topics the client may DESCRIBE are listed, as in Kafka.
pub fn describe_transactions(
    broker: &Broker,
    req: DescribeTransactionsRequest,
    access: &Access,
) -> DescribeTransactionsResponse {
    let states = req
        .transactional_ids
        .into_iter()
        .map(|id| {
            let s = describe_transactions_response::TransactionState::default()
                .with_transactional_id(id.clone())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1);
            let described = if access.allows_transactional_id(AclOperation::Describe, &id) {
                broker.txns.describe(id.0.as_str())
            } else {
                Err(ResponseError::TransactionalIdAuthorizationFailed)
            };
            match described {
                Err(e) => s.with_error_code(e.code()),
                Ok(m) => {
                    let mut topics: Vec<TopicData> = Vec::new();
                    let visible = m
                        .partitions()
                        .iter()
                        .filter(|tp| access.allows_topic(AclOperation::Describe, &tp.topic));
                    for tp in visible {
                        match topics.last_mut() {
                            Some(t) if t.topic.0.as_str() == tp.topic => {
                                t.partitions.push(tp.partition)
                            }
                            _ => topics.push(
                                TopicData::default()
                                    .with_topic(TopicName(str_bytes(&tp.topic)))
                                    .with_partitions(vec![tp.partition]),
                            ),
                        }
                    }
                    s.with_transaction_state(str_bytes(m.state().name()))
                        .with_transaction_timeout_ms(m.timeout_ms())
                        .with_transaction_start_time_ms(m.start_ms())
                        .with_producer_id(ProducerId(m.producer_id()))
                        .with_producer_epoch(m.producer_epoch())
                        .with_topics(topics)
                }
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

/// ListTransactions v2's transactional id pattern (KIP-1152), as Kafka
/// reads it: absent or empty, no filter; else an RE2 expression the whole
/// id must match (Kafka's re2j `matches()`; the `regex` crate is RE2's
/// syntax too), INVALID_REGULAR_EXPRESSION if it does not compile. The
/// compiled program is bounded, so a hostile pattern cannot take memory.
pub fn transactional_id_pattern(
    pattern: Option<&str>,
) -> Result<Option<regex::Regex>, ResponseError> {
    match pattern {
        None | Some("") => Ok(None),
        Some(p) => regex::RegexBuilder::new(&format!("^(?:{p})$"))
            .size_limit(1 << 20)
            .dfa_size_limit(1 << 20)
            .build()
            .map(Some)
            .map_err(|_| ResponseError::InvalidRegularExpression),
    }
}

/// ListTransactions; only the ids the client may DESCRIBE are listed.
pub fn list_transactions(
    broker: &Broker,
    req: ListTransactionsRequest,
    version: i16,
    access: &Access,
) -> ListTransactionsResponse {
    let pattern = if version >= 2 {
        match transactional_id_pattern(req.transactional_id_pattern.as_deref()) {
            Ok(p) => p,
            Err(e) => return ListTransactionsResponse::default().with_error_code(e.code()),
        }
    } else {
        None
    };
    let mut unknown = Vec::new();
    let mut states = Vec::new();
    for s in &req.state_filters {
        if TxnState::from_name(s.as_str()).is_some() {
            states.push(s.as_str().to_string());
        } else {
            unknown.push(s.clone());
        }
    }
    if !unknown.is_empty() && states.is_empty() {
        // only unknown states asked for: nothing can match
        return ListTransactionsResponse::default().with_unknown_state_filters(unknown);
    }
    let pids: Vec<i64> = req.producer_id_filters.iter().map(|p| p.0).collect();
    let now = crate::clock::now_ms();
    let listed = broker
        .txns
        .list(&states, &pids)
        .into_iter()
        // v1+: only transactions running at least `duration_filter` ms
        .filter(|(_, _, _, start)| {
            version < 1 || req.duration_filter < 0 || now - start >= req.duration_filter
        })
        .filter(|(id, ..)| pattern.as_ref().is_none_or(|p| p.is_match(id)))
        .filter(|(id, ..)| access.allows_transactional_id(AclOperation::Describe, id))
        .map(|(id, pid, state, _)| {
            list_transactions_response::TransactionState::default()
                .with_transactional_id(TransactionalId(str_bytes(&id)))
                .with_producer_id(ProducerId(pid))
                .with_transaction_state(str_bytes(state.name()))
        })
        .collect();
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown)
        .with_transaction_states(listed)
}

#[cfg(test)]
mod verification_tests {
    use super::*;

    #[test]
    fn a_transactional_id_pattern_matches_whole_ids_with_re2_syntax() {
        assert!(transactional_id_pattern(None).unwrap().is_none());
        assert!(transactional_id_pattern(Some("")).unwrap().is_none());
        let p = transactional_id_pattern(Some("etl-[0-9]+"))
            .unwrap()
            .unwrap();
        assert!(p.is_match("etl-12"));
        assert!(
            !p.is_match("my-etl-12"),
            "the whole id, as re2j's matches()"
        );
        assert!(!p.is_match("etl-12x"));
        let alt = transactional_id_pattern(Some("a|b")).unwrap().unwrap();
        assert!(alt.is_match("a") && alt.is_match("b") && !alt.is_match("ab"));
        for bad in ["etl-(", "(?<=x)y", "a{99999999}"] {
            assert_eq!(
                transactional_id_pattern(Some(bad)).unwrap_err(),
                ResponseError::InvalidRegularExpression,
                "{bad}"
            );
        }
    }

    fn tp() -> TopicPartition {
        TopicPartition::new(crate::group::offsets::OFFSETS_TOPIC, 3)
    }

    #[test]
    fn a_transactional_offset_commit_is_told_what_its_verification_found() {
        assert_eq!(verification_answer(Ok(vec![(tp(), None)])), Ok(()));
        assert_eq!(
            verification_answer(Ok(vec![(tp(), Some(ResponseError::TransactionAbortable))])),
            Err(ResponseError::InvalidTxnState),
            "a group never added"
        );
        assert_eq!(
            verification_answer(Err(ResponseError::ProducerFenced)),
            Err(ResponseError::ProducerFenced)
        );
        for moved in [
            ResponseError::NotCoordinator,
            ResponseError::CoordinatorLoadInProgress,
        ] {
            assert_eq!(
                verification_answer(Err(moved)),
                Err(ResponseError::CoordinatorLoadInProgress),
                "retried, not sent looking for another group coordinator"
            );
        }
        assert_eq!(
            verification_answer(Ok(vec![])),
            Err(ResponseError::UnknownServerError),
            "an answer without the partition asked about"
        );
    }

    #[test]
    fn a_remote_verification_is_read_back_per_partition() {
        use kafka_protocol::protocol::{Decodable, Encodable};
        let producer = ProducerIdAndEpoch::new(7, 2);
        let request = ask_request("t-1", producer, &BTreeSet::from([tp()]), Ask::Verify);
        let mut buf = bytes::BytesMut::new();
        request.encode(&mut buf, 5).unwrap();
        let decoded = AddPartitionsToTxnRequest::decode(&mut buf.freeze(), 5).unwrap();
        let t = &decoded.transactions[0];
        assert!(t.verify_only);
        assert_eq!((t.producer_id.0, t.producer_epoch), (7, 2));
        assert_eq!(t.topics[0].partitions, vec![3]);

        let answer = |code: i16| {
            AddPartitionsToTxnResponse::default().with_results_by_transaction(vec![
                AddPartitionsToTxnResult::default()
                    .with_transactional_id(tid("t-1"))
                    .with_topic_results(topic_results(&t.topics, |_| code)),
            ])
        };
        assert_eq!(verified(&answer(0), "t-1"), Ok(vec![(tp(), None)]));
        assert_eq!(
            verified(&answer(ResponseError::TransactionAbortable.code()), "t-1"),
            Ok(vec![(tp(), Some(ResponseError::TransactionAbortable))])
        );
        assert_eq!(
            verified(&answer(0), "another"),
            Err(ResponseError::UnknownServerError)
        );
        assert_eq!(
            verified(
                &AddPartitionsToTxnResponse::default()
                    .with_error_code(ResponseError::ClusterAuthorizationFailed.code()),
                "t-1"
            ),
            Err(ResponseError::ClusterAuthorizationFailed)
        );
    }

    fn tid(s: &str) -> TransactionalId {
        TransactionalId(str_bytes(s))
    }
}
