"""Moving a partition's replicas while clients use it, and the copy rate of
a throttled move (issue #13, the broker-level reassignment tests).

Three brokers (node ids 0, 1, 2; for Moldau cluster mode `dir`, see
harness/cluster.py; for MOLDAU_TEST_TARGET=kafka three Apache Kafka 4.1
brokers, see `KafkaCluster` there), `auto.leader.rebalance.enable=false`.
Moves are started with Kafka's own `kafka-reassign-partitions` (its
`--throttle` sets the rates and throttled-replica lists, its `--cancel`
cancels); ListPartitionReassignments, DescribeLogDirs and
AlterPartitionReassignments are also asked directly through kafka-python's
admin client, confluent-kafka gives Metadata.

Under load (one partition, RF 2, `min.insync.replicas=2`, created on
{0, 1} with an explicit replica assignment): an
idempotent `acks=all` confluent-kafka producer writes numbered records
throughout (4 MB first, so that a move lasts seconds, then ~150 records/s);
three kcat consumers read throughout — two by partition (`-p 0`), one in a
consumer group (`-G`):

- the move {0, 1} → {1, 2} (throttled at 1 MB/s): sampled every 0.2 s, the
  partition is listed by ListPartitionReassignments (adding 2, removing 0)
  in every sample until the move is done and in none after; while it is
  listed Metadata shows the three replicas, once it is not Metadata shows
  exactly [1, 2] with both in sync; `--verify` reports it completed;
- a second move {1, 2} → {2, 0}, throttled at 100 kB/s so that it is
  still copying, is cancelled once broker 0 holds part (not all) of the
  log: the list is empty, Metadata shows [1, 2] with both in sync again and
  broker 0 no longer holds a replica (DescribeLogDirs);
- afterwards each kcat consumer has read every acknowledged record exactly
  once, in offset order, at the offset its acknowledgement gave, and no
  delivery failed.

Throttle rate: a partition on {0, 1} filled with 15 MB is moved to {1, 2}
with `--throttle 1000000` (1 MB/s; leader and follower rates, throttled
replica lists as the tool sets them). The new replica's size on broker 2
(DescribeLogDirs) is sampled every 0.25 s; the rate over the steady middle
of the copy — from 3 s after the first bytes arrive until 90 % is copied —
must be within 0.7–1.3 MB/s. The first seconds are excluded because a
throttle is judged on the rate over the recent one-second windows (Kafka's
`replication.quota.window.num` = 11): with no history yet, the first
fetches (up to `replica.fetch.max.bytes`, 1 MiB, each) are let through
before the meter has anything to hold them back with, so the copy starts
with a burst of about a second's worth, then settles at the limit. The
measured rate is printed (`-s` shows it); on a shared 2-core machine
Moldau gave 0.95–1.14 MB/s and Apache Kafka 4.1 0.87–0.95 MB/s (the
1 MiB fetches make the rate over ~9 s vary by about a tenth).

Every wait is bounded; the module takes about 45–60 s (against Kafka,
about 90 s: three JVMs start).
"""

from __future__ import annotations

import json
from functools import partial
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import STATE
from harness import broker as brokers
from harness import kafka_tools
from harness import kcat
from harness.clients import RDKAFKA_LOGGER
from harness.cluster import Cluster, KafkaCluster, backend, cluster_args
from harness.waiting import wait_until as _wait_until

wait_until = partial(_wait_until, every=0.2)

NODES = (0, 1, 2)
SETTINGS = {
    "auto.leader.rebalance.enable": "false",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
}

MOVE_TIMEOUT = 40.0  # a 4 MB move at 1 MB/s, with room
THROTTLE = 1_000_000  # bytes/s
SLOW_THROTTLE = 100_000  # bytes/s: the move that is cancelled
PRELOAD = (4000, 1000)  # records, value bytes: 4 MB before the moves
RATE_FILL = (1500, 10_000)  # 15 MB for the rate measurement
STEADY_AFTER = 3.0  # s after the first copied bytes: the burst is over
STEADY_UNTIL = 0.9  # of the log copied: the end of the measurement
METER_MEMORY = 11.0  # s: a throttle's rate meter spans the last 11 one-second windows

# When the last throttled copy of this module ended (time.monotonic()).
_last_throttled_copy: list[float] = []


@pytest.fixture(scope="module")
def cluster():
    if brokers.target() == "kafka":
        c = KafkaCluster(STATE / "move-under-load-kafka", size=len(NODES), settings=SETTINGS)
    else:
        c = Cluster(STATE / f"move-under-load-{backend()}", size=len(NODES), settings=SETTINGS, cluster_args=cluster_args("move"))
    c.start()
    try:
        wait_until(f"brokers {list(NODES)} registered", lambda: sorted(admin(c).list_topics(timeout=5).brokers) == list(NODES), 60)
        yield c
    finally:
        c.close(keep=True)


# -- helpers -------------------------------------------------------------------

_ADMINS: dict = {}


def admin(c):
    """confluent-kafka's AdminClient (Metadata, topics)."""
    from confluent_kafka.admin import AdminClient

    key = ("confluent", c.bootstrap)
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient({"bootstrap.servers": c.bootstrap, "client.id": "moldau-e2e-move", "logger": RDKAFKA_LOGGER})
    return _ADMINS[key]


def kadmin(c):
    """kafka-python's admin client (ListPartitionReassignments, DescribeLogDirs)."""
    from kafka.admin import KafkaAdminClient

    key = ("kafka-python", c.bootstrap)
    if key not in _ADMINS:
        _ADMINS[key] = KafkaAdminClient(bootstrap_servers=c.bootstrap.split(","), client_id="moldau-e2e-move-kp", request_timeout_ms=10000)
    return _ADMINS[key]


def replicas(c, topic: str) -> tuple[int, list[int], list[int]]:
    """Partition 0's (leader, replicas in Metadata's order, sorted ISR)."""
    t = admin(c).list_topics(topic, timeout=5).topics[topic]
    assert t.error is None, t.error
    p = t.partitions[0]
    return p.leader, list(p.replicas), sorted(p.isrs)


def wait_replicas(c, topic: str, want: list[int], timeout: float = 15.0):
    """Until Metadata shows exactly the replica set `want`, all in sync, led by one of them."""

    def there():
        leader, r, isr = replicas(c, topic)
        return sorted(r) == sorted(want) and isr == sorted(want) and leader in want and (leader, r, isr)

    return wait_until(f"{topic}-0 on {want}, all in sync", there, timeout)


def listed(c, topic: str) -> dict | None:
    """Partition 0's entry in ListPartitionReassignments (replicas, adding, removing), or None."""
    from kafka import TopicPartition

    return kadmin(c).list_partition_reassignments({topic: [0]}).get(TopicPartition(topic, 0))


def sizes(c, topic: str) -> dict[int, int]:
    """broker → the size of its replica of topic-0 (DescribeLogDirs); brokers without one are absent."""
    out = {}
    for b in kadmin(c).describe_log_dirs({topic: [0]}, brokers=list(NODES)):
        for d in b["log_dirs"]:
            for t in d["topics"]:
                for p in t["partitions"]:
                    if t["name"] == topic and p["partition_index"] == 0 and not p["is_future_key"]:
                        out[b["broker"]] = p["partition_size"]
    return out


def create_topic(c, prefix: str, on: list[int]) -> str:
    """A topic of one partition, RF 2, `min.insync.replicas=2`, on the
    brokers `on` (CreateTopics with an explicit replica assignment)."""
    from confluent_kafka.admin import NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    nt = NewTopic(name, num_partitions=1, replica_assignment=[on], config={"min.insync.replicas": "2"})
    admin(c).create_topics([nt], request_timeout=30)[name].result(30)
    # Checked on the answer that showed them in sync: asked again, Metadata
    # may come from a broker that has not learnt the topic yet.
    _, assigned, _ = wait_replicas(c, name, on, 30)
    assert assigned == on, "the replicas as assigned, preferred leader first"
    # Each broker learns the topic from the metadata log on its own (as in
    # Kafka, CreateTopics does not wait for all of them): a kcat started now
    # may ask one that does not know it yet, and kcat gives up at once.
    for n in NODES:
        wait_until(f"broker {n} listing {name}", lambda: known_to(c, n, name), 30)
    return name


def known_to(c, node: int, topic: str) -> bool:
    """Whether broker `node` itself (a fresh kcat bootstrapped with it
    alone, the answer checked to come from it) lists `topic`-0 with a leader.
    All topics are asked for: a Metadata request naming the topic could
    make a broker that does not know it yet auto-create it."""
    from harness import kcat

    try:
        md = kcat.metadata(c[node].bootstrap)
    except Exception:  # noqa: BLE001 - not answering yet is "not known"
        return False
    if md.get("originating_broker", {}).get("id") != node:
        return False
    t = next((t for t in md.get("topics", []) if t.get("topic") == topic), None)
    return bool(t) and not t.get("error") and any(p.get("partition") == 0 and p.get("leader", -1) >= 0 for p in t.get("partitions", []))


def reassign(c, tmp: Path, topic: str, target: list[int], *args: str) -> str:
    """`kafka-reassign-partitions ARGS --reassignment-json-file F` for topic-0 → target; its stdout."""
    f = tmp / f"{topic}-{'-'.join(map(str, target))}.json"
    f.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": target}]}))
    p = kafka_tools.reassign_partitions(c.bootstrap, *args, "--reassignment-json-file", str(f))
    assert p.returncode == 0, f"kafka-reassign-partitions {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    return p.stdout


def fill(c, topic: str, count: int, size: int) -> None:
    """`count` records of `size` bytes, acks=all, as fast as they go."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 1_000_000, "logger": RDKAFKA_LOGGER})
    failed = []
    for i in range(count):
        while True:
            try:
                p.produce(topic, value=b"%08d" % i + b"x" * (size - 8), partition=0, on_delivery=lambda e, m: e and failed.append(e))
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0 and not failed, failed[:5]


class LoadProducer(threading.Thread):
    """An idempotent `acks=all` confluent-kafka producer writing numbered
    values to partition 0: `burst` records of `burst_size` bytes at once,
    then `rate` small ones a second until finish(). `acked` maps each
    acknowledged value to its offset; `failed` lists failed deliveries."""

    def __init__(self, bootstrap: str, topic: str, burst: tuple[int, int], rate: float = 150.0):
        super().__init__(name=f"producer-{topic}", daemon=True)
        self.bootstrap, self.topic, self.burst, self.rate = bootstrap, topic, burst, rate
        self.acked: dict[bytes, int] = {}
        self.failed: list[tuple[bytes, str]] = []
        self.fatal = None
        self.exc: BaseException | None = None
        self.undelivered = None
        self._halt = threading.Event()

    def _on_error(self, err) -> None:
        if err.fatal():
            self.fatal = err

    def value(self, seq: int) -> bytes:
        count, size = self.burst
        head = b"%s:%08d:" % (self.topic.encode(), seq)
        return head + b"x" * max(size - len(head), 0) if seq < count else head

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by finish()
            self.exc = e

    def _run(self) -> None:
        from confluent_kafka import Producer

        p = Producer({
            "bootstrap.servers": self.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60000,
            "error_cb": self._on_error,
            "logger": RDKAFKA_LOGGER,
        })

        def on_delivery(err, msg):
            if err is None:
                self.acked[msg.value()] = msg.offset()
            else:
                self.failed.append((msg.value(), err.name()))

        seq = 0
        while not self._halt.is_set() and self.fatal is None:
            try:
                p.produce(self.topic, value=self.value(seq), partition=0, on_delivery=on_delivery)
            except BufferError:
                p.poll(0.1)
                continue
            seq += 1
            p.poll(0 if seq < self.burst[0] else 1.0 / self.rate)
        self.undelivered = p.flush(60)

    def wait_acked(self, n: int, timeout: float = 60.0) -> None:
        wait_until(f"{n} records acknowledged", lambda: len(self.acked) >= n or self.exc or self.fatal, timeout)

    def halt(self) -> None:
        self._halt.set()

    def finish(self) -> list[tuple[int, bytes]]:
        """Stops; every (offset, value) acknowledged, in offset order."""
        self.halt()
        self.join(90)
        assert not self.is_alive(), "the producer did not finish"
        if self.exc:
            raise self.exc
        assert self.fatal is None, f"fatal producer error {self.fatal}"
        assert self.undelivered == 0 and not self.failed, f"undelivered {self.undelivered}, failed {self.failed[:5]}"
        return sorted((o, v) for v, o in self.acked.items())


class KcatReader:
    """`kcat -C` reading topic-0 from the beginning until stopped, by
    partition or (`group`) in a consumer group; its output goes to a file."""

    def __init__(self, bootstrap: str, topic: str, out: Path, group: str | None = None):
        self.out, self.err = out, out.with_suffix(".err")
        # librdkafka's topic and fetch debug lines go to the .err file: a
        # reader that stops short says why (see read_up_to's message)
        args = [kcat.kcat_bin(), "-C", "-b", bootstrap, "-u", "-q", "-f", kcat.FORMAT, "-o", "beginning", "-d", "topic,fetch"]
        args += ["-G", group, topic] if group else ["-t", topic, "-p", "0"]
        with open(self.out, "wb") as o, open(self.err, "wb") as e:
            self.proc = subprocess.Popen(args, stdout=o, stderr=e, stdin=subprocess.DEVNULL)
        self.what = f"kcat {'-G ' + group if group else '-p 0'}"
        self.where = "nothing read yet"

    def records(self) -> list[tuple[int, bytes]]:
        """(offset, value) of every record printed so far (whole lines only)."""
        data = self.out.read_bytes()
        return [(r["offset"], r["value"]) for r in kcat.parse(data[: data.rfind(b"\n") + 1])]

    def read_up_to(self, offset: int) -> bool | str:
        """True once a record at or past `offset` was printed; else (falsy
        for wait_until, shown in its message) where the reader is."""
        got = self.records()
        if got and got[-1][0] >= offset:
            return True
        self.where = f"last offset read {got[-1][0] if got else None}, kcat {'running' if self.proc.poll() is None else f'exited {self.proc.returncode}'}"
        return False

    def stderr_tail(self, lines: int = 60) -> str:
        return "\n".join(self.err.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


# -- under load ----------------------------------------------------------------


@pytest.fixture(scope="module")
def load(cluster, tmp_path_factory):
    """A topic on {0, 1} with the producer and three kcat readers running."""
    topic = create_topic(cluster, "move", [0, 1])
    producer = LoadProducer(cluster.bootstrap, topic, PRELOAD)
    producer.start()
    out = tmp_path_factory.mktemp("kcat")
    readers = [
        KcatReader(cluster.bootstrap, topic, out / "p0-a.out"),
        KcatReader(cluster.bootstrap, topic, out / "p0-b.out"),
        KcatReader(cluster.bootstrap, topic, out / "group.out", group=f"move-{uuid.uuid4().hex[:6]}"),
    ]
    try:
        producer.wait_acked(PRELOAD[0])
        yield topic, producer, readers
    finally:
        for r in readers:
            r.stop()
        producer.halt()


def test_a_move_under_load_is_listed_until_it_is_done(cluster, load, tmp_path):
    topic, producer, _ = load
    assert sorted(replicas(cluster, topic)[1]) == [0, 1]
    out = reassign(cluster, tmp_path, topic, [1, 2], "--execute", "--throttle", str(THROTTLE))
    assert f"Successfully started partition reassignment for {topic}-0" in out, out

    # (Metadata's replica set, then the list entry) every 0.2 s until the
    # list is empty, and for two seconds after
    samples = []
    deadline = time.monotonic() + MOVE_TIMEOUT
    done_at = None
    while done_at is None or time.monotonic() < done_at + 2.0:
        assert time.monotonic() < deadline, f"still listed after {MOVE_TIMEOUT}s: {samples[-3:]}"
        before = set(replicas(cluster, topic)[1])
        entry = listed(cluster, topic)
        samples.append((before, entry))
        if entry is None and done_at is None:
            done_at = time.monotonic()
        time.sleep(0.2)

    shown = [e is not None for _, e in samples]
    runs = shown.index(False)
    assert runs > 0, f"the move was never seen listed: {samples[:3]}"
    assert not any(shown[runs:]), f"listed again after it was done: {shown}"
    for before, entry in samples[:runs]:
        assert sorted(entry["replicas"]) == [0, 1, 2] and entry["adding_replicas"] == [2] and entry["removing_replicas"] == [0], entry
        assert before != {1, 2}, f"listed after Metadata showed it done: {samples}"
    leader, r, isr = wait_replicas(cluster, topic, [1, 2], 5)
    assert r == [1, 2], f"Metadata's replicas in the target's order: {r}"
    print(f"{topic}: listed in {runs} samples (~{runs * 0.2:.1f}s), then done; leader {leader}")

    v = reassign(cluster, tmp_path, topic, [1, 2], "--verify")
    assert f"Reassignment of partition {topic}-0 is completed." in v, v
    _last_throttled_copy.append(time.monotonic())
    assert producer.is_alive() and not producer.failed, producer.failed[:5]


def test_a_cancelled_move_restores_the_replicas(cluster, load, tmp_path):
    topic, producer, _ = load
    before = [1, 2]
    wait_replicas(cluster, topic, before)
    out = reassign(cluster, tmp_path, topic, [2, 0], "--execute", "--throttle", str(SLOW_THROTTLE))
    assert f"Successfully started partition reassignment for {topic}-0" in out, out

    def copying():
        s, entry = sizes(cluster, topic), listed(cluster, topic)
        return entry is not None and 0 < s.get(0, 0) < s[1] and (s, entry)

    s, entry = wait_until("broker 0 holding part of the log, the move listed", copying, 20)
    assert entry["adding_replicas"] == [0] and entry["removing_replicas"] == [1], entry

    c = reassign(cluster, tmp_path, topic, [2, 0], "--cancel")
    assert f"Successfully cancelled partition reassignment for: {topic}-0" in c, c
    # the original set (Kafka's cancel keeps the target's order: [2, 1])
    wait_replicas(cluster, topic, before)
    assert listed(cluster, topic) is None
    _last_throttled_copy.append(time.monotonic())
    wait_until("broker 0's partial replica removed", lambda: set(sizes(cluster, topic)) == {1, 2}, 15)
    print(f"{topic}: cancelled with {s.get(0)} of {s[1]} bytes on broker 0")
    assert producer.is_alive() and not producer.failed, producer.failed[:5]


def test_every_reader_saw_every_acknowledged_record_once_in_order(cluster, load):
    topic, producer, readers = load
    acked = producer.finish()
    assert len(acked) > PRELOAD[0]
    last = acked[-1][0]
    for r in readers:
        try:
            wait_until(f"{r.what} reading up to offset {last}", lambda: r.read_up_to(last), 30)
        except AssertionError as e:
            raise AssertionError(f"{e}; {r.where}; its librdkafka log ends:\n{r.stderr_tail()}") from None
        r.stop()
        got = r.records()
        assert len(got) == len(set(got)), f"{r.what}: {len(got) - len(set(got))} records read twice"
        assert got == acked, (
            f"{r.what}: read {len(got)} records, {len(acked)} acknowledged; "
            f"first difference at {next((i for i, (a, b) in enumerate(zip(got, acked)) if a != b), min(len(got), len(acked)))}"
        )
    print(f"{topic}: {len(acked)} records, each read once in order by {len(readers)} kcat consumers")


# -- the throttle's rate -------------------------------------------------------


def steady_rate(samples: list[tuple[float, int]], total: int) -> tuple[float, float]:
    """(bytes/s, seconds measured over) of the samples (time, bytes copied)
    from STEADY_AFTER s after the first bytes until STEADY_UNTIL of `total`."""
    t0 = next(t for t, n in samples if n > 0)
    mid = [(t, n) for t, n in samples if t >= t0 + STEADY_AFTER and n <= STEADY_UNTIL * total]
    assert len(mid) >= 8, f"too few samples in the steady part: {samples}"
    (ta, na), (tb, nb) = mid[0], mid[-1]
    return (nb - na) / (tb - ta), tb - ta


def test_a_1_mb_per_s_throttle_is_honoured_within_30_percent(cluster, tmp_path):
    topic = create_topic(cluster, "rate", [0, 1])
    fill(cluster, topic, *RATE_FILL)

    def same_size():
        s = sizes(cluster, topic)
        return s.get(0, 0) > 0 and s.get(0) == s.get(1) and s[0]

    total = wait_until("both replicas the same size", same_size, 15)
    # The throttle judges the rate over what its meters remember: with
    # throttled bytes of the moves above still in them (little traffic over
    # many seconds) a copy may start with a burst of several MB, as in
    # Kafka, and the steady rate is then not what this test measures. It
    # starts from idle meters.
    if _last_throttled_copy:
        time.sleep(max(0.0, _last_throttled_copy[-1] + METER_MEMORY + 1.0 - time.monotonic()))
    out = reassign(cluster, tmp_path, topic, [1, 2], "--execute", "--throttle", str(THROTTLE))
    assert f"Successfully started partition reassignment for {topic}-0" in out, out

    samples = []
    start = time.monotonic()
    while True:
        copied = sizes(cluster, topic).get(2, 0)
        samples.append((time.monotonic() - start, copied))
        if copied >= total:
            break
        assert samples[-1][0] < 3 * total / THROTTLE, f"not copied in time: {samples[-5:]}"
        time.sleep(0.25)
    rate, span = steady_rate(samples, total)
    print(f"{topic}: {total} bytes copied in {samples[-1][0]:.1f}s; steady rate {rate / 1e6:.3f} MB/s over {span:.1f}s")
    assert 0.7 * THROTTLE <= rate <= 1.3 * THROTTLE, f"{rate / 1e6:.3f} MB/s over {span:.1f}s; samples (s, bytes): {samples}"
    wait_replicas(cluster, topic, [1, 2], MOVE_TIMEOUT)
    v = reassign(cluster, tmp_path, topic, [1, 2], "--verify")
    assert f"Reassignment of partition {topic}-0 is completed." in v, v
