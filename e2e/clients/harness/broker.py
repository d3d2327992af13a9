"""Broker processes under test: Moldau or the Apache Kafka reference broker.

Owns starting, stopping (SIGTERM), killing (SIGKILL), pausing (SIGSTOP/SIGCONT)
and restarting one broker process on a loopback address (127.0.0.1 unless
given another of 127.0.0.0/8) with a free port and its own data directory.
Knows nothing about clients; several brokers forming one cluster are
harness/cluster.py's.

Selected with MOLDAU_TEST_TARGET:
  moldau (default)  $MOLDAU_BROKER_BIN, else <repo>/target/release/moldau-broker;
                    ready when GET /readyz on its HTTP port answers 200.
  kafka             e2e/clients/kafka-dist/kafka-up.sh (Apache Kafka, KRaft,
                    single node); ready when the launcher says so and the
                    Kafka port answers an ApiVersions request.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from . import kwire

HERE = Path(__file__).resolve().parent
CLIENTS_DIR = HERE.parent
REPO = CLIENTS_DIR.parent.parent
KAFKA_DIST = CLIENTS_DIR / "kafka-dist"

START_TIMEOUT = float(os.environ.get("MOLDAU_TEST_START_TIMEOUT", "120"))
STOP_TIMEOUT = float(os.environ.get("MOLDAU_TEST_STOP_TIMEOUT", "60"))


def _die_with_parent() -> None:
    """preexec_fn: the broker gets SIGKILL if pytest dies (no orphaned brokers)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort
        pass


def target() -> str:
    t = os.environ.get("MOLDAU_TEST_TARGET", "moldau").strip().lower()
    if t not in ("moldau", "kafka"):
        raise ValueError(f"MOLDAU_TEST_TARGET must be moldau or kafka, not {t!r}")
    return t


_HANDED_OUT: set[tuple[str, int]] = set()
_CURSOR = [(os.getpid() * 7919) ^ time.time_ns()]


def _candidate_ports() -> range | None:
    """The ports just below the kernel's ephemeral range, or None.

    A port from bind(('', 0)) lies inside the ephemeral range, where the
    kernel also picks the local end of every outgoing connection: between the
    probe's close and the broker's bind another process's connection can take
    it. Below the range only an explicit bind takes a port. (The Rust tests do
    the same in `moldau_e2e::ports`.)
    """
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    start = max(10_000, low - 12_000)
    return range(start, low) if low - start >= 1_000 and low <= 65_536 else None


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, never handed out before in this process.

    The probe socket is closed before the caller binds, so remembering every
    port handed out keeps two listeners of one broker apart; taking ports below
    the ephemeral range keeps other processes' connections off them.
    """
    candidates = _candidate_ports()
    if candidates is not None:
        for _ in range(len(candidates)):
            _CURSOR[0] += 1
            port = candidates[_CURSOR[0] % len(candidates)]
            if (host, port) not in _HANDED_OUT and _bindable(host, port):
                _HANDED_OUT.add((host, port))
                return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if (host, port) not in _HANDED_OUT:
            _HANDED_OUT.add((host, port))
            return port


def start_with_properties(b: "Broker", props: dict[str, str], name: str = "test") -> None:
    """Starts `b` with extra broker properties: a properties file given to
    Moldau as MOLDAU_CONFIG_FILE and to Kafka as KAFKA_EXTRA_PROPS, set only
    while it starts (other brokers of the session are not affected). Later
    restarts of `b` (`restart()` calls `start()`) keep them."""
    path = b.workdir / f"{name}.properties"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    key = "MOLDAU_CONFIG_FILE" if b.kind == "moldau" else "KAFKA_EXTRA_PROPS"
    orig = b.start

    def start() -> None:
        old = os.environ.get(key)
        os.environ[key] = str(path)
        try:
            orig()
        finally:
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old

    b.start = start
    start()


class BrokerError(RuntimeError):
    pass


class Broker:
    """One broker process; restartable on the same port and data directory."""

    kind = "?"

    def __init__(self, workdir: Path | None = None, host: str = "127.0.0.1"):
        if not host.startswith("127."):
            raise ValueError(f"test brokers listen on 127.0.0.0/8 only, not {host}")
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"moldau-e2e-{self.kind}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.host = host
        self.port = free_port(host)
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def status(self, field: str) -> int:
        """A `kB` field of /proc/<pid>/status (VmRSS, VmHWM, …), in bytes."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field)

    def open_fds(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    @property
    def log_path(self) -> Path:
        return self.workdir / f"broker-{self.starts}.log"

    # -- lifecycle -------------------------------------------------------
    def start(self) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM (clean shutdown) and wait; SIGKILL if it does not exit in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.send_signal(signal.SIGCONT)  # a paused broker must run to stop
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise BrokerError(f"{self.kind} broker ignored SIGTERM for {timeout}s; killed")
        rc = self.proc.returncode
        self.proc = None
        return rc

    def kill(self) -> None:
        """SIGKILL: an unclean stop."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: the process stays, but answers nothing until resume()."""
        if self.alive():
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT (harmless on a running process)."""
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)

    def restart(self, hard: bool = False) -> None:
        if hard:
            self.kill()
        else:
            rc = self.stop()
            if rc not in (0, None, -signal.SIGTERM, 128 + signal.SIGTERM, 143):
                raise BrokerError(f"{self.kind} broker exited with {rc} on SIGTERM; see {self.log_path}")
        self.start()

    def close(self, keep: bool = False) -> None:
        try:
            self.stop(timeout=30)
        except BrokerError:
            pass
        if not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- readiness -------------------------------------------------------
    def _wait_kafka_port(self, deadline: float) -> None:
        last = None
        while time.monotonic() < deadline:
            if not self.alive():
                raise BrokerError(
                    f"{self.kind} broker exited with {self.proc.returncode if self.proc else '?'} "
                    f"during start; log tail:\n{self.log_tail()}"
                )
            try:
                with kwire.Conn(self.host, self.port, timeout=5) as c:
                    c.api_versions()
                return
            except (OSError, kwire.ProtocolError) as e:
                last = e
                time.sleep(0.2)
        raise BrokerError(f"{self.kind} broker not answering ApiVersions on {self.bootstrap}: {last}")


class MoldauBroker(Broker):
    kind = "moldau"

    def __init__(
        self,
        workdir: Path | None = None,
        settings: dict[str, str] | None = None,
        node_id: int = 1,
        args: list[str] | None = None,
        host: str = "127.0.0.1",
    ):
        super().__init__(workdir, host)
        self.http_port = free_port(host)
        # broker properties passed as `--set key=value`
        self.settings = dict(settings or {})
        self.node_id = node_id
        # extra command-line arguments (e.g. cluster mode)
        self.args = list(args or [])
        self.bin = Path(os.environ.get("MOLDAU_BROKER_BIN", REPO / "target" / "release" / "moldau-broker"))

    def start(self) -> None:
        if not self.bin.exists():
            raise BrokerError(
                f"no broker binary at {self.bin}: run `cargo build --release -p moldau-broker` "
                "or set MOLDAU_BROKER_BIN"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        cmd = [
            str(self.bin),
            "--listen", self.bootstrap,
            "--advertised-listener", self.bootstrap,
            "--http-listen", f"{self.host}:{self.http_port}",
            "--data-dir", str(self.data_dir),
            "--node-id", str(self.node_id),
            *self.args,
        ]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        env.setdefault("RUST_BACKTRACE", "1")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        url = f"http://{self.host}:{self.http_port}/readyz"
        last = None
        while time.monotonic() < deadline:
            if not self.alive():
                raise BrokerError(
                    f"moldau-broker exited with {self.proc.returncode if self.proc else '?'} during start; "
                    f"cmd: {' '.join(cmd)}\nlog tail:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        break
                    last = f"HTTP {r.status}"
            except Exception as e:  # noqa: BLE001 - any failure means not ready yet
                last = e
            time.sleep(0.1)
        else:
            raise BrokerError(f"moldau-broker /readyz not 200 within {START_TIMEOUT}s ({last}); log tail:\n{self.log_tail()}")
        self._wait_kafka_port(deadline)


class KafkaBroker(Broker):
    kind = "kafka"
    # extra environment for kafka-up.sh (KAFKA_EXTRA_PROPS, …); None: this process's
    env: dict[str, str] | None = None

    def start(self) -> None:
        self.starts += 1
        cmd = [str(KAFKA_DIST / "kafka-up.sh"), str(self.port), str(self.data_dir)]
        log = open(self.log_path, "wb")
        # kafka-up.sh without --daemon execs the JVM: self.proc is the broker.
        self.proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env} if self.env else None,
            preexec_fn=_die_with_parent,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if not self.alive():
                raise BrokerError(f"kafka exited with {self.proc.returncode} during start; log tail:\n{self.log_tail()}")
            if b"Kafka Server started" in self.log_path.read_bytes():
                break
            time.sleep(0.2)
        else:
            raise BrokerError(f"kafka not started within {START_TIMEOUT}s; log tail:\n{self.log_tail()}")
        self._wait_kafka_port(deadline)


def new_broker(workdir: Path | None = None) -> Broker:
    return MoldauBroker(workdir) if target() == "moldau" else KafkaBroker(workdir)
