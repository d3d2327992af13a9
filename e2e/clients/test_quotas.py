"""Client quotas (Kafka's `producer_byte_rate`, `consumer_byte_rate`,
`request_percentage`) set and shown with Kafka's own `kafka-configs` tool
(AlterClientQuotas / DescribeClientQuotas through the Java Admin client),
and enforced on real confluent-kafka clients:

- a producer whose client id has a 1 MiB/s quota produces at 1 MiB/s
  ±20 % over 20 s of trying as fast as it can, and is told so
  (`throttle_time_ms`, seen by librdkafka's throttle callback), while a
  producer without a quota on the same broker and topic keeps its own
  paced 4 MiB/s and is never throttled;
- the same for consumers: the quota'd consumer reads 1 MiB/s ±20 % over
  20 s, an unthrottled one reads the whole 30 MiB backlog quickly;
- quotas survive a broker restart (SIGTERM and kill -9) and removing them
  with `--delete-config` leaves nothing behind;
- three Moldau brokers: a quota set through one broker (to the controller,
  stored in the cluster metadata) is shown by every other broker, a
  `client-id-prefix` one too;
- Moldau's `client-id-prefix` entity (an extension: Kafka has none), set
  through Kafka's Java Admin client: a prefix's quota holds for a producer
  whose client id starts with it while another producer is not slowed, an
  exact client id's quota beats the prefix's, and the longest matching
  prefix wins. Skipped against Apache Kafka.

Every user is `ANONYMOUS` until client authentication exists, so the tests
use client-id entities; the user and default entities' precedence is unit
tested in the broker (`quota::entity`).
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import STATE, create_topic, unique
from harness import broker as brokers
from harness import kafka_tools
from harness.cluster import Cluster, backend, cluster_args
from harness.clients import RDKAFKA_LOGGER

pytestmark = [pytest.mark.timeout(300)]

MIB = 1024 * 1024
VALUE = b"q" * 10_000
MEASURE_S = 20.0


def alter(bootstrap: str, entity: list[str], *change: str) -> None:
    p = kafka_tools.configs(bootstrap, "--alter", *entity, *change)
    assert p.returncode == 0, f"kafka-configs --alter exited {p.returncode}:\n{p.stdout}\n{p.stderr}"


def described(bootstrap: str, entity: list[str]) -> dict[str, float]:
    """The quota values `kafka-configs --describe` prints for one entity."""
    p = kafka_tools.configs(bootstrap, "--describe", *entity)
    assert p.returncode == 0, f"kafka-configs --describe exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    lines = [ln for ln in p.stdout.splitlines() if "Quota configs for" in ln]
    if not lines:
        return {}
    assert len(lines) == 1, p.stdout
    return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.E+-]+)", lines[0].split(" are ", 1)[1])}


def client(cid: str) -> list[str]:
    return ["--entity-type", "clients", "--entity-name", cid]


class Throttles:
    """librdkafka's throttle callback: every throttle time a broker reported."""

    def __init__(self):
        self.times: list[float] = []

    def __call__(self, event) -> None:
        if event.throttle_time > 0:
            self.times.append(event.throttle_time)


def produce_for(bootstrap: str, topic: str, cid: str, seconds: float, pace: float | None, out: dict) -> None:
    """Produces `VALUE`s for `seconds` (as fast as possible, or at `pace`
    bytes/s); `out` gets the bytes acknowledged within that time and the
    throttle times reported."""
    throttles = Throttles()
    acked = [0]
    p = Producer({
        "bootstrap.servers": bootstrap, "client.id": cid, "acks": "1", "linger.ms": 5,
        "queue.buffering.max.kbytes": 4096, "throttle_cb": throttles, "logger": RDKAFKA_LOGGER,
    })
    start = time.monotonic()
    end = start + seconds

    def delivered(err, msg):
        if err is None and time.monotonic() <= end:
            acked[0] += len(msg.value())

    sent = 0
    while (now := time.monotonic()) < end:
        if pace is not None and sent >= pace * (now - start):
            p.poll(0.01)
            continue
        try:
            p.produce(topic, VALUE, partition=0, on_delivery=delivered)
            sent += len(VALUE)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.purge(in_queue=True, in_flight=False)
    p.flush(30)
    out.update(bytes=acked[0], throttles=throttles.times)


def consume_for(bootstrap: str, topic: str, cid: str, seconds: float, total: int, out: dict) -> None:
    """Reads partition 0 from the start for `seconds` after the first
    record, or until `total` bytes; `out` gets the bytes read in that time,
    how long it took, and the throttle times reported."""
    throttles = Throttles()
    c = Consumer({
        "bootstrap.servers": bootstrap, "client.id": cid, "group.id": unique("qg"),
        "enable.auto.commit": False, "throttle_cb": throttles, "logger": RDKAFKA_LOGGER,
    })
    c.assign([TopicPartition(topic, 0, 0)])
    got, first = 0, None
    deadline = time.monotonic() + seconds + 30
    while time.monotonic() < deadline and got < total:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        now = time.monotonic()
        first = first or now
        if now - first > seconds:
            break
        got += len(m.value())
    out.update(bytes=got, seconds=time.monotonic() - (first or time.monotonic()), throttles=throttles.times)
    c.close()


def run_threads(*targets) -> None:
    threads = [threading.Thread(target=f, args=a) for f, a in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(MEASURE_S + 120)
        assert not t.is_alive(), "a client did not stop"


def assert_rate_within(got_bytes: int, seconds: float, limit: float) -> None:
    rate = got_bytes / seconds
    print(f"quota'd rate {rate / MIB:.3f} MiB/s against {limit / MIB:.3f}")
    assert 0.8 * limit <= rate <= 1.2 * limit, f"{rate / MIB:.2f} MiB/s against a {limit / MIB:.2f} MiB/s quota"


def test_kafka_configs_sets_shows_and_removes_client_quotas(broker):
    cid = unique("qc")
    assert described(broker.bootstrap, client(cid)) == {}
    alter(broker.bootstrap, client(cid), "--add-config", f"producer_byte_rate={MIB},consumer_byte_rate={2 * MIB}")
    assert described(broker.bootstrap, client(cid)) == {"producer_byte_rate": MIB, "consumer_byte_rate": 2 * MIB}
    alter(broker.bootstrap, client(cid), "--add-config", "request_percentage=50")
    alter(broker.bootstrap, client(cid), "--delete-config", "consumer_byte_rate")
    assert described(broker.bootstrap, client(cid)) == {"producer_byte_rate": MIB, "request_percentage": 50.0}
    alter(broker.bootstrap, client(cid), "--delete-config", "producer_byte_rate,request_percentage")
    assert described(broker.bootstrap, client(cid)) == {}


@pytest.mark.xfail(
    brokers.target() == "kafka",
    reason="Apache Kafka 4.1 lets a producer start with a burst: 1.34 MiB/s over these 20 s (measured 2026-12-02)",
    strict=False,
)
def test_a_producer_quota_holds_while_an_unquotaed_producer_is_not_slowed(broker):
    topic = create_topic(broker, unique("qp"))
    slow, fast = unique("slow-p"), unique("fast-p")
    alter(broker.bootstrap, client(slow), "--add-config", f"producer_byte_rate={MIB}")
    s, f = {}, {}
    run_threads(
        (produce_for, (broker.bootstrap, topic, slow, MEASURE_S, None, s)),
        (produce_for, (broker.bootstrap, topic, fast, MEASURE_S, 4 * MIB, f)),
    )
    assert_rate_within(s["bytes"], MEASURE_S, MIB)
    assert s["throttles"], "the quota'd producer was never told its throttle time"
    assert f["bytes"] >= 0.8 * 4 * MIB * MEASURE_S, f"the unquotaed producer got {f['bytes'] / MEASURE_S / MIB:.2f} MiB/s of 4"
    assert not f["throttles"], f"the unquotaed producer was throttled: {f['throttles'][:5]}"
    alter(broker.bootstrap, client(slow), "--delete-config", "producer_byte_rate")


def test_a_consumer_quota_holds_while_an_unquotaed_consumer_is_not_slowed(broker):
    topic = create_topic(broker, unique("qf"))
    backlog = 30 * MIB
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "logger": RDKAFKA_LOGGER})
    for _ in range(backlog // len(VALUE)):
        while True:
            try:
                p.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    total = (backlog // len(VALUE)) * len(VALUE)
    slow, fast = unique("slow-c"), unique("fast-c")
    alter(broker.bootstrap, client(slow), "--add-config", f"consumer_byte_rate={MIB}")
    s, f = {}, {}
    run_threads(
        (consume_for, (broker.bootstrap, topic, slow, MEASURE_S, total, s)),
        (consume_for, (broker.bootstrap, topic, fast, MEASURE_S, total, f)),
    )
    assert s["bytes"] < total, "the quota'd consumer read the whole backlog"
    assert_rate_within(s["bytes"], MEASURE_S, MIB)
    assert s["throttles"], "the quota'd consumer was never told its throttle time"
    # 30 MiB at the quota would take 30 s: unthrottled it is a few seconds
    assert f["bytes"] == total, f"the unquotaed consumer read {f['bytes']} of {total}"
    assert f["seconds"] < 15, f"the unquotaed consumer took {f['seconds']:.1f}s for 30 MiB"
    assert not f["throttles"], f"the unquotaed consumer was throttled: {f['throttles'][:5]}"
    alter(broker.bootstrap, client(slow), "--delete-config", "consumer_byte_rate")


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_quotas_survive_a_restart(restart_broker, hard):
    b = restart_broker
    cid = unique("qr")
    alter(b.bootstrap, client(cid), "--add-config", f"producer_byte_rate={3 * MIB}")
    alter(b.bootstrap, ["--entity-type", "clients", "--entity-default"], "--add-config", f"consumer_byte_rate={5 * MIB}")
    b.restart(hard=hard)
    assert described(b.bootstrap, client(cid)) == {"producer_byte_rate": 3 * MIB}
    assert described(b.bootstrap, ["--entity-type", "clients", "--entity-default"]) == {"consumer_byte_rate": 5 * MIB}
    alter(b.bootstrap, client(cid), "--delete-config", "producer_byte_rate")
    alter(b.bootstrap, ["--entity-type", "clients", "--entity-default"], "--delete-config", "consumer_byte_rate")
    b.restart(hard=hard)
    assert described(b.bootstrap, client(cid)) == {}
    assert described(b.bootstrap, ["--entity-type", "clients", "--entity-default"]) == {}


def test_a_quota_set_through_one_broker_is_shown_by_every_broker():
    if brokers.target() != "moldau":
        pytest.skip("Moldau's cluster mode")
    c = Cluster(STATE / f"quotas-{backend()}", size=3, cluster_args=cluster_args("quotas"))
    c.start()
    try:
        cid = unique("qcl")
        alter(c[0].bootstrap, client(cid), "--add-config", f"producer_byte_rate={MIB}")
        for n in (1, 2):
            deadline = time.monotonic() + 15
            while described(c[n].bootstrap, client(cid)) != {"producer_byte_rate": MIB}:
                assert time.monotonic() < deadline, f"broker {n} does not show the quota"
                time.sleep(0.5)
        # Moldau's client-id-prefix entity travels the same way (through
        # each broker in turn: one of them forwards to the controller)
        for n in (0, 1, 2):
            prefix = unique(f"qclp{n}") + "-"
            set_quota(c[n].bootstrap, {"client-id-prefix": prefix}, producer_byte_rate=MIB)
            want = {(("client-id-prefix", prefix),): {"producer_byte_rate": MIB}}
            for m in (0, 1, 2):
                deadline = time.monotonic() + 15
                while kafka_tools.describe_client_quotas(c[m].bootstrap, f"client-id-prefix={prefix}") != want:
                    assert time.monotonic() < deadline, f"broker {m} does not show the prefix quota set through {n}"
                    time.sleep(0.5)
    finally:
        c.close(keep=True)


moldau_only = pytest.mark.skipif(
    brokers.target() == "kafka",
    reason="client-id-prefix quota entities are a Moldau extension: Apache Kafka has no prefix entities",
)


def set_quota(bootstrap: str, entity: dict[str, str | None], **ops: float | None) -> None:
    p = kafka_tools.alter_client_quotas(bootstrap, entity, ops)
    assert p.returncode == 0 and p.stdout.strip() == "ok", f"alterClientQuotas {entity} {ops}:\n{p.stdout}\n{p.stderr}"


@moldau_only
def test_a_client_id_prefix_quota_holds_for_matching_producers_and_no_other(broker):
    topic = create_topic(broker, unique("qpp"))
    prefix = unique("batch") + "-"
    set_quota(broker.bootstrap, {"client-id-prefix": prefix}, producer_byte_rate=MIB)
    # shown as its own entity type: EXACT and SPECIFIED, strict or not; a
    # client-id filter does not see it
    shown = {(("client-id-prefix", prefix),): {"producer_byte_rate": MIB}}
    assert kafka_tools.describe_client_quotas(broker.bootstrap, f"client-id-prefix={prefix}") == shown
    assert kafka_tools.describe_client_quotas(broker.bootstrap, f"client-id-prefix={prefix}", strict=True) == shown
    assert shown.items() <= kafka_tools.describe_client_quotas(broker.bootstrap, "client-id-prefix").items()
    assert (("client-id-prefix", prefix),) not in kafka_tools.describe_client_quotas(broker.bootstrap, "client-id")
    # a client-id part and a client-id-prefix part in one entity: refused
    p = kafka_tools.alter_client_quotas(
        broker.bootstrap, {"client-id": prefix, "client-id-prefix": prefix}, {"producer_byte_rate": 1.0}
    )
    assert p.returncode == 1 and "InvalidRequestException" in p.stdout, p.stdout + p.stderr

    matched, other = prefix + "loader-1", unique("online")
    s, f = {}, {}
    run_threads(
        (produce_for, (broker.bootstrap, topic, matched, MEASURE_S, None, s)),
        (produce_for, (broker.bootstrap, topic, other, MEASURE_S, 4 * MIB, f)),
    )
    assert_rate_within(s["bytes"], MEASURE_S, MIB)
    assert s["throttles"], "the producer under the prefix was never told its throttle time"
    assert f["bytes"] >= 0.8 * 4 * MIB * MEASURE_S, f"the other producer got {f['bytes'] / MEASURE_S / MIB:.2f} MiB/s of 4"
    assert not f["throttles"], f"the other producer was throttled: {f['throttles'][:5]}"

    set_quota(broker.bootstrap, {"client-id-prefix": prefix}, producer_byte_rate=None)
    assert kafka_tools.describe_client_quotas(broker.bootstrap, f"client-id-prefix={prefix}") == {}


@moldau_only
def test_an_exact_client_id_beats_a_prefix_and_the_longest_prefix_wins(broker):
    topic = create_topic(broker, unique("qpx"))
    prefix = unique("tenant") + "-"
    exact, longer, sibling = prefix + "exact", prefix + "eu-1", prefix + "us-1"
    set_quota(broker.bootstrap, {"client-id-prefix": prefix}, producer_byte_rate=MIB // 2)
    set_quota(broker.bootstrap, {"client-id-prefix": prefix + "eu-"}, producer_byte_rate=MIB)
    set_quota(broker.bootstrap, {"client-id": exact}, producer_byte_rate=2 * MIB)
    got = {cid: {} for cid in (exact, longer, sibling)}
    run_threads(*((produce_for, (broker.bootstrap, topic, cid, MEASURE_S, None, out)) for cid, out in got.items()))
    # each within 20 % of its own quota: none of them is the next one's
    assert_rate_within(got[exact]["bytes"], MEASURE_S, 2 * MIB)
    assert_rate_within(got[longer]["bytes"], MEASURE_S, MIB)
    assert_rate_within(got[sibling]["bytes"], MEASURE_S, MIB // 2)
    for cid, out in got.items():
        assert out["throttles"], f"{cid} was never told its throttle time"
    set_quota(broker.bootstrap, {"client-id-prefix": prefix}, producer_byte_rate=None)
    set_quota(broker.bootstrap, {"client-id-prefix": prefix + "eu-"}, producer_byte_rate=None)
    set_quota(broker.bootstrap, {"client-id": exact}, producer_byte_rate=None)
