"""The fault checker's clients (confluent-kafka): the producers that write the
sequenced payloads and remember what was acknowledged, the admin calls
(create the topic, wait for leaders) and the consumer that reads every
partition back from the beginning at the end. Knows nothing about faults.

Producers are idempotent with `acks=all`. Each partition belongs to exactly
one producer thread, which numbers its payloads 0, 1, 2, … (accounting.py's
format) and records each delivery report in its own `Ledger` (callbacks run
on the thread that polls, so no locks). A producer that hits a fatal error
(librdkafka raises one when idempotence can no longer be guaranteed) is
purged and replaced; its undelivered records count as unacknowledged.
Each delivery report is also timed (time.monotonic() when its callback
runs): the ledger keeps every acknowledgement's time per partition and
every report's latency since its produce() call, for the checker's stall
and latency checks. `controller_views` asks each broker for the controller
its own Metadata names.

The transactional mode (`TxnProducerThread`, `consume_committed`): each
thread is one transactional producer over every partition, in transactions
of a bounded, seeded size, most committed and every n-th deliberately
aborted, and keeps the history accounting.verify_txn checks; the log is read
back by a read_committed consumer. MOLDAU_FAULTS_TXN_DEBUG=eos (librdkafka
debug contexts) puts the transactional producers' debug log in clients.log.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field

from accounting import Txn, payload, txn_payload

LOG = logging.getLogger("moldau.faults.clients")


_ADMINS: dict = {}


def admin(bootstrap: str):
    """One AdminClient per bootstrap, reused (it reconnects by itself)."""
    from confluent_kafka.admin import AdminClient

    if bootstrap not in _ADMINS:
        _ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap, "client.id": "moldau-faults-admin", "logger": LOG})
    return _ADMINS[bootstrap]


def wait_brokers(bootstrap: str, n: int, timeout: float) -> None:
    """Until the cluster's Metadata lists `n` brokers (all registered)."""
    deadline = time.monotonic() + timeout
    seen = 0
    while time.monotonic() < deadline:
        try:
            seen = len(admin(bootstrap).list_topics(timeout=5).brokers)
            if seen >= n:
                return
        except Exception:  # noqa: BLE001 - retried until the deadline
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the cluster lists {seen} brokers, not {n}, after {timeout}s")


def create_topic(bootstrap: str, name: str, partitions: int, rf: int, configs: dict[str, str], timeout: float = 60) -> None:
    from confluent_kafka.admin import NewTopic

    a = admin(bootstrap)
    a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=rf, config=configs)], request_timeout=timeout)[name].result(timeout)
    if not wait_led(bootstrap, name, partitions, timeout):
        raise RuntimeError(f"topic {name}: not every partition has a leader within {timeout}s")


def leaders(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr), from one Metadata request."""
    md = admin(bootstrap).list_topics(topic, timeout=5)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in t.partitions.values()}


def wait_led(bootstrap: str, topic: str, partitions: int, timeout: float) -> bool:
    """True once every partition has a leader (within `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ls = leaders(bootstrap, topic)
            if len(ls) == partitions and all(v[0] >= 0 for v in ls.values()):
                return True
        except Exception:  # noqa: BLE001 - retried until the deadline
            pass
        time.sleep(0.3)
    return False


@dataclass
class Ledger:
    """What one producer thread sent and what was acknowledged, per partition."""

    sent: dict[int, int] = field(default_factory=dict)  # partition -> seqs handed to produce()
    acked: dict[int, dict[int, int]] = field(default_factory=dict)  # partition -> {seq: offset}
    failed: dict[int, int] = field(default_factory=dict)  # partition -> failed delivery reports
    errors: dict[str, int] = field(default_factory=dict)  # error name -> count
    fatal: int = 0  # producers replaced after a fatal error
    # timing (time.monotonic()): when each ack's callback ran, in order
    ack_times: dict[int, list[float]] = field(default_factory=dict)  # partition -> [t]
    latencies: list[float] = field(default_factory=list)  # produce() -> delivery report, acked or failed
    late: list[tuple[float, int, int, str]] = field(default_factory=list)  # (latency, partition, seq, error) past the limit
    late_count: int = 0
    abandoned: int = 0  # records a fatally failed producer still held, never reported


def controller_views(nodes: dict, timeout: float = 3.0) -> dict[int, int | None]:
    """node -> the controller_id of that broker's own Metadata answer (one
    Metadata v1 request, no topics, on a fresh connection), None when it
    did not answer. `nodes`: node id -> harness Broker."""
    from harness import kwire

    out: dict[int, int | None] = {}
    for n, b in nodes.items():
        try:
            with kwire.Conn(b.host, b.port, timeout=timeout, client_id="moldau-faults-controller") as c:
                _, resp = c.request(3, 1, kwire.i32(0), flexible=False)  # Metadata v1, topics: []
            r = kwire.Reader(resp)
            for _ in range(r.i32()):  # brokers: node_id, host, port, rack
                r.i32(), r.string(), r.i32(), r.string()
            out[n] = r.i32()
        except Exception:  # noqa: BLE001 - down, paused or not answering: no view
            out[n] = None
    return out


class ProducerThread(threading.Thread):
    """Produces `rate` records/s over `partitions`, round-robin, until `stop`."""

    def __init__(self, index: int, bootstrap: str, topic: str, run: str, partitions: list[int],
                 rate: float, delivery_timeout_ms: int, stop: threading.Event, late_margin: float = 5.0):
        super().__init__(name=f"producer-{index}", daemon=True)
        self.index, self.bootstrap, self.topic, self.run_id = index, bootstrap, topic, run
        self.partitions, self.rate, self.delivery_timeout_ms, self.stop = partitions, rate, delivery_timeout_ms, stop
        self.ledger = Ledger(sent={p: 0 for p in partitions}, acked={p: {} for p in partitions},
                             failed={p: 0 for p in partitions}, ack_times={p: [] for p in partitions})
        # a delivery report later than this after produce() is recorded as late
        self.late_limit = delivery_timeout_ms / 1000 + late_margin
        self.fatal_error = None
        self.drain_timeout = delivery_timeout_ms / 1000 + 10
        self.exc: BaseException | None = None

    def _producer(self):
        from confluent_kafka import Producer

        def on_error(err):
            if err.fatal():
                self.fatal_error = err

        return Producer({
            "bootstrap.servers": self.bootstrap,
            "client.id": f"moldau-faults-{self.index}",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": self.delivery_timeout_ms,
            "request.timeout.ms": 10000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
            "error_cb": on_error,
            "logger": LOG,
        })

    def _report(self, partition: int, seq: int):
        ledger = self.ledger
        sent_at = time.monotonic()
        limit = self.late_limit

        def on_delivery(err, msg):
            now = time.monotonic()
            latency = now - sent_at
            ledger.latencies.append(latency)
            if latency > limit:
                ledger.late_count += 1
                if len(ledger.late) < 20:
                    ledger.late.append((round(latency, 3), partition, seq, err.name() if err else "acked"))
            if err is None:
                off = msg.offset()  # None when the broker's answer gave none (a duplicate retry)
                ledger.acked[partition][seq] = off if off is not None and off >= 0 else -1
                ledger.ack_times[partition].append(now)
            else:
                ledger.failed[partition] += 1
                ledger.errors[err.name()] = ledger.errors.get(err.name(), 0) + 1

        return on_delivery

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the checker
            self.exc = e

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        p = self._producer()
        gap = 1.0 / self.rate if self.rate > 0 else 0.0
        nxt = time.monotonic()
        i = 0
        while not self.stop.is_set():
            if self.fatal_error is not None:
                LOG.warning("%s: fatal error %s; replacing the producer", self.name, self.fatal_error)
                self.ledger.fatal += 1
                self.fatal_error = None
                self._retire(p, 5)
                p = self._producer()
            part = self.partitions[i % len(self.partitions)]
            seq = self.ledger.sent[part]
            try:
                p.produce(self.topic, value=payload(self.run_id, part, seq), partition=part, on_delivery=self._report(part, seq))
            except BufferError:
                p.poll(0.1)
                continue
            except KafkaException as e:  # fatal state: replaced at the top of the loop
                self.fatal_error = self.fatal_error or e.args[0]
                continue
            self.ledger.sent[part] = seq + 1
            i += 1
            nxt += gap
            try:
                while True:
                    p.poll(0)
                    delay = nxt - time.monotonic()
                    if delay <= 0 or self.stop.is_set():
                        break
                    p.poll(min(delay, 0.05))
            except KafkaException as e:  # fatal state: replaced at the top of the loop
                self.fatal_error = self.fatal_error or e.args[0]
            if nxt < time.monotonic() - 1.0:  # behind by more than a second: do not burst
                nxt = time.monotonic()
        self._retire(p, self.drain_timeout)

    def _retire(self, p, timeout: float) -> None:
        """Wait up to `timeout` for outstanding delivery reports, then purge the rest."""
        from confluent_kafka import KafkaException

        try:
            left = p.flush(timeout)
            if left:
                LOG.warning("%s: %d records undelivered after %.0fs; purged", self.name, left, timeout)
                p.purge(in_queue=True, in_flight=True)
                p.flush(0)
        except KafkaException as e:  # a fatal producer: what it still holds is unacknowledged
            try:
                left = len(p)
            except Exception:  # noqa: BLE001 - best effort
                left = 0
            self.ledger.abandoned += left
            LOG.warning("%s: retiring a failed producer (%d records unreported): %s", self.name, left, e)


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float) -> tuple[dict[int, list[tuple[int, bytes | None]]], dict[int, int], bool]:
    """Every partition from the beginning to its high watermark at the start
    of the read: ({partition: [(offset, value)]}, {partition: high}, complete)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"moldau-faults-verify-{topic}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 100,
        "logger": LOG,
    })
    try:
        deadline = time.monotonic() + timeout
        highs: dict[int, int] = {}
        for p in range(partitions):
            while True:
                try:
                    highs[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                    break
                except Exception:  # noqa: BLE001 - a leader may still be settling
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        out: dict[int, list[tuple[int, bytes | None]]] = {p: [] for p in range(partitions)}
        pos = {p: 0 for p in range(partitions)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while any(pos[p] < highs[p] for p in highs) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    continue  # partition EOF, or retriable
                p = m.partition()
                out[p].append((m.offset(), m.value()))
                pos[p] = m.offset() + 1
        return out, highs, all(pos[p] >= highs[p] for p in highs)
    finally:
        c.close()


# -- the transactional mode ---------------------------------------------------------

@dataclass
class TxnLedger:
    """One transactional producer thread's history (accounting.Txn, in
    order) and, for the checker's timing, the same measures as `Ledger`."""

    txns: list[Txn] = field(default_factory=list)
    sent: dict[int, int] = field(default_factory=dict)  # partition -> records handed to produce()
    errors: dict[str, int] = field(default_factory=dict)  # error name -> count (delivery and transaction calls)
    fatal: int = 0  # producers re-created (fatal, fenced, or a commit that never returned)
    commit_retries: int = 0  # commit_transaction() called again after a retriable error
    commit_latencies: list[float] = field(default_factory=list)  # successful commit_transaction() calls
    # timing: per partition, when a transaction that wrote to it committed
    ack_times: dict[int, list[float]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)  # produce() -> delivery report
    late: list[tuple[float, int, int, str]] = field(default_factory=list)
    late_count: int = 0
    abandoned: int = 0  # records a re-created producer still held, never reported

    def error(self, name: str) -> None:
        self.errors[name] = self.errors.get(name, 0) + 1


class Replace(Exception):
    """The producer must be re-created (init_transactions() again)."""


class TxnProducerThread(threading.Thread):
    """A transactional producer (`transactional.id` moldau-faults-<run>-<index>)
    writing `rate` records/s round-robin over `partitions`, in transactions
    of `size` (lo, hi) records (seeded), every `abort_every`-th aborted on
    purpose, until `stop`; the transaction in progress then finishes.

    Error handling as confluent-kafka documents it: an error that
    txn_requires_abort() aborts the transaction (outcome aborted); a
    retriable() error from commit_transaction() calls it again (at most
    `commit_attempts` times in all); a fatal() error, a fenced producer, or a
    commit that never returned re-create the producer: a new instance, same
    transactional id, whose init_transactions() fences the old one and
    completes its transaction. A transaction cut short before any commit
    attempt is then aborted; one whose commit was attempted is unknown."""

    def __init__(self, index: int, bootstrap: str, topic: str, run: str, partitions: list[int],
                 rate: float, delivery_timeout_ms: int, stop: threading.Event, late_margin: float = 5.0,
                 seed: int = 0, size: tuple[int, int] = (10, 50), abort_every: int = 5,
                 txn_timeout: float = 20.0, commit_attempts: int = 3):
        super().__init__(name=f"txn-producer-{index}", daemon=True)
        import random

        self.index, self.bootstrap, self.topic, self.run_id = index, bootstrap, topic, run
        self.partitions, self.rate, self.delivery_timeout_ms, self.stop = partitions, rate, delivery_timeout_ms, stop
        self.rng = random.Random(f"{seed}:{index}")
        self.size, self.abort_every = size, abort_every
        self.txn_timeout, self.commit_attempts = txn_timeout, commit_attempts
        self.transactional_id = f"moldau-faults-{run}-{index}"
        self.ledger = TxnLedger(sent={p: 0 for p in partitions}, ack_times={p: [] for p in partitions})
        self.late_limit = delivery_timeout_ms / 1000 + late_margin
        self.fatal_error = None
        # the transaction in progress at stop, its commit retried, and a re-creation
        self.drain_timeout = txn_timeout * (commit_attempts + 2) + delivery_timeout_ms / 1000
        self.exc: BaseException | None = None
        self._rr = 0
        self._gen = 0

    def _producer(self):
        from confluent_kafka import Producer

        self._gen += 1
        gen = self._gen

        def on_error(err):
            if err.fatal() and gen == self._gen:  # not a discarded instance's
                self.fatal_error = err

        extra = {}
        if os.environ.get("MOLDAU_FAULTS_TXN_DEBUG"):  # librdkafka's debug contexts, e.g. eos,msg (clients.log)
            extra["debug"] = os.environ["MOLDAU_FAULTS_TXN_DEBUG"]
            LOG.setLevel(logging.DEBUG)
        return Producer({
            **extra,
            "bootstrap.servers": self.bootstrap,
            "client.id": f"moldau-faults-txn-{self.index}",
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": max(60000, self.delivery_timeout_ms),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": self.delivery_timeout_ms,
            "request.timeout.ms": 10000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
            "error_cb": on_error,
            "logger": LOG,
        })

    def _init(self, deadline: float):
        """A new producer with init_transactions() done: retried (a new
        instance after a fatal error) until `deadline`."""
        from confluent_kafka import KafkaException

        while True:
            p = self._producer()
            self.fatal_error = None
            while True:
                try:
                    p.init_transactions(self.txn_timeout)
                    return p
                except KafkaException as e:
                    err = e.args[0]
                    self.ledger.error(f"init:{err.name()}")
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{self.name}: init_transactions failed until the deadline: {err}") from e
                    if err.fatal() or not err.retriable():
                        LOG.warning("%s: init_transactions: %s; a new instance", self.name, err)
                        self._discard(p)
                        time.sleep(0.5)
                        break
                    time.sleep(0.2)

    def _discard(self, p) -> None:
        try:
            p.purge(in_queue=True, in_flight=True)
            p.poll(0)
        except Exception:  # noqa: BLE001 - a fatal producer: what it holds is abandoned
            try:
                self.ledger.abandoned += len(p)
            except Exception:  # noqa: BLE001 - best effort
                pass

    def _report(self, partition: int, seq: int, t: Txn):
        ledger = self.ledger
        sent_at = time.monotonic()
        limit = self.late_limit

        def on_delivery(err, msg):
            latency = time.monotonic() - sent_at
            ledger.latencies.append(latency)
            if latency > limit:
                ledger.late_count += 1
                if len(ledger.late) < 20:
                    ledger.late.append((round(latency, 3), partition, seq, err.name() if err else "acked"))
            if err is not None:
                ledger.error(f"delivery:{err.name()}")
            elif msg.offset() is not None and msg.offset() >= 0:
                t.acked[seq] = msg.offset()

        return on_delivery

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the checker
            self.exc = e
            LOG.exception("%s died", self.name)

    def _hard_deadline(self) -> float:
        return time.monotonic() + 120 if not self.stop.is_set() else time.monotonic() + self.drain_timeout

    def _run(self) -> None:
        p = self._init(time.monotonic() + 120)
        gap = 1.0 / self.rate if self.rate > 0 else 0.0
        nxt = time.monotonic()
        n = 0
        while not self.stop.is_set():
            n += 1
            t = Txn(self.index, n, commit=(self.abort_every <= 0 or n % self.abort_every != 0), began=time.monotonic())
            self.ledger.txns.append(t)
            why = ""
            try:
                nxt = self._transaction(p, t, self.rng.randint(*self.size), gap, nxt)
            except Replace as e:
                why = str(e)
            if why:
                LOG.warning("%s: transaction %d: %s; re-creating the producer", self.name, n, why)
                self.ledger.fatal += 1
                self._discard(p)
                p = None
                p = self._init(self._hard_deadline())
                # init_transactions() of the new instance completed the old one's transaction
                if t.outcome == "open":
                    t.outcome = "aborted"
                t.how = t.how or why
            t.ended = t.ended or time.monotonic()
        # nothing open: every transaction ended (or its producer was re-created)
        self._discard(p)

    def _transaction(self, p, t: Txn, size: int, gap: float, nxt: float) -> float:
        """One transaction; sets t.outcome. Raises Replace (t.outcome is
        "open" when no commit was attempted, else "unknown")."""
        from confluent_kafka import KafkaException

        t.outcome = "open"
        if self.fatal_error is not None:
            raise Replace(f"fatal: {self.fatal_error}")
        try:
            p.begin_transaction()
        except KafkaException as e:
            self.ledger.error(f"begin:{e.args[0].name()}")
            raise Replace(f"begin_transaction: {e.args[0]}") from e
        abort_why = ""
        for seq in range(size):
            part = self.partitions[self._rr % len(self.partitions)]
            while True:
                try:
                    p.produce(self.topic, value=txn_payload(self.run_id, self.index, t.txn, t.commit, part, seq),
                              partition=part, on_delivery=self._report(part, len(t.partitions), t))
                    break
                except BufferError:
                    p.poll(0.1)
                except KafkaException as e:
                    err = e.args[0]
                    self.ledger.error(f"produce:{err.name()}")
                    if err.txn_requires_abort():
                        abort_why = f"produce: {err}"
                        break
                    raise Replace(f"produce: {err}") from e
            if abort_why:
                break
            t.partitions.append(part)
            self.ledger.sent[part] += 1
            self._rr += 1
            nxt += gap
            try:
                while True:
                    p.poll(0)
                    delay = nxt - time.monotonic()
                    if delay <= 0:
                        break
                    p.poll(min(delay, 0.05))
            except KafkaException as e:
                raise Replace(f"poll: {e.args[0]}") from e
            if nxt < time.monotonic() - 1.0:
                nxt = time.monotonic()
            if self.fatal_error is not None:
                raise Replace(f"fatal: {self.fatal_error}")
        if t.commit and not abort_why:
            abort_why = self._commit(p, t)
            if not abort_why:
                return nxt
        elif not t.commit:
            # the aborted records reach the log (and the replicas) before the abort marker
            try:
                p.flush(self.txn_timeout)
            except KafkaException as e:
                self.ledger.error(f"flush:{e.args[0].name()}")
        self._abort(p, t, abort_why)
        return nxt

    def _commit(self, p, t: Txn) -> str:
        """commit_transaction(), retried while retriable; "" when committed,
        else why the transaction must be aborted. Raises Replace."""
        from confluent_kafka import KafkaException

        for attempt in range(self.commit_attempts):
            started = time.monotonic()
            try:
                p.commit_transaction(self.txn_timeout)
            except KafkaException as e:
                err = e.args[0]
                self.ledger.error(f"commit:{err.name()}")
                if attempt == 0 and not err.txn_requires_abort():
                    t.outcome = "unknown"  # EndTxn may have been sent
                if err.fatal():
                    t.outcome = "unknown"
                    raise Replace(f"commit: {err}") from e
                if err.txn_requires_abort():
                    return f"commit: {err}"
                if err.retriable():
                    self.ledger.commit_retries += 1
                    continue
                t.outcome = "unknown"
                raise Replace(f"commit: {err}") from e
            now = time.monotonic()
            t.ended = now
            t.outcome = "committed"
            t.how = "" if attempt == 0 else f"committed at attempt {attempt + 1}"
            self.ledger.commit_latencies.append(now - started)
            for part in set(t.partitions):
                self.ledger.ack_times[part].append(now)
            return ""
        t.outcome = "unknown"
        raise Replace(f"commit did not complete in {self.commit_attempts} attempts")

    def _abort(self, p, t: Txn, why: str) -> None:
        """abort_transaction(), retried while retriable. Raises Replace
        (t.outcome stays "unknown" if a commit was attempted)."""
        from confluent_kafka import KafkaException

        for _ in range(self.commit_attempts):
            try:
                p.abort_transaction(self.txn_timeout)
            except KafkaException as e:
                err = e.args[0]
                self.ledger.error(f"abort:{err.name()}")
                if err.retriable() and not err.fatal():
                    continue
                raise Replace(f"abort: {err}") from e
            t.outcome = "aborted"
            t.ended = time.monotonic()
            t.how = why
            return
        raise Replace("abort did not complete")


def consume_committed(bootstrap: str, topic: str, partitions: int, timeout: float) -> tuple[dict[int, list[tuple[int, bytes | None]]], dict[int, int], bool]:
    """Every partition, read_committed, from the beginning to its end: the
    high watermark at the start of the read, reached when the consumer's
    position (a partition-EOF event, after the markers it skips) gets there.
    Returns ({partition: [(offset, value)]}, {partition: high}, complete)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    def consumer(isolation: str):
        return Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"moldau-faults-verify-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
            "logger": LOG,
        })

    deadline = time.monotonic() + timeout
    highs: dict[int, int] = {}
    w = consumer("read_uncommitted")
    try:
        for p in range(partitions):
            while True:
                try:
                    highs[p] = w.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                    break
                except Exception:  # noqa: BLE001 - a leader may still be settling
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
    finally:
        w.close()
    c = consumer("read_committed")
    try:
        out: dict[int, list[tuple[int, bytes | None]]] = {p: [] for p in range(partitions)}
        pos = {p: 0 for p in range(partitions)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while any(pos[p] < highs[p] for p in highs) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                p = m.partition()
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF and m.offset() is not None:
                        pos[p] = max(pos[p], m.offset())
                    continue
                out[p].append((m.offset(), m.value()))
                pos[p] = max(pos[p], m.offset() + 1)
        return out, highs, all(pos[p] >= highs[p] for p in highs)
    finally:
        c.close()


def locate(bootstrap: str, topic: str, wanted: dict[int, set[bytes]], timeout: float = 60) -> dict[int, dict[bytes, list[int]]]:
    """Where `wanted` values ({partition: {value}}) sit in the log read
    read_uncommitted, from the beginning to the high watermark: {partition:
    {value: [offsets]}} (an empty list: not in the log). For a violation's
    report: a record read_committed did not return, written or not."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"moldau-faults-locate-{topic}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_uncommitted", "fetch.wait.max.ms": 100, "logger": LOG})
    out = {p: {v: [] for v in vs} for p, vs in wanted.items()}
    try:
        highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in wanted}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
        pos = {p: 0 for p in wanted}
        deadline = time.monotonic() + timeout
        while any(pos[p] < highs[p] for p in wanted) and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                p = m.partition()
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF and m.offset() is not None:
                        pos[p] = max(pos[p], m.offset())
                    continue
                pos[p] = max(pos[p], m.offset() + 1)
                if m.value() in out[p]:
                    out[p][m.value()].append(m.offset())
    finally:
        c.close()
    return out
