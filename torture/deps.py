"""Scenario 7, dependencies failing: the LLM, the git repository and the file watcher break while a client keeps
writing; writes must keep being acknowledged promptly (contract 4 and 8) and nothing acknowledged may be lost.

A load thread writes ~40 requests/s (warm entries, hot notes, learnings, and in some phases decisions and progress
updates) on one connection, each with a generous deadline, and records every latency by phase. The hot budget is small,
so checkpoints keep being attempted against tests/fakellm.py (127.0.0.1). Phases:
  llm-slow      the LLM answers after 2 s while decisions and progress updates keep arriving: a checkpoint must
                still apply within a few attempts (the writes that arrived meanwhile are kept, contract 3);
  llm-down      base_url reloaded (SIGHUP) to a closed port;
  llm-hang      the LLM accepts and never answers (timeout 3 s, 1 retry, deadline 5 s);
  llm-garbage   malformed JSON, HTTP 500, empty content, a refusal;
  llm-ok        a good answer: a checkpoint completes again;
  git-stale     an hour-old .git/index.lock and no git running (memd removes it);
  git-locked    a fresh index.lock held while a process named `git` runs in the workspace;
  git-head      garbage in .git/HEAD, then repaired: snapshots must resume;
  git-object    the HEAD commit's object file truncated, then repaired: snapshots must resume;
  watcher       the daemon SIGSTOPped, 20,000 file events plus two hand edits (a learning inserted into
                MEMORY.md by an editor-style replace, an entry appended to today's log), SIGCONT: the hand edits
                are adopted and kept by later writes, the watcher is alive.
Every phase but the SIGSTOP must answer every write (no timeout, disconnect, internal or storage error), and while
a dependency is stalled (the LLM holding a request in llm-slow and llm-hang, git waiting on a held index.lock in
git-locked) writes must go on being acknowledged: at least one write is sent and answered inside each stall. That
is an ordering, not a speed limit; the latencies per phase are figures, never checks, because on a loaded machine a
bound on them is a bound on the machine. At the end every acknowledged write is in the files (a hot note may
instead be named by a checkpoint record) and the files are byte-exact.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from torture import verify
from torture.lib import Conn, Context, Daemon, Report, RpcError, base_config, git_dir_of, ms, percentiles, wait_until

# A write unanswered this long counts as held up for good (a hang detector, generous so that load never trips it).
REQUEST_DEADLINE = 30.0
LLM_TIMEOUT = 3.0  # the daemon's per-attempt LLM timeout: how long one hung request stalls a checkpoint
SUMMARY = "# Context Summary\n- older notes, compressed by the fake LLM"


class Load(threading.Thread):
    """Writes at a steady rate, recording (phase, latency, outcome) and a ledger of acknowledged labels."""

    def __init__(self, d: Daemon, workspace: str, rng: random.Random, rate: float = 40.0) -> None:
        super().__init__(daemon=True)
        self.d = d
        self.ws = workspace
        self.rng = rng
        self.rate = rate
        self.phase = "warm-up"
        self.mix = "whc"
        self.records: list[tuple[str, float, float, str]] = []  # phase, sent at (monotonic), latency, outcome
        self.ledger = verify.Ledger()
        self.stop_event = threading.Event()
        self.pause_event = threading.Event()  # set: stop sending after the request in flight
        self.idle = threading.Event()  # set while paused with nothing in flight
        self.n = 0

    def pause(self) -> bool:
        self.pause_event.set()
        return self.idle.wait(REQUEST_DEADLINE + 1)

    def resume(self) -> None:
        self.idle.clear()
        self.pause_event.clear()

    def request(self, kind: str) -> tuple[str, str, dict[str, Any]]:
        self.n += 1
        label = f"{kind}-dep-{self.n}"
        if kind == "w":
            return label, "warm.log", {"action": label}
        if kind == "h":
            return label, "hot.note", {"text": label}
        if kind == "c":
            return label, "cold.learn", {"category": "Cdep", "learning": label}
        if kind == "d":
            return label, "decision.record", {"action": label, "reason": "because"}
        return "", "progress.update", {"step": f"step {self.n}"}

    def run(self) -> None:
        conn: Conn | None = None
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            if self.pause_event.is_set():
                self.idle.set()
                self.stop_event.wait(0.01)
                continue
            label, method, params = self.request(self.rng.choice(self.mix))
            phase = self.phase
            if label:
                self.ledger.sent.add(label)
            t0 = time.monotonic()
            outcome = "ok"
            try:
                conn = conn or Conn(self.d.socket_path, REQUEST_DEADLINE)
                response = conn.request(method, {"workspace": self.ws, **params}, timeout=REQUEST_DEADLINE)
                if "error" in response:
                    outcome = str(response["error"].get("code"))
                elif label:
                    result = response["result"]
                    ident = (result.get("note") or result.get("decision") or {}).get("id", "-")
                    self.ledger.acked[label] = ident
            except (TimeoutError, OSError, ConnectionError, ValueError) as exc:
                outcome = "timeout" if isinstance(exc, TimeoutError) else "disconnected"
                if conn is not None:
                    conn.close()
                conn = None
            self.records.append((phase, t0, time.monotonic() - t0, outcome))
            next_at = max(next_at + 1.0 / self.rate, time.monotonic() - 1.0)
            self.stop_event.wait(max(0.0, next_at - time.monotonic()))
        if conn is not None:
            conn.close()


def run(ctx: Context) -> Report:
    from fakellm import Delay, Empty, FakeLLM, Hang, Malformed, Reply, Status, closed_port_url

    report = Report("deps")
    rng = ctx.rng("deps")
    phase_seconds = ctx.seconds(4, 2)
    root = ctx.dir("dp")
    name = "dp"
    ws = root / "ws" / name
    llm = FakeLLM().start()
    llm.default = Reply(SUMMARY)
    llm_section = {"backend": "openai", "base_url": llm.url, "timeout_seconds": LLM_TIMEOUT, "max_retries": 1}
    llm_section["deadline_seconds"] = 5.0
    config = base_config(
        root,
        {name: ws},
        budget={"hot": 1000, "checkpoint_threshold": 0.8, "checkpoint_target": 0.5},
        checkpoint={"backoff_seconds": 0.3, "backoff_max_seconds": 1.0, "keep_decisions": 2},
        llm=llm_section,
    )
    d = Daemon(ctx, root / "d", config)
    load = Load(d, name, rng)
    rows: list[tuple[str, str]] = []
    stalls: dict[str, tuple[float, float]] = {}  # phase -> (start, end) of a stall a write must not wait out
    fake_git: subprocess.Popen[bytes] | None = None
    try:
        d.start()
        load.start()
        time.sleep(phase_seconds)  # hot fills past the checkpoint threshold

        def phase(label: str, mix: str = "whc") -> None:
            load.phase, load.mix = label, mix

        # --- the LLM -------------------------------------------------------------------------------------
        phase("llm-slow", "whcdp")
        llm.default = Delay(2.0, Reply(SUMMARY))
        asked_before = len(llm.chat_requests)
        wait_until(lambda: not _ckpt(d, name).get("in_flight"), 15.0, 0.05)
        runs0 = _ckpt(d, name).get("runs", 0)
        window = max(phase_seconds, 10.0)
        errors: set[str] = set()
        deadline = time.monotonic() + window
        while time.monotonic() < deadline and _ckpt(d, name).get("runs", 0) == runs0:
            errors.add(str(_ckpt(d, name).get("last_error") or ""))
            time.sleep(0.2)
        completed = _ckpt(d, name).get("runs", 0) - runs0
        _llm_stall(stalls, "llm-slow", llm.chat_requests[asked_before:], 2.0, time.monotonic())
        errors.discard("")
        rows.append(
            ("llm-slow", f"checkpoints completed {completed}" + (f"; errors: {sorted(errors)}" if errors else ""))
        )
        report.check(
            completed > 0,
            f"with the LLM answering in 2 s while decisions/progress updates arrive, no checkpoint applied in "
            f"{window:.0f} s (hot at {_usage(d, name)}% of its budget; errors: {sorted(errors)})",
        )
        phase("llm-down")
        _set_llm(d, config, base_url=closed_port_url())
        time.sleep(phase_seconds)
        rows.append(("llm-down", str(_ckpt(d, name).get("last_error"))))
        _set_llm(d, config, base_url=llm.url)
        phase("llm-hang")
        llm.default = Hang()
        asked_before = len(llm.chat_requests)
        time.sleep(phase_seconds)
        _llm_stall(stalls, "llm-hang", llm.chat_requests[asked_before:], LLM_TIMEOUT, time.monotonic())
        rows.append(("llm-hang", str(_ckpt(d, name).get("last_error"))))
        phase("llm-garbage")
        llm.default = Malformed()
        llm.script(Status(500), Empty(), Reply("I'm sorry, I can't help with that."), Reply(""), Malformed())
        time.sleep(phase_seconds)
        rows.append(("llm-garbage", str(_ckpt(d, name).get("last_error"))))
        phase("llm-ok")
        llm.default = Reply(SUMMARY)
        runs0 = _ckpt(d, name).get("runs", 0)
        recovered = wait_until(lambda: _ckpt(d, name).get("runs", 0) > runs0, max(phase_seconds, 10.0), 0.1)
        report.check(bool(recovered), f"no checkpoint completed once the LLM answered well again: {_ckpt(d, name)}")
        rows.append(("llm-ok", f"checkpoint completed: {bool(recovered)}"))

        # --- git -----------------------------------------------------------------------------------------
        d.call("snapshot.run", workspace=name)
        git_dir = ws / ".git"
        lock = git_dir / "index.lock"
        phase("git-stale")
        _create_lock(lock, age=3600)
        time.sleep(phase_seconds)
        rev = _snapshot(d, name)
        report.check(bool(rev) and not lock.exists(), f"an hour-old index.lock was not cleared (snapshot {rev})")
        rows.append(("git-stale", f"snapshot after: {'ok' if rev else 'FAILED'}, lock removed: {not lock.exists()}"))
        phase("git-locked")
        fake_git = ctx.procs.spawn(["bash", "-c", "exec -a git sleep 600"], cwd=str(ws))
        _create_lock(lock, age=0)
        locked_at = time.monotonic()
        time.sleep(phase_seconds)
        rows.append(("git-locked", f"snapshot state {_snap_state(d, name)}"))
        fake_git.kill()
        fake_git.wait(5)
        lock.unlink(missing_ok=True)
        stalls["git-locked"] = (locked_at, time.monotonic())
        phase("git-head")
        head = (git_dir / "HEAD").read_bytes()
        (git_dir / "HEAD").write_bytes(b"garbage\n")
        time.sleep(phase_seconds)
        state = _snap_state(d, name)
        (git_dir / "HEAD").write_bytes(head)
        rev = _snapshot(d, name)
        report.check(state == "error", f"garbage in .git/HEAD did not show in status (snapshot state {state})")
        report.check(bool(rev), "snapshots did not resume after .git/HEAD was repaired")
        rows.append(("git-head", f"status {state} while broken; snapshots resume after repair: {bool(rev)}"))
        phase("git-object")
        obj = _loose_object(git_dir, rev or "")
        saved = obj.read_bytes() if obj else b""
        if obj is not None:
            os.chmod(obj, 0o644)
            obj.write_bytes(saved[: len(saved) // 2])
        time.sleep(phase_seconds)
        state = _snap_state(d, name)
        if obj is not None:
            obj.write_bytes(saved)
        rev = _snapshot(d, name)
        report.check(bool(rev), "snapshots did not resume after the truncated object was repaired")
        rows.append(("git-object", f"status {state} while broken; snapshots resume after repair: {bool(rev)}"))

        # --- the watcher ---------------------------------------------------------------------------------
        rows.append(("watcher-after", watcher_overflow(ctx, d, ws, name, load, report)))
        phase("after")
        time.sleep(min(phase_seconds, 2.0))
    except (RuntimeError, RpcError, OSError) as exc:
        report.fail(f"deps scenario: {type(exc).__name__}: {exc}\n{d.log_tail(15)}")
    finally:
        load.stop_event.set()
        load.join(REQUEST_DEADLINE + 5)
        if fake_git is not None and fake_git.poll() is None:
            fake_git.kill()
        with contextlib.suppress(Exception):
            d.stop()
        d.close()
        llm.stop()
    # every acknowledged write is there; latencies per phase
    state = verify.inspect(ws)
    records = verify.records_in_history(git_dir_of(ws, root / "state", name))
    acc = verify.account(state, load.ledger, compressed_ok=True, records=records)
    for problem in state.problems:
        report.fail(f"corrupt: {problem}")
    for x in acc.lost[:20]:
        report.fail(f"LOST: {x}")
    for x in acc.duplicated[:10]:
        report.fail(f"duplicated: {x}")
    report.count("lost", len(acc.lost))
    report.count("acked", len(load.ledger.acked))
    report.count("corrupt", len(state.problems) + len(acc.duplicated))
    by_phase: dict[str, list[tuple[float, str]]] = {}
    for p, _, latency, outcome in load.records:
        by_phase.setdefault(p, []).append((latency, outcome))
    worst = 0.0
    for p, items in by_phase.items():
        lat = [x for x, _ in items]
        bad = [o for _, o in items if o not in ("ok",)]
        q = percentiles(lat)
        detail = dict(rows).get(p, "")
        report.figure(
            p,
            f"{len(items)} writes, p50 {ms(q['p50'])}, p99 {ms(q['p99'])}, max {ms(q['max'])}"
            + (f", {len(bad)} not ok ({', '.join(sorted(set(bad)))})" if bad else "")
            + (f"; {detail}" if detail else ""),
        )
        if p == "watcher-stopped":
            continue
        worst = max(worst, q["max"])
        failed = sorted({o for o in bad if o in ("timeout", "disconnected", "-32603", "-32005")})
        report.check(not failed, f"{p}: writes failed or were never answered: {failed} (max {q['max']:.2f} s)")
    for p, (start, end) in stalls.items():
        inside = [r for r in load.records if r[3] == "ok" and r[1] >= start and r[1] + r[2] <= end]
        report.figure(f"  during the {p} stall", f"{len(inside)} writes sent and acknowledged in {end - start:.1f} s")
        report.check(
            bool(inside),
            f"{p}: no write was acknowledged during the {end - start:.1f} s the dependency was stalled: the write "
            "path waits on it (contracts 4 and 8)",
        )
    report.figure(
        "total", f"{len(load.ledger.acked):,} acknowledged, {len(acc.lost)} lost, {acc.compressed} compressed"
    )
    report.summary = f"slowest write {worst:.2f} s"
    return report


def _llm_stall(
    stalls: dict[str, tuple[float, float]], phase: str, requests: list[dict[str, Any]], held: float, ended: float
) -> None:
    """The first stretch in `phase` during which the fake LLM held a request unanswered (for `held` seconds, or
    until the phase ended), if it was asked at all."""
    if requests:
        start = float(requests[0]["received_at"])
        stalls[phase] = (start, min(start + held, ended))


def _ckpt(d: Daemon, name: str) -> dict[str, Any]:
    try:
        return dict(d.call("status", timeout=5)["workspaces"][name]["checkpoint"])
    except (OSError, RpcError, ConnectionError, TimeoutError, KeyError):
        return {}


def _usage(d: Daemon, name: str) -> float:
    try:
        return float(d.call("status", timeout=5)["workspaces"][name]["usage"]["hot"]["percent"])
    except (OSError, RpcError, ConnectionError, TimeoutError, KeyError):
        return -1.0


def _snap_state(d: Daemon, name: str) -> str:
    try:
        return str(d.call("status", timeout=5)["workspaces"][name]["snapshot"]["state"])
    except (OSError, RpcError, ConnectionError, TimeoutError, KeyError):
        return "?"


def _snapshot(d: Daemon, name: str) -> str:
    try:
        return str(d.call("snapshot.run", timeout=60, workspace=name, reason="torture").get("rev") or "")
    except (OSError, RpcError, ConnectionError, TimeoutError):
        return ""


def _set_llm(d: Daemon, config: dict[str, Any], **llm: Any) -> None:
    config["llm"].update(llm)
    d.write_config(config)
    result = d.call("config.reload")
    if not result.get("reloaded"):
        raise RuntimeError(f"reload rejected: {result}")


def _create_lock(lock: Path, age: float) -> None:
    """Take git's index lock the way git does (O_EXCL), waiting for a running git to release it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.close(fd)
            break
        except FileExistsError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{lock} stayed held for 30 s") from None
            time.sleep(0.01)
    if age:
        old = time.time() - age
        os.utime(lock, (old, old))


def _loose_object(git_dir: Path, rev: str) -> Path | None:
    if len(rev) != 40:
        return None
    path = git_dir / "objects" / rev[:2] / rev[2:]
    return path if path.exists() else None


def watcher_overflow(ctx: Context, d: Daemon, ws: Path, name: str, load: Load, report: Report) -> str:
    from memd.tiers import cold_format, warm_format
    from memd.tiers.warm_format import WarmEntry

    events = ctx.size(20_000, 20_000)
    noise = ws / "warm" / "noise"
    noise.mkdir(exist_ok=True)
    today = verify.today_utc()
    # no write in flight while the hand edits are made: an editor saving while memd renames its own new copy
    # of the same file loses one of the two whatever memd checks before (an inherent race, not tested here)
    load.phase = "watcher-stopped"
    load.pause()
    os.kill(d.pid, signal.SIGSTOP)
    try:
        for i in range(events // 2):  # each open+write+close is a modify and a close-write event
            with open(noise / f"n{i % 200}.txt", "a") as f:
                f.write("x")
        memory = ws / "cold" / "MEMORY.md"
        text = memory.read_text(encoding="utf-8")
        edited = cold_format.insert_learning(text, "Hand", today.isoformat(), "hand-written learning")
        tmp = memory.with_name("MEMORY.md.editor-swap")
        tmp.write_text(edited, encoding="utf-8")
        os.replace(tmp, memory)
        entry = warm_format.render_entry(WarmEntry("23:59:59", "hand-entry", (("by", "a person"),), "typed"))
        with open(ws / "warm" / warm_format.day_filename(today), "a", encoding="utf-8") as f:
            f.write(entry)
    finally:
        os.kill(d.pid, signal.SIGCONT)
    load.phase = "watcher-after"
    load.resume()

    seen = [False, False]  # the learning, the entry: served by memd (adopted from the files)?

    def adopted() -> bool:
        learned = d.call("cold.get", workspace=name, topic="hand-written")
        recent = d.call("warm.recent", workspace=name, days=1)
        seen[0] = any(x["text"] == "hand-written learning" for x in learned["learnings"])
        seen[1] = any(e["action"] == "hand-entry" for day in recent["days"] for e in day["entries"])
        return all(seen)

    wait_until(adopted, 30.0, 0.1)  # the watcher's hint, or at worst the periodic reconcile
    seen_learning, seen_entry = seen
    acked = len(load.ledger.acked)  # then writes of every tier land on top of the adopted edits
    wait_until(lambda: len(load.ledger.acked) >= acked + 20, 30.0, 0.05)
    state = verify.inspect(ws)
    kept_learning = any(lr.text == "hand-written learning" for lr in state.learnings)
    kept_entry = any(e.action == "hand-entry" for e in state.entries)
    watcher = d.call("status")["sync"]["watcher"]
    report.check(seen_learning and seen_entry, f"hand edits not adopted: learning {seen_learning}, entry {seen_entry}")
    report.check(kept_learning and kept_entry, f"hand edits lost by later writes: {kept_learning}, {kept_entry}")
    report.check(bool(watcher.get("alive")), f"watcher dead after the overflow: {watcher}")
    for p in noise.iterdir():
        p.unlink()
    noise.rmdir()
    return (
        f"{events:,} events while stopped; hand edits adopted {seen_learning and seen_entry}, kept "
        f"{kept_learning and kept_entry}; watcher alive {watcher.get('alive')}, {watcher.get('events'):,} events seen"
    )
