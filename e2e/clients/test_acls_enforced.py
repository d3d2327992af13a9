"""ACLs enforced for real clients (issue 38): a broker of this module's own
with a SASL_PLAINTEXT listener (PLAIN users admin, alice and bob) and Kafka's
StandardAuthorizer, `super.users=User:admin` (and User:ANONYMOUS, the
principal of Apache Kafka's own PLAINTEXT controller listener; no client
reaches the SASL listener anonymously).

admin (a super user) creates two topics and, with confluent-kafka's
AdminClient (CreateAcls), lets alice WRITE and READ one of them and READ one
group. Then, as alice with confluent-kafka:

- a produce to her topic is delivered, one to the other topic fails with
  TOPIC_AUTHORIZATION_FAILED;
- her consumer group reads her records back and commits; a consumer of a
  group she may not read fails with GROUP_AUTHORIZATION_FAILED;
- her Metadata lists only her topic (the other is not revealed);
- CreateAcls is refused (CLUSTER_AUTHORIZATION_FAILED);
- bob, without any ACL, cannot produce to alice's topic;
- after admin removes alice's WRITE (DeleteAcls), her produce fails.

Runs against Moldau and Apache Kafka alike (MOLDAU_TEST_TARGET), so the
errors are Kafka's.
"""

from __future__ import annotations

import shutil
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from conftest import STATE, unique
from harness import broker as brokers
from harness.clients import RDKAFKA_LOGGER
from harness.waiting import wait_until
from test_security import sasl_conf, sasl_properties

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
JAAS = (
    f'{PLAIN_MODULE} required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";'
)
ADMIN = sasl_conf("PLAIN", "admin", "admin-secret")
ALICE = sasl_conf("PLAIN", "alice", "alice-secret")
BOB = sasl_conf("PLAIN", "bob", "bob-secret")


@pytest.fixture(scope="module")
def secured():
    b = brokers.new_broker(STATE / f"own-test_acls_enforced-{brokers.target()}")
    controller_port = None
    if b.kind == "kafka":
        controller_port = brokers.free_port(b.host)
        b.env = {"KAFKA_CONTROLLER_PORT": str(controller_port)}
    props = sasl_properties(b.host, b.port, controller_port)
    props["sasl.enabled.mechanisms"] = "PLAIN"
    props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = JAAS
    props["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    props["super.users"] = "User:admin;User:ANONYMOUS"
    try:
        brokers.start_with_properties(b, props, "acls")
    except Exception:
        b.close(keep=True)
        raise
    yield b
    b.close(keep=True)
    shutil.rmtree(b.data_dir, ignore_errors=True)


def admin_client(b: brokers.Broker, auth: dict) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap, "client.id": "moldau-e2e-acl-admin", "logger": RDKAFKA_LOGGER, **auth})


def produce_one(b: brokers.Broker, auth: dict, topic: str, value: bytes) -> KafkaError | None:
    """Produces one record; its delivery error, or None when delivered."""
    p = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "message.timeout.ms": 15000,
            "client.id": "moldau-e2e-acl-producer",
            "logger": RDKAFKA_LOGGER,
            **auth,
        }
    )
    got: list = []
    p.produce(topic, value=value, partition=0, on_delivery=lambda err, msg: got.append(err))
    assert p.flush(30) == 0, "the delivery report never came"
    return got[0]


def consumer(b: brokers.Broker, auth: dict, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "client.id": "moldau-e2e-acl-consumer",
            "logger": RDKAFKA_LOGGER,
            **auth,
        }
    )


def allow(resource_type, name: str, operation, principal: str = "User:alice") -> AclBinding:
    return AclBinding(resource_type, name, ResourcePatternType.LITERAL, principal, "*", operation, AclPermissionType.ALLOW)


def test_alice_may_do_what_her_acls_allow_and_nothing_else(secured):
    b = secured
    admin = admin_client(b, ADMIN)
    mine, theirs = unique("acl-mine"), unique("acl-theirs")
    group = f"acl-group-{uuid.uuid4().hex[:6]}"
    for topic in (mine, theirs):
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    write = allow(ResourceType.TOPIC, mine, AclOperation.WRITE)
    acls = [write, allow(ResourceType.TOPIC, mine, AclOperation.READ), allow(ResourceType.GROUP, group, AclOperation.READ)]
    for f in admin.create_acls(acls, request_timeout=30).values():
        f.result(30)
    listed = wait_until(
        "admin lists alice's three ACLs",
        lambda: (lambda got: len(got) >= 3 and got)(
            admin.describe_acls(
                AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY, AclPermissionType.ANY)
            ).result(30)
        ),
        30,
    )
    assert {(a.name, a.operation) for a in listed} >= {(mine, AclOperation.WRITE), (mine, AclOperation.READ), (group, AclOperation.READ)}

    # produce: her topic yes, the other no
    assert wait_until("alice's produce is delivered", lambda: produce_one(b, ALICE, mine, b"hers") is None, 30)
    err = produce_one(b, ALICE, theirs, b"not hers")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err
    err = produce_one(b, BOB, mine, b"bob's")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err

    # Metadata shows her topic only
    topics = admin_client(b, ALICE).list_topics(timeout=15).topics
    assert mine in topics and theirs not in topics, sorted(topics)

    # her group reads her record and commits
    c = consumer(b, ALICE, group)
    try:
        c.subscribe([mine])
        seen = []
        deadline = time.monotonic() + 45
        while not seen and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            assert m.error() is None, m.error()
            seen.append(m.value())
        assert seen == [b"hers"], seen
        committed = c.commit(asynchronous=False)
        assert all(tp.error is None for tp in committed), committed
    finally:
        c.close()

    # a group she may not read
    c = consumer(b, ALICE, f"{group}-other")
    try:
        c.subscribe([mine])
        errors = []
        deadline = time.monotonic() + 30
        while not errors and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is not None:
                errors.append(m.error())
        assert errors and errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, errors
    finally:
        c.close()

    # the cluster's APIs
    alice_admin = admin_client(b, ALICE)
    refused = alice_admin.create_acls([allow(ResourceType.TOPIC, theirs, AclOperation.READ)], request_timeout=30)
    with pytest.raises(KafkaException) as e:
        list(refused.values())[0].result(30)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, e.value

    # taking WRITE away
    for f in admin.delete_acls([AclBindingFilter(*write_filter(write))], request_timeout=30).values():
        f.result(30)
    wait_until(
        "alice's produce refused once WRITE is gone",
        lambda: (lambda err: err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED)(produce_one(b, ALICE, mine, b"late")),
        30,
    )


def write_filter(binding: AclBinding) -> tuple:
    """The fields of a filter matching exactly `binding`."""
    return (
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )
