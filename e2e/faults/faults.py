"""The fault checker's faults: the schedule (a pure function of a seed) and
the injectors that apply and undo each fault on brokers this run started.

Kinds:
- `kill`:   SIGKILL a broker, keep it down for the fault's hold time, start
            it again on the same address and data directory;
- `pause`:  SIGSTOP a broker for the hold time, then SIGCONT;
- `pause-controller`, `kill-controller`: the same, on the broker that is the
            controller when the fault is applied (the node most brokers'
            Metadata names in controller_id); a controller pause lasts
            10–14 s, longer than the broker session timeout (9 s), the
            first 13–14 s, longer than the stall bound (12 s);
- `two-down`: two brokers at once, both killed or both paused, held, then
            restored (with RF=3 and min.insync.replicas=2 acks=all cannot
            succeed meanwhile: exempt from the stall bound, not from the
            record checks);
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

KINDS = ("kill", "pause", "netcut", "pause-controller", "kill-controller", "two-down")
# The controller kinds, taken first in the schedule's first round: a short run
# still loses its controller to a pause and to a kill.
CONTROLLER_KINDS = ("pause-controller", "kill-controller")
# One broker lost (paused or killed, the controller or not): the kinds the
# stall bound applies to (checker.py). A netcut loses no broker; a two-down
# fault stops acks=all by design (RF=3, min.insync.replicas=2).
SINGLE_BROKER_KINDS = ("kill", "pause", "pause-controller", "kill-controller")
# faults that stop a broker's process without closing its connections
STOPPED_KINDS = ("pause", "pause-controller")
# A controller pause outlasts the broker's session timeout (9 s by default),
# so the others must act on the controller's loss, not just wait it out;
# the first one of a schedule outlasts the stall bound (12 s) too, so that
# waiting it out cannot pass.
CONTROLLER_PAUSE = (10.0, 14.0)
FIRST_CONTROLLER_PAUSE = (13.0, 14.0)
GUARD_MARGIN = 15.0  # seconds a guard waits past a cut's hold before undoing it itself


@dataclass(frozen=True)
class Fault:
    at: float  # seconds from the start of the fault phase
    kind: str
    # node ids; for the controller kinds the fallback used only when no
    # broker names a controller when the fault is applied
    targets: tuple[int, ...]
    hold: float  # seconds the fault lasts before it is undone
    how: str = ""  # two-down: "kill" or "pause"

    def describe(self) -> str:
        who = "-".join(str(t) for t in self.targets)
        if self.kind in CONTROLLER_KINDS:
            who = f"controller, else {who}"
        elif self.how:
            who = f"{self.how} {who}"
        return f"{self.kind}({who}) for {self.hold:.1f}s at +{self.at:.1f}s"


def _hold(rng: random.Random, kind: str, interval: float, first: bool = False) -> float:
    if kind == "netcut":
        h = rng.uniform(2.0, max(2.0, min(10.0, 0.7 * interval)))
    elif kind == "pause":
        h = rng.uniform(1.0, max(1.0, min(8.0, 0.6 * interval)))
    elif kind == "pause-controller":
        h = rng.uniform(*(FIRST_CONTROLLER_PAUSE if first else CONTROLLER_PAUSE))
    elif kind == "two-down":
        h = rng.uniform(2.0, max(2.0, min(6.0, 0.5 * interval)))
    else:  # kill, kill-controller
        h = rng.uniform(0.5, max(0.5, min(5.0, 0.5 * interval)))
    return round(h, 1)


def plan(seed: int, duration: float, interval: float, nodes: list[int], kinds: tuple[str, ...] = KINDS) -> list[Fault]:
    """The schedule, one fault at a time: the first after a quiet interval,
    each next one a quiet interval after the previous one's hold ends (an
    interval is `interval` seconds ±20 %), each over before `duration`.
    Kinds are taken in shuffled rounds, so each appears as often as the
    others; the first round starts with the controller kinds (in the seed's
    order). Holds: kill and kill-controller 0.5–5 s, pause 1–8 s, netcut
    2–10 s, two-down 2–6 s (each at most a fraction of the interval),
    pause-controller always 10–14 s, the first one 13–14 s. Same arguments,
    same plan."""
    if interval <= 0 or duration <= 0:
        return []
    kinds = tuple(
        k for k in KINDS  # a fixed order: the plan depends on the set of kinds, not how they were listed
        if k in kinds and (k not in ("netcut", "two-down") or len(nodes) >= 2)
    )
    if not kinds or not nodes:
        return []
    nodes = sorted(nodes)
    rng = random.Random(seed)
    out: list[Fault] = []
    bag: list[str] = []
    first = True
    t = 0.0
    while True:
        t += interval * rng.uniform(0.8, 1.2)
        if not bag:
            bag = list(kinds)
            rng.shuffle(bag)
            if first:  # the controller kinds lead the first round
                bag.sort(key=lambda k: k in CONTROLLER_KINDS)  # stable; popped from the end
                first = False
        kind = bag.pop()
        how = ""
        if kind in ("netcut", "two-down"):
            targets = tuple(sorted(rng.sample(nodes, 2)))
            if kind == "two-down":
                how = rng.choice(("kill", "pause"))
        else:
            targets = (rng.choice(nodes),)
        hold = _hold(rng, kind, interval, first=not any(f.kind == kind for f in out))
        at = round(t, 1)
        if at + hold >= duration:
            break
        out.append(Fault(at, kind, targets, hold, how))
        t = at + hold
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
    ended: float  # when it was undone (a killed broker ready again)
    targets: tuple[int, ...] = ()  # the nodes it hit (the controller kinds: as found)
    controller: int | None = None  # the controller named when it was applied (None: unknown)
    error: str | None = None


def pick_controller(views: dict[int, int | None]) -> int | None:
    """The controller the brokers name (node -> the controller_id its
    Metadata gave, None when it did not answer): the id most of the answers
    name, if that is a node in `views`; None when no answer names one or the
    answers tie."""
    from collections import Counter

    c = Counter(v for v in views.values() if v is not None and v >= 0 and v in views)
    if not c:
        return None
    (best, n), *rest = c.most_common()
    if rest and rest[0][1] == n:
        return None
    return best


@dataclass
class Injector:
    """Applies faults to `nodes` (node id -> harness Broker) on the calling
    thread. `controller_views` asks every broker which node its Metadata
    names as controller (node -> id or None); the controller kinds hit the
    one `pick_controller` finds, retried for `controller_wait` seconds, else
    the fault's fallback target (logged, and `Applied.controller` is None)."""

    nodes: dict
    netcut: NetCut | None
    stop: threading.Event
    log: Callable[[str], None] = print
    controller_views: Callable[[], dict] | None = None
    controller_wait: float = 10.0
    applied: list[Applied] = field(default_factory=list)
    paused: set = field(default_factory=set)

    def counts(self) -> dict[str, int]:
        c = {k: 0 for k in KINDS}
        for a in self.applied:
            if a.error is None:
                c[a.fault.kind] += 1
        return c

    def find_controller(self) -> int | None:
        if self.controller_views is None:
            return None
        deadline = time.monotonic() + self.controller_wait
        while True:
            views = self.controller_views()
            found = pick_controller(views)
            if found is not None or time.monotonic() >= deadline or self.stop.is_set():
                if found is None:
                    self.log(f"no controller named (Metadata answers: {views})")
                return found
            time.sleep(0.3)

    def _down(self, targets: tuple[int, ...], how: str, hold: float) -> None:
        """Kill or pause `targets` together, hold, then bring them back (in
        order: a killed one is ready before the next is started)."""
        bs = [self.nodes[t] for t in targets]
        if how == "kill":
            for b in bs:
                b.kill()
            self.stop.wait(hold)
            if not self.stop.is_set():
                for b in bs:
                    b.start()  # waits for /readyz; raises if the broker does not come back
        elif how == "pause":
            self.paused.update(targets)
            try:
                for b in bs:
                    b.pause()
                self.stop.wait(hold)
            finally:
                for t, b in zip(targets, bs):
                    b.resume()
                    self.paused.discard(t)
        else:
            raise ValueError(f"unknown way down {how!r}")

    def apply(self, fault: Fault, t0: float) -> Applied:
        rec = Applied(fault, 0.0, 0.0, fault.targets)
        try:
            if fault.kind in CONTROLLER_KINDS:
                rec.controller = self.find_controller()
                if rec.controller is not None:
                    rec.targets = (rec.controller,)
            rec.started = time.monotonic() - t0
            self.log(f"fault {fault.describe()} on {list(rec.targets)} (started +{rec.started:.1f}s)")
            if fault.kind in ("kill", "kill-controller"):
                self._down(rec.targets, "kill", fault.hold)
            elif fault.kind in ("pause", "pause-controller"):
                self._down(rec.targets, "pause", fault.hold)
            elif fault.kind == "two-down":
                self._down(rec.targets, fault.how, fault.hold)
            elif fault.kind == "netcut":
                if self.netcut is None:
                    raise RuntimeError("no network-cut backend")
                a, b = (self.nodes[t].host for t in rec.targets)
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
            if not rec.started:
                rec.started = time.monotonic() - t0
            rec.ended = time.monotonic() - t0
            self.applied.append(rec)
        return rec

    def undo_all(self) -> None:
        """Whatever is still in force (after an interruption): resume, heal."""
        for n in list(self.paused):
            self.nodes[n].resume()
        self.paused.clear()
        if self.netcut is not None:
            self.netcut.heal()

    def as_list(self) -> list[dict]:
        return [
            {**asdict(a.fault), "targets": list(a.targets), "planned_targets": list(a.fault.targets),
             "controller": a.controller, "started": round(a.started, 1), "ended": round(a.ended, 1), "error": a.error}
            for a in self.applied
        ]
