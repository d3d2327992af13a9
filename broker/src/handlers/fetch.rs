//! Fetch: reads whole batches for each requested partition, long-polls
//! until `min_bytes` are available or `max_wait_ms` passes, and answers
//! with segment regions that the connection sends with `sendfile`.
//!
//! Fetch sessions (KIP-227) are not kept: every answer has session id 0,
//! which tells clients to keep sending full fetch requests.

use std::sync::Arc;
use std::time::Duration;

use futures::future::select_all;
use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::FetchRequest;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::metrics::Metrics;
use crate::protocol::fetch_encode::{
    encode_fetch_response, FetchOut, PartitionOut, Piece, TopicOut,
};
use crate::storage::StorageError;
use crate::topics::storage_error_code;

/// The longest a fetch may wait, whatever the client asks.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

struct Gathered {
    out: FetchOut,
    bytes: u64,
    any_error: bool,
}

fn gather(broker: &Broker, req: &FetchRequest) -> Gathered {
    let mut remaining = req.max_bytes.max(0) as u64;
    let mut bytes = 0u64;
    let mut any_error = false;
    let mut topics = Vec::with_capacity(req.topics.len());
    let image = broker.image();
    for ft in &req.topics {
        let name = ft.topic.0.as_str();
        let mut partitions = Vec::with_capacity(ft.partitions.len());
        for fp in &ft.partitions {
            let partition = super::led_partition(broker, &image, name, fp.partition);
            let Ok((partition, _epoch)) = partition else {
                let code = partition
                    .err()
                    .unwrap_or(ResponseError::UnknownTopicOrPartition);
                any_error = true;
                partitions.push(PartitionOut {
                    index: fp.partition,
                    error_code: code.code(),
                    high_watermark: -1,
                    last_stable_offset: -1,
                    log_start_offset: -1,
                    records: None,
                });
                continue;
            };
            // KIP-74: the first partition with data may exceed max_bytes by
            // one batch; after the budget is spent, others get nothing.
            let budget = if bytes == 0 {
                (fp.partition_max_bytes.max(0) as u64).min(remaining.max(1))
            } else {
                (fp.partition_max_bytes.max(0) as u64).min(remaining)
            };
            let result = if budget == 0 && bytes > 0 {
                Ok((None, partition.offsets()))
            } else {
                partition
                    .read(fp.fetch_offset, budget)
                    .map(|(s, o)| (Some(s), o))
            };
            match result {
                Ok((slice, offsets)) => {
                    let len = slice.as_ref().map_or(0, |s| s.len);
                    bytes += len;
                    remaining = remaining.saturating_sub(len);
                    partitions.push(PartitionOut {
                        index: fp.partition,
                        error_code: 0,
                        high_watermark: offsets.high_watermark,
                        last_stable_offset: offsets.high_watermark,
                        log_start_offset: offsets.log_start,
                        records: slice,
                    });
                }
                Err(e) => {
                    any_error = true;
                    if !matches!(e, StorageError::OffsetOutOfRange { .. }) {
                        tracing::warn!(topic = name, partition = fp.partition, error = %e, "fetch read failed");
                    }
                    let offsets = partition.offsets();
                    partitions.push(PartitionOut {
                        index: fp.partition,
                        error_code: storage_error_code(&e).code(),
                        high_watermark: offsets.high_watermark,
                        last_stable_offset: offsets.high_watermark,
                        log_start_offset: offsets.log_start,
                        records: None,
                    });
                }
            }
        }
        topics.push(TopicOut {
            name: name.to_string(),
            partitions,
        });
    }
    Gathered {
        out: FetchOut {
            topics,
            ..FetchOut::default()
        },
        bytes,
        any_error,
    }
}

fn watches(broker: &Broker, req: &FetchRequest) -> Vec<watch::Receiver<i64>> {
    req.topics
        .iter()
        .flat_map(|ft| {
            let topic = broker.topics.get(ft.topic.0.as_str());
            ft.partitions.iter().filter_map(move |fp| {
                topic
                    .as_ref()
                    .and_then(|t| t.partition(fp.partition))
                    .map(|p| p.subscribe())
            })
        })
        .collect()
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: FetchRequest,
    version: i16,
    correlation_id: i32,
) -> Vec<Piece> {
    let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    let deadline = Instant::now() + wait;
    let min_bytes = req.min_bytes.max(0) as u64;
    // Subscribe before the first read so no append between the read and the
    // wait goes unnoticed.
    let mut receivers = watches(broker, &req);
    let gathered = loop {
        let g = gather(broker, &req);
        if g.bytes >= min_bytes.max(1) || g.any_error || Instant::now() >= deadline {
            break g;
        }
        if receivers.is_empty() {
            tokio::time::sleep_until(deadline).await;
            break gather(broker, &req);
        }
        let changed = select_all(receivers.iter_mut().map(|r| r.changed().boxed()));
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            break gather(broker, &req);
        }
    };
    for topic in &gathered.out.topics {
        let sent: u64 = topic
            .partitions
            .iter()
            .map(|p| p.records.as_ref().map_or(0, |r| r.len))
            .sum();
        if sent > 0 {
            broker
                .metrics
                .bytes_out
                .get_or_create(&Metrics::topic(&topic.name))
                .inc_by(sent);
        }
    }
    encode_fetch_response(correlation_id, version, &gathered.out)
}
