"""The fault checker's faults: the schedule (a pure function of a seed) and
the injectors that apply and undo each fault on brokers this run started.

Kinds:
- `kill`:   SIGKILL a broker, keep it down for the fault's hold time, start
            it again on the same address and data directory;
- `pause`:  SIGSTOP a broker for the hold time, then SIGCONT;
- `netcut`: drop every packet between two brokers' loopback addresses, both
            ways, for the hold time. Only traffic from a socket bound to one
            broker's address to the other's is cut (a connection to
            127.0.0.3 that does not bind leaves from 127.0.0.1), so clients
            on 127.0.0.1 keep reaching every broker; inter-broker links cut
            only if the broker binds them to its own address.

Faults run one at a time on the caller's (main) thread: brokers are started
with PR_SET_PDEATHSIG, which fires when the *thread* that started them ends.

Every fault is bounded and undone by itself: `Injector.apply` undoes in a
`finally` (SIGCONT, rules removed) whatever ends the hold (its time, the
run's stop event, an exception, Ctrl-C); a killed broker is restarted unless
the run is stopping. Firewall rules live only in a chain (iptables) or table
(nft) of this process's own, `MOLDAU-FAULTS-<pid>` / `moldau_faults_<pid>`,
removed at close; a detached guard process removes a cut's rules after its
hold plus a margin even if the checker itself is SIGKILLed, and chains of
checkers no longer alive are removed at the next start. Nothing else in the
firewall is touched, except the one jump rule from OUTPUT into the chain.
Every address is checked to be in 127.0.0.0/8.
"""

from __future__ import annotations

import ipaddress
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

KINDS = ("kill", "pause", "netcut")
GUARD_MARGIN = 15.0  # seconds a guard waits past a cut's hold before undoing it itself


@dataclass(frozen=True)
class Fault:
    at: float  # seconds from the start of the fault phase
    kind: str
    targets: tuple[int, ...]  # node ids
    hold: float  # seconds the fault lasts before it is undone

    def describe(self) -> str:
        who = "-".join(str(t) for t in self.targets)
        return f"{self.kind}({who}) for {self.hold:.1f}s at +{self.at:.1f}s"


def plan(seed: int, duration: float, interval: float, nodes: list[int], kinds: tuple[str, ...] = KINDS) -> list[Fault]:
    """The schedule: a fault every `interval` seconds (with jitter), the first
    after one interval, each over before `duration`; kinds taken in shuffled
    rounds so each appears as often as the others. Same arguments, same plan."""
    if interval <= 0 or duration <= 0:
        return []
    kinds = tuple(k for k in kinds if k in KINDS and (k != "netcut" or len(nodes) >= 2))
    if not kinds or not nodes:
        return []
    rng = random.Random(seed)
    out: list[Fault] = []
    bag: list[str] = []
    i = 1
    while True:
        at = round(i * interval + rng.uniform(-0.2, 0.2) * interval, 1)
        i += 1
        if not bag:
            bag = list(kinds)
            rng.shuffle(bag)
        kind = bag.pop()
        if kind == "netcut":
            targets = tuple(sorted(rng.sample(nodes, 2)))
            hold = rng.uniform(2.0, max(2.0, min(10.0, 0.7 * interval)))
        elif kind == "pause":
            targets = (rng.choice(nodes),)
            hold = rng.uniform(1.0, max(1.0, min(8.0, 0.6 * interval)))
        else:
            targets = (rng.choice(nodes),)
            hold = rng.uniform(0.5, max(0.5, min(5.0, 0.5 * interval)))
        hold = round(hold, 1)
        if at + hold >= duration:
            break
        out.append(Fault(at, kind, targets, hold))
    return out


def check_loopback(addr: str) -> str:
    if ipaddress.ip_address(addr) not in ipaddress.ip_network("127.0.0.0/8"):
        raise ValueError(f"the fault checker only cuts 127.0.0.0/8 addresses, not {addr}")
    return addr


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=30)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class NetCut:
    """Drops traffic between two loopback addresses, in a chain/table of this
    process's own. One cut at a time. Subclasses give the commands."""

    name = "?"

    def __init__(self) -> None:
        self.guard: subprocess.Popen | None = None
        self.active: tuple[str, str] | None = None

    # commands (argv lists) -------------------------------------------------
    def setup_cmds(self) -> list[list[str]]: raise NotImplementedError
    def cut_cmds(self, a: str, b: str) -> list[list[str]]: raise NotImplementedError
    def heal_cmds(self) -> list[list[str]]: raise NotImplementedError
    def teardown_cmds(self) -> list[list[str]]: raise NotImplementedError
    def remove_stale(self) -> None: pass

    # ------------------------------------------------------------------------
    def setup(self) -> None:
        self.remove_stale()
        self.close()
        for c in self.setup_cmds():
            _run(c)

    def cut(self, a: str, b: str, hold: float) -> None:
        check_loopback(a), check_loopback(b)
        self.heal()
        self.active = (a, b)
        # the guard first: even if we die between the two steps, it undoes
        script = "; ".join(" ".join(c) + " >/dev/null 2>&1" for c in self.heal_cmds())
        self.guard = subprocess.Popen(
            ["sh", "-c", f"sleep {hold + GUARD_MARGIN:.1f}; {script}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for c in self.cut_cmds(a, b):
            _run(c)

    def heal(self) -> None:
        for c in self.heal_cmds():
            _run(c, check=False)
        self.active = None
        if self.guard is not None:
            if self.guard.poll() is None:
                os.killpg(self.guard.pid, signal.SIGKILL)
            self.guard.wait(5)
            self.guard = None

    def close(self) -> None:
        self.heal()
        for c in self.teardown_cmds():
            _run(c, check=False)


class IptablesCut(NetCut):
    name = "iptables"
    PREFIX = "MOLDAU-FAULTS-"

    def __init__(self, pid: int | None = None) -> None:
        super().__init__()
        self.chain = f"{self.PREFIX}{pid or os.getpid()}"

    def setup_cmds(self):
        return [["iptables", "-w", "-N", self.chain], ["iptables", "-w", "-I", "OUTPUT", "-j", self.chain]]

    def cut_cmds(self, a, b):
        return [
            ["iptables", "-w", "-A", self.chain, "-s", a, "-d", b, "-j", "DROP"],
            ["iptables", "-w", "-A", self.chain, "-s", b, "-d", a, "-j", "DROP"],
        ]

    def heal_cmds(self):
        return [["iptables", "-w", "-F", self.chain]]

    def teardown_cmds(self):
        return [
            ["iptables", "-w", "-F", self.chain],
            ["iptables", "-w", "-D", "OUTPUT", "-j", self.chain],
            ["iptables", "-w", "-X", self.chain],
        ]

    def remove_stale(self) -> None:
        """Chains of fault checkers that died without cleaning up."""
        out = _run(["iptables", "-w", "-S"], check=False).stdout
        for m in re.finditer(rf"^-N {self.PREFIX}(\d+)$", out, re.M):
            pid = int(m.group(1))
            if pid != os.getpid() and not _pid_alive(pid):
                for c in IptablesCut(pid).teardown_cmds():
                    _run(c, check=False)

    @staticmethod
    def usable() -> str | None:
        if shutil.which("iptables") is None:
            return "iptables not installed"
        r = _run(["iptables", "-w", "-L", "OUTPUT", "-n"], check=False)
        return None if r.returncode == 0 else f"iptables unusable: {r.stderr.strip()[:200]}"


class NftCut(NetCut):
    name = "nft"
    PREFIX = "moldau_faults_"

    def __init__(self, pid: int | None = None) -> None:
        super().__init__()
        self.table = f"{self.PREFIX}{pid or os.getpid()}"

    def setup_cmds(self):
        return [
            ["nft", "add", "table", "ip", self.table],
            ["nft", "add chain ip " + self.table + " output { type filter hook output priority 0 ; policy accept ; }"],
        ]

    def cut_cmds(self, a, b):
        return [
            ["nft", "add", "rule", "ip", self.table, "output", "ip", "saddr", a, "ip", "daddr", b, "drop"],
            ["nft", "add", "rule", "ip", self.table, "output", "ip", "saddr", b, "ip", "daddr", a, "drop"],
        ]

    def heal_cmds(self):
        return [["nft", "flush", "chain", "ip", self.table, "output"]]

    def teardown_cmds(self):
        return [["nft", "delete", "table", "ip", self.table]]

    def remove_stale(self) -> None:
        out = _run(["nft", "list", "tables"], check=False).stdout
        for m in re.finditer(rf"^table ip {self.PREFIX}(\d+)$", out, re.M):
            pid = int(m.group(1))
            if pid != os.getpid() and not _pid_alive(pid):
                for c in NftCut(pid).teardown_cmds():
                    _run(c, check=False)

    @staticmethod
    def usable() -> str | None:
        if shutil.which("nft") is None:
            return "nft not installed"
        r = _run(["nft", "list", "tables"], check=False)
        return None if r.returncode == 0 else f"nft unusable: {r.stderr.strip()[:200]}"


def netcut_backend(choice: str) -> tuple[NetCut | None, str]:
    """(backend, why) for --netcut auto|iptables|nft|off; None when unavailable."""
    if choice == "off":
        return None, "disabled (--netcut off)"
    reasons = []
    for cls in (IptablesCut, NftCut):
        if choice not in ("auto", cls.name):
            continue
        why = cls.usable()
        if why is None:
            return cls(), cls.name
        reasons.append(why)
    return None, "; ".join(reasons) or f"unknown backend {choice}"


@dataclass
class Applied:
    fault: Fault
    started: float  # seconds from the start of the fault phase
    ended: float
    error: str | None = None


@dataclass
class Injector:
    """Applies faults to `nodes` (node id -> harness Broker) on the calling thread."""

    nodes: dict
    netcut: NetCut | None
    stop: threading.Event
    log: Callable[[str], None] = print
    applied: list[Applied] = field(default_factory=list)
    paused: set = field(default_factory=set)

    def counts(self) -> dict[str, int]:
        c = {k: 0 for k in KINDS}
        for a in self.applied:
            if a.error is None:
                c[a.fault.kind] += 1
        return c

    def apply(self, fault: Fault, t0: float) -> None:
        started = time.monotonic() - t0
        self.log(f"fault {fault.describe()} (started +{started:.1f}s)")
        rec = Applied(fault, started, started)
        try:
            if fault.kind == "kill":
                b = self.nodes[fault.targets[0]]
                b.kill()
                self.stop.wait(fault.hold)
                if not self.stop.is_set():
                    b.start()  # waits for /readyz; raises if the broker does not come back
            elif fault.kind == "pause":
                b = self.nodes[fault.targets[0]]
                self.paused.add(fault.targets[0])
                try:
                    b.pause()
                    self.stop.wait(fault.hold)
                finally:
                    b.resume()
                    self.paused.discard(fault.targets[0])
            elif fault.kind == "netcut":
                if self.netcut is None:
                    raise RuntimeError("no network-cut backend")
                a, b = (self.nodes[t].host for t in fault.targets)
                try:
                    self.netcut.cut(a, b, fault.hold)
                    self.stop.wait(fault.hold)
                finally:
                    self.netcut.heal()
            else:
                raise ValueError(f"unknown fault kind {fault.kind}")
        except Exception as e:  # noqa: BLE001 - recorded; the caller decides
            rec.error = f"{type(e).__name__}: {e}"
            raise
        finally:
            rec.ended = time.monotonic() - t0
            self.applied.append(rec)

    def undo_all(self) -> None:
        """Whatever is still in force (after an interruption): resume, heal."""
        for n in list(self.paused):
            self.nodes[n].resume()
        self.paused.clear()
        if self.netcut is not None:
            self.netcut.heal()

    def as_list(self) -> list[dict]:
        return [{**asdict(a.fault), "started": round(a.started, 1), "ended": round(a.ended, 1), "error": a.error} for a in self.applied]
