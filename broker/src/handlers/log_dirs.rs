//! DescribeLogDirs (`kafka-log-dirs --describe`): each broker answers for
//! its own log directory — Moldau has one, the data directory — with the
//! partitions it hosts there (led or followed, as its metadata image
//! says), each one's size in bytes and offset lag, and (v4) the total and
//! usable bytes of the filesystem it is on.
//!
//! - The path is the data directory made absolute, as Kafka shows paths.
//! - Offset lag: 0 for a partition led here; for a followed one, how far
//!   its log end is behind the high watermark the leader last reported
//!   ([`crate::partition::Partition::offset_lag`]; Kafka's own is
//!   `max(high watermark - log end, 0)` of the local replica, which is
//!   always 0 for current logs, so this one says more).
//! - No future (being-moved) logs exist: `is_future_key` is always false.
//! - A directory whose filesystem cannot be asked (`statvfs` fails) is
//!   answered with KAFKA_STORAGE_ERROR and -1 bytes, its partitions still
//!   listed.
//! - `topics` null: every hosted partition; otherwise only the named
//!   partitions (topics or partitions not hosted here are left out, not
//!   errors, as in Kafka).
//!
//! Reading sizes takes each partition's lock briefly, and `statvfs` is a
//! filesystem call: the dispatcher runs this on the blocking pool.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};

use super::access::Access;
use super::str_bytes;
use crate::broker::Broker;
use crate::image::PartitionRole;
use crate::security::acl::AclOperation;

/// Topic → partitions a request asks about (`None`: all).
type Filter = BTreeMap<String, BTreeSet<i32>>;

fn filter_of(req: &DescribeLogDirsRequest) -> Option<Filter> {
    let topics = req.topics.as_ref()?;
    let mut filter = Filter::new();
    for t in topics {
        filter
            .entry(t.topic.0.as_str().to_string())
            .or_default()
            .extend(t.partitions.iter().copied());
    }
    Some(filter)
}

/// DescribeLogDirs; it needs DESCRIBE on the cluster (else no results and
/// CLUSTER_AUTHORIZATION_FAILED, as Kafka answers).
pub fn describe_log_dirs(
    broker: &Broker,
    req: DescribeLogDirsRequest,
    access: &Access,
) -> DescribeLogDirsResponse {
    if !access.allows_cluster(AclOperation::Describe) {
        return DescribeLogDirsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let filter = filter_of(&req);
    let dir = broker.topics.data_dir();
    let path = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut result = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(&path.display().to_string()))
        .with_topics(hosted(broker, filter.as_ref()));
    match crate::storage::space::disk_space(&path) {
        Ok(space) => {
            result = result
                .with_total_bytes(i64::try_from(space.total).unwrap_or(i64::MAX))
                .with_usable_bytes(i64::try_from(space.usable).unwrap_or(i64::MAX));
        }
        Err(e) => {
            tracing::warn!(dir = %path.display(), error = %e, "cannot read the data directory's filesystem size");
            result = result.with_error_code(ResponseError::KafkaStorageError.code());
        }
    }
    DescribeLogDirsResponse::default().with_results(vec![result])
}

/// The partitions this broker hosts and the filter admits, by topic.
fn hosted(broker: &Broker, filter: Option<&Filter>) -> Vec<DescribeLogDirsTopic> {
    let image = broker.image();
    let mut out = Vec::new();
    for t in image.topics() {
        let wanted = match filter {
            Some(f) => match f.get(&t.name) {
                Some(ps) => Some(ps),
                None => continue,
            },
            None => None,
        };
        // the log held here must be this topic's (not an older one's)
        let Some(local) = broker.topics.get(&t.name).filter(|l| l.meta.id == t.id) else {
            continue;
        };
        let partitions: Vec<DescribeLogDirsPartition> = t
            .partitions
            .iter()
            .filter(|p| wanted.is_none_or(|w| w.contains(&p.index)))
            .filter(|p| p.role_of(broker.node_id) != PartitionRole::NotReplica)
            .filter_map(|p| local.partition(p.index))
            .map(|p| {
                DescribeLogDirsPartition::default()
                    .with_partition_index(p.index)
                    .with_partition_size(i64::try_from(p.size_bytes()).unwrap_or(i64::MAX))
                    .with_offset_lag(p.offset_lag())
                    .with_is_future_key(false)
            })
            .collect();
        if !partitions.is_empty() {
            out.push(
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(str_bytes(&t.name)))
                    .with_partitions(partitions),
            );
        }
    }
    out
}
