//! The runtime over a real (standalone) `__transaction_state`: writes,
//! reloads, fencing, markers through a fake sender, timeouts and expiry.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};

use super::*;
use crate::config::BrokerConfig;
use crate::txn::census::Census;
use crate::txn::marker::TxnResult;

const PARTITIONS: i32 = 3;

fn settings() -> TxnSettings {
    TxnSettings {
        partitions: PARTITIONS,
        write_timeout_ms: 5_000,
        ..TxnSettings::default()
    }
}

fn open(dir: &std::path::Path) -> (TopicManager, TxnCoordinator) {
    let topics = TopicManager::open(dir, BrokerConfig::default()).expect("open");
    let c = TxnCoordinator::new(settings());
    c.load_all(&topics).expect("load");
    (topics, c)
}

static NEXT_PID: AtomicI64 = AtomicI64::new(1_000);

fn pids() -> impl FnMut() -> Result<i64, ResponseError> {
    || Ok(NEXT_PID.fetch_add(1, Ordering::SeqCst))
}

/// Acknowledges every marker, or only those of `only` when set; records
/// what it was asked.
#[derive(Default, Debug)]
struct FakeSender {
    only: Option<BTreeSet<TopicPartition>>,
    sent: Mutex<Vec<(String, i32, MarkerPlan)>>,
}

impl MarkerSender for FakeSender {
    fn write_markers(&self, id: &str, epoch: i32, plan: &MarkerPlan) -> Vec<TopicPartition> {
        self.sent.lock().push((id.to_string(), epoch, plan.clone()));
        plan.partitions
            .iter()
            .filter(|tp| self.only.as_ref().is_none_or(|o| o.contains(tp)))
            .cloned()
            .collect()
    }
}

fn tps(list: &[(&str, i32)]) -> BTreeSet<TopicPartition> {
    list.iter()
        .map(|(t, p)| TopicPartition::new(*t, *p))
        .collect()
}

fn init(c: &TxnCoordinator, topics: &TopicManager, id: &str) -> ProducerIdAndEpoch {
    let (reply, markers) = c
        .init_producer_id(topics, &mut pids(), id, 60_000, ProducerIdAndEpoch::NONE)
        .expect("init");
    assert!(!markers);
    reply.expect("producer")
}

fn add(
    c: &TxnCoordinator,
    topics: &TopicManager,
    id: &str,
    p: ProducerIdAndEpoch,
    parts: &[(&str, i32)],
) -> Result<(), ResponseError> {
    c.add_partitions(
        topics,
        id,
        &AddPartitions {
            producer: p,
            partitions: tps(parts),
            client_tv: TransactionVersion::V0,
        },
    )
}

fn end(
    c: &TxnCoordinator,
    topics: &TopicManager,
    id: &str,
    p: ProducerIdAndEpoch,
    result: TxnResult,
) -> Result<(ProducerIdAndEpoch, bool), ResponseError> {
    c.end_txn(
        topics,
        &mut pids(),
        id,
        &EndTxn {
            producer: p,
            result,
            client_tv: TransactionVersion::V0,
        },
    )
}

#[test]
fn nothing_is_coordinated_before_a_load() {
    let c = TxnCoordinator::new(settings());
    assert_eq!(c.partition_load("t"), PartitionLoad::NotOwned);
    assert_eq!(c.describe("t").unwrap_err(), ResponseError::NotCoordinator);
    let dir = tempfile::tempdir().unwrap();
    let topics = TopicManager::open(dir.path(), BrokerConfig::default()).unwrap();
    assert_eq!(
        c.init_producer_id(&topics, &mut pids(), "t", 1000, ProducerIdAndEpoch::NONE)
            .unwrap_err(),
        ResponseError::NotCoordinator
    );
}

#[test]
fn a_transaction_commits_through_the_log_and_its_markers() {
    let dir = tempfile::tempdir().unwrap();
    let (topics, c) = open(dir.path());
    assert!(matches!(
        c.partition_load("app-1"),
        PartitionLoad::Loaded { .. }
    ));
    let p = init(&c, &topics, "app-1");
    assert_eq!(p.epoch, 0);
    add(&c, &topics, "app-1", p, &[("orders", 0), ("orders", 1)]).unwrap();
    assert_eq!(c.describe("app-1").unwrap().state(), TxnState::Ongoing);
    let (_, markers) = end(&c, &topics, "app-1", p, TxnResult::Commit).unwrap();
    assert!(markers);
    assert_eq!(
        c.describe("app-1").unwrap().state(),
        TxnState::PrepareCommit
    );
    // another request waits for the markers
    assert_eq!(
        add(&c, &topics, "app-1", p, &[("orders", 2)]).unwrap_err(),
        ResponseError::ConcurrentTransactions
    );
    let sender = FakeSender::default();
    assert_eq!(c.complete(&topics, &sender, "app-1"), Ok(true));
    let sent = sender.sent.lock().clone();
    assert_eq!(sent.len(), 1);
    let (_, epoch, plan) = &sent[0];
    assert_eq!(
        *epoch, 0,
        "the coordinator epoch is the partition's leader epoch"
    );
    assert_eq!(plan.result, TxnResult::Commit);
    assert_eq!(plan.producer_id, p.producer_id);
    assert_eq!(plan.partitions.len(), 2);
    let meta = c.describe("app-1").unwrap();
    assert_eq!(meta.state(), TxnState::CompleteCommit);
    assert!(meta.partitions().is_empty());
    // a retried commit succeeds with nothing to write
    assert_eq!(
        end(&c, &topics, "app-1", p, TxnResult::Commit),
        Ok((ProducerIdAndEpoch::NONE, false))
    );
    let listed: Vec<_> = c
        .list(&[], &[])
        .into_iter()
        .map(|(id, pid, state, _)| (id, pid, state))
        .collect();
    assert_eq!(
        listed,
        vec![("app-1".to_string(), p.producer_id, TxnState::CompleteCommit)]
    );
    assert_eq!(c.list(&["Ongoing".to_string()], &[]), vec![]);
}

#[test]
fn a_new_instance_fences_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let (topics, c) = open(dir.path());
    let old = init(&c, &topics, "fenced");
    let new = init(&c, &topics, "fenced");
    assert_eq!(new.producer_id, old.producer_id);
    assert_eq!(new.epoch, old.epoch + 1);
    assert_eq!(
        add(&c, &topics, "fenced", old, &[("t", 0)]).unwrap_err(),
        ResponseError::ProducerFenced
    );
    assert_eq!(
        end(&c, &topics, "fenced", old, TxnResult::Commit).unwrap_err(),
        ResponseError::ProducerFenced
    );
    add(&c, &topics, "fenced", new, &[("t", 0)]).unwrap();
}

#[test]
fn fencing_an_ongoing_transaction_aborts_it_first() {
    let dir = tempfile::tempdir().unwrap();
    let (topics, c) = open(dir.path());
    let old = init(&c, &topics, "zombie");
    add(&c, &topics, "zombie", old, &[("t", 0)]).unwrap();
    let (reply, markers) = c
        .init_producer_id(
            &topics,
            &mut pids(),
            "zombie",
            60_000,
            ProducerIdAndEpoch::NONE,
        )
        .unwrap();
    assert_eq!(reply, Err(ResponseError::ConcurrentTransactions));
    assert!(markers);
    assert_eq!(
        c.describe("zombie").unwrap().state(),
        TxnState::PrepareAbort
    );
    let sender = FakeSender::default();
    assert_eq!(c.complete(&topics, &sender, "zombie"), Ok(true));
    assert_eq!(sender.sent.lock()[0].2.result, TxnResult::Abort);
    assert_eq!(
        c.describe("zombie").unwrap().state(),
        TxnState::CompleteAbort
    );
    // the retry now gets a bumped epoch; the old producer is fenced
    let new = init(&c, &topics, "zombie");
    assert!(new.epoch > old.epoch + 1);
    assert_eq!(
        add(&c, &topics, "zombie", old, &[("t", 0)]).unwrap_err(),
        ResponseError::ProducerFenced
    );
}

#[test]
fn unacknowledged_markers_are_retried_before_the_completion() {
    let dir = tempfile::tempdir().unwrap();
    let (topics, c) = open(dir.path());
    let p = init(&c, &topics, "slow");
    add(&c, &topics, "slow", p, &[("a", 0), ("b", 0)]).unwrap();
    end(&c, &topics, "slow", p, TxnResult::Abort).unwrap();
    let partial = FakeSender {
        only: Some(tps(&[("a", 0)])),
        ..FakeSender::default()
    };
    assert_eq!(c.complete(&topics, &partial, "slow"), Ok(false));
    let meta = c.describe("slow").unwrap();
    assert_eq!(meta.state(), TxnState::PrepareAbort);
    assert_eq!(meta.pending(), None);
    assert_eq!(meta.partitions(), &tps(&[("b", 0)]));
    let sender = FakeSender::default();
    let report = c.tick(&topics, &mut pids(), &sender, now_ms());
    assert_eq!(report.completed, 1);
    assert_eq!(
        sender.sent.lock()[0].2.partitions,
        vec![TopicPartition::new("b", 0)]
    );
    assert_eq!(c.describe("slow").unwrap().state(), TxnState::CompleteAbort);
}

#[test]
fn prepared_transactions_are_driven_between_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let (topics, c) = open(dir.path());
    let p = init(&c, &topics, "owed");
    add(&c, &topics, "owed", p, &[("a", 0)]).unwrap();
    end(&c, &topics, "owed", p, TxnResult::Commit).unwrap();
    let none = FakeSender {
        only: Some(BTreeSet::new()),
        ..FakeSender::default()
    };
    assert_eq!(c.complete_prepared(&topics, &none), 0);
    assert_eq!(c.describe("owed").unwrap().state(), TxnState::PrepareCommit);
    assert_eq!(c.complete_prepared(&topics, &FakeSender::default()), 1);
    assert_eq!(
        c.describe("owed").unwrap().state(),
        TxnState::CompleteCommit
    );
    assert_eq!(c.complete_prepared(&topics, &FakeSender::default()), 0);
}

#[test]
fn a_restarted_coordinator_reloads_and_finishes_prepared_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let (p_done, p_prepared, p_open) = {
        let (topics, c) = open(dir.path());
        let a = init(&c, &topics, "done");
        add(&c, &topics, "done", a, &[("t", 0)]).unwrap();
        end(&c, &topics, "done", a, TxnResult::Commit).unwrap();
        assert_eq!(
            c.complete(&topics, &FakeSender::default(), "done"),
            Ok(true)
        );
        let b = init(&c, &topics, "prepared");
        add(&c, &topics, "prepared", b, &[("t", 1)]).unwrap();
        end(&c, &topics, "prepared", b, TxnResult::Commit).unwrap();
        let o = init(&c, &topics, "open");
        add(&c, &topics, "open", o, &[("t", 2)]).unwrap();
        topics.close();
        (a, b, o)
    };
    let (topics, c) = open(dir.path());
    let done = c.describe("done").unwrap();
    assert_eq!(done.state(), TxnState::CompleteCommit);
    assert_eq!(done.producer(), p_done);
    assert_eq!(
        c.describe("prepared").unwrap().state(),
        TxnState::PrepareCommit
    );
    let open_meta = c.describe("open").unwrap();
    assert_eq!(open_meta.state(), TxnState::Ongoing);
    assert_eq!(open_meta.partitions(), &tps(&[("t", 2)]));
    let sender = FakeSender::default();
    let report = c.tick(&topics, &mut pids(), &sender, now_ms());
    assert_eq!(report.completed, 1, "the prepared commit is finished");
    let sent = sender.sent.lock().clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, "prepared");
    assert_eq!(sent[0].2.producer_id, p_prepared.producer_id);
    assert_eq!(
        c.describe("prepared").unwrap().state(),
        TxnState::CompleteCommit
    );
    // the open one goes on where it was
    add(&c, &topics, "open", p_open, &[("t", 3)]).unwrap();
}

#[test]
fn transactions_past_their_timeout_are_aborted_and_their_producer_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let (topics, c) = open(dir.path());
    let p = init(&c, &topics, "late");
    add(&c, &topics, "late", p, &[("t", 0)]).unwrap();
    let sender = FakeSender::default();
    let report = c.tick(&topics, &mut pids(), &sender, now_ms() + 61_000);
    assert_eq!(report.aborted, 1);
    assert_eq!(report.completed, 1);
    let meta = c.describe("late").unwrap();
    assert_eq!(meta.state(), TxnState::CompleteAbort);
    assert_eq!(meta.producer_epoch(), p.epoch + 1);
    assert_eq!(
        end(&c, &topics, "late", p, TxnResult::Commit).unwrap_err(),
        ResponseError::ProducerFenced
    );
}

#[test]
fn idle_transactional_ids_expire_with_a_tombstone() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (topics, c) = open(dir.path());
        init(&c, &topics, "idle");
        init(&c, &topics, "busy");
        let later = now_ms() + c.settings().expiration_ms + 1;
        let report = c.tick(&topics, &mut pids(), &FakeSender::default(), later);
        assert_eq!(report.expired, 2);
        assert_eq!(
            c.describe("idle").unwrap_err(),
            ResponseError::TransactionalIdNotFound
        );
        init(&c, &topics, "busy");
        topics.close();
    }
    let (_topics, c) = open(dir.path());
    assert_eq!(
        c.describe("idle").unwrap_err(),
        ResponseError::TransactionalIdNotFound,
        "the tombstone outlives a restart"
    );
    assert_eq!(c.describe("busy").unwrap().producer_epoch(), 0);
}

#[test]
fn the_request_checks_come_first() {
    let dir = tempfile::tempdir().unwrap();
    let (topics, c) = open(dir.path());
    let too_long = c.settings().max_timeout_ms + 1;
    assert_eq!(
        c.init_producer_id(
            &topics,
            &mut pids(),
            "x",
            too_long,
            ProducerIdAndEpoch::NONE
        )
        .unwrap_err(),
        ResponseError::InvalidTransactionTimeout
    );
    assert_eq!(
        c.init_producer_id(&topics, &mut pids(), "", 1000, ProducerIdAndEpoch::NONE)
            .unwrap_err(),
        ResponseError::InvalidRequest
    );
    assert_eq!(
        add(
            &c,
            &topics,
            "unknown",
            ProducerIdAndEpoch::new(5, 0),
            &[("t", 0)]
        )
        .unwrap_err(),
        ResponseError::InvalidProducerIdMapping
    );
}

#[test]
fn unloading_a_partition_forgets_its_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (topics, c) = open(dir.path());
    init(&c, &topics, "moved");
    c.follow_leadership(&topics, PARTITIONS, &BTreeSet::new());
    assert_eq!(
        c.describe("moved").unwrap_err(),
        ResponseError::NotCoordinator
    );
    assert!(c.list(&[], &[]).is_empty());
    let all: BTreeSet<i32> = (0..PARTITIONS).collect();
    c.follow_leadership(&topics, PARTITIONS, &all);
    assert_eq!(c.describe("moved").unwrap().producer_epoch(), 0);
    // a partition count other than the configured one coordinates nothing
    c.follow_leadership(&topics, PARTITIONS + 1, &all);
    assert_eq!(
        c.describe("moved").unwrap_err(),
        ResponseError::NotCoordinator
    );
}

fn ends(c: &TxnCoordinator) -> Vec<(&'static str, &'static str, u64)> {
    c.ended()
        .iter()
        .map(|(e, n)| (e.result(), e.reason(), *n))
        .collect()
}

#[test]
fn ends_are_counted_by_reason_once_durable_and_ids_by_state() {
    let dir = tempfile::tempdir().unwrap();
    let (topics, c) = open(dir.path());
    let none = vec![
        ("commit", "client", 0),
        ("abort", "client", 0),
        ("abort", "timeout", 0),
        ("abort", "fenced", 0),
    ];
    assert_eq!(ends(&c), none);
    assert_eq!(c.census(), Census::default());

    let p = init(&c, &topics, "c");
    add(&c, &topics, "c", p, &[("t", 0), ("t", 1)]).unwrap();
    let census = c.census();
    assert_eq!(census.count(TxnState::Ongoing), 1);
    assert_eq!(census.markers_pending(), 0, "nothing owed while open");
    end(&c, &topics, "c", p, TxnResult::Commit).unwrap();
    let census = c.census();
    assert_eq!(census.count(TxnState::Ongoing), 0);
    assert_eq!(census.count(TxnState::PrepareCommit), 1);
    assert_eq!(census.markers_pending(), 2);
    let sender = FakeSender::default();
    assert_eq!(c.complete(&topics, &sender, "c"), Ok(true));
    assert_eq!(c.census().count(TxnState::CompleteCommit), 1);
    assert_eq!(c.census().markers_pending(), 0);
    // a retried commit ends nothing more
    end(&c, &topics, "c", p, TxnResult::Commit).unwrap();

    let p = init(&c, &topics, "a");
    add(&c, &topics, "a", p, &[("t", 0)]).unwrap();
    end(&c, &topics, "a", p, TxnResult::Abort).unwrap();

    let p = init(&c, &topics, "z");
    add(&c, &topics, "z", p, &[("t", 0)]).unwrap();
    let (reply, _) = c
        .init_producer_id(&topics, &mut pids(), "z", 60_000, ProducerIdAndEpoch::NONE)
        .unwrap();
    assert_eq!(reply, Err(ResponseError::ConcurrentTransactions));
    // the retry while the fence's abort is prepared ends nothing more
    c.init_producer_id(&topics, &mut pids(), "z", 60_000, ProducerIdAndEpoch::NONE)
        .unwrap_err();

    let p = init(&c, &topics, "late");
    add(&c, &topics, "late", p, &[("t", 0)]).unwrap();
    assert_eq!(
        ends(&c),
        vec![
            ("commit", "client", 1),
            ("abort", "client", 1),
            ("abort", "timeout", 0),
            ("abort", "fenced", 1),
        ]
    );
    let report = c.tick(&topics, &mut pids(), &sender, now_ms() + 61_000);
    assert_eq!(report.aborted, 1);
    assert_eq!(
        ends(&c),
        vec![
            ("commit", "client", 1),
            ("abort", "client", 1),
            ("abort", "timeout", 1),
            ("abort", "fenced", 1),
        ]
    );
    let census = c.census();
    assert_eq!(census.count(TxnState::CompleteCommit), 1);
    assert_eq!(census.count(TxnState::CompleteAbort), 3);
    assert_eq!(census.count(TxnState::Ongoing), 0);
    assert_eq!(census.markers_pending(), 0);
}
