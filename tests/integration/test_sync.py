"""Two-way sync (docs/sync.md): real daemons on workspaces that share one bare remote, all on this machine.

Every acknowledged warm entry and learning of every machine ends up on every machine exactly once, no push is ever
forced (the remote refuses one: `receive.denyNonFastForwards`), the histories are merges of both, a machine joining
later gets everything, and what memd cannot merge is reported while the workspace keeps serving.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memd.gitrepo import find_git
from memd.tiers import cold_format, warm_format
from tests.harness import RunningDaemon, base_config, person_env, wait_for

GIT = find_git()
WS = "shared"
FAST = {"settle_seconds": 0.2, "max_wait_seconds": 1.0}


def git(cwd: Path, *args: str, check: bool = True) -> str:
    out = subprocess.run([GIT, *args], cwd=cwd, env=person_env(), capture_output=True, text=True, check=False)
    if check:
        assert out.returncode == 0, f"git {' '.join(args)} in {cwd} failed: {out.stderr}"
    return out.stdout


def make_remote(root: Path) -> Path:
    remote = root / "remote" / f"{WS}.git"
    remote.parent.mkdir(parents=True, exist_ok=True)
    git(root, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    git(remote, "config", "receive.denyNonFastForwards", "true")  # a forced push would be refused, not taken
    return remote


def host_config(root: Path, remote: Path, interval: float = 3600.0) -> dict[str, Any]:
    return base_config(
        root,
        workspaces={WS: root / "ws" / WS},
        snapshot={**FAST, "remote": str(remote.parent / "{name}.git"), "sync": True, "push_interval_seconds": interval},
        warm={"timezone": "UTC", "adopted_sweep": "run"},
        search={"enabled": False},
    )


@pytest.fixture
def hosts(make_daemon: Callable[..., RunningDaemon], short_root: Path) -> tuple[RunningDaemon, RunningDaemon, Path]:
    remote = make_remote(short_root)
    a = make_daemon("a", host_config(short_root / "a", remote))
    b = make_daemon("b", host_config(short_root / "b", remote))
    return a, b, remote


def sync(daemon: RunningDaemon) -> dict[str, Any]:
    report: dict[str, Any] = daemon.call("snapshot.sync", workspace=WS)["sync"]
    return report


def sync_until_ok(daemon: RunningDaemon) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for _ in range(10):
        report = sync(daemon)
        if report["state"] == "ok":
            return report
    raise AssertionError(f"sync did not settle: {report}")


def today_file(daemon: RunningDaemon) -> Path:
    return daemon.workspace(WS) / "warm" / f"{datetime.now(UTC).date().isoformat()}.md"


def warm_actions(daemon: RunningDaemon) -> Counter[str]:
    actions: Counter[str] = Counter()
    for path in sorted((daemon.workspace(WS) / "warm").glob("*.md")):
        actions.update(e.action for e in warm_format.parse_day(path.read_text(), current=True))
    return actions


def learning_texts(daemon: RunningDaemon) -> Counter[str]:
    path = daemon.workspace(WS) / "cold" / "MEMORY.md"
    return Counter(x.text for x in cold_format.parse_memory(path.read_text() if path.exists() else ""))


def head(daemon: RunningDaemon) -> str:
    return git(daemon.workspace(WS), "rev-parse", "HEAD").strip()


def remote_head(remote: Path) -> str:
    return git(remote, "rev-parse", "--verify", "--quiet", "main", check=False).strip()


def settle(*daemons: RunningDaemon) -> None:
    """Sync each in turn until every machine and the remote are at one commit."""
    for _ in range(6):
        for d in daemons:
            d.call("snapshot.run", workspace=WS, reason="settle")
            sync_until_ok(d)
        heads = {head(d) for d in daemons}
        if len(heads) == 1 and all(not _dirty(d) for d in daemons):
            return
    raise AssertionError(f"machines did not converge: {[head(d) for d in daemons]}")


def _dirty(daemon: RunningDaemon) -> bool:
    return bool(git(daemon.workspace(WS), "status", "--porcelain", "--", "warm", "cold").strip())


# --- the two machines -------------------------------------------------------------------------------------------


def test_two_machines_writing_concurrently_end_with_every_entry_and_learning_exactly_once(
    hosts: tuple[RunningDaemon, RunningDaemon, Path], make_daemon: Callable[..., RunningDaemon], short_root: Path
) -> None:
    a, b, remote = hosts
    written: dict[str, list[str]] = {"warm": [], "cold": []}
    lock = threading.Lock()
    observed_remote: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(d: RunningDaemon, host: str, n: int) -> None:
        try:
            with d.client() as c:
                c.call("session.start", workspace=WS, task=f"{host}'s task", session_id=f"{host}-session")
                for i in range(n):
                    c.call("warm.log", workspace=WS, action=f"{host} step {i}", result="ok")
                    with lock:
                        written["warm"].append(f"{host} step {i}")
                    if i % 3 == 0:
                        text = f"{host} learned {i}" if i % 6 else f"shared lesson {i}"  # some on both hosts
                        c.call("cold.learn", workspace=WS, category=f"Topic {i % 4}", learning=text)
                        with lock:
                            written["cold"].append(text)
                    if i % 5 == 0:
                        c.call("hot.note", workspace=WS, text=f"{host} note {i}")
                    time.sleep(0.02)  # long enough for a few dozen syncs to land in the middle of the writes
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def syncer(d: RunningDaemon, seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                time.sleep(rng.uniform(0.0, 0.4))
                report = sync(d)
                assert report["state"] in ("ok", "behind"), (report.get("conflicts"), report.get("error"))
                observed_remote.append(remote_head(remote))
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(d, h, 100)) for d, h in ((a, "a"), (b, "b"))]
    syncers = [threading.Thread(target=syncer, args=(d, s)) for d, s in ((a, 1), (b, 2))]
    for t in writers + syncers:
        t.start()
    for t in writers:
        t.join(120)
    stop.set()
    for t in syncers:
        t.join(60)
    assert not errors, errors

    settle(a, b)

    expected_warm = Counter(written["warm"])
    expected_cold = set(written["cold"])
    for d in (a, b):
        actions = warm_actions(d)
        assert {k: actions[k] for k in expected_warm} == dict(expected_warm)  # each exactly once
        texts = learning_texts(d)
        assert set(texts) == expected_cold
        assert all(n == 1 for n in texts.values()), texts
        day = d.call("warm.day", workspace=WS, date=datetime.now(UTC).date().isoformat())
        served = Counter(e["action"] for e in day["entries"])
        assert all(served[k] == 1 for k in expected_warm)  # what the daemon serves follows the merged file
    assert today_file(a).read_bytes() == today_file(b).read_bytes()

    # Hot: each machine's own session stays live; the other's is in history and named in a warm entry.
    assert '"a-session"' in (a.workspace(WS) / "hot" / "context.json").read_text()
    assert '"b-session"' in (b.workspace(WS) / "hot" / "context.json").read_text()
    assert any(k.startswith("sync: another machine's session") for k in warm_actions(a))

    # Never forced: every remote head seen on the way is in the final history; the histories merge both.
    final = remote_head(remote)
    assert head(a) == head(b) == final
    for seen in set(filter(None, observed_remote)):
        assert subprocess.run([GIT, "merge-base", "--is-ancestor", seen, final], cwd=remote).returncode == 0
    merges = git(remote, "rev-list", "--merges", "main").split()
    assert merges, "no merge commit: the two machines never diverged?"
    for d in (a, b):
        git_dir = Path(git(d.workspace(WS), "rev-parse", "--absolute-git-dir").strip())
        assert not (git_dir / "MERGE_HEAD").exists()

    # A third machine joining later gets everything.
    c = make_daemon("c", host_config(short_root / "c", remote))
    sync_until_ok(c)
    assert {k: warm_actions(c)[k] for k in expected_warm} == dict(expected_warm)
    assert set(learning_texts(c)) == expected_cold
    joined = warm_actions(c)
    assert all(joined[k] == n for k, n in warm_actions(a).items() if not k.startswith("sync: "))
    assert subprocess.run([GIT, "merge-base", "--is-ancestor", final, head(c)], cwd=c.workspace(WS)).returncode == 0


def test_scheduled_syncs_carry_writes_between_machines(
    make_daemon: Callable[..., RunningDaemon], short_root: Path
) -> None:
    remote = make_remote(short_root)
    a = make_daemon("a", host_config(short_root / "a", remote, interval=0.5))
    b = make_daemon("b", host_config(short_root / "b", remote, interval=0.5))

    a.call("warm.log", workspace=WS, action="written on a")
    b.call("cold.learn", workspace=WS, category="Ops", learning="written on b")

    wait_for(lambda: warm_actions(b)["written on a"] == 1, "a's entry to reach b", timeout=30)
    wait_for(lambda: learning_texts(a)["written on b"] == 1, "b's learning to reach a", timeout=30)
    status = a.call("status")
    assert status["workspaces"][WS]["snapshot"]["sync"]["state"] in ("ok", "behind")


def test_a_day_deleted_by_retention_on_one_machine_is_not_brought_back_by_the_other(
    hosts: tuple[RunningDaemon, RunningDaemon, Path],
) -> None:
    a, b, _ = hosts
    old = "# Activity Log 2020-01-01\n\n### 09:00:00 - old work\nResult: done\n\n"
    (a.workspace(WS) / "warm" / "2020-01-01.md").write_text(old)
    wait_for(lambda: a.call("snapshot.run", workspace=WS)["rev"], "a to commit the old day")
    sync_until_ok(a)
    sync_until_ok(b)
    assert (b.workspace(WS) / "warm" / "2020-01-01.md").read_text() == old

    swept = a.call("retention.sweep", workspace=WS, confirm=True)
    assert "2020-01-01.md" in str(swept), swept
    assert not (a.workspace(WS) / "warm" / "2020-01-01.md").exists()
    sync_until_ok(a)
    sync_until_ok(b)
    sync_until_ok(a)

    assert not (b.workspace(WS) / "warm" / "2020-01-01.md").exists()
    assert not (a.workspace(WS) / "warm" / "2020-01-01.md").exists()


# --- what memd cannot merge -------------------------------------------------------------------------------------


def edit_learning(daemon: RunningDaemon, old: str, new: str) -> None:
    path = daemon.workspace(WS) / "cold" / "MEMORY.md"
    path.write_text(path.read_text().replace(old, new))
    wait_for(
        lambda: any(x["text"] == new for x in daemon.call("cold.get", workspace=WS)["learnings"]),
        "memd to adopt the person's edit",
    )
    daemon.call("snapshot.run", workspace=WS, reason="person's edit")


def test_the_same_learning_edited_differently_on_two_machines_is_reported_and_the_workspace_serves_on(
    hosts: tuple[RunningDaemon, RunningDaemon, Path],
) -> None:
    a, b, remote = hosts
    a.call("cold.learn", workspace=WS, category="Auth", learning="tokens expire after 1h")
    sync_until_ok(a)
    sync_until_ok(b)
    edit_learning(a, "tokens expire after 1h", "tokens expire after 2h")
    edit_learning(b, "tokens expire after 1h", "tokens expire after 30m")
    sync_until_ok(a)
    pushed = remote_head(remote)

    report = sync(b)

    assert report["state"] == "conflict"
    assert [c["path"] for c in report["conflicts"]] == ["cold/MEMORY.md"]
    assert any("memd sync" in step for step in report["resolve"])
    assert remote_head(remote) == pushed  # nothing pushed
    git_dir = Path(git(b.workspace(WS), "rev-parse", "--absolute-git-dir").strip())
    assert not (git_dir / "MERGE_HEAD").exists()
    assert "tokens expire after 30m" in (b.workspace(WS) / "cold" / "MEMORY.md").read_text()  # its own version
    b.call("warm.log", workspace=WS, action="still serving")
    status = b.call("status")["workspaces"][WS]["snapshot"]["sync"]
    assert status["state"] == "conflict" and status["conflicts"]
    cli = subprocess.run([*_memd(b), "sync", WS], capture_output=True, text=True, check=False, env=b.env, timeout=60)
    assert cli.returncode == 1 and "cold/MEMORY.md" in cli.stdout and "to settle it" in cli.stdout

    # Settled the first way the report offers: this side's line made to read as the other side's.
    edit_learning(b, "tokens expire after 30m", "tokens expire after 2h")
    assert sync_until_ok(b)["state"] == "ok"
    sync_until_ok(a)
    for d in (a, b):
        assert learning_texts(d)["tokens expire after 2h"] == 1
        assert learning_texts(d)["tokens expire after 30m"] == 0


def _memd(daemon: RunningDaemon) -> list[str]:
    return [sys.executable, "-m", "memd", "--config", str(daemon.config_path)]


# --- kills in the middle of a sync ---------------------------------------------------------------------------


def test_a_kill_in_the_middle_of_a_sync_loses_nothing_and_leaves_no_merge_in_progress(
    hosts: tuple[RunningDaemon, RunningDaemon, Path],
) -> None:
    a, b, _ = hosts
    acknowledged: list[str] = []
    rng = random.Random(7)
    for round_ in range(4):
        for i in range(15):
            for d, host in ((a, "a"), (b, "b")):
                d.call("warm.log", workspace=WS, action=f"{host} round {round_} entry {i}")
                acknowledged.append(f"{host} round {round_} entry {i}")
        sync_until_ok(a)
        threading.Thread(target=lambda: _ignore(lambda: sync(b)), daemon=True).start()
        time.sleep(rng.uniform(0.0, 0.3))
        b.kill()
        git_dir = Path(git(b.workspace(WS), "rev-parse", "--absolute-git-dir").strip())
        assert not (git_dir / "MERGE_HEAD").exists()
        b.start()
    settle(a, b)
    for d in (a, b):
        actions = warm_actions(d)
        assert all(actions[k] == 1 for k in acknowledged), [k for k in acknowledged if actions[k] != 1]
        assert git(d.workspace(WS), "fsck", "--no-progress", check=False) is not None


def _ignore(fn: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):
        fn()
