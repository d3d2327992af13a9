"""Kafka's own `kafka-features` and `kafka-metadata-quorum` against one
broker (Moldau standalone, or Apache Kafka with MOLDAU_TEST_TARGET=kafka):

- `metadata.version` is finalized (Moldau: 33, Kafka 4.4's 4.4-IV2, its
  only level); an upgrade past what the broker supports, a downgrade and
  an unknown feature fail the tool with Kafka's INVALID_UPDATE_VERSION
  message ("Invalid update version N for feature F. …"); asking for the
  level already finalized succeeds and changes nothing. Moldau refuses
  any change of `transaction.version` (its broker config sets it), where
  Kafka would accept a dry-run downgrade.
- `kafka-features describe` shows it (kafka-dist's 4.4 tool as
  "4.4-IV2"; a tool older than 4.4 prints "UNKNOWN 33", for a Kafka 4.4
  cluster too); the levels as numbers are read through the Admin client
  (Features.java).
- `kafka-metadata-quorum describe --status` and `--replication` print the
  quorum: on Kafka its Raft quorum, on Moldau the controller as leader and
  only voter (standalone: the broker itself, no observers), with Kafka's
  output shape. Three Moldau brokers (cluster mode): asked through any
  broker, the leader is the controller Metadata names, and the other two
  are observers with their heartbeats (LastFetchTimestamp) and no lag once
  caught up.
"""

from __future__ import annotations

import time

import pytest

from conftest import STATE
from harness import broker as brokers
from harness import kafka_tools
from harness.cluster import Cluster, backend, cluster_args


def test_metadata_version_is_finalized(broker):
    got = kafka_tools.feature_levels(broker.bootstrap)
    _, _, finalized, epoch = got["metadata.version"]
    assert finalized >= 7 and epoch >= 0, got
    if brokers.target() == "moldau":
        assert got["metadata.version"] == (33, 33, 33, 1), got
        # `kafka-features describe` prints it: a tool older than Kafka 4.4
        # knows no name for level 33 and prints "UNKNOWN 33" (as against
        # a Kafka 4.4 cluster), a 4.4 tool "4.4-IV2"
        shown = kafka_tools.features(broker.bootstrap)["metadata.version"]
        assert shown["FinalizedVersionLevel"] in ("UNKNOWN 33", "4.4-IV2"), shown
        assert shown["SupportedMaxVersion"] == shown["FinalizedVersionLevel"], shown


def refused(p, verb: str, feature: str, level: int, why: str | None = None) -> str:
    """The tool's line for a refused update ("Can not …" for a dry run),
    checked to be Kafka's: by default the INVALID_UPDATE_VERSION of
    Kafka's FeatureControlManager, else `why`."""
    assert p.returncode != 0, p
    out = p.stdout + p.stderr
    could = "Can not" if "--dry-run" in p.args else "Could not"
    why = why or f"Invalid update version {level} for feature {feature}."
    assert (
        f"{could} {verb} {feature} to {level}. "
        f"The update failed for all features since the following feature had an error: {why}"
    ) in out, out
    return out


def test_feature_updates_answer_with_kafkas_errors(broker):
    b = broker.bootstrap
    # far beyond any broker's metadata.version
    refused(kafka_tools.features_cmd(b, "upgrade", "--feature", "metadata.version=200"), "upgrade", "metadata.version", 200)
    refused(kafka_tools.features_cmd(b, "upgrade", "--feature", "metadata.version=200", "--dry-run"), "upgrade", "metadata.version", 200)
    # a downgrade to Kafka 3.3-IV3 (level 7): Kafka 4.4 refuses it as lossy
    # (both INVALID_UPDATE_VERSION), Moldau as unsupported
    lossy = "Unsupported metadata.version downgrade from 33 to 7. Refusing" if brokers.target() == "kafka" else None
    refused(kafka_tools.features_cmd(b, "downgrade", "--feature", "metadata.version=7"), "downgrade", "metadata.version", 7, lossy)
    refused(kafka_tools.features_cmd(b, "upgrade", "--feature", "no.such.feature=1"), "upgrade", "no.such.feature", 1)

    current = kafka_tools.feature_levels(b)["metadata.version"][2]
    p = kafka_tools.features_cmd(b, "upgrade", "--feature", f"metadata.version={current}")
    assert p.returncode == 0, p
    assert f"metadata.version was upgraded to {current}." in p.stdout, p

    p = kafka_tools.features_cmd(b, "downgrade", "--feature", "transaction.version=1", "--dry-run")
    if brokers.target() == "kafka":
        assert p.returncode == 0, p
        assert "transaction.version can be downgraded to 1." in p.stdout, p
    else:
        out = refused(p, "downgrade", "transaction.version", 1)
        assert "broker config" in out, out
    assert kafka_tools.feature_levels(b)["metadata.version"][2] == current


def quorum_status(bootstrap: str) -> dict[str, str]:
    """`kafka-metadata-quorum describe --status`: field → value."""
    p = kafka_tools.metadata_quorum(bootstrap, "describe", "--status")
    assert p.returncode == 0, p
    # values are padded to one column
    out = {k: v.strip() for k, v in (line.split(": ", 1) for line in p.stdout.splitlines() if ": " in line)}
    for field in ("ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                  "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"):
        assert field in out, p.stdout
    return out


def quorum_replication(bootstrap: str) -> list[dict[str, str]]:
    """`kafka-metadata-quorum describe --replication`: its table's rows,
    column → value."""
    p = kafka_tools.metadata_quorum(bootstrap, "describe", "--replication")
    assert p.returncode == 0, p
    lines = [[c.strip() for c in line.rstrip().split("\t")] for line in p.stdout.splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    assert header[:3] == ["NodeId", "DirectoryId", "LogEndOffset"] and header[-1] == "Status", p.stdout
    return [dict(zip(header, row)) for row in rows]


def test_metadata_quorum_describes_the_controller(broker):
    status = quorum_status(broker.bootstrap)
    leader = int(status["LeaderId"])
    assert leader >= 0 and int(status["LeaderEpoch"]) >= 1 and int(status["HighWatermark"]) >= 0, status
    assert f'"id": {leader}' in status["CurrentVoters"], status
    rows = quorum_replication(broker.bootstrap)
    leaders = [r for r in rows if r["Status"] == "Leader"]
    assert [r["NodeId"] for r in leaders] == [str(leader)], rows
    assert leaders[0]["Lag"] == "0", rows
    if brokers.target() == "moldau":
        # standalone: the broker is its own controller, alone
        assert leader == broker.node_id, status
        assert status["MaxFollowerLag"] == "0" and status["CurrentObservers"] == "[]", status
        assert len(rows) == 1, rows


@pytest.fixture(scope="module")
def cluster():
    if brokers.target() != "moldau":
        pytest.skip("Moldau's cluster mode")
    c = Cluster(STATE / f"quorum-tools-{backend()}", size=3, cluster_args=cluster_args("quorum"))
    c.start()
    yield c
    c.close(keep=True)


def test_metadata_quorum_of_a_cluster(cluster):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    deadline = time.time() + 30
    while True:
        md = admin.list_topics(timeout=10)
        if len(md.brokers) == 3 and md.controller_id >= 0 or time.time() > deadline:
            break
        time.sleep(0.2)
    controller = md.controller_id
    assert len(md.brokers) == 3 and controller in (0, 1, 2), md.brokers
    others = {str(n) for n in (0, 1, 2)} - {str(controller)}
    for node in cluster.values():
        # until the controller has heard every broker in its term
        while True:
            rows = quorum_replication(node.bootstrap)
            observers = [r for r in rows if r["Status"] == "Observer"]
            heard = all(r["LastFetchTimestamp"] not in ("-1", "") for r in observers)
            if heard and len(observers) == 2 or time.time() > deadline:
                break
            time.sleep(0.5)
        assert [r["NodeId"] for r in rows if r["Status"] == "Leader"] == [str(controller)], rows
        assert {r["NodeId"] for r in observers} == others, rows
        assert heard, rows
        status = quorum_status(node.bootstrap)
        assert int(status["LeaderId"]) == controller, status
        assert status["CurrentVoters"].startswith(f'[{{"id": {controller}'), status
