"""Unit tests of the fault checker's pure parts: the accounting can fail
(fabricated streams with a lost, duplicated or reordered acknowledged record
are caught, allowed anomalies are not) and the schedule is deterministic and
bounded."""

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


def test_every_fault_is_bounded_serial_and_every_kind_appears():
    for seed in range(50):
        s = faults.plan(seed, 120, 8, [0, 1, 2])
        assert len(s) >= 12
        assert {f.kind for f in s} == set(faults.KINDS)
        for f in s:
            assert 0 < f.hold < 8 and f.at + f.hold < 120
            if f.kind == "netcut":
                assert len(set(f.targets)) == 2
        counts = [sum(f.kind == k for f in s) for k in faults.KINDS]
        assert max(counts) - min(counts) <= 1, "kinds taken in rounds"


def test_kinds_can_be_restricted():
    assert {f.kind for f in faults.plan(1, 60, 5, [0, 1, 2], ("pause",))} == {"pause"}
    assert faults.plan(1, 60, 5, [0], ("netcut",)) == []
    assert faults.plan(1, 3, 5, [0, 1, 2]) == [], "no fault fits a run shorter than an interval"


def test_cuts_are_for_loopback_addresses_only():
    faults.check_loopback("127.0.0.3")
    for bad in ("10.0.0.1", "192.168.1.2", "0.0.0.0", "::1"):
        try:
            faults.check_loopback(bad)
        except ValueError:
            continue
        raise AssertionError(bad)
