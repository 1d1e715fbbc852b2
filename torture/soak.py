"""Scenario 8, soak: a fixed-rate mixed load (writes of every tier and reads) from 8 client processes over two
workspaces, for 60 s (CI: 15 s), with the extractive checkpointer and snapshots running as they would.

Bounds: RSS (VmRSS) grows less than 20 MB and open file descriptors by fewer than 10 between the first sample
(after a few seconds of load: the tokenizer, caches and first checkpoint are warm) and the end of the load; every
request is answered without an error; SIGTERM stops the daemon cleanly; every acknowledged write is in its tier
(a hot note or decision may instead be named by a checkpoint record) and the files are byte-exact. The latency
distribution of all requests is printed (p50/p90/p99/max).
"""

from __future__ import annotations

import threading
import time

from torture import verify
from torture.lib import Context, Daemon, Report, Writers, base_config, git_dir_of, ms, percentiles

CLIENTS = 8
RATE = 200.0  # requests per second over all clients
RSS_BOUND_MB = 20.0
FD_BOUND = 10
MIX = "w=3,h=2,c=1,d=1"  # writes; reads come on top with weight 3


def run(ctx: Context) -> Report:
    report = Report("soak")
    duration = ctx.seconds(60, 15)
    warmup = min(5.0, duration / 4)
    root = ctx.dir("sk")
    names = ["s0", "s1"]
    config = base_config(
        root, {n: root / "ws" / n for n in names}, snapshot={"settle_seconds": 0.5, "max_wait_seconds": 5.0}
    )
    d = Daemon(ctx, root / "d", config)
    groups = []
    samples: list[tuple[float, int, int]] = []
    try:
        d.start()
        rss_idle, fds_idle = d.rss_kb(), d.fd_count()
        for i, name in enumerate(names):
            clients = [f"soak{i}x{j}" for j in range(CLIENTS // len(names))]
            extra = ["--reads", "3", "--rate", str(RATE / CLIENTS), "--duration", str(duration)]
            out = root / "acks" / name
            groups.append(Writers(ctx, d.socket_path, name, out, clients, [1] * len(clients), MIX, extra=extra))
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
        time.sleep(warmup)
        rss_start, fds_start = d.rss_kb(), d.fd_count()
        for g in groups:
            g.wait(duration + 30)
        rss_end, fds_end = d.rss_kb(), d.fd_count()
        elapsed = time.monotonic() - t0
        stop.set()
        sampler.join(5)
        code = d.stop()
        report.check(code == 0, f"SIGTERM after the soak: exit status {code}\n{d.log_tail(10)}")
    finally:
        d.close()
    latencies: list[float] = []
    counters: dict[str, int] = {}
    acked = lost = compressed = 0
    for name, g in zip(names, groups, strict=True):
        lat, c = g.latencies()
        latencies += lat
        for k, v in c.items():
            counters[k] = counters.get(k, 0) + v
        ledger = verify.Ledger().load(g.out)
        state = verify.inspect(root / "ws" / name)
        records = verify.records_in_history(git_dir_of(root / "ws" / name, root / "state", name))
        acc = verify.account(state, ledger, compressed_ok=True, records=records)
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
    if samples:
        step = max(1, len(samples) // 6)
        trend = ", ".join(f"{t:.0f}s {r / 1024:.0f}MB/{f}" for t, r, f in samples[::step])
        report.figure("trend", f"RSS/fds: {trend}")
    report.summary = f"RSS {growth_mb:+.1f} MB, fds {fd_growth:+d}, p99 {ms(q['p99'])}"
    return report
