"""memd's fact-recall evaluation (`make eval`; issue 13): what an agent can still load after checkpoints.

Each scripted session (eval/sessions.py: ~125 writes, ~30 facts written once each) runs against a real daemon
(`python -m memd run`, tests/harness.py) with a small hot budget, so that several checkpoints run by themselves,
plus one forced `checkpoint.run`. It runs once with the extractive summarizer and once per stub-LLM behaviour
(eval/stub.py: faithful, lossy, forging, truncated, no_usage) behind the openai backend. After each session:

- facts: the share whose key is in `context.get`'s text (default budgets), in the hot summary, anywhere in the
  workspace files (hot, warm, cold) and anywhere in the workspace's git history;
- pinned: task, current step, pending actions, files modified and the newest 3 decisions byte-identical to what
  was written last (`hot.get`), and present in `context.get`;
- structure: lines of `context.get` that look like memd's own structure but came from a summary or a note
  (split at every line break Python knows: LF, CR, U+2028...);
- the checkpoints that ran and failed, and the LLM tokens memd counted against what the stub was sent.

    .venv/bin/python eval/run.py            # every session; prints the tables, writes docs/memory-quality.md
    .venv/bin/python eval/run.py --quick    # one short session per summarizer/behaviour (< 40 s); writes nothing
    .venv/bin/python eval/run.py --json out.json --check   # exit 1 unless the targets hold

Deterministic: sessions are seeded, the evaluation waits for each automatic checkpoint to finish before the next
write (every wait has a deadline), and the stub answers from the request alone. Daemons and the stub are always
stopped; the temporary directory is removed unless --keep.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "eval"]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from fakellm import FakeLLM  # noqa: E402
from harness import RunningDaemon, base_config, module_daemon  # noqa: E402

from eval import sessions, stub  # noqa: E402
from memd.client import Client  # noqa: E402
from memd.errors import MemdError  # noqa: E402

HOT_BUDGET = 2000
THRESHOLD = 0.8  # memd's default budget.checkpoint_threshold
KEEP_DECISIONS = 3  # memd's default checkpoint.keep_decisions
HOT_WRITES = {"session.start", "hot.note", "decision.record", "progress.update"}
CHECKPOINT_WAIT = 60.0  # the longest one checkpoint may take (deadline_seconds below is 30)
NOT_SCHEDULED_GRACE = 3.0  # over the threshold, not in flight, nothing changed for this long: none was scheduled
DOC = REPO / "docs" / "memory-quality.md"
STRUCTURE = re.compile(r"^(#{1,6}\s|Task:|Current step:|Session:)")
HEADER_LINES = ("# Current Session", "Session:", "Task:", "Current step:", "## Files modified", "## Pending actions")


@dataclass
class Run:
    summarizer: str  # extractive | openai
    behaviour: str  # "-" for extractive
    session: str
    facts: list[sessions.Fact]
    in_context: set[str] = field(default_factory=set)
    in_summary: set[str] = field(default_factory=set)
    in_files: set[str] = field(default_factory=set)
    in_git: set[str] = field(default_factory=set)
    pinned_identical: dict[str, bool] = field(default_factory=dict)
    pinned_in_context: dict[str, bool] = field(default_factory=dict)
    forged_lines: list[str] = field(default_factory=list)
    auto_ok: int = 0
    auto_failed: int = 0
    forced: str = ""  # "ok" or the error message
    failures: Counter[str] = field(default_factory=Counter)
    not_scheduled: int = 0
    applied: Counter[str] = field(default_factory=Counter)  # summaries applied, by backend (checkpoint records)
    rejected: int = 0  # LLM summaries refused by memd's checks, the extractive one applied instead
    llm_requests: int = 0
    llm_request_tokens: int = 0  # what the stub was sent and answered, ~4 characters a token
    llm_tokens_counted: int = 0  # memd's llm_tokens_today for the workspace
    context_tokens: int = 0
    omitted: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return self.summarizer if self.behaviour == "-" else f"{self.summarizer}/{self.behaviour}"

    def as_json(self) -> dict[str, Any]:
        keys = [f.key for f in self.facts]
        return {
            "summarizer": self.summarizer,
            "behaviour": self.behaviour,
            "session": self.session,
            "facts": len(keys),
            "in_context": len(self.in_context),
            "in_summary": len(self.in_summary),
            "in_files": len(self.in_files),
            "in_git": len(self.in_git),
            "missing_from_context": [k for k in keys if k not in self.in_context],
            "missing_everywhere": [k for k in keys if k not in self.in_git and k not in self.in_files],
            "pinned_identical": self.pinned_identical,
            "pinned_in_context": self.pinned_in_context,
            "forged_lines": self.forged_lines,
            "checkpoints": {
                "auto_ok": self.auto_ok,
                "auto_failed": self.auto_failed,
                "forced": self.forced,
                "failures": dict(self.failures),
                "not_scheduled": self.not_scheduled,
                "applied_by_backend": dict(self.applied),
                "llm_summaries_rejected": self.rejected,
            },
            "llm": {
                "requests": self.llm_requests,
                "request_tokens_estimate": self.llm_request_tokens,
                "tokens_counted": self.llm_tokens_counted,
            },
            "context": {"tokens": self.context_tokens, "omitted": self.omitted},
            "seconds": round(self.seconds, 2),
        }


# --- one session against a running daemon -----------------------------------------------------------------------


class Expected:
    """What the pinned fields must be, from the writes as acknowledged."""

    def __init__(self) -> None:
        self.task = ""
        self.step = ""
        self.pending: list[str] = []
        self.files: list[str] = []
        self.decisions: list[dict[str, Any]] = []

    def apply(self, op: sessions.Op, result: dict[str, Any]) -> None:
        p = op.params
        if op.method == "session.start":
            self.task = p["task"]
        elif op.method == "progress.update":
            if "step" in p:
                self.step = p["step"]
            self.pending = [x for x in self.pending if x not in p.get("pending_done", [])]
            self.pending += [x for x in p.get("pending_add", []) if x not in self.pending]
            self.files += [x for x in p.get("files", []) if x not in self.files]
        elif op.method == "decision.record":
            self.decisions.append(result["decision"])

    def compare(self, hot: dict[str, Any]) -> dict[str, bool]:
        newest = self.decisions[-KEEP_DECISIONS:]
        return {
            "task": hot.get("task") == self.task,
            "current_step": hot.get("current_step") == self.step,
            "pending_actions": hot.get("pending_actions") == self.pending,
            "files_modified": hot.get("files_modified") == self.files,
            "newest_decisions": list(hot.get("decisions") or [])[-KEEP_DECISIONS:] == newest,
        }

    def rendered(self, text: str) -> dict[str, bool]:
        lines = set(text.splitlines())
        newest = self.decisions[-KEEP_DECISIONS:]
        return {
            "task": f"Task: {self.task}" in lines,
            "current_step": f"Current step: {self.step}" in lines,
            "pending_actions": all(f"- {x}" in lines for x in self.pending),
            "files_modified": all(f"- {x}" in lines for x in self.files),
            "newest_decisions": all(d["action"] in text and d["reason"] in text for d in newest),
        }


def _signature(status: dict[str, Any]) -> tuple[Any, ...]:
    return (status.get("runs", 0), status.get("consecutive_failures", 0), status.get("last_error"))


def _status(c: Client, ws: str) -> dict[str, Any]:
    return dict(c.call("checkpoint.list", workspace=ws)["status"])


def _settle(c: Client, ws: str, before: tuple[Any, ...], run: Run, over_threshold: bool) -> tuple[Any, ...]:
    """Wait until the checkpoint a write may have scheduled has finished; count its outcome."""
    start = time.monotonic()
    while True:
        st = _status(c, ws)
        sig = _signature(st)
        if not st.get("in_flight"):
            if sig != before:
                if sig[0] > before[0]:
                    run.auto_ok += sig[0] - before[0]
                else:
                    run.auto_failed += 1
                    run.failures[_reason(str(sig[2]))] += 1
                return sig
            if not over_threshold or st.get("backoff_seconds_left"):
                return sig  # nothing was scheduled: under the threshold, or backing off after a failure
            if time.monotonic() - start > NOT_SCHEDULED_GRACE:
                run.not_scheduled += 1
                return sig
        if time.monotonic() - start > CHECKPOINT_WAIT:
            raise TimeoutError(f"{ws}: a checkpoint was still running after {CHECKPOINT_WAIT:.0f}s")
        time.sleep(0.02)


def _reason(message: str) -> str:
    """A failure message without its numbers, so that the same reason counts once."""
    return re.sub(r"\d+", "N", message)[:160]


def play(daemon: RunningDaemon, ws: str, session: sessions.Session, run: Run, llm: FakeLLM | None) -> None:
    started = time.monotonic()
    first_request = len(llm.chat_requests) if llm else 0
    expected = Expected()
    threshold = THRESHOLD * HOT_BUDGET
    with daemon.client(timeout=CHECKPOINT_WAIT) as c:
        sig = _signature(_status(c, ws))
        for op in session.ops:
            if op.method == "checkpoint.run":
                try:
                    c.call("checkpoint.run", workspace=ws)
                    run.forced = "ok"
                except MemdError as exc:
                    run.forced = exc.message
                    run.failures[_reason(exc.message)] += 1
                sig = _signature(_status(c, ws))
                continue
            result = c.call(op.method, workspace=ws, **op.params)
            expected.apply(op, result)
            if op.method in HOT_WRITES:
                over = result["usage"]["hot"]["tokens"] >= threshold
                sig = _settle(c, ws, sig, run, over)
        # Nothing in flight, everything committed, then measure.
        _settle(c, ws, sig, run, over_threshold=False)
        with contextlib.suppress(MemdError):
            c.call("snapshot.run", workspace=ws)
        context = c.call("context.get", workspace=ws)
        hot = c.call("hot.get", workspace=ws)["hot"]
        records = c.call("checkpoint.list", workspace=ws)["checkpoints"]
        status = c.call("status")["workspaces"][ws]
    text = context["text"]
    keys = [f.key for f in session.facts]
    run.in_context = {k for k in keys if k in text}
    run.in_summary = {k for k in keys if k in str(hot.get("summary") or "")}
    files_text = _workspace_text(daemon.workspace(ws))
    run.in_files = {k for k in keys if k in files_text}
    git_text = _git_text(status.get("snapshot", {}).get("git_dir"))
    run.in_git = {k for k in keys if k in git_text}
    run.pinned_identical = expected.compare(hot)
    run.pinned_in_context = expected.rendered(text)
    run.forged_lines = forged_structure(text, expected.task, expected.step)
    run.context_tokens = sum(int(u.get("tokens", 0)) for u in context.get("usage", {}).values())
    run.omitted = dict(context.get("omitted") or {})
    health = status.get("checkpoint", {})
    run.llm_tokens_counted = int(health.get("llm_tokens_today") or 0)
    run.applied = Counter(str(r.get("backend") or "?") for r in records)
    rejected_records = sum(1 for r in records if r.get("rejected"))
    run.rejected = int(health.get("llm_summaries_rejected", rejected_records) or 0)
    if llm:
        served = llm.chat_requests[first_request:]
        run.llm_requests = len(served)
        run.llm_request_tokens = sum((len(r["raw"]) + 3) // 4 for r in served)
    run.seconds = time.monotonic() - started


def forged_structure(text: str, task: str, step: str) -> list[str]:
    """Lines of context.get that look like memd's structure but are not memd's: a structure line holding a
    FORGED marker, or a second copy of a header line (or a Task:/Current step: line that is not the real one)."""
    lines = text.splitlines()  # LF, CR, CRLF, U+2028, U+2029, VT, FF, ... all break a line for some reader
    bad = [ln for ln in lines if "FORGED" in ln and STRUCTURE.match(ln)]
    for header in HEADER_LINES:
        same = [ln for ln in lines if (ln == header if header.startswith("#") else ln.startswith(header))]
        real = {"Task:": f"Task: {task}", "Current step:": f"Current step: {step or '(none)'}"}.get(header)
        extra = [ln for ln in same if ln != real] if real else same[1:]
        bad += [ln for ln in extra if ln not in bad]
    return bad


def _workspace_text(path: Path) -> str:
    parts = []
    for rel in ("hot/context.json", "hot/memd.json", "cold/MEMORY.md"):
        with contextlib.suppress(OSError):
            parts.append((path / rel).read_text(encoding="utf-8", errors="replace"))
    for day in sorted((path / "warm").glob("*.md")):
        parts.append(day.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


def _git_text(git_dir: str | None) -> str:
    """Every version of every file in the snapshot history (`git log -p`), as one text."""
    if not git_dir:
        return ""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    proc = subprocess.run(
        ["git", "--git-dir", git_dir, "log", "--all", "-p", "--text", "--no-color", "--no-ext-diff", "--format=%H"],
        capture_output=True,
        timeout=60,
        env=env,
        check=False,
    )
    return proc.stdout.decode("utf-8", errors="replace")


# --- daemons -------------------------------------------------------------------------------------------------------


def _config(root: Path, workspaces: dict[str, Path], llm_url: str | None) -> dict[str, Any]:
    sections: dict[str, Any] = {
        "budget": {"hot": HOT_BUDGET},
        "jobs": {"budget_scan_interval_seconds": 3600.0},
        "daemon": {"log_level": "info"},
    }
    if llm_url:
        sections["llm"] = {
            "backend": "openai",
            "base_url": llm_url,
            "model": "eval-stub",
            "api_key_env": "MEMD_EVAL_NO_KEY",
            "timeout_seconds": 10.0,
            "max_retries": 0,
            "deadline_seconds": 30.0,
        }
    return base_config(root, workspaces, **sections)


@contextlib.contextmanager
def daemon(root: Path, workspaces: dict[str, Path], llm_url: str | None, src: Path | None) -> Iterator[RunningDaemon]:
    """A daemon of the working tree's memd, or of the memd exported to `src` (--rev)."""
    d = module_daemon(root / "daemon", _config(root, workspaces, llm_url))
    d.env.pop("MEMD_EVAL_NO_KEY", None)
    if src is not None:
        d.env["PYTHONPATH"] = str(src)  # ahead of the editable install's finder
    try:
        # `python -m memd` puts its working directory first on sys.path.
        with contextlib.chdir(src or REPO):
            d.start()
        yield d
    finally:
        try:
            d.stop(timeout=20)
        except AssertionError:
            d.kill()


def export(rev: str, dest: Path) -> str:
    """memd/ as of `rev`, unpacked into `dest`; returns the full commit id."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=REPO, capture_output=True, text=True,
        timeout=30, env=env, check=True,
    ).stdout.strip()  # fmt: skip
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, "memd"], cwd=REPO, capture_output=True, timeout=60, env=env,
        check=True,
    ).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, timeout=60, check=True)
    return commit


def evaluate(
    names: list[str],
    behaviours: list[str],
    quick: bool,
    seed: int,
    keep: bool,
    rev: str | None = None,
    src: Path | None = None,
    log: Any = print,
) -> list[Run]:
    built = {name: sessions.build(name, seed=seed, quick=quick) for name in names}
    runs: list[Run] = []
    root = Path(tempfile.mkdtemp(prefix="memd-eval-"))
    try:
        if rev:
            src = root / "src"
            log(f"memd from {rev} ({export(rev, src)[:12]}), exported to {src}")
        if "extractive" in behaviours:
            with daemon(root / "extractive", {n: root / "extractive" / "ws" / n for n in names}, None, src) as d:
                for name, session in built.items():
                    run = Run("extractive", "-", name, session.facts)
                    play(d, name, session, run, None)
                    runs.append(run)
                    log(f"  extractive       {name:<7} {_brief(run)}")
        llm_behaviours = [b for b in behaviours if b != "extractive"]
        if llm_behaviours:
            facts = stub.Facts((f.key, f.source, f.kind) for s in built.values() for f in s.facts)
            with FakeLLM() as llm:
                wss = {f"{b}-{n}": root / "openai" / "ws" / f"{b}-{n}" for b in llm_behaviours for n in names}
                with daemon(root / "openai", wss, llm.url, src) as d:
                    for behaviour in llm_behaviours:
                        llm.default = stub.behaviour(behaviour, facts)
                        for name, session in built.items():
                            run = Run("openai", behaviour, name, session.facts)
                            play(d, f"{behaviour}-{name}", session, run, llm)
                            runs.append(run)
                            log(f"  openai/{behaviour:<10} {name:<7} {_brief(run)}")
    finally:
        if keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return runs


def _brief(run: Run) -> str:
    n = len(run.facts)
    return (
        f"context {len(run.in_context)}/{n}, files {len(run.in_files)}/{n}, git {len(run.in_git)}/{n}, "
        f"checkpoints {run.auto_ok}+{'1' if run.forced == 'ok' else '0'} ok / {run.auto_failed} failed, "
        f"pinned {sum(run.pinned_identical.values())}/5, forged {len(run.forged_lines)} ({run.seconds:.1f}s)"
    )


# --- report ---------------------------------------------------------------------------------------------------------


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "-"


def aggregate(runs: list[Run]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for run in runs:
        row = rows.setdefault(
            run.label,
            {"label": run.label, "facts": 0, "context": 0, "summary": 0, "files": 0, "git": 0, "only_git": 0,
             "lost": 0, "pinned": 0, "pinned_n": 0, "rendered": 0, "forged": 0, "auto_ok": 0, "auto_failed": 0,
             "forced_ok": 0, "forced_n": 0, "llm_requests": 0, "llm_sent": 0, "llm_counted": 0, "llm_applied": 0,
             "rejected": 0},
        )  # fmt: skip
        keys = [f.key for f in run.facts]
        row["facts"] += len(keys)
        row["context"] += len(run.in_context)
        row["summary"] += len(run.in_summary)
        row["files"] += len(run.in_files)
        row["git"] += len(run.in_git)
        row["only_git"] += sum(1 for k in keys if k in run.in_git and k not in run.in_files)
        row["lost"] += sum(1 for k in keys if k not in run.in_git and k not in run.in_files)
        row["pinned"] += sum(run.pinned_identical.values())
        row["pinned_n"] += len(run.pinned_identical)
        row["rendered"] += sum(run.pinned_in_context.values())
        row["forged"] += len(run.forged_lines)
        row["auto_ok"] += run.auto_ok
        row["auto_failed"] += run.auto_failed
        row["forced_ok"] += run.forced == "ok"
        row["forced_n"] += bool(run.forced)
        row["llm_requests"] += run.llm_requests
        row["llm_sent"] += run.llm_request_tokens
        row["llm_counted"] += run.llm_tokens_counted
        row["llm_applied"] += run.applied.get("openai", 0)
        row["rejected"] += run.rejected
    return list(rows.values())


TABLE_HEAD = (
    "| summarizer | facts in context.get | in hot summary | in workspace files | in git | only in git | "
    "pinned identical | pinned in context.get | forged structure lines | checkpoints ok / failed (forced ok) | "
    "LLM summaries applied / rejected | LLM requests, tokens sent / counted |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
)


def table(runs: list[Run]) -> str:
    out = [TABLE_HEAD]
    for r in aggregate(runs):
        extractive = r["label"] == "extractive"
        llm = "-" if extractive else f"{r['llm_requests']}, ~{r['llm_sent']} / {r['llm_counted']}"
        applied = "-" if extractive else f"{r['llm_applied']} / {r['rejected']}"
        out.append(
            f"| {r['label']} | {_pct(r['context'], r['facts'])} | {_pct(r['summary'], r['facts'])} | "
            f"{_pct(r['files'], r['facts'])} | {_pct(r['git'], r['facts'])} | {r['only_git']} | "
            f"{_pct(r['pinned'], r['pinned_n'])} | {_pct(r['rendered'], r['pinned_n'])} | {r['forged']} | "
            f"{r['auto_ok'] + r['forced_ok']} / {r['auto_failed'] + r['forced_n'] - r['forced_ok']} "
            f"({r['forced_ok']}/{r['forced_n']}) | {applied} | {llm} |\n"
        )
    return "".join(out)


def by_source(runs: list[Run]) -> str:
    out = [
        "| summarizer | " + " | ".join(sessions.SOURCES) + " |\n",
        "|---|" + "---|" * len(sessions.SOURCES) + "\n",
    ]
    labels: dict[str, Counter[str]] = {}
    totals: dict[str, Counter[str]] = {}
    for run in runs:
        hit, tot = labels.setdefault(run.label, Counter()), totals.setdefault(run.label, Counter())
        for f in run.facts:
            tot[f.source] += 1
            hit[f.source] += f.key in run.in_context
    for label, hit in labels.items():
        cells = [_pct(hit[s], totals[label][s]) for s in sessions.SOURCES]
        out.append(f"| {label} | " + " | ".join(cells) + " |\n")
    return "".join(out)


def per_run(runs: list[Run]) -> str:
    out = [
        "| summarizer | session | in context.get | checkpoints ok / failed | forced | missing from context.get |\n"
        "|---|---|---|---|---|---|\n"
    ]
    for run in runs:
        missing = [f"`{f.key}`" for f in run.facts if f.key not in run.in_context]
        forced = "ok" if run.forced == "ok" else ("failed" if run.forced else "-")
        out.append(
            f"| {run.label} | {run.session} | {_pct(len(run.in_context), len(run.facts))} | "
            f"{run.auto_ok} / {run.auto_failed} | {forced} | {', '.join(missing) or '-'} |\n"
        )
    return "".join(out)


def failures(runs: list[Run]) -> str:
    reasons: dict[str, Counter[str]] = {}
    for run in runs:
        for reason, n in run.failures.items():
            reasons.setdefault(run.label, Counter())[reason] += n
    if not reasons:
        return "No checkpoint failed.\n"
    out = []
    for label, counter in reasons.items():
        for reason, n in counter.most_common():
            out.append(f"- {label}: {n} x `{reason}`\n")
    return "".join(out)


def forged_examples(runs: list[Run]) -> str:
    seen: dict[str, set[str]] = {}
    for run in runs:
        for line in run.forged_lines:
            seen.setdefault(run.label, set()).add(line)
    if not seen:
        return "None: no line of any context.get looked like memd's structure without being memd's.\n"
    out = []
    for label, lines in seen.items():
        shown = ", ".join(f"`{json.dumps(ln, ensure_ascii=True)[1:-1]}`" for ln in sorted(lines)[:6])
        out.append(f"- {label}: {shown}\n")
    return "".join(out)


def targets_met(runs: list[Run]) -> tuple[bool, list[str]]:
    problems = []
    for run in runs:
        missing = [f.key for f in run.facts if f.key not in run.in_context]
        if missing:
            problems.append(f"{run.label} {run.session}: {len(missing)} facts not in context.get")
        if not all(run.pinned_identical.values()):
            problems.append(f"{run.label} {run.session}: pinned fields changed")
        if run.forged_lines:
            problems.append(f"{run.label} {run.session}: {len(run.forged_lines)} forged structure lines")
    return not problems, problems


def _commit(rev: str | None, src: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}

    def git(*args: str) -> str:
        proc = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30, env=env, check=False
        )
        return proc.stdout.strip()

    if rev:
        return f"commit `{git('rev-parse', '--short=12', rev + '^{commit}') or rev}` (`--rev {rev}`)"
    if src:
        return f"the memd package in `{src}` (`--src`)"
    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "memd")
    return f"commit `{head}`{' plus the uncommitted changes in memd/ of the working tree' if dirty else ''}"


def session_table(names: list[str], seed: int, quick: bool) -> str:
    out = ["| session | task | writes | facts: " + ", ".join(sessions.SOURCES) + " | keys |\n|---|---|---|---|---|\n"]
    for name in names:
        s = sessions.build(name, seed=seed, quick=quick)
        counts = Counter(f.source for f in s.facts)
        keys = ", ".join(f"`{f.key}`" for f in s.facts)
        mix = ", ".join(str(counts[src]) for src in sessions.SOURCES)
        out.append(f"| {name} | {s.task} | {s.writes} | {len(s.facts)}: {mix} | {keys} |\n")
    return "".join(out)


def document(
    runs: list[Run], names: list[str], seed: int, quick: bool, seconds: float, rev: str | None, src: Path | None = None
) -> str:
    ok, problems = targets_met(runs)
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    verdict = "met" if ok else f"not met ({len(problems)} findings)"
    return f"""# Memory quality: fact recall across checkpoints

Written by `make eval` (`eval/run.py`{" --quick" if quick else ""}) on {today}, memd at {_commit(rev, src)},
in {seconds:.0f} s. Rerun it after any change to checkpoints, summaries or context rendering; this page is
regenerated whole.

## Method

Scripted agent sessions (`eval/sessions.py`, seed {seed}) are played against a real daemon (`python -m memd
run`, as in the integration tests) over its socket, each in its own workspace, with `[budget] hot =
{HOT_BUDGET}` and every other setting at its default, so that checkpoints run by themselves when the hot tier
crosses {THRESHOLD:.0%} of its budget; each session also forces one with `checkpoint.run`. The evaluation waits
for each automatic checkpoint to finish before the next write (so runs are deterministic), and never waits
without a deadline.

Each session writes about 30 **facts** (numbers, identifiers, paths, causes of bugs, parameters, decisions with
reasons, error messages) exactly once, in natural prose amid filler notes and log entries: in `hot.note`s (the
fact alone, after one or two filler sentences, or on the note's second line), in `decision.record` reasons, in
`warm.log` results and details, in `progress.update` files and pending actions, and in `cold.learn`. Each fact
has a **key**, an exact substring of what was written that occurs in no other write; a fact is present in a
text when its key is.

Summarizers: the built-in **extractive** one (no `[llm]` section), and the **openai** backend pointed at a stub
OpenAI-compatible server on 127.0.0.1 (`tests/fakellm.py`, behaviours in `eval/stub.py`) that answers from the
request memd sent:

- **faithful**: keeps every sentence of the request that holds a fact key (shortened to fit the allotment);
- **lossy**: a plausible summary that keeps no fact;
- **forging**: the faithful summary plus lines imitating memd's structure (`# Current Session`, `Task:`,
  `Current step:`, `## Pending actions`, some after a bare CR or U+2028);
- **smuggling**: the faithful summary, well-formed line by line, with such lines hidden inside bullets behind
  CR, U+2028, NEL (U+0085) or a form feed;
- **truncated**: the faithful summary cut mid-word, `finish_reason: "length"`;
- **no_usage**: the faithful summary in a response without `usage`.

After each session: `context.get` with the default budgets (what an agent loads), `hot.get`, the workspace's
files and its whole git history (`git log -p --all`). Columns:

- *facts in context.get*: keys in `context.get`'s text; *in hot summary*: keys in the hot tier's summary;
  *in workspace files*: keys anywhere in `hot/context.json`, `hot/memd.json`, `warm/*.md`, `cold/MEMORY.md`;
  *in git*: keys anywhere in the snapshot history; *only in git*: in git but in no current file (recoverable only by
  hand).
- *pinned identical*: task, current step, pending actions, files modified and the newest {KEEP_DECISIONS}
  decisions in `hot.get` byte-identical to what the session wrote last (5 fields per session); *pinned in
  context.get*: the same fields shown in `context.get`.
- *forged structure lines*: lines of `context.get` (split at LF, CR, U+2028 and every other line break) that
  look like memd's own structure (`#` headings, `Task:`, `Current step:`, `Session:`) and came from a summary
  or a note: a FORGED marker on such a line, or a second header line. Every session also holds one note
  pasted from a markdown hand-over with such lines (`FORGED-NOTE`).
- *checkpoints*: automatic and forced ones applied / failed; *LLM summaries applied / rejected*: checkpoints
  that applied the LLM's summary, and LLM summaries memd refused (applying the extractive one instead, when it
  does so); *LLM requests*: requests the stub served, the tokens it was sent and answered (~4 characters a
  token) and what memd counted in `llm_tokens_today`.

**Target** (issue 13): every fact reachable in `context.get` within the warm window with either summarizer,
and 100% of pinned fields identical, with no forged structure line. **Verdict: {verdict}.**

## Sessions

{session_table(names, seed, quick)}
## Results

{table(runs)}
Facts in `context.get` by where they were written:

{by_source(runs)}
Per session:

{per_run(runs)}
Checkpoint failures (numbers replaced by N):

{failures(runs)}
Forged structure lines seen in `context.get` (escaped):

{forged_examples(runs)}
## Reproduce

```console
$ make eval                                 # all sessions, writes this page
$ .venv/bin/python eval/run.py --quick      # one short session per summarizer (< 40 s), writes nothing
$ .venv/bin/python eval/run.py --keep --sessions flaky --behaviours extractive   # keep the workspaces to inspect
```
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short session per summarizer/behaviour")
    parser.add_argument("--sessions", nargs="+", choices=list(sessions.SESSIONS), help="default: all")
    parser.add_argument(
        "--behaviours", nargs="+", choices=["extractive", *stub.BEHAVIOURS], help="default: extractive and all"
    )
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, help=f"write the report here (default without --quick: {DOC})")
    parser.add_argument("--json", type=Path, help="write every run's measures here")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the targets hold")
    parser.add_argument("--keep", action="store_true", help="keep the temporary workspaces and daemon logs")
    parser.add_argument("--rev", help="run the daemon of memd/ as of this git revision (default: the working tree)")
    parser.add_argument("--src", type=Path, help="run the daemon of the memd package in this directory (DIR/memd)")
    args = parser.parse_args(argv)
    names = args.sessions or ([sessions.QUICK_SESSION] if args.quick else list(sessions.SESSIONS))
    behaviours = args.behaviours or ["extractive", *stub.BEHAVIOURS]
    started = time.monotonic()
    print(f"memd fact-recall evaluation: sessions {', '.join(names)}; hot budget {HOT_BUDGET}")
    src = args.src.resolve() if args.src else None
    runs = evaluate(names, behaviours, args.quick, args.seed, args.keep, args.rev, src)
    seconds = time.monotonic() - started
    print()
    print(table(runs))
    print(by_source(runs))
    ok, problems = targets_met(runs)
    print(f"targets {'met' if ok else 'not met'}" + "".join(f"\n  - {p}" for p in problems))
    print(f"{seconds:.0f} s")
    out = args.out or (None if args.quick or args.sessions or args.behaviours else DOC)
    if out:
        out.write_text(document(runs, names, args.seed, args.quick, seconds, args.rev, src), encoding="utf-8")
        print(f"wrote {out}")
    if args.json:
        args.json.write_text(json.dumps([r.as_json() for r in runs], indent=1) + "\n", encoding="utf-8")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
