//! Request handlers: one module per API family. Each takes the decoded
//! request and returns the response message; this module decodes bodies,
//! dispatches, and encodes responses with their headers.
//!
//! Handlers never panic on request content: every bad field becomes an error
//! code in the response, and undecodable requests close the connection.

mod access;
mod acls;
mod admin;
mod api_versions;
mod configs;
pub(crate) mod consumer_groups;
mod describe_producers;
mod elect;
mod features;
mod fetch;
mod groups;
mod list_offsets;
mod log_dirs;
mod metadata;
mod produce;
mod produce_verify;
mod producers;
mod quorum;
mod quotas;
mod reassignments;
pub mod sasl;
mod scram_credentials;
mod telemetry;
mod transactions;

pub use transactions::write_markers_locally;
mod txn_markers;

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::broker::Broker;
use crate::protocol::fetch_encode::Piece;

pub use api_versions::unsupported_version_response;

/// What to send back for one request.
#[derive(Debug)]
pub enum Reply {
    /// Nothing (Produce with acks=0).
    None,
    Pieces(Vec<Piece>),
}

/// A request that cannot be answered: the connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("cannot decode {api:?} v{version}: {reason}")]
    Decode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("cannot encode the {api:?} v{version} response: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("the {api:?} handler failed: {reason}")]
    Failed { api: ApiKey, reason: String },
}

/// Runs a handler that may do blocking file work (fsync, metadata
/// rewrites, file creation, waiting for the admin lock behind a big
/// CreateTopics) on tokio's blocking pool, never on a runtime worker.
async fn blocking<T: Send + 'static>(
    broker: &Arc<Broker>,
    api: ApiKey,
    f: impl FnOnce(&Broker) -> T + Send + 'static,
) -> Result<T, RequestError> {
    let b = broker.clone();
    tokio::task::spawn_blocking(move || f(&b))
        .await
        .map_err(|e| RequestError::Failed {
            api,
            reason: e.to_string(),
        })
}

/// Encodes a complete response frame (size, header, body).
pub fn encode_response<R: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    response: &R,
) -> Result<Reply, RequestError> {
    let mut buf = BytesMut::with_capacity(128);
    buf.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let enc_err = |e: anyhow::Error| RequestError::Encode {
        api,
        version,
        reason: e.to_string(),
    };
    header
        .encode(&mut buf, api.response_header_version(version))
        .map_err(enc_err)?;
    response.encode(&mut buf, version).map_err(enc_err)?;
    let size = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&size.to_be_bytes());
    Ok(Reply::Pieces(vec![Piece::Bytes(buf.freeze())]))
}

/// A request read off a connection and decoded, with what was done for it
/// ahead of its turn ([`prepare`]).
#[derive(Debug)]
pub struct Decoded {
    api: ApiKey,
    version: i16,
    header: RequestHeader,
    request: RequestKind,
    /// The frame's size, for the produce quota.
    request_bytes: usize,
    prevalidated: Option<produce::Prevalidated>,
    /// The check [`prepare`] started, until [`handle`] takes its outcome.
    checking: Option<tokio::task::JoinHandle<(produce::Prevalidated, std::time::Duration)>>,
    /// Time spent on [`prepare`]'s work, counted as the handler's own
    /// against the client's request quota.
    prepared_for: std::time::Duration,
}

impl Decoded {
    pub fn api(&self) -> ApiKey {
        self.api
    }

    /// Whether work [`prepare`] started for it is running in the background.
    pub fn is_being_prepared(&self) -> bool {
        self.checking.is_some()
    }
}

/// Decodes the header and body of a supported request.
pub fn decode(api: ApiKey, version: i16, mut frame: Bytes) -> Result<Decoded, RequestError> {
    let decode_err = |e: anyhow::Error| RequestError::Decode {
        api,
        version,
        reason: e.to_string(),
    };
    let request_bytes = frame.len();
    let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
        .map_err(decode_err)?;
    let request = RequestKind::decode(api, &mut frame, version).map_err(decode_err)?;
    Ok(Decoded {
        api,
        version,
        header,
        request,
        request_bytes,
        prevalidated: None,
        checking: None,
        prepared_for: std::time::Duration::ZERO,
    })
}

/// Starts the work on a request that may run ahead of its turn, while
/// the connection's earlier requests are handled: checking a produce
/// request's compressed batches (CRCs, decompression, every record) on the
/// blocking pool, so that it overlaps their appends and the checks of other
/// requests on other cores. Nothing here changes state or answers
/// anything; [`handle`] waits for the outcome and uses it only if the
/// partitions' rules are unchanged by then.
pub fn prepare(broker: &Arc<Broker>, decoded: &mut Decoded) {
    let RequestKind::Produce(req) = &decoded.request else {
        return;
    };
    if !produce::worth_prevalidating(req) {
        return;
    }
    let b = broker.clone();
    let req = req.clone();
    decoded.checking = Some(tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        (produce::prevalidate(&b, &req), started.elapsed())
    }));
}

impl Decoded {
    /// Waits for the work [`prepare`] started. A failed task (it cannot
    /// panic on request content) only means the handler checks the
    /// batches itself.
    async fn prepared(&mut self) {
        if let Some(checking) = self.checking.take() {
            if let Ok((prevalidated, took)) = checking.await {
                self.prevalidated = Some(prevalidated);
                self.prepared_for = took;
            }
        }
    }
}

/// Handles a decoded request, counting it against the client's quotas
/// (see [`crate::quota`]): after this, `ctx.throttle_ms` says how long to
/// mute the connection.
pub async fn handle(
    broker: &Arc<Broker>,
    decoded: Decoded,
    ctx: &mut crate::protocol::principal::ConnectionContext,
) -> Result<Reply, RequestError> {
    let received = std::time::Instant::now();
    let api = decoded.api;
    if !ctx.is_authenticated(received)
        && !matches!(
            api,
            ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
        )
    {
        // Kafka's SASL server closes a connection that sends anything else
        // before it has authenticated, or after its session expired
        // without a re-authentication (KIP-368)
        return Err(RequestError::Failed {
            api,
            reason: "a request before SASL authentication".into(),
        });
    }
    let tracked = broker
        .in_flight
        .track(api, own_timeout(&decoded.request), received);
    let reply = handle_tracked(broker, decoded, ctx).await;
    if tracked.overdue_at(std::time::Instant::now()) {
        broker
            .metrics
            .requests_answered_overdue
            .get_or_create(&crate::metrics::ApiLabel {
                api: format!("{api:?}"),
            })
            .inc();
    }
    reply
}

/// The timeout a request names for itself, if any: how long the broker
/// may take to answer it (see [`crate::protocol::in_flight`]).
fn own_timeout(request: &RequestKind) -> Option<std::time::Duration> {
    let ms = match request {
        RequestKind::Produce(r) => r.timeout_ms,
        RequestKind::Fetch(r) => r.max_wait_ms,
        RequestKind::JoinGroup(r) => r.rebalance_timeout_ms.max(r.session_timeout_ms),
        RequestKind::SyncGroup(_) => return Some(std::time::Duration::from_secs(300)),
        RequestKind::CreateTopics(r) => r.timeout_ms,
        RequestKind::DeleteTopics(r) => r.timeout_ms,
        _ => return None,
    };
    Some(std::time::Duration::from_millis(
        u64::try_from(ms.max(0)).unwrap_or(0),
    ))
}

async fn handle_tracked(
    broker: &Arc<Broker>,
    mut decoded: Decoded,
    ctx: &mut crate::protocol::principal::ConnectionContext,
) -> Result<Reply, RequestError> {
    decoded.prepared().await;
    ctx.client_id.clear();
    if let Some(client_id) = &decoded.header.client_id {
        ctx.client_id.push_str(client_id);
    }
    ctx.throttle_ms = 0;
    ctx.request_throttle_ms = 0;
    let kind = crate::quota::QuotaKind::Request;
    // brokers' own connections never look at quotas
    let image = ctx.is_quota_client().then(|| broker.image());
    let Some(quotas) = image
        .as_ref()
        .map(|i| &i.client_quotas)
        .filter(|q| crate::quota::QuotaManager::applies(q, quota_client(ctx), kind))
    else {
        return dispatch(broker, decoded, ctx).await;
    };
    ctx.request_throttle_ms =
        broker
            .quotas
            .throttle_now(quotas, quota_client(ctx), kind, crate::clock::now_ms());
    let client_id = ctx.client_id.clone();
    let user = ctx.quota_user().to_string();
    let prepared_for = decoded.prepared_for;
    let (reply, busy) = crate::quota::Busy::new(dispatch(broker, decoded, ctx)).await;
    let throttle = broker.quotas.record(
        quotas,
        crate::quota::entity::QuotaClient {
            user: &user,
            client_id: &client_id,
        },
        kind,
        (busy + prepared_for).as_secs_f64() * 1000.0,
        crate::clock::now_ms(),
    );
    ctx.throttle_ms = ctx.throttle_ms.max(throttle);
    reply
}

/// Who `ctx`'s requests are metered as for client quotas.
fn quota_client(
    ctx: &crate::protocol::principal::ConnectionContext,
) -> crate::quota::entity::QuotaClient<'_> {
    crate::quota::entity::QuotaClient {
        user: ctx.quota_user(),
        client_id: &ctx.client_id,
    }
}

/// Hands a decoded request to its handler.
async fn dispatch(
    broker: &Arc<Broker>,
    decoded: Decoded,
    ctx: &mut crate::protocol::principal::ConnectionContext,
) -> Result<Reply, RequestError> {
    let Decoded {
        api,
        version,
        header,
        request,
        request_bytes,
        prevalidated,
        checking: _,
        prepared_for: _,
    } = decoded;
    let cid = header.correlation_id;
    let b = broker.as_ref();
    // what the authorizer lets this connection do (each handler asks it
    // with Kafka's rules for its API)
    let access = access::Access::of(b, ctx);
    match request {
        RequestKind::ApiVersions(r) => {
            telemetry::note_software(ctx, &r);
            encode_response(api, version, cid, &api_versions::handle(b))
        }
        // Auto-creating a topic creates files and rewrites the metadata.
        RequestKind::Metadata(r) if metadata::may_create_topics(b, &r, version) => {
            let listener = ctx.listener.clone();
            let resp = blocking(broker, api, move |b| {
                metadata::handle(b, r, version, &access, &listener.name)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::Metadata(r) => encode_response(
            api,
            version,
            cid,
            &metadata::handle(b, r, version, &access, &ctx.listener.name),
        ),
        RequestKind::Produce(r) => {
            let denied = produce::refused_by_acls(&r, &access);
            let refused = produce_verify::verify(broker, &r, version, denied).await;
            let handled = produce::handle(b, r, version, prevalidated, &refused);
            // Kafka counts the whole request against the producer's quota
            let throttle = if ctx.is_quota_client() {
                b.record_quota(
                    quota_client(ctx),
                    crate::quota::QuotaKind::Produce,
                    request_bytes,
                )
            } else {
                0
            }
            .max(ctx.request_throttle_ms);
            ctx.throttle_ms = ctx.throttle_ms.max(throttle);
            match handled.response {
                Some(mut resp) => {
                    if !handled.pending.is_empty() {
                        produce::complete(&mut resp, handled.pending, handled.timeout).await;
                    }
                    resp.throttle_time_ms = throttle;
                    encode_response(api, version, cid, &resp)
                }
                None => Ok(Reply::None),
            }
        }
        RequestKind::Fetch(r) => {
            let quota_client = ctx.is_quota_client().then(|| quota_client(ctx));
            let listener = ctx.listener.clone();
            let fetcher = fetch::Fetcher {
                listener: &listener.name,
                authenticated: ctx.broker(),
                quota_client,
                request_throttle_ms: ctx.request_throttle_ms,
                access: &access,
            };
            let fetched = fetch::handle(broker, r, version, cid, fetcher).await;
            ctx.throttle_ms = ctx.throttle_ms.max(fetched.throttle_ms);
            Ok(Reply::Pieces(fetched.pieces))
        }
        RequestKind::SaslHandshake(r) => {
            let listener = ctx.listener.clone();
            encode_response(api, version, cid, &sasl::handshake(&listener, ctx, r))
        }
        RequestKind::SaslAuthenticate(r) => {
            let listener = ctx.listener.clone();
            encode_response(api, version, cid, &sasl::authenticate(b, &listener, ctx, r))
        }
        // Waits for the in-sync replicas to hold the markers.
        RequestKind::WriteTxnMarkers(r) => {
            let from_broker = txn_markers::may_write_markers(b, ctx);
            let resp =
                blocking(broker, api, move |b| txn_markers::handle(b, r, from_broker)).await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::ListOffsets(r) => encode_response(
            api,
            version,
            cid,
            &list_offsets::handle(b, r, version, &access),
        ),
        RequestKind::OffsetForLeaderEpoch(r) => encode_response(
            api,
            version,
            cid,
            &list_offsets::offsets_for_leader_epoch(b, r, &access),
        ),
        // Blocking file work: off the runtime's worker threads.
        RequestKind::CreateTopics(r) => {
            let resp = admin::create_topics_off_runtime(broker, r, version, access).await;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::DeleteTopics(r) => {
            let resp = admin::delete_topics_off_runtime(broker, r, version, access).await;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::CreatePartitions(r) => {
            let resp = admin::create_partitions_off_runtime(broker, r, access).await;
            encode_response(api, version, cid, &resp)
        }
        // Rolls segments, checkpoints (fsync), deletes files.
        RequestKind::DeleteRecords(r) => {
            let resp = blocking(broker, api, move |b| admin::delete_records(b, r, &access)).await?;
            encode_response(api, version, cid, &resp)
        }
        // asks the controller and waits for the change (blocking)
        RequestKind::AlterPartitionReassignments(r) => {
            let resp = blocking(broker, api, move |b| {
                reassignments::alter(b, r, version, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        // asks the controller and waits for the change (blocking)
        RequestKind::AlterClientQuotas(r) => {
            let resp = blocking(broker, api, move |b| quotas::alter(b, r, &access)).await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::DescribeClientQuotas(r) => {
            encode_response(api, version, cid, &quotas::describe(b, r, &access))
        }
        // asks the controller (or writes the local file) and waits
        RequestKind::AlterUserScramCredentials(r) => {
            let resp = blocking(broker, api, move |b| {
                scram_credentials::alter(b, r, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::DescribeUserScramCredentials(r) => encode_response(
            api,
            version,
            cid,
            &scram_credentials::describe(b, r, &access),
        ),
        // ask the controller (or write the local file) and wait
        RequestKind::CreateAcls(r) => {
            let resp = blocking(broker, api, move |b| acls::create(b, r, &access)).await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::DeleteAcls(r) => {
            let resp = blocking(broker, api, move |b| acls::delete(b, r, &access)).await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::DescribeAcls(r) => {
            encode_response(api, version, cid, &acls::describe(b, r, &access))
        }
        RequestKind::ListPartitionReassignments(r) => {
            encode_response(api, version, cid, &reassignments::list(b, r, &access))
        }
        RequestKind::DescribeCluster(r) => encode_response(
            api,
            version,
            cid,
            &admin::describe_cluster(b, r, &access, &ctx.listener.name),
        ),
        RequestKind::DescribeConfigs(r) => {
            encode_response(api, version, cid, &configs::describe(b, r, &access))
        }
        RequestKind::ListConfigResources(r) => encode_response(
            api,
            version,
            cid,
            &configs::list_config_resources(b, r, &access),
        ),
        // These take the admin lock (which a big CreateTopics holds for
        // long) and rewrite the metadata document.
        RequestKind::AlterConfigs(r) => {
            let resp = blocking(broker, api, move |b| configs::alter(b, r, &access)).await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            let resp = blocking(broker, api, move |b| {
                configs::incremental_alter(b, r, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::InitProducerId(r) => {
            let resp = blocking(broker, api, move |b| {
                producers::init_producer_id(b, r, version, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        // The transaction coordinator's APIs append to __transaction_state
        // and wait for its replicas (and EndTxn for the markers): blocking.
        RequestKind::AddPartitionsToTxn(r) => {
            let resp = blocking(broker, api, move |b| {
                transactions::add_partitions_to_txn(b, r, version, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::AddOffsetsToTxn(r) => {
            let resp = blocking(broker, api, move |b| {
                transactions::add_offsets_to_txn(b, r, version, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::EndTxn(r) => {
            let resp = blocking(broker, api, move |b| {
                transactions::end_txn(b, r, version, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::DescribeTransactions(r) => encode_response(
            api,
            version,
            cid,
            &transactions::describe_transactions(b, r, &access),
        ),
        RequestKind::DescribeProducers(r) => encode_response(
            api,
            version,
            cid,
            &describe_producers::describe_producers(b, r, &access),
        ),
        RequestKind::ListTransactions(r) => encode_response(
            api,
            version,
            cid,
            &transactions::list_transactions(b, r, version, &access),
        ),
        RequestKind::FindCoordinator(r) => {
            // may ask the controller to create the offsets topic (blocking)
            let listener = ctx.listener.clone();
            let resp = blocking(broker, api, move |b| {
                groups::find_coordinator(b, r, version, &access, &listener.name)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::JoinGroup(r) => {
            let client_id = header.client_id.as_ref().map(|c| c.as_str()).unwrap_or("");
            let host = format!("/{}", ctx.peer.ip());
            // a classic member of a consumer group: its join is written
            // (waits for the offsets partition's ISR)
            let r = if b.groups.is_consumer_group(r.group_id.0.as_str()) {
                let (client, host, access) = (client_id.to_string(), host.clone(), access.clone());
                match blocking(broker, api, move |b| {
                    groups::join_consumer_group(b, r, version, &client, &host, &access)
                })
                .await?
                {
                    Ok(resp) => return encode_response(api, version, cid, &resp),
                    Err(r) => *r,
                }
            } else {
                r
            };
            let resp = groups::join_group(b, r, version, client_id, &host, &access).await;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::SyncGroup(r) => {
            let group = r.group_id.0.to_string();
            let resp = groups::sync_group(b, r, &access).await;
            if resp.error_code == 0 {
                // the settled generation is stored (once) before the
                // member hears of it, as Kafka's coordinator does
                blocking(broker, api, move |b| {
                    b.groups.store_group(&b.topics, &group)
                })
                .await?;
            }
            encode_response(api, version, cid, &resp)
        }
        RequestKind::Heartbeat(r) => {
            encode_response(api, version, cid, &groups::heartbeat(b, r, &access))
        }
        RequestKind::LeaveGroup(r) => {
            let group = r.group_id.0.to_string();
            // a consumer group's change is written; an emptied classic
            // group is stored as such
            let resp = blocking(broker, api, move |b| {
                let resp = groups::leave_group(b, r, version, &access);
                b.groups.store_group(&b.topics, &group);
                resp
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        // Coordinator writes wait for the offsets partition's ISR (and
        // for the shard's write lock): on the blocking pool, so runtime
        // workers stay free to serve the followers' fetches they wait for.
        RequestKind::OffsetCommit(r) => {
            let resp = blocking(broker, api, move |b| {
                groups::offset_commit(b, r, version, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::TxnOffsetCommit(r) => {
            let resp = blocking(broker, api, move |b| {
                groups::txn_offset_commit(b, r, version, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::OffsetFetch(r) => encode_response(
            api,
            version,
            cid,
            &groups::offset_fetch(b, r, version, &access),
        ),
        RequestKind::OffsetDelete(r) => {
            let resp = blocking(broker, api, move |b| groups::offset_delete(b, r, &access)).await?;
            encode_response(api, version, cid, &resp)
        }
        // a change of the group waits for its offsets partition's ISR
        RequestKind::ConsumerGroupHeartbeat(r) => {
            let client_id = header
                .client_id
                .as_ref()
                .map(|c| c.as_str().to_string())
                .unwrap_or_default();
            let host = format!("/{}", ctx.peer.ip());
            let resp = blocking(broker, api, move |b| {
                consumer_groups::heartbeat(b, r, version, &client_id, &host, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            encode_response(api, version, cid, &consumer_groups::describe(b, r, &access))
        }
        RequestKind::DescribeGroups(r) => {
            encode_response(api, version, cid, &groups::describe_groups(b, r, &access))
        }
        RequestKind::ListGroups(r) => {
            encode_response(api, version, cid, &groups::list_groups(b, r, &access))
        }
        RequestKind::DeleteGroups(r) => {
            let resp = blocking(broker, api, move |b| groups::delete_groups(b, r, &access)).await?;
            encode_response(api, version, cid, &resp)
        }
        // Sizes of every hosted partition (their locks) and statvfs.
        RequestKind::DescribeLogDirs(r) => {
            let resp = blocking(broker, api, move |b| {
                log_dirs::describe_log_dirs(b, r, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        // Forwarded to the controller, waiting for its answer.
        RequestKind::ElectLeaders(r) => {
            let resp = blocking(broker, api, move |b| elect::elect_leaders(b, r, &access)).await?;
            encode_response(api, version, cid, &resp)
        }
        // asks the controller (cluster mode): blocking
        RequestKind::DescribeQuorum(r) => {
            let resp = blocking(broker, api, move |b| {
                quorum::describe_quorum(b, r, version, &access)
            })
            .await?;
            encode_response(api, version, cid, &resp)
        }
        RequestKind::UpdateFeatures(r) => encode_response(
            api,
            version,
            cid,
            &features::update_features(b, r, version, &access),
        ),
        RequestKind::GetTelemetrySubscriptions(r) => {
            encode_response(api, version, cid, &telemetry::get_subscriptions(b, r, ctx))
        }
        // decompresses and decodes the payload: off the runtime's workers
        RequestKind::PushTelemetry(r) => {
            let client = telemetry::client_metadata(ctx);
            let resp = blocking(broker, api, move |b| telemetry::push(b, r, &client)).await?;
            encode_response(api, version, cid, &resp)
        }
        _ => Err(RequestError::Decode {
            api,
            version,
            reason: "no handler".into(),
        }),
    }
}

/// The partition a Produce, Fetch or ListOffsets may use here, and its
/// leader epoch: this broker must lead it in the metadata image (else
/// `NOT_LEADER_OR_FOLLOWER`, or `UNKNOWN_TOPIC_OR_PARTITION` when the image
/// has no such partition) and hold its log.
pub(crate) fn led_partition(
    broker: &Broker,
    image: &crate::image::MetadataImage,
    topic: &str,
    index: i32,
) -> Result<(Arc<crate::topics::Partition>, i32), kafka_protocol::error::ResponseError> {
    use crate::image::PartitionRole;
    use kafka_protocol::error::ResponseError;
    match image.role(topic, index, broker.node_id) {
        None => Err(ResponseError::UnknownTopicOrPartition),
        Some(PartitionRole::Leader { epoch }) => broker
            .topics
            .partition(topic, index)
            .map(|p| (p, epoch))
            .ok_or(ResponseError::NotLeaderOrFollower),
        Some(_) => Err(ResponseError::NotLeaderOrFollower),
    }
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
