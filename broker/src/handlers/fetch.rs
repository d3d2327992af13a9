//! Fetch: reads whole batches for each requested partition, long-polls
//! until `min_bytes` are available or `max_wait_ms` passes, and answers
//! with segment regions that the connection sends with `sendfile`.
//!
//! A fetch with a replica id is a follower's (see `crate::replication`):
//! it reads up to the log end rather than the high watermark, its fetch
//! offset tells the leader how far it has replicated, and a diverged log
//! gets the leader's `diverging_epoch`. A fetch naming a stale or future
//! leader epoch is refused (KIP-320).
//!
//! With `replica.selector.class` (KIP-392), a leader sends a consumer that
//! names its rack to an in-sync replica there (`preferred_read_replica`),
//! and followers serve consumers below their own high watermark.
//!
//! Fetch sessions (KIP-227, Fetch v7+): a full fetch with session id 0
//! and epoch 0 creates a session if the broker's cache admits it (see
//! `crate::fetch_session` for the cache and its eviction rules) and
//! answers with its id; epoch -1 fetches without one. A full fetch naming
//! a session closes it. An incremental fetch (a session id and its
//! current epoch) names only the partitions that changed and those to
//! forget; it is served, long-polling included, over the session's whole
//! partition set, and its answer carries only the partitions with records,
//! an error or changed offsets. An unknown session gets
//! FETCH_SESSION_ID_NOT_FOUND, a wrong epoch INVALID_FETCH_SESSION_EPOCH
//! (top-level errors; the client then starts over with a full fetch).
//! Topics are named (Fetch v13+, with topic ids, is not offered).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::future::select_all;
use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::error::storage_error_code;
use crate::fetch_session::{
    CachedPartition, PartitionAnswer, PartitionKey, PartitionRequest, SessionError, FINAL_EPOCH,
    INITIAL_EPOCH, NO_SESSION,
};
use crate::metrics::Metrics;
use crate::protocol::fetch_encode::{
    encode_fetch_response, FetchOut, PartitionOut, Piece, TopicOut,
};
use crate::quota::{QuotaKind, QuotaManager};
use crate::security::acl::AclOperation;
use crate::storage::StorageError;

/// The longest a fetch may wait, whatever the client asks.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

struct Gathered {
    out: FetchOut,
    bytes: u64,
    any_error: bool,
}

/// A partition's answer when it cannot be read.
fn refused(index: i32, code: ResponseError) -> PartitionOut {
    PartitionOut {
        index,
        error_code: code.code(),
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        aborted_transactions: None,
        records: None,
        diverging_epoch: None,
        preferred_read_replica: -1,
    }
}

/// A partition's answer with its offsets and what was read.
fn served(
    index: i32,
    offsets: crate::partition::PartitionOffsets,
    records: Option<crate::storage::FetchSlice>,
) -> PartitionOut {
    PartitionOut {
        index,
        error_code: 0,
        high_watermark: offsets.high_watermark,
        last_stable_offset: offsets.last_stable,
        log_start_offset: offsets.log_start,
        aborted_transactions: None,
        records,
        diverging_epoch: None,
        preferred_read_replica: -1,
    }
}

/// The partition a consumer's fetch may read here, its leader epoch, and
/// whether this broker leads it: one it leads, or — with KIP-392
/// (`replica.selector.class` set, Fetch v11+) — one it follows, read below
/// its own high watermark.
fn consumer_partition(
    broker: &Broker,
    image: &crate::image::MetadataImage,
    topic: &str,
    index: i32,
    follower_reads: bool,
) -> Result<(Arc<crate::partition::Partition>, i32, bool), ResponseError> {
    use crate::image::PartitionRole;
    let local = || broker.topics.partition(topic, index);
    match image.role(topic, index, broker.node_id) {
        None => Err(ResponseError::UnknownTopicOrPartition),
        Some(PartitionRole::Leader { epoch }) => local()
            .map(|p| (p, epoch, true))
            .ok_or(ResponseError::NotLeaderOrFollower),
        Some(PartitionRole::Follower { epoch, .. }) if follower_reads => local()
            .map(|p| (p, epoch, false))
            .ok_or(ResponseError::NotLeaderOrFollower),
        Some(_) => Err(ResponseError::NotLeaderOrFollower),
    }
}

/// KIP-320: a fetch naming a leader epoch must name the current one
/// (older: `FENCED_LEADER_EPOCH`; newer, this broker has not seen it
/// yet: `UNKNOWN_LEADER_EPOCH`). -1 skips the check.
pub(crate) fn check_leader_epoch(requested: i32, current: i32) -> Result<(), ResponseError> {
    if requested < 0 || requested == current {
        Ok(())
    } else if requested < current {
        Err(ResponseError::FencedLeaderEpoch)
    } else {
        Err(ResponseError::UnknownLeaderEpoch)
    }
}

/// Whether follower `replica`'s fetch of `topic`-`partition` from this
/// leader is throttled: the topic lists the partition on this broker in
/// `leader.replication.throttled.replicas` and the follower is outside the
/// ISR (see `replication::throttle`).
fn leader_throttled(
    broker: &Broker,
    image: &crate::image::MetadataImage,
    topic: &str,
    partition: i32,
    replica: i32,
) -> bool {
    let Some(t) = image.topic(topic) else {
        return false;
    };
    let config = t.configs.get(crate::replication::throttle::LEADER_REPLICAS);
    let in_sync = t
        .partition(partition)
        .is_some_and(|p| p.isr.contains(&replica));
    crate::replication::throttle::throttled(
        config.map(String::as_str),
        partition,
        broker.node_id,
        in_sync,
    )
}

/// The replica id of a fetch: a follower broker's node id, -1 for consumers.
fn replica_of(req: &FetchRequest) -> i32 {
    req.replica_id.0.max(req.replica_state.replica_id.0)
}

/// Whether a fetch may act as follower `replica`: only on a connection
/// authenticated as that broker, in its current incarnation.
fn replica_admitted(
    broker: &Broker,
    replica: i32,
    authenticated: Option<(i32, uuid::Uuid)>,
) -> bool {
    authenticated.is_some_and(|(node, incarnation)| {
        node == replica
            && broker.image().broker(node).and_then(|b| b.incarnation) == Some(incarnation)
    })
}

/// Reads what `req`, which came on `listener`, asks for; the topics in
/// `denied` (no READ) are answered TOPIC_AUTHORIZATION_FAILED.
fn gather(
    broker: &Broker,
    req: &FetchRequest,
    version: i16,
    denied: &HashSet<String>,
    listener: &str,
) -> Gathered {
    let mut remaining = req.max_bytes.max(0) as u64;
    let mut bytes = 0u64;
    let mut any_error = false;
    let mut topics = Vec::with_capacity(req.topics.len());
    let image = broker.image();
    let replica = replica_of(req);
    let rack_aware = version >= 11
        && replica < 0
        && !broker
            .topics
            .broker_config()
            .replica_selector_class
            .is_empty();
    // one clock read per gathering, not per partition (a follower's
    // fetch names hundreds)
    let now = crate::clock::now_ms();
    for ft in &req.topics {
        let name = ft.topic.0.as_str();
        let mut partitions = Vec::with_capacity(ft.partitions.len());
        let topic_denied = !denied.is_empty() && denied.contains(name);
        for fp in &ft.partitions {
            if topic_denied {
                any_error = true;
                partitions.push(refused(
                    fp.partition,
                    ResponseError::TopicAuthorizationFailed,
                ));
                continue;
            }
            let readable = if replica >= 0 {
                super::led_partition(broker, &image, name, fp.partition)
                    .map(|(p, epoch)| (p, epoch, true))
            } else {
                consumer_partition(broker, &image, name, fp.partition, rack_aware)
            };
            let led = readable.and_then(|(partition, epoch, leading)| {
                check_leader_epoch(fp.current_leader_epoch, epoch).map(|()| (partition, leading))
            });
            let (partition, leading) = match led {
                Ok(p) => p,
                Err(code) => {
                    any_error = true;
                    partitions.push(refused(fp.partition, code));
                    continue;
                }
            };
            // KIP-74: the first partition with data may exceed max_bytes by
            // one batch; after the budget is spent, others get nothing.
            let budget = if bytes == 0 {
                (fp.partition_max_bytes.max(0) as u64).min(remaining.max(1))
            } else {
                (fp.partition_max_bytes.max(0) as u64).min(remaining)
            };
            if replica >= 0 {
                // A throttled follower (outside the ISR, listed for this
                // leader) gets no data while the leader's quota is spent.
                let throttled = leader_throttled(broker, &image, name, fp.partition, replica);
                let held_back = throttled && broker.replicas.leader_quota().exceeded(now);
                // A follower: its progress counts even when nothing is sent.
                match partition.read_for_follower(
                    replica,
                    fp.fetch_offset,
                    fp.last_fetched_epoch,
                    if held_back { 0 } else { budget },
                ) {
                    Ok(read) => {
                        if let Some(p) = read.isr_expansion {
                            broker.replicas.propose(p);
                        }
                        let records = read
                            .records
                            .filter(|_| !held_back && (budget > 0 || bytes == 0));
                        let len = records.as_ref().map_or(0, |s| s.len);
                        if throttled {
                            broker.replicas.leader_quota().record(len, now);
                        }
                        bytes += len;
                        remaining = remaining.saturating_sub(len);
                        any_error |= read.diverging.is_some();
                        partitions.push(PartitionOut {
                            diverging_epoch: read.diverging,
                            ..served(fp.partition, read.offsets, records)
                        });
                    }
                    Err(code) => {
                        any_error = true;
                        let offsets = partition.offsets();
                        partitions.push(PartitionOut {
                            high_watermark: offsets.high_watermark,
                            log_start_offset: offsets.log_start,
                            ..refused(fp.partition, code)
                        });
                    }
                }
                continue;
            }
            // KIP-392: a consumer in another replica's rack reads there.
            let preferred = if rack_aware && leading {
                image.partition(name, fp.partition).and_then(|pi| {
                    // only a replica the consumer can reach on its
                    // listener, as Kafka picks among the replicas'
                    // endpoints of the request's listener
                    let reachable: Vec<_> = image
                        .brokers
                        .iter()
                        .filter(|b| b.endpoint(listener).is_some())
                        .cloned()
                        .collect();
                    crate::replication::selector::preferred_read_replica(
                        pi,
                        &reachable,
                        req.rack_id.as_str(),
                    )
                })
            } else {
                None
            };
            if let Some(preferred) = preferred {
                partitions.push(PartitionOut {
                    preferred_read_replica: preferred,
                    ..served(fp.partition, partition.offsets(), None)
                });
                // answer at once: the consumer goes to that replica
                any_error = true;
                continue;
            }
            // read_committed (isolation level 1) stops at the last stable
            // offset and names the aborted transactions it read
            let committed = req.isolation_level == 1;
            let result = if budget == 0 && bytes > 0 {
                Ok((None, partition.offsets(), None))
            } else if committed {
                partition
                    .read_committed(fp.fetch_offset, budget)
                    .map(|r| (Some(r.records), r.offsets, Some(r.aborted)))
            } else {
                partition
                    .read(fp.fetch_offset, budget)
                    .map(|(s, o)| (Some(s), o, None))
            };
            match result {
                Ok((slice, offsets, aborted)) => {
                    let len = slice.as_ref().map_or(0, |s| s.len);
                    bytes += len;
                    remaining = remaining.saturating_sub(len);
                    partitions.push(PartitionOut {
                        aborted_transactions: aborted.filter(|_| len > 0),
                        ..served(fp.partition, offsets, slice)
                    });
                }
                Err(e) => {
                    any_error = true;
                    if !matches!(e, StorageError::OffsetOutOfRange { .. }) {
                        tracing::warn!(topic = name, partition = fp.partition, error = %e, "fetch read failed");
                    }
                    let offsets = partition.offsets();
                    partitions.push(PartitionOut {
                        high_watermark: offsets.high_watermark,
                        last_stable_offset: offsets.last_stable,
                        log_start_offset: offsets.log_start,
                        ..refused(fp.partition, storage_error_code(&e))
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

/// What a long-polling fetch waits on: consumers on the high watermark,
/// followers on the log end.
fn watches(broker: &Broker, req: &FetchRequest) -> Vec<watch::Receiver<i64>> {
    let follower = replica_of(req) >= 0;
    req.topics
        .iter()
        .flat_map(|ft| {
            let topic = broker.topics.get(ft.topic.0.as_str());
            ft.partitions.iter().filter_map(move |fp| {
                let p = topic.as_ref().and_then(|t| t.partition(fp.partition))?;
                Some(if follower {
                    p.subscribe_log_end()
                } else {
                    p.subscribe()
                })
            })
        })
        .collect()
}

/// A long poll: waits until `enough` holds of what the fetch would
/// return, or an append to one of its partitions, or `deadline`, then
/// gathers. Subscribes before its first read.
async fn wait_and_gather(
    broker: &Broker,
    req: &FetchRequest,
    version: i16,
    denied: &HashSet<String>,
    listener: &str,
    deadline: Instant,
    enough: impl Fn(&Gathered) -> bool,
) -> Gathered {
    let mut receivers = watches(broker, req);
    loop {
        let g = gather(broker, req, version, denied, listener);
        if enough(&g) {
            return g;
        }
        if receivers.is_empty() {
            tokio::time::sleep_until(deadline).await;
            return gather(broker, req, version, denied, listener);
        }
        let changed = select_all(receivers.iter_mut().map(|r| r.changed().boxed()));
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            return gather(broker, req, version, denied, listener);
        }
    }
}

/// What a fetch does with fetch sessions.
enum SessionPlan {
    /// None: Fetch v4–v6, epoch -1, or a session its request emptied.
    Sessionless,
    /// A full fetch asking for a new session.
    Create,
    /// An incremental fetch on session `id`, which moved on to `epoch`;
    /// `partitions` is a copy of the session's, which the request now lists.
    Incremental {
        id: i32,
        epoch: i32,
        partitions: Vec<CachedPartition>,
    },
}

/// Milliseconds on a monotonic clock, for session use and age.
fn session_clock_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// The partitions a request lists, in order.
fn partition_requests(req: &FetchRequest) -> Vec<PartitionRequest> {
    req.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| PartitionRequest {
                key: PartitionKey {
                    topic: t.topic.0.as_str().to_string(),
                    partition: p.partition,
                },
                fetch_offset: p.fetch_offset,
                log_start_offset: p.log_start_offset,
                max_bytes: p.partition_max_bytes,
                current_leader_epoch: p.current_leader_epoch,
                last_fetched_epoch: p.last_fetched_epoch,
            })
        })
        .collect()
}

/// A session's partitions as a request's topics (consecutive partitions of
/// a topic in one entry).
fn session_topics(partitions: &[CachedPartition]) -> Vec<FetchTopic> {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for p in partitions {
        let r = &p.request;
        let fp = FetchPartition::default()
            .with_partition(r.key.partition)
            .with_fetch_offset(r.fetch_offset)
            .with_log_start_offset(r.log_start_offset)
            .with_partition_max_bytes(r.max_bytes)
            .with_current_leader_epoch(r.current_leader_epoch)
            .with_last_fetched_epoch(r.last_fetched_epoch);
        match topics.last_mut() {
            Some(t) if t.topic.0.as_str() == r.key.topic => t.partitions.push(fp),
            _ => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(r.key.topic.clone())))
                    .with_partitions(vec![fp]),
            ),
        }
    }
    topics
}

/// What an answer says of each partition, in order.
fn partition_answers(out: &FetchOut) -> Vec<PartitionAnswer> {
    out.topics
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| PartitionAnswer {
            has_records: p.records.as_ref().is_some_and(|r| r.len > 0),
            error_code: p.error_code,
            high_watermark: p.high_watermark,
            last_stable_offset: p.last_stable_offset,
            log_start_offset: p.log_start_offset,
            preferred_read_replica: p.preferred_read_replica,
            diverging: p.diverging_epoch.is_some(),
        })
        .collect()
}

fn count_sessions(broker: &Broker, cache: &crate::fetch_session::SessionCache) {
    broker.metrics.fetch_sessions.set(cache.len() as i64);
}

/// Applies the session fields of a request (see the module doc): closes
/// or moves a session on, and for an incremental fetch makes `req` list
/// the session's whole partition set. `Err`: the top-level error.
fn plan_session(
    broker: &Broker,
    req: &mut FetchRequest,
    version: i16,
) -> Result<SessionPlan, ResponseError> {
    if version < 7 {
        return Ok(SessionPlan::Sessionless);
    }
    let (id, epoch) = (req.session_id, req.session_epoch);
    let requests = |kind: &str| {
        broker
            .metrics
            .fetch_session_requests
            .get_or_create(&crate::metrics::KindLabel { kind: kind.into() })
            .inc();
    };
    if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
        if id != NO_SESSION {
            let mut cache = broker.fetch_sessions.lock();
            cache.remove(id);
            count_sessions(broker, &cache);
        }
        if epoch == FINAL_EPOCH {
            return Ok(SessionPlan::Sessionless);
        }
        requests("full");
        return Ok(SessionPlan::Create);
    }
    let changed = partition_requests(req);
    let forgotten: Vec<PartitionKey> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|&partition| PartitionKey {
                topic: t.topic.0.as_str().to_string(),
                partition,
            })
        })
        .collect();
    let accepted = {
        let mut cache = broker.fetch_sessions.lock();
        let r = cache.incremental(id, epoch, changed, &forgotten, session_clock_ms());
        count_sessions(broker, &cache);
        r
    };
    match accepted {
        Ok(Some(session)) => {
            requests("incremental");
            req.topics = session_topics(&session.partitions);
            Ok(SessionPlan::Incremental {
                id,
                epoch: session.epoch,
                partitions: session.partitions,
            })
        }
        // Its request forgot every partition: the session is closed and
        // what the request lists is fetched without one.
        Ok(None) => Ok(SessionPlan::Sessionless),
        Err(e) => {
            let (code, label) = match e {
                SessionError::NotFound => (
                    ResponseError::FetchSessionIdNotFound,
                    "fetch_session_id_not_found",
                ),
                SessionError::InvalidEpoch => (
                    ResponseError::InvalidFetchSessionEpoch,
                    "invalid_fetch_session_epoch",
                ),
            };
            broker
                .metrics
                .fetch_session_errors
                .get_or_create(&crate::metrics::ErrorLabel {
                    error: label.into(),
                })
                .inc();
            Err(code)
        }
    }
}

/// Finishes the session side of an answer: creates the session a full
/// fetch asked for, or keeps only the partitions an incremental answer
/// must carry; sets the answer's session id.
fn settle_session(
    broker: &Broker,
    plan: SessionPlan,
    req: &FetchRequest,
    replica: i32,
    out: &mut FetchOut,
) {
    match plan {
        SessionPlan::Sessionless => {}
        SessionPlan::Create => {
            let partitions = partition_requests(req)
                .into_iter()
                .zip(partition_answers(out))
                .collect();
            let mut cache = broker.fetch_sessions.lock();
            let evictions = cache.evictions();
            // positive ids, as Kafka's (kafka-python reads -1 as "throttled")
            let created = cache.create(replica >= 0, partitions, session_clock_ms(), || {
                (uuid::Uuid::new_v4().as_u128() as i32) & i32::MAX
            });
            broker
                .metrics
                .fetch_session_evictions
                .inc_by(cache.evictions() - evictions);
            count_sessions(broker, &cache);
            drop(cache);
            out.session_id = created.unwrap_or(NO_SESSION);
        }
        SessionPlan::Incremental {
            id,
            epoch,
            mut partitions,
        } => {
            let answers = partition_answers(out);
            let chosen = {
                let mut cache = broker.fetch_sessions.lock();
                match cache
                    .get_mut(id)
                    .filter(|s| s.epoch == epoch && s.len() == answers.len())
                {
                    Some(session) => session.select(&answers),
                    // closed or evicted while this fetch waited: answered as
                    // the session stood; the next fetch learns it is gone
                    None => {
                        drop(cache);
                        crate::fetch_session::select(&mut partitions, &answers)
                    }
                }
            };
            let mut chosen = chosen.into_iter();
            for topic in &mut out.topics {
                topic.partitions.retain(|_| chosen.next().unwrap_or(true));
            }
            out.topics.retain(|t| !t.partitions.is_empty());
            out.session_id = id;
        }
    }
}

/// A fetch's response and how long its client is throttled for.
pub struct Fetched {
    pub pieces: Vec<Piece>,
    pub throttle_ms: i32,
}

/// Who sends a Fetch, as the fetch path needs to know it.
pub struct Fetcher<'a> {
    /// The broker the connection proved to be (only it may fetch as a
    /// replica).
    pub authenticated: Option<(i32, uuid::Uuid)>,
    /// The user and client id a consumer's fetch is counted against (its
    /// `consumer_byte_rate`).
    pub quota_client: Option<crate::quota::entity::QuotaClient<'a>>,
    /// The throttle its request quota already gives, reported with the
    /// byte-rate one.
    pub request_throttle_ms: i32,
    /// What it may read (READ on each topic).
    pub access: &'a super::access::Access,
    /// The listener the request came on: a preferred read replica must
    /// have it.
    pub listener: &'a str,
}

/// Serves a Fetch from `fetcher`.
pub async fn handle(
    broker: &Arc<Broker>,
    mut req: FetchRequest,
    version: i16,
    correlation_id: i32,
    fetcher: Fetcher<'_>,
) -> Fetched {
    let Fetcher {
        authenticated,
        quota_client,
        request_throttle_ms,
        access,
        listener,
    } = fetcher;
    let replica = replica_of(&req);
    let quota_client = quota_client.filter(|_| replica < 0);
    if let Some(client) = quota_client {
        // Kafka's rule: a consumer under a byte-rate quota gets at most one
        // quota window's worth per response, so no single response is a
        // burst the throttle then has to pay back for many seconds.
        let image = broker.image();
        if let Some(limit) =
            QuotaManager::window_limit(&image.client_quotas, client, QuotaKind::Fetch)
        {
            req.max_bytes = req.max_bytes.min(limit.clamp(1.0, i32::MAX as f64) as i32);
        }
    }
    if replica >= 0 && !replica_admitted(broker, replica, authenticated) {
        tracing::warn!(
            replica,
            "refused a fetch with a replica id from a connection not authenticated as that broker"
        );
        let out = FetchOut {
            error_code: ResponseError::ClusterAuthorizationFailed.code(),
            topics: req
                .topics
                .iter()
                .map(|t| TopicOut {
                    name: t.topic.0.as_str().to_string(),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| refused(p.partition, ResponseError::ClusterAuthorizationFailed))
                        .collect(),
                })
                .collect(),
            ..FetchOut::default()
        };
        return Fetched {
            pieces: encode_fetch_response(correlation_id, version, &out),
            throttle_ms: 0,
        };
    }
    let plan = match plan_session(broker, &mut req, version) {
        Ok(plan) => plan,
        Err(code) => {
            let out = FetchOut {
                throttle_time_ms: request_throttle_ms,
                error_code: code.code(),
                ..FetchOut::default()
            };
            return Fetched {
                pieces: encode_fetch_response(correlation_id, version, &out),
                throttle_ms: request_throttle_ms,
            };
        }
    };
    let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    let deadline = Instant::now() + wait;
    let min_bytes = req.min_bytes.max(0) as u64;
    let enough =
        |g: &Gathered| g.bytes >= min_bytes.max(1) || g.any_error || Instant::now() >= deadline;
    // A busy consumer's fetch finds enough at once and subscribes to
    // nothing. One that waits subscribes, then reads again before it
    // waits, so no append between the reads and the wait goes unnoticed.
    // a consumer needs READ on each topic (a follower was admitted above);
    // an unknown topic id has no name to ask about and stays unknown
    let denied = if replica < 0 {
        access.denied_topics(
            AclOperation::Read,
            req.topics
                .iter()
                .map(|t| t.topic.0.as_str())
                .filter(|n| !n.is_empty()),
        )
    } else {
        HashSet::new()
    };
    let first = gather(broker, &req, version, &denied, listener);
    let mut gathered = if enough(&first) {
        first
    } else {
        wait_and_gather(broker, &req, version, &denied, listener, deadline, enough).await
    };
    settle_session(broker, plan, &req, replica, &mut gathered.out);
    let mut sent_total = 0;
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
        sent_total += sent;
    }
    let throttle_ms = quota_client
        .map_or(0, |client| {
            broker.record_quota(client, QuotaKind::Fetch, sent_total as usize)
        })
        .max(request_throttle_ms);
    gathered.out.throttle_time_ms = throttle_ms;
    Fetched {
        pieces: encode_fetch_response(correlation_id, version, &gathered.out),
        throttle_ms,
    }
}
