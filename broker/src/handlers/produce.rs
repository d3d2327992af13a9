//! Produce: validates each partition's batches (magic 2, CRC-32C,
//! `max.message.bytes`, then every record as Kafka's `LogValidator` does:
//! counts, lengths, offset deltas, bounded decompression, keys on compacted
//! topics, CreateTime timestamps within `message.timestamp.before.max.ms` /
//! `message.timestamp.after.max.ms`), recompresses batches to the topic's
//! `compression.type` when it is a codec the producer did not use
//! (`storage::recompress`; `producer` stores them as sent), and appends
//! them. With acks=0 nothing is answered.
//!
//! Durability, as Kafka: acks=1 answers once the leader has the batches in
//! its page cache (the topic's flush policy may add an fsync); acks=all is
//! refused with `NOT_ENOUGH_REPLICAS` while the ISR is smaller than
//! `min.insync.replicas`, and answers once every in-sync replica has the
//! batches (the high watermark passed them) — `REQUEST_TIMED_OUT` after the
//! request's timeout, `NOT_ENOUGH_REPLICAS_AFTER_APPEND` if the ISR shrank
//! below the minimum meanwhile, `NOT_LEADER_OR_FOLLOWER` if leadership
//! moved. A standalone broker is its partitions' only in-sync replica, so
//! there acks=all answers as soon as acks=1 does.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::error::storage_error_code;
use crate::metrics::Metrics;
use crate::partition::{AckState, Partition};
use crate::security::acl::AclOperation;
use crate::storage::{batch, recompress, StorageError};
use crate::topics::Appended;

fn partition_error(index: i32, code: ResponseError, message: String) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code.code())
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
        .with_error_message(Some(str_bytes(&message)))
}

/// KIP-467: each rejected record by its index in the partition's record
/// set (Produce v8+ carries them; older versions drop the field).
fn record_errors(errors: Vec<(i32, String)>) -> Vec<BatchIndexAndErrorMessage> {
    errors
        .into_iter()
        .map(|(index, message)| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(index)
                .with_batch_index_error_message(Some(str_bytes(&message)))
        })
        .collect()
}

/// The coordinators' topics, which only their coordinators write.
fn is_internal(topic: &str) -> bool {
    topic == crate::group::offsets::OFFSETS_TOPIC
        || topic == crate::txn::vocab::TRANSACTION_STATE_TOPIC
}

/// An `acks=all` append waiting for the in-sync replicas.
#[derive(Debug)]
pub struct Pending {
    topic: usize,
    partition: usize,
    log: Arc<Partition>,
    /// The high watermark that covers the appended batches.
    required: i64,
    epoch: i32,
    min_isr: usize,
}

/// The answer so far (none for acks=0), the appends still waiting for the
/// ISR, and how long they may wait.
pub struct Handled {
    pub response: Option<ProduceResponse>,
    pub pending: Vec<Pending>,
    pub timeout: Duration,
}

/// What a partition's batches are checked against: its log's settings
/// when the check runs (`message.timestamp.*` take the clock then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidationRules {
    max_message_bytes: usize,
    /// `cleanup.policy` includes `compact`: every record needs a key.
    compacted: bool,
    /// `message.timestamp.before.max.ms` / `after.max.ms`, for CreateTime
    /// topics only.
    timestamp_window: Option<(i64, i64)>,
    target: recompress::TargetCompression,
}

impl ValidationRules {
    fn of(partition: &Partition) -> Self {
        partition.with_log(|log| {
            let c = log.config();
            ValidationRules {
                max_message_bytes: c.max_message_bytes,
                compacted: c.compact,
                timestamp_window: (!c.log_append_time).then_some((
                    c.message_timestamp_before_max_ms,
                    c.message_timestamp_after_max_ms,
                )),
                target: c.compression,
            }
        })
    }

    fn timestamp_bounds(&self) -> Option<batch::TimestampBounds> {
        self.timestamp_window
            .map(|(before_max_ms, after_max_ms)| batch::TimestampBounds {
                now_ms: crate::clock::now_ms(),
                before_max_ms,
                after_max_ms,
            })
    }
}

/// A partition's batches after their checks: the recompressed bytes to
/// append instead (and how many batches that took) if any, and the
/// headers of what is appended.
type Validated = Result<(Option<(Vec<u8>, usize)>, Vec<batch::BatchHeader>), StorageError>;

/// Where [`validate`] runs the costly part of its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offload {
    /// On a runtime worker: decompression and recompression go through
    /// [`crate::offload::blocking`] so other connections are not stalled.
    BlockInPlace,
    /// Already off the runtime's workers (tokio's blocking pool).
    No,
}

/// Checks one partition's record set as Kafka's log validator does and
/// recompresses it to the topic's `compression.type` when needed.
///
/// One record batch per partition and request: Kafka's log validator
/// refuses more for format v2 (INVALID_RECORD), after each batch passed
/// its size and CRC checks. Compaction keeps the last record per key:
/// keyless records have no place in such a topic (INVALID_RECORD, as
/// Kafka). Compressed records are decompressed to be checked, and batches
/// whose codec differs from the topic's `compression.type` recompressed
/// (then `max.message.bytes` is checked again on the result, as Kafka
/// does); uncompressed ones are a cheap walk. `producer` keeps the
/// batches as sent.
fn validate(records: &[u8], rules: ValidationRules, offload: Offload) -> Validated {
    let h = batch::validate_batches(records, rules.max_message_bytes)?;
    if h.len() > 1 {
        return Err(StorageError::InvalidRecord(format!(
            "{} record batches for one partition in one produce request; at most one is allowed",
            h.len()
        )));
    }
    let bounds = rules.timestamp_bounds();
    let recompressing = h
        .iter()
        .any(|b| recompress::needs_recompression(b, rules.target));
    if !recompressing && h.iter().all(|b| b.compression() == 0) {
        batch::validate_records_bounded(records, &h, rules.compacted, bounds)?;
        return Ok((None, h));
    }
    let costly = move || {
        batch::validate_records_bounded(records, &h, rules.compacted, bounds)?;
        match recompress::recompress(records, &h, rules.target)? {
            Some((out, n)) => {
                let h2 = batch::validate_batches(&out, rules.max_message_bytes)?;
                Ok((Some((out, n)), h2))
            }
            None => Ok((None, h)),
        }
    };
    match offload {
        Offload::BlockInPlace if records.len() >= CHECK_ON_WORKER_BELOW_BYTES => {
            crate::offload::blocking(costly)
        }
        Offload::BlockInPlace | Offload::No => costly(),
    }
}

/// Compressed record sets smaller than this are checked on the runtime
/// worker itself even when [`Offload::BlockInPlace`] is asked: handing the
/// worker's tasks to another thread for the duration costs two thread
/// wake-ups, more than checking a small batch (a request of one 1 KiB
/// lz4 record went from 2.2 to 1.0 context switches). 4 KiB decompress
/// to at most about 1 MiB even at lz4's highest ratio: a millisecond at
/// worst, tens of microseconds for what producers send.
const CHECK_ON_WORKER_BELOW_BYTES: usize = 4 * 1024;

/// A produce request's batches checked ahead of their turn, while the
/// connection's earlier requests are being handled
/// (`protocol::connection` reads ahead): per topic and
/// partition of the request, in its order, the rules checked against and
/// the outcome. The handler uses an outcome only if the partition's rules
/// are still the same; otherwise it checks again.
#[derive(Debug, Default)]
pub struct Prevalidated {
    outcomes: Vec<Vec<Option<(ValidationRules, Validated)>>>,
}

impl Prevalidated {
    /// The rules and outcome of the check of the request's
    /// `partition_at`-th partition of its `topic_at`-th topic, if it was
    /// checked ahead.
    fn take(
        &mut self,
        topic_at: usize,
        partition_at: usize,
    ) -> Option<(ValidationRules, Validated)> {
        self.outcomes
            .get_mut(topic_at)?
            .get_mut(partition_at)?
            .take()
    }
}

/// Checks the batches of every partition of `req` this broker leads, as
/// [`handle`] would, without appending or answering anything. Runs off the
/// runtime's workers (it decompresses): call it on the blocking pool.
pub fn prevalidate(broker: &Broker, req: &ProduceRequest) -> Prevalidated {
    let image = broker.image();
    let acks_valid = matches!(req.acks, -1..=1);
    let outcomes = req
        .topic_data
        .iter()
        .map(|topic_data| {
            let name = topic_data.name.0.as_str();
            topic_data
                .partition_data
                .iter()
                .map(|pd| {
                    if !acks_valid || is_internal(name) {
                        return None;
                    }
                    let records = pd.records.as_ref()?;
                    let (partition, _) =
                        super::led_partition(broker, &image, name, pd.index).ok()?;
                    let rules = ValidationRules::of(&partition);
                    Some((rules, validate(records, rules, Offload::No)))
                })
                .collect()
        })
        .collect();
    Prevalidated { outcomes }
}

/// Whether checking `req`'s batches ahead of their turn is worth a trip
/// to the blocking pool: they are compressed (decompressing them is most
/// of a produce request's work) and at least 64 KiB. Uncompressed batches
/// are checked when their turn comes, while their bytes are still in the
/// CPU's cache from being read: checked on another thread ahead of time,
/// 1 KiB records went from 2.1–2.4 to 1.3–1.9 GB/s on one connection.
pub fn worth_prevalidating(req: &ProduceRequest) -> bool {
    const MIN_RECORD_BYTES: usize = 64 * 1024;
    let record_sets = || {
        req.topic_data
            .iter()
            .flat_map(|t| &t.partition_data)
            .filter_map(|p| p.records.as_ref())
    };
    let bytes: usize = record_sets().map(|r| r.len()).sum();
    bytes >= MIN_RECORD_BYTES && record_sets().any(|r| batch::first_batch_is_compressed(r))
}

/// The partitions of `req` its sender may not write, with Kafka's errors:
/// every one TRANSACTIONAL_ID_AUTHORIZATION_FAILED without WRITE on the
/// request's transactional id, else those of topics without WRITE
/// TOPIC_AUTHORIZATION_FAILED (whether the topic exists or not).
pub fn refused_by_acls(req: &ProduceRequest, access: &Access) -> super::produce_verify::Refused {
    let mut refused = super::produce_verify::Refused::new();
    if !access.is_restricted() {
        return refused;
    }
    let partitions = || {
        req.topic_data.iter().flat_map(|t| {
            t.partition_data
                .iter()
                .map(move |p| (t.name.0.as_str(), p.index))
        })
    };
    if let Some(id) = &req.transactional_id {
        if !access.allows_transactional_id(AclOperation::Write, id) {
            for (topic, index) in partitions() {
                refused.insert(
                    (topic.to_string(), index),
                    (
                        ResponseError::TransactionalIdAuthorizationFailed,
                        format!("no WRITE on transactional id {}", id.0.as_str()),
                    ),
                );
            }
            return refused;
        }
    }
    let denied = access.denied_topics(
        AclOperation::Write,
        req.topic_data.iter().map(|t| t.name.0.as_str()),
    );
    for (topic, index) in partitions().filter(|(topic, _)| denied.contains(*topic)) {
        refused.insert(
            (topic.to_string(), index),
            (
                ResponseError::TopicAuthorizationFailed,
                format!("no WRITE on topic {topic}"),
            ),
        );
    }
    refused
}

/// Handles a produce request; `prevalidated` holds the outcome of checking
/// its batches ahead of their turn ([`prevalidate`]), used for each
/// partition whose rules have not changed since.
pub fn handle(
    broker: &Broker,
    req: ProduceRequest,
    _version: i16,
    mut prevalidated: Option<Prevalidated>,
    refused: &super::produce_verify::Refused,
) -> Handled {
    let verifying = broker
        .topics
        .static_broker_config()
        .transaction_partition_verification_enable;
    let acks = req.acks;
    let timeout = Duration::from_millis(req.timeout_ms.clamp(0, 300_000) as u64);
    let mut pending = Vec::new();
    let mut responses = Vec::with_capacity(req.topic_data.len());
    let image = broker.image();
    for (topic_at, topic_data) in req.topic_data.into_iter().enumerate() {
        let name = topic_data.name.0.as_str().to_string();
        let mut partition_responses = Vec::with_capacity(topic_data.partition_data.len());
        // acks=all: the topic's min.insync.replicas, looked up once per topic
        let min_isr = (acks == -1).then(|| {
            broker.topics.get(&name).map_or(1, |t| {
                crate::topic_config::min_insync_replicas(
                    &t.meta.configs,
                    &broker.topics.broker_config(),
                )
            })
        });
        for (partition_at, pd) in topic_data.partition_data.into_iter().enumerate() {
            let index = pd.index;
            if !matches!(acks, -1..=1) {
                partition_responses.push(partition_error(
                    index,
                    ResponseError::InvalidRequiredAcks,
                    format!("acks must be -1, 0 or 1, got {acks}"),
                ));
                continue;
            }
            if let Some((code, why)) = (!refused.is_empty())
                .then(|| refused.get(&(name.clone(), index)))
                .flatten()
            {
                tracing::debug!(topic = %name, partition = index, error = ?code, why, "produce refused");
                partition_responses.push(partition_error(index, *code, why.clone()));
                continue;
            }
            if is_internal(&name) {
                partition_responses.push(partition_error(
                    index,
                    ResponseError::InvalidTopicException,
                    format!("{name} is internal; clients cannot produce to it"),
                ));
                continue;
            }
            let (partition, epoch) = match super::led_partition(broker, &image, &name, index) {
                Ok(led) => led,
                Err(code) => {
                    partition_responses.push(partition_error(
                        index,
                        code,
                        format!("{name}-{index} is not led by broker {}", broker.node_id),
                    ));
                    continue;
                }
            };
            let Some(records) = pd.records else {
                partition_responses.push(partition_error(
                    index,
                    ResponseError::InvalidRecord,
                    "no records".into(),
                ));
                continue;
            };
            let rules = ValidationRules::of(&partition);
            let ahead = prevalidated
                .as_mut()
                .and_then(|p| p.take(topic_at, partition_at));
            let validated = match ahead {
                Some((checked_with, outcome)) if checked_with == rules => {
                    broker.metrics.produce_checked_ahead.inc();
                    outcome
                }
                stale => {
                    if stale.is_some() {
                        broker.metrics.produce_checked_again.inc();
                    }
                    validate(&records, rules, Offload::BlockInPlace)
                }
            };
            let (recompressed, headers) = match validated {
                Ok(v) => v,
                Err(e) => {
                    tracing::debug!(topic = %name, partition = index, error = %e, "rejected produce");
                    let mut refused = partition_error(index, storage_error_code(&e), e.to_string());
                    if let StorageError::RecordErrors { errors }
                    | StorageError::TimestampErrors { errors } = e
                    {
                        refused.record_errors = record_errors(errors);
                    }
                    partition_responses.push(refused);
                    continue;
                }
            };
            // Appended from the request's own buffer: the log stamps copies
            // of the batch headers and writes the records as they came.
            let buf: &[u8] = match &recompressed {
                Some((out, n)) => {
                    broker
                        .metrics
                        .produce_recompressed_batches
                        .get_or_create(&Metrics::topic(&name))
                        .inc_by(*n as u64);
                    out
                }
                None => &records,
            };
            let appended = if verifying {
                partition.append_verified(buf, &headers, min_isr)
            } else {
                partition.append(buf, &headers, min_isr)
            };
            if let (Ok(a), Some(min_isr)) = (&appended, min_isr) {
                let required = match a {
                    Appended::New(r) => r.last_offset + 1,
                    Appended::Duplicate { base_offset, .. } => base_offset + 1,
                };
                pending.push(Pending {
                    topic: responses.len(),
                    partition: partition_responses.len(),
                    log: partition.clone(),
                    required,
                    epoch,
                    min_isr,
                });
            }
            match appended {
                Ok(Appended::Duplicate {
                    base_offset,
                    log_start_offset,
                }) => {
                    tracing::debug!(topic = %name, partition = index, base_offset, "duplicate idempotent batch");
                    partition_responses.push(
                        PartitionProduceResponse::default()
                            .with_index(index)
                            .with_base_offset(base_offset)
                            .with_log_append_time_ms(-1)
                            .with_log_start_offset(log_start_offset),
                    );
                }
                Ok(Appended::New(r)) => {
                    let label = Metrics::topic(&name);
                    broker
                        .metrics
                        .bytes_in
                        .get_or_create(&label)
                        .inc_by(buf.len() as u64);
                    let count: u64 = headers.iter().map(|h| h.records_count.max(0) as u64).sum();
                    broker
                        .metrics
                        .records_in
                        .get_or_create(&label)
                        .inc_by(count);
                    partition_responses.push(
                        PartitionProduceResponse::default()
                            .with_index(index)
                            .with_base_offset(r.base_offset)
                            .with_log_append_time_ms(r.log_append_time)
                            .with_log_start_offset(r.log_start_offset),
                    );
                }
                Err(e) => {
                    if e.code == ResponseError::KafkaStorageError {
                        tracing::warn!(topic = %name, partition = index, error = %e, "append failed");
                    } else {
                        tracing::debug!(topic = %name, partition = index, error = %e, "append refused");
                    }
                    partition_responses.push(partition_error(index, e.code, e.message));
                }
            }
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic_data.name)
                .with_partition_responses(partition_responses),
        );
    }
    Handled {
        response: (acks != 0).then(|| ProduceResponse::default().with_responses(responses)),
        pending,
        timeout,
    }
}

/// Waits until every pending append is replicated to the ISR (or failed,
/// or the timeout passed) and puts each outcome in `response`.
pub async fn complete(response: &mut ProduceResponse, pending: Vec<Pending>, timeout: Duration) {
    let deadline = tokio::time::Instant::now() + timeout;
    let outcomes =
        futures::future::join_all(pending.iter().map(|p| wait_for_isr(p, deadline))).await;
    for (p, outcome) in pending.iter().zip(outcomes) {
        let Some(code) = outcome else {
            continue;
        };
        let Some(slot) = response
            .responses
            .get_mut(p.topic)
            .and_then(|t| t.partition_responses.get_mut(p.partition))
        else {
            continue;
        };
        let message = match code {
            ResponseError::RequestTimedOut => format!(
                "not replicated to the in-sync replicas within {} ms",
                timeout.as_millis()
            ),
            ResponseError::NotEnoughReplicasAfterAppend => format!(
                "written, but the ISR shrank below min.insync.replicas ({})",
                p.min_isr
            ),
            _ => "leadership moved before the in-sync replicas had the records".to_string(),
        };
        *slot = partition_error(slot.index, code, message);
    }
}

/// `None` when replicated; else the error to answer.
async fn wait_for_isr(p: &Pending, deadline: tokio::time::Instant) -> Option<ResponseError> {
    let mut moved = p.log.subscribe();
    loop {
        match p.log.ack_state(p.required, p.epoch, p.min_isr) {
            AckState::Done => return None,
            AckState::Failed(code) => return Some(code),
            AckState::Waiting => {}
        }
        match tokio::time::timeout_at(deadline, moved.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Some(ResponseError::NotLeaderOrFollower),
            Err(_) => return Some(ResponseError::RequestTimedOut),
        }
    }
}
