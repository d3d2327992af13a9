"""The fault checker against the real thing: the network-cut backend really
separates two loopback addresses (and leaves nothing behind), and a bounded
run of about two minutes of faults on a 3-broker cluster keeps every
acknowledged record exactly once and in order.

The run uses the checker's defaults: replication factor 3 and
`min.insync.replicas=2`.
TODO(replication, issue #12): today a topic with RF=3 is accepted and placed
on three brokers, but its ISR is the leader alone and no follower copies
data, so a dead or paused leader leaves its partitions offline until it is
back (nothing acknowledged can be lost that way; kill -9 keeps the page
cache). Once followers replicate, this same run exercises failover; nothing
here changes, but this note goes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import faults

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BROKER_BIN = Path(os.environ.get("MOLDAU_BROKER_BIN", REPO / "target" / "release" / "moldau-broker"))


def backend_or_skip():
    if os.geteuid() != 0:
        pytest.skip("network cuts need root")
    b, why = faults.netcut_backend("auto")
    if b is None:
        pytest.fail(f"no network-cut backend although root: {why} (scripts/install-test-deps.sh installs iptables)")
    return b


def connects(src: str, dst: tuple[str, int]) -> bool:
    with socket.socket() as c:
        c.settimeout(1.0)
        c.bind((src, 0))
        try:
            c.connect(dst)
            return True
        except OSError:
            return False


def firewall_text() -> str:
    out = ""
    for cmd in (["iptables", "-w", "-S"], ["nft", "list", "tables"]):
        try:
            out += subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
        except FileNotFoundError:
            pass
    return out


def test_a_cut_separates_two_loopback_addresses_and_heals_without_a_trace():
    cut = backend_or_skip()
    with socket.socket() as srv:
        srv.bind(("127.0.0.3", 0))
        srv.listen(16)
        dst = srv.getsockname()
        try:
            cut.setup()
            assert connects("127.0.0.2", dst)
            cut.cut("127.0.0.2", "127.0.0.3", hold=5)
            assert not connects("127.0.0.2", dst), "from one broker's address to the other's: cut"
            assert connects("127.0.0.1", dst), "a client on 127.0.0.1 still gets through"
            assert connects("127.0.0.4", dst), "a third address still gets through"
            cut.heal()
            assert connects("127.0.0.2", dst), "healed"
        finally:
            cut.close()
    text = firewall_text()
    pid = os.getpid()
    assert f"MOLDAU-FAULTS-{pid}" not in text and f"moldau_faults_{pid}" not in text, text


def test_a_cut_refuses_addresses_outside_loopback():
    cut = backend_or_skip()
    with pytest.raises(ValueError):
        cut.cut("127.0.0.2", "10.1.2.3", hold=1)


@pytest.mark.timeout(600)
def test_two_minutes_of_faults_lose_duplicate_or_reorder_no_acknowledged_record(tmp_path):
    if not BROKER_BIN.exists():
        pytest.fail(f"no broker binary at {BROKER_BIN}: cargo build --release -p moldau-broker")
    out = tmp_path / "summary.json"
    cmd = [sys.executable, str(HERE / "checker.py"), "--duration", "120", "--fault-interval", "8",
           "--seed", os.environ.get("MOLDAU_FAULTS_SEED", "20240612"), "--json", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
    sys.stdout.write(r.stdout[-6000:])
    sys.stderr.write(r.stderr[-6000:])
    assert out.exists(), f"no summary; exit {r.returncode}"
    s = json.loads(out.read_text())
    assert "error" not in s, s["error"]
    assert (s["lost"], s["duplicated"], s["reordered"]) == (0, 0, 0), r.stdout.splitlines()[-1]
    assert s["consumed_completely"]
    assert s["acked"] > 1000, "enough acknowledged records to mean something"
    assert s["faults"]["kill"] >= 3 and s["faults"]["pause"] >= 3
    if os.geteuid() == 0:
        assert s["faults"]["netcut"] >= 3, s["netcut_backend"]
    assert r.returncode == 0
