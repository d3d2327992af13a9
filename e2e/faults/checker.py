#!/usr/bin/env python3
"""Moldau's fault checker: acknowledged records survive kill -9, pauses and
network cuts, each exactly once and in order (issue #12, item 8); losing any
one broker, the controller included, stalls acks=all producers no longer
than the stall bound, and no delivery report comes later than the
producers' delivery timeout (issue #40).

Owns the run: starts a cluster of 3 brokers in cluster mode `dir`, each on
its own loopback address (harness/cluster.py, the launcher the cluster tests
use; `run()` also takes a cluster already started), creates a topic with the
given replication factor and `min.insync.replicas`, drives idempotent
`acks=all` producers (workload.py) while the fault schedule (faults.py) runs
on the main thread, then heals everything, consumes every partition from the
beginning and prints the verdict (accounting.py): a JSON summary on stdout,
then one human line. The brokers run with their own failure detection
(`broker.heartbeat.interval.ms`, `broker.session.timeout.ms`: the broker's
defaults, 2 s and 9 s, unless `--set` says otherwise).

The verdict has three parts:
- records: no acknowledged record lost, duplicated or reordered, and the log
  read back in full;
- stalls: for every single-broker fault (kill, pause, kill-controller,
  pause-controller) the failover stall, the longest time any one bounded
  partition went without an acknowledgement in the fault's window
  (accounting.py: `longest_gaps`; the window runs from where every
  partition was last seen acknowledged before the fault to the same point
  before the next one, so the stall includes the recovery after the fault
  is undone), is at most `--stall-bound` seconds (default 12: the 9 s
  session timeout plus a heartbeat interval and an election: issue 40's
  "between two acknowledgements"). Every partition is bounded, except,
  for a *stopped* broker (pause, pause-controller), the partitions it led
  when the fault began: their producers' requests sit unanswered on a
  connection that stays open, and librdkafka gives up on them only after
  `socket.timeout.ms` or the message timeout, which no broker can
  shorten, Kafka's included (killed brokers reset their connections, so
  their partitions are bounded). The longest gap of any partition
  (`stall`) and over the whole workload (`workload_stall`) are reported
  beside it. Before each fault the checker waits (up to
  `--recover-timeout`) until every partition has been acknowledged
  steadily for 3 s. Two-down faults and network cuts are measured and
  reported, not bounded;
- latency: no delivery report, acknowledged or failed, came later than the
  producers' delivery timeout (`message.timeout.ms`) plus
  `--latency-margin` after its produce() call, and every record handed to
  a producer got a report (a broker that leaves a request unanswered
  shows here).

The transactional mode (`--transactional`, issue #37): each producer thread
is a transactional producer (confluent-kafka, `transactional.id`) writing to
every partition in transactions of `--txn-size` records, every
`--abort-every`-th aborted on purpose (workload.TxnProducerThread: errors
handled as confluent-kafka documents, a fatal or fenced producer re-created);
at the end a read_committed consumer reads every partition from the start to
the end and accounting.verify_txn gives the verdict: every record of a
committed transaction there exactly once, none of an aborted one, a
transaction whose commit never returned all there or all absent (never
partial), and per partition each producer's transactions in order. In this
mode that is the verdict; stalls (between commits) and delivery latencies
are measured and reported, not bounded.

Exit status: 0 when every part holds; 1 when one does not; 2 when the run
itself failed (a broker did not come back, a client thread died); 130/143
when interrupted (every fault is undone first).

    e2e/faults/run.sh --duration 600 --fault-interval 10
    e2e/faults/run.sh --duration 60 --seed 7 --faults kill,pause --json out.json
    e2e/faults/run.sh --transactional --duration 180 --fault-interval 10 --seed 7
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import random
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "clients"))  # the shared harness

import accounting  # noqa: E402
import faults  # noqa: E402
import workload  # noqa: E402
from harness import broker as brokers  # noqa: E402
from harness.cluster import Cluster  # noqa: E402

LOG = logging.getLogger("moldau.faults")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="e2e/faults/run.sh", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--duration", type=float, default=120, help="seconds of faults (the produce phase)")
    ap.add_argument("--fault-interval", type=float, default=10,
                    help="seconds of quiet (±20%%) from one fault's end to the next one's start")
    ap.add_argument("--seed", type=int, default=None, help="schedule seed (default: random, printed)")
    ap.add_argument("--faults", default=",".join(faults.KINDS), help="kinds to inject, comma-separated")
    ap.add_argument("--netcut", default="auto", choices=["auto", "iptables", "nft", "off"], help="network-cut backend")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--replication-factor", type=int, default=3)
    ap.add_argument("--min-insync-replicas", type=int, default=2)
    ap.add_argument("--producers", type=int, default=3, help="producer threads (each owns partitions p %% N)")
    ap.add_argument("--rate", type=float, default=300, help="records/s over all producers")
    ap.add_argument("--delivery-timeout", type=float, default=60, help="producer message.timeout.ms, in seconds")
    ap.add_argument("--stall-bound", type=float, default=12,
                    help="longest failover stall (seconds a partition goes without an ack) a single-broker fault may cause; 0: not checked")
    ap.add_argument("--latency-margin", type=float, default=5,
                    help="seconds past the delivery timeout a delivery report may come")
    ap.add_argument("--recover-timeout", type=float, default=30,
                    help="seconds to wait before each fault for every partition to be acknowledged steadily")
    ap.add_argument("--set", dest="broker_set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker property (repeatable); failure detection is the broker's default unless set")
    ap.add_argument("--ip-base", default="127.0.0.2", help="first broker's loopback address; the others follow")
    ap.add_argument("--workdir", type=Path, default=None, help="broker data and logs (default e2e/.state/faults/run-*)")
    ap.add_argument("--json", type=Path, default=None, help="also write the summary here")
    ap.add_argument("--keep-data", action="store_true", help="keep the brokers' data directories (kept anyway when the verdict fails)")
    ap.add_argument("--transactional", action="store_true",
                    help="transactional producers over every partition; the verdict is the transactional accounting")
    ap.add_argument("--txn-size", default="10-50", help="records per transaction, LO-HI (transactional mode)")
    ap.add_argument("--abort-every", type=int, default=5,
                    help="every N-th transaction of a producer is aborted on purpose (transactional mode; 0: none)")
    ap.add_argument("--txn-timeout", type=float, default=20,
                    help="seconds each init/commit/abort_transaction() call may take (transactional mode)")
    return ap.parse_args(argv)


def broker_hosts(base: str, n: int) -> list[str]:
    import ipaddress

    first = ipaddress.ip_address(base)
    hosts = [str(first + i) for i in range(n)]
    for h in hosts:
        faults.check_loopback(h)
    return hosts


# The launcher's fast failure detection is dropped: the bound is about the
# broker's defaults.
FAILURE_DETECTION = ("broker.heartbeat.interval.ms", "broker.session.timeout.ms")


def broker_settings(pairs: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {k: None for k in FAILURE_DETECTION}
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep or not k.strip():
            raise SystemExit(f"--set wants KEY=VALUE, not {kv!r}")
        out[k.strip()] = v.strip()
    return out


def ack_times(producers: list) -> dict[int, list[float]]:
    """partition -> every producer's acknowledgement times (in the
    transactional mode: commits of a transaction that wrote to it), ascending."""
    out: dict[int, list[float]] = {}
    for pr in producers:
        for p, ts in pr.ledger.ack_times.items():
            out.setdefault(p, []).extend(list(ts))
    if len(producers) > 1:
        for ts in out.values():
            ts.sort()
    return out


def wait_steady(producers: list, timeout: float, stop: threading.Event) -> tuple[float, bool]:
    """Until every partition has been acknowledged steadily (accounting.steady):
    (the window mark, True), or after `timeout` (now, False)."""
    deadline = time.monotonic() + timeout
    while True:
        now = time.monotonic()
        mark = accounting.steady(ack_times(producers), now)
        if mark is not None:
            return mark, True
        if now >= deadline or stop.is_set():
            return now, False
        time.sleep(0.1)


def timing(producers: list, applied: list, marks: list[float], t0: float, begin: float, end: float,
           bound: float, latency_limit: float, led_before: list[dict[int, int]] | None = None) -> dict:
    """The stall of each applied fault and the delivery latencies (see the
    module doc). `led_before[i]`: partition -> leader when fault i began."""
    acks = ack_times(producers)
    baseline, per = accounting.longest_gaps(acks, marks, begin, end)
    # the same over the whole workload (any partition's ack ends a gap): for information
    _, merged = accounting.longest_gaps({-1: sorted(t for ts in acks.values() for t in ts)}, marks, begin, end)
    stalls = []
    for i, (a, mark, g, w) in enumerate(zip(applied, marks, per, merged)):
        bounded = a.fault.kind in faults.SINGLE_BROKER_KINDS
        leaders = (led_before or [])[i] if i < len(led_before or []) else {}
        excluded = sorted(p for p in acks if a.fault.kind in faults.STOPPED_KINDS
                          and leaders.get(p) in a.targets)
        _, per_kept = accounting.longest_gaps({p: ts for p, ts in acks.items() if p not in excluded},
                                              marks, begin, end)
        fg = per_kept[i]
        stalls.append({
            "kind": a.fault.kind, "how": a.fault.how, "targets": list(a.targets), "controller": a.controller,
            "hold": a.fault.hold, "started": round(a.started, 1), "ended": round(a.ended, 1),
            "window_from": round(mark - t0, 3),
            "stall": g.as_dict(t0) if g else None,
            "workload_stall": round(w.seconds, 3) if w else None,
            "failover_stall": fg.as_dict(t0) if fg else None,
            "excluded_partitions": excluded,
            "bounded": bounded,
            "within_bound": (not bounded or bound <= 0 or fg is None or fg.seconds <= bound),
        })
    lat = [x for pr in producers for x in pr.ledger.latencies]
    late = sorted((x for pr in producers for x in pr.ledger.late), reverse=True)[:20]
    sent = sum(sum(pr.ledger.sent.values()) for pr in producers)
    abandoned = sum(pr.ledger.abandoned for pr in producers)
    reported = len(lat)
    single = [s for s in stalls if s["bounded"] and s["failover_stall"]]
    worst = max(single, key=lambda s: s["failover_stall"]["seconds"], default=None)
    return {
        "stall_bound": bound,
        "stall_baseline": baseline.as_dict(t0) if baseline else None,
        "stalls": stalls,
        "worst_single_broker_stall": worst,
        "stalls_ok": all(s["within_bound"] for s in stalls),
        "latency": {
            **accounting.latency_summary(lat, latency_limit),
            "limit": round(latency_limit, 3),
            "late_examples": [{"latency": x[0], "partition": x[1], "seq": x[2], "result": x[3]} for x in late],
            "unreported": sent - reported - abandoned,
            "abandoned_by_fatal_producers": abandoned,
        },
    }


class Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum, _frame):
    raise Interrupted(signum)


def run(args: argparse.Namespace, cluster: Cluster | None = None) -> tuple[int, dict]:
    """One checker run; starts (and closes) a cluster unless given one."""
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    kinds = tuple(k.strip() for k in args.faults.split(",") if k.strip())
    unknown = set(kinds) - set(faults.KINDS)
    if unknown:
        raise SystemExit(f"unknown fault kinds: {sorted(unknown)}")
    run_id = uuid.uuid4().hex[:8]
    workdir = args.workdir or brokers.REPO / "e2e" / ".state" / "faults" / time.strftime(f"run-%Y%m%d-%H%M%S-{run_id}")
    workdir.mkdir(parents=True, exist_ok=True)
    logging.getLogger("moldau.faults.clients").addHandler(logging.FileHandler(workdir / "clients.log"))
    logging.getLogger("moldau.faults.clients").propagate = False

    netcut, netcut_why = (None, "not scheduled")
    if "netcut" in kinds:
        netcut, netcut_why = faults.netcut_backend(args.netcut)
        if netcut is None:
            LOG.warning("network cuts disabled: %s", netcut_why)
            kinds = tuple(k for k in kinds if k != "netcut")
    own_cluster = cluster is None
    if own_cluster:
        cluster = Cluster(workdir / "cluster", hosts=broker_hosts(args.ip_base, 3), settings=broker_settings(args.broker_set))
    nodes = dict(cluster.items())
    schedule = faults.plan(seed, args.duration, args.fault_interval, sorted(nodes), kinds)
    topic = f"faults-{run_id}"
    summary: dict = {
        "run": run_id, "seed": seed, "duration": args.duration, "fault_interval": args.fault_interval,
        "topic": topic, "partitions": args.partitions, "replication_factor": args.replication_factor,
        "min_insync_replicas": args.min_insync_replicas, "netcut_backend": netcut.name if netcut else netcut_why,
        "brokers": {n: b.bootstrap for n, b in nodes.items()}, "workdir": str(workdir),
        "broker_settings": dict(next(iter(nodes.values())).settings) if nodes else {},
        "delivery_timeout": args.delivery_timeout,
        "mode": "transactional" if args.transactional else "idempotent",
    }
    LOG.info("run %s, seed %d, %d faults planned over %.0fs; workdir %s", run_id, seed, len(schedule), args.duration, workdir)
    for f in schedule:
        LOG.info("  planned: %s", f.describe())

    stop_producing, stop_faults = threading.Event(), threading.Event()
    producers: list[workload.ProducerThread] = []
    injector = faults.Injector(nodes, netcut, stop_faults, log=LOG.info,
                               controller_views=lambda: workload.controller_views(nodes))
    marks: list[float] = []  # per applied fault: where its window starts (time.monotonic())
    led_before: list[dict[int, int]] = []  # per applied fault: partition -> leader as it began
    skipped: list[dict] = []
    latency_limit = args.delivery_timeout + args.latency_margin
    t0 = begin = stopped = time.monotonic()
    old_handlers = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    rc = 0
    try:
        if netcut is not None:
            netcut.setup()
        if own_cluster:
            cluster.start()
        bootstrap = cluster.bootstrap
        workload.wait_brokers(bootstrap, len(nodes), 60)
        workload.create_topic(bootstrap, topic, args.partitions, args.replication_factor,
                              {"min.insync.replicas": str(args.min_insync_replicas)})
        summary["assignment"] = {p: v[1] for p, v in sorted(workload.leaders(bootstrap, topic).items())}
        n = max(1, min(args.producers, args.partitions))
        if args.transactional:
            lo, _, hi = args.txn_size.partition("-")
            size = (int(lo), int(hi or lo))
            summary.update({"txn_size": list(size), "abort_every": args.abort_every, "txn_timeout": args.txn_timeout})
            n = max(1, args.producers)
        for i in range(n if args.transactional else 0):
            producers.append(workload.TxnProducerThread(
                i, bootstrap, topic, run_id, list(range(args.partitions)), args.rate / n,
                int(args.delivery_timeout * 1000), stop_producing, late_margin=args.latency_margin,
                seed=seed, size=size, abort_every=args.abort_every, txn_timeout=args.txn_timeout))
        for i in range(0 if args.transactional else n):
            parts = [p for p in range(args.partitions) if p % n == i]
            producers.append(workload.ProducerThread(i, bootstrap, topic, run_id, parts, args.rate / n,
                                                     int(args.delivery_timeout * 1000), stop_producing,
                                                     late_margin=args.latency_margin))
        begin = time.monotonic()
        for p in producers:
            p.start()

        # -- the fault phase (main thread: brokers are restarted from here) --
        t0 = time.monotonic()
        for f in schedule:
            wait = f.at - (time.monotonic() - t0)
            if wait > 0:
                time.sleep(wait)
            mark, was_steady = wait_steady(producers, args.recover_timeout, stop_faults)
            if not was_steady:
                LOG.warning("not every partition acknowledged steadily %.0fs before %s", args.recover_timeout, f.describe())
            now = time.monotonic() - t0
            if now + f.hold > args.duration:
                LOG.info("skipped (no time left): %s", f.describe())
                skipped.append({**dataclasses.asdict(f), "at_actual": round(now, 1)})
                continue
            marks.append(mark)
            try:
                led_before.append({p: v[0] for p, v in workload.leaders(bootstrap, topic).items()})
            except Exception:  # noqa: BLE001 - no view: every partition is bounded
                led_before.append({})
            injector.apply(f, t0)
            if not workload.wait_led(bootstrap, topic, args.partitions, 30):
                LOG.warning("not every partition led again 30s after %s", f.describe())
            dead = [p.name for p in producers if not p.is_alive()]
            if dead:
                raise RuntimeError(f"producer threads died: {dead}: {[str(p.exc) for p in producers if p.exc]}")
        left = args.duration - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)

        # -- heal, settle, stop producing, read everything back ------------
        injector.undo_all()
        healed = workload.wait_led(bootstrap, topic, args.partitions, 60)
        if not healed:
            LOG.warning("not every partition has a leader 60s after the last fault")
        wait_steady(producers, args.recover_timeout, stop_faults)  # the last fault's recovery, measured
        time.sleep(3)  # some acknowledged records after the last fault, too
        stopped = time.monotonic()
        stop_producing.set()
        for p in producers:
            p.join(p.drain_timeout + 30)
        if args.transactional:
            alive = [p.name for p in producers if p.is_alive()]
            died = {p.name: repr(p.exc) for p in producers if p.exc}
            if alive or died:
                raise RuntimeError(f"transactional producers did not end cleanly: alive {alive}, died {died}")
            consumed, highs, complete = workload.consume_committed(bootstrap, topic, args.partitions, timeout=120)
            history = [t for p in producers for t in p.ledger.txns]
            report = accounting.verify_txn(run_id, history, consumed, origin=t0)
            if report.examples.get("lost") or report.examples.get("partial"):
                # was a missing record written (and hidden by read_committed) or not in the log at all?
                by_key = {(t.producer, t.txn): t for t in history}
                wanted: dict[int, set[bytes]] = {}
                for ex in report.examples.get("lost", []):
                    t = by_key[(ex["producer"], ex["txn"])]
                    for part, seq in ex["missing"]:
                        wanted.setdefault(part, set()).add(
                            accounting.txn_payload(run_id, t.producer, t.txn, t.commit, part, seq))
                try:
                    found = workload.locate(bootstrap, topic, wanted)
                    summary["missing_read_uncommitted"] = {
                        str(p): {v.decode(): offs for v, offs in vs.items()} for p, vs in found.items()}
                except Exception as e:  # noqa: BLE001 - a diagnostic only
                    summary["missing_read_uncommitted"] = f"{type(e).__name__}: {e}"
            times = timing(producers, injector.applied, marks, t0, begin, stopped, args.stall_bound, latency_limit,
                           led_before)
            errors: dict[str, int] = {}
            for p in producers:
                for k, v in p.ledger.errors.items():
                    errors[k] = errors.get(k, 0) + v
            commits = sorted(x for p in producers for x in p.ledger.commit_latencies)
            summary.update({
                "faults": injector.counts(),
                "faults_skipped": skipped,
                **report.as_dict(),
                "errors": errors,
                "producers_recreated": sum(p.ledger.fatal for p in producers),
                "commit_retries": sum(p.ledger.commit_retries for p in producers),
                "commit_latency": accounting.latency_summary(commits, args.txn_timeout),
                "high_watermarks": highs,
                "consumed_completely": complete,
                **times,
            })
            summary["records_ok"] = report.ok and complete
            summary["ok"] = summary["records_ok"]
            rc = 0 if summary["ok"] else 1
        else:
            consumed, highs, complete = workload.consume_all(bootstrap, topic, args.partitions, timeout=120)
            sent, acked, failed, errors, fatal = {}, {}, 0, {}, 0
            for p in producers:
                sent.update(p.ledger.sent)
                acked.update(p.ledger.acked)
                failed += sum(p.ledger.failed.values())
                fatal += p.ledger.fatal
                for k, v in p.ledger.errors.items():
                    errors[k] = errors.get(k, 0) + v
            report = accounting.verify(run_id, sent, acked, consumed)
            times = timing(producers, injector.applied, marks, t0, begin, stopped, args.stall_bound, latency_limit,
                           led_before)
            summary.update({
                "faults": injector.counts(),
                "faults_skipped": skipped,
                **report.as_dict(),
                "delivery_failed": failed,
                "delivery_errors": errors,
                "producer_fatal_errors": fatal,
                "high_watermarks": highs,
                "consumed_completely": complete,
                **times,
            })
            summary["records_ok"] = report.ok and complete
            summary["latency_ok"] = times["latency"]["over_limit"] == 0 and times["latency"]["unreported"] == 0
            summary["ok"] = summary["records_ok"] and times["stalls_ok"] and summary["latency_ok"]
            rc = 0 if summary["ok"] else 1
    except Interrupted as e:
        LOG.error("interrupted by %s: undoing faults and stopping", e)
        summary["error"] = f"interrupted by {e}"
        rc = 128 + e.signum
    except Exception as e:  # noqa: BLE001 - reported in the summary
        LOG.exception("the run failed")
        summary["error"] = f"{type(e).__name__}: {e}"
        rc = 2
    finally:
        stop_faults.set()
        stop_producing.set()
        try:
            injector.undo_all()
            if netcut is not None:
                netcut.close()
            for p in producers:
                p.join(5)
            if own_cluster:
                cluster.close(keep=True)
                if rc == 1:
                    LOG.warning("the verdict failed: brokers' data kept in %s", workdir / "cluster")
                if not args.keep_data and rc != 1:  # a failed verdict keeps the evidence
                    import shutil

                    for b in nodes.values():
                        shutil.rmtree(b.data_dir, ignore_errors=True)
        finally:
            for s, h in old_handlers.items():
                signal.signal(s, h)
    summary.setdefault("faults", injector.counts())
    summary["faults_applied"] = injector.as_list()
    summary["exit_code"] = rc
    return rc, summary


def human(summary: dict) -> str:
    f = summary.get("faults", {})
    fl = ", ".join(f"{n} {k}" for k, n in f.items())
    if summary.get("mode") == "transactional" and "transactions" in summary:
        t, r = summary["transactions"], summary["records"]
        extra = "" if summary.get("consumed_completely", True) else " (log NOT read back completely)"
        return (
            f"fault checker (transactional) {'OK' if summary['ok'] else 'FAILED'}: {summary['duration']:.0f}s, "
            f"faults {fl} (seed {summary['seed']}, netcut: {summary['netcut_backend']}); "
            f"transactions {t['committed']} committed ({r['committed']} records), {t['aborted']} aborted "
            f"({summary['aborted_deliberately']} on purpose, {summary['aborted_after_error']} after an error; "
            f"{r['aborted']} records), {t['unknown']} unknown ({summary['unknown_present']} present, "
            f"{summary['unknown_absent']} absent); {summary['consumed']} records read_committed{extra}: "
            f"{summary['lost']} lost, {summary['duplicated']} duplicated, {summary['aborted_visible']} aborted visible, "
            f"{summary['partial']} partial, {summary['reordered']} reordered, {summary['foreign']} foreign; "
            f"{summary['producers_recreated']} producers re-created, {summary['commit_retries']} commit retries"
        )
    if "acked" not in summary:
        return f"fault checker: run failed ({summary.get('error')}); faults: {fl}"
    verdict = "OK" if summary["ok"] else "FAILED"
    worst = summary.get("worst_single_broker_stall")
    if worst:
        ws = worst["failover_stall"]
        stall = (f"worst single-broker stall {ws['seconds']:.1f}s ({worst['kind']} of {worst['targets']} at "
                 f"+{worst['started']:.0f}s, partition {ws['partition']}{', open' if ws['open'] else ''})")
    else:
        stall = "no single-broker stall measured"
    bound = summary.get("stall_bound", 0)
    over = [s for s in summary.get("stalls", []) if not s["within_bound"]]
    stall += f", bound {bound:.0f}s: " + (f"{len(over)} over" if over else "held") if bound > 0 else ", not bounded"
    lat = summary.get("latency", {})
    latency = (f"delivery latency max {lat.get('max')}s (limit {lat.get('limit')}s, {lat.get('over_limit')} over, "
               f"{lat.get('unreported')} unreported)")
    extra = "" if summary.get("consumed_completely", True) else " (log NOT read back completely)"
    if summary.get("unacked_duplicated"):
        extra += f"; {summary['unacked_duplicated']} extra copies of unacked records (idempotence)"
    return (
        f"fault checker {verdict}: {summary['duration']:.0f}s, faults {fl} (seed {summary['seed']}, "
        f"netcut: {summary['netcut_backend']}); RF={summary['replication_factor']} "
        f"min.insync={summary['min_insync_replicas']}, {summary['partitions']} partitions; "
        f"acked {summary['acked']} of {summary['sent']}: {summary['lost']} lost, "
        f"{summary['duplicated']} duplicated, {summary['reordered']} reordered; "
        f"{summary['unacked_present']} unacked present{extra}; {stall}; {latency}"
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    args = parse_args(argv)
    rc, summary = run(args)
    text = json.dumps(summary, indent=2, sort_keys=False, default=str)
    Path(summary["workdir"], "summary.json").write_text(text + "\n")
    if args.json:
        args.json.write_text(text + "\n")
    # stdout: the summary without the fault log (that is in summary.json)
    print(json.dumps({k: v for k, v in summary.items() if k != "faults_applied"}, indent=2, default=str))
    print(human(summary))
    return rc


if __name__ == "__main__":
    sys.exit(main())
