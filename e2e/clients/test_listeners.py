"""Several named listeners on one broker (issue 38): a PLAINTEXT listener
and a SASL_PLAINTEXT one (PLAIN), configured with Kafka's names
(`listeners`, `advertised.listeners`, `listener.security.protocol.map`,
`inter.broker.listener.name`). confluent-kafka produces through one
listener and consumes through the other, both ways; each listener's
metadata names that listener's port; the SASL listener still turns away a
client that does not authenticate while the PLAINTEXT one serves it.

Runs against Moldau and Apache Kafka alike (MOLDAU_TEST_TARGET); Kafka
(KRaft, combined mode) also gets its CONTROLLER listener.
"""

from __future__ import annotations

import shutil
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import STATE
from harness import broker as brokers
from harness.clients import RDKAFKA_LOGGER, deliver, poll_assigned

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
# username/password are Kafka's own inter-broker login (unused here: the
# inter-broker listener is PLAINTEXT); Moldau ignores them
BROKER_PLAIN_JAAS = (
    f'{PLAIN_MODULE} required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
ALICE = {
    "security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "alice",
    "sasl.password": "alice-secret",
}


def listener_properties(host: str, plain_port: int, sasl_port: int, controller_port: int | None) -> dict[str, str]:
    """A PLAINTEXT listener (inter-broker) on plain_port and a
    SASL_PLAINTEXT one on sasl_port; with `controller_port` (Apache Kafka)
    also the KRaft controller listener."""
    listeners = f"PLAINTEXT://{host}:{plain_port},SASL_PLAINTEXT://{host}:{sasl_port}"
    props = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": BROKER_PLAIN_JAAS,
    }
    if controller_port is not None:
        props["listeners"] = f"{listeners},CONTROLLER://{host}:{controller_port}"
        props["listener.security.protocol.map"] += ",CONTROLLER:PLAINTEXT"
    return props


class TwoListeners:
    def __init__(self, b: brokers.Broker, sasl_port: int):
        self.broker = b
        self.plain = f"{b.host}:{b.port}"
        self.sasl = f"{b.host}:{sasl_port}"
        self.sasl_port = sasl_port


@pytest.fixture(scope="module")
def two_listeners():
    b = brokers.new_broker(STATE / f"own-test_listeners-{brokers.target()}")
    sasl_port = brokers.free_port(b.host)
    controller_port = None
    if b.kind == "kafka":
        controller_port = brokers.free_port(b.host)
        b.env = {"KAFKA_CONTROLLER_PORT": str(controller_port)}
    try:
        # the harness waits for b.port: the PLAINTEXT listener's
        brokers.start_with_properties(
            b, listener_properties(b.host, b.port, sasl_port, controller_port), "listeners"
        )
    except Exception:
        b.close(keep=True)
        raise
    yield TwoListeners(b, sasl_port)
    b.close(keep=True)
    shutil.rmtree(b.data_dir, ignore_errors=True)


def client_conf(bootstrap: str, auth: dict, name: str) -> dict:
    return {"bootstrap.servers": bootstrap, "client.id": f"moldau-e2e-listeners-{name}", "logger": RDKAFKA_LOGGER, **auth}


def create_topic(bootstrap: str, auth: dict, timeout: float = 30) -> str:
    name = f"listeners-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(client_conf(bootstrap, auth, "admin"))
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=5)
        t = md.topics.get(name)
        if t is not None and t.error is None and t.partitions and t.partitions[0].leader >= 0:
            return name
        time.sleep(0.2)
    raise AssertionError(f"topic {name} not ready within {timeout}s")


def produce(bootstrap: str, auth: dict, topic: str, values: list[bytes]) -> list[int]:
    p = Producer({**client_conf(bootstrap, auth, "producer"), "acks": "all", "linger.ms": 5, "message.timeout.ms": 30000})
    offsets, left, errors = deliver(p, topic, 0, [dict(value=v) for v in values], 45)
    assert left == 0 and not errors, f"{left} undelivered, errors {errors[:5]}"
    return offsets


def consume(bootstrap: str, auth: dict, topic: str, count: int, timeout: float = 30) -> list[bytes]:
    c = Consumer(
        {
            **client_conf(bootstrap, auth, "consumer"),
            "group.id": f"moldau-e2e-listeners-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    messages = poll_assigned(c, topic, 0, 0, count, timeout, lambda e: AssertionError(f"consume from {bootstrap}: {e}"))
    out: list[bytes] = [m.value() for m in messages]
    assert len(out) == count, f"{len(out)} of {count} records within {timeout}s"
    return out


def values(tag: str, n: int = 10) -> list[bytes]:
    nonce = uuid.uuid4().hex[:8]
    return [f"{tag}-{i}-{nonce}".encode() for i in range(n)]


def test_produce_on_sasl_consume_on_plaintext(two_listeners):
    t = create_topic(two_listeners.sasl, ALICE)
    sent = values("sasl-to-plain")
    assert produce(two_listeners.sasl, ALICE, t, sent) == list(range(len(sent)))
    assert consume(two_listeners.plain, {}, t, len(sent)) == sent


def test_produce_on_plaintext_consume_on_sasl(two_listeners):
    t = create_topic(two_listeners.plain, {})
    sent = values("plain-to-sasl")
    assert produce(two_listeners.plain, {}, t, sent) == list(range(len(sent)))
    assert consume(two_listeners.sasl, ALICE, t, len(sent)) == sent


def test_each_listener_names_its_own_port(two_listeners):
    b = two_listeners.broker
    for bootstrap, auth, port in [(two_listeners.plain, {}, b.port), (two_listeners.sasl, ALICE, two_listeners.sasl_port)]:
        md = AdminClient(client_conf(bootstrap, auth, "metadata")).list_topics(timeout=10)
        assert [(m.host, m.port) for m in md.brokers.values()] == [(b.host, port)], (bootstrap, md.brokers)


def test_the_sasl_listener_still_requires_authentication(two_listeners):
    p = Producer({**client_conf(two_listeners.sasl, {}, "unauthenticated"), "error_cb": lambda e: None})
    with pytest.raises(KafkaException):
        md = p.list_topics(timeout=8)
        pytest.fail(f"metadata answered without authentication: {md.brokers}")
    # the same client is served on the PLAINTEXT listener
    p = Producer(client_conf(two_listeners.plain, {}, "plaintext"))
    assert p.list_topics(timeout=10).brokers
