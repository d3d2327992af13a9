"""Apache Kafka's own command-line admin tools, run as the distribution runs
them: `bin/kafka-log-dirs.sh`, `bin/kafka-leader-election.sh`,
`bin/kafka-reassign-partitions.sh`, `bin/kafka-configs.sh`,
`bin/kafka-topics.sh`, `bin/kafka-features.sh`,
`bin/kafka-metadata-quorum.sh`,
`bin/kafka-transactions.sh` and `bin/kafka-acls.sh` are `kafka-run-class.sh` of the main classes
below, here started with `java` on the reference distribution's class
path (kafka-dist/jars, resolved by kafka-dist/fetch-jars.sh, which
kafka-tools is part of) and logging only
warnings, to stderr (kafka-dist/tools-log4j2.properties), so stdout is the
tool's own output.

Also runs AlterReassignments.java (beside this file) on the same class path,
Kafka's Java Admin client starting reassignments the tool refuses to start,
ClientQuotas.java, the Admin client's client quotas with any entity type
(`kafka-configs` knows only users, clients and ips), Features.java, the
Admin client's feature levels as numbers, and Telemetry.java, a producer
pushing its own metrics (KIP-714). `kafka-client-metrics.sh` is
`ClientMetricsCommand`, `kafka-consumer-groups.sh` `ConsumerGroupCommand`.

Knows nothing about brokers beyond a bootstrap address.
"""

from __future__ import annotations

import functools
import json
import re
import os
import subprocess

from pathlib import Path

from .broker import KAFKA_DIST

LOG_DIRS = "org.apache.kafka.tools.LogDirsCommand"
LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
REASSIGN_PARTITIONS = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
# Kafka 4.4 moved kafka-configs from the Scala core to the tools module
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"
FEATURES = "org.apache.kafka.tools.FeatureCommand"
METADATA_QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"
ACLS = "org.apache.kafka.tools.AclCommand"
ALTER_REASSIGNMENTS = str(Path(__file__).with_name("AlterReassignments.java"))
CLIENT_QUOTAS = str(Path(__file__).with_name("ClientQuotas.java"))
FEATURE_LEVELS = str(Path(__file__).with_name("Features.java"))
CLIENT_METRICS = "org.apache.kafka.tools.ClientMetricsCommand"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
TELEMETRY_PRODUCER = str(Path(__file__).with_name("Telemetry.java"))


@functools.cache
def _jars() -> str:
    """The class path (fetching the jars once if pom.xml changed)."""
    subprocess.run([str(KAFKA_DIST / "fetch-jars.sh")], check=True, timeout=600)
    return str(KAFKA_DIST / "jars" / "*")


def run(main_class: str, args: list[str], timeout: float = 120.0, jvm: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Runs one tool (a main class, or a single-file `.java` source program)
    to completion, with `jvm` flags (`-Dname=value`) if any; its exit code
    is the caller's to judge."""
    cmd = [
        os.environ.get("JAVA", "java"),
        "-Xmx256m",
        *jvm,
        f"-Dlog4j2.configurationFile={KAFKA_DIST / 'tools-log4j2.properties'}",
        "-cp", _jars(),
        main_class,
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def log_dirs(bootstrap: str, topics: list[str] | None = None, brokers: list[int] | None = None) -> dict:
    """`kafka-log-dirs --describe`: its JSON answer (brokers → log dirs →
    partitions with size, offsetLag, isFuture)."""
    args = ["--bootstrap-server", bootstrap, "--describe"]
    if topics:
        args += ["--topic-list", ",".join(topics)]
    if brokers:
        args += ["--broker-list", ",".join(str(b) for b in brokers)]
    p = run(LOG_DIRS, args)
    assert p.returncode == 0, f"kafka-log-dirs exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"one JSON line expected:\n{p.stdout}"
    return json.loads(lines[0])


def leader_election(
    bootstrap: str, election_type: str, topic: str | None = None, partition: int | None = None
) -> subprocess.CompletedProcess:
    """`kafka-leader-election --election-type preferred|unclean`, for one
    partition or (topic None) `--all-topic-partitions`."""
    args = ["--bootstrap-server", bootstrap, "--election-type", election_type]
    if topic is None:
        args.append("--all-topic-partitions")
    else:
        args += ["--topic", topic, "--partition", str(partition)]
    return run(LEADER_ELECTION, args)


def elected(p: subprocess.CompletedProcess, election_type: str) -> set[str]:
    """The partitions a kafka-leader-election run reports as elected."""
    prefix = f"Successfully completed leader election ({election_type.upper()}) for partitions "
    out: set[str] = set()
    for line in p.stdout.splitlines():
        if line.startswith(prefix):
            out.update(x.strip() for x in line[len(prefix):].split(","))
    return out


def reassign_partitions(bootstrap: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """`kafka-reassign-partitions --bootstrap-server B ARGS…` (e.g.
    `--execute --reassignment-json-file F`)."""
    return run(REASSIGN_PARTITIONS, ["--bootstrap-server", bootstrap, *args], timeout=timeout)


def json_lines(p: subprocess.CompletedProcess) -> list:
    """Every JSON object a tool printed on a line of its own (`--generate`
    prints the current assignment, then the proposed one)."""
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def alter_reassignments(bootstrap: str, moves: dict[tuple[str, int], list[int]]) -> subprocess.CompletedProcess:
    """Kafka's Java `Admin.alterPartitionReassignments` of (topic, partition)
    → target replicas; stdout has `topic-partition: ok` or `…: error …` per
    partition, exit 0 when all were accepted."""
    specs = [f"{t}:{p}:{','.join(str(r) for r in replicas)}" for (t, p), replicas in moves.items()]
    return run(ALTER_REASSIGNMENTS, [bootstrap, *specs])


def alter_client_quotas(bootstrap: str, entity: dict[str, str | None], ops: dict[str, float | None]) -> subprocess.CompletedProcess:
    """Kafka's Java `Admin.alterClientQuotas` of one entity (entity type →
    name, None for the default) with key → value (None: remove); stdout is
    `ok` or `error <ExceptionClass>: <message>`, exit 0 when accepted."""
    parts = ",".join(f"{t}={'<default>' if n is None else n}" for t, n in entity.items())
    changes = [f"{k}={'' if v is None else v}" for k, v in ops.items()]
    return run(CLIENT_QUOTAS, [bootstrap, "alter", parts, *changes])


def describe_client_quotas(bootstrap: str, *components: str, strict: bool = False) -> dict[tuple, dict[str, float]]:
    """Kafka's Java `Admin.describeClientQuotas` with filter components
    `TYPE=NAME` (EXACT) or `TYPE` (SPECIFIED): entity (sorted (type, name)
    pairs) → key → value."""
    p = run(CLIENT_QUOTAS, [bootstrap, "describe", *components, *(["--strict"] if strict else [])])
    assert p.returncode == 0, f"ClientQuotas describe exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    out = {}
    for line in p.stdout.splitlines():
        entity, _, values = line.partition("\t")
        key = tuple(tuple(part.split("=", 1)) for part in entity.split(","))
        out[key] = {k: float(v) for k, v in (kv.split("=", 1) for kv in values.split(",") if kv)}
    return out


def configs(bootstrap: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """`kafka-configs --bootstrap-server B ARGS…`; its exit code is the
    caller's to judge."""
    return run(CONFIGS, ["--bootstrap-server", bootstrap, *args], timeout=timeout)


def features(bootstrap: str) -> dict[str, dict[str, str]]:
    """`kafka-features describe`: feature → its printed fields."""
    p = run(FEATURES, ["--bootstrap-server", bootstrap, "describe"])
    assert p.returncode == 0, f"kafka-features exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    out = {}
    for line in p.stdout.splitlines():
        # Kafka 4.1 separates the fields with tabs, 4.4 pads them with
        # spaces into columns (a value may hold one space: "UNKNOWN 33")
        parts = re.split(r"\t|\s{2,}", line.strip())
        fields = dict(f.split(": ", 1) for f in parts if ": " in f)
        if "Feature" in fields:
            out[fields.pop("Feature")] = fields
    return out


def feature_levels(bootstrap: str) -> dict[str, tuple[int, int, int, int]]:
    """The Admin client's `describeFeatures`: feature → (supported min,
    supported max, finalized level (0: not finalized), epoch)."""
    p = run(FEATURE_LEVELS, [bootstrap])
    assert p.returncode == 0, f"Features.java exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    out = {}
    for line in p.stdout.splitlines():
        name, *levels = line.split("\t")
        out[name] = tuple(int(x) for x in levels)
    return out


def features_cmd(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    """`kafka-features --bootstrap-server B ARGS…` (e.g. `upgrade --feature
    metadata.version=34 --dry-run`); its exit code is the caller's to judge."""
    return run(FEATURES, ["--bootstrap-server", bootstrap, *args])


def metadata_quorum(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    """`kafka-metadata-quorum --bootstrap-server B ARGS…` (`describe
    --status`, `describe --replication`); its exit code is the caller's to
    judge."""
    return run(METADATA_QUORUM, ["--bootstrap-server", bootstrap, *args])


def topics(bootstrap: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """`kafka-topics --bootstrap-server B ARGS…` (e.g. `--create --topic T
    --config k=v`); its exit code is the caller's to judge."""
    return run(TOPICS, ["--bootstrap-server", bootstrap, *args], timeout=timeout)


def transactions(bootstrap: str, *args: str, timeout: float = 120.0) -> list[dict[str, str]]:
    """`kafka-transactions --bootstrap-server B ARGS…` (`list`, `describe
    --transactional-id T`, `describe-producers --topic T --partition P`):
    the rows of the table it prints, each a dict of column → value (columns
    are tab-separated and space-padded; an empty last value may be left
    out)."""
    p = run(TRANSACTIONS, ["--bootstrap-server", bootstrap, *args], timeout=timeout)
    assert p.returncode == 0, f"kafka-transactions {args} exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    lines = [[cell.strip() for cell in line.rstrip("\t").split("\t")] for line in p.stdout.splitlines() if line.strip()]
    assert lines, f"kafka-transactions {args} printed nothing:\n{p.stderr}"
    header, rows = lines[0], lines[1:]
    for row in rows:
        assert len(row) <= len(header), f"kafka-transactions {args}: unexpected table:\n{p.stdout}"
    return [dict(zip(header, row + [""] * (len(header) - len(row)))) for row in rows]


def acls(bootstrap: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """`kafka-acls --bootstrap-server B ARGS…` (`--add`, `--list`,
    `--remove --force`); its exit code is the caller's to judge."""
    return run(ACLS, ["--bootstrap-server", bootstrap, *args], timeout=timeout)


def listed_acls(stdout: str) -> dict[str, set[str]]:
    """The ACLs `kafka-acls --list` printed: resource pattern (as Kafka
    prints it, `ResourcePattern(resourceType=TOPIC, name=…,
    patternType=LITERAL)`) → its entries (`(principal=User:alice, host=*,
    operation=READ, permissionType=ALLOW)`)."""
    out: dict[str, set[str]] = {}
    current = None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("Current ACLs for resource `"):
            current = line.split("`", 2)[1]
            out[current] = set()
        elif line.startswith("(principal=") and current is not None:
            out[current].add(line)
    return out


CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"


def run_with_input(
    main_class: str, args: list[str], stdin: str, timeout: float = 120.0, jvm: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """`run` with `stdin` as the tool's standard input (e.g.
    `kafka-console-producer`, which reads one record a line)."""
    cmd = [
        os.environ.get("JAVA", "java"),
        "-Xmx256m",
        *jvm,
        f"-Dlog4j2.configurationFile={KAFKA_DIST / 'tools-log4j2.properties'}",
        "-cp", _jars(),
        main_class,
        *args,
    ]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)


def client_metrics(bootstrap: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """`kafka-client-metrics.sh --bootstrap-server BOOTSTRAP ARGS…`."""
    return run(CLIENT_METRICS, ["--bootstrap-server", bootstrap, *args], timeout=timeout)


def telemetry_producer(bootstrap: str, topic: str, client_id: str, seconds: int) -> subprocess.Popen:
    """Starts Telemetry.java: a producer pushing its metrics for `seconds`,
    then closing (its terminating push); the caller waits for it."""
    cmd = [
        os.environ.get("JAVA", "java"),
        "-Xmx256m",
        f"-Dlog4j2.configurationFile={KAFKA_DIST / 'tools-log4j2.properties'}",
        "-cp", _jars(),
        TELEMETRY_PRODUCER,
        bootstrap, topic, client_id, str(seconds),
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def consumer_groups(bootstrap: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """`kafka-consumer-groups --bootstrap-server BOOTSTRAP ARGS...`."""
    return run(CONSUMER_GROUPS, ["--bootstrap-server", bootstrap, *args], timeout)
