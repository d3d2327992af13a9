//! The consumer group state machine driven as members would drive it.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::assignor::Assignment;
use super::machine::*;
use super::records::{diff, Replay, GROUP_METADATA, PARTITION_METADATA};

fn topics(specs: &[(&str, u128, i32)]) -> Topics {
    specs
        .iter()
        .map(|(n, id, p)| {
            (
                n.to_string(),
                TopicMeta::new(n, Uuid::from_u128(*id), *p, |_| vec![]),
            )
        })
        .collect()
}

fn join(member: &str, names: &[&str]) -> Heartbeat {
    Heartbeat {
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(names.iter().map(|s| s.to_string()).collect()),
        owned: Some(Assignment::new()),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        ..Default::default()
    }
}

fn beat(member: &str, epoch: i32, owned: &Assignment) -> Heartbeat {
    Heartbeat {
        member_id: member.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned: Some(owned.clone()),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        ..Default::default()
    }
}

fn count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}

/// Heartbeats `member` as a client would: reporting what it owns (its
/// last assignment) and adopting the answer.
struct Client {
    id: String,
    epoch: i32,
    owned: Assignment,
}

impl Client {
    fn beat(&mut self, g: &mut ConsumerGroup, t: &Topics, s: &ConsumerSettings, now: i64) {
        let a = g
            .heartbeat(beat(&self.id, self.epoch, &self.owned), t, s, now)
            .unwrap();
        self.epoch = a.member_epoch;
        if let Some(asg) = a.assignment {
            self.owned = asg;
        }
    }
}

fn no_partition_twice(clients: &[&Client]) {
    let mut seen = BTreeSet::new();
    for c in clients {
        for (t, ps) in &c.owned {
            for p in ps {
                assert!(seen.insert((*t, *p)), "{t} {p} owned twice");
            }
        }
    }
}

#[test]
fn two_members_converge_without_owning_a_partition_twice() {
    let t = topics(&[("orders", 1, 6)]);
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::new("g");
    let a = g.heartbeat(join("a", &["orders"]), &t, &s, 0).unwrap();
    assert_eq!(a.member_epoch, 1);
    assert_eq!(count(a.assignment.as_ref().unwrap()), 6);
    let mut ca = Client {
        id: "a".into(),
        epoch: 1,
        owned: a.assignment.unwrap(),
    };
    let b = g.heartbeat(join("b", &["orders"]), &t, &s, 1).unwrap();
    assert_eq!(g.epoch, 2);
    assert_eq!(b.member_epoch, 2);
    // b gets nothing yet: a still holds every partition
    assert_eq!(count(b.assignment.as_ref().unwrap()), 0);
    let mut cb = Client {
        id: "b".into(),
        epoch: 2,
        owned: b.assignment.unwrap(),
    };
    assert_eq!(state_name(&g), "Reconciling");
    for now in 2..10 {
        ca.beat(&mut g, &t, &s, now);
        no_partition_twice(&[&ca, &cb]);
        cb.beat(&mut g, &t, &s, now);
        no_partition_twice(&[&ca, &cb]);
    }
    assert_eq!((count(&ca.owned), count(&cb.owned)), (3, 3));
    assert_eq!((ca.epoch, cb.epoch), (2, 2));
    assert_eq!(state_name(&g), "Stable");
}

#[test]
fn leave_and_expiry_move_partitions() {
    let t = topics(&[("orders", 1, 4)]);
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::new("g");
    let mut clients: Vec<Client> = ["a", "b"]
        .iter()
        .map(|id| {
            let a = g.heartbeat(join(id, &["orders"]), &t, &s, 0).unwrap();
            Client {
                id: id.to_string(),
                epoch: a.member_epoch,
                owned: a.assignment.unwrap(),
            }
        })
        .collect();
    for now in 1..6 {
        for c in clients.iter_mut() {
            c.beat(&mut g, &t, &s, now);
        }
    }
    assert_eq!(count(&clients[1].owned), 2);
    // b leaves: a gets everything at its next heartbeat
    let left = g
        .heartbeat(
            beat("b", clients[1].epoch, &clients[1].owned).with_epoch(LEAVE_EPOCH),
            &t,
            &s,
            7,
        )
        .unwrap();
    assert_eq!(left.member_epoch, LEAVE_EPOCH);
    clients[0].beat(&mut g, &t, &s, 8);
    assert_eq!(count(&clients[0].owned), 4);
    // a stops heartbeating: its session ends
    let ended = 8 + i64::from(s.session_timeout_ms);
    assert!(g.expire(ended - 1, &t, &s).is_empty());
    assert_eq!(g.expire(ended, &t, &s), vec!["a".to_string()]);
    assert_eq!(state_name(&g), "Empty");
    // an expired member's next heartbeat is unknown
    let err = g.heartbeat(
        beat("a", clients[0].epoch, &clients[0].owned),
        &t,
        &s,
        ended + 1,
    );
    assert_eq!(err, Err(ResponseError::UnknownMemberId));
}

trait WithEpoch {
    fn with_epoch(self, e: i32) -> Self;
}
impl WithEpoch for Heartbeat {
    fn with_epoch(mut self, e: i32) -> Self {
        self.member_epoch = e;
        self
    }
}

#[test]
fn epochs_are_fenced_as_kafka_fences_them() {
    let t = topics(&[("orders", 1, 2)]);
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::new("g");
    let a = g.heartbeat(join("a", &["orders"]), &t, &s, 0).unwrap();
    let owned = a.assignment.unwrap();
    let ahead = g.heartbeat(beat("a", 5, &owned), &t, &s, 1);
    assert_eq!(ahead, Err(ResponseError::FencedMemberEpoch));
    // b joins: a's epoch moves 1 -> 2 once it reports having revoked
    g.heartbeat(join("b", &["orders"]), &t, &s, 2).unwrap();
    let r = g.heartbeat(beat("a", 1, &owned), &t, &s, 3).unwrap();
    assert_eq!(r.member_epoch, 1, "revoking first");
    let kept = r.assignment.unwrap();
    let r = g.heartbeat(beat("a", 1, &kept), &t, &s, 4).unwrap();
    assert_eq!(r.member_epoch, 2);
    // the previous epoch with a subset of the assignment: the bump was lost
    assert!(g.heartbeat(beat("a", 1, &kept), &t, &s, 5).is_ok());
    // an older epoch, or the previous one owning more: fenced
    assert_eq!(
        g.heartbeat(beat("a", 1, &owned), &t, &s, 6),
        Err(ResponseError::FencedMemberEpoch)
    );
    assert_eq!(
        g.heartbeat(beat("a", -3, &kept), &t, &s, 6).map(|_| ()),
        Err(ResponseError::FencedMemberEpoch)
    );
    assert_eq!(
        g.heartbeat(beat("zz", 3, &kept), &t, &s, 6),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(g.check_commit("a", 2), Ok(()));
    assert_eq!(g.check_commit("a", 1), Err(ResponseError::StaleMemberEpoch));
    assert_eq!(g.check_commit("x", 1), Err(ResponseError::UnknownMemberId));
}

#[test]
fn static_members_leave_and_come_back_and_instances_are_unique() {
    let t = topics(&[("orders", 1, 2)]);
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::new("g");
    let mut j = join("a1", &["orders"]);
    j.instance_id = Some("i".into());
    let a = g.heartbeat(j.clone(), &t, &s, 0).unwrap();
    let owned = a.assignment.unwrap();
    let mut dup = j.clone();
    dup.member_id = "a2".into();
    assert_eq!(
        g.heartbeat(dup.clone(), &t, &s, 1),
        Err(ResponseError::UnreleasedInstanceId)
    );
    let mut leave = beat("a1", 1, &owned).with_epoch(STATIC_LEAVE_EPOCH);
    leave.instance_id = Some("i".into());
    assert_eq!(
        g.heartbeat(leave, &t, &s, 2).unwrap().member_epoch,
        STATIC_LEAVE_EPOCH
    );
    assert_eq!(g.members.len(), 1, "kept for its session");
    let back = g.heartbeat(dup, &t, &s, 3).unwrap();
    assert_eq!(back.member_id, "a2");
    assert_eq!(back.assignment.unwrap(), owned, "same partitions");
    assert!(!g.members.contains_key("a1"));
}

#[test]
fn max_size_regex_and_metadata_changes() {
    let mut t = topics(&[("orders-1", 1, 2), ("other", 2, 1)]);
    let s = ConsumerSettings {
        max_size: 1,
        ..ConsumerSettings::default()
    };
    let mut g = ConsumerGroup::new("g");
    let mut j = join("a", &[]);
    j.subscribed_topic_names = None;
    j.subscribed_topic_regex = Some("orders-.*".into());
    let a = g.heartbeat(j, &t, &s, 0).unwrap();
    assert_eq!(count(a.assignment.as_ref().unwrap()), 2);
    assert_eq!(
        g.heartbeat(join("b", &["other"]), &t, &s, 1),
        Err(ResponseError::GroupMaxSizeReached)
    );
    let mut bad = join("c", &[]);
    bad.subscribed_topic_regex = Some("(".into());
    assert_eq!(
        g.heartbeat(bad, &t, &s, 1),
        Err(ResponseError::InvalidRegularExpression)
    );
    // a matching topic is created: the epoch bumps and it is assigned
    let epoch = g.epoch;
    t.insert(
        "orders-2".into(),
        TopicMeta::new("orders-2", Uuid::from_u128(3), 1, |_| vec![]),
    );
    let r = g
        .heartbeat(
            beat("a", a.member_epoch, a.assignment.as_ref().unwrap()),
            &t,
            &s,
            2,
        )
        .unwrap();
    assert_eq!(g.epoch, epoch + 1);
    assert_eq!(count(r.assignment.as_ref().unwrap()), 3);
}

#[test]
fn records_replay_to_the_same_group() {
    let t = topics(&[("orders", 1, 3)]);
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::new("g");
    let mut log = diff("g", None, None);
    assert!(log.is_empty());
    let before = g.clone();
    g.heartbeat(join("a", &["orders"]), &t, &s, 0).unwrap();
    log.extend(diff("g", Some(&before), Some(&g)));
    let mut before_b = g.clone();
    let mut jb = join("b", &["orders"]);
    jb.instance_id = Some("inst".into());
    jb.server_assignor = Some("range".into());
    g.heartbeat(jb, &t, &s, 1).unwrap();
    log.extend(diff("g", Some(&before_b), Some(&g)));
    before_b = g.clone();
    g.heartbeat(
        beat("a", 1, &Assignment::new()).with_epoch(LEAVE_EPOCH),
        &t,
        &s,
        2,
    )
    .unwrap();
    log.extend(diff("g", Some(&before_b), Some(&g)));
    let mut replay = Replay::default();
    for (k, v) in log.clone() {
        replay.apply(k, v);
    }
    let restored = replay.into_groups().remove("g").unwrap().restored(5, &s);
    let mut expected = g.clone().restored(5, &s);
    expected
        .members
        .values_mut()
        .for_each(|m| m.revoke_deadline_ms = None);
    let mut got = restored.clone();
    got.members
        .values_mut()
        .for_each(|m| m.revoke_deadline_ms = None);
    // the subscribed metadata is not stored (only its hash, KIP-1101)
    assert!(got.subscribed.is_empty());
    expected.subscribed.clear();
    assert_eq!(got, expected);
    // a heartbeat on the same topics after the load finds the same hash:
    // no new epoch
    let mut after = restored.clone();
    let b = &g.members["b"];
    after
        .heartbeat(beat("b", b.current.epoch, &b.current.assigned), &t, &s, 6)
        .unwrap();
    assert_eq!(after.epoch, g.epoch, "no rebalance after a load");
    assert_eq!(after.subscribed, g.subscribed);
    // deleting writes tombstones that remove it
    for (k, v) in diff("g", Some(&g), None) {
        assert!(v.is_none());
        log.push((k, v));
    }
    let mut replay = Replay::default();
    for (k, v) in log {
        replay.apply(k, v);
    }
    assert!(replay.into_groups().is_empty());
}

#[test]
fn partitions_added_or_a_topic_deleted_bump_the_epoch() {
    let mut t = topics(&[("a", 1, 2), ("b", 2, 2)]);
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::new("g");
    let r = g.heartbeat(join("m", &["a", "b"]), &t, &s, 0).unwrap();
    let mut c = Client {
        id: "m".into(),
        epoch: r.member_epoch,
        owned: r.assignment.unwrap(),
    };
    assert_eq!(count(&c.owned), 4);
    t.insert(
        "a".into(),
        TopicMeta::new("a", Uuid::from_u128(1), 3, |_| vec![]),
    );
    c.beat(&mut g, &t, &s, 1);
    assert_eq!((g.epoch, c.epoch, count(&c.owned)), (2, 2, 5));
    t.remove("b");
    c.beat(&mut g, &t, &s, 2);
    // b's partitions are revoked first, then the epoch moves on
    c.beat(&mut g, &t, &s, 3);
    assert_eq!((g.epoch, c.epoch, count(&c.owned)), (3, 3, 3));
    // nothing changed: no bump
    c.beat(&mut g, &t, &s, 4);
    assert_eq!(g.epoch, 3);
}

#[test]
fn a_member_that_does_not_revoke_in_time_is_removed() {
    let t = topics(&[("a", 1, 2)]);
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::new("g");
    let mut j = join("slow", &["a"]);
    j.rebalance_timeout_ms = 1_000;
    let r = g.heartbeat(j, &t, &s, 0).unwrap();
    let owned = r.assignment.unwrap();
    g.heartbeat(join("b", &["a"]), &t, &s, 10).unwrap();
    // slow is told to revoke one partition and never reports it
    let r = g.heartbeat(beat("slow", 1, &owned), &t, &s, 20).unwrap();
    assert_eq!(r.member_epoch, 1);
    assert!(g.expire(1_019, &t, &s).is_empty());
    assert_eq!(g.expire(1_020, &t, &s), vec!["slow".to_string()]);
    assert!(g.members.contains_key("b"));
}

/// KIP-1101 on the wire: the group record as Kafka 4.4 encodes
/// ConsumerGroupMetadataValue (bytes from Kafka's generated class), the
/// hash in tagged field 0 and left out when 0.
#[test]
fn the_group_record_carries_the_metadata_hash_as_kafka_encodes_it() {
    let hex = |v: &[u8]| v.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let mut g = ConsumerGroup::new("g");
    g.epoch = 5;
    g.metadata_hash = -1080693136493417065;
    let records = diff("g", None, Some(&g));
    let (_, value) = records
        .iter()
        .find(|(k, _)| k[..2] == GROUP_METADATA.to_be_bytes())
        .expect("a group record");
    assert_eq!(
        hex(value.as_ref().unwrap()),
        "000000000005010008f1009b51701b6d97"
    );
    g.metadata_hash = 0;
    let records = diff("g", None, Some(&g));
    let (_, value) = records
        .iter()
        .find(|(k, _)| k[..2] == GROUP_METADATA.to_be_bytes())
        .unwrap();
    assert_eq!(hex(value.as_ref().unwrap()), "00000000000500");
    assert!(
        records
            .iter()
            .all(|(k, _)| k[..2] != PARTITION_METADATA.to_be_bytes()),
        "record 4 is no longer written"
    );
}

/// A log written before KIP-1101 (a type-4 record, no hash in the group
/// record): the group loads with the hash of what record 4 held, so the
/// next heartbeat on unchanged topics does not rebalance, and that
/// heartbeat's write deletes record 4.
#[test]
fn a_group_stored_before_kip_1101_loads_without_a_rebalance() {
    use bytes::{BufMut, BytesMut};
    let t = topics(&[("orders", 1, 3)]);
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::new("old");
    g.heartbeat(join("a", &["orders"]), &t, &s, 0).unwrap();
    let mut log = diff("old", None, Some(&g));
    // as the earlier encoding wrote them: no hash, and record 4
    for (k, v) in log.iter_mut() {
        if k[..2] == GROUP_METADATA.to_be_bytes() {
            let mut b = BytesMut::new();
            b.put_i16(0);
            b.put_i32(g.epoch);
            b.put_u8(0);
            *v = Some(b.freeze());
        }
    }
    let key4 = {
        let mut k = BytesMut::new();
        k.put_i16(PARTITION_METADATA);
        k.put_i16(3);
        k.put_slice(b"old");
        k.freeze()
    };
    let value4 = {
        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_u8(2); // one topic
        b.put_slice(Uuid::from_u128(1).as_bytes());
        b.put_u8(7);
        b.put_slice(b"orders");
        b.put_i32(3);
        b.put_u8(1); // no partition racks
        b.put_u8(0);
        b.put_u8(0);
        b.freeze()
    };
    log.push((key4.clone(), Some(value4)));
    let mut replay = Replay::default();
    for (k, v) in log {
        replay.apply(k, v);
    }
    let loaded = replay.into_groups().remove("old").unwrap().restored(1, &s);
    assert!(loaded.legacy_partition_metadata);
    assert_eq!(
        loaded.metadata_hash, g.metadata_hash,
        "the hash of record 4's topics"
    );
    let mut next = loaded.clone();
    let a = &g.members["a"];
    next.heartbeat(beat("a", a.current.epoch, &a.current.assigned), &t, &s, 2)
        .unwrap();
    assert_eq!(next.epoch, g.epoch, "no rebalance");
    let writes = diff("old", Some(&loaded), Some(&next));
    assert!(
        writes.contains(&(key4, None)),
        "the next write deletes record 4: {writes:?}"
    );
}

#[test]
fn members_racks_and_replica_racks_reach_the_assignor() {
    // p0 and p2 have their replica in r1, p1 and p3 in r2
    let t: Topics = [(
        "orders".to_string(),
        TopicMeta::new("orders", Uuid::from_u128(1), 4, |p| {
            vec![if p % 2 == 0 { "r1" } else { "r2" }.to_string()]
        }),
    )]
    .into();
    let s = ConsumerSettings::default();
    let mut g = ConsumerGroup::new("g");
    for (m, rack) in [("a", "r2"), ("b", "r1")] {
        let hb = Heartbeat {
            rack_id: Some(rack.into()),
            ..join(m, &["orders"])
        };
        g.heartbeat(hb, &t, &s, 0).unwrap();
    }
    let id = Uuid::from_u128(1);
    assert_eq!(g.target["a"][&id], [1, 3].into());
    assert_eq!(g.target["b"][&id], [0, 2].into());
    // a member moving to another rack rebalances the group
    let epoch = g.epoch;
    let hb = Heartbeat {
        rack_id: Some("r1".into()),
        ..beat("a", g.members["a"].current.epoch, &Assignment::new())
    };
    g.heartbeat(hb, &t, &s, 1).unwrap();
    assert_eq!(g.epoch, epoch + 1);
    assert!(g.target.values().all(|a| count(a) == 2));
}
