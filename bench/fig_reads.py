"""Figure 10: reads against a big day. `context.get` and `warm.recent {days: 1}` latency with 10, 5,000 and
50,000 entries in today's warm file (50,000 is about 7.9 MB), against the 10-entry case in the same run.
Figure 10b: reads against a big cold/MEMORY.md (10, 5,000 and 20,000 learnings, about 1.3 MB), with search on:
`cold.get` and `context.get` with a topic, each alone and right after a `cold.learn` (the torture soak's load:
an agent that learns in a loop grows MEMORY.md by thousands of learnings an hour).

Today's file is written before the daemon starts, in memd's format (a heading with the time zone, entries of about
150 bytes with Zipf-like words, bench/search_corpus.py's vocabulary). Each round times one `context.get` (no topic,
the default budgets) and one `warm.recent {days: 1}` (its default page), one client, answers read; the day does
not change meanwhile, so the 10-entry case stays one. Then, once per size, pairs of `warm.log` and `context.get`
time a read right after memd's own append (what keeping the parse up to date costs). The first read after start
(which parses the whole day once) is reported on its own. Search is off, so its indexer does not read the same
8 MB meanwhile.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemonctl import Daemon, base_config, fresh_dir
from fig_write import Settings, warm_params
from load import percentile
from report import Row
from search_corpus import Sampler, vocabulary

from memd.tiers import warm_format
from memd.tiers.warm_format import WarmEntry

WS = "bench"
SIZES = (10, 5_000, 50_000)
LEARNING_SIZES = (10, 5_000, 20_000)
CATEGORIES = 10


def write_today(warm: Path, entries: int, seed: int = 3) -> int:
    """Today's day file (UTC) with `entries` entries in memd's current format. Returns its size in bytes."""
    warm.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    day = now.date()
    sampler = Sampler(vocabulary(), seed)
    parts = [warm_format.day_header(day, warm_format.zone_label(now, "UTC"))]
    for i in range(entries):
        seconds = i * 86_400 // max(entries, 1)
        entry = WarmEntry(
            time=f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}",
            action=sampler.words_(3, 6),
            details=(("cmd", sampler.words_(2, 3)), ("file", f"src/{sampler.word()}/{sampler.word()}.py")),
            result=sampler.words_(3, 6),
        )
        parts.append(warm_format.render_entry(entry))
    data = "".join(parts).encode()
    (warm / warm_format.day_filename(day)).write_bytes(data)
    return len(data)


def _config(root: Path) -> dict[str, Any]:
    return base_config(root, {WS: root / "ws"}, warm={"timezone": "UTC"}, search={"enabled": False})


def _reads(s: Settings, n: int) -> dict[str, Any]:
    root = fresh_dir(f"fig10-{n}")
    size = write_today(root / "ws" / "warm", n)
    rounds = s.n(200, 40)
    out: dict[str, Any] = {"context": [], "recent": [], "context_p99": [], "recent_p99": [], "bytes": size}
    with Daemon(root, _config(root)).start() as d, d.client() as c:
        t0 = time.perf_counter()
        first = c.call("context.get", workspace=WS)
        out["first"] = (time.perf_counter() - t0) * 1000
        out["included"] = first["included"]["warm"]
        out["page"] = sum(len(day["entries"]) for day in c.call("warm.recent", workspace=WS, days=1)["days"])
        for _ in range(s.reps):  # reads only: the day stays at n entries
            context: list[float] = []
            recent: list[float] = []
            deadline = time.perf_counter() + max(s.duration * 5, 5.0)  # the code before needed ~1 s a read
            for i in range(rounds):
                context.append(c.timed("context.get", workspace=WS)[0] * 1000)
                recent.append(c.timed("warm.recent", workspace=WS, days=1)[0] * 1000)
                if time.perf_counter() > deadline and i >= 4:
                    break
            out["context"].append(percentile(context, 50))
            out["recent"].append(percentile(recent, 50))
            out["context_p99"].append(percentile(context, 99))
            out["recent_p99"].append(percentile(recent, 99))
        # Then, once, a day that grows: each context.get right after a warm.log (memd's own append to parse).
        log = warm_params()
        logged: list[float] = []
        after: list[float] = []
        deadline = time.perf_counter() + max(s.duration * 5, 5.0)
        for i in range(s.n(50, 20)):
            logged.append(c.timed("warm.log", **log)[0] * 1000)
            after.append(c.timed("context.get", workspace=WS)[0] * 1000)
            if time.perf_counter() > deadline and i >= 4:
                break
        out["log"], out["after_log"] = [percentile(logged, 50)], [percentile(after, 50)]
    return out


def fig10_reads(s: Settings) -> list[Row]:
    results = {n: _reads(s, n) for n in SIZES}
    small = results[SIZES[0]]
    rows: list[Row] = []
    for n, r in results.items():
        big = n == SIZES[-1]
        note = (
            f"today's file {r['bytes'] / (1 << 20):.1f} MiB; {r['included']} entries in the warm section; "
            f"warm.recent page {r['page']} entries; first context.get after start {r['first']:.1f} ms"
        )
        rows += [
            Row("10", f"context.get, {n:,} entries today: p50", "ms", r["context"], "10 entries",
                small["context"], "<= 3x" if big else "", ("ratio<=", 3.0) if big else None, note=note),
            Row("10", f"context.get, {n:,} entries today: p99", "ms", r["context_p99"], compare=False),
            Row("10", f"warm.recent days 1, {n:,} entries today: p50", "ms", r["recent"], "10 entries",
                small["recent"], "<= 3x" if big else "", ("ratio<=", 3.0) if big else None),
            Row("10", f"warm.recent days 1, {n:,} entries today: p99", "ms", r["recent_p99"], compare=False),
            Row("10", f"context.get right after a warm.log, {n:,} entries: p50", "ms", r["after_log"], "10 entries",
                small["after_log"], note="one measurement of 50 alternating pairs (20 with --quick)"),
            Row("10", f"warm.log, {n:,} entries today: p50", "ms", r["log"], "10 entries", small["log"]),
        ]  # fmt: skip
    return rows


def write_memory(cold: Path, learnings: int, seed: int = 5) -> int:
    """cold/MEMORY.md with `learnings` learnings over CATEGORIES sections. Returns its size in bytes."""
    cold.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(vocabulary(), seed)
    sections: list[list[str]] = [[] for _ in range(CATEGORIES)]
    for i in range(learnings):
        sections[i % CATEGORIES].append(f"- [2026-11-{1 + i % 28:02d}] {sampler.words_(6, 14)}\n")
    text = "# Agent Memory\n" + "".join(f"\n## Topic {k}\n" + "".join(lines) for k, lines in enumerate(sections))
    (cold / "MEMORY.md").write_text(text)
    return len(text.encode())


def _cold_reads(s: Settings, n: int) -> dict[str, Any]:
    root = fresh_dir(f"fig10b-{n}")
    size = write_memory(root / "ws" / "cold", n)
    config = base_config(root, {WS: root / "ws"}, warm={"timezone": "UTC"})
    out: dict[str, Any] = {"cold": [], "context": [], "cold_after": [], "context_after": [], "learn": [], "bytes": size}
    with Daemon(root, config).start() as d, d.client() as c:
        c.call("memory.search", workspace=WS, query="x")  # the index built
        for _ in range(s.reps):
            cold: list[float] = []
            context: list[float] = []
            for _ in range(s.n(100, 30)):
                cold.append(c.timed("cold.get", workspace=WS, topic="c")[0] * 1000)
                context.append(c.timed("context.get", workspace=WS, topic="Topic 1")[0] * 1000)
            out["cold"].append(percentile(cold, 50))
            out["context"].append(percentile(context, 50))
            learn: list[float] = []
            cold_after: list[float] = []
            context_after: list[float] = []
            for i in range(s.n(60, 20)):
                learn.append(
                    c.timed("cold.learn", workspace=WS, category=f"Topic {i % CATEGORIES}", learning=f"new {i}")[0]
                    * 1000
                )
                cold_after.append(c.timed("cold.get", workspace=WS, topic="c")[0] * 1000)
                context_after.append(c.timed("context.get", workspace=WS, topic="Topic 1")[0] * 1000)
            out["learn"].append(percentile(learn, 50))
            out["cold_after"].append(percentile(cold_after, 50))
            out["context_after"].append(percentile(context_after, 50))
    return out


def fig10b_cold_reads(s: Settings) -> list[Row]:
    results = {n: _cold_reads(s, n) for n in LEARNING_SIZES}
    small = results[LEARNING_SIZES[0]]
    rows: list[Row] = []
    for n, r in results.items():
        big = n == LEARNING_SIZES[-1]
        target, check = ("<= 3x", ("ratio<=", 3.0)) if big else ("", None)
        note = f"cold/MEMORY.md {r['bytes'] / (1 << 20):.2f} MiB, search on"
        rows += [
            Row("10b", f"cold.get topic 'c', {n:,} learnings: p50", "ms", r["cold"], "10 learnings",
                small["cold"], target, check, note=note),
            Row("10b", f"context.get topic 'Topic 1', {n:,} learnings: p50", "ms", r["context"], "10 learnings",
                small["context"], target, check),
            Row("10b", f"cold.learn, {n:,} learnings: p50", "ms", r["learn"], "10 learnings", small["learn"],
                target, check),
            Row("10b", f"cold.get right after a cold.learn, {n:,} learnings: p50", "ms", r["cold_after"],
                "10 learnings", small["cold_after"], target, check),
            Row("10b", f"context.get right after a cold.learn, {n:,} learnings: p50", "ms", r["context_after"],
                "10 learnings", small["context_after"], target, check),
        ]  # fmt: skip
    return rows
