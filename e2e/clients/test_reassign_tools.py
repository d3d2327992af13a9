"""Kafka's own `kafka-reassign-partitions` against a four-broker Moldau
cluster (KIP-455: AlterPartitionReassignments, ListPartitionReassignments).

Owns the real-tool checks of partition reassignment, with the distribution's
ReassignPartitionsCommand (kafka-dist/jars, run by harness/kafka_tools.py),
confluent-kafka for topics, records and Metadata, and `kafka-log-dirs` for
where the replicas live. Four brokers, cluster mode `dir` (the backend of
MOLDAU_CLUSTER_BACKEND, as in test_replication.py), fast settings and
`auto.leader.rebalance.enable=false`, so leadership moves only when a
reassignment moves it:

- a topic of 3 partitions, RF 3, 200 records per partition (`acks=all`);
  a reassignment JSON moves one replica of each partition onto the broker
  it lacks (for partition 0 the replica removed is its leader).
  `--execute` prints the current assignment (the rollback JSON) and starts
  all three; `--verify --preserve-throttles` is run until it reports every
  partition completed; then Metadata shows exactly the target replicas
  with full ISRs and a leader among them, every record reads back in order
  and byte-identical from offset 0, and `kafka-log-dirs --describe` lists
  each partition on its target brokers only (the removed replicas' logs
  are deleted);
- `--execute --throttle` sets `leader/follower.replication.throttled.rate`
  on the brokers (dynamic broker configs: DescribeConfigs shows them with
  source DYNAMIC_BROKER_CONFIG) and the throttled-replica lists on the
  topic; a plain `--verify` of the finished reassignment (no
  `--preserve-throttles`) clears both (IncrementalAlterConfigs DELETEs) and
  exits 0;
- `--generate` with a topics-to-move JSON and `--broker-list 1,2,3` exits 0
  and prints the current assignment and a proposal naming only the listed
  brokers, three distinct replicas per partition;
- a cancel: one broker is stopped (SIGTERM: it stays registered), and a move
  replacing a replica of a partition with it is started through the Java
  Admin client (harness/AlterReassignments.java), after the tool's own
  `--execute` refused it with "Unknown broker id" (it checks the targets
  against DescribeCluster, which lists live brokers only, as Apache Kafka's
  does); `--list` shows it running (adding the stopped broker,
  removing the replaced one) and it stays unfinished; `--cancel
  --preserve-throttles` cancels it, Metadata shows the original replicas and
  ISR again and `--list` finds nothing; the broker is started again.

Not covered: whether the throttle slows the move (the rate here is high;
test_move_under_load.py measures a 1 MB/s throttle's rate, and moves and
cancels under load),
`--replica-alter-log-dirs-throttle` and log-directory moves (`log_dirs`
other than "any"; Moldau has one directory per broker).
Every wait is bounded; the module takes about 20 s.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from conftest import STATE
from harness import broker as brokers
from harness import kafka_tools
from harness.clients import RDKAFKA_LOGGER
from harness.cluster import Cluster, backend, cluster_args
from harness.waiting import wait_until

pytestmark = pytest.mark.skipif(brokers.target() != "moldau", reason="Moldau's cluster mode")

NODES = (0, 1, 2, 3)
PARTITIONS = 3
RECORDS = 200

SETTINGS = {
    "auto.leader.rebalance.enable": "false",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
}

# How long a small reassignment (a new replica catching up 200 records, then
# the old one removed) may take, and a restarted broker to be registered.
MOVE_TIMEOUT = 30.0
UP_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(STATE / f"reassign-tools-{backend()}", size=len(NODES), settings=SETTINGS, cluster_args=cluster_args("reassign"))
    c.start()
    yield c
    c.close(keep=True)


def all_up(c: Cluster) -> Cluster:
    """Every broker running and registered (a failed test may leave one down)."""
    for b in c.values():
        if not b.alive():
            b.start()
    wait_until(f"all of {list(NODES)} registered", lambda: sorted(admin(c).list_topics(timeout=5).brokers) == list(NODES), UP_TIMEOUT)
    return c


@pytest.fixture
def up(cluster):
    return all_up(cluster)


# -- helpers -------------------------------------------------------------------

_ADMINS: dict = {}


def admin(c: Cluster):
    from confluent_kafka.admin import AdminClient

    if c.bootstrap not in _ADMINS:
        _ADMINS[c.bootstrap] = AdminClient({"bootstrap.servers": c.bootstrap, "client.id": "moldau-e2e-reassign-admin", "logger": RDKAFKA_LOGGER})
    return _ADMINS[c.bootstrap]


def partitions(c: Cluster, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition → (leader, replicas in Metadata's order, sorted ISR)."""
    t = admin(c).list_topics(topic, timeout=5).topics.get(topic)
    if t is None or t.error is not None:
        raise AssertionError(f"topic {topic}: {t.error if t is not None else 'absent'}")
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in t.partitions.values()}


def wait_assignment(c: Cluster, topic: str, want: dict[int, list[int]], timeout: float = 10.0) -> dict:
    """Until Metadata shows exactly `want` (partition → replicas, in order),
    every ISR full and every leader one of the replicas."""

    seen = {}

    def there():
        seen["last"] = ps = partitions(c, topic)
        ok = set(ps) == set(want) and all(
            ps[p][1] == want[p] and ps[p][2] == sorted(want[p]) and ps[p][0] in want[p] for p in want
        )
        return ok and ps

    try:
        return wait_until(f"{topic} assigned {want} with full ISRs", there, timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}; last metadata (partition: leader, replicas, isr): {seen.get('last')}") from None


def create_topic(c: Cluster, prefix: str, count: int = PARTITIONS) -> tuple[str, dict[int, tuple[int, list[int], list[int]]]]:
    from confluent_kafka.admin import NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin(c).create_topics([NewTopic(name, count, 3)], request_timeout=30)[name].result(30)

    def in_sync():
        ps = partitions(c, name)
        return len(ps) == count and all(l >= 0 and len(r) == 3 and isr == sorted(r) for l, r, isr in ps.values()) and ps

    return name, wait_until(f"{name}: {count} partitions, three replicas each, all in sync", in_sync, 30)


def produce(c: Cluster, topic: str) -> dict[int, list[bytes]]:
    """RECORDS records per partition, `acks=all`: partition → values sent (in order)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5, "logger": RDKAFKA_LOGGER})
    failed = []
    sent = {part: [f"{topic}:{part}:{i}".encode() for i in range(RECORDS)] for part in range(PARTITIONS)}
    for part, values in sent.items():
        for v in values:
            p.produce(topic, v, partition=part, on_delivery=lambda e, m: e and failed.append(e))
    assert p.flush(30) == 0, "undelivered records"
    assert not failed, failed
    return sent


def read_all(c: Cluster, topic: str, want: dict[int, int], timeout: float = 20.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every partition from offset 0 until it has `want[partition]` records:
    partition → [(offset, value)]."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    cons = Consumer({
        "bootstrap.servers": c.bootstrap,
        "group.id": f"moldau-e2e-reassign-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
        "logger": RDKAFKA_LOGGER,
    })
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in want}
    try:
        cons.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in want])
        deadline = time.monotonic() + timeout
        while any(len(got[p]) < n for p, n in want.items()) and time.monotonic() < deadline:
            m = cons.poll(0.5)
            if m is None or m.error() is not None:
                continue
            got[m.partition()].append((m.offset(), m.value()))
    finally:
        cons.close()
    return got


def log_dir_brokers(c: Cluster, topic: str) -> dict[str, set[int]]:
    """partition name → the brokers whose log directory holds it (kafka-log-dirs)."""
    out = kafka_tools.log_dirs(c.bootstrap, topics=[topic])
    where: dict[str, set[int]] = {}
    for b in out["brokers"]:
        for d in b["logDirs"]:
            assert d["error"] is None, d
            for p in d["partitions"]:
                if p["partition"].rsplit("-", 1)[0] == topic:
                    where.setdefault(p["partition"], set()).add(b["broker"])
    return where


def reassignment_json(topic: str, target: dict[int, list[int]]) -> str:
    return json.dumps({
        "version": 1,
        "partitions": [{"topic": topic, "partition": p, "replicas": r} for p, r in sorted(target.items())],
    })


def tool(c: Cluster, *args: str):
    p = kafka_tools.reassign_partitions(c.bootstrap, *args)
    out = f"exit {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr[-3000:]}"
    return p, out


THROTTLE = 50_000_000  # bytes/s: set and cleared by the tool, high enough not to slow the test


def throttles(c: Cluster, topic: str) -> tuple[dict[int, tuple[str, str]], str]:
    """Each broker's `leader.replication.throttled.rate` as DescribeConfigs
    shows it ({broker: (value, source name)}), and the topic's
    `leader.replication.throttled.replicas`."""
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    rates = {}
    for n in NODES:
        r = ConfigResource(ResourceType.BROKER, str(n))
        entries = admin(c).describe_configs([r], request_timeout=10)[r].result(10)
        e = entries["leader.replication.throttled.rate"]
        rates[n] = (e.value, ConfigSource(e.source).name)
    t = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin(c).describe_configs([t], request_timeout=10)[t].result(10)
    return rates, entries["leader.replication.throttled.replicas"].value or ""


def completed(topic: str, parts, stdout: str) -> bool:
    return all(f"Reassignment of partition {topic}-{p} is completed." in stdout for p in parts)


# -- a reassignment through the tool -------------------------------------------


@pytest.fixture(scope="module")
def moved(cluster, tmp_path_factory):
    """A topic moved by `kafka-reassign-partitions --execute`, verified done:
    (topic, original assignment, target assignment, records sent, JSON file)."""
    all_up(cluster)
    topic, before = create_topic(cluster, "reassign")
    sent = produce(cluster, topic)
    original = {p: r for p, (_, r, _) in before.items()}
    target = {}
    for p, (leader, replicas, _) in before.items():
        (missing,) = set(NODES) - set(replicas)
        leaving = leader if p == 0 else next(r for r in reversed(replicas) if r != leader)
        target[p] = [missing if r == leaving else r for r in replicas]
    f = tmp_path_factory.mktemp("reassign") / "move.json"
    f.write_text(reassignment_json(topic, target))

    p, out = tool(cluster, "--execute", "--throttle", str(THROTTLE), "--reassignment-json-file", str(f))
    assert p.returncode == 0, out
    # --throttle: the rate on every broker of the move (dynamic broker
    # configs), the moving replicas listed on the topic
    rates, listed = throttles(cluster, topic)
    assert all(v == (str(THROTTLE), "DYNAMIC_BROKER_CONFIG") for v in rates.values()), rates
    assert listed, f"no leader.replication.throttled.replicas on {topic}: {out}"
    names = ",".join(f"{topic}-{i}" for i in range(PARTITIONS))
    assert f"Successfully started partition reassignments for {names}" in p.stdout, out
    (rollback,) = kafka_tools.json_lines(p)
    assert {(x["topic"], x["partition"]): x["replicas"] for x in rollback["partitions"]} == {
        (topic, i): r for i, r in original.items()
    }, f"the rollback JSON is the current assignment {original}: {out}"

    last = {}

    def verified():
        v, last["out"] = tool(cluster, "--verify", "--preserve-throttles", "--reassignment-json-file", str(f))
        assert v.returncode == 0, last["out"]
        return completed(topic, range(PARTITIONS), v.stdout)

    t0 = time.monotonic()
    try:
        wait_until("--verify reporting every partition completed", verified, MOVE_TIMEOUT)
    except AssertionError as e:
        raise AssertionError(f"{e}\nlast --verify: {last.get('out')}") from None
    print(f"{topic}: {original} → {target}, --verify completed after {time.monotonic() - t0:.1f}s")
    return topic, original, target, sent, f


def test_execute_and_verify_move_the_replicas_and_keep_every_record(cluster, moved):
    topic, original, target, sent, _ = moved

    # Metadata: exactly the target replicas, every ISR full, a leader among them
    ps = wait_assignment(cluster, topic, target)
    assert ps[0][0] in target[0], f"partition 0's old leader {original[0][0]} was removed: {ps}"

    # every record, in order, from offset 0
    got = read_all(cluster, topic, {p: RECORDS for p in range(PARTITIONS)})
    for p in range(PARTITIONS):
        assert [o for o, _ in got[p]] == list(range(RECORDS)), f"partition {p} offsets: {[o for o, _ in got[p]][:10]}… ({len(got[p])})"
        assert [v for _, v in got[p]] == sent[p], f"partition {p} holds other records than were produced"

    # kafka-log-dirs: on the target brokers, and only there (the removed
    # replicas are deleted), with the same bytes everywhere
    want = {f"{topic}-{p}": set(r) for p, r in target.items()}
    seen = {}

    def listed():
        seen["last"] = log_dir_brokers(cluster, topic)
        return seen["last"] == want

    try:
        wait_until(f"kafka-log-dirs listing {want}", listed, 15)
    except AssertionError as e:
        raise AssertionError(f"{e}; last listing: {seen.get('last')}") from None
    sizes = kafka_tools.log_dirs(cluster.bootstrap, topics=[topic])
    for b in sizes["brokers"]:
        for d in b["logDirs"]:
            for e in d["partitions"]:
                if e["partition"] in want:
                    assert e["size"] > 0 and e["isFuture"] is False, (b["broker"], e)


def test_verify_without_preserve_throttles_clears_them_and_succeeds(cluster, moved):
    topic, _, _, _, f = moved
    p, out = tool(cluster, "--verify", "--reassignment-json-file", str(f))
    assert completed(topic, range(PARTITIONS), p.stdout), out
    assert "Clearing broker-level throttles on brokers 0,1,2,3" in p.stdout, out
    assert p.returncode == 0, out
    assert f"Clearing topic-level throttles on topic {topic}" in p.stdout, out
    rates, listed = throttles(cluster, topic)
    assert all(source != "DYNAMIC_BROKER_CONFIG" for _, source in rates.values()), f"still throttled: {rates}"
    assert listed == "", f"{topic} still lists throttled replicas: {listed}"


# -- --generate -----------------------------------------------------------------


def test_generate_proposes_only_the_listed_brokers(cluster, moved, tmp_path):
    topic, _, target, _, _ = moved
    f = tmp_path / "topics.json"
    f.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    p, out = tool(cluster, "--generate", "--topics-to-move-json-file", str(f), "--broker-list", "1,2,3")
    assert p.returncode == 0, out
    assert "Proposed partition reassignment configuration" in p.stdout, out
    current, proposed = kafka_tools.json_lines(p)
    assert {x["partition"]: x["replicas"] for x in current["partitions"]} == target, out
    assert proposed["version"] == 1, out
    prop = {x["partition"]: x["replicas"] for x in proposed["partitions"] if x["topic"] == topic}
    assert sorted(prop) == list(range(PARTITIONS)) and len(proposed["partitions"]) == PARTITIONS, out
    for p_, replicas in prop.items():
        assert len(replicas) == 3 and len(set(replicas)) == 3 and set(replicas) <= {1, 2, 3}, (p_, replicas, out)


# -- --cancel -------------------------------------------------------------------


def test_cancel_of_a_move_onto_a_stopped_broker_restores_the_replicas(up, tmp_path):
    cluster = up
    topic, before = create_topic(cluster, "reassign-cancel", count=1)
    leader, replicas, _ = before[0]
    (absent,) = set(NODES) - set(replicas)
    leaving = next(r for r in reversed(replicas) if r != leader)
    target = [absent if r == leaving else r for r in replicas]
    f = tmp_path / "cancel.json"
    f.write_text(reassignment_json(topic, {0: target}))

    cluster[absent].stop()
    try:
        # the tool checks its targets against DescribeCluster (live brokers only)
        def refused():
            r, out = tool(cluster, "--execute", "--reassignment-json-file", str(f))
            assert "Successfully started" not in r.stdout, out
            return r.returncode != 0 and f"Unknown broker id {absent}" in r.stdout

        # each try starts a JVM (seconds on a loaded 2-core machine): give
        # the tool a few tries, not one or two
        wait_until(f"--execute refusing stopped broker {absent}", refused, 30)
        started = kafka_tools.alter_reassignments(cluster.bootstrap, {(topic, 0): target})
        assert started.returncode == 0 and f"{topic}-0: ok" in started.stdout, (started.stdout, started.stderr[-3000:])

        def listed():
            p, out = tool(cluster, "--list")
            assert p.returncode == 0, out
            return p.stdout

        line = re.compile(rf"^{re.escape(topic)}-0: replicas: ([\d,]+)\.(?: adding: ([\d,]+)\.)?(?: removing: ([\d,]+)\.)?$", re.M)
        text = wait_until(f"--list showing {topic}-0", lambda: (lambda s: line.search(s) and s)(listed()), 10)
        assert text.startswith("Current partition reassignments:"), text
        all_, adding, removing = line.search(text).groups()
        assert sorted(int(x) for x in all_.split(",")) == sorted(set(replicas) | {absent}), text
        assert adding == str(absent) and removing == str(leaving), text

        # the stopped broker cannot catch up: the move stays unfinished
        time.sleep(1.0)
        v, out = tool(cluster, "--verify", "--preserve-throttles", "--reassignment-json-file", str(f))
        assert v.returncode == 0, out
        assert f"Reassignment of partition {topic}-0 is still in progress." in v.stdout, out
        (lead, during, isr) = partitions(cluster, topic)[0]
        assert set(during) == set(replicas) | {absent} and absent not in isr, (lead, during, isr)

        c, out = tool(cluster, "--cancel", "--preserve-throttles", "--reassignment-json-file", str(f))
        assert c.returncode == 0, out
        assert f"Successfully cancelled partition reassignment for: {topic}-0" in c.stdout, out

        wait_assignment(cluster, topic, {0: replicas})
        after, out = tool(cluster, "--list")
        assert after.returncode == 0 and "No partition reassignments found." in after.stdout, out
        again, out = tool(cluster, "--cancel", "--preserve-throttles", "--reassignment-json-file", str(f))
        assert again.returncode == 0 and "None of the specified partition reassignments are active." in again.stdout, out
    finally:
        cluster[absent].start()
    wait_until(f"broker {absent} registered again", lambda: absent in admin(cluster).list_topics(timeout=5).brokers, UP_TIMEOUT)
    assert partitions(cluster, topic)[0][1] == replicas
