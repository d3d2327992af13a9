"""The fault checker's accounting: pure functions, no I/O, no clients.

Owns the payload format and the verdict. A producer writes, per partition,
the sequence 0, 1, 2, … of payloads `mf1:<run>:<partition>:<seq>`; the
delivery reports say which were acknowledged (and at which offset); at the
end every partition is consumed from the beginning. `verify` compares the
two, per partition:

- lost:       acknowledged, never consumed;
- duplicated: acknowledged, consumed more than once (extra copies counted);
- reordered:  acknowledged records out of sequence order in the log: how many
              must be removed for the rest to be in order (length of the
              sequence minus its longest increasing subsequence);
- unacked_present: sent but not acknowledged (failed or timed out), yet in
              the log: allowed (the broker may have written it; the ack was
              lost), reported for information;
- unacked_duplicated, foreign (records that are not this run's or sit in
  another partition than their payload says), acked_offset_moved (an
  acknowledged record consumed at an offset other than the one its ack
  gave): reported, not part of the verdict.

The verdict (`Report.ok`) is: no acknowledged record lost, duplicated or
reordered.

Also owns the timing measures (the checker asserts them):

- a gap: one partition's time between two consecutive acknowledgements
  (successful delivery reports, timed when the producer's callback runs),
  or from its last one to the end of producing (an open gap). A fault's
  stall is the longest gap of any partition in the fault's window: from
  just before the fault (where every partition was last seen acknowledged)
  to the same point before the next fault (or the end). `longest_gaps`
  says exactly which gaps count where;
- a delivery latency: from produce() to the delivery report, acknowledged
  or failed.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import asdict, dataclass, field

PREFIX = "mf1"


def payload(run: str, partition: int, seq: int) -> bytes:
    return f"{PREFIX}:{run}:{partition}:{seq}".encode()


def parse(value: bytes | None, run: str) -> tuple[int, int] | None:
    """(partition, seq) of one of this run's payloads, else None."""
    if value is None:
        return None
    try:
        prefix, r, p, s = value.decode().split(":")
        if prefix != PREFIX or r != run:
            return None
        return int(p), int(s)
    except (UnicodeDecodeError, ValueError):
        return None


def out_of_order(seqs: list[int]) -> int:
    """How many of `seqs` must go for the rest to be strictly increasing."""
    tails: list[int] = []  # tails[k]: smallest tail of an increasing run of length k+1
    for s in seqs:
        i = bisect.bisect_left(tails, s)
        if i == len(tails):
            tails.append(s)
        else:
            tails[i] = s
    return len(seqs) - len(tails)


@dataclass
class PartitionReport:
    sent: int = 0
    acked: int = 0
    consumed: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    unacked_present: int = 0
    unacked_duplicated: int = 0
    foreign: int = 0
    acked_offset_moved: int = 0
    # a few examples, for a human reading the JSON
    lost_examples: list[int] = field(default_factory=list)
    duplicated_examples: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.reordered == 0


TOTALS = (
    "sent", "acked", "consumed", "lost", "duplicated", "reordered",
    "unacked_present", "unacked_duplicated", "foreign", "acked_offset_moved",
)


@dataclass
class Report:
    partitions: dict[int, PartitionReport]

    def total(self, name: str) -> int:
        return sum(getattr(p, name) for p in self.partitions.values())

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.partitions.values())

    def as_dict(self) -> dict:
        d = {name: self.total(name) for name in TOTALS}
        d["ok"] = self.ok
        d["per_partition"] = {str(p): asdict(r) for p, r in sorted(self.partitions.items())}
        return d


EXAMPLES = 10


def verify_partition(
    run: str,
    partition: int,
    sent: int,
    acked: dict[int, int],
    consumed: list[tuple[int, bytes | None]],
) -> PartitionReport:
    """One partition: `sent` payloads (seqs 0..sent-1) were handed to the
    producer, `acked` maps each acknowledged seq to the offset its ack gave
    (-1 if none), `consumed` is the partition's (offset, value) in log order."""
    r = PartitionReport(sent=sent, acked=len(acked), consumed=len(consumed))
    counts: Counter[int] = Counter()
    acked_in_log: list[int] = []
    for offset, value in consumed:
        parsed = parse(value, run)
        if parsed is None or parsed[0] != partition or not 0 <= parsed[1] < max(sent, 0):
            r.foreign += 1
            continue
        seq = parsed[1]
        counts[seq] += 1
        if counts[seq] > 1:
            continue
        if seq in acked:
            acked_in_log.append(seq)
            want = acked[seq]
            if want >= 0 and want != offset:
                r.acked_offset_moved += 1
    for seq, n in counts.items():
        if seq in acked:
            if n > 1:
                r.duplicated += n - 1
                if len(r.duplicated_examples) < EXAMPLES:
                    r.duplicated_examples.append(seq)
        else:
            r.unacked_present += 1
            r.unacked_duplicated += n - 1
    for seq in sorted(acked):
        if counts[seq] == 0:
            r.lost += 1
            if len(r.lost_examples) < EXAMPLES:
                r.lost_examples.append(seq)
    r.reordered = out_of_order(acked_in_log)
    return r


def verify(
    run: str,
    sent: dict[int, int],
    acked: dict[int, dict[int, int]],
    consumed: dict[int, list[tuple[int, bytes | None]]],
) -> Report:
    parts = sorted(set(sent) | set(acked) | set(consumed))
    return Report({
        p: verify_partition(run, p, sent.get(p, 0), acked.get(p, {}), consumed.get(p, []))
        for p in parts
    })


# -- stalls: gaps between acknowledgements -----------------------------------

@dataclass(frozen=True)
class Gap:
    """One partition's time without an acknowledgement: from the ack at
    `start` to the next one at `end` (an open gap: none came before the run
    stopped producing at `end`)."""

    seconds: float
    partition: int
    start: float
    end: float
    open: bool = False

    def as_dict(self, origin: float = 0.0) -> dict:
        return {"seconds": round(self.seconds, 3), "partition": self.partition,
                "from": round(self.start - origin, 3), "to": round(self.end - origin, 3), "open": self.open}


def gaps(acks: dict[int, list[float]], begin: float, end: float) -> list[Gap]:
    """Every partition's gaps between consecutive acknowledgement times,
    plus an open gap from its last ack to `end` (from `begin` when it has
    none). Acks are any order; `end` is when producing stopped."""
    out: list[Gap] = []
    for p, ts in acks.items():
        ts = sorted(ts)
        for a, b in zip(ts, ts[1:]):
            out.append(Gap(b - a, p, a, b))
        last = ts[-1] if ts else begin
        if last < end:
            out.append(Gap(end - last, p, last, end, open=True))
    return out


def longest_gaps(acks: dict[int, list[float]], marks: list[float], begin: float, end: float) -> tuple[Gap | None, list[Gap | None]]:
    """The longest gap before the faults and in each fault's window.

    `marks` (ascending) start the windows: window i is [marks[i],
    marks[i+1]), the last one open-ended. A gap belongs to every window it
    overlaps (start < window end and end > window start), and to the
    baseline when it starts before marks[0]. The checker sets each mark
    where every partition was last seen acknowledged before the fault
    (`steady`): a stall the fault causes starts after its mark, so it is
    that fault's, and one that outlasts the next mark is every later
    window's too, never hidden. Returns (baseline, [longest per window])."""
    baseline: Gap | None = None
    per: list[Gap | None] = [None] * len(marks)
    for g in gaps(acks, begin, end):
        if not marks or g.start < marks[0]:
            if baseline is None or g.seconds > baseline.seconds:
                baseline = g
        # windows overlapped: from the one holding g.start to the one holding g.end
        lo = max(0, bisect.bisect_right(marks, g.start) - 1)
        hi = bisect.bisect_left(marks, g.end) - 1  # last window that starts before g.end
        for i in range(lo, hi + 1):
            if per[i] is None or g.seconds > per[i].seconds:
                per[i] = g
    return baseline, per


def steady(acks: dict[int, list[float]], now: float, span: float = 3.0, gap: float = 1.0) -> float | None:
    """(`acks`: each partition's ack times, ascending.) Whether every partition has been acknowledged steadily: over the last
    `span` seconds no gap longer than `gap` (counting the one up to `now`).
    Returns the window mark for a fault applied now (the earliest of the
    partitions' last acks, at most `gap` ago), or None when not steady."""
    mark = now
    for ts in acks.values():
        lo = bisect.bisect_left(ts, now - span - gap)  # acks arrive in time order
        recent = [t for t in ts[lo:] if t <= now]
        if not recent or recent[0] > now - span + gap:
            return None
        points = recent + [now]
        if any(b - a > gap for a, b in zip(points, points[1:])):
            return None
        mark = min(mark, recent[-1])
    return mark


def latency_summary(latencies: list[float], limit: float) -> dict:
    """Max, median and 99th percentile of delivery latencies (seconds from
    produce() to the delivery report), and how many exceed `limit`."""
    if not latencies:
        return {"count": 0, "max": None, "p50": None, "p99": None, "over_limit": 0}
    s = sorted(latencies)

    def q(x: float) -> float:
        return round(s[min(len(s) - 1, int(x * len(s)))], 3)

    return {"count": len(s), "max": round(s[-1], 3), "p50": q(0.5), "p99": q(0.99),
            "over_limit": len(s) - bisect.bisect_right(s, limit)}


# -- transactions (the checker's --transactional mode) --------------------------
#
# A transactional producer (one per producer thread, transactional id
# `moldau-faults-<run>-<thread>`) numbers its transactions 1, 2, 3, … and
# the records of each 0, 1, …; a record's payload
# `mt1:<run>:<producer>:<txn>:<c|a>:<partition>:<seq>` says which transaction
# it belongs to, whether that transaction was meant to commit (c) or to be
# aborted (a), and the partition it was sent to. The producer's history is a
# list of `Txn`: the partition of every record it handed to produce(), in
# order, and the outcome:
#
# - committed: commit_transaction() returned;
# - aborted:   abort_transaction() returned, or the producer failed (fatal,
#              fenced) before any commit was attempted and was re-created
#              (init_transactions() of the same transactional id aborts it);
# - unknown:   a commit was attempted and did not return (a retriable or
#              timeout error, a fatal error during it), then the producer was
#              re-created: the coordinator finished it one way or the other.
#
# `verify_txn` compares the histories with what a read_committed consumer read
# from every partition, start to end:
#
# 1. every record of a committed transaction is there exactly once (lost,
#    duplicated);
# 2. no record of an aborted transaction is visible (aborted_visible);
# 3. an unknown transaction's records are all there exactly once or all
#    absent; some but not all is a partial transaction (so is a committed
#    one missing some records: partial counts both);
# 4. per partition and producer, records come in transaction order and in
#    produce order within a transaction (reordered: how many must go for the
#    rest to be in order).
#
# Records of no transaction in the histories, or in another partition than
# their payload names, are foreign (a violation too: nobody else writes the
# topic).

TXN_PREFIX = "mt1"
TXN_OUTCOMES = ("committed", "aborted", "unknown")


def txn_payload(run: str, producer: int, txn: int, commit: bool, partition: int, seq: int) -> bytes:
    return f"{TXN_PREFIX}:{run}:{producer}:{txn}:{'c' if commit else 'a'}:{partition}:{seq}".encode()


def parse_txn(value: bytes | None, run: str) -> tuple[int, int, bool, int, int] | None:
    """(producer, txn, meant to commit, partition, seq) of one of this run's
    transactional payloads, else None."""
    if value is None:
        return None
    try:
        prefix, r, pr, t, intent, p, s = value.decode().split(":")
        if prefix != TXN_PREFIX or r != run or intent not in ("c", "a"):
            return None
        return int(pr), int(t), intent == "c", int(p), int(s)
    except (UnicodeDecodeError, ValueError):
        return None


@dataclass
class Txn:
    """One transaction of one producer: `partitions[seq]` is where record
    `seq` was sent (only records produce() accepted)."""

    producer: int
    txn: int
    commit: bool  # meant to commit (False: deliberately aborted)
    outcome: str = "unknown"  # committed | aborted | unknown
    partitions: list[int] = field(default_factory=list)
    how: str = ""  # why the outcome, when not the intended one (an error's name)
    began: float = 0.0  # time.monotonic() at begin_transaction()
    ended: float = 0.0  # … when its outcome was known (commit or abort returned, or re-created)
    acked: dict[int, int] = field(default_factory=dict)  # seq -> the offset its delivery report gave


@dataclass
class TxnReport:
    transactions: dict[str, int] = field(default_factory=dict)  # outcome -> count
    records: dict[str, int] = field(default_factory=dict)  # outcome -> records produced
    aborted_deliberately: int = 0
    aborted_after_error: int = 0
    unknown_present: int = 0  # unknown transactions found complete
    unknown_absent: int = 0  # … and found absent
    consumed: int = 0
    lost: int = 0
    duplicated: int = 0
    aborted_visible: int = 0  # records of aborted transactions seen
    partial: int = 0  # transactions neither all there nor all absent (committed or unknown)
    reordered: int = 0
    foreign: int = 0
    examples: dict[str, list[dict]] = field(default_factory=dict)  # violation -> a few {partition, offset, …}

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.aborted_visible or self.partial
                    or self.reordered or self.foreign)

    def example(self, kind: str, **what) -> None:
        xs = self.examples.setdefault(kind, [])
        if len(xs) < EXAMPLES:
            xs.append(what)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        return d


def verify_txn(run: str, history: list[Txn], consumed: dict[int, list[tuple[int, bytes | None]]],
               origin: float = 0.0) -> TxnReport:
    """The verdict of a transactional run (see above). `history`: every
    producer's transactions; `consumed`: each partition's (offset, value),
    read_committed, in log order; examples give times from `origin`."""
    r = TxnReport(transactions={o: 0 for o in TXN_OUTCOMES}, records={o: 0 for o in TXN_OUTCOMES})
    txns: dict[tuple[int, int], Txn] = {}
    for t in history:
        txns[(t.producer, t.txn)] = t
        outcome = t.outcome if t.outcome in TXN_OUTCOMES else "unknown"
        r.transactions[outcome] += 1
        r.records[outcome] += len(t.partitions)
        if outcome == "aborted":
            if t.commit:
                r.aborted_after_error += 1
            else:
                r.aborted_deliberately += 1
    seen: Counter[tuple[int, int, int]] = Counter()  # (producer, txn, seq) -> copies
    where: dict[tuple[int, int, int], tuple[int, int]] = {}  # first copy: (partition, offset)
    order: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (partition, producer) -> [(txn, seq)]
    for p, records in sorted(consumed.items()):
        for offset, value in records:
            r.consumed += 1
            parsed = parse_txn(value, run)
            t = txns.get(parsed[:2]) if parsed else None
            if (parsed is None or t is None or parsed[3] != p or not 0 <= parsed[4] < len(t.partitions)
                    or t.partitions[parsed[4]] != p or parsed[2] != t.commit):
                r.foreign += 1
                r.example("foreign", partition=p, offset=offset, value=repr(value)[:80])
                continue
            producer, txn, _, _, seq = parsed
            key = (producer, txn, seq)
            seen[key] += 1
            if seen[key] > 1:
                continue
            where[key] = (p, offset)
            order.setdefault((p, producer), []).append((txn, seq))
    for (producer, txn), t in sorted(txns.items()):
        n = len(t.partitions)
        copies = [seen[(producer, txn, s)] for s in range(n)]
        present = sum(1 for c in copies if c)
        extra = sum(c - 1 for c in copies if c > 1)
        offsets = sorted(where[(producer, txn, s)] for s in range(n) if copies[s])
        info = dict(producer=producer, txn=txn, outcome=t.outcome, how=t.how, records=n, present=present,
                    at=offsets[:3], began=round(t.began - origin, 3), ended=round(t.ended - origin, 3))
        if t.outcome == "aborted":
            if present:
                r.aborted_visible += sum(copies)
                r.example("aborted_visible", **info)
            continue
        if extra:
            r.duplicated += extra
            r.example("duplicated", **info)
        if t.outcome == "committed":
            if present < n:
                r.lost += n - present
                r.example("lost", **info, missing=[(t.partitions[s], s) for s in range(n) if not copies[s]][:5],
                          acked_at=[(t.partitions[s], t.acked.get(s)) for s in range(n) if not copies[s]][:5])
        elif present == n:
            r.unknown_present += 1
        elif present == 0:
            r.unknown_absent += 1
        if 0 < present < n:
            r.partial += 1
            r.example("partial", **info)
    for (p, producer), seq in sorted(order.items()):
        bad = out_of_order(seq)
        if bad:
            r.reordered += bad
            r.example("reordered", partition=p, producer=producer, head=seq[:5])
    return r
