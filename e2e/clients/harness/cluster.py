"""Several Moldau brokers forming one cluster on this host (cluster mode `dir`).

Owns the launcher the cluster tests (test_cluster.py) and the fault checker
(e2e/faults) share: N `MoldauBroker`s with node ids 0..N-1, one shared
metadata directory (the controller is elected by a lock on it), each broker's
Kafka, HTTP and controller listeners on its own host. By default every broker
is on 127.0.0.1; `hosts` puts each on its own loopback address (e.g.
127.0.0.2, .3, .4), which is what lets a firewall rule on the two addresses
cut the traffic between two brokers. Knows nothing about clients or faults.

Also owns the choice of cluster backend the client modules (test_cluster.py,
test_replication.py) run against, from MOLDAU_CLUSTER_BACKEND:

- `dir` (default): one host, a shared metadata directory; the controller is
  elected by a lock on it. Needs nothing but the broker binary.
- `kubernetes`: the brokers elect their controller through a Lease and keep
  the metadata in `MetadataShard` objects of a namespace on a real API
  server. `e2e/tests/cluster_kubernetes_clients.rs` brings up the control
  plane and passes MOLDAU_CLUSTER_ARGS (a JSON list: the cluster-mode
  arguments of `moldau_e2e::brokers`) and KUBECONFIG; the per-node
  arguments (node id, listeners, data directory) are this launcher's, as in
  `dir` mode.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import broker as brokers

# Fast failure detection, so a test sees a dead broker fenced in seconds.
DEFAULT_SETTINGS = {
    "offsets.topic.num.partitions": "6",
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
}


def backend() -> str:
    """`dir` or `kubernetes`, from MOLDAU_CLUSTER_BACKEND (default `dir`)."""
    b = os.environ.get("MOLDAU_CLUSTER_BACKEND", "dir").strip().lower()
    if b not in ("dir", "kubernetes"):
        raise ValueError(f"MOLDAU_CLUSTER_BACKEND must be dir or kubernetes, not {b!r}")
    return b


def cluster_args(own: str | None = None) -> list[str] | None:
    """The cluster-mode arguments of the backend under test (`None`: the
    launcher's own `dir` mode, where each Cluster's workdir is a cluster of
    its own). `own` names a Kubernetes cluster of the caller's own:
    `--cluster-name X` becomes `X-<own>`, so several modules run in one
    namespace never share a Lease or metadata objects."""
    if backend() == "dir":
        return None
    raw = os.environ.get("MOLDAU_CLUSTER_ARGS")
    if not raw or not os.environ.get("KUBECONFIG"):
        raise RuntimeError(
            "MOLDAU_CLUSTER_BACKEND=kubernetes needs MOLDAU_CLUSTER_ARGS and KUBECONFIG: "
            "run it through `cargo test -p moldau-e2e --test cluster_kubernetes_clients`"
        )
    args = json.loads(raw)
    assert isinstance(args, list) and all(isinstance(a, str) for a in args), raw
    assert "kubernetes" in args, f"not cluster mode kubernetes: {args}"
    if own:
        at = args.index("--cluster-name") + 1
        args[at] = f"{args[at]}-{own}"
    return args


class Cluster:
    """`len(hosts)` brokers (node ids 0..n-1) under `workdir`; start() runs them all."""

    def __init__(
        self,
        workdir: Path,
        hosts: list[str] | None = None,
        size: int = 3,
        settings: dict[str, str | None] | None = None,
        cluster_args: list[str] | None = None,
    ):
        """`settings` are broker properties over DEFAULT_SETTINGS (a None
        value removes one, e.g. to run with the broker's own failure
        detection); `cluster_args` replaces the `dir` mode arguments (e.g. the
        `--cluster kubernetes …` ones of the Kubernetes e2e run)."""
        hosts = list(hosts) if hosts else ["127.0.0.1"] * size
        self.workdir = Path(workdir)
        self.shared = self.workdir / "shared"
        self.shared.mkdir(parents=True, exist_ok=True)
        # a None value drops the key: the broker's own default applies
        merged = {k: v for k, v in {**DEFAULT_SETTINGS, **(settings or {})}.items() if v is not None}
        self.nodes: dict[int, brokers.MoldauBroker] = {}
        for n, host in enumerate(hosts):
            self.nodes[n] = brokers.MoldauBroker(
                self.workdir / f"node-{n}",
                settings=merged,
                node_id=n,
                host=host,
                args=cluster_args
                or [
                    "--cluster", "dir",
                    "--cluster-dir", str(self.shared),
                    "--controller-listen", f"{host}:{brokers.free_port(host)}",
                ],
            )

    def __getitem__(self, node: int) -> brokers.MoldauBroker:
        return self.nodes[node]

    def values(self):
        return self.nodes.values()

    def items(self):
        return self.nodes.items()

    @property
    def bootstrap(self) -> str:
        """Every broker's address: a client reaches the cluster while any one is up."""
        return ",".join(b.bootstrap for b in self.nodes.values())

    def start(self) -> None:
        for b in self.nodes.values():
            b.start()

    def close(self, keep: bool = True) -> None:
        """Stop every broker (a paused one is resumed first); logs stay unless keep=False."""
        for b in self.nodes.values():
            b.resume()
        for b in self.nodes.values():
            b.close(keep=keep)


class KafkaCluster:
    """`size` Apache Kafka brokers (node ids 0..size-1) forming one KRaft
    cluster on 127.0.0.1, the reference for cluster tests run with
    MOLDAU_TEST_TARGET=kafka: node 0 is broker and the only controller,
    the others are brokers only. Each is kafka-up.sh (one data directory per
    node under `workdir`) with KAFKA_EXTRA_PROPS overriding its single-node
    properties and KAFKA_CLUSTER_ID shared. `settings` are server
    properties (DEFAULT_SETTINGS are Kafka's too). Same interface as
    Cluster."""

    def __init__(self, workdir: Path, size: int = 3, settings: dict[str, str] | None = None):
        import uuid as _uuid

        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        # a KRaft cluster id: 16 bytes, URL-safe base64 without padding
        import base64

        cluster_id = base64.urlsafe_b64encode(_uuid.uuid4().bytes).decode().rstrip("=")
        controller = brokers.free_port()
        merged = {**DEFAULT_SETTINGS, **(settings or {})}
        self.nodes: dict[int, brokers.KafkaBroker] = {}
        for n in range(size):
            b = brokers.KafkaBroker(self.workdir / f"node-{n}")
            props = {
                "node.id": str(n),
                "controller.quorum.voters": f"0@127.0.0.1:{controller}",
                **({} if n == 0 else {"process.roles": "broker", "listeners": f"PLAINTEXT://{b.bootstrap}"}),
                **merged,
            }
            extra = b.workdir / "extra.properties"
            extra.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            b.env = {
                "KAFKA_EXTRA_PROPS": str(extra),
                "KAFKA_CLUSTER_ID": cluster_id,
                "KAFKA_CONTROLLER_PORT": str(controller),
                "KAFKA_HEAP_OPTS": "-Xms128m -Xmx512m",
            }
            self.nodes[n] = b

    def __getitem__(self, node: int) -> brokers.KafkaBroker:
        return self.nodes[node]

    def values(self):
        return self.nodes.values()

    def items(self):
        return self.nodes.items()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.nodes.values())

    def start(self) -> None:
        """Node 0 (the controller) first: the others wait for it."""
        for b in self.nodes.values():
            b.start()

    def close(self, keep: bool = True) -> None:
        for b in reversed(list(self.nodes.values())):
            b.close(keep=keep)
