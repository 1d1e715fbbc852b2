"""Scenario 8, soak: a fixed-rate mixed load (writes of every tier and reads) from 8 client processes over two
workspaces, for 60 s (CI: 15 s; `--long`: an hour, times `--scale` when below 1), with the extractive
checkpointer and snapshots running as they would.

With `--long` it also checks that memd keeps up for the whole run, not just on average (the day files grow all
the while, so a read that costs the size of the day shows here): the rate answered in every minute is within 5%
of the target (the first minute excepted: clients start), the p99 of the last tenth of the run is at most
P99_DRIFT times that of the first tenth (plus 2 ms for the timer's resolution on a busy machine), and RSS is flat
after warm-up: the least-squares slope of the samples over the last half, printed, under RSS_SLOPE_MB_PER_HOUR.

Bounds: RSS (VmRSS) grows less than 20 MB and open file descriptors by fewer than 10 between the first sample
(after a few seconds of load: the tokenizer, caches and first checkpoint are warm) and the end of the load; every
request is answered without an error; SIGTERM stops the daemon cleanly; every acknowledged write is in its tier
(a hot note or decision may instead be named by a checkpoint record) and the files are byte-exact. The latency
distribution of all requests is printed (p50/p90/p99/max).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memd.tiers import cold_format, warm_format
from torture import verify
from torture.lib import Context, Daemon, Report, Writers, base_config, git_dir_of, ms, percentiles

CLIENTS = 8
RATE = 200.0  # requests per second over all clients
RSS_BOUND_MB = 20.0
FD_BOUND = 10
MIX = "w=3,h=2,c=1,d=1"  # writes; reads come on top with weight 3
RATE_TOLERANCE = 0.05  # --long: each minute's answered rate within 5% of RATE
P99_DRIFT = 1.5  # --long: p99 of the last tenth <= 1.5x the first tenth's (+ 2 ms)
RSS_SLOPE_MB_PER_HOUR = 10.0  # --long: RSS slope over the last half of the run
RECORDS_POLL_SECONDS = 0.1  # --soak-no-snapshots: how often hot/memd.json's checkpoint records are read


# What a minute of the soak's load leaves in each workspace (its hour at 763af9e: a ~36 MB day file and ~36,000
# learnings in MEMORY.md per workspace), for --soak-seed-minutes.
SEED_DAY_BYTES_PER_MINUTE = 600_000
SEED_LEARNINGS_PER_MINUTE = 600
SEED_SETTLE_SECONDS = 600.0  # at most this long for the index and the first snapshot of the seeded files


def seed(workspace: Path, clients: list[str], minutes: float, now: datetime) -> tuple[int, int]:
    """Write what `minutes` of the soak's load leave into an unopened `workspace`: today's day file (entries of
    ~330 bytes, the size the soak's own and its checkpoints' flushed ones average) and MEMORY.md (short learnings
    under the categories the workspace's `clients` learn under, writer.py's `C<client>`, so that the readers'
    topics match as many as they would). Nothing in either is a soak label, so the accounting ignores them.
    Returns (day bytes, learnings)."""
    (workspace / "warm").mkdir(parents=True, exist_ok=True)
    (workspace / "cold").mkdir(parents=True, exist_ok=True)
    parts = [warm_format.day_header(now.date(), warm_format.zone_label(now, "UTC"))]
    size, n = len(parts[0]), 0
    seconds = max(1, now.hour * 3600 + now.minute * 60 + now.second)
    total = int(minutes * SEED_DAY_BYTES_PER_MINUTE)
    expected = max(1, total // 330)
    while size < total:
        at = min(seconds - 1, n * seconds // expected)  # in time order, before now
        entry = warm_format.WarmEntry(
            f"{at // 3600:02d}:{at // 60 % 60:02d}:{at % 60:02d}",
            f"seeded activity {n}",
            (("note", f"seeded detail {n} " + "x" * 220),),
            "ok",
        )
        parts.append(warm_format.render_entry(entry))
        size += len(parts[-1])
        n += 1
    (workspace / "warm" / warm_format.day_filename(now.date())).write_text("".join(parts), "utf-8")
    count = int(minutes * SEED_LEARNINGS_PER_MINUTE)
    day = now.date().isoformat()
    sections = [
        f"\n## C{client}\n"
        + "".join(cold_format.render_learning(day, f"seeded {k} {i}") for i in range(k, count, len(clients)))
        for k, client in enumerate(clients)
    ]
    (workspace / "cold" / "MEMORY.md").write_text(cold_format.MEMORY_PREAMBLE + "".join(sections), "utf-8")
    return size, count


def _clients(workspace: int) -> list[str]:
    return [f"soak{workspace}x{j}" for j in range(CLIENTS // 2)]  # two workspaces, CLIENTS over them


def settled(status: dict[str, Any], names: list[str]) -> bool:
    """Has the daemon indexed and committed the seeded files (so the load starts on a quiet daemon)?"""
    search = status.get("search") or {}
    if search.get("enabled") and (search.get("pending") or search.get("indexing")):
        return False
    for name in names:
        snapshot = status["workspaces"][name].get("snapshot") or {}
        if snapshot.get("state") == "ok" and (not snapshot.get("commits") or snapshot.get("pending")):
            return False
    return True


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, in value per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if not var:
        return 0.0
    return 3600 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var


def _collect_records(
    workspaces: Path, names: list[str], into: dict[str, dict[str, dict[str, Any]]], stop: threading.Event
) -> None:
    """Keep every checkpoint record hot/memd.json holds while the soak runs (it keeps the newest RECORDS_KEPT;
    with snapshots off, no history has the others): a compressed decision is accounted for only by a record
    naming it. A record missed between two looks makes the check report a loss, never hide one."""
    while not stop.wait(RECORDS_POLL_SECONDS):
        for name in names:
            try:
                doc = json.loads((workspaces / name / "hot" / "memd.json").read_bytes())
            except (OSError, ValueError):
                continue  # not written yet, or caught between two writes' renames: the next look has it
            for record in doc.get("checkpoints") or [] if isinstance(doc, dict) else []:
                if isinstance(record, dict):
                    into[name].setdefault(str(record.get("id")), record)


def steadiness(report: Report, timeline: list[tuple[float, float, str]], t0: float, duration: float) -> None:
    """The --long checks: per-minute rate, p99 drift between the first and the last tenth."""
    if not timeline:
        report.fail("no request was answered")
        return
    minutes = int(duration // 60)
    counts = [0] * max(1, minutes)
    for sent, _, _ in timeline:
        minute = int((sent - t0) // 60)
        if 0 <= minute < len(counts):
            counts[minute] += 1
    rates = [c / 60 for c in counts]
    slow = [(i, r) for i, r in enumerate(rates) if i > 0 and r < RATE * (1 - RATE_TOLERANCE)]
    report.figure("rate/min", f"min {min(rates[1:] or rates):.0f}/s, max {max(rates):.0f}/s over {len(rates)} minutes")
    report.check(
        not slow,
        f"{len(slow)} minute(s) answered under {RATE * (1 - RATE_TOLERANCE):.0f}/s (target {RATE:.0f}/s): "
        + ", ".join(f"minute {i + 1}: {r:.0f}/s" for i, r in slow[:10]),
    )
    tenth = duration / 10
    first = [lat for sent, lat, _ in timeline if sent - t0 < tenth]
    last = [lat for sent, lat, _ in timeline if sent - t0 >= duration - tenth]
    p_first, p_last = percentiles(first, (99,))["p99"], percentiles(last, (99,))["p99"]
    report.figure("p99 drift", f"first tenth {ms(p_first)}, last tenth {ms(p_last)} (bound {P99_DRIFT}x + 2 ms)")
    by_method = []  # which requests drift: what a failing check above needs to be looked into
    for method in sorted({m for _, _, m in timeline}):
        early = [lat for sent, lat, m in timeline if m == method and sent - t0 < tenth]
        late = [lat for sent, lat, m in timeline if m == method and sent - t0 >= duration - tenth]
        if early and late:
            p_early, p_late = percentiles(early, (99,))["p99"], percentiles(late, (99,))["p99"]
            by_method.append(f"{method} {ms(p_early)} -> {ms(p_late)}")
    report.figure("p99/method", "; ".join(by_method))
    report.check(
        p_last <= P99_DRIFT * p_first + 0.002,
        f"p99 grew from {ms(p_first)} in the first tenth of the run to {ms(p_last)} in the last",
    )


def run(ctx: Context) -> Report:
    report = Report("soak")
    duration = ctx.seconds(3600, 15) if ctx.long else ctx.seconds(60, 15)
    warmup = min(60.0 if ctx.long else 5.0, duration / 4)
    root = ctx.dir("sk")
    names = ["s0", "s1"]
    snapshot = {"settle_seconds": 0.5, "max_wait_seconds": 5.0, "enabled": ctx.soak_snapshots}
    config = base_config(
        root, {n: root / "ws" / n for n in names}, snapshot=snapshot, search={"enabled": ctx.soak_search}
    )
    mix = ctx.soak_mix or MIX
    if mix != MIX or not ctx.soak_snapshots or not ctx.soak_search or ctx.soak_seed_minutes:
        on = {True: "on", False: "off"}
        report.figure("variant", f"mix {mix}, snapshots {on[ctx.soak_snapshots]}, search {on[ctx.soak_search]}")
    if ctx.soak_seed_minutes:
        now = datetime.now(UTC)
        made = [seed(root / "ws" / n, _clients(i), ctx.soak_seed_minutes, now) for i, n in enumerate(names)]
        config["warm"] = {"timezone": "UTC"}  # the seeded day is the day the daemon writes to
        report.figure(
            "seeded",
            f"{ctx.soak_seed_minutes:g} minutes of load: a {made[0][0] / 1e6:.1f} MB day file and "
            f"{made[0][1]:,} learnings in each workspace",
        )
    d = Daemon(ctx, root / "d", config)
    groups = []
    samples: list[tuple[float, int, int]] = []
    seen_records: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in names}
    try:
        d.start()
        if ctx.soak_seed_minutes:
            began = time.monotonic()
            while not settled(d.call("status"), names) and time.monotonic() - began < SEED_SETTLE_SECONDS:
                time.sleep(1.0)
            report.figure("settled", f"{time.monotonic() - began:.0f} s after start (index and first snapshot)")
        rss_idle, fds_idle = d.rss_kb(), d.fd_count()
        for i, name in enumerate(names):
            clients = _clients(i)
            extra = ["--reads", "3", "--rate", str(RATE / CLIENTS), "--duration", str(duration)]
            out = root / "acks" / name
            groups.append(Writers(ctx, d.socket_path, name, out, clients, [1] * len(clients), mix, extra=extra))
        t0 = time.monotonic()
        for g in groups:
            g.go()
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(1.0):
                if d.alive():
                    samples.append((time.monotonic() - t0, d.rss_kb(), d.fd_count()))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        watcher = None
        if not ctx.soak_snapshots:  # no history keeps the records hot lets go: they are read as they come
            watcher = threading.Thread(target=_collect_records, args=(root / "ws", names, seen_records, stop))
            watcher.start()
        time.sleep(warmup)
        rss_start, fds_start = d.rss_kb(), d.fd_count()
        for g in groups:
            g.wait(duration + 30)
        rss_end, fds_end = d.rss_kb(), d.fd_count()
        elapsed = time.monotonic() - t0
        stop.set()
        sampler.join(5)
        if watcher is not None:
            watcher.join(5)
        code = d.stop()
        report.check(code == 0, f"SIGTERM after the soak: exit status {code}\n{d.log_tail(10)}")
    finally:
        d.close()
    latencies: list[float] = []
    timeline: list[tuple[float, float, str]] = []
    counters: dict[str, int] = {}
    acked = lost = compressed = 0
    for name, g in zip(names, groups, strict=True):
        lat, c = g.latencies()
        latencies += lat
        timeline += g.timeline()
        for k, v in c.items():
            counters[k] = counters.get(k, 0) + v
        ledger = verify.Ledger().load(g.out)
        state = verify.inspect(root / "ws" / name)
        records = verify.records_in_history(git_dir_of(root / "ws" / name, root / "state", name))
        records += list(seen_records[name].values())
        acc = verify.account(state, ledger, compressed_ok=True, records=records, flushed_ok=not ctx.soak_snapshots)
        acked += len(ledger.acked)
        lost += len(acc.lost)
        compressed += acc.compressed
        for problem in state.problems + acc.duplicated + acc.phantom:
            report.fail(f"{name}: {problem}")
        for x in acc.lost[:10]:
            report.fail(f"{name}: LOST {x}")
        for e in ledger.errors[:5]:
            report.fail(f"{name}: error response: {e}")
        report.count("corrupt", len(state.problems) + len(acc.duplicated))
    report.count("lost", lost)
    report.count("acked", acked)
    growth_mb = (rss_end - rss_start) / 1024
    fd_growth = fds_end - fds_start
    report.check(growth_mb < RSS_BOUND_MB, f"RSS grew {growth_mb:.1f} MB during the soak (bound {RSS_BOUND_MB} MB)")
    report.check(fd_growth < FD_BOUND, f"open fds grew by {fd_growth} (bound {FD_BOUND})")
    report.check(not counters.get("unanswered") and not counters.get("order"), f"client counters: {counters}")
    q = percentiles(latencies, (50, 90, 99))
    answered = len(latencies)
    report.figure(
        "load",
        f"{answered:,} requests in {elapsed:.0f} s ({answered / max(elapsed, 0.001):.0f}/s, target {RATE:.0f}/s) "
        f"from {CLIENTS} clients over {len(names)} workspaces; {acked:,} acknowledged writes, {lost} lost, "
        f"{compressed} compressed by checkpoints; {counters.get('error', 0)} errors",
    )
    report.figure(
        "latency",
        f"p50 {ms(q['p50'])}, p90 {ms(q['p90'])}, p99 {ms(q['p99'])}, max {ms(q['max'])}",
    )
    report.figure(
        "RSS",
        f"idle {rss_idle / 1024:.1f} MB, after {warmup:.0f} s of load {rss_start / 1024:.1f} MB, "
        f"end {rss_end / 1024:.1f} MB ({growth_mb:+.1f} MB; bound < {RSS_BOUND_MB:.0f} MB)",
    )
    report.figure("fds", f"idle {fds_idle}, start {fds_start}, end {fds_end} ({fd_growth:+d}; bound < {FD_BOUND})")
    if ctx.long:
        steadiness(report, sorted(timeline), t0, duration)
        half = [(t, r / 1024) for t, r, _ in samples if t >= duration / 2]
        slope = slope_per_hour(half)
        report.figure("RSS slope", f"{slope:+.1f} MB/hour over the last half (bound {RSS_SLOPE_MB_PER_HOUR:.0f})")
        report.check(
            slope < RSS_SLOPE_MB_PER_HOUR,
            f"RSS still climbing over the last half of the soak: {slope:+.1f} MB/hour (bound {RSS_SLOPE_MB_PER_HOUR})",
        )
    if samples:
        step = max(1, len(samples) // 6)
        trend = ", ".join(f"{t:.0f}s {r / 1024:.0f}MB/{f}" for t, r, f in samples[::step])
        report.figure("trend", f"RSS/fds: {trend}")
    report.summary = f"RSS {growth_mb:+.1f} MB, fds {fd_growth:+d}, p99 {ms(q['p99'])}"
    return report
