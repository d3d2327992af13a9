"""Unit tests of the fault checker's pure parts: the accounting can fail
(fabricated streams with a lost, duplicated or reordered acknowledged record
are caught, allowed anomalies are not), the schedule is deterministic and
bounded and a short run loses its controller, the controller faults hit the
broker the cluster names, and stalls (gaps between acknowledgements) are
measured and attributed to the fault that caused them."""

from __future__ import annotations

import accounting as acc
import faults

RUN = "r1"


def stream(partition: int, seqs: list[int], run: str = RUN) -> list[tuple[int, bytes]]:
    return [(off, acc.payload(run, partition, s)) for off, s in enumerate(seqs)]


def acked_all(n: int) -> dict[int, int]:
    return {s: s for s in range(n)}


def check(seqs: list[int], acked: dict[int, int], sent: int = 10) -> acc.PartitionReport:
    return acc.verify(RUN, {0: sent}, {0: acked}, {0: stream(0, seqs)}).partitions[0]


def test_a_clean_stream_passes():
    r = check(list(range(10)), acked_all(10))
    assert r.ok and (r.lost, r.duplicated, r.reordered, r.unacked_present) == (0, 0, 0, 0)
    assert r.acked == r.consumed == 10


def test_a_missing_acked_record_is_lost():
    r = check([0, 1, 2, 4, 5, 6, 7, 8, 9], acked_all(10))
    assert not r.ok and r.lost == 1 and r.lost_examples == [3]


def test_a_duplicated_acked_record_fails():
    r = check([0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9], {**acked_all(10)})
    assert not r.ok and r.duplicated == 1 and r.duplicated_examples == [3]
    assert r.reordered == 0, "a later copy of a record is a duplicate, not a reordering"


def test_reordered_acked_records_fail_and_count_the_fewest_moved():
    r = check([0, 1, 3, 2, 4, 5, 6, 7, 8, 9], acked_all(10))
    assert not r.ok and r.reordered == 1 and r.lost == 0
    r = check([9, 0, 1, 2, 3, 4, 5, 6, 7, 8], acked_all(10))
    assert r.reordered == 1, "one record moved to the front is one out of place"


def test_unacked_records_may_be_present_or_missing():
    acked = {s: s for s in range(10) if s not in (4, 7)}
    r = check([0, 1, 2, 3, 4, 5, 6, 8, 9], acked)  # 4 present (ack lost), 7 absent (never written)
    assert r.ok and r.unacked_present == 1 and r.lost == 0


def test_unacked_duplicates_and_foreign_records_are_reported_not_failed():
    acked = {s: s for s in range(10) if s != 5}
    seqs = [0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9]
    consumed = stream(0, seqs) + [(11, b"not ours"), (12, acc.payload("other-run", 0, 1)), (13, acc.payload(RUN, 1, 0)), (14, None)]
    r = acc.verify(RUN, {0: 10}, {0: acked}, {0: consumed}).partitions[0]
    assert r.ok and r.unacked_duplicated == 1 and r.foreign == 4


def test_an_acked_record_at_another_offset_than_its_ack_is_reported():
    r = check(list(range(10)), {**acked_all(10), 3: 30})
    assert r.ok and r.acked_offset_moved == 1


def test_totals_cover_every_partition_and_one_bad_partition_fails_all():
    rep = acc.verify(RUN, {0: 3, 1: 3}, {0: acked_all(3), 1: acked_all(3)}, {0: stream(0, [0, 1, 2]), 1: stream(1, [0, 2])})
    d = rep.as_dict()
    assert (d["acked"], d["lost"], d["ok"]) == (6, 1, False)
    assert d["per_partition"]["1"]["lost_examples"] == [1]


def test_out_of_order_is_sequence_minus_longest_increasing_run():
    assert acc.out_of_order([]) == 0
    assert acc.out_of_order([1, 2, 3]) == 0
    assert acc.out_of_order([3, 2, 1]) == 2
    assert acc.out_of_order([1, 5, 2, 3, 4]) == 1


def test_parse_accepts_only_this_runs_payloads():
    assert acc.parse(acc.payload(RUN, 2, 7), RUN) == (2, 7)
    for v in (None, b"", b"\xff\xfe", b"mf1:r1:x:1", acc.payload("r2", 2, 7)):
        assert acc.parse(v, RUN) is None


# -- the schedule ---------------------------------------------------------------

def test_the_schedule_is_a_function_of_the_seed():
    a = faults.plan(42, 120, 8, [0, 1, 2])
    assert a == faults.plan(42, 120, 8, [0, 1, 2])
    assert a != faults.plan(43, 120, 8, [0, 1, 2])
    assert a == faults.plan(42, 120, 8, [2, 0, 1]), "node order does not matter"


def test_every_fault_is_bounded_serial_and_every_kind_appears():
    for seed in range(50):
        s = faults.plan(seed, 240, 8, [0, 1, 2])
        assert len(s) >= 12
        assert {f.kind for f in s} == set(faults.KINDS)
        prev_end = 0.0
        for f in s:
            assert f.at + f.hold < 240
            assert f.at - prev_end >= 0.8 * 8 - 0.1, "a quiet interval after the previous fault's end"
            prev_end = f.at + f.hold
            if f.kind == "pause-controller":
                assert faults.CONTROLLER_PAUSE[0] <= f.hold <= faults.CONTROLLER_PAUSE[1]
            else:
                assert 0 < f.hold < 8
            if f.kind in ("netcut", "two-down"):
                assert len(set(f.targets)) == 2
            else:
                assert len(f.targets) == 1, "one target (the fallback for the controller kinds)"
            assert (f.how in ("kill", "pause")) == (f.kind == "two-down")
        counts = [sum(f.kind == k for f in s) for k in faults.KINDS]
        assert max(counts) - min(counts) <= 1, "kinds taken in rounds"


def test_a_two_minute_schedule_pauses_and_kills_the_controller_first():
    """The bounded run (test_run.py: 120 s, interval 8) loses its controller
    to a pause of at least 13 s (past the session timeout and the 12 s stall
    bound) and to a kill, whatever the seed, and the rest of the first round
    follows."""
    for seed in range(200):
        s = faults.plan(seed, 120, 8, [0, 1, 2])
        assert {f.kind for f in s[:2]} == set(faults.CONTROLLER_KINDS), seed
        pause = next(f for f in s if f.kind == "pause-controller")
        assert pause.hold >= 13, "longer than the stall bound: only a failover passes"
        assert {f.kind for f in s} == set(faults.KINDS), (seed, [f.kind for f in s])
        # planned end of the first round, leaving room for restarts and recovery
        assert s[len(faults.KINDS) - 1].at + s[len(faults.KINDS) - 1].hold < 100, seed


def test_kinds_can_be_restricted():
    assert {f.kind for f in faults.plan(1, 60, 5, [0, 1, 2], ("pause",))} == {"pause"}
    assert faults.plan(1, 60, 5, [0], ("netcut",)) == []
    assert faults.plan(1, 60, 5, [0], ("two-down",)) == []
    assert faults.plan(1, 3, 5, [0, 1, 2]) == [], "no fault fits a run shorter than an interval"
    assert faults.plan(1, 60, 5, [0, 1, 2], ("pause", "kill")) == faults.plan(1, 60, 5, [0, 1, 2], ("kill", "pause"))


def test_the_controller_is_the_one_most_brokers_name():
    assert faults.pick_controller({0: 1, 1: 1, 2: 1}) == 1
    assert faults.pick_controller({0: 2, 1: 2, 2: None}) == 2, "a broker that did not answer has no say"
    assert faults.pick_controller({0: 0, 1: 2, 2: 2}) == 2, "a restarted broker naming itself is outvoted"
    assert faults.pick_controller({0: 0, 1: 1, 2: None}) is None, "a tie names nobody"
    assert faults.pick_controller({0: -1, 1: -1, 2: None}) is None
    assert faults.pick_controller({0: 7, 1: 7}) is None, "not a node of this cluster"


def test_controller_faults_hit_the_controller_found_when_applied():
    import threading

    class B:
        def __init__(self):
            self.log = []

        def kill(self): self.log.append("kill")
        def start(self): self.log.append("start")
        def pause(self): self.log.append("pause")
        def resume(self): self.log.append("resume")

    nodes = {n: B() for n in range(3)}
    views = iter([{0: 2, 1: 2, 2: 2}, {0: -1, 1: -1, 2: -1}])
    inj = faults.Injector(nodes, None, threading.Event(), log=lambda _m: None,
                          controller_views=lambda: next(views), controller_wait=0)
    a = inj.apply(faults.Fault(0, "pause-controller", (0,), 0.01), 0.0)
    assert (a.targets, a.controller) == ((2,), 2) and nodes[2].log == ["pause", "resume"] and not nodes[0].log
    a = inj.apply(faults.Fault(0, "kill-controller", (1,), 0.01), 0.0)
    assert (a.targets, a.controller) == ((1,), None), "no controller named: the fallback target"
    assert nodes[1].log == ["kill", "start"]
    inj.apply(faults.Fault(0, "two-down", (0, 1), 0.01, "kill"), 0.0)
    assert nodes[0].log == ["kill", "start"] and nodes[1].log[-2:] == ["kill", "start"]
    inj.apply(faults.Fault(0, "two-down", (0, 2), 0.01, "pause"), 0.0)
    assert nodes[0].log[-2:] == ["pause", "resume"] and not inj.paused
    assert inj.counts()["two-down"] == 2 and inj.counts()["pause-controller"] == 1


def test_cuts_are_for_loopback_addresses_only():
    faults.check_loopback("127.0.0.3")
    for bad in ("10.0.0.1", "192.168.1.2", "0.0.0.0", "::1"):
        try:
            faults.check_loopback(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


# -- stalls and latencies ---------------------------------------------------------

def ticks(a: float, b: float, step: float = 0.1, skip: tuple[float, float] | None = None) -> list[float]:
    """Ack times every `step` in [a, b), none strictly inside `skip`."""
    out = []
    for i in range(round((b - a) / step)):
        t = round(a + i * step, 6)
        if skip is None or not (skip[0] < t < skip[1]):
            out.append(t)
    return out


def test_gaps_are_between_consecutive_acks_and_an_open_one_to_the_end():
    gs = acc.gaps({0: [1.0, 1.5, 4.0], 1: []}, begin=0.0, end=5.0)
    assert sorted((g.partition, g.start, g.end, g.open) for g in gs) == [
        (0, 1.0, 1.5, False), (0, 1.5, 4.0, False), (0, 4.0, 5.0, True), (1, 0.0, 5.0, True)]
    assert max(gs, key=lambda g: g.seconds).seconds == 5.0, "a partition never acknowledged stalls the whole run"


def test_a_stall_belongs_to_the_fault_that_caused_it_not_its_neighbours():
    # faults marked at 10 and 30; partition 1 stalls from 10.0 to 21.0 (the
    # first fault), partition 0 from 30 to 33 (the second), 0.3 s before the
    # faults at most
    acks = {0: ticks(0, 40, skip=(30.0, 33.0)), 1: ticks(0, 40, skip=(10.0, 21.0))}
    base, per = acc.longest_gaps(acks, [9.95, 29.95], begin=0.0, end=40.0)
    assert base is not None and base.seconds <= 0.11
    assert per[0].partition == 1 and abs(per[0].seconds - 11.0) < 1e-6 and (per[0].start, per[0].end) == (10.0, 21.0)
    assert per[1].partition == 0 and abs(per[1].seconds - 3.0) < 1e-6


def test_the_longest_gap_of_any_partition_counts_not_the_merged_stream():
    # partition 0 keeps flowing; partition 1 stalls 13 s: the fault's stall is 13 s
    acks = {0: ticks(0, 30), 1: ticks(0, 30, skip=(5.0, 18.0))}
    _, per = acc.longest_gaps(acks, [4.95], begin=0.0, end=30.0)
    assert abs(per[0].seconds - 13.0) < 1e-6 and per[0].partition == 1


def test_a_stall_that_outlasts_the_next_mark_counts_for_every_window_it_spans():
    acks = {0: ticks(0, 10) + ticks(50, 60)}
    _, per = acc.longest_gaps(acks, [5.0, 20.0, 40.0, 55.0], begin=0.0, end=60.0)
    assert [round(g.seconds, 1) for g in per] == [40.1, 40.1, 40.1, 0.1]


def test_a_partition_that_never_recovers_is_an_open_stall_of_the_last_windows():
    acks = {0: ticks(0, 60), 1: ticks(0, 25)}
    _, per = acc.longest_gaps(acks, [10.0, 24.85], begin=0.0, end=60.0)
    assert per[0].seconds < 0.2
    assert per[1].open and per[1].partition == 1 and abs(per[1].seconds - 35.1) < 1e-6


def test_steady_wants_every_partition_flowing_for_the_span():
    flowing = {0: ticks(0, 10), 1: ticks(0, 10)}
    mark = acc.steady(flowing, now=10.0)
    assert mark is not None and 9.85 <= mark <= 9.95, mark
    assert acc.steady({0: ticks(0, 10), 1: ticks(0, 10, skip=(7.5, 9.0))}, now=10.0) is None, "a recent 1.5 s gap"
    assert acc.steady({0: ticks(0, 10), 1: ticks(0, 8.5)}, now=10.0) is None, "nothing for 1.5 s"
    assert acc.steady({0: ticks(0, 10), 1: ticks(8.5, 10)}, now=10.0) is None, "only flowing for 1.5 s"
    assert acc.steady({0: ticks(0, 10), 1: []}, now=10.0) is None
    assert acc.steady({0: ticks(0, 10), 1: ticks(0, 10, skip=(3.0, 6.0))}, now=10.0) is not None, "an old gap is over"


def test_a_mark_from_steady_puts_the_previous_stall_before_the_window():
    # partition 0 stalls 5..15 (the previous fault); steady at 19 puts the
    # next fault's mark after that stall, so the 10 s stall is not the next fault's
    acks = {0: ticks(0, 40, skip=(5.0, 15.0)), 1: ticks(0, 40)}
    mark = acc.steady(acks, now=19.0)
    assert mark is not None
    _, per = acc.longest_gaps(acks, [4.95, mark], begin=0.0, end=40.0)
    assert abs(per[0].seconds - 10.0) < 1e-6 and per[1].seconds < 0.2


def test_latency_summary_counts_what_exceeds_the_limit():
    s = acc.latency_summary([0.01] * 98 + [30.0, 70.0], limit=65.0)
    assert (s["count"], s["max"], s["p50"], s["over_limit"]) == (100, 70.0, 0.01, 1)
    assert acc.latency_summary([], 1.0)["over_limit"] == 0


# -- the transactional accounting -------------------------------------------------

def txn(producer: int, n: int, outcome: str, parts: list[int], commit: bool = True, how: str = "") -> acc.Txn:
    return acc.Txn(producer, n, commit, outcome, list(parts), how)


def log_of(history: list[acc.Txn], skip: set[tuple[int, int, int]] = frozenset(),
           extra: list[tuple[int, bytes]] = ()) -> dict[int, list[tuple[int, bytes]]]:
    """What a read_committed consumer would read if every committed (and
    unknown) transaction's records were there, in history order, less `skip`
    ((producer, txn, seq)), plus `extra` (partition, value) at the end."""
    out: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
    for t in history:
        if t.outcome == "aborted":
            continue
        for s, p in enumerate(t.partitions):
            if (t.producer, t.txn, s) not in skip:
                out[p].append((len(out[p]), acc.txn_payload(RUN, t.producer, t.txn, t.commit, p, s)))
    for p, v in extra:
        out[p].append((len(out[p]), v))
    return out


HISTORY = [
    txn(0, 1, "committed", [0, 1, 2, 0]),
    txn(1, 1, "committed", [2, 1]),
    txn(0, 2, "aborted", [1, 2, 0], commit=False),
    txn(0, 3, "aborted", [0, 1], how="KafkaError{...}"),  # meant to commit, aborted after an error
    txn(0, 4, "unknown", [1, 2]),
    txn(1, 2, "committed", [0, 0, 1]),
]


def test_txn_payloads_round_trip_and_only_this_runs_parse():
    v = acc.txn_payload(RUN, 2, 17, False, 5, 3)
    assert acc.parse_txn(v, RUN) == (2, 17, False, 5, 3)
    for bad in (None, b"", b"\xff", acc.payload(RUN, 1, 2), acc.txn_payload("r9", 2, 17, True, 5, 3), b"mt1:r1:2:17:x:5:3"):
        assert acc.parse_txn(bad, RUN) is None


def test_a_clean_transactional_history_passes_and_counts_outcomes():
    r = acc.verify_txn(RUN, HISTORY, log_of(HISTORY))
    assert r.ok, r.as_dict()
    assert r.transactions == {"committed": 3, "aborted": 2, "unknown": 1}
    assert r.records == {"committed": 9, "aborted": 5, "unknown": 2}
    assert (r.aborted_deliberately, r.aborted_after_error, r.unknown_present, r.unknown_absent) == (1, 1, 1, 0)
    assert r.consumed == 11


def test_an_unknown_transaction_may_be_wholly_absent():
    log = log_of(HISTORY, skip={(0, 4, 0), (0, 4, 1)})
    r = acc.verify_txn(RUN, HISTORY, log)
    assert r.ok and r.unknown_absent == 1 and r.unknown_present == 0


def test_a_partial_unknown_transaction_is_flagged():
    r = acc.verify_txn(RUN, HISTORY, log_of(HISTORY, skip={(0, 4, 1)}))
    assert not r.ok and r.partial == 1 and r.lost == 0
    assert r.examples["partial"][0]["txn"] == 4


def test_a_committed_record_missing_is_lost_and_its_transaction_partial():
    r = acc.verify_txn(RUN, HISTORY, log_of(HISTORY, skip={(1, 2, 2)}))
    assert not r.ok and r.lost == 1 and r.partial == 1
    assert r.examples["lost"][0]["missing"] == [(1, 2)]
    r = acc.verify_txn(RUN, HISTORY, log_of(HISTORY, skip={(1, 1, 0), (1, 1, 1)}))
    assert not r.ok and r.lost == 2 and r.partial == 0, "wholly lost: lost, not partial"


def test_a_visible_aborted_record_fails_deliberate_or_not():
    for t, s, p in ((2, 1, 2), (3, 0, 0)):
        v = acc.txn_payload(RUN, 0, t, HISTORY[t].commit, p, s)
        r = acc.verify_txn(RUN, HISTORY, log_of(HISTORY, extra=[(p, v)]))
        assert not r.ok and r.aborted_visible == 1, t
        assert r.examples["aborted_visible"][0]["at"] == [(p, len(log_of(HISTORY)[p]))]


def test_a_duplicated_committed_or_unknown_record_fails():
    for t, s, p in ((1, 0, 0), (4, 1, 2)):  # HISTORY[0] (txn 1) and HISTORY[4] (txn 4)
        v = acc.txn_payload(RUN, 0, t, True, p, s)
        r = acc.verify_txn(RUN, HISTORY, log_of(HISTORY, extra=[(p, v)]))
        assert not r.ok and r.duplicated == 1 and r.partial == 0, t


def test_transactions_out_of_order_in_a_partition_fail():
    log = log_of(HISTORY)
    # partition 0 holds producer 0's txn 1 (seqs 0, 3) and producer 1's txn 2 (0, 1): swap producer 0's two
    log[0][0], log[0][1] = (0, log[0][1][1]), (1, log[0][0][1])
    r = acc.verify_txn(RUN, HISTORY, log)
    assert not r.ok and r.reordered == 1
    # producer 0's txn 4 before its txn 1 in partition 1
    log = log_of(HISTORY)
    four = [x for x in log[1] if acc.parse_txn(x[1], RUN)[:2] == (0, 4)]
    log[1] = four + [x for x in log[1] if x not in four]
    assert acc.verify_txn(RUN, HISTORY, log).reordered == 1
    # another producer's records interleaved: fine
    log = log_of(HISTORY)
    log[1] = [x for x in log[1] if acc.parse_txn(x[1], RUN)[0] == 1] + \
        [x for x in log[1] if acc.parse_txn(x[1], RUN)[0] == 0]
    assert [acc.parse_txn(v, RUN)[0] for _, v in log[1]][:1] == [1]
    assert acc.verify_txn(RUN, HISTORY, log).reordered == 0


def test_foreign_and_misplaced_transactional_records_fail():
    for p, v in ((0, b"junk"), (0, acc.txn_payload(RUN, 7, 1, True, 0, 0)),  # no such producer
                 (2, acc.txn_payload(RUN, 0, 1, True, 0, 0)),  # says partition 0, read in 2
                 (0, acc.txn_payload(RUN, 0, 1, True, 0, 9)),  # no such seq
                 (0, acc.txn_payload(RUN, 0, 1, False, 0, 0))):  # wrong intent
        r = acc.verify_txn(RUN, HISTORY, log_of(HISTORY, extra=[(p, v)]))
        assert not r.ok and r.foreign == 1, v
