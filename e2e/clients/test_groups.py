"""Consumer groups and committed offsets with real clients (issue 5).

Every test runs against Moldau and against Apache Kafka (MOLDAU_TEST_TARGET=kafka)
so that it encodes Kafka's behaviour. The module has a broker of its own (`gb`)
started with the same group settings for both targets:
group.initial.rebalance.delay.ms=0 and offsets.topic.num.partitions=3 (what
kafka-dist/kafka-up.sh sets for Kafka), given to Moldau as a properties file
(MOLDAU_CONFIG_FILE) and to Kafka through KAFKA_EXTRA_PROPS. The restart tests
restart that broker, so they come last. The offsets-retention test has a second
broker (`retention_broker`, offsets.retention.minutes=1).

Clients: confluent-kafka (librdkafka), kcat -G, the Java client (GroupCheck,
a long-running consumer that reports its rebalance callbacks on stdout),
kafka-python, aiokafka, and raw group requests (harness/kgroup.py) for bad input.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition

from conftest import STATE, admin_for, create_topic, retry_retriable, unique
from harness import broker as brokers
from harness import kgroup
from harness.broker import _die_with_parent
from harness.clients import RDKAFKA_LOGGER, ClientError, java_program_classpath
from harness.kcat import kcat_bin

GROUP_PROPS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
}

SESSION_MS = 6000  # the brokers' default group.min.session.timeout.ms


def is_moldau() -> bool:
    return brokers.target() == "moldau"


# ---------------------------------------------------------------------------
# the module's broker
def _start_with_props(b: brokers.Broker, props: dict[str, str]) -> None:
    brokers.start_with_properties(b, props, "group-test")


@pytest.fixture(scope="module")
def gb():
    b = brokers.new_broker(STATE / f"own-test_groups-{brokers.target()}")
    try:
        _start_with_props(b, GROUP_PROPS)
    except Exception:
        b.close(keep=True)
        raise
    yield b
    b.close(keep=True)
    import shutil

    shutil.rmtree(b.data_dir, ignore_errors=True)


# ---------------------------------------------------------------------------
# helpers
def produce(b, topic: str, per_partition: dict[int, int], tag: str = "v") -> dict[tuple[int, int], str]:
    """Produce `n` text records to each partition; returns {(partition, offset): value}."""
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5, "logger": RDKAFKA_LOGGER})
    out: dict[tuple[int, int], str] = {}
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)
        else:
            out[(msg.partition(), msg.offset())] = msg.value().decode()

    for part, n in per_partition.items():
        for i in range(n):
            p.produce(topic, value=f"{tag}-p{part}-{i}".encode(), key=f"k{i}".encode(), partition=part, on_delivery=cb)
            p.poll(0)
    assert p.flush(60) == 0 and not errors, errors
    return out


def gconsumer(b, group: str, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": b.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500,
        "logger": RDKAFKA_LOGGER,
    }
    conf.update(extra)
    return Consumer(conf)


def owned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def balanced(sets: list[set[int]], partitions: int) -> bool:
    total = sum(len(s) for s in sets)
    union = set().union(*sets)
    return all(sets) and total == partitions and union == set(range(partitions))


def wait_until(pred, timeout: float, what: str, step=None, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if step is not None:
            step()
        v = pred()
        if v:
            return v
        if step is None:
            time.sleep(interval)
    raise AssertionError(f"not within {timeout}s: {what}")


COORDINATOR_ERRORS = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)


def retry_coordinator(fn, timeout: float = 60.0):
    """Call fn(); retry on retriable errors and on the coordinator errors real clients
    retry (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE:
    the coordinator is moving or loading its groups, e.g. right after a start)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except KafkaException as e:
            err = e.args[0] if e.args else None
            ok = err is not None and (err.retriable() or err.code() in COORDINATOR_ERRORS)
            if not ok or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def describe(b, group: str):
    a = admin_for(b)
    return retry_coordinator(lambda: a.describe_consumer_groups([group], request_timeout=15)[group].result(20))


def committed_offsets(b, group: str, topic: str | None = None) -> dict[tuple[str, int], int]:
    a = admin_for(b)
    res = retry_coordinator(
        lambda: a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=15)[group].result(20)
    )
    return {(tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if topic is None or tp.topic == topic}


def member_partitions(desc, topic: str, by: str = "client_id") -> dict[str, set[int]]:
    """client id (or `by`) -> partitions of `topic` assigned to that member (DescribeGroups)."""
    out: dict[str, set[int]] = {}
    for m in desc.members:
        ps = {tp.partition for tp in (m.assignment.topic_partitions if m.assignment else []) if tp.topic == topic}
        out.setdefault(getattr(m, by), set()).update(ps)
    return out


# ---------------------------------------------------------------------------
# confluent-kafka: three members, 6 partitions
@pytest.mark.timeout(300)
def test_three_confluent_consumers_share_and_move_partitions_exactly_once(gb):
    topic = create_topic(gb, unique("g3"), 6)
    group = unique("grp3")
    names = ["a", "b", "c"]
    cs = {n: gconsumer(gb, group, **{"client.id": f"member-{n}"}) for n in names}
    seen: list[tuple[str, int, int, str]] = []
    failures: list[str] = []
    active = list(names)

    def step():
        for n in active:
            m = cs[n].poll(0.05)
            if m is None:
                continue
            if m.error():
                raise AssertionError(f"{n}: {m.error()}")
            seen.append((n, m.partition(), m.offset(), m.value().decode()))
            try:
                # commit after processing, synchronously
                cs[n].commit(message=m, asynchronous=False)
            except KafkaException as e:
                failures.append(f"{n} commit p{m.partition()}@{m.offset()}: {e}")

    try:
        for c in cs.values():
            c.subscribe([topic])
        t0 = time.monotonic()
        wait_until(lambda: balanced([owned(cs[n]) for n in active], 6), 60, "3 members share 6 partitions", step)
        print(f"3 members balanced in {time.monotonic() - t0:.1f}s: { {n: sorted(owned(cs[n])) for n in active} }")
        # the coordinator's view agrees: each partition owned by exactly one member
        d = describe(gb, group)
        assert d.state == ConsumerGroupState.STABLE, d.state
        assert len(d.members) == 3
        mp = member_partitions(d, topic)
        assert {k: v for k, v in mp.items()} == {f"member-{n}": owned(cs[n]) for n in names}, mp

        first = produce(gb, topic, {p: 50 for p in range(6)}, tag="one")
        wait_until(lambda: len(seen) >= 300, 90, f"300 records consumed (have {len(seen)})", step)
        for _ in range(10):
            step()
        # each member only consumed what it owns
        for n, p, _, _ in seen:
            assert p in owned(cs[n]), (n, p)

        # one member leaves: its partitions move to the other two
        moved = owned(cs["c"])
        active.remove("c")
        cs["c"].close()
        t1 = time.monotonic()
        wait_until(lambda: balanced([owned(cs[n]) for n in active], 6), 60, "2 members share 6 partitions", step)
        took = time.monotonic() - t1
        print(f"partitions {sorted(moved)} moved in {took:.1f}s: { {n: sorted(owned(cs[n])) for n in active} }")
        assert took < SESSION_MS / 1000, f"partitions of the member that left moved after {took:.1f}s"
        d = describe(gb, group)
        assert len(d.members) == 2
        assert member_partitions(d, topic) == {f"member-{n}": owned(cs[n]) for n in active}

        second = produce(gb, topic, {p: 50 for p in range(6)}, tag="two")
        wait_until(lambda: len(seen) >= 600, 90, f"600 records consumed (have {len(seen)})", step)
        for _ in range(20):
            step()
        assert not failures, failures
        got: dict[tuple[int, int], list[str]] = {}
        for n, p, off, v in seen:
            got.setdefault((p, off), []).append(v)
        dups = {k: v for k, v in got.items() if len(v) > 1}
        assert not dups, f"consumed more than once: {list(dups.items())[:10]}"
        expected = {**first, **second}
        assert {k: v[0] for k, v in got.items()} == expected
        assert committed_offsets(gb, group, topic) == {(topic, p): 100 for p in range(6)}
    finally:
        for n in active:
            cs[n].close()


@pytest.mark.timeout(300)
def test_confluent_group_churn_while_producing_no_committed_record_redelivered(gb):
    """Members leave and join while records keep arriving. With a synchronous commit
    after each record, every record is consumed, and a record is consumed twice only
    if the commit after its first delivery failed (e.g. REBALANCE_IN_PROGRESS)."""
    topic = create_topic(gb, unique("churn"), 6)
    group = unique("churngrp")
    cs: dict[str, Consumer] = {}
    active: list[str] = []
    seen: list[tuple[str, int, int, str]] = []
    uncommitted: set[tuple[int, int]] = set()

    def join(n):
        cs[n] = gconsumer(gb, group, **{"client.id": f"churn-{n}"})
        cs[n].subscribe([topic])
        active.append(n)

    def step():
        for n in list(active):
            m = cs[n].poll(0.05)
            if m is None:
                continue
            assert not m.error(), f"{n}: {m.error()}"
            seen.append((n, m.partition(), m.offset(), m.value().decode()))
            try:
                cs[n].commit(message=m, asynchronous=False)
            except KafkaException:
                uncommitted.add((m.partition(), m.offset()))

    produced: dict[tuple[int, int], str] = {}
    done = threading.Event()
    perr: list[BaseException] = []

    def producer():
        try:
            for i in range(20):
                produced.update(produce(gb, topic, {p: 10 for p in range(6)}, tag=f"churn{i}"))
                time.sleep(0.4)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            perr.append(e)
        finally:
            done.set()

    try:
        for n in ("a", "b", "c"):
            join(n)
        wait_until(lambda: balanced([owned(cs[n]) for n in active], 6), 60, "3 members share 6 partitions", step)
        t = threading.Thread(target=producer, daemon=True)
        t.start()
        churn = [("leave", "c"), ("join", "d"), ("leave", "a"), ("join", "e")]
        next_at = time.monotonic() + 1.5
        while not done.is_set() or churn:
            step()
            if churn and time.monotonic() >= next_at:
                what, n = churn.pop(0)
                if what == "leave":
                    active.remove(n)
                    cs[n].close()
                else:
                    join(n)
                next_at = time.monotonic() + 1.5
        t.join(60)
        assert not perr, perr
        assert len(produced) == 1200
        wait_until(lambda: {(p, o) for _, p, o, _ in seen} >= set(produced), 90, "every record consumed", step)
        for _ in range(20):
            step()
        counts: dict[tuple[int, int], int] = {}
        for _, p, o, v in seen:
            assert produced[(p, o)] == v
            counts[(p, o)] = counts.get((p, o), 0) + 1
        dups = {k for k, v in counts.items() if v > 1}
        print(f"{len(seen)} deliveries of {len(produced)} records; {len(uncommitted)} failed commits; {len(dups)} redelivered")
        bad = sorted(dups - uncommitted)
        assert not bad, f"redelivered although their commit succeeded: {bad[:10]}"
        assert balanced([owned(cs[n]) for n in active], 6)
    finally:
        for n in active:
            cs[n].close()


# ---------------------------------------------------------------------------
# kcat -G
class Proc:
    """A child process whose stdout lines are collected by a thread."""

    def __init__(self, cmd: list[str], log: Path, stdin=None):
        self.log = open(log, "wb")
        self.p = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self.log, stdin=stdin, preexec_fn=_die_with_parent, text=True, bufsize=1
        )
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def snapshot(self) -> list[str]:
        with self.lock:
            return list(self.lines)

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self.t.join(5)
        self.log.close()
        return self.p.returncode


@pytest.mark.timeout(240)
def test_kcat_balanced_consumer_group(gb):
    topic = create_topic(gb, unique("kg"), 4)
    group = unique("kcatgrp")
    procs = {}
    try:
        for n in ("a", "b"):
            procs[n] = Proc(
                [
                    kcat_bin(), "-b", gb.bootstrap, "-G", group, topic,
                    "-X", f"client.id=kcat-{n}", "-X", "auto.offset.reset=earliest",
                    "-X", f"session.timeout.ms={SESSION_MS}", "-X", "heartbeat.interval.ms=500",
                    "-u", "-f", "%p|%o|%s\n",
                ],
                STATE / f"kcat-{group}-{n}.log",
            )

        def ready():
            try:
                d = describe(gb, group)
            except KafkaException:
                return None  # not known yet
            if d.state != ConsumerGroupState.STABLE or len(d.members) != 2:
                return None
            mp = member_partitions(d, topic)
            return mp if set(mp) == {"kcat-a", "kcat-b"} and balanced(list(mp.values()), 4) else None

        mp = wait_until(ready, 60, "two kcat -G members share 4 partitions", interval=0.5)
        expected = produce(gb, topic, {p: 50 for p in range(4)}, tag="kcat")
        wait_until(lambda: sum(len(p.snapshot()) for p in procs.values()) >= 200, 60, "200 records printed by kcat")
        time.sleep(1)
        got: dict[tuple[int, int], list[tuple[str, str]]] = {}
        for n, pr in procs.items():
            for line in pr.snapshot():
                p, off, v = line.split("|", 2)
                assert int(p) in mp[f"kcat-{n}"], f"kcat-{n} printed partition {p}, owns {mp[f'kcat-{n}']}"
                got.setdefault((int(p), int(off)), []).append((n, v))
        assert all(len(v) == 1 for v in got.values()), "a record was consumed twice"
        assert {k: v[0][1] for k, v in got.items()} == expected
        assert all(pr.snapshot() for pr in procs.values()), "one kcat consumed nothing"
    finally:
        for pr in procs.values():
            pr.stop()
    # kcat commits what it consumed when it closes (enable.auto.commit)
    assert committed_offsets(gb, group, topic) == {(topic, p): 50 for p in range(4)}


# ---------------------------------------------------------------------------
# the Java client
def java_group_classpath() -> str:
    try:
        return java_program_classpath("GroupCheck")
    except ClientError as e:
        pytest.fail(str(e))


class JavaMember:
    """One GroupCheck process (see GroupCheck.java for the event lines)."""

    def __init__(self, b, group: str, topic: str, name: str, **props):
        cmd = [
            os.environ.get("JAVA", "java"), "-Xmx192m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", java_group_classpath(),
            "io.moldau.e2e.GroupCheck", "consume", b.bootstrap, group, topic,
            f"client.id=java-{name}", *[f"{k}={v}" for k, v in props.items()],
        ]
        self.name = name
        self.proc = Proc(cmd, STATE / f"java-{group}-{name}.log", stdin=subprocess.PIPE)

    def events(self, kinds=("ASSIGNED", "REVOKED", "LOST", "OWNED")) -> list[tuple[str, int, set[int]]]:
        out = []
        for line in self.proc.snapshot():
            parts = line.split(" ")
            if parts[0] in kinds:
                ps = set() if parts[2] == "-" else {int(x) for x in parts[2].split(",")}
                out.append((parts[0], int(parts[1]), ps))
        return out

    def owned(self) -> tuple[int, set[int]] | None:
        ev = [e for e in self.events(("OWNED",))]
        return (ev[-1][1], ev[-1][2]) if ev else None

    def records(self) -> list[tuple[int, int, str]]:
        out = []
        for line in self.proc.snapshot():
            if line.startswith("REC "):
                _, p, off, v = line.split(" ", 3)
                out.append((int(p), int(off), v))
        return out

    def commit_failures(self) -> list[str]:
        return [line for line in self.proc.snapshot() if line.startswith("COMMITFAIL")]

    def close(self, timeout: float = 60) -> None:
        if self.proc.p.poll() is None:
            try:
                self.proc.p.stdin.write("close\n")
                self.proc.p.stdin.flush()
            except OSError:
                pass
            try:
                self.proc.p.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        self.proc.stop(signal.SIGKILL)
        assert "CLOSED" in self.proc.snapshot(), f"java-{self.name} did not close: {self.proc.snapshot()[-5:]}"

    def kill(self) -> None:
        self.proc.stop(signal.SIGKILL)


def java_balanced(members: list[JavaMember], partitions: int):
    o = [m.owned() for m in members]
    if any(x is None for x in o):
        return None
    return o if balanced([x[1] for x in o], partitions) else None


@pytest.mark.timeout(300)
def test_java_cooperative_sticky_moves_only_what_it_must(gb):
    topic = create_topic(gb, unique("coop"), 6)
    group = unique("coopgrp")
    props = {
        "partition.assignment.strategy": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        "session.timeout.ms": "10000",
        "heartbeat.interval.ms": "500",
    }
    j1 = JavaMember(gb, group, topic, "one", **props)
    j2 = None
    try:
        wait_until(lambda: (j1.owned() or (0, set()))[1] == set(range(6)), 90, "java-one owns all 6 partitions", interval=0.2)
        before = len(j1.events())
        j2 = JavaMember(gb, group, topic, "two", **props)
        wait_until(lambda: java_balanced([j1, j2], 6), 90, "two java members share 6 partitions", interval=0.2)
        time.sleep(2)  # let the second (cooperative) round finish
        (g1, o1), (g2, o2) = java_balanced([j1, j2], 6)
        print(f"java-one {sorted(o1)} gen {g1}, java-two {sorted(o2)} gen {g2}")
        assert len(o1) == 3 and len(o2) == 3
        after = j1.events()[before:]
        revoked = set().union(*[ps for k, _, ps in after if k == "REVOKED"]) if after else set()
        # incremental: java-one gave up exactly what java-two got, never all it had
        assert revoked == o2, f"java-one revoked {sorted(revoked)}, java-two owns {sorted(o2)}; events {after}"
        assert not [e for e in after if e[0] == "LOST"], after
        assert all(ps for k, _, ps in after if k == "OWNED"), f"java-one was left with nothing at some point: {after}"
        d = describe(gb, group)
        assert d.partition_assignor == "cooperative-sticky", d.partition_assignor
        assert member_partitions(d, topic) == {"java-one": o1, "java-two": o2}

        expected = produce(gb, topic, {p: 10 for p in range(6)}, tag="coop")
        wait_until(lambda: len(j1.records()) + len(j2.records()) >= 60, 60, "60 records consumed by the java members")
        recs = [(p, off, v) for p, off, v in j1.records() + j2.records()]
        assert len(recs) == 60 and {(p, off): v for p, off, v in recs} == expected
        assert {p for p, _, _ in j1.records()} <= o1 and {p for p, _, _ in j2.records()} <= o2

        # java-two leaves: java-one gets its partitions back without revoking its own
        mark = len(j1.events())
        j2.close()
        j2 = None
        wait_until(lambda: (j1.owned() or (0, set()))[1] == set(range(6)), 60, "java-one owns all 6 again", interval=0.2)
        after = j1.events()[mark:]
        assert not [e for e in after if e[0] in ("REVOKED", "LOST") and e[2]], after
        assert not j1.commit_failures(), j1.commit_failures()
    finally:
        if j2 is not None:
            j2.close()
        j1.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("restarted", ["leader", "follower"])
def test_java_static_member_restart_keeps_partitions_without_rebalance(gb, restarted):
    topic = create_topic(gb, unique("static"), 6)
    group = unique("staticgrp")
    props = {"session.timeout.ms": "45000", "heartbeat.interval.ms": "500"}
    # the first member is the group's leader (it stays leader while it rejoins)
    j1 = JavaMember(gb, group, topic, "s1", **{"group.instance.id": "inst-1"}, **props)
    wait_until(lambda: (j1.owned() or (0, set()))[1] == set(range(6)), 90, "java-s1 owns all 6 partitions", interval=0.2)
    j2 = JavaMember(gb, group, topic, "s2", **{"group.instance.id": "inst-2"}, **props)
    members = {"inst-1": j1, "inst-2": j2}
    try:
        wait_until(lambda: java_balanced([j1, j2], 6), 90, "two static members share 6 partitions", interval=0.2)
        time.sleep(3)
        (g1, o1), (g2, o2) = java_balanced([j1, j2], 6)
        assert g1 == g2, (g1, g2)
        owned_before = {"inst-1": o1, "inst-2": o2}
        d = describe(gb, group)
        assert sorted(m.group_instance_id for m in d.members) == ["inst-1", "inst-2"]
        assert member_partitions(d, topic, by="group_instance_id") == owned_before
        inst, other = ("inst-1", "inst-2") if restarted == "leader" else ("inst-2", "inst-1")
        mark = len(members[other].events())

        # a static member stops (no LeaveGroup) and comes back with the same instance id
        members[inst].close()
        d = describe(gb, group)
        assert sorted(m.group_instance_id for m in d.members) == ["inst-1", "inst-2"], "static member left on close"
        back = JavaMember(gb, group, topic, f"{inst}-again", **{"group.instance.id": inst}, **props)
        members[inst] = back
        wait_until(lambda: back.owned(), 90, "restarted static member assigned", interval=0.2)
        time.sleep(3)
        gen_back, owned_back = back.owned()
        assert owned_back == owned_before[inst], f"restarted static member got {sorted(owned_back)}, had {sorted(owned_before[inst])}"
        assert gen_back == g1, f"generation changed from {g1} to {gen_back}: the group rebalanced"
        seen = members[other].events()[mark:]
        assert seen == [], f"the other member saw a rebalance: {seen}"
        d = describe(gb, group)
        assert d.state == ConsumerGroupState.STABLE
        assert member_partitions(d, topic, by="group_instance_id") == owned_before

        # both consume
        expected = produce(gb, topic, {p: 5 for p in range(6)}, tag="static")
        js = list(members.values())
        wait_until(lambda: sum(len(j.records()) for j in js) >= 30, 60, "30 records consumed")
        recs = [r for j in js for r in j.records()]
        assert {(p, off): v for p, off, v in recs} == expected and len(recs) == 30
        assert {p for p, _, _ in back.records()} <= owned_before[inst]
    finally:
        for m in members.values():
            m.close()
        if members["inst-1"] is not j1 and j1.proc.p.poll() is None:
            j1.close()
        if members["inst-2"] is not j2 and j2.proc.p.poll() is None:
            j2.close()


# ---------------------------------------------------------------------------
# kafka-python and aiokafka
@pytest.mark.timeout(180)
def test_kafka_python_group_consumes_and_commits(gb):
    from kafka import KafkaConsumer, TopicPartition as KTP

    topic = create_topic(gb, unique("kpg"), 2)
    group = unique("kpgrp")
    first = produce(gb, topic, {0: 20, 1: 20}, tag="kp1")

    def consumer():
        return KafkaConsumer(
            topic, bootstrap_servers=gb.bootstrap, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500,
            client_id="moldau-e2e-kafka-python-group",
        )

    def drain(c, n, timeout=60):
        out = {}
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=500).values():
                for m in batch:
                    assert (m.partition, m.offset) not in out, "consumed twice"
                    out[(m.partition, m.offset)] = m.value.decode()
        assert len(out) == n, f"{len(out)} of {n} within {timeout}s"
        return out

    c = consumer()
    try:
        assert drain(c, 40) == first
        assert c.assignment() == {KTP(topic, 0), KTP(topic, 1)}
        c.commit()
        assert c.committed(KTP(topic, 0)) == 20 and c.committed(KTP(topic, 1)) == 20
    finally:
        c.close()
    assert committed_offsets(gb, group, topic) == {(topic, 0): 20, (topic, 1): 20}
    second = produce(gb, topic, {0: 5, 1: 5}, tag="kp2")
    c = consumer()
    try:
        assert drain(c, 10) == second  # resumes at the committed offsets
        c.commit()
    finally:
        c.close()
    assert committed_offsets(gb, group, topic) == {(topic, 0): 25, (topic, 1): 25}


@pytest.mark.timeout(180)
def test_aiokafka_group_consumes_and_commits(gb):
    from aiokafka import AIOKafkaConsumer, TopicPartition as ATP

    topic = create_topic(gb, unique("aiog"), 2)
    group = unique("aiogrp")
    first = produce(gb, topic, {0: 15, 1: 15}, tag="aio1")

    async def run(n):
        c = AIOKafkaConsumer(
            topic, bootstrap_servers=gb.bootstrap, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500,
            client_id="moldau-e2e-aiokafka-group",
        )
        await c.start()
        out = {}
        try:
            deadline = time.monotonic() + 60
            while len(out) < n and time.monotonic() < deadline:
                got = await c.getmany(timeout_ms=500)
                for msgs in got.values():
                    for m in msgs:
                        assert (m.partition, m.offset) not in out, "consumed twice"
                        out[(m.partition, m.offset)] = m.value.decode()
            await c.commit()
            committed = {p: await c.committed(ATP(topic, p)) for p in (0, 1)}
        finally:
            await c.stop()
        return out, committed

    out, committed = asyncio.run(run(30))
    assert out == first
    assert committed == {0: 15, 1: 15}
    second = produce(gb, topic, {0: 4, 1: 6}, tag="aio2")
    out, committed = asyncio.run(run(10))
    assert out == second
    assert committed == {0: 19, 1: 21}
    assert committed_offsets(gb, group, topic) == {(topic, 0): 19, (topic, 1): 21}


# ---------------------------------------------------------------------------
# admin side
@pytest.mark.timeout(240)
def test_admin_list_describe_offsets_alter_delete_groups(gb):
    topic = create_topic(gb, unique("adm"), 3)
    group = unique("admgrp")
    produce(gb, topic, {p: 10 for p in range(3)}, tag="adm")
    a = admin_for(gb)
    c1 = gconsumer(gb, group, **{"client.id": "adm-1"})
    c2 = gconsumer(gb, group, **{"client.id": "adm-2"})
    closed = False
    try:
        c1.subscribe([topic])
        c2.subscribe([topic])

        def step():
            c1.poll(0.05)
            c2.poll(0.05)

        wait_until(lambda: balanced([owned(c1), owned(c2)], 3), 60, "two members share 3 partitions", step)
        want = {0: 4, 1: 5, 2: 6}
        for c in (c1, c2):
            tps = [TopicPartition(topic, p, want[p], metadata=f"meta-{p}") for p in sorted(owned(c))]
            c.commit(offsets=tps, asynchronous=False)

        listing = retry_retriable(lambda: a.list_consumer_groups(request_timeout=15).result(20))
        mine = [g for g in listing.valid if g.group_id == group]
        assert len(mine) == 1, [g.group_id for g in listing.valid]
        assert mine[0].state == ConsumerGroupState.STABLE and not mine[0].is_simple_consumer_group

        d = describe(gb, group)
        assert d.group_id == group and d.state == ConsumerGroupState.STABLE and not d.is_simple_consumer_group
        assert d.partition_assignor in ("range", "roundrobin"), d.partition_assignor
        assert sorted(m.client_id for m in d.members) == ["adm-1", "adm-2"]
        assert member_partitions(d, topic) == {"adm-1": owned(c1), "adm-2": owned(c2)}
        assert all(m.member_id for m in d.members)

        res = retry_retriable(
            lambda: a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=15)[group].result(20)
        )
        got = {tp.partition: (tp.offset, tp.metadata) for tp in res.topic_partitions if tp.topic == topic}
        assert got == {p: (o, f"meta-{p}") for p, o in want.items()}
        # only some partitions asked for
        res = a.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 1)])], request_timeout=15
        )[group].result(20)
        assert [(tp.partition, tp.offset) for tp in res.topic_partitions] == [(1, 5)]

        # not while it has members
        f = a.delete_consumer_groups([group], request_timeout=15)[group]
        with pytest.raises(KafkaException) as ei:
            f.result(20)
        assert ei.value.args[0].code() == KafkaError.NON_EMPTY_GROUP, ei.value
        # nor may its offsets be altered by a non-member (a simple commit to a non-empty group)
        f = a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])], request_timeout=15)[group]
        try:
            r = f.result(20)
            codes = [tp.error.code() if tp.error else 0 for tp in r.topic_partitions]
        except KafkaException as e:
            codes = [e.args[0].code()]
        assert codes == [KafkaError.UNKNOWN_MEMBER_ID], codes

        c1.close()
        c2.close()
        closed = True
        d = describe(gb, group)
        assert d.state == ConsumerGroupState.EMPTY and d.members == []
        # an emptied group keeps its protocol type "consumer", as Kafka's does:
        # clients do not take it for a simple group
        assert not d.is_simple_consumer_group
        listing = a.list_consumer_groups(request_timeout=15).result(20)
        assert [g.is_simple_consumer_group for g in listing.valid if g.group_id == group] == [False]

        # empty: offsets may be altered
        f = a.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1), TopicPartition(topic, 2, 9)])], request_timeout=15
        )[group]
        r = f.result(20)
        assert sorted((tp.partition, tp.offset, tp.error) for tp in r.topic_partitions) == [(0, 1, None), (2, 9, None)]
        assert committed_offsets(gb, group, topic) == {(topic, 0): 1, (topic, 1): 5, (topic, 2): 9}
        listing = a.list_consumer_groups(request_timeout=15).result(20)
        assert [g.state for g in listing.valid if g.group_id == group] == [ConsumerGroupState.EMPTY]
        # ListGroups v5: the group type and a filter on it
        listing = a.list_consumer_groups(request_timeout=15, types={ConsumerGroupType.CLASSIC}).result(20)
        assert [g.type for g in listing.valid if g.group_id == group] == [ConsumerGroupType.CLASSIC]
        listing = a.list_consumer_groups(request_timeout=15, types={ConsumerGroupType.CONSUMER}).result(20)
        assert group not in [g.group_id for g in listing.valid]

        # and deleted
        assert a.delete_consumer_groups([group], request_timeout=15)[group].result(20) is None
        listing = a.list_consumer_groups(request_timeout=15).result(20)
        assert group not in [g.group_id for g in listing.valid]
        res = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=15)[group].result(20)
        assert [tp for tp in res.topic_partitions if tp.offset >= 0] == []
        # deleting it again: it does not exist
        with pytest.raises(KafkaException) as ei:
            a.delete_consumer_groups([group], request_timeout=15)[group].result(20)
        assert ei.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND, ei.value
    finally:
        if not closed:
            c1.close()
            c2.close()


@pytest.mark.timeout(120)
def test_admin_simple_group_and_authorized_operations(gb):
    """A group created by offset commits only has no protocol type (a simple
    group); DescribeGroups reports the authorized operations when asked —
    without an authorizer every operation a group supports, as Kafka does —
    and none when not asked."""
    topic = create_topic(gb, unique("simple"), 1)
    group = unique("simplegrp")
    a = admin_for(gb)
    wait_coordinator(gb, group)

    def commit_once():
        f = a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])], request_timeout=15)
        return [tp.error for tp in f[group].result(20).topic_partitions] == [None]

    wait_until(lambda: retry_coordinator(commit_once), 60, "a simple commit creates the group", interval=0.5)
    listing = a.list_consumer_groups(request_timeout=15).result(20)
    assert [(g.is_simple_consumer_group, g.state) for g in listing.valid if g.group_id == group] == [(True, ConsumerGroupState.EMPTY)]
    d = describe(gb, group)
    assert d.is_simple_consumer_group and d.state == ConsumerGroupState.EMPTY
    assert d.authorized_operations is None, d.authorized_operations

    d = a.describe_consumer_groups([group], include_authorized_operations=True, request_timeout=15)[group].result(20)
    group_operations = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
    assert {o.name for o in d.authorized_operations} == group_operations
    assert a.delete_consumer_groups([group], request_timeout=15)[group].result(20) is None
    # a group that does not exist is described (DescribeGroups v5) as Dead,
    # without error, so with its operations too
    d = a.describe_consumer_groups([group], include_authorized_operations=True, request_timeout=15)[group].result(20)
    assert d.state == ConsumerGroupState.DEAD
    assert {o.name for o in d.authorized_operations} == group_operations


# ---------------------------------------------------------------------------
# bad input over the wire
def gconn(b) -> kgroup.GroupConn:
    c = kgroup.GroupConn(b.host, b.port, timeout=30)
    c.api_versions()
    return c


def wait_coordinator(b, group: str, timeout: float = 60) -> None:
    """Until the group's coordinator answers (a fresh broker creates and loads
    __consumer_offsets first: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR or
    COORDINATOR_LOAD_IN_PROGRESS meanwhile, which real clients retry)."""
    with gconn(b) as c:

        def ok():
            if c.find_coordinator(group)[0] != 0:
                return False
            return c.describe_group(group)["error"] == 0

        wait_until(ok, timeout, f"coordinator of {group} available", interval=0.5)


def join_and_sync(c: kgroup.GroupConn, group: str, topic: str, **kw) -> kgroup.JoinResult:
    j = c.join_two_step(group, protocols=[("range", kgroup.consumer_subscription([topic]))], **kw)
    assert j.error == kgroup.NONE, kgroup.name(j.error)
    assignments = []
    if j.leader == j.member_id:
        assignments = [(m, kgroup.consumer_assignment({topic: [0]} if i == 0 else {})) for i, (m, _, _) in enumerate(j.members)]
    err, _ = c.sync_group(group, j.generation, j.member_id, assignments)
    assert err == kgroup.NONE, kgroup.name(err)
    return j


@pytest.mark.timeout(120)
def test_wire_two_step_join_unknown_member_illegal_generation_inconsistent_protocol(gb):
    topic = create_topic(gb, unique("wire"), 1)
    group = unique("wiregrp")
    wait_coordinator(gb, group)
    n = kgroup.name
    with gconn(gb) as c:
        err, node, host, port = c.find_coordinator(group)
        assert err == 0 and (host, port) == (gb.host, gb.port), (err, node, host, port)

        first = c.join_group(group, member_id="", protocols=[("range", kgroup.consumer_subscription([topic]))])
        assert first.error == kgroup.MEMBER_ID_REQUIRED, n(first.error)
        assert first.member_id
        j = c.join_group(group, member_id=first.member_id, protocols=[("range", kgroup.consumer_subscription([topic]))])
        assert j.error == 0, n(j.error)
        assert j.member_id == first.member_id and j.leader == j.member_id and j.generation >= 1
        assert j.protocol == "range" and [m for m, _, _ in j.members] == [j.member_id]
        mine = kgroup.consumer_assignment({topic: [0]})
        err, assignment = c.sync_group(group, j.generation, j.member_id, [(j.member_id, mine)])
        assert err == 0 and kgroup.decode_assignment(assignment) == {topic: [0]}, (n(err), assignment)
        gen, mid = j.generation, j.member_id
        assert c.heartbeat(group, gen, mid) == 0

        # unknown member id
        assert n(c.heartbeat(group, gen, "no-such-member")) == n(kgroup.UNKNOWN_MEMBER_ID)
        assert n(c.sync_group(group, gen, "no-such-member")[0]) == n(kgroup.UNKNOWN_MEMBER_ID)
        assert c.offset_commit(group, {topic: {0: 1}}, generation=gen, member_id="no-such-member") == {
            (topic, 0): kgroup.UNKNOWN_MEMBER_ID
        }
        # illegal generation
        assert n(c.heartbeat(group, gen + 1, mid)) == n(kgroup.ILLEGAL_GENERATION)
        assert n(c.sync_group(group, gen + 1, mid, [(mid, mine)])[0]) == n(kgroup.ILLEGAL_GENERATION)
        assert c.offset_commit(group, {topic: {0: 1}}, generation=gen + 1, member_id=mid) == {(topic, 0): kgroup.ILLEGAL_GENERATION}
        # the right generation commits
        assert c.offset_commit(group, {topic: {0: 1}}, generation=gen, member_id=mid) == {(topic, 0): 0}

        # inconsistent protocol: another protocol type, or no protocol in common
        with gconn(gb) as other:
            r = other.join_group(group, protocol_type="connect", protocols=[("range", b"x")])
            assert n(r.error) == n(kgroup.INCONSISTENT_GROUP_PROTOCOL)
            r = other.join_group(group, protocols=[("no-such-assignor", kgroup.consumer_subscription([topic]))])
            assert n(r.error) == n(kgroup.INCONSISTENT_GROUP_PROTOCOL)
        # the group is unharmed
        assert c.heartbeat(group, gen, mid) == 0
        d = c.describe_group(group)
        assert (d["error"], d["state"], d["protocol_type"], d["protocol"]) == (0, "Stable", "consumer", "range")
        assert [m["member_id"] for m in d["members"]] == [mid]

        # batch leave: one known, one unknown member
        err, members = c.leave_group(group, [(mid, None), ("no-such-member", None)])
        assert err == 0 and dict(members) == {mid: 0, "no-such-member": kgroup.UNKNOWN_MEMBER_ID}, (n(err), members)
        assert c.describe_group(group)["state"] == "Empty"


@pytest.mark.timeout(120)
def test_wire_offset_commit_unknown_partition(gb):
    topic = create_topic(gb, unique("wireoc"), 2)
    group = unique("wireocgrp")
    wait_coordinator(gb, group)
    with gconn(gb) as c:
        res = c.offset_commit(group, {topic: {0: 3, 1: 4, 7: 5}, unique("absent"): {0: 1}})
    absent = [k for k in res if k[0] != topic][0]
    assert res == {
        (topic, 0): 0,
        (topic, 1): 0,
        (topic, 7): kgroup.UNKNOWN_TOPIC_OR_PARTITION,
        absent: kgroup.UNKNOWN_TOPIC_OR_PARTITION,
    }, res
    assert committed_offsets(gb, group, topic) == {(topic, 0): 3, (topic, 1): 4}


@pytest.mark.timeout(180)
def test_wire_member_crashing_mid_rebalance_is_expired(gb):
    topic = create_topic(gb, unique("crash"), 2)
    group = unique("crashgrp")
    wait_coordinator(gb, group)
    proto = [("range", kgroup.consumer_subscription([topic]))]
    n = kgroup.name
    with gconn(gb) as a:
        ja = a.join_two_step(group, protocols=proto, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=20000)
        assert ja.error == 0, n(ja.error)
        err, _ = a.sync_group(group, ja.generation, ja.member_id, [(ja.member_id, kgroup.consumer_assignment({topic: [0, 1]}))])
        assert err == 0, n(err)
        amid = ja.member_id

        # B joins (two steps); its second join waits for the rebalance it started
        b = gconn(gb)
        jb1 = b.join_group(group, protocols=proto, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=20000)
        assert jb1.error == kgroup.MEMBER_ID_REQUIRED, n(jb1.error)
        box: queue.Queue = queue.Queue()
        t = threading.Thread(
            target=lambda: box.put(
                b.join_group(group, member_id=jb1.member_id, protocols=proto, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=20000)
            ),
            daemon=True,
        )
        t.start()
        # A learns of the rebalance from its heartbeat and rejoins
        wait_until(lambda: a.heartbeat(group, ja.generation, amid) == kgroup.REBALANCE_IN_PROGRESS, 20, "A told to rejoin", interval=0.3)
        j2 = a.join_group(group, member_id=amid, protocols=proto, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=20000)
        jb = box.get(timeout=20)
        assert j2.error == 0 and jb.error == 0, (n(j2.error), n(jb.error))
        assert j2.generation == jb.generation > ja.generation
        assert sorted(m for m, _, _ in j2.members) == sorted([amid, jb1.member_id])
        # B crashes now: it never syncs nor heartbeats
        b.close()
        t_crash = time.monotonic()
        assignments = [(amid, kgroup.consumer_assignment({topic: [0]})), (jb1.member_id, kgroup.consumer_assignment({topic: [1]}))]
        err, asg = a.sync_group(group, j2.generation, amid, assignments)
        assert err == 0 and kgroup.decode_assignment(asg) == {topic: [0]}, n(err)

        # A heartbeats until the coordinator expires B and asks for a new round
        def hb():
            e = a.heartbeat(group, j2.generation, amid)
            assert e in (0, kgroup.REBALANCE_IN_PROGRESS), n(e)
            return e == kgroup.REBALANCE_IN_PROGRESS

        wait_until(hb, SESSION_MS / 1000 + 20, "rebalance after B's session expired", interval=0.5)
        took = time.monotonic() - t_crash
        print(f"crashed member expired after {took:.1f}s (session {SESSION_MS} ms)")
        assert took >= SESSION_MS / 1000 - 1.5, f"B expired after {took:.1f}s, before its session timeout"
        j3 = a.join_group(group, member_id=amid, protocols=proto, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=20000)
        assert j3.error == 0, n(j3.error)
        assert j3.generation > j2.generation and [m for m, _, _ in j3.members] == [amid] and j3.leader == amid
        err, asg = a.sync_group(group, j3.generation, amid, [(amid, kgroup.consumer_assignment({topic: [0, 1]}))])
        assert err == 0 and kgroup.decode_assignment(asg) == {topic: [0, 1]}
        assert a.heartbeat(group, j3.generation, amid) == 0
        d = a.describe_group(group)
        assert d["state"] == "Stable" and [m["member_id"] for m in d["members"]] == [amid]
        # the expired member is gone
        with gconn(gb) as b2:
            assert n(b2.heartbeat(group, j2.generation, jb1.member_id)) == n(kgroup.UNKNOWN_MEMBER_ID)
        err, _ = a.leave_group(group, [(amid, None)])
        assert err == 0


@pytest.mark.timeout(120)
def test_wire_static_leader_rejoin_gets_members_and_same_generation(gb):
    """KIP-345/814 on the wire (JoinGroup v9, what the Java client sends): the restarted
    static leader keeps the generation, is told it leads, gets the members and
    skipAssignment=true, and its old incarnation is fenced."""
    topic = create_topic(gb, unique("wstat"), 2)
    group = unique("wstatgrp")
    wait_coordinator(gb, group)
    proto = [("range", kgroup.consumer_subscription([topic]))]
    kw = dict(protocols=proto, session_timeout_ms=20000, rebalance_timeout_ms=20000)
    n = kgroup.name
    with gconn(gb) as a, gconn(gb) as b:
        ja = a.join_two_step(group, instance_id="inst-a", **kw)
        assert ja.error == 0 and ja.leader == ja.member_id, n(ja.error)
        assert a.sync_group(group, ja.generation, ja.member_id, [(ja.member_id, kgroup.consumer_assignment({topic: [0, 1]}))], instance_id="inst-a")[0] == 0
        box: queue.Queue = queue.Queue()
        t = threading.Thread(target=lambda: box.put(b.join_two_step(group, instance_id="inst-b", **kw)), daemon=True)
        t.start()
        wait_until(lambda: a.heartbeat(group, ja.generation, ja.member_id, "inst-a") == kgroup.REBALANCE_IN_PROGRESS, 20, "A told to rejoin", interval=0.3)
        j2 = a.join_group(group, member_id=ja.member_id, instance_id="inst-a", **kw)
        jb = box.get(timeout=20)
        assert j2.error == 0 and jb.error == 0 and j2.generation == jb.generation, (n(j2.error), n(jb.error))
        asg = [(j2.member_id, kgroup.consumer_assignment({topic: [0]})), (jb.member_id, kgroup.consumer_assignment({topic: [1]}))]
        assert a.sync_group(group, j2.generation, j2.member_id, asg, instance_id="inst-a")[0] == 0
        err, got = b.sync_group(group, jb.generation, jb.member_id, instance_id="inst-b")
        assert err == 0 and kgroup.decode_assignment(got) == {topic: [1]}
        # A restarts: a new connection, no member id, the same instance id
        with gconn(gb) as a2:
            j3 = a2.join_group_v9(group, member_id="", instance_id="inst-a", **kw)

            assert j3.error == 0, n(j3.error)
            assert j3.generation == j2.generation, "the static leader's rejoin started a rebalance"
            assert j3.member_id and j3.member_id != j2.member_id
            assert j3.leader == j3.member_id
            assert j3.skip_assignment is True, "the leader must not reassign (KIP-814)"
            assert sorted(inst for _, inst, _ in j3.members) == ["inst-a", "inst-b"], j3.members
            err, got = a2.sync_group(group, j3.generation, j3.member_id, [], instance_id="inst-a")
            assert err == 0 and kgroup.decode_assignment(got) == {topic: [0]}
            assert b.heartbeat(group, jb.generation, jb.member_id, "inst-b") == 0
            assert a2.heartbeat(group, j3.generation, j3.member_id, "inst-a") == 0
            # the old incarnation is fenced
            assert n(a.heartbeat(group, j2.generation, j2.member_id, "inst-a")) == n(82)


@pytest.mark.timeout(120)
def test_wire_offset_metadata_too_large_and_offset_delete(gb):
    topic = create_topic(gb, unique("wod"), 2)
    group = unique("wodgrp")
    wait_coordinator(gb, group)
    n = kgroup.name
    with gconn(gb) as c:
        # offset.metadata.max.bytes is 4096 on both brokers
        res = c.offset_commit(group, {topic: {0: 1}}, metadata="m" * 5000)
        assert {k: n(v) for k, v in res.items()} == {(topic, 0): n(12)}
        res = c.offset_commit(group, {topic: {0: 2, 1: 3}}, metadata="m" * 4096)
        assert res == {(topic, 0): 0, (topic, 1): 0}
        # a member subscribed to the topic: its offsets may not be deleted
        j = join_and_sync(c, group, topic)
        err, parts = c.offset_delete(group, {topic: [0]})
        assert (n(err), {k: n(v) for k, v in parts.items()}) == (n(0), {(topic, 0): n(86)})
        err, _ = c.leave_group(group, [(j.member_id, None)])
        assert err == 0
        # empty: deleted, the other partition kept
        err, parts = c.offset_delete(group, {topic: [0]})
        assert (n(err), parts) == (n(0), {(topic, 0): 0})
    assert committed_offsets(gb, group, topic) == {(topic, 1): 3}
    with gconn(gb) as c:
        err, _ = c.offset_delete(unique("nogroup"), {topic: [0]})
        assert n(err) == n(69)  # GROUP_ID_NOT_FOUND


@pytest.mark.timeout(180)
def test_crashed_real_member_partitions_move_after_session_timeout(gb):
    """A kcat -G member is killed (SIGKILL: no LeaveGroup); a confluent consumer in the
    group gets its partitions once the session timeout has passed, not before."""
    topic = create_topic(gb, unique("crashk"), 4)
    group = unique("crashkgrp")
    c = gconsumer(gb, group, **{"client.id": "survivor"})
    k = Proc(
        [
            kcat_bin(), "-b", gb.bootstrap, "-G", group, topic, "-X", "client.id=victim",
            "-X", "auto.offset.reset=earliest", "-X", f"session.timeout.ms={SESSION_MS}",
            "-X", "heartbeat.interval.ms=500", "-u", "-f", "%p|%o|%s\n",
        ],
        STATE / f"kcat-{group}-victim.log",
    )
    try:
        c.subscribe([topic])
        wait_until(lambda: len(owned(c)) == 2 and len(describe(gb, group).members) == 2, 60, "kcat and confluent share 4 partitions",
                   step=lambda: c.poll(0.1))
        d = describe(gb, group)
        assert member_partitions(d, topic) == {"survivor": owned(c), "victim": set(range(4)) - owned(c)}
        k.stop(signal.SIGKILL)
        t0 = time.monotonic()
        wait_until(lambda: owned(c) == set(range(4)), SESSION_MS / 1000 + 30, "survivor owns all 4", step=lambda: c.poll(0.1))
        took = time.monotonic() - t0
        print(f"partitions of the killed member moved after {took:.1f}s (session {SESSION_MS} ms)")
        assert took >= SESSION_MS / 1000 - 1.5, f"moved after {took:.1f}s: before the session timeout"
        assert took <= SESSION_MS / 1000 + 10, f"moved only after {took:.1f}s"
        expected = produce(gb, topic, {p: 3 for p in range(4)}, tag="crashk")
        got = {}
        deadline = time.monotonic() + 30
        while len(got) < 12 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got[(m.partition(), m.offset())] = m.value().decode()
        assert got == expected
    finally:
        k.stop(signal.SIGKILL)
        c.close()


# ---------------------------------------------------------------------------
# lag in /metrics
def metric_value(text: str, name: str, labels: dict[str, str]) -> float | None:
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


@pytest.mark.timeout(120)
def test_metrics_group_lag(gb):
    topic = create_topic(gb, unique("lag"), 2)
    group = unique("laggrp")
    produce(gb, topic, {0: 10, 1: 4}, tag="lag")
    c = gconsumer(gb, group)
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)], asynchronous=False)
    finally:
        c.close()
    assert committed_offsets(gb, group, topic) == {(topic, 0): 3, (topic, 1): 4}
    if not is_moldau():
        pytest.skip("moldau_group_lag is Moldau's metric")
    url = f"http://{gb.host}:{gb.http_port}/metrics"

    def lag():
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        vals = {
            p: (
                metric_value(text, "moldau_group_lag", {"group": group, "topic": topic, "partition": str(p)}),
                metric_value(text, "moldau_group_committed_offset", {"group": group, "topic": topic, "partition": str(p)}),
            )
            for p in (0, 1)
        }
        return vals if vals == {0: (7.0, 3.0), 1: (0.0, 4.0)} else None

    wait_until(lag, 30, "moldau_group_lag 7 and 0, committed 3 and 4", interval=1)
    # more records: the lag grows
    produce(gb, topic, {1: 5}, tag="lag2")

    def lag2():
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        return metric_value(text, "moldau_group_lag", {"group": group, "topic": topic, "partition": "1"}) == 5.0

    wait_until(lag2, 30, "moldau_group_lag 5 on partition 1", interval=1)


# ---------------------------------------------------------------------------
# offsets retention (a broker of its own: offsets.retention.minutes=1)
@pytest.fixture(scope="module")
def retention_broker():
    b = brokers.new_broker(STATE / f"own-test_groups-retention-{brokers.target()}")
    try:
        _start_with_props(b, {**GROUP_PROPS, "offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000"})
    except Exception:
        b.close(keep=True)
        raise
    yield b
    b.close(keep=True)
    import shutil

    shutil.rmtree(b.data_dir, ignore_errors=True)


@pytest.mark.timeout(300)
def test_offsets_of_empty_groups_expire_after_retention(retention_broker):
    b = retention_broker
    topic = create_topic(b, unique("ret"), 2)
    produce(b, topic, {0: 5, 1: 5}, tag="ret")
    g_left, g_simple, g_active = unique("ret-left"), unique("ret-simple"), unique("ret-active")
    # a member that commits then leaves: the group is Empty
    c = gconsumer(b, g_left)
    c.subscribe([topic])
    wait_until(lambda: owned(c) == {0, 1}, 60, "member assigned", step=lambda: c.poll(0.1))
    c.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 3)], asynchronous=False)
    c.close()
    # a simple (generation -1) commit: never had members
    c = gconsumer(b, g_simple)
    c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    c.close()
    # a Stable group subscribed to the topic keeps its offsets however old
    active = gconsumer(b, g_active)
    active.subscribe([topic])
    wait_until(lambda: owned(active) == {0, 1}, 60, "active member assigned", step=lambda: active.poll(0.1))
    active.commit(offsets=[TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 1)], asynchronous=False)
    t0 = time.monotonic()
    try:
        assert committed_offsets(b, g_left, topic) == {(topic, 0): 2, (topic, 1): 3}
        assert committed_offsets(b, g_simple, topic) == {(topic, 0): 4}

        def gone(g):
            return {k: v for k, v in committed_offsets(b, g, topic).items() if v >= 0} == {}

        expired_at = None
        while time.monotonic() - t0 < 150:
            active.poll(0.5)
            if gone(g_left) and gone(g_simple):
                expired_at = time.monotonic() - t0
                break
            time.sleep(1)
        assert expired_at is not None, "offsets of empty groups still there 150 s after commit (retention 1 min)"
        print(f"offsets of empty groups expired {expired_at:.0f}s after commit")
        assert expired_at >= 55, f"expired after {expired_at:.0f}s, before offsets.retention.minutes=1"
        assert committed_offsets(b, g_active, topic) == {(topic, 0): 1, (topic, 1): 1}
    finally:
        active.close()


# ---------------------------------------------------------------------------
# restarts (last: they restart the module's broker)
@pytest.mark.restart
@pytest.mark.timeout(400)
@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_committed_offsets_survive_broker_restart(gb, how):
    topic = create_topic(gb, unique(f"rs-{how}"), 3)
    group = unique(f"rsgrp-{how}")
    produced = produce(gb, topic, {p: 20 for p in range(3)}, tag=how)
    want = {0: 5, 1: 11, 2: 17}
    c = gconsumer(gb, group)
    c.subscribe([topic])
    got = {}
    deadline = time.monotonic() + 60
    while len(got) < 60 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got[(m.partition(), m.offset())] = m.value().decode()
    assert got == produced
    c.commit(offsets=[TopicPartition(topic, p, o, metadata=f"{how}-{p}") for p, o in want.items()], asynchronous=False)
    if how == "sigterm":
        c.close()
        gb.restart()
    else:
        # the commit was acknowledged: kill -9 right away, the consumer still open
        gb.restart(hard=True)
        c.close()
    assert gb.alive()

    c2 = gconsumer(gb, group)
    try:
        tps = retry_coordinator(lambda: c2.committed([TopicPartition(topic, p) for p in range(3)], timeout=20), timeout=60)
        assert {tp.partition: (tp.offset, tp.metadata) for tp in tps} == {p: (o, f"{how}-{p}") for p, o in want.items()}
        c2.subscribe([topic])
        rest = {}
        deadline = time.monotonic() + 90
        n = sum(20 - o for o in want.values())
        while len(rest) < n and time.monotonic() < deadline:
            m = c2.poll(0.2)
            if m is not None:
                assert not m.error(), m.error()
                assert (m.partition(), m.offset()) not in rest
                rest[(m.partition(), m.offset())] = m.value().decode()
        assert rest == {k: v for k, v in produced.items() if k[1] >= want[k[0]]}, "did not resume at the committed offsets"
    finally:
        c2.close()
