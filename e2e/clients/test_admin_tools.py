"""Kafka's own admin tools and confluent-kafka's `elect_leaders` against the
broker: `kafka-log-dirs --describe` (DescribeLogDirs) and
`kafka-leader-election` (ElectLeaders), the real command-line tools of the
Kafka distribution (harness/kafka_tools.py).

- One broker (Moldau standalone, or Apache Kafka with
  MOLDAU_TEST_TARGET=kafka, where the same assertions hold): the log
  directory is absolute and inside the broker's data directory, a written
  partition has a size and an empty one 0, lag 0; the only replica already
  leads, so a preferred (or unclean) election of a partition reports a valid
  replica already elected, `--all-topic-partitions` elects nothing, and an
  unknown topic fails the tool with UnknownTopicOrPartition.
  `kafka-configs --entity-type brokers --entity-default` changes topic
  defaults (the older log.* ones and the newer compression.type,
  log.message.timestamp.*.max.ms, log.roll.jitter.ms, log.preallocate) and
  the connection limits (max.connections.per.ip and its overrides, from a
  loopback address of the test's own) without a restart.
  `kafka-configs --entity-type users` adds, describes and deletes SCRAM
  credentials (one mechanism per command: Kafka refuses a user named twice
  in one AlterUserScramCredentials, and so does Moldau).
  `kafka-acls` against a broker of its own started with Kafka's
  StandardAuthorizer (`super.users=User:ANONYMOUS` and
  `allow.everyone.if.no.acl.found=true`, so the PLAINTEXT test clients keep
  working): ACLs added (literal and prefixed), listed by resource, with
  `--resource-pattern-type any` and `match`, and removed with `--force`;
  the plaintext broker without an authorizer refuses every ACL command with
  SecurityDisabledException, as Kafka does.
- Three Moldau brokers (`auto.leader.rebalance.enable=false`, so leadership
  moves only when asked; cluster backend as in test_cluster.py): the
  preferred leader of partition 0 restarts and comes back in every ISR
  leading nothing; `kafka-leader-election --election-type preferred
  --all-topic-partitions` reports exactly the displaced partitions elected
  and Metadata shows every preferred replica leading; again, nothing to
  elect. A second round through confluent-kafka's `elect_leaders` (null
  list: every partition) does the same. `kafka-log-dirs` lists every
  broker's own data directory with the topic's partitions, the same size on
  every replica; `--broker-list` narrows it.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pytest

from conftest import STATE
from harness import broker as brokers
from harness import kafka_tools
from harness.cluster import Cluster, backend, cluster_args
from harness.clients import RDKAFKA_LOGGER

NODES = (0, 1, 2)
PARTITIONS = 3
SETTINGS = {
    "auto.leader.rebalance.enable": "false",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "100",
}


def wait_for(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
            last = got
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(0.3)
    raise AssertionError(f"never {what}: {last}")


def produce(bootstrap: str, topic: str, partitions: list[int], count: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "logger": RDKAFKA_LOGGER})
    failed = []
    for part in partitions:
        for i in range(count):
            p.produce(topic, f"{topic}-{part}-{i}".encode(), partition=part, on_delivery=lambda e, m: e and failed.append(e))
    assert p.flush(30) == 0, "undelivered records"
    assert not failed, failed


def partition_sizes(out: dict, topic: str) -> dict[int, dict[str, dict]]:
    """broker → {partition name: entry} of the topic, from kafka-log-dirs' JSON."""
    result = {}
    for b in out["brokers"]:
        assert len(b["logDirs"]) == 1, b
        result[b["broker"]] = {p["partition"]: p for p in b["logDirs"][0]["partitions"] if p["partition"].startswith(f"{topic}-")}
    return result


# -- one broker ----------------------------------------------------------------


def test_the_tools_against_one_broker(broker, new_topic):
    topic = new_topic(partitions=2, prefix="tools")
    produce(broker.bootstrap, topic, [0], 3)

    out = kafka_tools.log_dirs(broker.bootstrap, topics=[topic])
    assert len(out["brokers"]) == 1, out
    (d,) = out["brokers"][0]["logDirs"]
    assert d["error"] is None, d
    path = Path(d["logDir"])
    data = broker.data_dir.resolve()
    assert path.is_absolute() and (path == data or data in path.parents), (path, data)
    parts = {p["partition"]: p for p in d["partitions"]}
    assert set(parts) == {f"{topic}-0", f"{topic}-1"}, parts
    assert parts[f"{topic}-0"]["size"] > 0, parts
    assert parts[f"{topic}-1"]["size"] == 0, "nothing written there"
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in parts.values()), parts

    for kind in ("preferred", "unclean"):
        r = kafka_tools.leader_election(broker.bootstrap, kind, topic, 0)
        assert r.returncode == 0, r
        assert f"Valid replica already elected for partitions {topic}-0" in r.stdout, r.stdout
    r = kafka_tools.leader_election(broker.bootstrap, "preferred")
    assert r.returncode == 0, r
    assert kafka_tools.elected(r, "preferred") == set(), r.stdout

    missing = f"nope-{uuid.uuid4().hex[:8]}"
    r = kafka_tools.leader_election(broker.bootstrap, "preferred", missing, 0)
    assert r.returncode != 0, r
    assert "UnknownTopicOrPartition" in r.stdout + r.stderr, r


def test_kafka_features_describes_what_the_broker_supports(broker):
    """ApiVersions v3 features (KIP-584), read by `kafka-features describe`."""
    got = kafka_tools.features(broker.bootstrap)
    if brokers.target() == "kafka":
        assert int(got["group.version"]["SupportedMaxVersion"]) >= 1, got
        return
    # KIP-848 consumer groups (group.version 1); metadata.version 33 (Kafka
    # 4.4's 4.4-IV2, as kafka-dist's 4.4 tool names it), the only level;
    # transaction version 2 (KIP-890 part 2) supported and
    # finalized, as on a new Kafka 4 cluster; the finalized features' epoch
    # is 1 (never -1, which the Java client ignores)
    mv = "4.4-IV2"
    assert got == {
        "group.version": {"SupportedMinVersion": "0", "SupportedMaxVersion": "1", "FinalizedVersionLevel": "1", "Epoch": "1"},
        "metadata.version": {"SupportedMinVersion": mv, "SupportedMaxVersion": mv, "FinalizedVersionLevel": mv, "Epoch": "1"},
        "transaction.version": {"SupportedMinVersion": "0", "SupportedMaxVersion": "2", "FinalizedVersionLevel": "2", "Epoch": "1"},
    }, got


def test_scram_credentials_with_kafka_configs(broker):
    """`kafka-configs --entity-type users` manages SCRAM credentials
    (AlterUserScramCredentials / DescribeUserScramCredentials, KIP-554), the
    same on Moldau and Kafka: one mechanism per command is added, described
    with its iterations and deleted; two mechanisms of one user in one
    command are refused with DuplicateResource, as Kafka's controller
    refuses a user altered twice in one request; deleting a credential that
    does not exist fails with ResourceNotFound."""
    user = f"alice-{uuid.uuid4().hex[:8]}"
    users = ["--entity-type", "users", "--entity-name", user]

    def describe() -> str:
        p = kafka_tools.configs(broker.bootstrap, "--describe", *users)
        assert p.returncode == 0, p
        return p.stdout

    assert "SCRAM" not in describe(), "no credentials yet"
    p = kafka_tools.configs(
        broker.bootstrap,
        "--alter",
        "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]",
        *users,
    )
    assert p.returncode != 0, p
    assert "DuplicateResourceException: A user credential cannot be altered twice in the same request" in p.stdout + p.stderr, p
    assert "SCRAM" not in describe(), "a refused request changes nothing"

    try:
        for config in ("SCRAM-SHA-256=[iterations=8192,password=alice-secret]", "SCRAM-SHA-512=[password=alice-secret]"):
            p = kafka_tools.configs(broker.bootstrap, "--alter", "--add-config", config, *users)
            assert p.returncode == 0, p
            assert f"Completed updating config for user {user}." in p.stdout, p.stdout
        shown = describe()
        assert f"SCRAM credential configs for user-principal '{user}' are " in shown, shown
        # the order of the mechanisms is Kafka's hash order there, id order here
        assert "SCRAM-SHA-256=iterations=8192" in shown and "SCRAM-SHA-512=iterations=4096" in shown, shown
        assert "password" not in shown and "salt" not in shown, shown
        # every user: the same line
        p = kafka_tools.configs(broker.bootstrap, "--describe", "--entity-type", "users")
        assert p.returncode == 0, p
        assert f"user-principal '{user}' are " in p.stdout, p.stdout

        p = kafka_tools.configs(broker.bootstrap, "--alter", "--delete-config", "SCRAM-SHA-256", *users)
        assert p.returncode == 0, p
        shown = describe()
        assert f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-512=iterations=4096\n" == shown, shown

        p = kafka_tools.configs(broker.bootstrap, "--alter", "--delete-config", "SCRAM-SHA-256", *users)
        assert p.returncode != 0, p
        assert "ResourceNotFoundException: Attempt to delete a user credential that does not exist" in p.stdout + p.stderr, p
    finally:
        kafka_tools.configs(broker.bootstrap, "--alter", "--delete-config", "SCRAM-SHA-512", *users)
    assert "SCRAM" not in describe(), "the last credential deleted"


ACL_PROPS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "true",
}


@pytest.fixture(scope="module")
def acl_broker():
    """A broker of this module's own with Kafka's StandardAuthorizer."""
    b = brokers.new_broker(STATE / f"own-test_admin_tools-acls-{brokers.target()}")
    try:
        brokers.start_with_properties(b, ACL_PROPS, "acls")
    except Exception:
        b.close(keep=True)
        raise
    yield b
    b.close(keep=True)
    shutil.rmtree(b.data_dir, ignore_errors=True)


def pattern(name: str, pattern_type: str) -> str:
    return f"ResourcePattern(resourceType=TOPIC, name={name}, patternType={pattern_type})"


ALICE_READS = "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"
BOB_MAY_NOT_WRITE = "(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)"


def test_acls_with_kafka_acls(acl_broker):
    """`kafka-acls --add / --list / --remove` (CreateAcls, DescribeAcls,
    DeleteAcls) the same on Moldau and Kafka."""
    bootstrap = acl_broker.bootstrap
    topic = f"orders-{uuid.uuid4().hex[:8]}"

    def listed(*args: str) -> dict[str, set[str]]:
        p = kafka_tools.acls(bootstrap, "--list", *args)
        assert p.returncode == 0, p
        return kafka_tools.listed_acls(p.stdout)

    assert listed("--topic", topic) == {}, "no ACLs yet"
    p = kafka_tools.acls(bootstrap, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    assert p.returncode == 0, p
    assert f"Adding ACLs for resource `{pattern(topic, 'LITERAL')}`" in p.stdout, p.stdout
    p = kafka_tools.acls(
        bootstrap,
        "--add",
        "--deny-principal",
        "User:bob",
        "--operation",
        "Write",
        "--topic",
        topic,
        "--resource-pattern-type",
        "prefixed",
    )
    assert p.returncode == 0, p
    assert f"Adding ACLs for resource `{pattern(topic, 'PREFIXED')}`" in p.stdout, p.stdout

    # a resource's own literal ACLs (the tool's default pattern type)
    assert listed("--topic", topic) == {pattern(topic, "LITERAL"): {ALICE_READS}}
    # both patterns named exactly so
    assert listed("--topic", topic, "--resource-pattern-type", "any") == {
        pattern(topic, "LITERAL"): {ALICE_READS},
        pattern(topic, "PREFIXED"): {BOB_MAY_NOT_WRITE},
    }
    # every pattern that applies to another topic: the prefixed one
    got = listed("--topic", f"{topic}-x", "--resource-pattern-type", "match")
    assert got.get(pattern(topic, "PREFIXED")) == {BOB_MAY_NOT_WRITE}, got
    assert pattern(topic, "LITERAL") not in got, got
    # every ACL of the broker, by principal
    got = listed("--principal", "User:alice")
    assert got.get(pattern(topic, "LITERAL")) == {ALICE_READS}, got
    assert pattern(topic, "PREFIXED") not in got, got

    # a principal without its type is refused (by the tool or the broker)
    p = kafka_tools.acls(bootstrap, "--add", "--allow-principal", "alice", "--operation", "Read", "--topic", topic)
    assert p.returncode != 0, p

    p = kafka_tools.acls(bootstrap, "--remove", "--force", "--topic", topic, "--resource-pattern-type", "prefixed")
    assert p.returncode == 0, p
    assert listed("--topic", topic, "--resource-pattern-type", "any") == {pattern(topic, "LITERAL"): {ALICE_READS}}
    p = kafka_tools.acls(
        bootstrap, "--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic
    )
    assert p.returncode == 0, p
    assert listed("--topic", topic, "--resource-pattern-type", "any") == {}


def test_acls_without_an_authorizer_are_security_disabled(broker):
    """The plaintext broker has no authorizer: every ACL command fails with
    SecurityDisabledException, as on Kafka."""
    for args, message in (
        # Kafka 4.4's `--add` lists the resource's ACLs first (DescribeAcls)
        (
            ["--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders"],
            "No Authorizer is configured on the broker",
        ),
        # DescribeAcls has words of its own in Kafka
        (["--list"], "No Authorizer is configured on the broker"),
        (["--remove", "--force", "--topic", "orders"], "No Authorizer is configured."),
    ):
        p = kafka_tools.acls(broker.bootstrap, *args)
        out = p.stdout + p.stderr
        assert p.returncode != 0, (args, p)
        assert f"SecurityDisabledException: {message}" in out, (args, p)


def produce_one(bootstrap: str, topic: str, size: int):
    """Produces one record of `size` bytes; its delivery error (None: delivered)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "logger": RDKAFKA_LOGGER})
    errors = []
    p.produce(topic, b"x" * size, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(30) == 0, "no delivery report"
    return errors[0]


# broker defaults of topic configs added in Kafka 3.x/4.x, all dynamic in Kafka
NEWER_DEFAULTS = {
    "compression.type": "lz4",
    "compression.lz4.level": "4",
    "log.message.timestamp.before.max.ms": "86400000",
    "log.message.timestamp.after.max.ms": "7200000",
    "log.roll.jitter.ms": "1000",
    "log.preallocate": "true",
}
# the topic config each defaults
NEWER_TOPIC_NAMES = {
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.preallocate": "preallocate",
}


def newer_shown() -> list[str]:
    """How kafka-configs --describe --all shows each newer dynamic default on a topic."""
    return [
        f"{NEWER_TOPIC_NAMES.get(k, k)}={v} sensitive=false synonyms={{DYNAMIC_DEFAULT_BROKER_CONFIG:{k}={v}"
        for k, v in NEWER_DEFAULTS.items()
    ]


def test_dynamic_broker_defaults_reach_topics_without_a_restart(broker, new_topic):
    """`kafka-configs --entity-type brokers --entity-default` changes the
    defaults of topics without an override of their own, at once: DescribeConfigs
    shows them with their dynamic source, and `message.max.bytes` is enforced."""
    from confluent_kafka import KafkaError

    topic = new_topic(partitions=1, prefix="dyn")
    default = ["--entity-type", "brokers", "--entity-default"]
    assert produce_one(broker.bootstrap, topic, 5000) is None

    def describe() -> str:
        p = kafka_tools.configs(broker.bootstrap, "--describe", "--entity-type", "topics", "--entity-name", topic, "--all")
        assert p.returncode == 0, p
        return p.stdout

    try:
        p = kafka_tools.configs(
            broker.bootstrap, "--alter", *default, "--add-config", "log.retention.ms=12345678,message.max.bytes=2000"
        )
        assert p.returncode == 0, p
        shown = "retention.ms=12345678 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=12345678"
        wait_for("the dynamic default shown on the topic", lambda: shown in describe())
        assert "max.message.bytes=2000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=2000" in describe()
        # the newer log defaults are dynamic too
        p = kafka_tools.configs(broker.bootstrap, "--alter", *default, "--add-config", ",".join(f"{k}={v}" for k, v in NEWER_DEFAULTS.items()))
        assert p.returncode == 0, p
        wait_for("the newer dynamic defaults shown on the topic", lambda: all(s in describe() for s in newer_shown()))
        # and on the broker itself, the dynamic default first among its synonyms
        from confluent_kafka.admin import AdminClient

        (node,) = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).brokers
        p = kafka_tools.configs(
            broker.bootstrap, "--describe", "--entity-type", "brokers", "--entity-name", str(node), "--all"
        )
        assert p.returncode == 0, p
        assert "log.retention.ms=12345678 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=12345678" in p.stdout, p.stdout

        def refused():
            e = produce_one(broker.bootstrap, topic, 5000)
            return e is not None and e.code() == KafkaError.MSG_SIZE_TOO_LARGE

        wait_for("a batch above the dynamic message.max.bytes refused", refused)
        assert produce_one(broker.bootstrap, topic, 500) is None

        # a config Kafka cannot change at run time is refused as read-only
        p = kafka_tools.configs(broker.bootstrap, "--alter", *default, "--add-config", "num.partitions=3")
        assert p.returncode != 0, p
        assert "num.partitions" in p.stdout + p.stderr, p
    finally:
        p = kafka_tools.configs(
            broker.bootstrap,
            "--alter",
            *default,
            "--delete-config",
            ",".join(["log.retention.ms", "message.max.bytes", *NEWER_DEFAULTS]),
        )
        assert p.returncode == 0, p
    wait_for("the default back", lambda: "retention.ms=12345678" not in describe())
    wait_for("the newer defaults back", lambda: not any(s in describe() for s in newer_shown()))
    wait_for("large batches accepted again", lambda: produce_one(broker.bootstrap, topic, 5000) is None)


def test_connection_limits_change_without_a_restart(broker):
    """`max.connections.per.ip` and `max.connections.per.ip.overrides` set
    with kafka-configs decide about the next connections at once: from an
    address of its own (127.0.0.77) a second connection is closed by a
    per-IP limit of 1 while the first keeps working, and accepted once an
    override raises that address's limit; the tools' own addresses keep a
    high override throughout."""
    import socket

    from harness import kwire

    default = ["--entity-type", "brokers", "--entity-default"]
    source = "127.0.0.77"
    tools = sorted({"127.0.0.1", broker.host})

    def connect() -> socket.socket:
        s = socket.socket()
        s.bind((source, 0))
        s.settimeout(10)
        s.connect((broker.host, broker.port))
        return s

    def recv_exact(s: socket.socket, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def answers(s: socket.socket) -> bool:
        """An ApiVersions v0 request gets its whole response (False: the broker closed the connection)."""
        req = kwire.i16(18) + kwire.i16(0) + kwire.i32(1) + kwire.string("limits")
        try:
            s.sendall(kwire.i32(len(req)) + req)
            size = recv_exact(s, 4)
            return size is not None and recv_exact(s, int.from_bytes(size, "big", signed=True)) is not None
        except (ConnectionResetError, BrokenPipeError):
            return False

    def one_more_held() -> bool:
        """Opens a connection and keeps it if the broker answers on it.
        (A closed probe's slot may be freed a moment later, so retried.)"""
        s = connect()
        if answers(s):
            held.append(s)
        else:
            s.close()
        return len(held) == 3

    def overrides(*pairs: str) -> str:
        return "max.connections.per.ip.overrides=[" + ",".join([*(f"{t}:1000" for t in tools), *pairs]) + "]"

    def alter(*args: str) -> None:
        p = kafka_tools.configs(broker.bootstrap, "--alter", *default, *args)
        assert p.returncode == 0, p

    held: list[socket.socket] = []

    def second_refused() -> bool:
        s = connect()
        try:
            return not answers(s)
        finally:
            s.close()

    try:
        alter("--add-config", f"max.connections.per.ip=1,{overrides()}")
        held.append(connect())
        assert answers(held[0])
        wait_for("a second connection from one address closed", second_refused)
        assert answers(held[0]), "the open connection stays"
        # an override for the address raises its limit
        alter("--add-config", overrides(f"{source}:3"))
        wait_for("three connections from the address held", one_more_held)
        assert all(answers(s) for s in held)
        assert second_refused(), "a fourth connection over the override"
    finally:
        for s in held:
            s.close()
        alter("--delete-config", "max.connections.per.ip,max.connections.per.ip.overrides")
    # and with the limits gone, many connections again
    held.clear()

    def five_held() -> bool:
        one_more_held()
        return len(held) >= 5

    try:
        wait_for("five connections from the address accepted again", five_held)
    finally:
        for s in held:
            s.close()


# -- three brokers -------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    if brokers.target() != "moldau":
        pytest.skip("Moldau's cluster mode")
    c = Cluster(STATE / f"admin-tools-{backend()}", size=len(NODES), settings=SETTINGS, cluster_args=cluster_args("tools"))
    c.start()
    yield c
    c.close(keep=True)


def describe(admin, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition → (leader, replicas, isr)."""
    t = admin.list_topics(topic, timeout=10).topics[topic]
    assert t.error is None, t.error
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in t.partitions.values()}


def displace_preferred_leader(cluster, admin, topic: str) -> tuple[int, set[int]]:
    """Restarts the preferred leader of partition 0 and waits until it is in
    every ISR again: `(it, partitions it should lead but does not)`."""
    view = wait_for(f"{topic} fully in sync", lambda: (lambda v: v if all(len(i) == 3 for _, _, i in v.values()) else None)(describe(admin, topic)))
    preferred = view[0][1][0]
    assert view[0][0] == preferred, view
    cluster[preferred].restart()
    after = wait_for(
        f"broker {preferred} back in every ISR of {topic}",
        lambda: (lambda v: v if all(i == sorted(NODES) for _, _, i in v.values()) else None)(describe(admin, topic)),
    )
    displaced = {p for p, (leader, replicas, _) in after.items() if replicas[0] == preferred}
    assert 0 in displaced
    for p in displaced:
        assert after[p][0] != preferred, f"partition {p} came back by itself: {after}"
    return preferred, displaced


def assert_preferred_leaders(admin, topic: str) -> None:
    view = wait_for(
        f"every partition of {topic} led by its preferred replica",
        lambda: (lambda v: v if all(leader == replicas[0] for leader, replicas, _ in v.values()) else None)(describe(admin, topic)),
        timeout=10,
    )
    assert len(view) == PARTITIONS


def test_preferred_elections_with_the_tool_and_with_confluent_kafka(cluster):
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "logger": RDKAFKA_LOGGER})
    wait_for("three brokers", lambda: sorted(admin.list_topics(timeout=5).brokers) == list(NODES))
    topic = f"elect-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)])[topic].result(30)
    produce(cluster.bootstrap, topic, list(range(PARTITIONS)), 5)

    # Round 1: Kafka's kafka-leader-election.
    _, displaced = displace_preferred_leader(cluster, admin, topic)
    r = kafka_tools.leader_election(cluster.bootstrap, "preferred")
    assert r.returncode == 0, r
    mine = {x for x in kafka_tools.elected(r, "preferred") if x.rsplit("-", 1)[0] == topic}
    assert mine == {f"{topic}-{p}" for p in displaced}, r.stdout
    assert_preferred_leaders(admin, topic)
    again = kafka_tools.leader_election(cluster.bootstrap, "preferred")
    assert again.returncode == 0 and kafka_tools.elected(again, "preferred") == set(), again.stdout
    one = kafka_tools.leader_election(cluster.bootstrap, "preferred", topic, 0)
    assert f"Valid replica already elected for partitions {topic}-0" in one.stdout, one

    # Round 2: confluent-kafka's AdminClient, every partition (a null list).
    _, displaced = displace_preferred_leader(cluster, admin, topic)
    result = admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
    ours = {tp.partition: err for tp, err in result.items() if tp.topic == topic}
    assert set(ours) == displaced and all(e is None for e in ours.values()), result
    assert_preferred_leaders(admin, topic)
    named = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    (err,) = named.values()
    assert err is not None and err.code() == KafkaError.ELECTION_NOT_NEEDED, named
    named = admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(topic, 1)]).result(30)
    (err,) = named.values()
    assert err is not None and err.code() == KafkaError.ELECTION_NOT_NEEDED, named


def test_kafka_log_dirs_lists_every_brokers_own_directory(cluster):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "logger": RDKAFKA_LOGGER})
    topic = f"dirs-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)])[topic].result(30)
    wait_for(f"{topic} fully in sync", lambda: all(len(i) == 3 for _, _, i in describe(admin, topic).values()))
    produce(cluster.bootstrap, topic, list(range(PARTITIONS)), 4)
    names = {f"{topic}-{p}" for p in range(PARTITIONS)}

    def same_bytes_everywhere():
        out = kafka_tools.log_dirs(cluster.bootstrap, topics=[topic])
        assert sorted(b["broker"] for b in out["brokers"]) == list(NODES), out
        for b in out["brokers"]:
            (d,) = b["logDirs"]
            assert d["error"] is None
            assert Path(d["logDir"]) == cluster[b["broker"]].data_dir.resolve(), d["logDir"]
        sizes = partition_sizes(out, topic)
        for n, parts in sizes.items():
            assert set(parts) == names, f"broker {n}: {parts}"
            assert all(p["size"] > 0 and p["isFuture"] is False for p in parts.values()), parts
        caught_up = all(len({sizes[n][name]["size"] for n in NODES}) == 1 for name in names)
        lag_free = all(p["offsetLag"] == 0 for parts in sizes.values() for p in parts.values())
        return caught_up and lag_free

    wait_for("every replica holding the same bytes", same_bytes_everywhere)
    only = kafka_tools.log_dirs(cluster.bootstrap, topics=[topic], brokers=[1])
    assert [b["broker"] for b in only["brokers"]] == [1], only
