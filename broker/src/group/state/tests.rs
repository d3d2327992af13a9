//! Unit tests of the classic group state machine (`state::machine`) and
//! of a settled group's snapshot and restore (`state::snapshot`), with a
//! controllable clock.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

use super::*;

fn settings() -> GroupSettings {
    GroupSettings {
        initial_rebalance_delay_ms: 0,
        ..GroupSettings::default()
    }
}

fn join_req(member: &str, instance: Option<&str>, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        member_id: member.into(),
        group_instance_id: instance.map(String::from),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(format!("meta-{p}"))))
            .collect(),
        require_known_member_id: true,
    }
}

fn joined(effects: &[Effect]) -> Vec<JoinResult> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Join { result, .. } => Some(result.clone()),
            _ => None,
        })
        .collect()
}

/// Runs the two-step join of a new dynamic member; returns its id.
fn join_new(g: &mut Group, now: i64) -> (String, Vec<Effect>) {
    let (r, _) = g.join(join_req("", None, &["range"]), now, &settings());
    let Reply::Now(first) = r else {
        panic!("expected MEMBER_ID_REQUIRED")
    };
    assert_eq!(first.error, ResponseError::MemberIdRequired.code());
    let id = first.member_id.clone();
    let (r, effects) = g.join(join_req(&id, None, &["range"]), now, &settings());
    assert!(matches!(r, Reply::Later(_)));
    (id, effects)
}

#[test]
fn single_member_forms_a_generation_and_syncs() {
    let mut g = Group::new("g");
    let (id, effects) = join_new(&mut g, 0);
    let results = joined(&effects);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].generation_id, 1);
    assert_eq!(results[0].leader, id);
    assert_eq!(results[0].members.len(), 1);
    assert_eq!(results[0].protocol_name.as_deref(), Some("range"));
    assert_eq!(g.state, GroupState::CompletingRebalance);
    let (r, _) = g.sync(
        &id,
        None,
        1,
        Some("consumer"),
        Some("range"),
        vec![(id.clone(), Bytes::from_static(b"A"))],
        1,
    );
    let Reply::Now(s) = r else { panic!() };
    assert_eq!(s.error, 0);
    assert_eq!(&s.assignment[..], b"A");
    assert_eq!(g.state, GroupState::Stable);
    assert_eq!(g.heartbeat(&id, None, 1, 2), 0);
}

#[test]
fn a_settled_group_is_restored_with_its_members_in_the_same_generation() {
    let mut g = Group::new("g");
    let (id, _) = join_new(&mut g, 0);
    assert_eq!(g.snapshot(0), None, "a rebalance is not stored");
    g.sync(
        &id,
        None,
        1,
        Some("consumer"),
        Some("range"),
        vec![(id.clone(), Bytes::from_static(b"A"))],
        1,
    );
    let stored = g.snapshot(5).expect("a stable group is stored");
    assert_eq!((stored.generation, stored.members.len()), (1, 1));
    assert_eq!(&stored.members[0].subscription[..], b"meta-range");
    // through the record codec, as a new coordinator reads it
    let read = crate::group::metadata::decode_value(crate::group::metadata::encode_value(&stored))
        .unwrap();
    let mut r = Group::restore("g", &read, 1_000);
    assert_eq!(r.state, GroupState::Stable);
    assert_eq!(r.leader.as_deref(), Some(id.as_str()));
    // the member goes on in its generation: no rejoin, commits accepted
    assert_eq!(r.heartbeat(&id, None, 1, 1_001), 0);
    assert!(r.check_member(&id, None, 1).is_ok());
    assert_eq!(
        r.heartbeat("someone-else", None, 1, 1_001),
        ResponseError::UnknownMemberId.code()
    );
    // its session starts at the take-over
    r.tick(1_000 + 9_999, &settings());
    assert_eq!(r.state, GroupState::Stable);
    r.tick(1_000 + 10_001, &settings());
    assert_ne!(r.state, GroupState::Stable, "the session expired");
    // a rejoin of the restored member with its protocol keeps the group
    let mut r = Group::restore("g", &read, 0);
    let (reply, _) = r.join(join_req(&id, None, &["range"]), 1, &settings());
    assert!(matches!(reply, Reply::Now(_)) || matches!(reply, Reply::Later(_)));
    // an empty group keeps its generation
    let empty = crate::group::metadata::GroupSnapshot {
        members: vec![],
        ..read
    };
    let e = Group::restore("g", &empty, 0);
    assert_eq!((e.state, e.generation_id), (GroupState::Empty, 1));
}

#[test]
fn second_member_triggers_rebalance_and_follower_waits_for_leader() {
    let mut g = Group::new("g");
    let (a, _) = join_new(&mut g, 0);
    g.sync(
        &a,
        None,
        1,
        None,
        None,
        vec![(a.clone(), Bytes::from_static(b"all"))],
        0,
    );
    let (b, effects) = join_new(&mut g, 10);
    assert!(joined(&effects).is_empty(), "a has not rejoined yet");
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert_eq!(
        g.heartbeat(&a, None, 1, 11),
        ResponseError::RebalanceInProgress.code()
    );
    let (r, effects) = g.join(join_req(&a, None, &["range"]), 12, &settings());
    assert!(matches!(r, Reply::Later(_)));
    let results = joined(&effects);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r.generation_id == 2));
    let leader = results[0].leader.clone();
    assert_eq!(leader, a, "the leader is kept across generations");
    let follower = b.clone();
    let (r, _) = g.sync(&follower, None, 2, None, None, vec![], 13);
    assert!(matches!(r, Reply::Later(_)));
    let (r, effects) = g.sync(
        &leader,
        None,
        2,
        None,
        None,
        vec![
            (a.clone(), Bytes::from_static(b"p0")),
            (b.clone(), Bytes::from_static(b"p1")),
        ],
        14,
    );
    assert!(matches!(r, Reply::Now(SyncResult { error: 0, .. })));
    assert_eq!(
        effects,
        vec![Effect::Sync {
            member_id: b.clone(),
            result: SyncResult {
                error: 0,
                protocol_type: Some("consumer".into()),
                protocol_name: Some("range".into()),
                assignment: Bytes::from_static(b"p1")
            }
        }]
    );
}

#[test]
fn errors_for_unknown_member_illegal_generation_and_inconsistent_protocol() {
    let mut g = Group::new("g");
    let (a, _) = join_new(&mut g, 0);
    assert_eq!(
        g.heartbeat("nobody", None, 1, 1),
        ResponseError::UnknownMemberId.code()
    );
    assert_eq!(
        g.heartbeat(&a, None, 7, 1),
        ResponseError::IllegalGeneration.code()
    );
    let (r, _) = g.join(join_req("ghost", None, &["range"]), 1, &settings());
    assert!(
        matches!(r, Reply::Now(JoinResult { error, .. }) if error == ResponseError::UnknownMemberId.code())
    );
    let mut other = join_req("", None, &["roundrobin"]);
    other.require_known_member_id = false;
    let (r, _) = g.join(other, 1, &settings());
    assert!(
        matches!(r, Reply::Now(JoinResult { error, .. }) if error == ResponseError::InconsistentGroupProtocol.code())
    );
    let mut wrong_type = join_req("", None, &["range"]);
    wrong_type.protocol_type = "connect".into();
    let (r, _) = g.join(wrong_type, 1, &settings());
    assert!(
        matches!(r, Reply::Now(JoinResult { error, .. }) if error == ResponseError::InconsistentGroupProtocol.code())
    );
    let mut bad_timeout = join_req("", None, &["range"]);
    bad_timeout.session_timeout_ms = 10;
    let (r, _) = g.join(bad_timeout, 1, &settings());
    assert!(
        matches!(r, Reply::Now(JoinResult { error, .. }) if error == ResponseError::InvalidSessionTimeout.code())
    );
    let mut huge = join_req("", None, &["range"]);
    huge.protocols = vec![("range".into(), Bytes::from(vec![0u8; 2 * 1024 * 1024]))];
    let (r, _) = g.join(huge, 1, &settings());
    assert!(
        matches!(r, Reply::Now(JoinResult { error, .. }) if error == ResponseError::InvalidRequest.code())
    );
}

#[test]
fn session_expiry_removes_member_and_rebalances_the_rest() {
    let mut g = Group::new("g");
    let (a, _) = join_new(&mut g, 0);
    let (b, _) = join_new(&mut g, 0);
    let (_, effects) = g.join(join_req(&a, None, &["range"]), 0, &settings());
    let leader = joined(&effects)[0].leader.clone();
    let gen = g.generation_id;
    g.sync(&leader, None, gen, None, None, vec![], 1);
    assert_eq!(g.state, GroupState::Stable);
    // Only a heartbeats; b's session (10 s) runs out.
    assert_eq!(g.heartbeat(&a, None, gen, 9_000), 0);
    assert!(g.tick(9_999, &settings()).is_empty());
    let effects = g.tick(10_001, &settings());
    assert!(!g.members.contains_key(&b));
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert!(joined(&effects).is_empty());
    let (_, effects) = g.join(join_req(&a, None, &["range"]), 10_002, &settings());
    let results = joined(&effects);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].generation_id, gen + 1);
}

#[test]
fn member_crashing_mid_rebalance_is_dropped_at_the_rebalance_timeout() {
    let mut g = Group::new("g");
    let (a, _) = join_new(&mut g, 0);
    let (b, _) = join_new(&mut g, 0);
    let (_, effects) = g.join(join_req(&a, None, &["range"]), 0, &settings());
    assert_eq!(joined(&effects).len(), 2);
    let gen = g.generation_id;
    let leader = g.leader.clone().unwrap();
    g.sync(&leader, None, gen, None, None, vec![], 1);
    // A third member joins; b never rejoins (crashed).
    let (c, _) = join_new(&mut g, 100);
    let _ = c;
    let (_, effects) = g.join(join_req(&a, None, &["range"]), 101, &settings());
    assert!(joined(&effects).is_empty(), "still waiting for b");
    let effects = g.tick(100 + 30_000, &settings());
    let results = joined(&effects);
    assert_eq!(
        results.len(),
        2,
        "a and c complete the generation without b"
    );
    assert!(!g.members.contains_key(&b));
}

#[test]
fn leave_group_batch_and_empty_group() {
    let mut g = Group::new("g");
    let (a, _) = join_new(&mut g, 0);
    let (codes, _) = g.leave(
        &[(a.clone(), None), ("nobody".into(), None)],
        1,
        &settings(),
    );
    assert_eq!(codes, vec![0, ResponseError::UnknownMemberId.code()]);
    assert_eq!(g.state, GroupState::Empty);
    assert!(g.delete().is_ok());
    assert_eq!(g.state, GroupState::Dead);
}

#[test]
fn delete_refuses_non_empty_group() {
    let mut g = Group::new("g");
    join_new(&mut g, 0);
    assert_eq!(g.delete(), Err(ResponseError::NonEmptyGroup));
}

#[test]
fn static_member_rejoins_without_rebalance_and_old_id_is_fenced() {
    let mut g = Group::new("g");
    let (r, effects) = g.join(join_req("", Some("pod-0"), &["range"]), 0, &settings());
    assert!(matches!(r, Reply::Later(_)));
    let first = joined(&effects)[0].clone();
    let old_id = first.member_id.clone();
    g.sync(
        &old_id,
        Some("pod-0"),
        1,
        None,
        None,
        vec![(old_id.clone(), Bytes::from_static(b"mine"))],
        1,
    );
    assert_eq!(g.state, GroupState::Stable);
    // The pod restarts: same instance id, empty member id.
    let (r, effects) = g.join(join_req("", Some("pod-0"), &["range"]), 5, &settings());
    let Reply::Now(again) = r else {
        panic!("expected an immediate answer")
    };
    assert!(effects.is_empty());
    assert_eq!(again.error, 0);
    assert_eq!(again.generation_id, 1, "no new generation");
    assert!(
        again.skip_assignment,
        "the restarted leader keeps the assignment (KIP-814)"
    );
    assert_eq!(again.members.len(), 1, "but learns the members");
    assert_ne!(again.member_id, old_id);
    assert_eq!(g.state, GroupState::Stable);
    let (r, _) = g.sync(&again.member_id, Some("pod-0"), 1, None, None, vec![], 6);
    assert!(
        matches!(r, Reply::Now(SyncResult { ref assignment, .. }) if &assignment[..] == b"mine")
    );
    assert_eq!(
        g.heartbeat(&old_id, Some("pod-0"), 1, 7),
        ResponseError::FencedInstanceId.code()
    );
}

#[test]
fn static_rejoin_with_new_metadata_but_same_protocol_keeps_the_generation() {
    let mut g = Group::new("g");
    let (_, effects) = g.join(join_req("", Some("pod-0"), &["range"]), 0, &settings());
    let id = joined(&effects)[0].member_id.clone();
    g.sync(
        &id,
        Some("pod-0"),
        1,
        None,
        None,
        vec![(id.clone(), Bytes::from_static(b"a"))],
        1,
    );
    let mut again = join_req("", Some("pod-0"), &["range"]);
    again.protocols = vec![(
        "range".into(),
        Bytes::from_static(b"no owned partitions now"),
    )];
    let (r, _) = g.join(again, 2, &settings());
    assert!(matches!(
        r,
        Reply::Now(JoinResult {
            generation_id: 1,
            ..
        })
    ));
    assert_eq!(g.state, GroupState::Stable);
    // A protocol the group would not select any more forces a rebalance.
    let other = join_req("", Some("pod-0"), &["roundrobin", "range"]);
    let (r, _) = g.join(other, 3, &settings());
    assert!(matches!(r, Reply::Later(_)));
}

#[test]
fn initial_rebalance_delay_waits_for_more_members() {
    let s = GroupSettings {
        initial_rebalance_delay_ms: 3_000,
        ..GroupSettings::default()
    };
    let mut g = Group::new("g");
    let mut req = join_req("", None, &["range"]);
    req.require_known_member_id = false;
    let (_, effects) = g.join(req.clone(), 0, &s);
    assert!(joined(&effects).is_empty());
    let (_, effects) = g.join(req, 1_000, &s);
    assert!(joined(&effects).is_empty());
    assert!(joined(&g.tick(2_999, &s)).is_empty());
    let results = joined(&g.tick(3_000, &s));
    assert_eq!(results.len(), 2);
}

#[test]
fn protocol_selection_follows_member_preferences() {
    let mut g = Group::new("g");
    let mut r1 = join_req("", None, &["cooperative-sticky", "range"]);
    r1.require_known_member_id = false;
    let mut r2 = join_req("", None, &["range", "cooperative-sticky"]);
    r2.require_known_member_id = false;
    let mut r3 = join_req("", None, &["cooperative-sticky"]);
    r3.require_known_member_id = false;
    let s = GroupSettings {
        initial_rebalance_delay_ms: 100,
        ..GroupSettings::default()
    };
    g.join(r1, 0, &s);
    g.join(r2, 0, &s);
    g.join(r3, 0, &s);
    let results = joined(&g.tick(100, &s));
    assert_eq!(results.len(), 3);
    assert_eq!(
        results[0].protocol_name.as_deref(),
        Some("cooperative-sticky")
    );
}

#[test]
fn an_emptied_group_keeps_its_protocol_type_and_a_new_first_member_sets_it() {
    let mut g = Group::new("g");
    assert_eq!(g.protocol_type, None, "never had a member");
    let (a, _) = join_new(&mut g, 0);
    assert_eq!(g.protocol_type.as_deref(), Some("consumer"));
    g.leave(&[(a, None)], 1, &settings());
    assert_eq!(g.state, GroupState::Empty);
    assert_eq!(
        g.protocol_type.as_deref(),
        Some("consumer"),
        "kept after the last member left, as in Kafka"
    );
    let stored = g.snapshot(2).expect("an empty group is stored");
    assert_eq!(stored.protocol_type, "consumer");
    let restored = Group::restore("g", &stored, 3);
    assert_eq!(restored.protocol_type.as_deref(), Some("consumer"));

    // an empty group takes the type of its next first member
    let mut other = join_req("", None, &["range"]);
    other.protocol_type = "connect".into();
    let (r, _) = g.join(other.clone(), 4, &settings());
    let Reply::Now(first) = r else {
        panic!("expected MEMBER_ID_REQUIRED")
    };
    other.member_id = first.member_id;
    let (r, _) = g.join(other, 4, &settings());
    assert!(matches!(r, Reply::Later(_)));
    assert_eq!(g.protocol_type.as_deref(), Some("connect"));

    // a member whose session ran out empties the group just the same
    let mut h = Group::new("h");
    join_new(&mut h, 0);
    let gen = h.generation_id;
    let leader = h.leader.clone().unwrap();
    h.sync(&leader, None, gen, None, None, vec![], 1);
    h.tick(60_000, &settings());
    assert_eq!(h.state, GroupState::Empty);
    assert_eq!(h.protocol_type.as_deref(), Some("consumer"));
}
