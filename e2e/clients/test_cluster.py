"""Three Moldau brokers are one Kafka cluster, as real clients see it.

The same checks run against either cluster backend (`dir` or `kubernetes`,
chosen by MOLDAU_CLUSTER_BACKEND; see harness/cluster.py, `backend()`):
`e2e/tests/cluster_kubernetes_clients.rs` runs this module against brokers
in `kubernetes` mode on a real API server.

Checked with kcat and confluent-kafka through ONE bootstrap address:

- `kcat -L` against any broker lists all three and one controller;
- a topic of 12 partitions has its leaders on all three; records produced to
  every partition are consumed back in full;
- a consumer group of three spreads the partitions and commits offsets, and
  groups have their coordinators on different brokers;
- a full-cluster restart keeps the cluster id, topic ids, assignments and
  committed offsets.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from harness import broker as brokers
from harness import kcat
from harness.cluster import Cluster, backend, cluster_args
from conftest import STATE, retry_retriable

pytestmark = pytest.mark.skipif(brokers.target() != "moldau", reason="Moldau's cluster mode")

NODES = (0, 1, 2)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(STATE / f"cluster-{backend()}", size=len(NODES), cluster_args=cluster_args())
    c.start()
    yield c
    c.close(keep=True)


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def wait_for(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(0.3)
    raise AssertionError(f"never {what}: {last}")


def test_every_broker_lists_all_three_and_one_controller(cluster):
    controllers = set()
    for b in cluster.values():
        md = wait_for(
            f"three brokers from {b.bootstrap}",
            lambda: (lambda m: m if len(m["brokers"]) == 3 else None)(kcat.metadata(b.bootstrap)),
        )
        assert sorted(x["id"] for x in md["brokers"]) == list(NODES)
        controllers.add(md["controllerid"])
    assert len(controllers) == 1, f"one controller for all: {controllers}"
    assert controllers.pop() in NODES


def test_partitions_spread_and_every_one_round_trips_through_one_bootstrap(cluster):
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    bootstrap = cluster[2].bootstrap
    name = f"spread-{uuid.uuid4().hex[:8]}"
    a = admin(bootstrap)  # kept alive until the future completes
    a.create_topics([NewTopic(name, 12, 1)])[name].result(30)
    md = wait_for(
        "12 led partitions",
        lambda: (lambda t: t if t and len(t["partitions"]) == 12 and all(p["leader"] >= 0 for p in t["partitions"]) else None)(
            next(iter(kcat.metadata(bootstrap, name)["topics"]), None)
        ),
    )
    leaders = [p["leader"] for p in md["partitions"]]
    assert sorted(set(leaders)) == list(NODES), f"leaders on every broker: {leaders}"
    assert all(leaders.count(n) == 4 for n in NODES), leaders

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(600):
        p.produce(name, value=f"v{i}".encode(), partition=i % 12)
    assert p.flush(30) == 0
    out = kcat.run(["-C", "-b", cluster[0].bootstrap, "-t", name, "-e", "-q", "-f", "%p %s\\n"], timeout=60)
    got = sorted(out.decode().splitlines())
    assert len(got) == 600, f"consumed {len(got)} of 600"
    by_partition = {}
    for line in got:
        part, value = line.split(" ")
        by_partition.setdefault(int(part), set()).add(value)
    assert sorted(by_partition) == list(range(12))
    for part, values in by_partition.items():
        assert values == {f"v{i}" for i in range(part, 600, 12)}, part


def test_a_group_of_three_spreads_commits_and_coordinators_differ(cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    bootstrap = cluster[1].bootstrap
    a = admin(bootstrap)
    name = f"grouped-{uuid.uuid4().hex[:8]}"
    a.create_topics([NewTopic(name, 12, 1)])[name].result(30)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(1200):
        p.produce(name, value=b"x", partition=i % 12)
    assert p.flush(30) == 0

    group = f"g-{uuid.uuid4().hex[:8]}"
    result = {}

    def member(i: int):
        c = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        })
        c.subscribe([name])
        n = 0
        seen_assignment = 0
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            seen_assignment = max(seen_assignment, len(c.assignment()))
            if m is not None and not m.error():
                n += 1
                c.commit(message=m, asynchronous=False)
        result[i] = (n, seen_assignment)
        c.close()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(n for n, _ in result.values()) >= 1200, result
    assert all(assigned == 4 for _, assigned in result.values()), f"4 partitions each: {result}"

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    committed = retry_retriable(lambda: c.committed([TopicPartition(name, i) for i in range(12)], timeout=10))
    c.close()
    assert sum(tp.offset for tp in committed) == 1200, committed

    # coordinators: several groups land on different brokers
    groups = [f"probe-{i}" for i in range(12)]
    coordinators = set()
    for g in groups:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": g})
        retry_retriable(lambda: c.committed([TopicPartition(name, 0)], timeout=10))
        c.close()
    for g, f in a.describe_consumer_groups(groups + [group]).items():
        coordinators.add(f.result(30).coordinator.id)
    assert len(coordinators) >= 2, f"coordinators spread over brokers: {coordinators}"
    test_a_group_of_three_spreads_commits_and_coordinators_differ.state = (name, group)


def test_a_full_cluster_restart_keeps_ids_assignments_and_offsets(cluster):
    from confluent_kafka import Consumer, TopicCollection, TopicPartition

    state = getattr(test_a_group_of_three_spreads_commits_and_coordinators_differ, "state", None)
    assert state, "runs after the group test"
    name, group = state
    before = kcat.metadata(cluster[0].bootstrap, name)
    a = admin(cluster[0].bootstrap)
    ids_before = a.describe_topics(TopicCollection([name]))[name].result(30).topic_id
    cluster_before = a.describe_cluster().result(30).cluster_id
    assert cluster_before

    for b in cluster.values():
        b.stop()
    for b in cluster.values():
        b.start()

    def settled():
        md = kcat.metadata(cluster[1].bootstrap, name)
        t = md["topics"][0]
        ok = len(md["brokers"]) == 3 and all(p["leader"] >= 0 for p in t["partitions"])
        return md if ok else None

    after = wait_for("the cluster back", settled, timeout=60)
    assert [(p["partition"], p["replicas"]) for p in after["topics"][0]["partitions"]] == [
        (p["partition"], p["replicas"]) for p in before["topics"][0]["partitions"]
    ], "same assignments"
    a = admin(cluster[1].bootstrap)
    ids_after = a.describe_topics(TopicCollection([name]))[name].result(30).topic_id
    assert str(ids_after) == str(ids_before), "same topic id"
    assert a.describe_cluster().result(30).cluster_id == cluster_before, "same cluster id"
    c = Consumer({"bootstrap.servers": cluster[2].bootstrap, "group.id": group})
    committed = retry_retriable(lambda: c.committed([TopicPartition(name, i) for i in range(12)], timeout=10))
    c.close()
    assert sum(tp.offset for tp in committed) == 1200, committed
