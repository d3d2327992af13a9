"""Turns bench-results/<date>/raw.json into results.json, results.md and
results.png (medians over repetitions, min–max spread, Moldau/Kafka ratios,
fractions of the machine's limits, and the project's targets first)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

BROKERS = ["moldau", "kafka"]

# (label, path into a run row, unit, higher is better)
METRICS = [
    ("produce MB/s", ("produce", "mb_per_sec"), "MB/s", True),
    ("produce records/s", ("produce", "records_per_sec"), "rec/s", True),
    ("produce p50", ("produce", "lat_p50_ms"), "ms", False),
    ("produce p99", ("produce", "lat_p99_ms"), "ms", False),
    ("produce p99.9", ("produce", "lat_p999_ms"), "ms", False),
    ("produce ack p50 @ fixed rate", ("e2e", "ack_p50_ms"), "ms", False),
    ("produce ack p99 @ fixed rate", ("e2e", "ack_p99_ms"), "ms", False),
    ("consume MB/s", ("consume", "mb_per_sec"), "MB/s", True),
    ("consume records/s", ("consume", "records_per_sec"), "rec/s", True),
    ("e2e p50", ("e2e", "p50_ms"), "ms", False),
    ("e2e p99", ("e2e", "p99_ms"), "ms", False),
    ("broker CPU s/GiB", ("cpu_s_per_gib",), "s/GiB", False),
    ("load generator CPU s/GiB, produce", ("produce_client_cpu_s_per_gib",), "s/GiB", False),
    ("load generator CPU s/GiB, consume", ("consume_client_cpu_s_per_gib",), "s/GiB", False),
    ("load generator busiest thread busy, produce", ("produce", "busiest_thread", "busy"), "share", False),
    ("load generator busiest thread busy, consume", ("consume", "busiest_thread", "busy"), "share", False),
    ("wire produce MB/s", ("wire_produce", "mb_per_sec"), "MB/s", True),
    ("wire produce p99", ("wire_produce", "lat_p99_ms"), "ms", False),
    ("wire consume MB/s", ("wire_consume", "mb_per_sec"), "MB/s", True),
    ("wire produce ack p50 @ fixed rate", ("wire_fixed", "lat_p50_ms"), "ms", False),
    ("wire produce ack p99 @ fixed rate", ("wire_fixed", "lat_p99_ms"), "ms", False),
    ("broker threads' sleeps per request @ fixed rate, wire",
     ("wire_fixed", "broker_voluntary_switches_per_request"), "per request", False),
    ("broker threads preempted per request @ fixed rate, wire",
     ("wire_fixed", "broker_involuntary_switches_per_request"), "per request", False),
    ("broker CPU s/GiB, wire", ("wire_cpu_s_per_gib",), "s/GiB", False),
    ("wire load generator CPU s/GiB, produce", ("wire_produce_client_cpu_s_per_gib",), "s/GiB", False),
    ("wire load generator CPU s/GiB, consume", ("wire_consume_client_cpu_s_per_gib",), "s/GiB", False),
]

# The performance issue's per-configuration targets: (column, metric,
# target ratio Moldau ÷ Kafka, higher is better), for each load generator.
MATRIX_TARGETS = {
    "librdkafka": [("produce", "produce MB/s", 1.5, True),
                   ("consume", "consume MB/s", 1.2, True),
                   ("produce p99, full load", "produce p99", 0.5, False),
                   ("produce p99, fixed rate", "produce ack p99 @ fixed rate", 0.5, False)],
    "wire": [("produce", "wire produce MB/s", 1.5, True),
             ("consume", "wire consume MB/s", 1.2, True),
             ("produce p99, full load", "wire produce p99", 0.5, False),
             ("produce p99, fixed rate", "wire produce ack p99 @ fixed rate", 0.5, False)],
}

# How the table (bench/all.py) names each target column's row.
TARGET_ROWS = {"produce": "produce throughput", "consume": "consume throughput",
               "produce p99, full load": "produce p99 at full load",
               "produce p99, fixed rate": "produce p99 at a fixed rate"}

MB_PER_GIB = (1 << 30) / 1e6


def client_ceiling(cpus: int, client_s_per_gib: dict | None) -> float | None:
    """The rate in MB/s the load generator could reach with every core of
    the machine to itself: cores ÷ its CPU-seconds per byte (median). A
    broker shares those cores with it, so no broker reaches this; a
    target above `ceiling ÷ Kafka's rate` cannot be met on this machine
    with this load generator, whatever the broker does."""
    if not client_s_per_gib or not client_s_per_gib["median"]:
        return None
    return cpus * MB_PER_GIB / client_s_per_gib["median"]


def ceiling_section(raw: dict, agg: dict) -> list[str]:
    cpus = raw["machine"]["cpus"]
    rows = []
    measured = False
    for key, c in agg["configs"].items():
        cells = []
        for phase in ("produce", "consume"):
            cost = c["moldau"].get(f"load generator CPU s/GiB, {phase}")
            ceiling = client_ceiling(cpus, cost)
            ours = c["moldau"][f"{phase} MB/s"]
            kafka = c["kafka"][f"{phase} MB/s"]
            if ceiling is None or not ours or not kafka:
                cells += ["n/a"] * 3
                continue
            measured = True
            cells += [f"{fmt(cost['median'], 's/GiB')} s/GiB → {fmt(ceiling, 'MB/s')}",
                      f"{ours['median'] / ceiling:.0%}",
                      f"{ceiling / kafka['median']:.2f}×"]
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    if not measured:  # runs from before the client's CPU was recorded
        return []
    return [
        "## The load generator's ceiling",
        "",
        f"The load generator's CPU per GiB moved (user + system, measured against Moldau) gives the "
        f"rate it could reach with all {cpus} cores to itself; the broker under test shares those "
        "cores, so this bounds any broker. \"Most ÷ Kafka\" is that ceiling over Kafka's median: "
        "the highest ratio any broker could show in this configuration on this machine.",
        "",
        "| config | produce: client CPU → ceiling MB/s | Moldau ÷ ceiling | most ÷ Kafka | "
        "consume: client CPU → ceiling MB/s | Moldau ÷ ceiling | most ÷ Kafka |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]


def busiest_thread_names(raw: dict, phase: str) -> str:
    """The names of the busiest client threads in `phase` over the run
    (librdkafka's broker threads are `rdk:broker<id>`)."""
    names = sorted({n for r in raw["runs"] if "error" not in r
                    for n in [dig(r, (phase, "busiest_thread", "name"))] if n})
    return ", ".join(f"`{n}`" for n in names) or "n/a"


def busiest_thread_section(raw: dict, agg: dict) -> list[str]:
    """How busy the librdkafka load generator's busiest thread was over the
    measured interval, against each broker. The ceiling above assumes the
    client could use every core; librdkafka fetches, and batches, on one
    thread per broker connection, so a thread busy most of the interval
    bounds the rate lower than that."""
    rows, measured = [], False
    for key, c in agg["configs"].items():
        cells = []
        for phase in ("produce", "consume"):
            metric = f"load generator busiest thread busy, {phase}"
            mo, ka = c["moldau"].get(metric), c["kafka"].get(metric)
            rate = c["moldau"].get(f"{phase} MB/s")
            kafka_rate = c["kafka"].get(f"{phase} MB/s")
            if not mo or not ka or not mo["median"] or not rate or not kafka_rate:
                cells += ["n/a"] * 2
                continue
            measured = True
            # The rate with that thread busy all the time, over Kafka's.
            most = rate["median"] / mo["median"] / kafka_rate["median"]
            cells += [f"{mo['median']:.0%} / {ka['median']:.0%}", f"{most:.2f}×"]
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    if not measured:  # runs from before the threads were measured
        return []
    return [
        "## The load generator's busiest thread",
        "",
        "CPU time of the librdkafka load generator's busiest thread over the measured interval "
        f"(produce: {busiest_thread_names(raw, 'produce')}; consume: "
        f"{busiest_thread_names(raw, 'consume')}), against Moldau / against Kafka. librdkafka "
        "fetches and builds batches on one thread per broker connection, so the ceiling above, "
        "which lets the client use every core, is not the only bound: a thread near 100% is the "
        "client's own limit. \"At 100% ÷ Kafka\" is Moldau's rate scaled to that thread busy all "
        "the interval, over Kafka's median: the most this client could show against Kafka here "
        "if the broker only shortened its waits.",
        "",
        "| config | produce: busiest thread busy | at 100% ÷ Kafka | consume: busiest thread busy | "
        "at 100% ÷ Kafka |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]


def echo_section(agg: dict) -> list[str]:
    """The fixed-rate p99s against a trivial echo's: the p99 of the same
    paced round trips to a thread that only echoes (`moldau-bench rtt`,
    measured with the limits). It is what waking idle threads costs at the
    tail on this machine, with no work in between."""
    echo = agg["limits"].get("rtt_p99_ms")
    if not echo or not echo["median"]:
        return []
    e = echo["median"]
    rows = []
    for key, c in agg["configs"].items():
        cells = []
        for metric in ("produce ack p99 @ fixed rate", "wire produce ack p99 @ fixed rate"):
            mo, ka = c["moldau"].get(metric), c["kafka"].get(metric)
            if not mo or not ka:
                cells += ["n/a"] * 3
                continue
            cells += [f"{fmt(mo['median'], 'ms')} / {fmt(ka['median'], 'ms')}",
                      f"{mo['median'] / e:.2f}", f"{ka['median'] / e:.2f}"]
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    return [
        "## Fixed-rate latency against a trivial echo",
        "",
        f"100 B round trips at the fixed-rate steps' rate to a thread that only echoes them had a p99 "
        f"of {fmt_s(echo, 'ms')} ms (the limits' runs): what waking an idle responder and then the "
        "idle requester costs at the tail on this machine, with no work in between. A broker's "
        "p99 ÷ that near 1 means its own work adds nothing measurable to the tail; where Kafka's is "
        "under 2, the ≤ 0.5× target asks for a p99 below a do-nothing echo's.",
        "",
        "| config | librdkafka p99, Moldau / Kafka (ms) | Moldau ÷ echo | Kafka ÷ echo | "
        "wire p99, Moldau / Kafka (ms) | Moldau ÷ echo | Kafka ÷ echo |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]


def target_cells(agg: dict, generator: str) -> tuple[list[str], int, int]:
    """The issue's target table for one load generator: a row per
    configuration, each cell the ratio of medians, **bold** where it misses
    its target; and how many of the measured cells meet theirs."""
    rows, met, total = [], 0, 0
    for key, c in agg["configs"].items():
        cells = []
        for _, metric, target, higher in MATRIX_TARGETS[generator]:
            r = c["ratio"][metric]
            if r is None:
                cells.append("n/a")
                continue
            total += 1
            ok = r >= target if higher else r <= target
            met += ok
            cells.append(f"{r:.2f}×" if ok else f"**{r:.2f}×**")
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    return rows, met, total


def targets_section(agg: dict) -> list[str]:
    """Both load generators' target tables (the wire one only when the run
    has it), RSS below them."""
    L = ["## The performance issue's targets, by configuration", ""]
    for generator, title in (("librdkafka", "librdkafka (`produce`, `consume`, `e2e`)"),
                             ("wire", "the wire load generator (`wire-produce`, `wire-consume`)")):
        rows, met, total = target_cells(agg, generator)
        if not total:
            continue
        heads = [col for col, _, _, _ in MATRIX_TARGETS[generator]]
        goals = [f"{'≥' if higher else '≤'} {t}×" for _, _, t, higher in MATRIX_TARGETS[generator]]
        L += [f"With {title}: {met} of {total} cells meet their target (**bold**: missed).", "",
              "| config | " + " | ".join(f"{h} ({g})" for h, g in zip(heads, goals)) + " |",
              "| --- |" + " --- |" * len(heads), *rows, ""]
    rss = agg["rss_ratio"]
    if rss is not None:
        L += [f"Peak RSS over the whole matrix: {rss:.2f}× (target ≤ 0.2×).", ""]
    return L


def dig(row: dict, path: tuple):
    v = row
    for k in path:
        if not isinstance(v, dict) or k not in v:
            return None
        v = v[k]
    return v


def summary(values: list) -> dict | None:
    vals = [v for v in values if isinstance(v, (int, float))]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def cfg_key(size, acks, codec) -> str:
    return f"{'1KiB' if size == 1024 else str(size) + 'B'} acks={acks} {codec}"


def fmt(v, unit="") -> str:
    if v is None:
        return "n/a"
    if unit in ("MB/s", "s/GiB") or (isinstance(v, float) and v < 100):
        s = f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 1000 else f"{v:.0f}"
    else:
        s = f"{v:,.0f}"
    return s


def fmt_s(s: dict | None, unit="") -> str:
    if not s:
        return "n/a"
    return f"{fmt(s['median'], unit)} ({fmt(s['min'], unit)}–{fmt(s['max'], unit)})"


def ratio(a: dict | None, b: dict | None) -> float | None:
    if not a or not b or not b["median"]:
        return None
    return a["median"] / b["median"]


def aggregate(raw: dict) -> dict:
    configs = []
    for size in (100, 1024):
        for acks in ("1", "all"):
            for codec in ("none", "lz4"):
                configs.append((size, acks, codec))
    agg = {"configs": {}, "brokers": {}}
    for size, acks, codec in configs:
        key = cfg_key(size, acks, codec)
        entry = {}
        for b in BROKERS:
            rows = [r for r in raw["runs"] if r["broker"] == b and r["size"] == size
                    and r["acks"] == acks and r["compression"] == codec and "error" not in r]
            entry[b] = {label: summary([dig(r, path) for r in rows]) for label, path, _, _ in METRICS}
            entry[b]["runs_ok"] = len(rows)
        entry["ratio"] = {label: ratio(entry["moldau"][label], entry["kafka"][label])
                          for label, _, _, _ in METRICS}
        agg["configs"][key] = entry
    for b in BROKERS:
        infos = [i for i in raw["brokers"] if i["broker"] == b]
        agg["brokers"][b] = {
            "peak_rss_mib": summary([i["peak_rss_kib"] / 1024 for i in infos if i.get("peak_rss_kib")]),
            "startup_seconds": summary([i.get("startup_seconds") for i in infos]),
            "flush_policy": infos[0]["flush_policy"] if infos else None,
        }
    agg["rss_ratio"] = ratio(agg["brokers"]["moldau"]["peak_rss_mib"], agg["brokers"]["kafka"]["peak_rss_mib"])
    lim = raw.get("limits", {})
    agg["limits"] = {
        "disk_direct_write_mb_per_sec": summary(lim.get("disk_direct_write_mb_per_sec", [])),
        "tcp_loopback_mb_per_sec": summary(lim.get("tcp_loopback_mb_per_sec", [])),
        "rtt_p99_ms": summary(lim.get("rtt_p99_ms", [])),
    }
    return agg


def targets(agg: dict) -> list[tuple[str, str, str, str]]:
    c = agg["configs"][cfg_key(1024, "1", "none")]
    r = c["ratio"]
    out = []

    def verdict(v, ok) -> str:
        return "n/a" if v is None else ("**met**" if ok(v) else "**not met**")

    p = r["produce MB/s"]
    out.append(("produce throughput ≥ 1.5× Kafka", fmt(p) + "×" if p else "n/a",
                f"{fmt_s(c['moldau']['produce MB/s'], 'MB/s')} vs {fmt_s(c['kafka']['produce MB/s'], 'MB/s')} MB/s",
                verdict(p, lambda v: v >= 1.5)))
    p = r["produce ack p99 @ fixed rate"]
    out.append(("produce p99 latency ≤ 0.5× Kafka — at a fixed rate", fmt(p) + "×" if p else "n/a",
                f"{fmt_s(c['moldau']['produce ack p99 @ fixed rate'])} vs "
                f"{fmt_s(c['kafka']['produce ack p99 @ fixed rate'])} ms",
                verdict(p, lambda v: v <= 0.5)))
    p = r["produce p99"]
    out.append(("produce p99 latency ≤ 0.5× Kafka — at full load", fmt(p) + "×" if p else "n/a",
                f"{fmt_s(c['moldau']['produce p99'])} vs {fmt_s(c['kafka']['produce p99'])} ms",
                verdict(p, lambda v: v <= 0.5)))
    p = r["consume MB/s"]
    out.append(("consume throughput ≥ Kafka", fmt(p) + "×" if p else "n/a",
                f"{fmt_s(c['moldau']['consume MB/s'], 'MB/s')} vs {fmt_s(c['kafka']['consume MB/s'], 'MB/s')} MB/s",
                verdict(p, lambda v: v >= 1.0)))
    p = agg["rss_ratio"]
    out.append(("broker peak RSS ≤ 0.2× Kafka", fmt(p) + "×" if p else "n/a",
                f"{fmt_s(agg['brokers']['moldau']['peak_rss_mib'], 'MB/s')} vs "
                f"{fmt_s(agg['brokers']['kafka']['peak_rss_mib'], 'MB/s')} MiB",
                verdict(p, lambda v: v <= 0.2)))
    return out


def steal_line(raw: dict) -> str:
    """The hypervisor's steal time over each configuration's run, when the
    raw data has it: a shared virtual machine stalls now and then whatever
    runs on it, which shows in the latency tails of both brokers."""
    steal = sorted(r["steal_pct"] for r in raw["runs"] if r.get("steal_pct") is not None)
    if not steal:
        return ""
    return (f" CPU time stolen by the hypervisor per configuration: {steal[0]:.1f}–{steal[-1]:.1f}% "
            f"(median {steal[len(steal) // 2]:.1f}%).")


def run_settings_line(machine: dict) -> str:
    """Says which kernel settings the run changed for its duration
    (common.py's `hold_freed_memory` and `tcp_congestion_for_run`); runs
    from before them have no such fields."""
    line = ""
    hold = machine.get("freed_memory_hold")
    if hold:
        line += (f" Free page reporting's delay was {hold['min_free_ms'] // 1000} s for the run "
                 f"(`min_free_ms`, {hold['min_free_ms_before']} ms before and after it), so freed "
                 "memory stayed backed by the host between configurations.")
    cc = machine.get("tcp_congestion")
    if cc:
        line += (f" TCP congestion control was {cc['now']} for the run, brokers and clients alike "
                 f"({cc['before']} before and after it: BBR without an fq qdisc paces each loopback "
                 "connection at a bandwidth estimate that lands high or low per connection).")
    return line


def memory_method(raw: dict) -> str:
    """How the run prepared memory before each configuration: runs since
    the wire load generator drop the page cache (common.py's
    `drop_page_cache`), earlier ones recycled 2 GiB through tmpfs."""
    if any("page_cache_before" in r for r in raw["runs"]):
        return ("Then the clean page cache is dropped (`drop_page_cache`: 1 into "
                "/proc/sys/vm/drop_caches; again before the wire load generator's produce): on this VM "
                "memory not written lately costs a host fault at its next write, and with earlier "
                "configurations' data kept in the cache, a broker's copy into new page cache pages grew "
                "slower the more the cache held (0.8 → 3.2 CPU-s per GiB over four 1.5 GB trials in a "
                "row); each configuration now writes into memory just freed.\n")
    return (
        "Then 2 GiB is written to a tmpfs file and deleted (not timed; `recycle_free_memory`): on this "
        "VM, memory not used lately costs a host fault at its next write (a new file is written at "
        "~0.6 GB/s, over just-freed pages at 5-11 GB/s), so without it each produce rate depended on "
        "how much memory the configuration before had freed.\n")


def wire_method(load: dict, fixed_rate: bool) -> str:
    """The method line of the wire load generator, for runs that used it
    (`fixed_rate`: the run has its paced produce)."""
    if "wire_count" not in load:
        return ""
    fixed = (
        f" Fixed rate: {load['e2e_rate']} records/s for {load['e2e_seconds']} s on a topic of its own, "
        "one record per Produce request (a batch of one, compressed where the configuration says so), "
        "paced sends from one thread and the responses read on another, up to 5 in flight; ack "
        "latency per request, write to response: what the e2e step measures, without librdkafka's "
        "queue and threads between the application and the socket."
    ) if fixed_rate else ""
    return (
        "- Wire load generator (`wire-produce`, `wire-consume`, bench/src/wire.rs; rows named \"wire\"): "
        "the same configuration on a topic of its own, without librdkafka, so that the client takes "
        "little of the two cores and the broker sets the rate. Produce: a pool of 16 distinct batches "
        "(the same values, ~1,000,000 bytes uncompressed each, lz4-compressed once where the "
        "configuration says so), Produce v9 to partition 0, 5 requests in flight, at most "
        f"{load['produce_seconds']} s or {load['wire_count']['100']:,} (100 B) / "
        f"{load['wire_count']['1024']:,} (1 KiB) records; every response checked; "
        "latency per request, write to response. Consume: Fetch v12 from offset 0, one fetch in "
        "flight, 1 MiB per partition, every batch's CRC-32C verified and offsets checked to follow on; "
        "records counted from the batch headers." + fixed + "\n")


def markdown(raw: dict, agg: dict) -> str:
    m = raw["machine"]
    L = []
    L.append(f"# Moldau vs Apache Kafka — {raw['started'][:10]} ({raw['mode']} mode)")
    L.append("")
    L.append(f"Same machine, same run, one broker at a time: {m['cpus']} cores ({m['cpu_model']}), "
             f"{m['mem_gib']} GiB RAM, kernel {m['kernel']}, Moldau at {m.get('git', '?')}, load average at start "
             f"{', '.join(f'{x:.1f}' for x in m['loadavg_start'])}"
             + (f", at end {', '.join(f'{x:.1f}' for x in m['loadavg_end'])}" if m.get('loadavg_end') else "")
             + f". {raw['reps']} repetitions per broker, interleaved (Moldau/Kafka order alternates). "
             "Figures are medians with the min–max spread in parentheses."
             + steal_line(raw) + run_settings_line(m))
    L.append("")
    L.append("## Targets (1 KiB records, acks=1, uncompressed)")
    L.append("")
    L.append("| target | Moldau / Kafka | Moldau vs Kafka | verdict |")
    L.append("| --- | --- | --- | --- |")
    for t in targets(agg):
        L.append(f"| {t[0]} | {t[1]} | {t[2]} | {t[3]} |")
    L.append("")
    L.append("Durability during the run (both brokers at their defaults): "
             f"Moldau — {agg['brokers']['moldau']['flush_policy'] or 'n/a'}; "
             f"Kafka — {agg['brokers']['kafka']['flush_policy'] or 'n/a'}.")
    L.append("")
    lim = agg["limits"]
    L.append("## Machine limits (measured in this run)")
    L.append("")
    L.append(f"- sequential direct-I/O write to the data directory's disk: "
             f"{fmt_s(lim['disk_direct_write_mb_per_sec'], 'MB/s')} MB/s ({raw['limits'].get('disk_method', '')})")
    L.append(f"- single-connection loopback TCP: {fmt_s(lim['tcp_loopback_mb_per_sec'], 'MB/s')} MB/s "
             f"({raw['limits'].get('tcp_method', '')})")
    if lim["rtt_p99_ms"]:
        L.append(f"- round trip p99 at a fixed rate: {fmt_s(lim['rtt_p99_ms'], 'ms')} ms "
                 f"({raw['limits'].get('rtt_method', '')})")
    L.append("")
    L.append("Moldau as a fraction of the limits (medians): produce MB/s ÷ disk direct write; "
             "produce and consume MB/s ÷ loopback TCP.")
    L.append("")
    L.append("| config | produce ÷ disk | produce ÷ TCP | consume ÷ TCP |")
    L.append("| --- | --- | --- | --- |")
    dl = lim["disk_direct_write_mb_per_sec"]
    tl = lim["tcp_loopback_mb_per_sec"]
    for key, c in agg["configs"].items():
        p = c["moldau"]["produce MB/s"]
        q = c["moldau"]["consume MB/s"]

        def frac(x, l):
            return f"{x['median'] / l['median']:.0%}" if x and l and l["median"] else "n/a"
        L.append(f"| {key} | {frac(p, dl)} | {frac(p, tl)} | {frac(q, tl)} |")
    L.append("")
    L.extend(targets_section(agg))
    L.extend(ceiling_section(raw, agg))
    L.extend(busiest_thread_section(raw, agg))
    L.extend(echo_section(agg))
    L.append("## Results by configuration")
    L.append("")
    L.append("Ratio = Moldau median ÷ Kafka median (throughput: higher is better for Moldau; "
             "latency, CPU: lower is better).")
    L.append("")
    L.append("| config | metric | Moldau | Kafka | ratio |")
    L.append("| --- | --- | --- | --- | --- |")
    for key, c in agg["configs"].items():
        for label, _, unit, _ in METRICS:
            r = c["ratio"][label]
            L.append(f"| {key} | {label} ({unit}) | {fmt_s(c['moldau'][label], unit)} | "
                     f"{fmt_s(c['kafka'][label], unit)} | {fmt(r) + '×' if r else 'n/a'} |")
    L.append("")
    b = agg["brokers"]
    L.append("## Brokers")
    L.append("")
    L.append("| | Moldau | Kafka | ratio |")
    L.append("| --- | --- | --- | --- |")
    L.append(f"| peak RSS (VmHWM, MiB) over a whole matrix | {fmt_s(b['moldau']['peak_rss_mib'], 'MB/s')} | "
             f"{fmt_s(b['kafka']['peak_rss_mib'], 'MB/s')} | {fmt(agg['rss_ratio']) + '×' if agg['rss_ratio'] else 'n/a'} |")
    L.append(f"| start-up to first accepted connection (s) | {fmt_s(b['moldau']['startup_seconds'], 's/GiB')} | "
             f"{fmt_s(b['kafka']['startup_seconds'], 's/GiB')} | |")
    L.append("")
    load = raw["load"]
    L.append("## Method")
    L.append("")
    L.append(
        "- Load generator: `moldau-bench` (Rust, librdkafka via the `rdkafka` crate, mimalloc as the "
        "allocator of the whole process), the same binary and settings for both brokers; one topic "
        "per configuration and repetition, 1 partition, replication factor 1; keyless records of text-like data (lz4 compresses it about 2×).\n"
        f"- Produce: one producer, as fast as it can for at most {load['produce_seconds']} s or "
        f"{load['produce_count']['100']:,} (100 B) / {load['produce_count']['1024']:,} (1 KiB) records; "
        "linger.ms=5, batch.size=1000000, queue.buffering.max.kbytes=65536, idempotence off. "
        "\"At full load\" latency = send() to delivery report, per record, under that saturating load "
        "(it is mostly time queued in the client, so it follows throughput); \"at a fixed rate\" = the "
        "same send()-to-delivery-report latency of the paced producer of the end-to-end test below.\n"
        "- Before each configuration the page cache's dirty pages are written back (`sync`, not "
        "timed), so that no configuration runs beside the kernel's writeback of an earlier one's data; "
        "a configuration's own writes still start writeback when they pass the kernel's threshold. "
        + memory_method(raw) +
        "- The configurations' order is rotated by three places per repetition (`config_order`), "
        "the same for both brokers, so that none always runs first or third.\n"
        "- Consume: a fresh consumer reads the records just produced from offset 0 (page cache); "
        "throughput from the first to the last record.\n"
        + wire_method(load, any("wire_fixed" in r for r in raw["runs"])) +
        f"- End-to-end: a paced producer ({load['e2e_rate']} records/s for {load['e2e_seconds']} s, "
        "linger.ms=0) and a consumer in one process; latency = consumer receipt − send time (same clock).\n"
        "- Broker CPU = utime+stime from /proc/PID/stat across produce + consume, divided by the GiB "
        "produced + consumed. Peak RSS = VmHWM from /proc/PID/status at the end of the matrix.\n"
        "- Kafka: Apache Kafka (jars from Maven Central, e2e/clients/kafka-dist), KRaft single node, "
        "heap -Xms256m -Xmx768m (the launcher's default), G1. MB = 10^6 bytes of record values.")
    if raw.get("errors"):
        L.append("")
        L.append("## Errors during the run")
        L.append("")
        for e in raw["errors"][:30]:
            L.append(f"- {e}")
    L.append("")
    return "\n".join(L)


def chart(agg: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(agg["configs"].keys())
    panels = [("produce MB/s", "produce throughput (MB/s)"),
              ("consume MB/s", "consume throughput (MB/s)"),
              ("produce p99", "produce latency p99 (ms, log)"),
              ("e2e p99", "end-to-end latency p99 (ms, log)")]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    colors = {"moldau": "#1f77b4", "kafka": "#7f7f7f"}
    width = 0.38
    for ax, (label, title) in zip(axes.flat, panels):
        for i, b in enumerate(BROKERS):
            meds, lo, hi = [], [], []
            for k in keys:
                s = agg["configs"][k][b][label]
                meds.append(s["median"] if s else 0)
                lo.append(s["median"] - s["min"] if s else 0)
                hi.append(s["max"] - s["median"] if s else 0)
            xs = [x + (i - 0.5) * width for x in range(len(keys))]
            ax.bar(xs, meds, width, yerr=[lo, hi], capsize=2, label=b.capitalize(), color=colors[b])
        ax.set_title(title)
        ax.set_xticks(range(len(keys)))
        ax.set_xticklabels([k.replace(" ", "\n") for k in keys], fontsize=7)
        if "latency" in title:
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle("Moldau vs Apache Kafka, same machine, same run (median, min–max bars)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def render(out: Path) -> None:
    raw = json.loads((out / "raw.json").read_text())
    agg = aggregate(raw)
    (out / "results.json").write_text(json.dumps(
        {"started": raw["started"], "mode": raw["mode"], "reps": raw["reps"], "machine": raw["machine"],
         "limits_raw": raw["limits"], "summary": agg, "targets": [
             {"target": t[0], "ratio": t[1], "detail": t[2], "verdict": t[3].strip("*")} for t in targets(agg)]},
        indent=1))
    (out / "results.md").write_text(markdown(raw, agg))
    try:
        chart(agg, out / "results.png")
    except Exception as e:  # noqa: BLE001 - tables are still written
        print(f"chart failed: {e}")
