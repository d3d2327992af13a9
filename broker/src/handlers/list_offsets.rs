//! ListOffsets: earliest (-2, and -4 "earliest local"), latest (-1), max
//! timestamp (-3) and lookup by timestamp.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::broker::Broker;
use crate::topics::storage_error_code;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

pub fn handle(broker: &Broker, req: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let image = broker.image();
            let name = t.name.0.as_str().to_string();
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let base = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(-1);
                    let (partition, epoch) =
                        match super::led_partition(broker, &image, &name, p.partition_index) {
                            Ok(found) => found,
                            Err(code) => return base.with_error_code(code.code()),
                        };
                    let base = base.with_leader_epoch(if version >= 4 { epoch } else { -1 });
                    let offsets = partition.offsets();
                    match p.timestamp {
                        LATEST => base.with_offset(offsets.high_watermark),
                        EARLIEST | EARLIEST_LOCAL => base.with_offset(offsets.log_start),
                        MAX_TIMESTAMP => match partition.with_log(|log| log.max_timestamp()) {
                            Some((ts, offset)) => base.with_timestamp(ts).with_offset(offset),
                            None => base,
                        },
                        ts if ts < 0 => base.with_error_code(ResponseError::InvalidRequest.code()),
                        // May read and decompress a batch from disk: off the worker.
                        ts => match crate::offload::blocking(|| {
                            partition.with_log(|log| log.offset_for_timestamp(ts))
                        }) {
                            Ok(Some((offset, found_ts))) => {
                                base.with_offset(offset).with_timestamp(found_ts)
                            }
                            Ok(None) => base,
                            Err(e) => base.with_error_code(storage_error_code(&e).code()),
                        },
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}
