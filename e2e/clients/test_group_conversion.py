"""Online conversion between classic and consumer groups (KIP-848's
migration, `group.consumer.migration.policy=bidirectional`, issue 39) with
the Java client 4.4: three members of one group with
`group.protocol=classic` are restarted one by one with
`group.protocol=consumer` while records flow — the first such member
upgrades the group, the classic members go on inside it (JoinGroup /
SyncGroup / Heartbeat against the consumer group's assignment) — and then
back, one by one, to `group.protocol=classic`: the last consumer-protocol
member leaving downgrades the group to a classic one. Every record produced
is consumed; ListGroups (the admin client's group type) and Kafka 4.4's
`kafka-consumer-groups --describe` see the group's type at each stage. And
the same conversion step by step on the wire (harness/kgroup), each answer
checked. Runs against Apache Kafka too (MOLDAU_TEST_TARGET=kafka), whose 4.x
brokers convert groups by default: the answers are the same.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import ConsumerGroupType

from conftest import admin_for, create_topic, unique
from harness import kafka_tools, kgroup
from test_groups import JavaMember, gconn, java_balanced, produce, retry_coordinator, wait_coordinator, wait_until

CLASSIC = {"group.protocol": "classic", "session.timeout.ms": "10000", "heartbeat.interval.ms": "500"}
CONSUMER = {"group.protocol": "consumer"}


def group_type(b, group: str):
    """The group's type as ListGroups reports it (None: not listed)."""
    a = admin_for(b)
    listing = retry_coordinator(lambda: a.list_consumer_groups(request_timeout=15).result(20))
    types = [g.type for g in listing.valid if g.group_id == group]
    return types[0] if types else None


def described(b, group: str) -> str:
    p = kafka_tools.consumer_groups(b.bootstrap, "--describe", "--group", group, "--members")
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def member_rows(out: str, names: list[str]) -> dict[str, int] | None:
    """`{name: #partitions}` of the members `kafka-consumer-groups
    --describe --members` lists (by client id), when it lists exactly
    `names`."""
    rows = {}
    for line in out.splitlines():
        cols = line.split()
        for n in names:
            if f"java-{n}" in cols:
                rows[n] = int(cols[-1])
    listed = sum(1 for line in out.splitlines() if "java-" in line)
    return rows if sorted(rows) == sorted(names) and listed == len(names) else None


class Producer(threading.Thread):
    """Produces a batch to every partition every half second until stopped."""

    def __init__(self, b, topic: str, partitions: int):
        super().__init__(daemon=True)
        self.b, self.topic, self.partitions = b, topic, partitions
        self.produced: dict[tuple[int, int], str] = {}
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def run(self):
        i = 0
        try:
            while not self.stopped.is_set():
                self.produced.update(produce(self.b, self.topic, {p: 3 for p in range(self.partitions)}, tag=f"r{i}"))
                i += 1
                time.sleep(0.5)
        except BaseException as e:  # reported by the test
            self.error = e

    def stop(self) -> dict[tuple[int, int], str]:
        self.stopped.set()
        self.join(60)
        assert self.error is None, self.error
        return self.produced


def replace(b, group: str, topic: str, members: list[JavaMember], i: int, name: str, props: dict) -> JavaMember:
    """Closes members[i], waits for the others to settle, starts its
    replacement `name` with `props`, and waits for the three to share the
    partitions."""
    members[i].close()
    rest = [m for j, m in enumerate(members) if j != i]
    wait_until(lambda: java_balanced(rest, 6), 120, f"the two others share 6 partitions after {members[i].name} left", interval=0.2)
    members[i] = JavaMember(b, group, topic, name, **props)
    wait_until(lambda: java_balanced(members, 6), 120, f"three members share 6 partitions after {name} joined", interval=0.2)
    return members[i]


@pytest.mark.timeout(900)
def test_java_group_converts_to_consumer_and_back_while_records_flow(broker):
    topic = create_topic(broker, unique("conv"), 6)
    group = unique("convgrp")
    started: list[JavaMember] = []
    producer = None
    try:
        members = [JavaMember(broker, group, topic, f"classic-{i}", **CLASSIC) for i in range(3)]
        started += members
        wait_until(lambda: java_balanced(members, 6), 120, "three classic members share 6 partitions", interval=0.2)
        assert group_type(broker, group) == ConsumerGroupType.CLASSIC
        producer = Producer(broker, topic, 6)
        producer.start()

        # upgrade: the first member of the consumer protocol converts the
        # group; the classic members go on inside it
        for i in range(3):
            started.append(replace(broker, group, topic, members, i, f"consumer-{i}", CONSUMER))
            assert group_type(broker, group) == ConsumerGroupType.CONSUMER, f"after consumer-{i} joined"
        rows = wait_until(
            lambda: member_rows(described(broker, group), [f"consumer-{i}" for i in range(3)]),
            60, "kafka-consumer-groups shows the three consumer members", interval=1,
        )
        assert sorted(rows.values()) == [2, 2, 2], rows

        # downgrade: classic members join the consumer group; the last
        # consumer-protocol member leaving makes it a classic group again
        for i in range(3):
            started.append(replace(broker, group, topic, members, i, f"back-{i}", CLASSIC))
            expected = ConsumerGroupType.CLASSIC if i == 2 else ConsumerGroupType.CONSUMER
            assert group_type(broker, group) == expected, f"after back-{i} joined"
        rows = wait_until(
            lambda: member_rows(described(broker, group), [f"back-{i}" for i in range(3)]),
            60, "kafka-consumer-groups shows the three classic members", interval=1,
        )
        assert sum(rows.values()) == 6, rows

        produced = producer.stop()
        producer = None
        assert len(produced) > 0

        def consumed() -> dict[tuple[int, int], str]:
            return {(p, off): v for m in started for p, off, v in m.records()}

        wait_until(lambda: set(produced) <= set(consumed()), 120, f"all {len(produced)} records consumed", interval=0.5)
        got = consumed()
        assert {k: got[k] for k in produced} == produced, "each record as produced"
    finally:
        if producer is not None:
            producer.stopped.set()
        for m in started:
            m.kill()


def target_of(b, group: str, member_id: str) -> list[int] | None:
    """The partitions of `member_id`'s target assignment, as the admin
    client describes the consumer group (ConsumerGroupDescribe)."""
    a = admin_for(b)
    d = retry_coordinator(lambda: a.describe_consumer_groups([group], request_timeout=15)[group].result(20))
    for m in d.members:
        if m.member_id == member_id and m.target_assignment is not None:
            return sorted(tp.partition for tp in m.target_assignment.topic_partitions)
    return None


def owning(topic: str, owned: list[int]) -> list[tuple[str, bytes]]:
    """The `range` protocol with a ConsumerProtocolSubscription v1 that
    lists the partitions the member owns."""
    from harness.kwire import i16, i32, string

    sub = i16(1) + i32(1) + string(topic) + i32(-1)  # topics, no user data
    sub += i32(1) + string(topic) + i32(len(owned)) + b"".join(i32(p) for p in owned)
    return [("range", sub)]


@pytest.mark.timeout(300)
def test_conversion_answers_on_the_wire(broker):
    topic = create_topic(broker, unique("convwire"), 4)
    group = unique("convwire")
    wait_coordinator(broker, group)
    sub = [("range", kgroup.consumer_subscription([topic]))]
    nid = str(uuid.uuid4())
    with gconn(broker) as a, gconn(broker) as n:
        # a classic group: A alone, the leader, owns the 4 partitions
        j = a.join_two_step(group, protocols=sub)
        assert j.error == 0 and j.leader == j.member_id, j
        gen, aid = j.generation, j.member_id
        all4 = kgroup.consumer_assignment({topic: [0, 1, 2, 3]})
        assert a.sync_group(group, gen, aid, [(aid, all4)])[0] == 0
        assert a.heartbeat(group, gen, aid) == 0

        # a ConsumerGroupHeartbeat that is no join does not convert it
        hb = n.consumer_group_heartbeat(group, nid, 1, owned={})
        assert hb.error == kgroup.GROUP_ID_NOT_FOUND, kgroup.name(hb.error)
        # a join does: the group epoch follows the generation, and every
        # partition is still A's
        hb = n.consumer_group_heartbeat(group, nid, 0, topics=[topic], owned={}, rebalance_timeout_ms=10000)
        assert (hb.error, hb.epoch) == (0, gen + 1), hb
        assert sum(len(ps) for ps in (hb.assignment or {}).values()) == 0, hb

        # A hears of the rebalance through its heartbeat
        assert a.heartbeat(group, gen, aid) == kgroup.REBALANCE_IN_PROGRESS
        assert a.heartbeat(group, gen - 1, aid) == kgroup.ILLEGAL_GENERATION
        assert a.sync_group(group, gen, aid)[0] == kgroup.REBALANCE_IN_PROGRESS
        # classic joins the consumer group refuses
        rr = n.join_group(group, protocols=[("roundrobin", kgroup.consumer_subscription([topic]))])
        assert rr.error == kgroup.INCONSISTENT_GROUP_PROTOCOL, kgroup.name(rr.error)
        nb = n.join_group(group, protocols=sub)
        assert nb.error == kgroup.MEMBER_ID_REQUIRED and nb.member_id, nb

        # (Kafka 4.4 may compute the new target assignment a moment after
        # the epoch bump: from here on, the answers depend on it)
        wait_until(lambda: len(target_of(broker, group, nid) or []) == 2, 30, "N's target assignment", interval=0.2)

        # A rejoins still owning the 4 partitions: answered at once, no
        # leader; it keeps its generation and gets what it keeps until it
        # reports the rest revoked
        j = a.join_group(group, member_id=aid, protocols=owning(topic, [0, 1, 2, 3]))
        assert (j.error, j.generation, j.leader, j.members, j.protocol) == (0, gen, "", [], "range"), j
        err, asg = a.sync_group(group, gen, aid)
        assert err == 0, kgroup.name(err)
        kept = sorted(kgroup.decode_assignment(asg)[topic])
        assert len(kept) == 2, kept
        assert a.heartbeat(group, gen, aid) == kgroup.REBALANCE_IN_PROGRESS
        j = a.join_group(group, member_id=aid, protocols=owning(topic, kept))
        assert (j.error, j.generation) == (0, gen + 1), j
        err, asg = a.sync_group(group, gen + 1, aid)
        assert err == 0 and sorted(kgroup.decode_assignment(asg)[topic]) == kept
        assert a.heartbeat(group, gen + 1, aid) == 0
        # and N gets the other two
        hb = n.consumer_group_heartbeat(group, nid, gen + 1, owned={})
        assert hb.error == 0, kgroup.name(hb.error)
        assert sorted(p for ps in hb.assignment.values() for p in ps) == sorted({0, 1, 2, 3} - set(kept)), hb

        # A's commits carry its generation (one ahead of it, or older than
        # the partition's assignment, is ILLEGAL_GENERATION)
        p0 = kept[0]
        assert a.offset_commit(group, {topic: {p0: 5}}, generation=gen + 2, member_id=aid) == {(topic, p0): kgroup.ILLEGAL_GENERATION}
        assert a.offset_commit(group, {topic: {p0: 5}}, generation=gen - 1, member_id=aid) == {(topic, p0): kgroup.ILLEGAL_GENERATION}
        assert a.offset_commit(group, {topic: {p0: 5}}, generation=gen + 1, member_id=aid) == {(topic, p0): 0}

        # N leaves: a classic group again, rebalancing at the group epoch
        hb = n.consumer_group_heartbeat(group, nid, -1)
        assert (hb.error, hb.epoch) == (0, -1), hb
        d = a.describe_group(group)
        assert (d["error"], d["state"], d["protocol_type"]) == (0, "PreparingRebalance", "consumer"), d
        assert a.heartbeat(group, gen + 1, aid) == kgroup.REBALANCE_IN_PROGRESS
        j = a.join_group(group, member_id=aid, protocols=sub)
        assert (j.error, j.generation, j.leader) == (0, gen + 2, aid), j
        assert a.sync_group(group, gen + 2, aid, [(aid, all4)])[0] == 0
        d = a.describe_group(group)
        assert (d["state"], [m["member_id"] for m in d["members"]]) == ("Stable", [aid]), d
