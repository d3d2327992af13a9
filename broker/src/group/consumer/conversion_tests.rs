//! Online conversion driven as Kafka's clients drive it: a classic group
//! upgraded by a member of the consumer protocol, its classic members
//! rejoining and syncing inside the consumer group until every partition
//! has one owner, the downgrade when the last consumer-protocol member
//! leaves, the policy's refusals, and the records that carry it.

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::assignor::Assignment;
use super::consumer_protocol::tests::subscription;
use super::consumer_protocol::{decode_assignment, encode_assignment};
use super::machine::*;
use super::migration::{ClassicMetadata, MigrationPolicy};
use super::records::{diff, Replay};
use crate::group::state::{
    Group as ClassicGroup, GroupSettings, GroupState, JoinRequest, Member as ClassicMember,
};

const TOPIC: u128 = 1;

fn topics() -> Topics {
    [(
        "orders".to_string(),
        TopicMeta::new("orders", Uuid::from_u128(TOPIC), 4, |_| vec![]),
    )]
    .into()
}

fn parts(ps: &[i32]) -> Assignment {
    [(Uuid::from_u128(TOPIC), ps.iter().copied().collect())].into()
}

fn protocols(owned: &[i32]) -> Vec<(String, Bytes)> {
    let sub = subscription(1, &["orders"], &[("orders", owned)]);
    vec![
        ("range".to_string(), sub.clone()),
        ("cooperative-sticky".to_string(), sub),
    ]
}

fn classic_member(id: &str, assigned: &[i32]) -> ClassicMember {
    ClassicMember {
        id: id.into(),
        group_instance_id: None,
        client_id: format!("client-{id}"),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: protocols(&[]),
        assignment: encode_assignment(&parts(assigned), &topics(), 1),
        last_heartbeat_ms: 0,
        awaiting_join: false,
        awaiting_sync: false,
    }
}

/// A stable classic group at generation 5: c1 owns 0 and 1, c2 2 and 3.
fn classic_group() -> ClassicGroup {
    ClassicGroup::converted(
        "g",
        5,
        "consumer",
        vec![classic_member("c1", &[0, 1]), classic_member("c2", &[2, 3])],
    )
    .unwrap()
}

fn join_req(member: &str, owned: &[i32]) -> JoinRequest {
    JoinRequest {
        member_id: member.into(),
        group_instance_id: None,
        client_id: format!("client-{member}"),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: protocols(owned),
        require_known_member_id: true,
    }
}

fn consumer_join(member: &str) -> Heartbeat {
    Heartbeat {
        member_id: member.into(),
        member_epoch: JOIN_EPOCH,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["orders".into()]),
        owned: Some(Assignment::new()),
        client_id: "new".into(),
        client_host: "/127.0.0.1".into(),
        ..Default::default()
    }
}

fn owned(a: &Assignment) -> Vec<i32> {
    a.values().flatten().copied().collect()
}

/// A classic member as the Java client runs it: it heartbeats with its
/// generation; told to rebalance, it rejoins with what it owns and syncs,
/// keeping (eagerly or cooperatively) only what it is given.
struct ClassicClient {
    id: String,
    generation: i32,
    owned: Vec<i32>,
}

impl ClassicClient {
    fn step(&mut self, g: &mut ConsumerGroup, now: i64) {
        let s = ConsumerSettings::default();
        match g.classic_heartbeat(&self.id, None, self.generation, now) {
            Ok(()) => {}
            Err(ResponseError::RebalanceInProgress) => {
                let r = g
                    .classic_join(&join_req(&self.id, &self.owned), &topics(), &s, now)
                    .unwrap();
                assert_eq!(
                    (r.leader.as_str(), r.members.len()),
                    ("", 0),
                    "nobody leads"
                );
                assert_eq!(r.protocol_name.as_deref(), Some("range"));
                self.generation = r.generation_id;
                match g.classic_sync(
                    &self.id,
                    None,
                    self.generation,
                    Some("consumer"),
                    Some("range"),
                    &topics(),
                    now,
                ) {
                    Ok((_, bytes)) => {
                        let a = decode_assignment(&bytes).unwrap();
                        self.owned = a.into_iter().flat_map(|(_, ps)| ps).collect();
                    }
                    Err(ResponseError::RebalanceInProgress) => {}
                    Err(e) => panic!("sync: {e:?}"),
                }
            }
            Err(e) => panic!("heartbeat of {}: {e:?}", self.id),
        }
    }
}

struct ConsumerClient {
    id: String,
    epoch: i32,
    owned: Assignment,
}

impl ConsumerClient {
    fn step(&mut self, g: &mut ConsumerGroup, now: i64) {
        let hb = Heartbeat {
            member_id: self.id.clone(),
            member_epoch: self.epoch,
            rebalance_timeout_ms: -1,
            owned: Some(self.owned.clone()),
            ..Default::default()
        };
        let a = g
            .heartbeat(hb, &topics(), &ConsumerSettings::default(), now)
            .unwrap();
        self.epoch = a.member_epoch;
        if let Some(asg) = a.assignment {
            self.owned = asg;
        }
    }
}

/// The classic group upgraded by `n`'s join, then run until stable.
fn upgraded_and_settled() -> (ConsumerGroup, Vec<ClassicClient>, ConsumerClient) {
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::from_classic(&classic_group(), &topics(), &s, 0).unwrap();
    let a = g.heartbeat(consumer_join("n"), &topics(), &s, 1).unwrap();
    let mut n = ConsumerClient {
        id: "n".into(),
        epoch: a.member_epoch,
        owned: a.assignment.unwrap_or_default(),
    };
    let mut cs = vec![
        ClassicClient {
            id: "c1".into(),
            generation: 5,
            owned: vec![0, 1],
        },
        ClassicClient {
            id: "c2".into(),
            generation: 5,
            owned: vec![2, 3],
        },
    ];
    for round in 0..10 {
        for c in cs.iter_mut() {
            c.step(&mut g, 10 + round);
        }
        n.step(&mut g, 10 + round);
        // never one partition with two owners
        let mut seen = BTreeSet::new();
        for p in cs
            .iter()
            .flat_map(|c| c.owned.clone())
            .chain(owned(&n.owned))
        {
            assert!(seen.insert(p), "partition {p} owned twice in round {round}");
        }
    }
    (g, cs, n)
}

#[test]
fn a_classic_group_upgrades_with_its_members_assignments() {
    let s = ConsumerSettings::default();
    let g = ConsumerGroup::from_classic(&classic_group(), &topics(), &s, 100).unwrap();
    assert_eq!((g.epoch, g.assignment_epoch), (5, 5));
    let c1 = &g.members["c1"];
    assert_eq!(c1.current.assigned, parts(&[0, 1]));
    assert_eq!((c1.current.epoch, c1.current.previous_epoch), (5, 5));
    assert_eq!(g.target["c2"], parts(&[2, 3]));
    assert_eq!(c1.subscribed_names, vec!["orders".to_string()]);
    assert_eq!(c1.client_id, "client-c1");
    let classic = c1.classic.as_ref().unwrap();
    assert_eq!(classic.session_timeout_ms, 10_000);
    assert_eq!(classic.protocols.len(), 2, "every protocol it joined with");
    assert_eq!(
        c1.session_deadline_ms,
        100 + 10_000,
        "its own session timeout"
    );
    assert_eq!(state_name(&g), "Stable");
}

#[test]
fn upgrades_the_policy_or_the_group_forbids_are_refused_as_kafka_refuses_them() {
    let t = topics();
    for policy in [MigrationPolicy::Downgrade, MigrationPolicy::Disabled] {
        let s = ConsumerSettings {
            migration_policy: policy,
            ..Default::default()
        };
        assert_eq!(
            ConsumerGroup::from_classic(&classic_group(), &t, &s, 0),
            Err(ResponseError::GroupIdNotFound),
            "{policy:?}"
        );
    }
    let s = ConsumerSettings::default();
    let mut other_type = classic_group();
    other_type.protocol_type = Some("connect".into());
    assert_eq!(
        ConsumerGroup::from_classic(&other_type, &t, &s, 0),
        Err(ResponseError::GroupIdNotFound)
    );
    let too_big = ConsumerSettings {
        max_size: 1,
        ..Default::default()
    };
    assert_eq!(
        ConsumerGroup::from_classic(&classic_group(), &t, &too_big, 0),
        Err(ResponseError::GroupIdNotFound)
    );
    // a member that has no assignment yet (the group is mid-rebalance)
    let mut unassigned = classic_group();
    unassigned.members.get_mut("c2").unwrap().assignment = Bytes::new();
    assert_eq!(
        ConsumerGroup::from_classic(&unassigned, &t, &s, 0),
        Err(ResponseError::GroupIdNotFound)
    );
    assert_eq!(
        ConsumerGroup::from_classic(
            &classic_group(),
            &t,
            &ConsumerSettings {
                migration_policy: MigrationPolicy::Upgrade,
                ..Default::default()
            },
            0
        )
        .map(|g| g.members.len()),
        Ok(2)
    );
    assert_eq!(
        MigrationPolicy::parse("BIDIRECTIONAL"),
        Some(MigrationPolicy::Bidirectional)
    );
    assert_eq!(MigrationPolicy::parse("sideways"), None);
}

#[test]
fn classic_members_rejoin_and_sync_until_the_consumer_member_has_its_share() {
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::from_classic(&classic_group(), &topics(), &s, 0).unwrap();
    g.heartbeat(consumer_join("n"), &topics(), &s, 1).unwrap();
    assert_eq!(g.epoch, 6, "the join bumps the epoch");
    // the classic members hear of it through their heartbeats
    assert_eq!(
        g.classic_heartbeat("c1", None, 5, 2),
        Err(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        g.classic_heartbeat("c1", None, 4, 2),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        g.classic_sync("c1", None, 5, None, None, &topics(), 2)
            .map(|_| ()),
        Err(ResponseError::RebalanceInProgress),
        "a sync without a rejoin"
    );
    let (g, cs, n) = upgraded_and_settled();
    let counts: Vec<usize> = cs
        .iter()
        .map(|c| c.owned.len())
        .chain([owned(&n.owned).len()])
        .collect();
    assert_eq!(
        counts.iter().sum::<usize>(),
        4,
        "every partition owned: {counts:?}"
    );
    assert!(
        counts.iter().all(|c| *c >= 1),
        "each member has a share: {counts:?}"
    );
    assert_eq!(state_name(&g), "Stable");
    for c in &cs {
        assert_eq!(c.generation, g.epoch);
        let m = &g.members[&c.id];
        assert_eq!(
            owned(&m.current.assigned),
            c.owned,
            "{}: what it was synced with",
            c.id
        );
    }
}

#[test]
fn a_classic_member_with_partitions_to_revoke_syncs_without_them_first() {
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::from_classic(&classic_group(), &topics(), &s, 0).unwrap();
    g.heartbeat(consumer_join("n"), &topics(), &s, 1).unwrap();
    // whichever classic member gives a partition up: it keeps its
    // generation until it has revoked
    let (id, keep) = ["c1", "c2"]
        .iter()
        .find_map(|id| {
            let target = owned(&g.target[*id]);
            (target.len() < 2).then(|| (id.to_string(), target))
        })
        .expect("one of them gives a partition to n");
    let before = owned(&g.members[&id].current.assigned);
    let r = g
        .classic_join(&join_req(&id, &before), &topics(), &s, 2)
        .unwrap();
    assert_eq!(r.generation_id, 5, "still revoking");
    let (_, bytes) = g
        .classic_sync(&id, None, 5, Some("consumer"), Some("range"), &topics(), 2)
        .unwrap();
    let given: Vec<i32> = decode_assignment(&bytes)
        .unwrap()
        .into_iter()
        .flat_map(|(_, ps)| ps)
        .collect();
    assert_eq!(given, keep, "the sync gives what it keeps");
    assert_eq!(
        g.classic_heartbeat(&id, None, 5, 3),
        Err(ResponseError::RebalanceInProgress)
    );
    // revoked: the rejoin moves it to the group's epoch
    let r = g
        .classic_join(&join_req(&id, &keep), &topics(), &s, 4)
        .unwrap();
    assert_eq!(r.generation_id, 6);
    assert_eq!(g.classic_heartbeat(&id, None, 6, 5), Ok(()));
    // its commits carry the generation: another one is ILLEGAL_GENERATION
    assert_eq!(
        g.check_commit(&id, 5),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(g.check_commit(&id, 6), Ok(()));
    let n_epoch = g.members["n"].current.epoch;
    assert_eq!(
        g.check_commit("n", n_epoch + 1),
        Err(ResponseError::StaleMemberEpoch)
    );
}

#[test]
fn classic_requests_a_consumer_group_refuses() {
    let s = ConsumerSettings::default();
    let (mut g, _, n) = upgraded_and_settled();
    let t = topics();
    let mut connect = join_req("c1", &[]);
    connect.protocol_type = "connect".into();
    assert_eq!(
        g.clone().classic_join(&connect, &t, &s, 50).unwrap_err().0,
        ResponseError::InconsistentGroupProtocol
    );
    let mut roundrobin = join_req("c9", &[]);
    roundrobin.protocols.retain(|(n, _)| n == "range");
    roundrobin.protocols[0].0 = "roundrobin".into();
    assert_eq!(
        g.clone()
            .classic_join(&roundrobin, &t, &s, 50)
            .unwrap_err()
            .0,
        ResponseError::InconsistentGroupProtocol
    );
    // v4+: a new dynamic member first gets its id
    let (e, id) = g
        .clone()
        .classic_join(&join_req("", &[]), &t, &s, 50)
        .unwrap_err();
    assert_eq!(e, ResponseError::MemberIdRequired);
    assert!(!id.is_empty());
    let full = ConsumerSettings {
        max_size: 3,
        ..Default::default()
    };
    assert_eq!(
        g.clone()
            .classic_join(&join_req(&id, &[]), &t, &full, 50)
            .unwrap_err()
            .0,
        ResponseError::GroupMaxSizeReached
    );
    // the consumer member is no classic member
    assert_eq!(
        g.classic_heartbeat("n", None, n.epoch, 50),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        g.classic_sync("n", None, n.epoch, None, None, &t, 50)
            .map(|_| ()),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        g.classic_heartbeat("nobody", None, 1, 50),
        Err(ResponseError::UnknownMemberId)
    );
    let epoch = g.members["c1"].current.epoch;
    assert_eq!(
        g.classic_sync(
            "c1",
            None,
            epoch,
            Some("consumer"),
            Some("cooperative-sticky"),
            &t,
            50
        )
        .map(|_| ()),
        Err(ResponseError::InconsistentGroupProtocol),
        "it joined with range first"
    );
    assert_eq!(
        g.classic_sync("c1", None, epoch, Some("connect"), None, &t, 50)
            .map(|_| ()),
        Err(ResponseError::InconsistentGroupProtocol)
    );
    // static members: an instance id held by another member is fenced
    let mut st = join_req("", &[]);
    st.group_instance_id = Some("i3".into());
    let r = g.classic_join(&st, &t, &s, 60).unwrap();
    assert_eq!(g.members[&r.member_id].instance_id.as_deref(), Some("i3"));
    let mut other = st.clone();
    other.member_id = "someone-else".into();
    assert_eq!(
        g.clone().classic_join(&other, &t, &s, 61).unwrap_err().0,
        ResponseError::FencedInstanceId
    );
    assert_eq!(
        g.classic_heartbeat("someone-else", Some("i3"), r.generation_id, 61),
        Err(ResponseError::FencedInstanceId)
    );
    // a classic LeaveGroup: known, unknown, and a consumer member
    let before = g.epoch;
    let codes = g.classic_leave(
        &[
            ("c1".into(), None),
            ("ghost".into(), None),
            ("n".into(), None),
        ],
        &t,
        &s,
    );
    let unknown = ResponseError::UnknownMemberId.code();
    assert_eq!(codes, vec![0, unknown, unknown]);
    assert!(!g.members.contains_key("c1"));
    assert_eq!(g.epoch, before + 1, "one bump");
}

#[test]
fn the_last_consumer_member_leaving_downgrades_to_a_stable_classic_group() {
    let (g, cs, _) = upgraded_and_settled();
    let s = ConsumerSettings::default();
    assert!(g.downgrades_without("n", &s, usize::MAX));
    assert!(
        !g.downgrades_without("c1", &s, usize::MAX),
        "a classic member leaving changes nothing"
    );
    for policy in [MigrationPolicy::Upgrade, MigrationPolicy::Disabled] {
        let s = ConsumerSettings {
            migration_policy: policy,
            ..Default::default()
        };
        assert!(!g.downgrades_without("n", &s, usize::MAX), "{policy:?}");
    }
    assert!(
        !g.downgrades_without("n", &s, 1),
        "two classic members exceed group.max.size 1"
    );
    let leave = Heartbeat {
        member_id: "n".into(),
        member_epoch: LEAVE_EPOCH,
        ..Default::default()
    };
    assert_eq!(g.leaving_member(&leave).as_deref(), Some("n"));

    let mut classic = g.to_classic("n", &topics(), 500).unwrap();
    assert_eq!(classic.state, GroupState::Stable);
    assert_eq!(classic.generation_id, g.epoch);
    assert_eq!(classic.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(classic.protocol_name.as_deref(), Some("range"));
    assert_eq!(classic.members.len(), 2);
    for c in &cs {
        let m = &classic.members[&c.id];
        let a = decode_assignment(&m.assignment).unwrap();
        assert_eq!(
            a,
            vec![("orders".to_string(), owned(&g.target[&c.id]))],
            "{}: its target",
            c.id
        );
        assert_eq!((m.session_timeout_ms, m.protocols.len()), (10_000, 2));
    }
    // the snapshot the coordinator stores, then the rebalance it starts:
    // the members are told to rejoin
    assert!(classic.snapshot(500).is_some());
    let settings = GroupSettings::default();
    assert!(classic.rebalance(500, &settings).is_empty());
    assert_eq!(classic.state, GroupState::PreparingRebalance);
    assert_eq!(
        classic.heartbeat("c1", None, g.epoch, 501),
        ResponseError::RebalanceInProgress.code()
    );

    // a consumer group of one consumer member does not downgrade
    let mut alone = ConsumerGroup::new("alone");
    alone
        .heartbeat(consumer_join("x"), &topics(), &s, 0)
        .unwrap();
    assert!(!alone.downgrades_without("x", &s, usize::MAX));
}

#[test]
fn classic_members_are_stored_with_their_classic_metadata() {
    let (g, _, _) = upgraded_and_settled();
    let s = ConsumerSettings::default();
    let mut replay = Replay::default();
    for (k, v) in diff("g", None, Some(&g)) {
        replay.apply(k, v);
    }
    let restored = replay
        .into_groups()
        .remove("g")
        .unwrap()
        .restored(1_000, &s);
    for (id, m) in &g.members {
        let r = &restored.members[id];
        assert_eq!(r.classic, m.classic, "{id}");
        assert_eq!(r.current, m.current, "{id}");
        let timeout = m.session_timeout_ms(&s);
        assert_eq!(
            r.session_deadline_ms,
            1_000 + i64::from(timeout),
            "{id}: its own session timeout"
        );
    }
    assert_eq!(restored.members["c1"].session_deadline_ms, 11_000);
    assert_eq!(restored.members["n"].session_deadline_ms, 46_000);

    // the tagged field as Kafka writes ClassicMemberMetadata
    let m = Member {
        id: "m".into(),
        client_id: "c".into(),
        client_host: "h".into(),
        classic: Some(ClassicMetadata {
            session_timeout_ms: 45_000,
            protocols: vec![("range".into(), Bytes::from_static(&[0, 1]))],
        }),
        ..Default::default()
    };
    let mut one = ConsumerGroup::new("g");
    one.members.insert("m".into(), m);
    let (_, value) = diff("g", None, Some(&one))
        .into_iter()
        .find(|(k, _)| k[..2] == [0, 5])
        .unwrap();
    let value = value.unwrap();
    let tail: &[u8] = &[
        0x00, // no server assignor
        0x01, 0x00, 0x11, // one tagged field: tag 0, 17 bytes
        0x01, // not null
        0x00, 0x00, 0xaf, 0xc8, // session timeout 45000
        0x02, 0x06, b'r', b'a', b'n', b'g', b'e', 0x03, 0x00, 0x01, 0x00, // [range, 0x0001]
        0x00, // the struct's tags
    ];
    assert!(value.ends_with(tail), "{value:02x?}");
}

#[test]
fn an_eager_classic_member_that_revoked_everything_moves_on_at_once() {
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::from_classic(&classic_group(), &topics(), &s, 0).unwrap();
    g.heartbeat(consumer_join("n"), &topics(), &s, 1).unwrap();
    let id = ["c1", "c2"]
        .into_iter()
        .find(|id| owned(&g.target[*id]).len() < 2)
        .expect("one of them gives a partition to n");
    // the eager protocol gave up every partition before rejoining: as in
    // Kafka, nothing is left to wait for
    let r = g
        .classic_join(&join_req(id, &[]), &topics(), &s, 2)
        .unwrap();
    assert_eq!(r.generation_id, 6, "no revocation step");
    assert_eq!(
        g.members[id].current.state,
        super::reconcile::MemberState::Stable
    );
    assert_eq!(owned(&g.members[id].current.assigned), owned(&g.target[id]));
    assert_eq!(g.classic_heartbeat(id, None, 6, 3), Ok(()));
}

#[test]
fn a_classic_member_that_does_not_rejoin_or_sync_in_time_is_removed() {
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::from_classic(&classic_group(), &topics(), &s, 0).unwrap();
    g.heartbeat(consumer_join("n"), &topics(), &s, 1).unwrap();
    // told to rejoin at 10: the clock (its rebalance timeout) starts once
    assert_eq!(
        g.classic_heartbeat("c1", None, 5, 10),
        Err(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        g.classic_heartbeat("c1", None, 5, 29_000),
        Err(ResponseError::RebalanceInProgress)
    );
    assert_eq!(g.members["c1"].join_deadline_ms, Some(30_010));
    assert_eq!(
        g.classic_heartbeat("c2", None, 5, 29_000),
        Err(ResponseError::RebalanceInProgress)
    );
    assert!(!g.has_due_member(30_009));
    assert!(g.has_due_member(30_010));
    let mut expired = g.clone();
    assert_eq!(
        expired.expire(30_010, &topics(), &s),
        vec!["c1".to_string()]
    );
    assert!(expired.members.contains_key("c2") && expired.members.contains_key("n"));
    // a rejoin stops that clock and starts the sync's; the sync stops it
    let owned_c2 = owned(&g.members["c2"].current.assigned);
    let r = g
        .classic_join(&join_req("c2", &owned_c2), &topics(), &s, 29_500)
        .unwrap();
    assert_eq!(g.members["c2"].join_deadline_ms, None);
    assert_eq!(g.members["c2"].sync_deadline_ms, Some(29_500 + 30_000));
    g.classic_sync("c2", None, r.generation_id, None, None, &topics(), 29_600)
        .unwrap();
    assert_eq!(g.members["c2"].sync_deadline_ms, None);
}

#[test]
fn a_classic_static_member_replacing_the_last_consumer_member_downgrades_at_once() {
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::from_classic(&classic_group(), &topics(), &s, 0).unwrap();
    let mut hb = consumer_join("s");
    hb.instance_id = Some("si".into());
    g.heartbeat(hb, &topics(), &s, 1).unwrap();
    let old = g.clone();
    assert!(old.downgrades_replacing("s", &s, usize::MAX));
    assert!(
        !old.downgrades_replacing("c1", &s, usize::MAX),
        "c1 is classic"
    );
    assert!(
        !old.downgrades_replacing("s", &s, 2),
        "three members exceed group.max.size 2"
    );
    let upgrade_only = ConsumerSettings {
        migration_policy: MigrationPolicy::Upgrade,
        ..Default::default()
    };
    assert!(!old.downgrades_replacing("s", &upgrade_only, usize::MAX));

    // the classic incarnation of "si" joins without a member id
    let mut req = join_req("", &[]);
    req.group_instance_id = Some("si".into());
    let r = g.classic_join(&req, &topics(), &s, 2).unwrap();
    assert_ne!(r.member_id, "s");
    assert!(!g.members.contains_key("s"), "replaced");
    assert_eq!(
        g.target[&r.member_id], old.target["s"],
        "it takes over the assignment"
    );
    let classic = g.to_classic("", &topics(), 3).unwrap();
    assert_eq!(classic.state, GroupState::Stable);
    assert_eq!(classic.static_members.get("si"), Some(&r.member_id));
    let a = decode_assignment(&classic.members[&r.member_id].assignment).unwrap();
    let expected: Vec<(String, Vec<i32>)> = if old.target["s"].is_empty() {
        vec![]
    } else {
        vec![("orders".to_string(), owned(&old.target["s"]))]
    };
    assert_eq!(a, expected);
}
