//! KIP-848 consumer groups on the wire against a real broker on
//! 127.0.0.1: members heartbeating with ConsumerGroupHeartbeat converge on
//! an assignment in which no partition is ever owned twice; a leave and a
//! session timeout move partitions; fencing errors as Kafka's;
//! ConsumerGroupDescribe, ListGroups, DescribeGroups, JoinGroup, OffsetCommit
//! / OffsetFetch v9 and DeleteGroups on a consumer group; after a restart
//! the group is replayed from `__consumer_offsets`; and in a two-broker
//! cluster (`--cluster dir`) the broker that takes the group's offsets
//! partition over when the coordinator stops loads the group from the
//! replicated records, so members go on with their epochs and partitions;
//! and with brokers in two racks, members naming their rack get the
//! partitions whose replica is in it.

mod cluster_common;
mod wire_common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions as Owned;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse, GroupId, JoinGroupRequest,
    JoinGroupResponse, ListGroupsRequest, ListGroupsResponse, MetadataRequest, MetadataResponse,
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use uuid::Uuid;
use wire_common::{call, create_topic, name, start};

type Owns = BTreeMap<Uuid, BTreeSet<i32>>;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A consumer as the Java client drives the protocol: it names itself,
/// reports what it owns, adopts each assignment at once (revoking is
/// immediate here).
struct Member {
    id: String,
    epoch: i32,
    owns: Owns,
    conn: TcpStream,
}

impl Member {
    async fn join(conn: TcpStream, group: &str, id: &str, topics: &[&str]) -> (Member, i16) {
        let mut m = Member {
            id: id.into(),
            epoch: 0,
            owns: Owns::new(),
            conn,
        };
        let req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(id))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(topics.iter().map(|t| name(t)).collect()))
            .with_topic_partitions(Some(vec![]));
        let code = m.send(req).await.error_code;
        (m, code)
    }

    async fn send(&mut self, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse {
        let r: ConsumerGroupHeartbeatResponse =
            call(&mut self.conn, ApiKey::ConsumerGroupHeartbeat, 1, &req).await;
        if r.error_code == 0 {
            self.epoch = r.member_epoch;
            if let Some(a) = &r.assignment {
                self.owns = a
                    .topic_partitions
                    .iter()
                    .map(|tp| (tp.topic_id, tp.partitions.iter().copied().collect()))
                    .collect();
            }
        }
        r
    }

    fn beat_request(&self, group: &str, epoch: i32) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(&self.id))
            .with_member_epoch(epoch)
            .with_topic_partitions(Some(
                self.owns
                    .iter()
                    .map(|(t, ps)| {
                        Owned::default()
                            .with_topic_id(*t)
                            .with_partitions(ps.iter().copied().collect())
                    })
                    .collect(),
            ))
    }

    async fn beat(&mut self, group: &str) -> i16 {
        let req = self.beat_request(group, self.epoch);
        self.send(req).await.error_code
    }

    fn count(&self) -> usize {
        self.owns.values().map(BTreeSet::len).sum()
    }
}

fn assert_disjoint(members: &[&Member]) {
    let mut seen = BTreeSet::new();
    for m in members {
        for (t, ps) in &m.owns {
            for p in ps {
                assert!(seen.insert((*t, *p)), "{t}/{p} owned twice");
            }
        }
    }
}

async fn describe(conn: &mut TcpStream, group: &str) -> ConsumerGroupDescribeResponse {
    call(
        conn,
        ApiKey::ConsumerGroupDescribe,
        1,
        &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(s(group))]),
    )
    .await
}

async fn topic_id(conn: &mut TcpStream, topic: &str) -> Uuid {
    let r: MetadataResponse = call(
        conn,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    )
    .await;
    r.topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .map(|t| t.topic_id)
        .expect("topic listed")
}

async fn commit(
    conn: &mut TcpStream,
    group: &str,
    member: &str,
    epoch: i32,
    topic: &str,
    offset: i64,
) -> i16 {
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_generation_id_or_member_epoch(epoch)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name(topic))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])]);
    let r: OffsetCommitResponse = call(conn, ApiKey::OffsetCommit, 9, &req).await;
    r.topics[0].partitions[0].error_code
}

/// OffsetFetch v9 of partition 0 of `topic`: (group error, offset).
async fn fetch(
    conn: &mut TcpStream,
    group: &str,
    member: Option<&str>,
    epoch: i32,
    topic: &str,
) -> (i16, i64) {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics;
    let req = OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(member.map(s))
        .with_member_epoch(epoch)
        .with_topics(Some(vec![OffsetFetchRequestTopics::default()
            .with_name(name(topic))
            .with_partition_indexes(vec![0])]))]);
    let r: OffsetFetchResponse = call(conn, ApiKey::OffsetFetch, 9, &req).await;
    let g = &r.groups[0];
    let offset = g
        .topics
        .first()
        .map(|t| t.partitions[0].committed_offset)
        .unwrap_or(-1);
    (g.error_code, offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_converge_leave_fence_and_the_group_apis_see_a_consumer_group() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut admin = broker.connect().await;
    assert_eq!(create_topic(&mut admin, "orders", 6).await.0, 0);
    let orders = topic_id(&mut admin, "orders").await;
    let g = "kip848";

    let (mut a, code) = Member::join(broker.connect().await, g, "member-a", &["orders"]).await;
    assert_eq!(code, 0);
    assert_eq!((a.epoch, a.count()), (1, 6));
    let (mut b, code) = Member::join(broker.connect().await, g, "member-b", &["orders"]).await;
    assert_eq!(code, 0);
    assert_eq!(b.epoch, 2);
    assert_eq!(b.count(), 0, "a still owns everything");
    assert_disjoint(&[&a, &b]);
    for _ in 0..6 {
        assert_eq!(a.beat(g).await, 0);
        assert_disjoint(&[&a, &b]);
        assert_eq!(b.beat(g).await, 0);
        assert_disjoint(&[&a, &b]);
    }
    assert_eq!((a.count(), b.count()), (3, 3));
    assert_eq!((a.epoch, b.epoch), (2, 2));

    let d = describe(&mut admin, g).await;
    let dg = &d.groups[0];
    assert_eq!(dg.error_code, 0);
    assert_eq!(dg.group_state.as_str(), "Stable");
    assert_eq!((dg.group_epoch, dg.assignment_epoch), (2, 2));
    assert_eq!(dg.assignor_name.as_str(), "uniform");
    assert_eq!(dg.members.len(), 2);
    for m in &dg.members {
        assert_eq!(m.member_epoch, 2);
        assert_eq!(m.member_type, 1);
        assert_eq!(m.subscribed_topic_names[0].0.as_str(), "orders");
        assert_eq!(
            m.assignment.topic_partitions[0].topic_name.0.as_str(),
            "orders"
        );
        assert_eq!(m.assignment.topic_partitions[0].topic_id, orders);
        assert_eq!(m.assignment.topic_partitions[0].partitions.len(), 3);
        assert_eq!(m.client_host.as_str(), "/127.0.0.1");
    }
    let unknown = describe(&mut admin, "nope").await;
    assert_eq!(
        unknown.groups[0].error_code,
        ResponseError::GroupIdNotFound.code()
    );

    // fencing, as Kafka: an epoch ahead, an unknown member, an unknown group
    let ahead = a.beat_request(g, 9);
    assert_eq!(
        a.send(ahead).await.error_code,
        ResponseError::FencedMemberEpoch.code()
    );
    let mut stranger = a.beat_request(g, 1);
    stranger.member_id = s("stranger");
    assert_eq!(
        a.send(stranger).await.error_code,
        ResponseError::UnknownMemberId.code()
    );
    let mut lost = a.beat_request("no-such-group", 1);
    lost.member_id = s("x");
    assert_eq!(
        a.send(lost).await.error_code,
        ResponseError::GroupIdNotFound.code()
    );
    let bad = a.beat_request(g, 0).with_rebalance_timeout_ms(-1);
    assert_eq!(
        a.send(bad).await.error_code,
        ResponseError::InvalidRequest.code()
    );

    // offsets with member epochs
    assert_eq!(
        commit(&mut admin, g, "member-a", 1, "orders", 5).await,
        ResponseError::StaleMemberEpoch.code()
    );
    assert_eq!(commit(&mut admin, g, "member-a", 2, "orders", 5).await, 0);
    assert_eq!(
        commit(&mut admin, g, "", -1, "orders", 5).await,
        ResponseError::UnknownMemberId.code(),
        "an anonymous commit to a group with members"
    );
    assert_eq!(
        fetch(&mut admin, g, Some("member-a"), 2, "orders").await,
        (0, 5)
    );
    assert_eq!(
        fetch(&mut admin, g, Some("member-a"), 1, "orders").await.0,
        ResponseError::StaleMemberEpoch.code()
    );
    assert_eq!(fetch(&mut admin, g, None, -1, "orders").await, (0, 5));

    // the classic APIs see a consumer group for what it is
    let listed: ListGroupsResponse = call(
        &mut admin,
        ApiKey::ListGroups,
        5,
        &ListGroupsRequest::default().with_types_filter(vec![s("consumer")]),
    )
    .await;
    let ours: Vec<_> = listed
        .groups
        .iter()
        .filter(|l| l.group_id.0.as_str() == g)
        .collect();
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0].group_type.as_str(), "consumer");
    assert_eq!(ours[0].group_state.as_str(), "Stable");
    let classic_only: ListGroupsResponse = call(
        &mut admin,
        ApiKey::ListGroups,
        5,
        &ListGroupsRequest::default().with_types_filter(vec![s("classic")]),
    )
    .await;
    assert!(classic_only
        .groups
        .iter()
        .all(|l| l.group_id.0.as_str() != g));
    let described: DescribeGroupsResponse = call(
        &mut admin,
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(g))]),
    )
    .await;
    assert_eq!(described.groups[0].group_state.as_str(), "Dead");
    let joined: JoinGroupResponse = call(
        &mut admin,
        ApiKey::JoinGroup,
        9,
        &JoinGroupRequest::default()
            .with_group_id(GroupId(s(g)))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer")),
    )
    .await;
    assert_eq!(
        joined.error_code,
        ResponseError::InconsistentGroupProtocol.code()
    );
    let deleted: DeleteGroupsResponse = call(
        &mut admin,
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(g))]),
    )
    .await;
    assert_eq!(
        deleted.results[0].error_code,
        ResponseError::NonEmptyGroup.code()
    );

    // b leaves: a takes everything
    let leave = b.beat_request(g, -1);
    let r = b.send(leave).await;
    assert_eq!((r.error_code, r.member_epoch), (0, -1));
    assert_eq!(a.beat(g).await, 0);
    assert_eq!(a.count(), 6);
    assert_eq!(a.epoch, 3);
    // a leaves: the empty group can be deleted, offsets and all
    let leave = a.beat_request(g, -1);
    assert_eq!(a.send(leave).await.error_code, 0);
    assert_eq!(
        describe(&mut admin, g).await.groups[0].group_state.as_str(),
        "Empty"
    );
    let deleted: DeleteGroupsResponse = call(
        &mut admin,
        ApiKey::DeleteGroups,
        2,
        &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(g))]),
    )
    .await;
    assert_eq!(deleted.results[0].error_code, 0);
    assert_eq!(
        describe(&mut admin, g).await.groups[0].error_code,
        ResponseError::GroupIdNotFound.code()
    );
    assert_eq!(fetch(&mut admin, g, None, -1, "orders").await, (0, -1));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_member_is_removed_after_its_session_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(
        dir.path(),
        &[
            "--set",
            "group.consumer.session.timeout.ms=1500",
            "--set",
            "group.consumer.heartbeat.interval.ms=300",
        ],
    )
    .await;
    let mut admin = broker.connect().await;
    assert_eq!(create_topic(&mut admin, "t", 4).await.0, 0);
    let g = "sessions";
    let (mut a, _) = Member::join(broker.connect().await, g, "a", &["t"]).await;
    let (mut b, _) = Member::join(broker.connect().await, g, "b", &["t"]).await;
    for _ in 0..4 {
        a.beat(g).await;
        b.beat(g).await;
    }
    assert_eq!((a.count(), b.count()), (2, 2));
    // b falls silent; a heartbeats at the interval
    let started = std::time::Instant::now();
    while a.count() < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "b never expired"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(a.beat(g).await, 0);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "not before its session ends"
    );
    let d = describe(&mut admin, g).await;
    assert_eq!(d.groups[0].members.len(), 1);
    // b's next heartbeat: it is no longer known
    assert_eq!(b.beat(g).await, ResponseError::UnknownMemberId.code());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let g = "durable";
    let (epoch, owns, described_before) = {
        let broker = start(dir.path(), &[]).await;
        let mut admin = broker.connect().await;
        assert_eq!(create_topic(&mut admin, "t", 3).await.0, 0);
        let (mut a, _) = Member::join(broker.connect().await, g, "a", &["t"]).await;
        let (mut b, _) = Member::join(broker.connect().await, g, "b", &["t"]).await;
        for _ in 0..4 {
            a.beat(g).await;
            b.beat(g).await;
        }
        assert_eq!(commit(&mut admin, g, "a", a.epoch, "t", 42).await, 0);
        let d = describe(&mut admin, g).await.groups.remove(0);
        broker.stop().await;
        (a.epoch, a.owns.clone(), d)
    };
    let broker = start(dir.path(), &[]).await;
    let mut admin = broker.connect().await;
    let after = describe(&mut admin, g).await.groups.remove(0);
    assert_eq!(after.error_code, 0);
    assert_eq!(after.group_epoch, described_before.group_epoch);
    assert_eq!(after.assignment_epoch, described_before.assignment_epoch);
    assert_eq!(
        after.members, described_before.members,
        "members, epochs and assignments replayed"
    );
    // a goes on heartbeating with its epoch, keeping its partitions
    let mut a = Member {
        id: "a".into(),
        epoch,
        owns: owns.clone(),
        conn: broker.connect().await,
    };
    assert_eq!(a.beat(g).await, 0);
    assert_eq!((a.epoch, &a.owns), (epoch, &owns));
    assert_eq!(fetch(&mut admin, g, Some("a"), epoch, "t").await, (0, 42));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_commits_with_offset_commit_v9_only() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), &[]).await;
    let mut admin = broker.connect().await;
    assert_eq!(create_topic(&mut admin, "t", 1).await.0, 0);
    let (a, _) = Member::join(broker.connect().await, "v9", "a", &["t"]).await;
    let req = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("v9")))
        .with_member_id(s("a"))
        .with_generation_id_or_member_epoch(a.epoch)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name("t"))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(1)])]);
    let r: OffsetCommitResponse = call(&mut admin, ApiKey::OffsetCommit, 8, &req).await;
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        ResponseError::UnsupportedVersion.code()
    );
    assert_eq!(commit(&mut admin, "v9", "a", a.epoch, "t", 1).await, 0);
    broker.stop().await;
}

/// The coordinator of `group`: `(node id, port)`, once there is one (the
/// offsets topic is created by the first request).
async fn group_coordinator(s: &mut TcpStream, group: &str) -> (i32, u16) {
    cluster_common::find_coordinator(s, 0, group).await
}

/// ConsumerGroupDescribe of `group`, retried while the broker is not (yet)
/// its coordinator or still loads it.
async fn describe_loaded(
    conn: &mut TcpStream,
    group: &str,
) -> kafka_protocol::messages::consumer_group_describe_response::DescribedGroup {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let d = describe(conn, group).await.groups.remove(0);
        if d.error_code == 0 {
            return d;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "describe {group}: {}",
            d.error_code
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// KIP-848 groups move with their offsets partition as classic groups do:
/// the coordinator's broker stops, the other replica of `__consumer_offsets`
/// becomes its leader and loads the group from the records the first one
/// wrote (members, epochs, target and current assignments, offsets). The
/// members find it, heartbeat with the epochs they had and keep their
/// partitions; a member joining after the move starts the next epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_coordinator_takes_the_group_over() {
    const SETTINGS: &[&str] = &[
        "broker.session.timeout.ms=3000",
        "offsets.topic.num.partitions=1",
        "offsets.topic.replication.factor=2",
        "replica.fetch.wait.max.ms=100",
        "replica.fetch.backoff.ms=100",
    ];
    let g = "moving";
    let dirs = cluster_common::ClusterDirs::new();
    let (mut brokers, mut probe) = cluster_common::two_brokers(|n| dirs.start(n, SETTINGS)).await;
    let (code, message) = cluster_common::create_replicated(&mut probe, "t", 4, 2, &[]).await;
    assert_eq!(code, 0, "{message:?}");
    cluster_common::wait_for_partitions(&mut probe, "t", "led", |p| {
        p.len() == 4 && p.values().all(|v| v.leader >= 0 && v.isr.len() == 2)
    })
    .await;
    let (coord, port) = group_coordinator(&mut probe, g).await;
    assert_eq!(brokers[&coord].kafka.port(), port);
    // the offsets partition is replicated to both before the group starts
    cluster_common::wait_for_partitions(&mut probe, "__consumer_offsets", "in sync", |p| {
        p.len() == 1 && p.values().all(|v| v.leader == coord && v.isr.len() == 2)
    })
    .await;

    let addrs: BTreeMap<i32, std::net::SocketAddr> =
        brokers.iter().map(|(n, b)| (*n, b.kafka)).collect();
    let at = |n: i32| addrs[&n];
    let on = |addr| async move {
        tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect")
    };
    // the leader of the offsets partition serves the group once it has
    // loaded it: until then NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS,
    // which clients retry
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut a = loop {
        let (m, code) = Member::join(on(at(coord)).await, g, "a", &["t"]).await;
        if code == 0 {
            break m;
        }
        assert!(
            [14, 16].contains(&code) && tokio::time::Instant::now() < deadline,
            "join: {code}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (mut b, code) = Member::join(on(at(coord)).await, g, "b", &["t"]).await;
    assert_eq!(code, 0);
    for _ in 0..6 {
        assert_eq!(a.beat(g).await, 0);
        assert_eq!(b.beat(g).await, 0);
    }
    assert_eq!((a.count(), b.count()), (2, 2), "settled: 2 partitions each");
    assert_disjoint(&[&a, &b]);
    let mut admin = on(at(coord)).await;
    assert_eq!(commit(&mut admin, g, "a", a.epoch, "t", 42).await, 0);
    let before = describe_loaded(&mut admin, g).await;

    // the coordinator's broker goes; the other takes the offsets partition over
    drop(admin);
    let other = cluster_common::stop_one_of_two(&mut brokers, coord).await;
    let mut s = on(at(other)).await;
    cluster_common::wait_for_coordinator(&mut s, 0, g, other).await;
    let after = describe_loaded(&mut s, g).await;
    assert_eq!(after.group_state.as_str(), "Stable", "{after:?}");
    assert_eq!(after.group_epoch, before.group_epoch);
    assert_eq!(after.assignment_epoch, before.assignment_epoch);
    assert_eq!(
        after.members, before.members,
        "members, epochs and assignments loaded by the new coordinator"
    );

    // the members find the new coordinator and go on with their epochs
    for m in [&mut a, &mut b] {
        let (epoch, owns) = (m.epoch, m.owns.clone());
        m.conn = on(at(other)).await;
        assert_eq!(m.beat(g).await, 0, "{} heartbeats on", m.id);
        assert_eq!(
            (m.epoch, &m.owns),
            (epoch, &owns),
            "{} keeps its partitions",
            m.id
        );
    }
    assert_eq!(fetch(&mut s, g, Some("a"), a.epoch, "t").await, (0, 42));

    // the group goes on from the loaded state: a third member, the next epoch
    let (mut c, code) = Member::join(on(at(other)).await, g, "c", &["t"]).await;
    assert_eq!(code, 0);
    for _ in 0..8 {
        assert_eq!(a.beat(g).await, 0);
        assert_eq!(b.beat(g).await, 0);
        assert_eq!(c.beat(g).await, 0);
    }
    assert_disjoint(&[&a, &b, &c]);
    assert_eq!(
        a.count() + b.count() + c.count(),
        4,
        "every partition owned once"
    );
    assert!(c.count() >= 1, "the new member has partitions");
    let last = describe_loaded(&mut s, g).await;
    assert_eq!(last.group_epoch, before.group_epoch + 1);
}

/// A classic consumer on the wire (JoinGroup v9, SyncGroup v5, Heartbeat
/// v4) as the Java client's classic protocol drives it: subscribed to
/// `t`, it rejoins with the partitions it owns; as the leader it gives
/// every partition to the members it is told of (the only one here).
struct Classic {
    id: String,
    instance: Option<String>,
    generation: i32,
    owned: Vec<i32>,
    conn: TcpStream,
}

fn protocol_bytes<M: kafka_protocol::protocol::Encodable>(version: i16, msg: &M) -> bytes::Bytes {
    let mut b = bytes::BytesMut::new();
    b.extend_from_slice(&version.to_be_bytes());
    msg.encode(&mut b, version).unwrap();
    b.freeze()
}

impl Classic {
    fn new(conn: TcpStream) -> Classic {
        Classic {
            id: String::new(),
            instance: None,
            generation: -1,
            owned: vec![],
            conn,
        }
    }

    async fn join(&mut self, group: &str) -> JoinGroupResponse {
        use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition;
        use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        let sub = ConsumerProtocolSubscription::default()
            .with_topics(vec![s("t")])
            .with_owned_partitions(vec![TopicPartition::default()
                .with_topic(name("t"))
                .with_partitions(self.owned.clone())]);
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(&self.id))
            .with_group_instance_id(self.instance.as_deref().map(s))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(protocol_bytes(1, &sub))]);
        call(&mut self.conn, ApiKey::JoinGroup, 9, &req).await
    }

    async fn heartbeat(&mut self, group: &str) -> i16 {
        let req = kafka_protocol::messages::HeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(&self.id))
            .with_group_instance_id(self.instance.as_deref().map(s))
            .with_generation_id(self.generation);
        let r: kafka_protocol::messages::HeartbeatResponse =
            call(&mut self.conn, ApiKey::Heartbeat, 4, &req).await;
        r.error_code
    }

    /// Joins (getting a member id first if it has none) and syncs: the
    /// sync's error code.
    async fn rejoin(&mut self, group: &str) -> i16 {
        use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
        use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
        use kafka_protocol::messages::{
            ConsumerProtocolAssignment, SyncGroupRequest, SyncGroupResponse,
        };
        use kafka_protocol::protocol::Decodable;
        let mut j = self.join(group).await;
        self.id = j.member_id.to_string();
        if j.error_code == ResponseError::MemberIdRequired.code() {
            self.id = j.member_id.to_string();
            j = self.join(group).await;
        }
        assert_eq!(j.error_code, 0, "join");
        assert_eq!(j.protocol_name.as_ref().map(|p| p.as_str()), Some("range"));
        self.generation = j.generation_id;
        let assignments = if j.leader == j.member_id {
            let all = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
                TopicPartition::default()
                    .with_topic(name("t"))
                    .with_partitions(vec![0, 1, 2, 3]),
            ]);
            vec![SyncGroupRequestAssignment::default()
                .with_member_id(s(&self.id))
                .with_assignment(protocol_bytes(1, &all))]
        } else {
            vec![]
        };
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(&self.id))
            .with_group_instance_id(self.instance.as_deref().map(s))
            .with_generation_id(self.generation)
            .with_protocol_type(Some(s("consumer")))
            .with_protocol_name(Some(s("range")))
            .with_assignments(assignments);
        let r: SyncGroupResponse = call(&mut self.conn, ApiKey::SyncGroup, 5, &req).await;
        if r.error_code == 0 {
            let mut b = r.assignment.clone();
            use bytes::Buf;
            let version = b.get_i16();
            assert_eq!(version, 1, "encoded in the member's version");
            let a = ConsumerProtocolAssignment::decode(&mut b, version).unwrap();
            self.owned = a
                .assigned_partitions
                .iter()
                .flat_map(|tp| tp.partitions.clone())
                .collect();
            self.owned.sort();
        }
        r.error_code
    }
}

/// `(type, state)` of `group` as ListGroups v5 lists it.
async fn listed(conn: &mut TcpStream, group: &str) -> Option<(String, String)> {
    let r: ListGroupsResponse =
        call(conn, ApiKey::ListGroups, 5, &ListGroupsRequest::default()).await;
    r.groups
        .iter()
        .find(|l| l.group_id.0.as_str() == group)
        .map(|l| (l.group_type.to_string(), l.group_state.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_group_converts_to_a_consumer_group_and_back_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let g = "migrating";
    let no_delay = ["--set", "group.initial.rebalance.delay.ms=0"];
    let broker = start(dir.path(), &no_delay).await;
    let mut admin = broker.connect().await;
    assert_eq!(create_topic(&mut admin, "t", 4).await.0, 0);
    let mut c = Classic::new(broker.connect().await);
    assert_eq!(c.rejoin(g).await, 0);
    assert_eq!(c.owned, vec![0, 1, 2, 3]);
    let classic_generation = c.generation;
    assert_eq!(
        listed(&mut admin, g).await,
        Some(("classic".into(), "Stable".into()))
    );

    // a member of the consumer protocol joins: the group upgrades, the
    // classic member keeps its partitions until it rejoins
    let (mut n, code) = Member::join(broker.connect().await, g, "n", &["t"]).await;
    assert_eq!(code, 0);
    assert_eq!(
        n.count(),
        0,
        "every partition is still the classic member's"
    );
    assert_eq!(listed(&mut admin, g).await.unwrap().0, "consumer");
    assert_eq!(
        c.heartbeat(g).await,
        ResponseError::RebalanceInProgress.code()
    );
    for _ in 0..8 {
        if c.heartbeat(g).await == ResponseError::RebalanceInProgress.code() {
            assert_eq!(c.rejoin(g).await, 0);
        }
        assert_eq!(n.beat(g).await, 0);
        let cs: BTreeSet<i32> = c.owned.iter().copied().collect();
        let ns: BTreeSet<i32> = n.owns.values().flatten().copied().collect();
        assert!(cs.is_disjoint(&ns), "{cs:?} {ns:?}");
    }
    assert_eq!(c.heartbeat(g).await, 0);
    assert_eq!((c.owned.len(), n.count()), (2, 2), "uniform: 2 each");
    assert!(c.generation > classic_generation);
    assert_eq!(
        listed(&mut admin, g).await,
        Some(("consumer".into(), "Stable".into()))
    );
    // the classic member commits with its generation
    assert_eq!(commit(&mut admin, g, &c.id, c.generation, "t", 7).await, 0);
    assert_eq!(
        commit(&mut admin, g, &c.id, c.generation - 1, "t", 7).await,
        ResponseError::IllegalGeneration.code()
    );
    let d = describe(&mut admin, g).await.groups.remove(0);
    let types: BTreeMap<String, i8> = d
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), m.member_type))
        .collect();
    assert_eq!(
        types,
        BTreeMap::from([(c.id.clone(), 0), ("n".into(), 1)]),
        "classic 0, consumer 1"
    );
    broker.stop().await;

    // a restart replays the converted group, the classic member included
    let broker = start(dir.path(), &no_delay).await;
    let mut admin = broker.connect().await;
    c.conn = broker.connect().await;
    n.conn = broker.connect().await;
    assert_eq!(
        describe(&mut admin, g).await.groups.remove(0).members,
        d.members
    );
    assert_eq!(c.heartbeat(g).await, 0, "its classic metadata was replayed");
    assert_eq!(n.beat(g).await, 0);

    // the consumer member leaves: the group is classic again, rebalancing
    let leave = n.beat_request(g, -1);
    let r = n.send(leave).await;
    assert_eq!((r.error_code, r.member_epoch), (0, -1));
    assert_eq!(
        listed(&mut admin, g).await,
        Some(("classic".into(), "PreparingRebalance".into()))
    );
    assert_eq!(
        c.heartbeat(g).await,
        ResponseError::RebalanceInProgress.code()
    );
    let epoch = c.generation;
    assert_eq!(c.rejoin(g).await, 0);
    assert_eq!(
        c.generation,
        epoch + 1,
        "the classic generation follows the group epoch"
    );
    assert_eq!(c.owned, vec![0, 1, 2, 3]);
    assert_eq!(
        listed(&mut admin, g).await,
        Some(("classic".into(), "Stable".into()))
    );
    broker.stop().await;

    // and a restart replays the classic group
    let broker = start(dir.path(), &no_delay).await;
    let mut admin = broker.connect().await;
    c.conn = broker.connect().await;
    assert_eq!(c.heartbeat(g).await, 0);
    let described: DescribeGroupsResponse = call(
        &mut admin,
        ApiKey::DescribeGroups,
        5,
        &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(g))]),
    )
    .await;
    let dg = &described.groups[0];
    assert_eq!(dg.group_state.as_str(), "Stable");
    assert_eq!(dg.protocol_type.as_str(), "consumer");
    assert_eq!(dg.members.len(), 1);
    assert_eq!(dg.members[0].member_id.as_str(), c.id);
    assert_eq!(fetch(&mut admin, g, None, -1, "t").await, (0, 7));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_static_member_replacing_the_last_consumer_member_downgrades_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let g = "replaced";
    let broker = start(dir.path(), &["--set", "group.initial.rebalance.delay.ms=0"]).await;
    let mut admin = broker.connect().await;
    assert_eq!(create_topic(&mut admin, "t", 4).await.0, 0);
    let mut c = Classic::new(broker.connect().await);
    assert_eq!(c.rejoin(g).await, 0);
    // a static member of the consumer protocol upgrades the group
    let mut sm = Member {
        id: "s".into(),
        epoch: 0,
        owns: Owns::new(),
        conn: broker.connect().await,
    };
    let join = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(g)))
        .with_member_id(s("s"))
        .with_member_epoch(0)
        .with_instance_id(Some(s("si")))
        .with_rebalance_timeout_ms(10_000)
        .with_subscribed_topic_names(Some(vec![name("t")]))
        .with_topic_partitions(Some(vec![]));
    assert_eq!(sm.send(join).await.error_code, 0);
    for _ in 0..6 {
        if c.heartbeat(g).await == ResponseError::RebalanceInProgress.code() {
            assert_eq!(c.rejoin(g).await, 0);
        }
        assert_eq!(sm.beat(g).await, 0);
    }
    assert_eq!((c.owned.len(), sm.count()), (2, 2));
    assert_eq!(listed(&mut admin, g).await.unwrap().0, "consumer");
    // its classic incarnation (same instance id, no member id) takes over:
    // a classic group again, stable, with its partitions
    let mut r = Classic::new(broker.connect().await);
    r.instance = Some("si".into());
    assert_eq!(r.rejoin(g).await, 0);
    assert_ne!(r.id, "s");
    let mut theirs: Vec<i32> = sm.owns.values().flatten().copied().collect();
    theirs.sort();
    assert_eq!(r.owned, theirs, "the replaced member's partitions");
    assert_eq!(
        listed(&mut admin, g).await,
        Some(("classic".into(), "Stable".into()))
    );
    assert_eq!(c.heartbeat(g).await, 0, "no rebalance");
    assert_eq!(r.heartbeat(g).await, 0);
    broker.stop().await;
}

/// A member joining as [`Member::join`] does, naming its rack (`RackId`,
/// the consumer's `client.rack`); retried while the coordinator loads.
async fn join_in_rack(addr: std::net::SocketAddr, group: &str, id: &str, rack: &str) -> Member {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut m = Member {
            id: id.into(),
            epoch: 0,
            owns: Owns::new(),
            conn: TcpStream::connect(addr).await.expect("connect"),
        };
        let req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(id))
            .with_member_epoch(0)
            .with_rack_id(Some(s(rack)))
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![name("t")]))
            .with_topic_partitions(Some(vec![]));
        let code = m.send(req).await.error_code;
        if code == 0 {
            return m;
        }
        assert!(
            [14, 16].contains(&code) && tokio::time::Instant::now() < deadline,
            "join: {code}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Rack-aware assignment on the wire: two brokers in racks `rack-0` and
/// `rack-1`, a topic whose four partitions have one replica each, and a
/// member in each rack. Each member ends up with the two partitions whose
/// replica is in its rack — which the rack-blind assignor would not give
/// them here (the first member would keep partitions 0 and 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_get_the_partitions_whose_replica_shares_their_rack() {
    let g = "racked";
    let dirs = cluster_common::ClusterDirs::new();
    let (brokers, mut probe) = cluster_common::two_brokers(|n| {
        let rack = format!("broker.rack=rack-{n}");
        let settings = [
            "offsets.topic.num.partitions=1",
            "offsets.topic.replication.factor=1",
            rack.as_str(),
        ];
        dirs.start(n, &settings)
    })
    .await;
    let (code, message) = cluster_common::create_replicated(&mut probe, "t", 4, 1, &[]).await;
    assert_eq!(code, 0, "{message:?}");
    let parts = cluster_common::wait_for_partitions(&mut probe, "t", "led", |p| {
        p.len() == 4 && p.values().all(|v| v.leader >= 0)
    })
    .await;
    let in_rack = |node: i32| -> BTreeSet<i32> {
        parts
            .iter()
            .filter(|(_, v)| v.replicas == [node])
            .map(|(p, _)| *p)
            .collect()
    };
    assert_eq!(
        (in_rack(0).len(), in_rack(1).len()),
        (2, 2),
        "replicas spread: {parts:?}"
    );
    let id = topic_id(&mut probe, "t").await;
    let (coord, _) = group_coordinator(&mut probe, g).await;
    let addr = brokers[&coord].kafka;

    // "a" joins first (and gets everything), then "b": the rebalance
    // keeps a's partitions in its rack and moves the others to b
    let mut a = join_in_rack(addr, g, "a", "rack-1").await;
    let mut b = join_in_rack(addr, g, "b", "rack-0").await;
    for _ in 0..6 {
        assert_eq!(a.beat(g).await, 0);
        assert_eq!(b.beat(g).await, 0);
    }
    assert_disjoint(&[&a, &b]);
    let owned = |m: &Member| m.owns.get(&id).cloned().unwrap_or_default();
    assert_eq!(owned(&a), in_rack(1), "a reads from rack-1");
    assert_eq!(owned(&b), in_rack(0), "b reads from rack-0");
    let mut admin = TcpStream::connect(addr).await.expect("connect");
    let d = describe_loaded(&mut admin, g).await;
    let racks: BTreeMap<String, Option<String>> = d
        .members
        .iter()
        .map(|m| {
            (
                m.member_id.to_string(),
                m.rack_id.as_ref().map(|r| r.to_string()),
            )
        })
        .collect();
    assert_eq!(racks["a"].as_deref(), Some("rack-1"));
    assert_eq!(racks["b"].as_deref(), Some("rack-0"));
}
