"""Every row of the performance issue's table from one run (`bench/run.sh --all`).

Runs, one after the other on the same machine and binaries: the matrix
(matrix.py's, both load generators), the 1,000-partition case (partitions.py),
the restart case (restart.py) and the compaction case (compaction.py), each
into a directory of its own under OUT (`matrix/`, `partitions/`, `restart/`,
`compaction/`, each with its usual results), then writes OUT/issue-table.md
and OUT/issue-table.json: the issue's table, each row with the figure that
decides it, its target and met or not.

Sizes: `--quick` applies to the matrix and the partitions case; the restart
and compaction cases always run at the sizes the issue names (10 GiB in
1,000 partitions, a 1 GiB compacted partition: their "full" modes), the
restart case once and the compaction case COMPACTION_REPS times unless
`--reps` says otherwise. A case that fails is recorded as
such in the table and the others still run. Before each case the machine
settles (`settle`: dirty pages written back, the load average below
SETTLE_LOAD or SETTLE_MAX_S passed), so that no case measures the one
before, nor the first a build that has just finished. About 40 minutes
with --quick.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from pathlib import Path

import compaction
import matrix
import partitions
import restart
from common import dig, log, median
from report import MATRIX_TARGETS, TARGET_ROWS, client_ceiling


def ratio(mo: float | None, ka: float | None) -> float | None:
    return mo / ka if mo is not None and ka else None


def broker_median(runs: list[dict], broker: str, path: str) -> float | None:
    return median([dig(r, path) for r in runs if r.get("broker") == broker and "error" not in r])


def pair(runs: list[dict], path: str) -> float | None:
    return ratio(broker_median(runs, "moldau", path), broker_median(runs, "kafka", path))


def load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def matrix_rows(res: dict | None) -> list[dict]:
    """Per load generator, each of its targets (report.MATRIX_TARGETS:
    throughput, p99 at full load and at a fixed rate) over every
    configuration, decided by the worst."""
    if not res:
        return [{"row": "matrix", "value": "not run or failed", "met": False}]
    configs = res["summary"]["configs"]
    rows = []
    for gen in ("wire", "librdkafka"):
        for column, metric, target, higher in MATRIX_TARGETS[gen]:
            vals = {k: c["ratio"].get(metric) for k, c in configs.items()}
            vals = {k: v for k, v in vals.items() if v is not None}
            if not vals:
                continue
            ok = {k: (v >= target if higher else v <= target) for k, v in vals.items()}
            worst = (min if higher else max)(vals, key=vals.get)
            value = f"{sum(ok.values())} of {len(ok)} met; worst {vals[worst]:.2f}× ({worst})"
            beyond = beyond_any_broker(res, column, target) if gen == "librdkafka" else {}
            if beyond:
                value += ("; beyond any broker here in " + ", ".join(
                    f"{k} (at most {v:.2f}×)" for k, v in beyond.items()))
            rows.append({"row": f"{TARGET_ROWS[column]}, every configuration ({gen})",
                         "target": f"{'≥' if higher else '≤'} {target}×",
                         "value": value, "met": all(ok.values()),
                         **({"beyond_any_broker": beyond} if beyond else {})})
    return rows


def beyond_any_broker(res: dict, column: str, target: float) -> dict[str, float]:
    """The configurations whose throughput target no broker could meet in
    this run: the load generator's own CPU per GiB, given every core of
    the machine (`report.client_ceiling`, which leaves the broker none),
    bounds the rate it can drive; over Kafka's median that is the most
    any broker could show. Returned: configuration → that bound, for each
    below `target`. Only the throughput columns have such a bound."""
    if column not in ("produce", "consume"):
        return {}
    cpus = res.get("machine", {}).get("cpus")
    out = {}
    for key, c in res["summary"]["configs"].items():
        ceiling = client_ceiling(cpus, c["moldau"].get(f"load generator CPU s/GiB, {column}")) if cpus else None
        kafka = (c["kafka"].get(f"{column} MB/s") or {}).get("median")
        if ceiling is not None and kafka and ceiling / kafka < target:
            out[key] = ceiling / kafka
    return out


def partitions_rows(res: dict | None) -> list[dict]:
    if not res:
        return [{"row": "1,000 partitions", "value": "not run or failed", "met": False}]
    runs = res["runs"]
    rows = []
    for label, path in (("1,000 partitions, 10 connections: produce throughput", "produce.mb_per_sec"),
                        ("1,000 partitions, 10 connections: consume throughput (librdkafka)",
                         "consume.mb_per_sec"),
                        ("1,000 partitions, 10 connections: consume throughput (wire)",
                         "wire_consume.mb_per_sec")):
        r = pair(runs, path)
        rows.append({"row": label, "target": "≥ 1.5×", "value": "n/a" if r is None else f"{r:.2f}×",
                     "met": r is not None and r >= 1.5})
    return rows


def restart_rows(res: dict | None) -> list[dict]:
    if not res:
        return [{"row": "restart", "value": "not run or failed", "met": False}]
    size = max(res["load"]["sizes_mib"])
    runs = [{"broker": r["broker"], **s} for r in res["runs"] for s in r.get("stages", [])
            if s.get("size_mib") == size and "unclean" in s and "clean" in s]
    rows = []
    for label, path in ((f"restart to ready, {size:,} MiB in 1,000 partitions, after SIGTERM",
                         "clean.client_ready_s"),
                        (f"restart to ready, {size:,} MiB in 1,000 partitions, after kill -9",
                         "unclean.client_ready_s")):
        r = pair(runs, path)
        rows.append({"row": label, "target": "≤ 0.5×", "value": "n/a" if r is None else f"{r:.3f}×",
                     "met": r is not None and r <= 0.5})
    reread = [dig(s, "clean.recovery.log_recovery_bytes_read_total") for s in runs if s["broker"] == "moldau"]
    reread = [v for v in reread if v is not None]
    rows.append({"row": "Moldau's clean restart reads no segment data (independent of the size)",
                 "target": "0 bytes", "value": f"{max(reread) if reread else 'n/a'} bytes re-read",
                 "met": bool(reread) and max(reread) == 0})
    return rows


def compaction_rows(res: dict | None) -> list[dict]:
    if not res:
        return [{"row": "compaction", "value": "not run or failed", "met": False}]
    mo = broker_median(res["runs"], "moldau", "p99_ratio")
    return [{"row": f"produce p99 while a {res['load']['fill_mib']:,} MiB compacted partition is cleaned, "
                    "÷ without cleaning (Moldau)", "target": "≤ 1.5",
             "value": "n/a" if mo is None else f"{mo:.2f}", "met": mo is not None and mo <= 1.5}]


def rss_row(results: dict) -> dict:
    ratios = {}
    if results.get("matrix"):
        ratios["matrix"] = results["matrix"]["summary"].get("rss_ratio")
    if results.get("partitions"):
        ratios["1,000 partitions"] = pair(results["partitions"]["runs"], "peak_rss_kib")
    if results.get("restart"):
        stages = [{"broker": r["broker"], **s} for r in results["restart"]["runs"] for s in r.get("stages", [])]
        ratios["restart"] = ratio(max((s.get("peak_rss_kib_before_kill") or 0 for s in stages
                                       if s["broker"] == "moldau"), default=None),
                                  max((s.get("peak_rss_kib_before_kill") or 0 for s in stages
                                       if s["broker"] == "kafka"), default=None))
    if results.get("compaction"):
        ratios["compaction"] = pair(results["compaction"]["runs"], "peak_rss_kib")
    known = {k: v for k, v in ratios.items() if v is not None}
    if not known:
        return {"row": "peak RSS in all of the above", "target": "≤ 0.2×", "value": "n/a", "met": False}
    worst = max(known, key=known.get)
    return {"row": "peak RSS in all of the above", "target": "≤ 0.2×",
            "value": f"worst {known[worst]:.2f}× ({worst}); " + ", ".join(f"{k} {v:.2f}×" for k, v in known.items()),
            "met": len(known) == 4 and all(v <= 0.2 for v in known.values())}


def render(out: Path, errors: dict[str, str]) -> None:
    results = {name: load(out / name / "results.json") for name in ("matrix", "partitions", "restart",
                                                                    "compaction")}
    rows = [*matrix_rows(results["matrix"]), *partitions_rows(results["partitions"]),
            *restart_rows(results["restart"]), *compaction_rows(results["compaction"]), rss_row(results)]
    machine = next((r["machine"] for r in results.values() if r and "machine" in r), {})
    loads = [f"{name} {r['machine']['loadavg_start'][0]:.1f}" for name, r in results.items()
             if r and r.get("machine", {}).get("loadavg_start")]
    met = sum(r["met"] for r in rows)
    md = ["# The performance issue's table, from one run", "",
          f"Moldau at {machine.get('git', '?')}, {machine.get('cpus', '?')} CPUs ({machine.get('cpu_model', '?')}); "
          f"load average at the start of each case: {', '.join(loads) or '?'}. Each case's own results, with "
          "its method, are in its directory here.", "",
          f"{met} of {len(rows)} rows met.", "",
          "| row | target (Moldau ÷ Kafka) | this run | met |", "| --- | --- | --- | --- |"]
    md += [f"| {r['row']} | {r.get('target', '')} | {r['value']} | {'yes' if r['met'] else '**no**'} |"
           for r in rows]
    if any(r.get("beyond_any_broker") for r in rows):
        md += ["", "\"Beyond any broker here\": in these configurations the load generator alone, "
               "given every core of the machine and leaving the broker none, could not drive the "
               "target's multiple of Kafka's median (its CPU per GiB moved, measured against Moldau; "
               "the matrix results' \"load generator's ceiling\" section). No broker can meet the "
               "row with this load generator on this machine."]
    if errors:
        md += ["", "Cases that failed:", *[f"- {k}: {v}" for k, v in errors.items()]]
    (out / "issue-table.md").write_text("\n".join(md) + "\n")
    (out / "issue-table.json").write_text(json.dumps({"rows": rows, "errors": errors}, indent=1))


# The compaction case's row is a ratio of two p99s of a paced producer
# (about 2,800 records each at 1 GiB), each as noisy as this machine's
# round-trip tail: one repetition gave 0.49, 0.76, 1.69 and 2.04 in four
# runs of the same broker. Three repetitions give it a median.
COMPACTION_REPS = 3

# Before each case after the first: the one-minute load average must fall
# below SETTLE_LOAD (waiting at most SETTLE_MAX_S), after the page cache's
# dirty pages are written back. The restart case writes 10 GiB and recovers
# 1,000 partitions on many threads; the compaction case after it started at
# a load of 6-8 and its paced producer's p99 measured that machine as much
# as the cleaner (1.69 in one run, 0.76 in the one before).
SETTLE_LOAD = 1.5
SETTLE_MAX_S = 240.0


def settle() -> None:
    os.sync()
    t0 = time.monotonic()
    while os.getloadavg()[0] >= SETTLE_LOAD and time.monotonic() - t0 < SETTLE_MAX_S:
        time.sleep(5)
    log(f"settled: load average {os.getloadavg()[0]:.1f} after {time.monotonic() - t0:.0f} s")


def main(args) -> int:
    out = Path(args.out)
    errors: dict[str, str] = {}
    if not args.report_only:
        cases = (("matrix", matrix.main, args.quick, args.reps),
                 ("partitions", partitions.main, args.quick, args.reps),
                 ("restart", restart.main, False, args.reps or 1),
                 ("compaction", compaction.main, False, args.reps or COMPACTION_REPS))
        for name, fn, quick, reps in cases:
            settle()
            case = argparse.Namespace(**{**vars(args), "out": str(out / name), "quick": quick, "reps": reps})
            log(f"=== {name} ({'quick' if quick else 'full'})")
            try:
                fn(case)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001 - the other cases still run
                errors[name] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
    else:
        prior = load(out / "issue-table.json")
        errors = (prior or {}).get("errors", {})
    render(out, errors)
    log(f"results: {out / 'issue-table.md'}")
    return 0 if not errors else 1


if __name__ == "__main__":
    raise SystemExit("run through bench/run.sh --all")
