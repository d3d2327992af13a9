//! Tests of the transaction state machine: every transition, every
//! refusal with its code, fencing, retries, and the version differences.

use super::*;
use crate::txn::log_record::TopicPartitions;

const NOW: i64 = 1_000_000;
const TID: &str = "txn-a";
const PID: i64 = 100;
const MAX: i16 = i16::MAX;
use TransactionVersion::{V0, V1, V2};

fn ids_from(start: i64) -> impl FnMut() -> Result<i64, ResponseError> {
    let mut next = start;
    move || {
        next += 1;
        Ok(next - 1)
    }
}

/// An allocator that must not be used: any call shows up as this error.
fn no_ids() -> impl FnMut() -> Result<i64, ResponseError> {
    || Err(ResponseError::ClusterAuthorizationFailed)
}

fn tps(list: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
    list.iter()
        .map(|(t, p)| TopicPartition::new(*t, *p))
        .collect()
}

fn plan<R: std::fmt::Debug>(d: Decision<R>) -> Plan<R> {
    match d {
        Decision::Persist(p) => p,
        other => panic!("expected a plan, got {other:?}"),
    }
}

/// Decides on `meta`, then begins and applies the plan's transit, as the
/// runtime does on success.
fn persist<R: std::fmt::Debug>(
    meta: &mut TransactionMetadata,
    decide: impl FnOnce(&TransactionMetadata) -> Decision<R>,
) -> Plan<R> {
    let p = plan(decide(meta));
    meta.begin(&p.transit).unwrap();
    meta.apply(&p.transit).unwrap();
    p
}

/// Writes every marker of a prepared transaction and completes it.
fn finish_markers(meta: &mut TransactionMetadata, now: i64) -> MarkerPlan {
    let markers = meta.marker_plan().expect("prepared");
    let done = meta.begin_completion(now).unwrap();
    let mut all = markers.partitions.is_empty();
    for tp in &markers.partitions {
        all = meta.marker_written(tp);
    }
    assert!(all, "every partition marked");
    meta.apply(&done).unwrap();
    markers
}

/// Metadata as loaded from a log value in `state`.
fn loaded(
    state: TxnState,
    epoch: i16,
    partitions: &[(&str, i32)],
    tv: TransactionVersion,
) -> TransactionMetadata {
    let v = TxnLogValue {
        producer_id: PID,
        producer_epoch: epoch,
        timeout_ms: 60_000,
        status: state.id(),
        partitions: Some(TxnLogValue::group_partitions(&tps(partitions))),
        last_update_ms: 10,
        start_ms: if state == TxnState::Empty { -1 } else { 10 },
        client_transaction_version: tv.feature_level(),
        ..TxnLogValue::default()
    };
    TransactionMetadata::from_log(TID, &v).unwrap()
}

fn init_req(expected: Option<(i64, i16)>) -> InitProducerId {
    InitProducerId {
        timeout_ms: 30_000,
        expected: expected.map(|(p, e)| ProducerIdAndEpoch::new(p, e)),
    }
}

fn init(
    meta: &TransactionMetadata,
    expected: Option<(i64, i16)>,
    cluster_tv: TransactionVersion,
) -> Result<Decision<InitReply>, ResponseError> {
    init_producer_id(meta, &init_req(expected), cluster_tv, NOW, &mut no_ids())
}

fn add(
    meta: &TransactionMetadata,
    epoch: i16,
    list: &[(&str, i32)],
    tv: TransactionVersion,
) -> Result<Decision<()>, ResponseError> {
    let req = AddPartitions {
        producer: ProducerIdAndEpoch::new(meta.producer_id(), epoch),
        partitions: tps(list),
        client_tv: tv,
    };
    add_partitions(Some(meta), &req, NOW + 1)
}

fn end(
    meta: &TransactionMetadata,
    pid: i64,
    epoch: i16,
    result: TxnResult,
    tv: TransactionVersion,
) -> Result<Decision<ProducerIdAndEpoch>, ResponseError> {
    let req = EndTxn {
        producer: ProducerIdAndEpoch::new(pid, epoch),
        result,
        client_tv: tv,
    };
    end_txn(Some(meta), &req, NOW + 2, &mut no_ids())
}

/// A new id initialised to epoch 0, then given two partitions.
fn ongoing(tv: TransactionVersion) -> TransactionMetadata {
    let mut meta = TransactionMetadata::new(TID, PID, 60_000, NOW);
    persist(&mut meta, |m| init(m, None, V2).unwrap());
    persist(&mut meta, |m| add(m, 0, &[("t", 0), ("t", 1)], tv).unwrap());
    meta
}

// ---- states -------------------------------------------------------------

#[test]
fn state_ids_names_and_transitions_are_kafkas() {
    use TxnState::*;
    let expected = [
        (Empty, 0, "Empty"),
        (Ongoing, 1, "Ongoing"),
        (PrepareCommit, 2, "PrepareCommit"),
        (PrepareAbort, 3, "PrepareAbort"),
        (CompleteCommit, 4, "CompleteCommit"),
        (CompleteAbort, 5, "CompleteAbort"),
        (Dead, 6, "Dead"),
        (PrepareEpochFence, 7, "PrepareEpochFence"),
    ];
    for (s, id, name) in expected {
        assert_eq!((s.id(), s.name()), (id, name));
        assert_eq!(TxnState::from_id(id), Some(s));
        assert_eq!(TxnState::from_name(name), Some(s));
    }
    assert_eq!(TxnState::from_id(8), None);
    assert_eq!(TxnState::from_id(-1), None);
    assert_eq!(TxnState::from_name("empty"), None);

    let allowed: Vec<(TxnState, TxnState)> = TxnState::ALL
        .iter()
        .flat_map(|a| TxnState::ALL.iter().map(move |b| (*a, *b)))
        .filter(|(a, b)| a.can_transition_to(*b))
        .collect();
    let table = [
        (Empty, Empty),
        (CompleteCommit, Empty),
        (CompleteAbort, Empty),
        (Ongoing, Ongoing),
        (Empty, Ongoing),
        (CompleteCommit, Ongoing),
        (CompleteAbort, Ongoing),
        (Ongoing, PrepareCommit),
        (Ongoing, PrepareAbort),
        (PrepareEpochFence, PrepareAbort),
        (Empty, PrepareAbort),
        (CompleteCommit, PrepareAbort),
        (CompleteAbort, PrepareAbort),
        (PrepareCommit, CompleteCommit),
        (PrepareAbort, CompleteAbort),
        (Empty, Dead),
        (CompleteCommit, Dead),
        (CompleteAbort, Dead),
        (Ongoing, PrepareEpochFence),
    ];
    assert_eq!(allowed.len(), table.len());
    for pair in table {
        assert!(allowed.contains(&pair), "{pair:?} must be allowed");
    }
    for s in TxnState::ALL {
        assert_eq!(
            s.expiration_allowed(),
            matches!(s, Empty | CompleteCommit | CompleteAbort)
        );
    }
}

#[test]
fn begin_refuses_invalid_or_concurrent_transitions() {
    let mut meta = TransactionMetadata::new(TID, PID, 60_000, NOW);
    let p = plan(init(&meta, None, V2).unwrap());
    // Empty cannot go straight to PrepareCommit.
    let mut bad = p.transit.clone();
    bad.state = TxnState::PrepareCommit;
    assert_eq!(
        meta.begin(&bad).unwrap_err().reason,
        "not a valid previous state"
    );
    let mut neg = p.transit.clone();
    neg.producer_epoch = -1;
    assert!(meta.begin(&neg).is_err());
    let mut neg_pid = p.transit.clone();
    neg_pid.producer_id = -1;
    assert!(meta.begin(&neg_pid).is_err());
    meta.begin(&p.transit).unwrap();
    assert_eq!(meta.pending(), Some(TxnState::Empty));
    let again = meta.begin(&p.transit).unwrap_err();
    assert_eq!(again.reason, "another transition is pending");
    assert_eq!(again.code(), ResponseError::UnknownServerError);
}

#[test]
fn apply_refuses_what_is_not_pending_or_not_consistent() {
    let mut meta = TransactionMetadata::new(TID, PID, 60_000, NOW);
    let p = plan(init(&meta, None, V2).unwrap());
    assert!(meta.apply(&p.transit).is_err(), "not begun");
    meta.begin(&p.transit).unwrap();
    let mut jump = p.transit.clone();
    jump.producer_epoch = 5;
    assert!(meta.apply(&jump).is_err(), "epoch jumps by more than one");
    meta.apply(&p.transit).unwrap();

    // An Ongoing transit that changes the timeout is refused.
    let mut a = plan(add(&meta, 0, &[("t", 0)], V0).unwrap()).transit;
    meta.begin(&a).unwrap();
    a.timeout_ms += 1;
    assert!(meta.apply(&a).is_err());
    meta.abandon(&a);
    assert_eq!(meta.pending(), None);
    assert_eq!(meta.state(), TxnState::Empty);

    // Dead is never applied, even when pending.
    let dead = expire(&meta, NOW + 10_000_000, 1).unwrap();
    meta.begin(&dead).unwrap();
    assert!(meta.apply(&dead).is_err());
}

// ---- InitProducerId -------------------------------------------------------

#[test]
fn a_new_transactional_id_gets_epoch_zero() {
    let mut meta = TransactionMetadata::new(TID, PID, 60_000, NOW);
    assert_eq!(meta.producer_epoch(), NO_PRODUCER_EPOCH);
    let p = persist(&mut meta, |m| init(m, None, V2).unwrap());
    assert_eq!(p.reply, Ok(ProducerIdAndEpoch::new(PID, 0)));
    assert_eq!(p.then, AfterPersist::Reply);
    assert_eq!(p.transit.kind, TransitKind::InitProducerId);
    assert_eq!(meta.state(), TxnState::Empty);
    assert_eq!(meta.producer(), ProducerIdAndEpoch::new(PID, 0));
    assert_eq!(meta.timeout_ms(), 30_000, "the request's timeout");
    assert_eq!(meta.start_ms(), -1);
}

#[test]
fn init_bumps_the_epoch_from_empty_and_completed_states() {
    for state in [
        TxnState::Empty,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
    ] {
        let mut meta = loaded(state, 4, &[], V0);
        let p = persist(&mut meta, |m| init(m, None, V0).unwrap());
        assert_eq!(p.reply, Ok(ProducerIdAndEpoch::new(PID, 5)), "{state:?}");
        assert_eq!(meta.state(), TxnState::Empty);
        assert_eq!(meta.last_producer_epoch(), NO_PRODUCER_EPOCH);
        assert_eq!(meta.prev_producer_id(), PID);
        assert_eq!(meta.last_update_ms(), NOW);
    }
}

#[test]
fn init_waits_for_pending_and_prepared_transactions() {
    for state in [TxnState::PrepareCommit, TxnState::PrepareAbort] {
        let meta = loaded(state, 1, &[("t", 0)], V0);
        assert_eq!(
            init(&meta, None, V2).unwrap_err(),
            ResponseError::ConcurrentTransactions
        );
    }
    let mut meta = loaded(TxnState::Empty, 1, &[], V0);
    let p = plan(init(&meta, None, V2).unwrap());
    meta.begin(&p.transit).unwrap();
    // Pending wins even over a fencing expected producer.
    assert_eq!(
        init(&meta, Some((999, 0)), V2).unwrap_err(),
        ResponseError::ConcurrentTransactions
    );
}

#[test]
fn init_fences_an_ongoing_transaction_under_the_classic_rules() {
    let mut meta = ongoing(V0);
    let zombie = meta.producer();
    let p = plan(init(&meta, None, V1).unwrap());
    assert_eq!(p.reply, Err(ResponseError::ConcurrentTransactions));
    assert_eq!(p.then, AfterPersist::SendMarkers(TxnResult::Abort));
    let t = &p.transit;
    assert_eq!(t.kind, TransitKind::Fence);
    assert_eq!(t.state, TxnState::PrepareAbort);
    assert_eq!((t.producer_epoch, t.last_producer_epoch), (1, -1));
    assert_eq!(t.client_tv, V0);
    assert_eq!(t.partitions, tps(&[("t", 0), ("t", 1)]));

    meta.begin(t).unwrap();
    // The bump is in effect while the abort is written: the zombie's end is
    // fenced, its adds and the new producer's retries wait.
    assert_eq!(meta.producer_epoch(), 1);
    assert_eq!(
        end(&meta, PID, zombie.epoch, TxnResult::Commit, V0).unwrap_err(),
        ResponseError::ProducerFenced
    );
    assert_eq!(
        add(&meta, zombie.epoch, &[("u", 0)], V0).unwrap_err(),
        ResponseError::ConcurrentTransactions
    );
    assert_eq!(
        init(&meta, None, V1).unwrap_err(),
        ResponseError::ConcurrentTransactions
    );
    meta.apply(t).unwrap();
    let markers = finish_markers(&mut meta, NOW + 5);
    assert_eq!(
        (markers.result, markers.producer_epoch),
        (TxnResult::Abort, 1)
    );
    assert_eq!(meta.state(), TxnState::CompleteAbort);
    assert!(meta.partitions().is_empty());

    // The zombie is fenced for good; the new producer's retry succeeds.
    assert_eq!(
        add(&meta, zombie.epoch, &[("u", 0)], V0).unwrap_err(),
        ResponseError::ProducerFenced
    );
    assert_eq!(
        end(&meta, PID, zombie.epoch, TxnResult::Abort, V0).unwrap_err(),
        ResponseError::ProducerFenced
    );
    let p = persist(&mut meta, |m| init(m, None, V1).unwrap());
    assert_eq!(p.reply, Ok(ProducerIdAndEpoch::new(PID, 2)));
}

#[test]
fn init_fences_an_ongoing_transaction_with_a_single_bump_under_tv2() {
    let mut meta = ongoing(V2);
    let p = plan(init(&meta, None, V2).unwrap());
    let t = &p.transit;
    assert_eq!(t.state, TxnState::PrepareAbort);
    assert_eq!((t.producer_epoch, t.last_producer_epoch), (1, 0));
    assert_eq!(t.client_tv, V2);
    assert_eq!(t.next_producer_id, NO_PRODUCER_ID);
    meta.begin(t).unwrap();
    assert_eq!(meta.producer_epoch(), 0, "version 2 bumps with the abort");
    meta.apply(t).unwrap();
    let markers = finish_markers(&mut meta, NOW + 5);
    assert_eq!(markers.producer_epoch, 1);
    assert_eq!(markers.transaction_version, V2);
    assert_eq!(meta.producer(), ProducerIdAndEpoch::new(PID, 1));
    let p = persist(&mut meta, |m| init(m, None, V2).unwrap());
    assert_eq!(p.reply, Ok(ProducerIdAndEpoch::new(PID, 2)));
}

#[test]
fn a_failed_classic_fence_keeps_its_bump_and_is_not_bumped_again() {
    let mut meta = ongoing(V0);
    let t = plan(init(&meta, None, V1).unwrap()).transit;
    meta.begin(&t).unwrap();
    meta.abandon(&t);
    assert!(meta.has_failed_epoch_fence());
    assert_eq!(meta.state(), TxnState::Ongoing);
    assert_eq!(meta.producer_epoch(), 1, "the bump stays in memory");
    assert_eq!(
        add(&meta, 0, &[("u", 0)], V0).unwrap_err(),
        ResponseError::ProducerFenced,
        "the zombie stays fenced"
    );
    // The next fence aborts at the same epoch.
    let again = plan(init(&meta, None, V1).unwrap()).transit;
    assert_eq!(again.producer_epoch, 1);
    meta.begin(&again).unwrap();
    meta.apply(&again).unwrap();
    finish_markers(&mut meta, NOW + 5);
    assert!(!meta.has_failed_epoch_fence(), "cleared once durable");
    assert_eq!(meta.producer_epoch(), 1);
}

#[test]
fn a_failed_tv2_fence_changes_nothing() {
    let mut meta = ongoing(V2);
    let before = meta.clone();
    let t = plan(init(&meta, None, V2).unwrap()).transit;
    meta.begin(&t).unwrap();
    meta.abandon(&t);
    assert_eq!(meta, before);
    let again = plan(init(&meta, None, V2).unwrap()).transit;
    assert_eq!(again, t, "the retry writes the same abort");
}

#[test]
fn kip360_recovery_bumps_retries_and_fences() {
    let mut meta = loaded(TxnState::CompleteCommit, 3, &[], V0);
    // The current producer recovering: bump, remember the old epoch.
    let p = persist(&mut meta, |m| init(m, Some((PID, 3)), V0).unwrap());
    assert_eq!(p.reply, Ok(ProducerIdAndEpoch::new(PID, 4)));
    assert_eq!(meta.last_producer_epoch(), 3);
    // Its retry (the answer was lost): the same epoch, no second bump.
    let p = persist(&mut meta, |m| init(m, Some((PID, 3)), V0).unwrap());
    assert_eq!(p.reply, Ok(ProducerIdAndEpoch::new(PID, 4)));
    assert_eq!(meta.producer_epoch(), 4);
    // A stale epoch, or another producer id, is fenced.
    assert_eq!(
        init(&meta, Some((PID, 1)), V0).unwrap_err(),
        ResponseError::ProducerFenced
    );
    assert_eq!(
        init(&meta, Some((PID + 1, 4)), V0).unwrap_err(),
        ResponseError::ProducerFenced
    );
    // A new producer instance (no expectation) resets the last epoch.
    persist(&mut meta, |m| init(m, None, V0).unwrap());
    assert_eq!(meta.last_producer_epoch(), NO_PRODUCER_EPOCH);
    assert_eq!(
        init(&meta, Some((PID, 4)), V0).unwrap_err(),
        ResponseError::ProducerFenced,
        "the older instance cannot claim to be retrying"
    );
}

#[test]
fn a_fresh_id_without_a_written_epoch_has_no_producer() {
    // Its first InitProducerId failed to write: epoch -1, whatever a
    // request claims.
    let meta = TransactionMetadata::new(TID, PID, 60_000, NOW);
    let none = ProducerIdAndEpoch::new(PID, NO_PRODUCER_EPOCH);
    let req = AddPartitions {
        producer: none,
        partitions: tps(&[("t", 0)]),
        client_tv: V0,
    };
    assert_eq!(
        add_partitions(Some(&meta), &req, NOW).unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
    assert_eq!(
        verify_partitions(Some(&meta), none, &tps(&[("t", 0)])).unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
    for tv in [V0, V2] {
        assert_eq!(
            end(&meta, PID, NO_PRODUCER_EPOCH, TxnResult::Abort, tv).unwrap_err(),
            ResponseError::InvalidProducerIdMapping
        );
    }
}

#[test]
fn kip360_against_a_fresh_id_takes_the_new_producer_id() {
    let mut meta = TransactionMetadata::new(TID, PID, 60_000, NOW);
    let p = persist(&mut meta, |m| init(m, Some((55, 9)), V0).unwrap());
    assert_eq!(p.reply, Ok(ProducerIdAndEpoch::new(PID, 0)));
}

#[test]
fn an_exhausted_epoch_rotates_to_a_new_producer_id() {
    let exhausted = loaded(TxnState::CompleteCommit, MAX - 1, &[], V0);
    // A new producer instance: new id, epoch 0, no last epoch.
    let mut meta = exhausted.clone();
    let d = init_producer_id(&meta, &init_req(None), V0, NOW, &mut ids_from(500)).unwrap();
    let p = persist(&mut meta, |_| d);
    assert_eq!(p.reply, Ok(ProducerIdAndEpoch::new(500, 0)));
    assert_eq!(meta.prev_producer_id(), PID);
    assert_eq!(meta.last_producer_epoch(), NO_PRODUCER_EPOCH);

    // The same producer recovering: the rotation remembers its epoch, and a
    // retry of that rotation (old id, old epoch) gets the same answer.
    let mut meta = exhausted.clone();
    let req = init_req(Some((PID, MAX - 1)));
    let p = persist(&mut meta, |m| {
        init_producer_id(m, &req, V0, NOW, &mut ids_from(500)).unwrap()
    });
    assert_eq!(p.reply, Ok(ProducerIdAndEpoch::new(500, 0)));
    assert_eq!(meta.last_producer_epoch(), MAX - 1);
    let p = persist(&mut meta, |m| init(m, Some((PID, MAX - 1)), V0).unwrap());
    assert_eq!(p.reply, Ok(ProducerIdAndEpoch::new(500, 0)));
    assert_eq!(meta.producer(), ProducerIdAndEpoch::new(500, 0));

    // A stale expectation against the exhausted epoch is fenced.
    assert_eq!(
        init(&exhausted, Some((PID, 7)), V0).unwrap_err(),
        ResponseError::ProducerFenced
    );
    // The allocator's failure is the answer.
    let failing =
        &mut || -> Result<i64, ResponseError> { Err(ResponseError::CoordinatorNotAvailable) };
    assert_eq!(
        init_producer_id(&exhausted, &init_req(None), V0, NOW, failing).unwrap_err(),
        ResponseError::CoordinatorNotAvailable
    );
}

#[test]
fn init_request_checks_come_first() {
    let none = ProducerIdAndEpoch::NONE;
    assert_eq!(check_init_producer_id("t", 1000, 900_000, none), Ok(None));
    assert_eq!(
        check_init_producer_id("t", 1000, 900_000, ProducerIdAndEpoch::new(5, 2)),
        Ok(Some(ProducerIdAndEpoch::new(5, 2)))
    );
    for half in [
        ProducerIdAndEpoch::new(5, -1),
        ProducerIdAndEpoch::new(-1, 2),
    ] {
        assert_eq!(
            check_init_producer_id("t", 1000, 900_000, half),
            Err(ResponseError::InvalidRequest)
        );
    }
    assert_eq!(
        check_init_producer_id("", 1000, 900_000, none),
        Err(ResponseError::InvalidRequest)
    );
    assert_eq!(
        check_init_producer_id(&"x".repeat(40_000), 1000, 900_000, none),
        Err(ResponseError::InvalidRequest)
    );
    for timeout in [0, -5, 900_001] {
        assert_eq!(
            check_init_producer_id("t", timeout, 900_000, none),
            Err(ResponseError::InvalidTransactionTimeout)
        );
    }
    assert_eq!(
        check_init_producer_id("t", 900_000, 900_000, none),
        Ok(None)
    );
}

// ---- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------

#[test]
fn add_partitions_refusals_and_their_order() {
    let req = |pid, epoch| AddPartitions {
        producer: ProducerIdAndEpoch::new(pid, epoch),
        partitions: tps(&[("t", 0)]),
        client_tv: V0,
    };
    assert_eq!(
        add_partitions(None, &req(PID, 0), NOW).unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
    let meta = loaded(TxnState::Empty, 2, &[], V0);
    assert_eq!(
        add_partitions(Some(&meta), &req(PID + 1, 2), NOW).unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
    for stale in [1, 3] {
        assert_eq!(
            add_partitions(Some(&meta), &req(PID, stale), NOW).unwrap_err(),
            ResponseError::ProducerFenced
        );
    }
    for state in [TxnState::PrepareCommit, TxnState::PrepareAbort] {
        let m = loaded(state, 2, &[("t", 0)], V0);
        assert_eq!(
            add_partitions(Some(&m), &req(PID, 2), NOW).unwrap_err(),
            ResponseError::ConcurrentTransactions
        );
    }
    // Pending is checked before the producer: after a version 2 end the
    // client holds the bumped epoch while the completion is written.
    let mut m = loaded(TxnState::Empty, 2, &[], V0);
    let t = plan(init(&m, None, V0).unwrap()).transit;
    m.begin(&t).unwrap();
    assert_eq!(
        add_partitions(Some(&m), &req(PID + 1, 9), NOW).unwrap_err(),
        ResponseError::ConcurrentTransactions
    );
}

#[test]
fn add_partitions_starts_extends_and_is_idempotent() {
    for from in [
        TxnState::Empty,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
    ] {
        let mut meta = loaded(from, 0, &[], V0);
        let p = persist(&mut meta, |m| add(m, 0, &[("t", 0)], V2).unwrap());
        assert_eq!(p.then, AfterPersist::Reply);
        assert_eq!(meta.state(), TxnState::Ongoing);
        assert_eq!(meta.start_ms(), NOW + 1, "the transaction starts now");
        assert_eq!(meta.client_tv(), V2, "the adding client's version");
    }
    let mut meta = ongoing(V0);
    let start = meta.start_ms();
    // A retry, or a subset: nothing to write.
    assert_eq!(add(&meta, 0, &[("t", 1)], V0), Ok(Decision::Done(())));
    assert_eq!(add(&meta, 0, &[], V0), Ok(Decision::Done(())));
    persist(&mut meta, |m| add(m, 0, &[("t", 1), ("u", 7)], V0).unwrap());
    assert_eq!(meta.partitions(), &tps(&[("t", 0), ("t", 1), ("u", 7)]));
    assert_eq!(
        meta.start_ms(),
        start,
        "an ongoing transaction keeps its start"
    );
}

#[test]
fn add_offsets_adds_the_groups_offsets_partition() {
    let mut meta = loaded(TxnState::Empty, 0, &[], V0);
    let d = add_offsets(Some(&meta), meta.producer(), 17, V0, NOW).unwrap();
    persist(&mut meta, |_| d);
    assert_eq!(meta.partitions(), &tps(&[("__consumer_offsets", 17)]));
    assert_eq!(
        add_offsets(None, meta.producer(), 17, V0, NOW).unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
    assert_eq!(
        add_offsets(Some(&meta), ProducerIdAndEpoch::new(PID, 9), 17, V0, NOW).unwrap_err(),
        ResponseError::ProducerFenced
    );
}

#[test]
fn verify_partitions_reports_what_is_not_in_the_transaction() {
    let meta = ongoing(V2);
    let asked = tps(&[("t", 0), ("z", 3)]);
    let got = verify_partitions(Some(&meta), meta.producer(), &asked).unwrap();
    assert_eq!(
        got,
        vec![
            (TopicPartition::new("t", 0), None),
            (
                TopicPartition::new("z", 3),
                Some(ResponseError::TransactionAbortable)
            ),
        ]
    );
    assert_eq!(
        verify_partitions(None, meta.producer(), &asked).unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
    assert_eq!(
        verify_partitions(Some(&meta), ProducerIdAndEpoch::new(PID + 1, 0), &asked).unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
    assert_eq!(
        verify_partitions(Some(&meta), ProducerIdAndEpoch::new(PID, 1), &asked).unwrap_err(),
        ResponseError::ProducerFenced
    );
    let prepared = loaded(TxnState::PrepareCommit, 0, &[("t", 0)], V0);
    assert_eq!(
        verify_partitions(Some(&prepared), prepared.producer(), &asked).unwrap_err(),
        ResponseError::ConcurrentTransactions
    );
}

// ---- EndTxn, classic rules ---------------------------------------------------

#[test]
fn classic_commit_keeps_the_epoch_and_marks_every_partition() {
    let mut meta = ongoing(V0);
    let p = persist(&mut meta, |m| {
        end(m, PID, 0, TxnResult::Commit, V0).unwrap()
    });
    assert_eq!(p.reply, ProducerIdAndEpoch::NONE);
    assert_eq!(p.then, AfterPersist::SendMarkers(TxnResult::Commit));
    assert_eq!(meta.state(), TxnState::PrepareCommit);
    assert_eq!(meta.producer_epoch(), 0);
    assert_eq!(meta.client_tv(), V0);

    let markers = meta.marker_plan().unwrap();
    assert_eq!(
        markers,
        MarkerPlan {
            result: TxnResult::Commit,
            producer_id: PID,
            producer_epoch: 0,
            transaction_version: V0,
            partitions: vec![TopicPartition::new("t", 0), TopicPartition::new("t", 1)],
        }
    );
    let done = meta.begin_completion(NOW + 9).unwrap();
    assert_eq!(done.state, TxnState::CompleteCommit);
    // While markers are written, a retry waits.
    assert_eq!(
        end(&meta, PID, 0, TxnResult::Commit, V0).unwrap_err(),
        ResponseError::ConcurrentTransactions
    );
    assert!(!meta.marker_written(&TopicPartition::new("t", 0)));
    assert!(meta.marker_written(&TopicPartition::new("t", 1)));
    meta.apply(&done).unwrap();
    assert_eq!(meta.state(), TxnState::CompleteCommit);
    assert!(meta.partitions().is_empty());
    assert_eq!(meta.last_update_ms(), NOW + 9);
    let value = done.log_value().unwrap();
    assert_eq!(
        value.partitions,
        Some(vec![]),
        "complete: an empty, not null, array"
    );

    // After completion, a retried commit succeeds without a write.
    assert_eq!(
        end(&meta, PID, 0, TxnResult::Commit, V0),
        Ok(Decision::Done(ProducerIdAndEpoch::NONE))
    );
}

#[test]
fn classic_end_txn_table() {
    use TxnResult::{Abort, Commit};
    use TxnState::*;
    let its = Err(ResponseError::InvalidTxnState);
    let conc = Err(ResponseError::ConcurrentTransactions);
    let done = Ok(Decision::Done(ProducerIdAndEpoch::NONE));
    let cases = [
        (Empty, Commit, its.clone()),
        (Empty, Abort, its.clone()),
        (CompleteCommit, Commit, done.clone()),
        (CompleteCommit, Abort, its.clone()),
        (CompleteAbort, Abort, done.clone()),
        (CompleteAbort, Commit, its.clone()),
        (PrepareCommit, Commit, conc.clone()),
        (PrepareCommit, Abort, its.clone()),
        (PrepareAbort, Abort, conc.clone()),
        (PrepareAbort, Commit, its.clone()),
    ];
    for (state, result, expected) in cases {
        let meta = loaded(state, 3, &[("t", 0)], V0);
        assert_eq!(
            end(&meta, PID, 3, result, V0),
            expected,
            "{state:?} {result:?}"
        );
    }
    // Ongoing: both results prepare.
    for (result, state) in [(Commit, PrepareCommit), (Abort, PrepareAbort)] {
        let meta = loaded(Ongoing, 3, &[("t", 0)], V0);
        let p = plan(end(&meta, PID, 3, result, V0).unwrap());
        assert_eq!(p.transit.state, state);
        assert_eq!(p.transit.producer_epoch, 3);
    }
}

#[test]
fn classic_end_txn_refusals() {
    let meta = ongoing(V0);
    let req = EndTxn {
        producer: meta.producer(),
        result: TxnResult::Commit,
        client_tv: V0,
    };
    assert_eq!(
        end_txn(None, &req, NOW, &mut no_ids()).unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
    assert_eq!(
        end(&meta, PID + 1, 0, TxnResult::Commit, V0).unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
    for wrong in [1, -1] {
        assert_eq!(
            end(&meta, PID, wrong, TxnResult::Commit, V0).unwrap_err(),
            ResponseError::ProducerFenced,
            "strict epoch from a client"
        );
    }
}

// ---- EndTxn, transaction version 2 -----------------------------------------

#[test]
fn tv2_end_bumps_the_epoch_and_recognises_its_retry() {
    let mut meta = ongoing(V2);
    let p = persist(&mut meta, |m| {
        end(m, PID, 0, TxnResult::Commit, V2).unwrap()
    });
    assert_eq!(p.reply, ProducerIdAndEpoch::new(PID, 1));
    assert_eq!(p.transit.last_producer_epoch, 0);
    assert_eq!(p.transit.client_tv, V2);
    assert_eq!(meta.state(), TxnState::PrepareCommit);
    let done = meta.begin_completion(NOW + 5).unwrap();
    // A retry while the markers are written waits.
    assert_eq!(
        end(&meta, PID, 0, TxnResult::Commit, V2).unwrap_err(),
        ResponseError::ConcurrentTransactions
    );
    for tp in meta.partitions().clone() {
        meta.marker_written(&tp);
    }
    meta.apply(&done).unwrap();
    assert_eq!(meta.producer(), ProducerIdAndEpoch::new(PID, 1));

    // The retry (old epoch) succeeds with the bumped epoch; a commit at the
    // new epoch has no transaction to commit.
    assert_eq!(
        end(&meta, PID, 0, TxnResult::Commit, V2),
        Ok(Decision::Done(ProducerIdAndEpoch::new(PID, 1)))
    );
    assert_eq!(
        end(&meta, PID, 1, TxnResult::Commit, V2).unwrap_err(),
        ResponseError::InvalidTxnState
    );
    // The next transaction runs at epoch 1 and ends at 2.
    persist(&mut meta, |m| add(m, 1, &[("t", 5)], V2).unwrap());
    let p = plan(end(&meta, PID, 1, TxnResult::Abort, V2).unwrap());
    assert_eq!(p.transit.producer_epoch, 2);
    assert_eq!(p.transit.start_ms, meta.start_ms());
}

#[test]
fn tv2_end_table_for_idle_states() {
    use TxnResult::{Abort, Commit};
    use TxnState::*;
    enum Want {
        Fenced,
        Invalid,
        Retried,
        Bump,
    }
    use Want::*;
    // (state, result, retry?, outcome): Kafka's table.
    let cases = [
        (Empty, Abort, true, Fenced),
        (Empty, Abort, false, Bump),
        (Empty, Commit, true, Fenced),
        (Empty, Commit, false, Invalid),
        (CompleteAbort, Abort, true, Retried),
        (CompleteAbort, Abort, false, Bump),
        (CompleteAbort, Commit, true, Invalid),
        (CompleteAbort, Commit, false, Invalid),
        (CompleteCommit, Abort, true, Invalid),
        (CompleteCommit, Abort, false, Bump),
        (CompleteCommit, Commit, true, Retried),
        (CompleteCommit, Commit, false, Invalid),
    ];
    for (state, result, retry, want) in cases {
        let mut meta = loaded(state, 5, &[], V2);
        let epoch = if retry { 4 } else { 5 };
        let got = end(&meta, PID, epoch, result, V2);
        let what = format!("{state:?} {result:?} retry={retry}");
        match want {
            Fenced => assert_eq!(got, Err(ResponseError::ProducerFenced), "{what}"),
            Invalid => assert_eq!(got, Err(ResponseError::InvalidTxnState), "{what}"),
            Retried => assert_eq!(
                got,
                Ok(Decision::Done(ProducerIdAndEpoch::new(PID, 5))),
                "{what}"
            ),
            Bump => {
                // An abort with nothing added: bumps, starts and ends now,
                // marks no partition.
                let p = persist(&mut meta, |_| got.unwrap());
                assert_eq!(p.reply, ProducerIdAndEpoch::new(PID, 6), "{what}");
                assert_eq!(p.then, AfterPersist::SendMarkers(Abort));
                assert_eq!(meta.state(), PrepareAbort);
                assert_eq!(meta.start_ms(), NOW + 2);
                let markers = finish_markers(&mut meta, NOW + 3);
                assert!(markers.partitions.is_empty());
                assert_eq!(meta.state(), CompleteAbort);
                assert_eq!(meta.producer_epoch(), 6);
            }
        }
    }
}

#[test]
fn tv2_prepared_states_and_refusals() {
    use ResponseError::*;
    use TxnResult::{Abort, Commit};
    use TxnState::*;
    // In a prepare only the retry (epoch one below) is valid; in Ongoing
    // only the current epoch.
    let cases = [
        (PrepareCommit, PID, 4, Commit, ConcurrentTransactions),
        (PrepareCommit, PID, 4, Abort, InvalidTxnState),
        (PrepareCommit, PID, 5, Commit, ProducerFenced),
        (PrepareAbort, PID, 4, Abort, ConcurrentTransactions),
        (PrepareAbort, PID, 4, Commit, InvalidTxnState),
        (Ongoing, PID, 4, Commit, ProducerFenced),
        (Ongoing, PID + 1, 5, Commit, InvalidProducerIdMapping),
    ];
    for (state, pid, epoch, result, want) in cases {
        let meta = loaded(state, 5, &[("t", 0)], V2);
        assert_eq!(
            end(&meta, pid, epoch, result, V2).unwrap_err(),
            want,
            "{state:?} {pid} {epoch} {result:?}"
        );
    }
    // Pending comes before the epoch check (no self-fencing).
    let mut m = loaded(TxnState::Ongoing, 5, &[("t", 0)], V2);
    let t = plan(end(&m, PID, 5, Commit, V2).unwrap()).transit;
    m.begin(&t).unwrap();
    assert_eq!(
        end(&m, PID, 6, Abort, V2).unwrap_err(),
        ResponseError::ConcurrentTransactions
    );
}

#[test]
fn tv2_end_at_an_exhausted_epoch_rotates_the_producer_id() {
    let mut meta = loaded(TxnState::Ongoing, MAX - 1, &[("t", 0)], V2);
    let req = EndTxn {
        producer: ProducerIdAndEpoch::new(PID, MAX - 1),
        result: TxnResult::Commit,
        client_tv: V2,
    };
    let d = end_txn(Some(&meta), &req, NOW, &mut ids_from(777)).unwrap();
    let p = persist(&mut meta, |_| d);
    assert_eq!(p.transit.producer_epoch, MAX, "markers at the last epoch");
    assert_eq!(p.transit.next_producer_id, 777);
    assert_eq!(
        p.reply,
        ProducerIdAndEpoch::new(777, 0),
        "the client moves on"
    );
    let markers = finish_markers(&mut meta, NOW + 1);
    assert_eq!((markers.producer_id, markers.producer_epoch), (PID, MAX));
    assert_eq!(meta.producer(), ProducerIdAndEpoch::new(777, 0));
    assert_eq!(meta.prev_producer_id(), PID);
    assert_eq!(meta.next_producer_id(), NO_PRODUCER_ID);
    assert_eq!(meta.last_producer_epoch(), MAX - 1);

    // The retry, with the old id at its last epoch, is recognised.
    assert_eq!(
        end(&meta, PID, MAX - 1, TxnResult::Commit, V2),
        Ok(Decision::Done(ProducerIdAndEpoch::new(777, 0)))
    );
    assert_eq!(
        end(&meta, PID, MAX - 1, TxnResult::Abort, V2).unwrap_err(),
        ResponseError::InvalidTxnState
    );
    // The old id at another epoch is not this transactional id's anymore.
    assert_eq!(
        end(&meta, PID, 3, TxnResult::Commit, V2).unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
    // The new producer id carries on.
    persist(&mut meta, |m| add(m, 0, &[("t", 0)], V2).unwrap());
    assert_eq!(meta.state(), TxnState::Ongoing);
}

#[test]
fn tv2_abort_already_at_the_maximum_epoch_stays_there() {
    // Only reachable through an earlier bug; the abort must still go
    // through so the id can recover, while a commit cannot.
    let meta = loaded(TxnState::Ongoing, MAX, &[("t", 0)], V2);
    let mut ids = ids_from(9);
    let req = |result| EndTxn {
        producer: ProducerIdAndEpoch::new(PID, MAX),
        result,
        client_tv: V2,
    };
    let p = plan(end_txn(Some(&meta), &req(TxnResult::Abort), NOW, &mut ids).unwrap());
    assert_eq!(p.transit.producer_epoch, MAX);
    assert_eq!(p.transit.next_producer_id, 9);
    assert_eq!(
        end_txn(Some(&meta), &req(TxnResult::Commit), NOW, &mut ids).unwrap_err(),
        ResponseError::UnknownServerError
    );
}

// ---- timeouts and expiry -------------------------------------------------------

#[test]
fn only_ongoing_transactions_past_their_timeout_time_out() {
    let meta = ongoing(V0);
    let deadline = meta.start_ms() + i64::from(meta.timeout_ms());
    assert!(!timed_out(&meta, deadline), "at the deadline: not yet");
    assert!(timed_out(&meta, deadline + 1));
    for state in [
        TxnState::Empty,
        TxnState::PrepareCommit,
        TxnState::CompleteAbort,
    ] {
        assert!(!timed_out(&loaded(state, 0, &[("t", 0)], V0), i64::MAX));
    }
    let mut pending = meta.clone();
    let t = plan(add(&pending, 0, &[("z", 0)], V0).unwrap()).transit;
    pending.begin(&t).unwrap();
    assert!(!timed_out(&pending, deadline + 1));
    assert_eq!(
        abort_timed_out(&meta, V2, deadline, &mut no_ids()),
        Ok(None)
    );
}

#[test]
fn a_timed_out_transaction_is_aborted_and_its_producer_fenced() {
    for cluster_tv in [V0, V1, V2] {
        let mut meta = ongoing(V0);
        let late = meta.start_ms() + i64::from(meta.timeout_ms()) + 1;
        let p = abort_timed_out(&meta, cluster_tv, late, &mut no_ids())
            .unwrap()
            .expect("timed out");
        assert_eq!(p.then, AfterPersist::SendMarkers(TxnResult::Abort));
        assert_eq!(p.transit.kind, TransitKind::Fence);
        assert_eq!(p.transit.producer_epoch, 1);
        meta.begin(&p.transit).unwrap();
        meta.apply(&p.transit).unwrap();
        finish_markers(&mut meta, late + 1);
        assert_eq!(meta.state(), TxnState::CompleteAbort);
        // The producer learns it was fenced.
        let tv = if cluster_tv == V2 { V2 } else { V0 };
        assert_eq!(
            end(&meta, PID, 0, TxnResult::Commit, tv).unwrap_err(),
            if tv == V2 {
                ResponseError::InvalidTxnState
            } else {
                ResponseError::ProducerFenced
            },
            "{cluster_tv:?}"
        );
        assert_eq!(
            add(&meta, 0, &[("t", 0)], V0).unwrap_err(),
            ResponseError::ProducerFenced
        );
    }
}

#[test]
fn a_tv2_timeout_at_an_exhausted_epoch_rotates() {
    let mut meta = loaded(TxnState::Ongoing, MAX - 1, &[("t", 0)], V2);
    let p = abort_timed_out(&meta, V2, i64::MAX, &mut ids_from(40))
        .unwrap()
        .unwrap();
    assert_eq!(
        (p.transit.producer_epoch, p.transit.next_producer_id),
        (MAX, 40)
    );
    meta.begin(&p.transit).unwrap();
    meta.apply(&p.transit).unwrap();
    finish_markers(&mut meta, NOW);
    assert_eq!(meta.producer(), ProducerIdAndEpoch::new(40, 0));
}

#[test]
fn idle_ids_expire_with_a_tombstone() {
    let expiry = 7 * 24 * 3600 * 1000;
    let mut meta = loaded(TxnState::CompleteCommit, 3, &[], V0);
    let idle_since = meta.last_update_ms();
    assert!(!should_expire(&meta, idle_since + expiry - 1, expiry));
    assert!(should_expire(&meta, idle_since + expiry, expiry));
    for state in [
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
    ] {
        assert_eq!(
            expire(&loaded(state, 3, &[("t", 0)], V0), i64::MAX, expiry),
            None
        );
    }
    let t = expire(&meta, idle_since + expiry, expiry).unwrap();
    assert!(t.is_tombstone());
    assert_eq!(t.log_value(), None);
    assert_eq!(t.kind, TransitKind::Expire);
    meta.begin(&t).unwrap();
    assert!(!should_expire(&meta, i64::MAX, expiry), "already expiring");
    // A producer arriving meanwhile waits; once gone, it starts afresh.
    assert_eq!(
        init(&meta, None, V2).unwrap_err(),
        ResponseError::ConcurrentTransactions
    );
    assert!(meta.tombstone_written(&t));
    // A failed tombstone leaves the id as it was.
    meta.abandon(&t);
    assert_eq!(meta.pending(), None);
    assert_eq!(meta.state(), TxnState::CompleteCommit);
    assert!(!meta.tombstone_written(&t));
}

// ---- loading, describing, plumbing ---------------------------------------------

#[test]
fn transits_round_trip_through_the_log() {
    let mut meta = ongoing(V2);
    let p = persist(&mut meta, |m| {
        end(m, PID, 0, TxnResult::Commit, V2).unwrap()
    });
    for version in [V0, V1, V2] {
        let bytes = p
            .transit
            .log_value()
            .unwrap()
            .encode(version.log_value_version())
            .unwrap();
        let back =
            TransactionMetadata::from_log(TID, &TxnLogValue::decode(&bytes).unwrap()).unwrap();
        assert_eq!(back.state(), TxnState::PrepareCommit);
        assert_eq!(back.producer(), meta.producer());
        assert_eq!(back.partitions(), meta.partitions());
        assert_eq!(back.start_ms(), meta.start_ms());
        assert_eq!(
            back.last_producer_epoch(),
            NO_PRODUCER_EPOCH,
            "not in the log"
        );
        if version == V0 {
            assert_eq!(back.client_tv(), V0, "v0 cannot carry it");
        } else {
            assert_eq!(back.client_tv(), V2);
            assert_eq!(back.prev_producer_id(), PID);
        }
    }
    // Empty writes a null partition array.
    let fresh = TransactionMetadata::new(TID, PID, 1000, NOW);
    let t = plan(init(&fresh, None, V2).unwrap()).transit;
    assert_eq!(t.log_value().unwrap().partitions, None);
}

#[test]
fn a_loaded_prepared_transaction_resumes_its_markers() {
    let mut meta = loaded(TxnState::PrepareAbort, 4, &[("a", 1), ("b", 2)], V2);
    assert_eq!(meta.prepared_result(), Some(TxnResult::Abort));
    let markers = finish_markers(&mut meta, NOW);
    assert_eq!(markers.partitions.len(), 2);
    assert_eq!(meta.state(), TxnState::CompleteAbort);
    assert_eq!(meta.producer_epoch(), 4);
    assert!(loaded(TxnState::Ongoing, 4, &[], V0)
        .marker_plan()
        .is_none());
    let mut ongoing = loaded(TxnState::Ongoing, 4, &[("a", 1)], V0);
    assert!(ongoing.begin_completion(NOW).is_err());
    assert!(!ongoing.marker_written(&TopicPartition::new("a", 1)));
    assert_eq!(
        ongoing.partitions().len(),
        1,
        "only prepared ids lose partitions"
    );
}

#[test]
fn load_refuses_states_and_versions_never_written() {
    let base = TxnLogValue {
        producer_id: PID,
        producer_epoch: 0,
        ..TxnLogValue::default()
    };
    for (status, err) in [
        (8, LoadError::UnknownStatus(8)),
        (6, LoadError::UnexpectedState(TxnState::Dead)),
        (7, LoadError::UnexpectedState(TxnState::PrepareEpochFence)),
    ] {
        let v = TxnLogValue {
            status,
            ..base.clone()
        };
        assert_eq!(TransactionMetadata::from_log(TID, &v), Err(err));
    }
    let v = TxnLogValue {
        client_transaction_version: 3,
        ..base.clone()
    };
    assert_eq!(
        TransactionMetadata::from_log(TID, &v),
        Err(LoadError::UnknownTransactionVersion(3))
    );
    // An Empty value's partitions are ignored, as Kafka does.
    let v = TxnLogValue {
        partitions: Some(vec![TopicPartitions {
            topic: "t".into(),
            partition_ids: vec![1],
            unknown_tags: Vec::new(),
        }]),
        ..base
    };
    assert!(TransactionMetadata::from_log(TID, &v)
        .unwrap()
        .partitions()
        .is_empty());
}

#[test]
fn describe_gate_and_error_mappings() {
    assert_eq!(
        describe(None).unwrap_err(),
        ResponseError::TransactionalIdNotFound
    );
    let meta = ongoing(V0);
    assert_eq!(describe(Some(&meta)).unwrap().state().name(), "Ongoing");

    assert_eq!(
        coordinator_epoch(PartitionLoad::NotOwned),
        Err(ResponseError::NotCoordinator)
    );
    assert_eq!(
        coordinator_epoch(PartitionLoad::Loading),
        Err(ResponseError::CoordinatorLoadInProgress)
    );
    assert_eq!(
        coordinator_epoch(PartitionLoad::Loaded {
            coordinator_epoch: 4
        }),
        Ok(4)
    );

    use ResponseError::*;
    for (from, to) in [
        (UnknownTopicOrPartition, CoordinatorNotAvailable),
        (NotEnoughReplicas, CoordinatorNotAvailable),
        (NotEnoughReplicasAfterAppend, CoordinatorNotAvailable),
        (RequestTimedOut, CoordinatorNotAvailable),
        (NotLeaderOrFollower, NotCoordinator),
        (KafkaStorageError, NotCoordinator),
        (MessageTooLarge, UnknownServerError),
        (RecordListTooLarge, UnknownServerError),
        (CorruptMessage, CorruptMessage),
    ] {
        assert_eq!(append_error(from), to);
    }

    for (api, old, new) in [
        (TxnApi::InitProducerId, 3, 4),
        (TxnApi::AddPartitionsToTxn, 1, 2),
        (TxnApi::AddOffsetsToTxn, 1, 2),
        (TxnApi::EndTxn, 1, 2),
    ] {
        assert_eq!(
            error_for_version(api, old, ProducerFenced),
            InvalidProducerEpoch
        );
        assert_eq!(error_for_version(api, new, ProducerFenced), ProducerFenced);
        assert_eq!(
            error_for_version(api, old, ConcurrentTransactions),
            ConcurrentTransactions
        );
    }
}
