"""Scenario: two hosts syncing one workspace through a bare remote, killed in the middle of syncs (issue 18).

two-hosts  Daemons A and B serve workspace `shared` from their own directories, with `[snapshot] sync = true`
           and the same bare remote (which refuses non-fast-forward pushes: a forced push would fail loudly).
           Each round, agents on both hosts log warm entries and learn learnings (some learnings the same text on
           both: kept once); then one host, chosen at random, starts a sync and is SIGKILLed (with its git
           children) at a random moment of it, and restarted. After every kill: no merge or rebase in progress in
           its repository, `git fsck` clean. At the end both hosts sync until they agree, and on both every
           acknowledged entry and learning is there exactly once, and the remote's history holds every head it
           ever had (never rewritten).
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from memd.client import Client
from memd.tiers import cold_format, warm_format
from torture.lib import Context, Daemon, Report, base_config, fsck, git_dir_of

WS = "shared"
_IN_PROGRESS = ("MERGE_HEAD", "rebase-merge", "rebase-apply", "CHERRY_PICK_HEAD", "REVERT_HEAD")


def run(ctx: Context) -> Report:
    report = Report("sync")
    if ctx.wants("sync", "two-hosts"):
        t0 = time.monotonic()
        try:
            two_hosts(ctx, report)
        except (RuntimeError, OSError, TimeoutError, AssertionError) as exc:
            report.fail(f"two-hosts: {type(exc).__name__}: {exc}")
        ctx.log(f"sync:two-hosts took {time.monotonic() - t0:.1f} s")
    report.summary = "two hosts, kills mid-sync: nothing lost" if not report.failures else ""
    return report


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def _host(ctx: Context, name: str, remote: Path) -> Daemon:
    root = ctx.dir(name)
    config = base_config(
        root,
        {WS: root / "ws" / WS},
        snapshot={"settle_seconds": 0.05, "max_wait_seconds": 0.3, "interval_seconds": 5.0,
                  "remote": str(remote.parent / "{name}.git"), "sync": True, "push_interval_seconds": 3600.0},
        warm={"timezone": "UTC"},
        search={"enabled": False},
    )  # fmt: skip
    return Daemon(ctx, root, config, env=ctx.env()).start()


def _call(d: Daemon, method: str, timeout: float = 60.0, **params: Any) -> Any:
    with Client(d.socket_path, timeout=timeout) as c:
        return c.call(method, workspace=WS, **params)


def _settle(hosts: list[Daemon]) -> str:
    """Sync each host in turn until all are at one commit. Returns "" then, else the last sync reports."""
    reports: list[Any] = []
    for _ in range(8):
        heads = set()
        reports = []
        for d in hosts:
            _call(d, "snapshot.run", reason="settle")
            for _ in range(5):
                reports.append(_call(d, "snapshot.sync")["sync"])
                if reports[-1]["state"] == "ok":
                    break
            heads.add(_git(d.workspace(WS), "rev-parse", "HEAD").strip())
        if len(heads) == 1:
            return ""
    return repr([{k: r.get(k) for k in ("state", "error", "conflicts")} for r in reports])


def two_hosts(ctx: Context, report: Report) -> None:
    rng = ctx.rng("sync:two-hosts")
    remote_dir = ctx.dir("remote")
    remote = remote_dir / f"{WS}.git"
    _git(remote_dir, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    _git(remote, "config", "receive.denyNonFastForwards", "true")
    hosts = {"a": _host(ctx, "a", remote), "b": _host(ctx, "b", remote)}
    rounds, per_round = ctx.size(12, 3), ctx.size(20, 8)
    acked_warm: Counter[str] = Counter()
    acked_cold: set[str] = set()
    remote_heads: set[str] = set()
    kills = 0
    try:
        for r in range(rounds):
            for name, d in hosts.items():
                for i in range(per_round):
                    label = f"{name}-r{r}-w{i}"
                    _call(d, "warm.log", action=label)
                    acked_warm[label] += 1
                    if i % 4 == 0:
                        text = f"{name}-r{r}-c{i}" if i % 8 else f"both-r{r}-c{i}"
                        _call(d, "cold.learn", category=f"C{i % 3}", learning=text)
                        acked_cold.add(text)
            victim_name = rng.choice(sorted(hosts))
            victim = hosts[victim_name]
            other = hosts["b" if victim_name == "a" else "a"]
            for _ in range(3):
                if _call(other, "snapshot.sync")["sync"]["state"] == "ok":
                    break
            head = subprocess.run(["git", "--git-dir", str(remote), "rev-parse", "main"], capture_output=True,
                                  text=True, check=False).stdout.strip()  # fmt: skip
            if head:
                remote_heads.add(head)
            syncing = threading.Thread(target=_quiet_sync, args=(victim,), daemon=True)
            syncing.start()
            time.sleep(rng.uniform(0.0, 0.25))
            victim.kill9(group=True)
            victim.reap_group()
            kills += 1
            git_dir = git_dir_of(victim.workspace(WS), Path(victim.config["daemon"]["state_dir"]), WS)
            if git_dir is not None:
                left = [m for m in _IN_PROGRESS if (git_dir / m).exists()]
                report.check(not left, f"round {r}: {victim_name}'s repository left mid-operation: {left}")
                ok, text = fsck(git_dir)
                report.check(ok, f"round {r}: git fsck of {victim_name} after the kill: {text}")
            victim.start()
        stuck = _settle(list(hosts.values()))
        report.check(not stuck, f"the two hosts did not converge on one commit: {stuck}")
        final = subprocess.run(["git", "--git-dir", str(remote), "rev-parse", "main"], capture_output=True,
                               text=True, check=False).stdout.strip()  # fmt: skip
        for seen in remote_heads:
            rc = subprocess.run(["git", "--git-dir", str(remote), "merge-base", "--is-ancestor", seen, final],
                                check=False).returncode  # fmt: skip
            report.check(rc == 0, f"remote head {seen[:12]} is not in the final history: history was rewritten")
        for name, d in hosts.items():
            _verify(d, name, acked_warm, acked_cold, report)
        merges = _git(hosts["a"].workspace(WS), "rev-list", "--merges", "HEAD").split()
        report.figure("rounds / kills mid-sync", f"{rounds} / {kills}")
        report.figure("acknowledged entries / learnings", f"{sum(acked_warm.values())} / {len(acked_cold)}")
        report.figure("merge commits in the shared history", len(merges))
        report.count("kills", kills)
    finally:
        for d in hosts.values():
            d.kill9(group=True)
            d.reap_group()


def _quiet_sync(d: Daemon) -> None:
    with contextlib.suppress(Exception):  # the daemon is killed under it: expected
        _call(d, "snapshot.sync", timeout=30.0)


def _verify(d: Daemon, name: str, warm: Counter[str], cold: set[str], report: Report) -> None:
    root = d.workspace(WS)
    found: Counter[str] = Counter()
    for path in sorted((root / "warm").glob("*.md")):
        found.update(e.action for e in warm_format.parse_day(path.read_text(), current=True))
    missing = [k for k in warm if found[k] == 0]
    doubled = [k for k in warm if found[k] > 1]
    report.check(not missing, f"{name}: {len(missing)} acknowledged entries missing, e.g. {missing[:3]}")
    report.check(not doubled, f"{name}: {len(doubled)} entries doubled, e.g. {doubled[:3]}")
    memory = root / "cold" / "MEMORY.md"
    texts = Counter(x.text for x in cold_format.parse_memory(memory.read_text() if memory.exists() else ""))
    lost = sorted(cold - set(texts))
    twice = sorted(t for t in cold if texts[t] > 1)
    report.check(not lost, f"{name}: {len(lost)} acknowledged learnings missing, e.g. {lost[:3]}")
    report.check(not twice, f"{name}: {len(twice)} learnings doubled, e.g. {twice[:3]}")
