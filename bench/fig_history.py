"""Figures 7-8: git snapshot cost (against history length, under sustained writes) and checkpoint cost."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemonctl import REPO, Daemon, base_config, fresh_dir
from fig_write import WS, Settings, _prefilled_day, warm_params
from load import percentile
from report import Row

# --- figure 7: git snapshot cost ------------------------------------------------------------------------------

BIG_DAY = 32 * 1024 * 1024  # the hour soak's day file by its end


def _git(ws: Path, *args: str, stdin: bytes | None = None) -> str:
    out = subprocess.run(["git", "-C", str(ws), *args], input=stdin, capture_output=True, timeout=300, check=False)
    if out.returncode:
        raise RuntimeError(f"git {args[0]} failed: {out.stderr.decode(errors='replace').strip()}")
    return out.stdout.decode().strip()


def _build_history(ws: Path, commits: int) -> None:
    """A memd-managed <ws>/.git with `commits` commits, built with git fast-import."""
    for tier in ("hot", "warm", "cold"):
        (ws / tier).mkdir(parents=True, exist_ok=True)
    today = datetime.now(UTC).date().isoformat()
    (ws / "hot" / "context.json").write_text(json.dumps({"task": "history bench"}, indent=2) + "\n")
    (ws / "cold" / "MEMORY.md").write_text(f"# Agent Memory\n\n## Setup\n- [{today}] created\n")
    _git(ws, "init", "--quiet", "--initial-branch=main")
    _git(ws, "config", "memd.managed", "true")
    (ws / ".git" / "info").mkdir(exist_ok=True)
    (ws / ".git" / "info" / "exclude").write_text("# written by memd\n*.memd-tmp-*\n")
    chunks: list[bytes] = []
    t = 1_700_000_000
    for i in range(commits):
        hot = json.dumps({"task": "history bench", "current_step": f"step {i}"}, indent=2).encode()
        msg = f"memd: writes (hot)\n\nMemd-Reason: writes\nMemd-Step: step {i}\n".encode()
        chunks.append(b"commit refs/heads/main\n")
        chunks.append(f"committer memd <memd@localhost> {t + i} +0000\n".encode())
        chunks.append(b"data %d\n%s\n" % (len(msg), msg))
        chunks.append(b"M 100644 inline hot/context.json\ndata %d\n%s\n" % (len(hot), hot))
        if i % 50 == 0:
            day = f"# Activity Log 2024-01-01\n\n### 10:00:{i % 60:02d} - entry {i}\n\n".encode()
            chunks.append(b"M 100644 inline warm/2024-01-01.md\ndata %d\n%s\n" % (len(day), day))
    chunks.append(b"done\n")
    _git(ws, "fast-import", "--quiet", "--done", stdin=b"".join(chunks))
    _git(ws, "reset", "--quiet")  # index = HEAD; the working tree's differences are memd's first snapshot


def _snapshot_times(d: Daemon, samples: int) -> list[float]:
    times = []
    with d.client() as c:
        c.call("warm.log", workspace=WS, action="warm-up")
        c.call("snapshot.run", workspace=WS, reason="warm-up")
        for i in range(samples):
            c.call("warm.log", workspace=WS, action=f"small write {i}")
            t, result = c.timed("snapshot.run", workspace=WS, reason="bench")
            if not result["created"]:
                raise RuntimeError(f"snapshot.run made no commit: {result}")
            times.append(t * 1000)
    return times


def _sustained(d: Daemon, ws: Path, seconds: float, rate: float) -> tuple[float, float, float, int, float, float]:
    """Paced writes at `rate`/s; returns (commits per minute, write p50 ms, write p99 ms, commits, writes/s, the
    slowest write in ms)."""
    before = int(_git(ws, "rev-list", "--count", "HEAD"))
    params = warm_params()
    lat = []
    with d.client() as c:
        t0 = time.perf_counter()
        n = int(seconds * rate)
        for i in range(n):
            wait = t0 + i / rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            lat.append(c.timed("warm.log", **params)[0])
        elapsed = time.perf_counter() - t0
    commits = int(_git(ws, "rev-list", "--count", "HEAD")) - before
    p50, p99, slowest = percentile(lat, 50) * 1000, percentile(lat, 99) * 1000, max(lat) * 1000
    return commits * 60 / elapsed, p50, p99, commits, n / elapsed, slowest


def fig7_snapshots(s: Settings) -> list[Row]:
    samples = s.n(20, 8)
    quiet = {"enabled": True, "settle_seconds": 600, "max_wait_seconds": 1200, "interval_seconds": 3600}
    medians: dict[int, list[float]] = {}
    for commits in (10, 10_000):
        root = fresh_dir(f"fig7-{commits}")
        _build_history(root / "ws", commits)
        with Daemon(root, base_config(root, {WS: root / "ws"}, snapshot=quiet)).start() as d:
            medians[commits] = [percentile(_snapshot_times(d, samples), 50) for _ in range(s.reps)]
    seconds = s.n(20, 6)
    load = {"enabled": True, "settle_seconds": 1, "max_wait_seconds": 5, "interval_seconds": 3600}
    root = fresh_dir("fig7-load")
    _build_history(root / "ws", 10)
    # One 20 s window (not repeated): the count is what a reader checks against 60 / max_wait, and three
    # windows would cost a minute of the ten the whole bench may take.
    with Daemon(root, base_config(root, {WS: root / "ws"}, snapshot=load)).start() as d:
        rate, w50, w99, n, wps, slowest = _sustained(d, root / "ws", seconds, 200)
    per_min, p50, p99, made, achieved = [rate], [w50], [w99], [n], [round(wps)]
    # The same with today's file at 32 MiB (the hour soak's by its end): every snapshot stages it whole, and what
    # of that holds the writer is what the writes meanwhile wait for.
    root = fresh_dir("fig7-bigday")
    _build_history(root / "ws", 10)
    today = datetime.now(UTC).date().isoformat()
    _prefilled_day(root / "ws" / "warm" / f"{today}.md", BIG_DAY, today)
    with Daemon(root, base_config(root, {WS: root / "ws"}, snapshot=load)).start() as d:
        with d.client() as c:
            c.call("snapshot.run", workspace=WS, reason="the day as it was")
        _, big50, big99, big_made, _, big_slowest = _sustained(d, root / "ws", seconds, 200)
    return [
        Row("7", "snapshot.run after a small write, 10-commit history", "ms", medians[10]),
        Row("7", "snapshot.run after a small write, 10,000-commit history", "ms", medians[10_000],
            "10-commit history", medians[10], note=f"median of {samples} per repetition"),
        Row("7", f"commits/min under 200 writes/s for {seconds} s (settle 1 s, max_wait 5 s)", "/min", per_min,
            "expected (60 / max_wait)", [12.0], note=f"commits: {made}; writes/s achieved: {achieved}; one window"),
        Row("7", "warm.log p99 at 200/s while snapshots run", "ms", p99, "p50", p50, compare=False),
        Row("7", "warm.log slowest at 200/s while snapshots run", "ms", [slowest], "p99", p99, compare=False),
        Row("7", f"warm.log p99 at 200/s while snapshots run, today's file {BIG_DAY >> 20} MiB", "ms", [big99],
            "today's file small", p99, note=f"p50 {big50:.3g} ms; commits: {big_made}"),
        Row("7", f"warm.log slowest at 200/s while snapshots run, today's file {BIG_DAY >> 20} MiB", "ms",
            [big_slowest], "today's file small", [slowest],
            note="a write that arrived as a snapshot held the writer"),
    ]  # fmt: skip


# --- figure 8: checkpoint cost --------------------------------------------------------------------------------

NOTE_TEXT = "module {i}: the retry loop re-reads its config on each attempt"


def _fake_llm() -> Any:
    tests = REPO / "tests"
    if (tests / "fakellm.py").exists():
        sys.path.insert(0, str(tests))
        from fakellm import FakeLLM  # type: ignore[import-not-found]

        return FakeLLM().start()
    from llmstub import StubLLM

    return StubLLM().start()


def _checkpoint_times(d: Daemon, reps: int, notes: int) -> tuple[list[float], list[float], list[float], float]:
    times, before, after = [], [], []
    with d.client() as c:
        c.call("session.start", workspace=WS, task="measure what a checkpoint costs")
        first = float("nan")
        for rep in range(reps + 1):
            for i in range(notes):
                c.call("hot.note", workspace=WS, text=NOTE_TEXT.format(i=f"{rep}-{i}"))
            t, result = c.timed("checkpoint.run", workspace=WS)
            record = result["checkpoint"]
            if rep == 0:
                first = t * 1000  # the first pays one-time costs (importing openai)
                continue
            times.append(t * 1000)
            before.append(record["tokens_before"])
            after.append(record["tokens_after"])
    return times, before, after, first


def fig8_checkpoints(s: Settings) -> list[Row]:
    notes = 200
    snapshot = {"enabled": True, "settle_seconds": 600, "max_wait_seconds": 1200, "interval_seconds": 3600}
    budget = {"hot": 20000, "checkpoint_threshold": 0.99}  # no automatic checkpoint while the notes go in
    results: dict[str, tuple[list[float], list[float], list[float], float]] = {}
    llm = _fake_llm()
    try:
        for backend in ("extractive", "openai"):
            root = fresh_dir(f"fig8-{backend}")
            sections: dict[str, Any] = {"snapshot": snapshot, "budget": budget}
            env = {}
            if backend == "openai":
                sections["llm"] = {"backend": "openai", "base_url": llm.url, "model": "bench-stub",
                                   "api_key_env": "MEMD_BENCH_LLM_KEY"}  # fmt: skip
                env["MEMD_BENCH_LLM_KEY"] = "bench-not-a-secret"
            with Daemon(root, base_config(root, {WS: root / "ws"}, **sections), env=env).start() as d:
                results[backend] = _checkpoint_times(d, s.reps, notes)
    finally:
        llm.stop()
    ext, oai = results["extractive"], results["openai"]
    return [
        Row("8", f"checkpoint.run, extractive, {notes} notes (with 2 git commits)", "ms", ext[0]),
        Row("8", "checkpoint.run, openai backend, instant local stub", "ms", oai[0], "extractive", ext[0]),
        Row("8", "first openai checkpoint after start (imports openai)", "ms", [oai[3]], "first extractive",
            [ext[3]]),
        Row("8", "extractive: hot tokens after checkpoint", "tok", ext[2], "before", ext[1]),
        Row("8", "openai stub: hot tokens after checkpoint", "tok", oai[2], "before", oai[1]),
    ]  # fmt: skip
