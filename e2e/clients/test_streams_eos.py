"""Kafka Streams 4.4 with `processing.guarantee=exactly_once_v2` on three
brokers (RF=3, min.insync.replicas=2) while brokers are killed with -9 and
restarted, again and again (issue #37's headline test).

The application is `e2e/clients/streams` (`WordCount`): lines -> words ->
groupBy(word) (a repartition topic) -> count (a persistent store with a
changelog topic) -> word -> count on an output topic. Its record cache is
off, so every word of every input line makes exactly one update of its
count. Exactly once therefore means, for a read_committed reader of the
output topic: per word, the committed counts are exactly 1, 2, ..., N in
order, N being the number of times the word occurs in the input topic. A
record processed twice shows as a repeated or too high count, a record
whose update was lost as a gap, an aborted transaction leaking as either.

The test:

- three brokers (Moldau's `dir` cluster mode; with MOLDAU_TEST_TARGET=kafka
  three Apache Kafka brokers, `harness/cluster.py` `KafkaCluster`), an input
  topic of 3 partitions and an output topic of 3, both RF=3 with
  min.insync.replicas=2 (the application's internal topics get the same);
- an idempotent `acks=all` confluent-kafka producer writes 1,000 lines
  (words from a 24-word vocabulary, a fixed seed), the application starts,
  and ten rounds follow (ROUNDS): brokers 0, 1, 2, the application
  itself, 0, 1, 2, the application again, 0 and 1 are each killed with
  SIGKILL, held down until it
  leads nothing and is in no ISR (the application for 2 s), and started
  again (a broker round ends when every ISR is full again, the
  application's when it is RUNNING again); each round starts the producer
  on 300 more lines (100 a second), so the application has input to
  process, transactions open, while each kill happens;
- every line the producer sent must be in the input topic exactly once;
  the expected counts are taken from the input topic itself;
- a read_committed confluent-kafka consumer follows the output topic until
  every word's latest count is its expected total (bounded), the
  application is stopped (SIGTERM), and a fresh read_committed consumer
  reads the whole output topic again: per word exactly [1..N].

Moldau-side logs stay in e2e/.state/clients/run-*/streams-eos-*/ (each
broker's log under node-N/, the application's stdout and stderr as
wordcount-*.out / .err).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from conftest import STATE
from harness import broker as brokers
from harness.clients import RDKAFKA_LOGGER, ClientError
from harness.cluster import Cluster, KafkaCluster
from harness.waiting import wait_until

NODES = (0, 1, 2)
PARTITIONS = 3

SETTINGS = {
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
    "leader.imbalance.check.interval.seconds": "2",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "0",
}

VOCABULARY = (
    "alder birch cedar dogwood elm fir ginkgo hazel ivy juniper kapok larch "
    "maple nutmeg oak pine quince rowan spruce teak upas viburnum willow yew"
).split()
LINES_BEFORE = 1000
LINES_DURING = 3000
LINE_RATE = 100.0  # lines/s while brokers are killed: 300 a round, about 3 s

# the plan of kills, one round each, in order: a broker's node id, or "app"
ROUNDS = [0, 1, 2, "app", 0, 1, 2, "app", 0, 1]
DOWN_FOR = 2.0  # seconds a killed broker stays down
BETWEEN = 2.0  # seconds between a round's end and the next kill
IN_SYNC_TIMEOUT = 30.0
CATCH_UP_TIMEOUT = 90.0

STREAMS_DIR = Path(__file__).resolve().parent / "streams"


# -- the cluster -------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    if brokers.target() == "kafka":
        c = KafkaCluster(STATE / "streams-eos-kafka", size=len(NODES), settings=SETTINGS)
    else:
        c = Cluster(STATE / "streams-eos", size=len(NODES), settings=SETTINGS)
    c.start()
    yield c
    c.close(keep=True)


_ADMINS: dict = {}


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    if bootstrap not in _ADMINS:
        _ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap, "client.id": "moldau-e2e-streams-admin", "logger": RDKAFKA_LOGGER})
    return _ADMINS[bootstrap]


def registered(c) -> bool:
    return sorted(admin(c.bootstrap).list_topics(timeout=5).brokers) == list(NODES)


def wait_all_in_sync(c, timeout: float = IN_SYNC_TIMEOUT) -> None:
    """Until every partition of every topic (the application's internal ones,
    __consumer_offsets and __transaction_state included) has a leader and
    every replica in its ISR, so the next kill leaves min.insync.replicas."""
    seen = {}

    def full():
        md = admin(c.bootstrap).list_topics(timeout=5)
        if sorted(md.brokers) != list(NODES):
            seen["lagging"] = f"brokers {sorted(md.brokers)}"
            return False
        lagging = [
            (t.topic, p.id, p.leader, sorted(p.replicas), sorted(p.isrs))
            for t in md.topics.values()
            for p in t.partitions.values()
            if p.leader < 0 or sorted(p.isrs) != sorted(p.replicas)
        ]
        seen["lagging"] = lagging[:10]
        return not lagging

    try:
        wait_until("every partition led, every ISR full", full, timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}; lagging (topic, partition, leader, replicas, isr): {seen.get('lagging')}") from None


def wait_fenced(c, node: int, timeout: float = IN_SYNC_TIMEOUT) -> None:
    """Until the killed `node` leads no partition and is in no ISR: its
    partitions have failed over (the session timeout, then elections)."""
    seen = {}

    def gone():
        md = admin(c.bootstrap).list_topics(timeout=5)
        held = [
            (t.topic, p.id, p.leader, sorted(p.isrs))
            for t in md.topics.values()
            for p in t.partitions.values()
            if p.leader == node or node in p.isrs
        ]
        seen["held"] = held[:10]
        return not held

    try:
        wait_until(f"broker {node} out of every ISR", gone, timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}; still held (topic, partition, leader, isr): {seen.get('held')}") from None


def create_topic(c, prefix: str) -> str:
    from confluent_kafka.admin import NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    a = admin(c.bootstrap)
    a.create_topics([NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})], request_timeout=30)[name].result(30)
    wait_all_in_sync(c)
    return name


# -- the input -----------------------------------------------------------------------


def lines(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(VOCABULARY) for _ in range(rnd.randint(1, 6))) for _ in range(n)]


class LineProducer(threading.Thread):
    """An idempotent `acks=all` confluent-kafka producer writing `lines` as
    values (key: the line's number), line i to partition i % 3, `rate` lines
    a second (0: as fast as it can), as many as release() allowed so far
    (all of them when `gated` is false). Records each failure and a fatal
    error."""

    def __init__(self, bootstrap: str, topic: str, lines: list[str], first: int, rate: float, gated: bool = False):
        super().__init__(name="streams-input", daemon=True)
        self.bootstrap, self.topic, self.lines, self.first, self.rate = bootstrap, topic, lines, first, rate
        self.allowed = 0 if gated else len(lines)
        self.gate = threading.Condition()
        self.acked = 0
        self.failed: list[tuple[int, str]] = []
        self.fatal = None
        self.undelivered = None
        self.exc: BaseException | None = None

    def release(self, n: int) -> None:
        with self.gate:
            self.allowed = min(len(self.lines), self.allowed + n)
            self.gate.notify_all()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by finish()
            self.exc = e

    def _run(self) -> None:
        from confluent_kafka import KafkaException, Producer

        def on_error(err):
            if err.fatal():
                self.fatal = err

        p = Producer({
            "bootstrap.servers": self.bootstrap,
            "client.id": "moldau-e2e-streams-input",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 90000,
            "request.timeout.ms": 10000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
            "error_cb": on_error,
            "logger": RDKAFKA_LOGGER,
        })

        def on_delivery(err, msg):
            if err is None:
                self.acked += 1
            else:
                self.failed.append((int(msg.key()), err.name()))

        gap = 1.0 / self.rate if self.rate else 0.0
        for i, line in enumerate(self.lines, start=self.first):
            with self.gate:
                while i - self.first >= self.allowed and self.fatal is None:
                    p.poll(0)
                    self.gate.wait(0.1)
            if self.fatal is not None:
                break
            while True:
                try:
                    p.produce(self.topic, key=str(i).encode(), value=line.encode(), partition=i % PARTITIONS, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.1)
                except KafkaException as e:
                    self.fatal = e.args[0]
                    break
            p.poll(gap)
        try:
            self.undelivered = p.flush(120)
        except KafkaException as e:
            self.fatal = self.fatal or e.args[0]

    def finish(self, timeout: float = 130.0) -> None:
        self.release(len(self.lines))
        self.join(timeout)
        assert not self.is_alive(), f"the input producer did not finish within {timeout}s"
        if self.exc:
            raise self.exc
        assert self.fatal is None, f"input producer: fatal error {self.fatal}"
        assert not self.failed, f"input producer: deliveries failed (first 20): {self.failed[:20]}"
        assert self.undelivered == 0, f"input producer: {self.undelivered} lines still undelivered"


# -- reading ---------------------------------------------------------------------------


def consumer(bootstrap: str, isolation: str, eof: bool = False):
    from confluent_kafka import Consumer

    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"moldau-e2e-streams-read-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": eof,
        "fetch.wait.max.ms": 100,
        "logger": RDKAFKA_LOGGER,
    })


def read_topic(bootstrap: str, topic: str, isolation: str, timeout: float = 60.0) -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:
    """Every partition from the beginning to its end (its high watermark,
    or at read_committed its last stable offset; nothing is open when this
    is called): {partition: [(offset, key, value)]}."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

    c = consumer(bootstrap, isolation, eof=True)
    try:
        out: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {p: [] for p in range(PARTITIONS)}
        at_end: set[int] = set()
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                    elif not m.error().retriable():
                        raise KafkaException(m.error())
                    continue
                at_end.discard(m.partition())
                out[m.partition()].append((m.offset(), m.key(), m.value()))
        assert len(at_end) == PARTITIONS, (
            f"{topic} ({isolation}): the end of only partitions {sorted(at_end)} within {timeout}s; "
            f"records read per partition {[len(r) for r in out.values()]}"
        )
        return out
    finally:
        c.close()


class OutputFollower(threading.Thread):
    """A read_committed consumer of the output topic from the beginning,
    keeping each word's latest committed count (and how many it saw)."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(name="streams-output", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.latest: dict[str, int] = {}
        self.seen = 0
        self.exc: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        try:
            c = consumer(self.bootstrap, "read_committed")
            c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
            try:
                while not self._halt.is_set():
                    for m in c.consume(1000, 0.3):
                        if m.error():
                            continue
                        self.latest[m.key().decode()] = int(m.value())
                        self.seen += 1
            finally:
                c.close()
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.exc = e

    def stop(self) -> None:
        self._halt.set()
        self.join(15)
        if self.exc:
            raise self.exc


# -- the application -----------------------------------------------------------------


def streams_classpath() -> str:
    """target/classes and target/lib of e2e/clients/streams, built by
    scripts/install-test-deps.sh; rebuilt here (Maven, offline: from the
    local repository the install script filled) when a source is newer."""
    lib = STREAMS_DIR / "target" / "lib"
    classes = STREAMS_DIR / "target" / "classes"
    built = classes / "io" / "moldau" / "e2e" / "streams" / "WordCount.class"
    sources = [STREAMS_DIR / "pom.xml", *sorted((STREAMS_DIR / "src").rglob("*.java"))]
    newest = max(s.stat().st_mtime for s in sources)
    if not (lib.is_dir() and built.exists() and built.stat().st_mtime >= newest):
        try:
            p = subprocess.run(
                ["mvn", "-o", "-q", "-B", "-Dstyle.color=never", "-f", str(STREAMS_DIR / "pom.xml"),
                 "package", "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={lib}"],
                capture_output=True, text=True, timeout=300,
            )
        except FileNotFoundError as e:
            raise ClientError("Maven not found: run scripts/install-test-deps.sh") from e
        if p.returncode != 0:
            raise ClientError(
                "e2e/clients/streams not built (run scripts/install-test-deps.sh): "
                f"mvn exited {p.returncode}: {(p.stdout + p.stderr)[-3000:]}"
            )
    return f"{classes}{os.pathsep}{lib}/*"


class WordCountApp:
    """One `WordCount` process; its STATE/REPLACED lines collected from stdout."""

    def __init__(self, workdir: Path, classpath: str, bootstrap: str, input: str, output: str, app_id: str, threads: int = 2):
        self.workdir = workdir
        self.cmd = [
            os.environ.get("JAVA", "java"), "-Xmx384m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-cp", classpath, "io.moldau.e2e.streams.WordCount",
            bootstrap, input, output, app_id, str(workdir / "state"), str(threads),
        ]
        self.runs = 0
        self.events: list[tuple[int, str]] = []
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.runs += 1
        self.out = self.workdir / f"wordcount-{self.runs}.out"
        self.err = self.workdir / f"wordcount-{self.runs}.err"
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                         preexec_fn=brokers._die_with_parent)
        run = self.runs
        proc = self.proc

        def read():
            with open(self.out, "w") as out:
                for line in proc.stdout:
                    out.write(line)
                    out.flush()
                    self.events.append((run, line.strip()))

        threading.Thread(target=read, name=f"wordcount-{run}", daemon=True).start()

    def state(self) -> str | None:
        """The latest STATE of the current run."""
        states = [e.split()[1] for r, e in self.events if r == self.runs and e.startswith("STATE ")]
        return states[-1] if states else None

    def wait_running(self, timeout: float = 60.0) -> None:
        def running():
            if self.proc.poll() is not None:
                raise AssertionError(f"WordCount exited {self.proc.returncode}; {self.tail()}")
            return self.state() == "RUNNING"

        wait_until("WordCount RUNNING", running, timeout)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 40.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(f"WordCount ignored SIGTERM for {timeout}s; killed. {self.tail()}")
        return self.proc.returncode

    def replaced(self) -> list[str]:
        return [f"run {r}: {e}" for r, e in self.events if e.startswith("REPLACED ")]

    def tail(self, n: int = 60) -> str:
        try:
            err = self.err.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            err = []
        return f"stderr tail ({self.err}):\n" + "\n".join(err)


# -- the test ---------------------------------------------------------------------------


@pytest.mark.restart
@pytest.mark.timeout(300)
def test_streams_word_count_exactly_once_v2_under_broker_kills(cluster):
    c = cluster
    t_start = time.monotonic()
    for b in c.values():
        if not b.alive():
            b.start()
    wait_until(f"all of {list(NODES)} registered", lambda: registered(c), IN_SYNC_TIMEOUT)
    try:
        cp = streams_classpath()
    except ClientError as e:
        pytest.fail(str(e))

    input_topic = create_topic(c, "wc-in")
    output_topic = create_topic(c, "wc-out")
    before = lines(LINES_BEFORE, seed=37)
    during = lines(LINES_DURING, seed=3737)
    sent = before + during

    first = LineProducer(c.bootstrap, input_topic, before, first=0, rate=0)
    first.start()
    first.finish()

    app_id = f"wc-{uuid.uuid4().hex[:8]}"
    work = STATE / f"streams-eos-{app_id}"
    app = WordCountApp(work, cp, c.bootstrap, input_topic, output_topic, app_id)
    follower = OutputFollower(c.bootstrap, output_topic)
    rounds: list[tuple] = []
    try:
        app.start()
        app.wait_running(90)
        t_running = time.monotonic() - t_start
        follower.start()
        wait_until("the first committed counts", lambda: follower.seen > 0, 60)
        # each round's share of the lines, sent while it kills and restarts
        rest = LineProducer(c.bootstrap, input_topic, during, first=LINES_BEFORE, rate=LINE_RATE, gated=True)
        rest.start()
        for what in ROUNDS:
            time.sleep(BETWEEN)
            t0 = time.monotonic()
            seen0 = follower.seen
            rest.release(LINES_DURING // len(ROUNDS))
            time.sleep(0.5)
            if what == "app":
                app.kill()
                time.sleep(DOWN_FOR)
                app.start()
                app.wait_running(90)
            else:
                c[what].kill()
                time.sleep(DOWN_FOR)
                if not (brokers.target() == "kafka" and what == 0):
                    # (Kafka's node 0 is its only controller: nothing fences it)
                    wait_fenced(c, what)
                c[what].start()
                wait_all_in_sync(c)
            rounds.append((what, round(time.monotonic() - t0, 1), follower.seen - seen0))
        rest.finish()
        t_produced = time.monotonic() - t_start

        # the input: every line sent, exactly once
        got = read_topic(c.bootstrap, input_topic, "read_uncommitted")
        by_number = Counter(int(k) for recs in got.values() for _, k, _ in recs)
        dups = sorted(i for i, n in by_number.items() if n > 1)
        lost = sorted(set(range(len(sent))) - set(by_number))
        assert not dups and not lost, f"input: {len(lost)} lines lost {lost[:20]}, {len(dups)} duplicated {dups[:20]}"
        for p, recs in got.items():
            for _, k, v in recs:
                assert int(k) % PARTITIONS == p and v.decode() == sent[int(k)], f"input partition {p}: line {k} is {v!r}"
        expected = Counter(w for recs in got.values() for _, _, v in recs for w in v.decode().split())
        assert expected == Counter(w for line in sent for w in line.split())

        status: dict = {}

        def caught_up():
            """Every word's latest committed count at its total, or one past it
            (a count past the total is never undone: fail at once)."""
            status["exited"] = app.proc.poll()
            latest = dict(follower.latest)
            status["over"] = {w: (latest[w], n) for w, n in expected.items() if latest.get(w, 0) > n}
            status["behind"] = sorted((w, (latest.get(w, 0), n)) for w, n in expected.items() if latest.get(w, 0) < n)
            return status["exited"] is not None or status["over"] or not status["behind"]

        try:
            wait_until("every word's committed count at its expected total", caught_up, CATCH_UP_TIMEOUT)
        except AssertionError as e:
            raise AssertionError(f"{e}; behind (word: (latest committed, expected)): {status.get('behind', [])[:8]}; {app.tail()}") from None
        assert status["exited"] is None, f"WordCount exited {status['exited']}; {app.tail()}"
        assert not status["over"], f"counted more than once (word: (latest committed count, occurrences)): {status['over']}"
        t_caught_up = time.monotonic() - t_start
    finally:
        follower_exc = None
        try:
            follower.stop()
        except BaseException as e:  # noqa: BLE001
            follower_exc = e
        rc = app.stop()
    assert follower_exc is None, follower_exc
    assert rc in (0, 143, -signal.SIGTERM), f"WordCount exited {rc} on SIGTERM; {app.tail()}"

    # the whole output again, read_committed, by a fresh consumer
    out = read_topic(c.bootstrap, output_topic, "read_committed")
    counts: dict[str, list[int]] = defaultdict(list)
    partition_of: dict[str, set[int]] = defaultdict(set)
    for p, recs in out.items():
        for _, k, v in recs:
            counts[k.decode()].append(int(v))
            partition_of[k.decode()].add(p)
    assert set(counts) == set(expected), f"words in the output {sorted(counts)} != in the input {sorted(expected)}"
    assert all(len(ps) == 1 for ps in partition_of.values()), f"a word in two output partitions: {dict(partition_of)}"
    over = {w: (max(vs), expected[w]) for w, vs in counts.items() if max(vs) > expected[w]}
    assert not over, f"counted more than once (word: (highest count, occurrences)): {over}"
    wrong = {}
    for w, vs in counts.items():
        if vs != list(range(1, expected[w] + 1)):
            repeats = sorted(v for v, n in Counter(vs).items() if n > 1)
            gaps = sorted(set(range(1, expected[w] + 1)) - set(vs))
            backwards = [(a, b) for a, b in zip(vs, vs[1:]) if b <= a]
            wrong[w] = f"{len(vs)} updates for {expected[w]} occurrences; repeated {repeats[:10]}, missing {gaps[:10]}, not increasing {backwards[:5]}"
    assert not wrong, f"not exactly once (per word, the committed counts must be 1..N in order): {wrong}"

    total = sum(expected.values())
    uncommitted = sum(len(r) for r in read_topic(c.bootstrap, output_topic, "read_uncommitted").values())
    print(
        f"\nWordCount exactly_once_v2: {len(sent)} lines, {total} words ({len(expected)} distinct), "
        f"{sum(len(v) for v in counts.values())} committed count updates, all 1..N; "
        f"{uncommitted - total} more records read_uncommitted (aborted transactions); "
        f"RUNNING after {t_running:.0f}s, input done after {t_produced:.0f}s, caught up after {t_caught_up:.0f}s; "
        f"rounds (killed, seconds, committed updates seen during): {rounds}; "
        f"application runs {app.runs}, stream threads replaced: {app.replaced() or 'none'}"
    )
