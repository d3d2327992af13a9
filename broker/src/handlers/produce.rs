//! Produce: validates each partition's batches (magic 2, CRC-32C,
//! `max.message.bytes`, then every record as Kafka's `LogValidator` does:
//! counts, lengths, offset deltas, bounded decompression, keys on compacted
//! topics) and appends them. With acks=0 nothing is answered.
//!
//! Durability: on this single broker, acks=1 and acks=all both answer once
//! the batches are in the page cache (the topic's flush policy may add an
//! fsync), as Kafka does for its in-sync replicas.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::metrics::Metrics;
use crate::storage::batch;
use crate::topics::{storage_error_code, Appended};

fn partition_error(index: i32, code: ResponseError, message: String) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(code.code())
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
        .with_error_message(Some(str_bytes(&message)))
}

pub fn handle(broker: &Broker, req: ProduceRequest, _version: i16) -> Option<ProduceResponse> {
    let acks = req.acks;
    let mut responses = Vec::with_capacity(req.topic_data.len());
    let image = broker.image();
    for topic_data in req.topic_data {
        let name = topic_data.name.0.as_str().to_string();
        let mut partition_responses = Vec::with_capacity(topic_data.partition_data.len());
        for pd in topic_data.partition_data {
            let index = pd.index;
            if !matches!(acks, -1..=1) {
                partition_responses.push(partition_error(
                    index,
                    ResponseError::InvalidRequiredAcks,
                    format!("acks must be -1, 0 or 1, got {acks}"),
                ));
                continue;
            }
            if name == crate::group::offsets::OFFSETS_TOPIC {
                partition_responses.push(partition_error(
                    index,
                    ResponseError::InvalidTopicException,
                    format!("{name} is internal; clients cannot produce to it"),
                ));
                continue;
            }
            let partition = match super::led_partition(broker, &image, &name, index) {
                Ok((partition, _epoch)) => partition,
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
            let (max, compacted) =
                partition.with_log(|log| (log.config().max_message_bytes, log.config().compact));
            // Compaction keeps the last record per key: keyless records
            // have no place in such a topic (INVALID_RECORD, as Kafka).
            // Compressed records are decompressed to be checked: that work
            // leaves the runtime's worker (uncompressed ones are a cheap walk).
            let validated = batch::validate_batches(&records, max).and_then(|h| {
                if h.iter().any(|b| b.compression() != 0) {
                    crate::offload::blocking(|| batch::validate_records(&records, &h, compacted))?;
                } else {
                    batch::validate_records(&records, &h, compacted)?;
                }
                Ok(h)
            });
            let headers = match validated {
                Ok(h) => h,
                Err(e) => {
                    tracing::debug!(topic = %name, partition = index, error = %e, "rejected produce");
                    partition_responses.push(partition_error(
                        index,
                        storage_error_code(&e),
                        e.to_string(),
                    ));
                    continue;
                }
            };
            let mut buf = records.to_vec();
            match partition.append(&mut buf, &headers) {
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
    if acks == 0 {
        return None;
    }
    Some(ProduceResponse::default().with_responses(responses))
}
