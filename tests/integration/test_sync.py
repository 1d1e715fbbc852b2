"""Two-way sync (docs/sync.md): real daemons on workspaces that share one bare remote, all on this machine.

Every acknowledged warm entry and learning of every machine ends up on every machine exactly once, no push is ever
forced (the remote refuses one: `receive.denyNonFastForwards`), the histories are merges of both, a machine joining
later gets everything, and what memd cannot merge is reported while the workspace keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memd import gitsync
from memd.config import SnapshotConfig, WorkspaceConfig
from memd.daemon import SystemClock
from memd.gitrepo_setup import find_git
from memd.snapshots import Snapshotter
from memd.sync import Syncer
from memd.tiers import cold_format, warm_format
from memd.tokens import TokenCounter
from memd.workspace import Workspace
from tests.harness import RunningDaemon, base_config, person_env, wait_for

GIT = find_git()
WS = "shared"
FAST = {"settle_seconds": 0.2, "max_wait_seconds": 1.0}


def git(cwd: Path, *args: str, check: bool = True, input_text: str | None = None) -> str:
    out = subprocess.run(
        [GIT, *args], cwd=cwd, env=person_env(), capture_output=True, text=True, check=False, input=input_text
    )
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


def test_machines_that_write_nothing_stop_committing_and_each_keeps_its_own_session_live(
    hosts: tuple[RunningDaemon, RunningDaemon, Path],
) -> None:
    a, b, remote = hosts
    a.call("session.start", workspace=WS, task="a's task", session_id="a-session")
    b.call("session.start", workspace=WS, task="b's task", session_id="b-session")
    a.call("warm.log", workspace=WS, action="written on a")
    b.call("warm.log", workspace=WS, action="written on b")
    settle(a, b)

    # Each round commits what changed and syncs; with nothing written, the hot files that differ between the
    # machines are no reason to commit: committing them would take the shared history's hot state back and forth.
    before = git(remote, "rev-list", "--count", "main")
    for _ in range(3):
        settle(a, b)
    assert git(remote, "rev-list", "--count", "main") == before
    assert '"a-session"' in (a.workspace(WS) / "hot" / "context.json").read_text()
    assert '"b-session"' in (b.workspace(WS) / "hot" / "context.json").read_text()

    # A change of a's session is committed and reaches the remote; b's files keep b's session.
    a.call("progress.update", workspace=WS, step="a's next step")
    settle(a, b)
    assert "a's next step" in git(remote, "show", "main:hot/context.json")
    assert "a's next step" not in (b.workspace(WS) / "hot" / "context.json").read_text()
    assert '"b-session"' in (b.workspace(WS) / "hot" / "context.json").read_text()
    after = git(remote, "rev-list", "--count", "main")
    for _ in range(3):
        settle(a, b)
    assert git(remote, "rev-list", "--count", "main") == after


def test_a_checkpoint_right_after_a_sync_commits_and_plans_from_this_machines_own_session(
    make_daemon: Callable[..., RunningDaemon], short_root: Path
) -> None:
    remote = make_remote(short_root)
    configs = {name: host_config(short_root / name, remote) for name in ("a", "b")}
    for config in configs.values():
        config["workspaces"][WS]["budget"] = {"hot": 2000}  # 40 notes: more than the recent window, under 80%
    a, b = (make_daemon(name, config) for name, config in configs.items())
    a.call("session.start", workspace=WS, task="a's task", session_id="a-session")
    for i in range(40):
        a.call("hot.note", workspace=WS, text=f"a's note {i}: the parser keeps its offsets in bytes")
    b.call("session.start", workspace=WS, task="b's task", session_id="b-session")
    settle(a, b)
    b.call("progress.update", workspace=WS, step="b's later step")
    settle(b, a)  # a fast-forwards to b's session: a's hot files are now a's, its HEAD b's

    record = a.call("checkpoint.run", workspace=WS)["checkpoint"]

    def committed(commit: str, name: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(git(a.workspace(WS), "show", f"{commit}:hot/{name}"))
        return doc

    assert committed(record["pre_commit"], "context.json")["session_id"] == "a-session"
    notes = {n["id"] for n in committed(record["pre_commit"], "memd.json")["notes"]}
    assert len(notes) == 40
    assert record["compressed"] and set(record["compressed"]) <= notes  # a's notes, read back from that commit
    assert committed(record["post_commit"], "context.json")["session_id"] == "a-session"


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
    a, b, remote = hosts
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
        # The remote is a local path, so b's push ran the remote's side (git receive-pack) in b's process group,
        # and the kill may have stopped it holding the branch's lock: a crash of the remote's machine, which no
        # client can undo. A person removes the lock (the test below: memd names it); here, the kill's test does.
        for lock in remote.glob("refs/heads/*.lock"):
            lock.unlink()
        b.start()
    settle(a, b)
    for d in (a, b):
        actions = warm_actions(d)
        assert all(actions[k] == 1 for k in acknowledged), [k for k in acknowledged if actions[k] != 1]
        assert git(d.workspace(WS), "fsck", "--no-progress", check=False) is not None


def test_a_branch_lock_left_on_the_remote_is_named_in_the_sync_and_the_sync_goes_on_once_it_is_removed(
    hosts: tuple[RunningDaemon, RunningDaemon, Path],
) -> None:
    a, b, remote = hosts
    a.call("warm.log", workspace=WS, action="a before the lock")
    sync_until_ok(a)
    b.call("warm.log", workspace=WS, action="b while the remote is locked")
    lock = remote / "refs" / "heads" / "main.lock"
    lock.write_bytes(b"")  # what a push killed on the remote's machine in the middle of its ref update leaves

    report = sync(b)

    assert report["state"] == "error", report
    assert str(lock) in report["error"] and "remove that file" in report["error"]
    assert "kept moving" not in report["error"]
    assert git(remote, "rev-parse", "main").strip() == git(a.workspace(WS), "rev-parse", "HEAD").strip()
    status = b.call("status")["workspaces"][WS]["snapshot"]["sync"]
    assert status["state"] == "error" and str(lock) in status["error"]

    lock.unlink()
    sync_until_ok(b)
    sync_until_ok(a)
    assert warm_actions(a)["b while the remote is locked"] == 1
    assert warm_actions(b)["a before the lock"] == 1


def _ignore(fn: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):
        fn()


# --- one machine in this process: the moments inside a sync's publish, reached exactly ------------------------
#
# The other machine is a person's clone of the remote (git by hand); this one is memd's Workspace, Snapshotter and
# Syncer in this process, so a test can stand in for the publish's decision and act right inside its window.


class Machine:
    def __init__(self, root: Path, remote: str, io: ThreadPoolExecutor, counter: TokenCounter, name: str = WS):
        self.config = SnapshotConfig(settle_seconds=0.01, remote=remote, sync=True, push_timeout_seconds=20.0)
        self.ws = Workspace(WorkspaceConfig(name, root / "ws" / name), counter, SystemClock(), io)
        self.ws.open()
        self.snapshots = Snapshotter(self.config, root / "state", io)
        self.snapshots.track(self.ws)
        self.syncer = Syncer(self.snapshots, self.config, io, sys.executable, root / "state" / "merge.attributes")

    def track(self, ws: Workspace) -> None:
        self.snapshots.track(ws)

    @property
    def root(self) -> Path:
        return self.ws.root

    async def sync(self) -> dict[str, Any]:
        return await self.syncer.sync(self.ws)

    def head(self) -> str:
        return git(self.root, "rev-parse", "HEAD").strip()


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter.for_encoding("cl100k_base")


@pytest.fixture
def io() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-io") as executor:
        yield executor


def in_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def person_clone(remote: Path, where: Path) -> Path:
    git(where.parent, "clone", "--quiet", str(remote), str(where))
    return where


def person_push(clone: Path, message: str) -> str:
    git(clone, "add", "-A")
    git(clone, "commit", "--quiet", "-m", message)
    git(clone, "push", "--quiet", "origin", "HEAD:main")
    return git(clone, "rev-parse", "HEAD").strip()


MEMORY = "# Agent Memory\n\n## Auth\n- [2024-03-01] tokens expire after 1h\n"


def test_a_remote_tree_with_dot_dot_entries_is_refused_and_nothing_is_written_outside_the_tier(
    tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter
) -> None:
    remote = make_remote(tmp_path)

    async def test() -> None:
        a = Machine(tmp_path / "a", str(remote), io, counter)
        (a.root / "warm" / "2024-03-01.md").write_text("### 09:00:00 - start\n\n")
        assert (await a.sync())["state"] == "ok"
        # Another "machine" pushes a commit built by plumbing: warm/../escaped and warm/../../outside.
        blob = git(remote, "hash-object", "-w", "--stdin", input_text="evil\n").strip()
        inner = git(remote, "mktree", input_text=f"100644 blob {blob}\tescaped\n").strip()
        deeper = git(remote, "mktree", input_text=f"040000 tree {inner}\t..\n100644 blob {blob}\toutside\n").strip()
        warm = git(remote, "ls-tree", "main:warm") + f"040000 tree {deeper}\t..\n"
        root_entries = [e for e in git(remote, "ls-tree", "main").splitlines() if not e.endswith("\twarm")]
        tree = git(
            remote,
            "mktree",
            input_text="\n".join([*root_entries, f"040000 tree {git(remote, 'mktree', input_text=warm).strip()}\twarm"])
            + "\n",
        ).strip()
        evil = git(remote, "commit-tree", tree, "-p", "main", "-m", "crafted").strip()
        git(remote, "update-ref", "refs/heads/main", evil)
        before = a.head()

        report = await a.sync()

        assert report["state"] == "error" and "fetch" in report["error"] and "'..'" in report["error"]  # fsck
        assert not (a.root / "escaped").exists() and not (a.root.parent / "outside").exists()
        assert not (a.root.parent / "escaped").exists() and not (a.root / "outside").exists()
        assert a.head() == before
        await a.ws.close()

    in_loop(test)


@pytest.mark.parametrize(
    ("path", "written"),
    [
        ("warm/2024-03-01.md", True),
        ("warm/archive/2024-03.md.gz", True),
        ("cold/MEMORY.md", True),
        ("cold/PROPOSED.md", True),
        ("warm/../x", False),
        ("warm/archive/../../x", False),
        ("warm/.git/config", False),
        ("cold/run.sh", False),
        ("warm/notes.md", False),
        ("/etc/passwd", False),
        ("warm//2024-03-01.md", False),
    ],
)
def test_a_sync_writes_only_memds_own_files_into_a_workspace(path: str, written: bool) -> None:
    assert gitsync.memd_file(path) is written


def test_a_file_memd_does_not_own_in_the_remote_is_reported_not_written(
    tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter
) -> None:
    remote = make_remote(tmp_path)

    async def test() -> None:
        a = Machine(tmp_path / "a", str(remote), io, counter)
        (a.root / "cold" / "MEMORY.md").write_text(MEMORY)
        assert (await a.sync())["state"] == "ok"
        other = person_clone(remote, tmp_path / "other")
        (other / "cold" / "run.sh").write_text("#!/bin/sh\nrm -rf ~\n")
        person_push(other, "not a memd file")
        before = a.head()

        report = await a.sync()

        assert report["state"] == "conflict"
        assert [c["path"] for c in report["conflicts"]] == ["cold/run.sh"] and report["resolve"]
        assert not (a.root / "cold" / "run.sh").exists()
        assert a.head() == before
        await a.ws.close()

    in_loop(test)


def test_a_learning_edited_here_while_the_sync_merges_the_other_machines_edit_of_it_is_reported_not_lost(
    tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = make_remote(tmp_path)

    async def test() -> None:
        a = Machine(tmp_path / "a", str(remote), io, counter)
        memory = a.root / "cold" / "MEMORY.md"
        memory.write_text(MEMORY)
        assert (await a.sync())["state"] == "ok"
        other = person_clone(remote, tmp_path / "other")
        (other / "cold" / "MEMORY.md").write_text(MEMORY.replace("1h", "2h"))
        theirs = person_push(other, "the other machine's edit")
        real = Syncer._decide
        edits = iter([lambda: memory.write_text(MEMORY.replace("1h", "30m"))])

        def person_saves_first(self: Syncer, root: Path, versions: Any) -> Any:
            next(edits, lambda: None)()  # the person's save lands after the sync committed and merged
            return real(self, root, versions)

        monkeypatch.setattr(Syncer, "_decide", person_saves_first)

        report = await a.sync()

        assert report["state"] == "conflict", report
        assert [c["path"] for c in report["conflicts"]] == ["cold/MEMORY.md"] and report["resolve"]
        assert "tokens expire after 30m" in memory.read_text()  # this side's own version, served on
        assert remote_head(remote) == theirs  # nothing pushed over the other machine's edit
        # Later snapshots and syncs go on reporting it; the other machine's edit is never reverted.
        await a.snapshots.snapshot(a.ws, "later")
        assert (await a.sync())["state"] == "conflict"
        assert git(remote, "show", "main:cold/MEMORY.md") == MEMORY.replace("1h", "2h")
        await a.ws.close()

    in_loop(test)


def test_a_persons_save_between_the_publishs_decision_and_its_write_is_kept_and_merged(
    tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = make_remote(tmp_path)

    async def test() -> None:
        a = Machine(tmp_path / "a", str(remote), io, counter)
        memory = a.root / "cold" / "MEMORY.md"
        memory.write_text(MEMORY)
        assert (await a.sync())["state"] == "ok"
        other = person_clone(remote, tmp_path / "other")
        (other / "cold" / "MEMORY.md").write_text(MEMORY + "\n## Ops\n- [2024-03-02] from the other machine\n")
        person_push(other, "the other machine's learning")
        real = Syncer._decide
        saves = iter([lambda: memory.write_text(memory.read_text() + "\n## Mine\n- [2024-03-03] saved by hand\n")])

        def person_saves_after(self: Syncer, root: Path, versions: Any) -> Any:
            decided = real(self, root, versions)
            next(saves, lambda: None)()  # read and merged: the person saves before the publish renames
            return decided

        monkeypatch.setattr(Syncer, "_decide", person_saves_after)

        report = await a.sync()

        assert report["state"] == "ok", report
        texts = {x.text for x in cold_format.parse_memory(memory.read_text())}
        assert texts == {"tokens expire after 1h", "from the other machine", "saved by hand"}
        await a.ws.close()

    in_loop(test)


def test_cancelling_a_sync_in_its_publish_holds_the_writer_until_the_files_are_written(
    tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = make_remote(tmp_path)

    async def test() -> None:
        a = Machine(tmp_path / "a", str(remote), io, counter)
        await a.ws.write(lambda draft: draft.log("first here"))
        assert (await a.sync())["state"] == "ok"
        day = f"warm/{a.ws.today().isoformat()}.md"
        other = person_clone(remote, tmp_path / "other")
        with (other / day).open("a") as f:
            f.write("### 00:00:01 - from the other machine\n\n")
        person_push(other, "the other machine's entry")
        inside, go_on = threading.Event(), threading.Event()
        order: list[str] = []
        real_decide, real_publish = Syncer._decide, Syncer._publish_files

        def blocking_decide(self: Syncer, root: Path, versions: Any) -> Any:
            decided = real_decide(self, root, versions)  # today's file read and merged
            inside.set()
            go_on.wait()
            return decided

        def recorded_publish(self: Syncer, pinned: Any, versions: Any) -> Any:
            published = real_publish(self, pinned, versions)
            order.append("sync's files written")
            return published

        monkeypatch.setattr(Syncer, "_decide", blocking_decide)
        monkeypatch.setattr(Syncer, "_publish_files", recorded_publish)
        sync_task = asyncio.create_task(a.sync())
        await asyncio.to_thread(inside.wait)
        sync_task.cancel()  # the job's timeout, or shutdown
        write = asyncio.create_task(a.ws.write(lambda draft: draft.log("written meanwhile")))
        write.add_done_callback(lambda _: order.append("write acknowledged"))
        while not (write.done() or a.ws.exclusive._waiters):  # acknowledged, or queued behind the publish
            await asyncio.sleep(0)
        go_on.set()
        await write
        with contextlib.suppress(asyncio.CancelledError):
            await sync_task

        assert order == ["sync's files written", "write acknowledged"]
        actions = [e.action for e in warm_format.parse_day((a.root / day).read_text(), current=True)]
        assert "written meanwhile" in actions and "from the other machine" in actions and "first here" in actions
        await a.ws.close()

    in_loop(test)


def test_one_workspace_failing_unexpectedly_does_not_stop_the_others_and_each_run_starts_further(
    tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = make_remote(tmp_path)
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(remote.parent / "healthy.git"))

    async def test() -> None:
        a = Machine(tmp_path / "a", str(remote.parent / "{name}.git"), io, counter)
        healthy = Workspace(WorkspaceConfig("healthy", tmp_path / "a" / "ws" / "healthy"), counter, SystemClock(), io)
        healthy.open()
        a.track(healthy)
        real = Syncer._round
        started: list[str] = []

        async def broken_for_one(self: Syncer, ws: Workspace, *args: Any) -> str:
            started.append(ws.name)
            if ws.name == WS:
                raise AssertionError("a bug met in this workspace only")
            return await real(self, ws, *args)

        monkeypatch.setattr(Syncer, "_round", broken_for_one)

        first = await a.syncer.sync_all()
        second = await a.syncer.sync_all()

        assert first == second == {WS: "error", "healthy": "ok"}
        shown = a.snapshots.status_for(WS)["sync"]
        assert shown["state"] == "error" and "a bug met in this workspace only" in shown["error"]
        assert started == [WS, "healthy", "healthy", WS]  # each run starts one workspace further
        await a.ws.close()
        await healthy.close()

    in_loop(test)


def test_credentials_in_the_remote_url_are_never_shown(
    tmp_path: Path, io: ThreadPoolExecutor, counter: TokenCounter
) -> None:
    async def test() -> None:
        a = Machine(tmp_path / "a", "https://memd-bot:s3cret-t0ken@127.0.0.1:9/{name}.git", io, counter)
        (a.root / "cold" / "MEMORY.md").write_text(MEMORY)

        report = await a.sync()

        assert report["state"] == "error"
        assert report["remote"] == f"https://127.0.0.1:9/{WS}.git"
        shown = json.dumps([report, a.snapshots.status_for(WS)])
        assert "s3cret" not in shown and "memd-bot" not in shown
        await a.ws.close()

    in_loop(test)


def test_pushes_stuck_on_a_dead_remote_never_hold_up_another_workspaces_snapshot_and_its_writes(
    tmp_path: Path, counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memd's git threads are few (two): two workspaces pushing to a remote that does not answer (up to
    push_timeout_seconds each) must not leave a third workspace's snapshot, which holds that workspace's writer
    while git stages and commits, waiting for a git thread, nor its writes waiting behind that snapshot."""
    remote = make_remote(tmp_path)
    stuck, release = threading.Event(), threading.Event()
    real_push = gitsync.push
    pushing = 0

    def dead_remote_push(*args: Any) -> Any:
        nonlocal pushing
        pushing += 1
        if pushing >= 2:
            stuck.set()
        assert release.wait(60), "the test never released the pushes"
        return real_push(*args)

    async def test() -> None:
        with (
            ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-io") as io,
            ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-git") as git_io,
        ):  # as in the daemon: fsyncs on one pool, git on its own two threads
            config = SnapshotConfig(settle_seconds=60, remote=str(remote), sync=True, push_timeout_seconds=60.0)
            snapshots = Snapshotter(config, tmp_path / "state", git_io)
            syncer = Syncer(snapshots, config, git_io, sys.executable, tmp_path / "state" / "merge.attributes")
            spaces = []
            for name in ("a", "b", "c"):
                ws = Workspace(WorkspaceConfig(name, tmp_path / "ws" / name), counter, SystemClock(), io)
                ws.open()
                snapshots.track(ws)
                (ws.root / "warm" / "2024-03-01.md").write_text(f"### 09:00:00 - {name}\n\n")
                spaces.append(ws)
            a, b, c = spaces
            monkeypatch.setattr(gitsync, "push", dead_remote_push)
            syncs = [asyncio.ensure_future(syncer.sync(ws)) for ws in (a, b)]
            assert await asyncio.get_running_loop().run_in_executor(None, stuck.wait, 60), "the pushes never began"
            try:
                await asyncio.wait_for(snapshots.snapshot(c, "interval"), 30)  # a hang detector, not a timing check
                await asyncio.wait_for(c.write(lambda d: d.learn("Notes", "written meanwhile")), 30)
            finally:
                release.set()
                await asyncio.gather(*syncs, return_exceptions=True)

    in_loop(test)
