"""Git snapshots of real daemons, checked with the real git CLI the way a person would check them.

What memd promises (DESIGN.md contracts 2, 3, 5 and 8): writes end up in commits that carry Memd-Reason,
Memd-Session and Memd-Step trailers, bursts are coalesced and no commit is empty, `git log hot/context.json` in the
workspace tells the story, stale locks are recovered and live ones waited on, a merge in progress or a broken
repository degrades snapshots only (writes go on, status says why), restore is a new commit, pushes never force,
someone else's repository is never committed into, retention commits before it deletes, and SIGTERM snapshots.

Every test runs real `python -m memd run` processes (tests/harness.py) and waits with bounded polling; no test
asserts on how long something took. One daemon serves the tests that need nothing special from its config; each
workspace there belongs to one test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from harness import RunningDaemon, base_config, module_daemon, person_env, wait_for

from memd.errors import InvalidParams, MemdError

T = TypeVar("T")
MakeDaemon = Callable[..., RunningDaemon]
DEADLINE = 20.0  # generous: only ever reached when something is wrong
GIT = shutil.which("git") or "git"
FAST = {"settle_seconds": 0.2, "max_wait_seconds": 1.0}
EXPIRED_DAY = "2020-01-01.md"
EXPIRED_TEXT = "# Activity Log 2020-01-01\n\n### 09:00:00 - Old work\n```\nfile: a.py\n```\nResult: done\n"


# --- helpers ----------------------------------------------------------------------------------------------------


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """git as a person runs it in a directory (their identity, nothing inherited from memd)."""
    out = subprocess.run([GIT, *args], cwd=cwd, env=person_env(), capture_output=True, text=True, check=False)
    if check:
        assert out.returncode == 0, f"git {' '.join(args)} in {cwd} failed: {out.stderr}"
    return out.stdout


def git_ok(cwd: Path, *args: str) -> bool:
    return subprocess.run([GIT, *args], cwd=cwd, env=person_env(), capture_output=True, check=False).returncode == 0


def memd_cli(daemon: RunningDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    """The `memd` command as a user runs it: a fresh interpreter, `--config FILE`, captured output."""
    return subprocess.run(
        [sys.executable, "-m", "memd", "--config", str(daemon.config_path), *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        env=dict(os.environ),
    )


def snap_status(daemon: RunningDaemon, name: str) -> dict[str, Any]:
    return dict(daemon.call("status")["workspaces"][name]["snapshot"])


def git_dir_of(daemon: RunningDaemon, name: str) -> Path:
    """memd's repository for a workspace, as status reports it (the workspace gets one on its first snapshot)."""
    rev = daemon.call("snapshot.run", workspace=name)["rev"]
    assert rev, f"no snapshot of {name}: {snap_status(daemon, name)}"
    return Path(snap_status(daemon, name)["git_dir"])


def committed(daemon: RunningDaemon, name: str, text: str) -> str:
    """Wait for the debounced snapshot (nobody asks for one) to commit the note `text` in hot; returns that commit.

    Used before a restore, so that no debounced snapshot is still due when it runs."""
    ws = daemon.workspace(name)

    def head_has_it() -> str | None:
        if not has_commits(ws) or text not in git(ws, "show", "HEAD:hot/memd.json", check=False):
            return None
        return git(ws, "rev-parse", "HEAD").strip()

    return wait_for(head_has_it, f"the debounced snapshot of {text!r} in {name}")


def trailer_log(cwd: Path, *args: str) -> list[dict[str, str]]:
    """`git log --format=%(trailers)` in `cwd`, one dict of trailers per commit, newest first."""
    out = git(cwd, "log", "--format=%H%n%(trailers:only,unfold)%x1e", *args)
    commits = []
    for record in out.split("\x1e"):
        lines = record.strip("\n").splitlines()
        if not lines:
            continue
        trailers = {"rev": lines[0]}
        for line in lines[1:]:
            key, sep, value = line.partition(": ")
            if sep:
                trailers[key] = value
        commits.append(trailers)
    return commits


def has_commits(workspace: Path) -> bool:
    return (workspace / ".git").is_dir() and git_ok(workspace, "rev-parse", "--verify", "--quiet", "HEAD")


def commit_count(cwd: Path, *git_args: str) -> int:
    return int(git(cwd, *git_args, "rev-list", "--count", "HEAD").strip())


def hot_text(daemon: RunningDaemon, name: str) -> str:
    """The hot file that holds the notes (memd's own: hot/memd.json; the session's fields are in context.json)."""
    return (daemon.workspace(name) / "hot" / "memd.json").read_text(encoding="utf-8")


def seed_expired_day(workspace: Path) -> None:
    (workspace / "warm").mkdir(parents=True, exist_ok=True)
    (workspace / "warm" / EXPIRED_DAY).write_text(EXPIRED_TEXT, encoding="utf-8")


def take_index_lock(git_dir: Path) -> Path:
    """Hold `index.lock` the way a person's git does: created exclusively, so never while memd's git holds it."""
    lock = git_dir / "index.lock"

    def create() -> bool:
        try:
            os.close(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            return False
        return True

    wait_for(create, f"memd's git to release {lock}")
    return lock


def instrumented_git(directory: Path) -> dict[str, str]:
    """A `git` first on PATH that leaves marker files in `directory` and, while `directory/slow` exists, makes the
    repository lookup (`rev-parse --is-inside-work-tree`) take 1.5 s, like a big repository on a slow disk; while
    `directory/gate` exists, `add` waits (leaving `directory/adding`): a snapshot's staging held open; while
    `directory/gc-gate` exists, `gc` runs on (leaving `directory/gc`). Returns the env for a daemon that should
    use it."""
    directory.mkdir(parents=True, exist_ok=True)
    wrapper = directory / "git"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case " $* " in\n'
        f'  *" --is-inside-work-tree "*) : > "{directory}/locating"; [ -e "{directory}/slow" ] && sleep 1.5;;\n'
        f'  *" ls-tree "*) : > "{directory}/ls-tree";;\n'
        f'  *" add "*) while [ -e "{directory}/gate" ]; do : > "{directory}/adding"; sleep 0.01; done;;\n'
        # A gc of a big history: runs while `gc-gate` exists (at most a minute, should nothing end it).
        f'  *" gc "*) : > "{directory}/gc"; i=0; while [ -e "{directory}/gc-gate" ] && [ $i -lt 1200 ]; do\n'
        "      sleep 0.05; i=$((i + 1)); done;;\n"
        "esac\n"
        f'exec "{GIT}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return {"PATH": f"{directory}:{os.environ.get('PATH', '')}"}


# --- one daemon for the plain cases -------------------------------------------------------------------------------

SHARED = [
    "trailers",
    "story",
    "session",
    "burst",
    "stale",
    "live",
    "merge",
    "restore",
    "restore_cli",
    "blocked",
    "refused",
    "sweep",
    "corrupt_head",
    "corrupt_objects",
]


@pytest.fixture(scope="module")
def memd() -> Iterator[RunningDaemon]:
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        root = Path(d) / "m"
        config = base_config(root, workspaces={name: root / "ws" / name for name in SHARED}, snapshot=FAST)
        seed_expired_day(root / "ws" / "sweep")
        daemon = module_daemon(root, config)
        try:
            yield daemon.start()
        finally:
            daemon.kill()


# --- commits for writes, with trailers ----------------------------------------------------------------------------


def test_writes_are_committed_with_reason_session_and_step_trailers(memd: RunningDaemon) -> None:
    ws = memd.workspace("trailers")
    memd.call("session.start", workspace="trailers", task="Port the parser", session_id="sess-trailers")
    memd.call("progress.update", workspace="trailers", step="Reading the grammar")

    commit = wait_for(
        lambda: (
            next((c for c in trailer_log(ws) if c.get("Memd-Step") == "Reading the grammar"), None)
            if has_commits(ws)
            else None
        ),
        "a commit of the step (debounced, nobody asked for a snapshot)",
    )

    assert commit["Memd-Reason"]
    assert commit["Memd-Session"] == "sess-trailers"
    listed = {c["rev"]: c for c in memd.call("history.list", workspace="trailers")["commits"]}
    assert listed[commit["rev"]]["reason"] == commit["Memd-Reason"]
    assert listed[commit["rev"]]["session"] == "sess-trailers"
    assert listed[commit["rev"]]["step"] == "Reading the grammar"
    assert "Port the parser" in git(ws, "log", "-1", "--format=%b", commit["rev"])


def test_git_log_of_the_hot_file_tells_the_story_in_order(memd: RunningDaemon) -> None:
    ws = memd.workspace("story")
    steps = ["Reproduce the bug", "Write a failing test", "Fix the session check"]
    memd.call("session.start", workspace="story", task="Fix login bug", session_id="sess-story")
    for step in steps:
        memd.call("progress.update", workspace="story", step=step)
        assert memd.call("snapshot.run", workspace="story")["rev"]

    logged = [c.get("Memd-Step") for c in trailer_log(ws, "--", "hot/context.json")]
    last_change = git(ws, "diff", "HEAD~1", "--", "hot/context.json")

    assert [s for s in logged if s] == list(reversed(steps))
    assert all(c.get("Memd-Session") == "sess-story" for c in trailer_log(ws, "--", "hot/context.json"))
    removed = [line for line in last_change.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in last_change.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert any("Write a failing test" in line for line in removed), last_change
    assert any("Fix the session check" in line for line in added), last_change
    assert git(ws, "status", "--porcelain", "--", "hot") == ""


def test_session_start_makes_a_commit_with_reason_session_start(memd: RunningDaemon) -> None:
    memd.call("session.start", workspace="session", task="Triage", session_id="sess-start")

    commit = wait_for(
        lambda: next(
            (c for c in memd.call("history.list", workspace="session")["commits"] if c["reason"] == "session start"),
            None,
        ),
        "a commit with reason 'session start'",
    )

    assert commit["session"] == "sess-start"
    assert git(memd.workspace("session"), "show", f"{commit['rev']}:hot/context.json").count("Triage") >= 1


def test_a_burst_of_writes_is_coalesced_into_few_commits_none_of_them_empty(memd: RunningDaemon) -> None:
    ws = memd.workspace("burst")
    clients, per_client = 4, 50

    def writer(n: int) -> None:
        with memd.client() as c:
            for i in range(per_client):
                if i % 2:
                    c.call("hot.note", workspace="burst", text=f"note {n}-{i}")
                else:
                    c.call("warm.log", workspace="burst", action=f"step {n}-{i}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    today = sorted((ws / "warm").glob("*.md"))[-1].name

    def settled() -> bool:
        if not has_commits(ws) or snap_status(memd, "burst")["pending"]:
            return False
        head = subprocess.run([GIT, "show", "HEAD:hot/memd.json"], cwd=ws, capture_output=True, env=person_env())
        warm = subprocess.run([GIT, "show", f"HEAD:warm/{today}"], cwd=ws, capture_output=True, env=person_env())
        return (
            head.stdout == (ws / "hot" / "memd.json").read_bytes() and warm.stdout == (ws / "warm" / today).read_bytes()
        )

    wait_for(settled, "the last write of the burst to be committed")

    # A debounced commit needs settle_seconds of quiet (or max_wait_seconds of writes) since the last one, so a
    # burst that took `elapsed` seconds makes at most elapsed / settle_seconds of them, plus the one after it.
    # The bound grows with the burst's duration, so a slow machine cannot break it; one commit per write would.
    commits = commit_count(ws)
    most = int(elapsed / FAST["settle_seconds"]) + 2
    assert 1 <= commits <= most, (
        f"{commits} commits for {clients * per_client} writes in {elapsed:.1f} s (at most {most})"
    )
    changed = git(ws, "log", "--format=%x1e%H", "--name-only").split("\x1e")[1:]
    for record in changed:
        rev, *files = record.split()
        assert files, f"commit {rev} changes nothing"


# --- locks and unsafe states --------------------------------------------------------------------------------------


def test_a_stale_index_lock_is_recovered(memd: RunningDaemon) -> None:
    memd.call("hot.note", workspace="stale", text="before the crash")
    lock = take_index_lock(git_dir_of(memd, "stale"))
    old = time.time() - 120
    os.utime(lock, (old, old))  # left by a git that died two minutes ago; no git is running here
    memd.call("hot.note", workspace="stale", text="after the crash")

    result = memd.call("snapshot.run", workspace="stale")

    assert result["rev"], result
    assert result["snapshot"]["state"] == "ok"
    assert not lock.exists()
    assert "after the crash" in git(memd.workspace("stale"), "show", "HEAD:hot/memd.json")


def test_a_live_index_lock_is_waited_on(memd: RunningDaemon) -> None:
    memd.call("hot.note", workspace="live", text="first")
    git_dir = git_dir_of(memd, "live")
    memd.call("hot.note", workspace="live", text="not committed yet")
    lock = take_index_lock(git_dir)  # a person's git is working in the repository right now
    results: list[Any] = []
    snapshot = threading.Thread(target=lambda: results.append(memd.call("snapshot.run", workspace="live")))
    snapshot.start()
    waiting = wait_for(lambda: snap_status(memd, "live")["waiting_for_git"], "the snapshot to wait for the lock")
    assert waiting == str(lock)
    assert lock.exists(), "memd took away the lock of a running git"
    lock.unlink()
    snapshot.join(DEADLINE)

    assert not snapshot.is_alive()
    [result] = results
    assert result["rev"], result
    assert result["snapshot"]["state"] == "ok"
    assert "not committed yet" in git(memd.workspace("live"), "show", "HEAD:hot/memd.json")


def test_a_live_index_lock_never_holds_up_writes(memd: RunningDaemon) -> None:
    memd.call("hot.note", workspace="blocked", text="first")
    git_dir = git_dir_of(memd, "blocked")
    lock = take_index_lock(git_dir)  # e.g. a person's `git commit` with the editor open
    try:
        with memd.client(timeout=DEADLINE) as c:  # a hang detector: git's own lock wait is 30 s
            c.call("hot.note", workspace="blocked", text="starts a debounced snapshot that meets the lock")
            wait_for(lambda: snap_status(memd, "blocked")["waiting_for_git"], "the debounced snapshot to meet the lock")
            written = c.call("hot.note", workspace="blocked", text="acknowledged while git holds the lock")
    finally:
        lock.unlink()

    assert written["note"]


def test_a_merge_in_progress_pauses_snapshots_but_not_writes(memd: RunningDaemon) -> None:
    memd.call("hot.note", workspace="merge", text="before the merge")
    git_dir = git_dir_of(memd, "merge")
    ws = memd.workspace("merge")
    head = git(ws, "rev-parse", "HEAD").strip()
    (git_dir / "MERGE_HEAD").write_text(head + "\n")

    memd.call("hot.note", workspace="merge", text="during the merge")
    memd.call("warm.log", workspace="merge", action="kept working")
    during = memd.call("snapshot.run", workspace="merge")

    assert during["rev"] is None and during["created"] is False
    status = snap_status(memd, "merge")
    assert status["state"] == "repo-unsafe"
    assert "MERGE_HEAD" in status["last_error"]
    assert git(ws, "rev-parse", "HEAD").strip() == head
    assert "during the merge" in hot_text(memd, "merge")

    (git_dir / "MERGE_HEAD").unlink()
    after = memd.call("snapshot.run", workspace="merge")

    assert after["rev"] and after["rev"] != head
    assert snap_status(memd, "merge")["state"] == "ok"
    assert "during the merge" in git(ws, "show", "HEAD:hot/memd.json")


@pytest.mark.parametrize("damage", ["garbage HEAD", "objects deleted"])
def test_a_corrupt_repository_shows_in_status_and_writes_go_on(memd: RunningDaemon, damage: str) -> None:
    name = "corrupt_head" if damage == "garbage HEAD" else "corrupt_objects"
    memd.call("hot.note", workspace=name, text="healthy")
    git_dir = git_dir_of(memd, name)
    head_file, objects = git_dir / "HEAD", git_dir / "objects"
    saved_head = head_file.read_bytes()
    if damage == "garbage HEAD":
        head_file.write_bytes(b"\x00\x01 this is not a ref\n")
    else:
        objects.rename(git_dir / "objects.moved")

    written = memd.call("hot.note", workspace=name, text="written while the repository is broken")
    result = memd.call("snapshot.run", workspace=name)

    assert written["note"]
    assert "written while the repository is broken" in hot_text(memd, name)
    assert result["rev"] is None
    status = snap_status(memd, name)
    assert status["state"] == "error"
    assert status["last_error"]

    if damage == "garbage HEAD":  # repaired: the next snapshot works again
        head_file.write_bytes(saved_head)
    else:
        (git_dir / "objects.moved").rename(objects)
    repaired = memd.call("snapshot.run", workspace=name)
    assert repaired["rev"], repaired
    assert snap_status(memd, name)["state"] == "ok"
    assert "written while the repository is broken" in git(memd.workspace(name), "show", "HEAD:hot/memd.json")


# --- restore, show, diff -------------------------------------------------------------------------------------------


def test_restore_brings_a_state_back_as_a_new_commit(memd: RunningDaemon) -> None:
    ws = memd.workspace("restore")
    memd.call("hot.note", workspace="restore", text="state A")
    rev_a = committed(memd, "restore", "state A")
    state_a = git(ws, "show", f"{rev_a}:hot/memd.json")
    memd.call("hot.note", workspace="restore", text="state B")
    rev_b = committed(memd, "restore", "state B")
    before = len(memd.call("history.list", workspace="restore")["commits"])

    result = memd.call("snapshot.restore", workspace="restore", rev=rev_a, paths=["hot"])

    assert result["rev"] == rev_a
    assert "hot/memd.json" in result["changed"]
    assert hot_text(memd, "restore") == state_a
    assert "state B" not in json.dumps(memd.call("hot.get", workspace="restore")["hot"])
    history = memd.call("history.list", workspace="restore")["commits"]
    assert len(history) > before
    assert history[0]["rev"] == result["after"] != rev_b
    assert history[0]["trailers"]["Memd-Restored-From"] == rev_a
    assert git(ws, "show", "HEAD:hot/memd.json") == state_a
    assert rev_b in git(ws, "log", "--format=%H").split()


def test_a_restore_never_overwrites_a_write_acknowledged_after_its_before_commit(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    """The fuzz suite found a restore of HEAD answering "restored files but could not commit the result": a write
    acknowledged between the restore's "before" commit and its rewrite of the files was overwritten without ever
    being committed (lost for good), and the "after" state then equalled HEAD. Before-commit, restore and
    after-commit now hold the writer together: every acknowledged entry is in the files or in git history."""
    root = short_root / "rw"
    d = make_daemon("rw", config=base_config(root, workspaces={"w": root / "ws" / "w"}, snapshot=FAST))
    ws = d.workspace("w")
    d.call("warm.log", workspace="w", action="entry 0")
    assert d.call("snapshot.run", workspace="w")["rev"]
    acked: list[str] = []
    stop = threading.Event()

    def write() -> None:
        with d.client() as c:
            i = 1
            while not stop.is_set():
                c.call("warm.log", workspace="w", action=f"entry {i}")
                acked.append(f"entry {i}")
                i += 1

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    results = []
    try:
        wait_for(lambda: len(acked) > 20, "the writer to be under way")
        for _ in range(8):
            results.append(d.call("snapshot.restore", workspace="w", rev="HEAD", paths=["warm"]))
            count = len(acked)
            wait_for(lambda count=count: len(acked) > count + 5, "more writes after the restore")
    finally:
        stop.set()
        writer.join(DEADLINE)
    assert d.call("snapshot.run", workspace="w") is not None
    assert all(r["after"] for r in results), results

    in_files = "".join(p.read_text(encoding="utf-8") for p in (ws / "warm").glob("*.md"))
    in_history = git(ws, "log", "-p", "--format=", "--", "warm")
    missing = [a for a in acked if not re.search(rf"- {a}$", in_files + in_history, re.MULTILINE)]
    assert not missing, f"{len(missing)} acknowledged entries neither in the files nor in git history: {missing[:5]}"


BIG_MEMORY = "# Agent Memory\n" + "".join(
    f"\n## Topic {c}\n"
    + "".join(f"- [2024-01-0{1 + n % 9}] learning {n} about topic {c} and its details\n" for n in range(40))
    for c in range(40)
)  # over 64 KiB: learnings that come in a burst are appended to it (memd.tiers.cold_store.APPEND_FROM_CHARS)


def test_a_restore_of_a_snapshot_taken_in_a_burst_of_learnings_gives_its_appended_blocks_back_to_the_fold(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    """The fuzz suite found `## Fuzz` twice in a MEMORY.md for good: a snapshot taken in a burst holds the
    learnings memd appended at the end of the file, each as a block of its own (`## Category` and its line), not
    folded under their sections yet. Restored, the file had lost the mark that says those blocks are memd's (git
    keeps no extended attributes), so no fold ever took them back: a heading repeated, and every new category
    inserted after it. The snapshot's commit records the run, and the restore marks the restored file with it."""
    root = short_root / "rb"
    path = root / "ws" / "w"
    (path / "cold").mkdir(parents=True)
    memory = path / "cold" / "MEMORY.md"
    memory.write_text(BIG_MEMORY, encoding="utf-8")
    d = make_daemon("rb", config=base_config(root, workspaces={"w": path}, snapshot=FAST))

    def learn(category: str, text: str) -> None:
        d.call("cold.learn", workspace="w", category=category, learning=text)

    def in_a_burst(n: int) -> str | None:
        """Three learnings in quick succession and a snapshot: the commit, if it was made before the fold."""
        learn("Topic 3", f"first {n}")  # inserted: no learning came just before
        learn("Topic 3", f"second {n}")  # appended, as "## Topic 3" and its line
        learn("Brand new", f"third {n}")  # appended, a new category
        rev: str = d.call("snapshot.run", workspace="w")["rev"]
        held = git(path, "show", f"{rev}:cold/MEMORY.md")
        return rev if held.count("\n## Topic 3\n") == 2 else None  # else folded first (a slow machine): again

    rev = next(filter(None, (in_a_burst(n) for n in range(5))), None)
    assert rev, "no snapshot was taken before the burst's fold in five tries"
    snapshot = git(path, "show", f"{rev}:cold/MEMORY.md")
    wait_for(lambda: memory.read_text("utf-8").count("\n## Topic 3\n") == 1, "the burst's fold")
    learn("Later", "after the fold")

    d.call("snapshot.restore", workspace="w", rev=rev, paths=["cold"])
    assert memory.read_text("utf-8") == snapshot  # the blocks as they were, appended

    def folded() -> str | None:
        text = memory.read_text("utf-8")
        headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
        return text if len(headings) == len(set(headings)) else None

    wait_for(folded, "the restored blocks folded back under their sections, no heading twice")
    learn("After the restore", "a new category")
    text = memory.read_text("utf-8")
    assert sections(text) == {
        **sections(snapshot, merge=True),
        "After the restore": ["a new category"],
    }  # every learning of the snapshot once, under its one heading, and the one learned since


def sections(text: str, merge: bool = False) -> dict[str, list[str]]:
    """The learnings under each `## Category` of a MEMORY.md, by category, sorted (a fold puts a section's newest
    first; `merge`: a heading's repeats joined)."""
    found: dict[str, list[str]] = {}
    for block in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = block.partition("\n")
        assert merge or heading not in found, f"## {heading} twice"
        found.setdefault(heading, []).extend(re.findall(r"^- \[[0-9-]+\] (.+)$", body, re.MULTILINE))
    return {heading: sorted(learnings) for heading, learnings in found.items()}


def test_restore_show_and_diff_from_the_command_line(memd: RunningDaemon) -> None:
    ws = memd.workspace("restore_cli")
    memd.call("hot.note", workspace="restore_cli", text="state A")
    rev_a = committed(memd, "restore_cli", "state A")
    state_a = git(ws, "show", f"{rev_a}:hot/memd.json")
    memd.call("hot.note", workspace="restore_cli", text="state B")
    rev_b = committed(memd, "restore_cli", "state B")

    shown = memd_cli(memd, "show", "restore_cli", f"{rev_a}:hot/memd.json")
    diffed = memd_cli(memd, "diff", "restore_cli", rev_a)
    restored = memd_cli(memd, "restore", "restore_cli", rev_a, "hot")

    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == json.loads(state_a)
    assert diffed.returncode == 0, diffed.stderr
    assert "diff --git a/hot/memd.json b/hot/memd.json" in diffed.stdout
    assert "+" in diffed.stdout and "state B" in diffed.stdout
    assert restored.returncode == 0, restored.stderr
    assert hot_text(memd, "restore_cli") == state_a
    assert git(ws, "show", "HEAD:hot/memd.json") == state_a
    assert rev_b in git(ws, "log", "--format=%H").split()


def test_restore_succeeds_when_a_debounced_snapshot_is_due_at_the_same_time(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    marks = short_root / "git-marks"
    root = short_root / "rr"
    config = base_config(
        root, workspaces={"w": root / "ws" / "w"}, snapshot={"settle_seconds": 1.0, "max_wait_seconds": 2.0}
    )
    d = make_daemon("rr", config=config, env=instrumented_git(marks))
    ws = d.workspace("w")
    d.call("hot.note", workspace="w", text="state A")
    rev_a = d.call("snapshot.run", workspace="w")["rev"]
    state_a = git(ws, "show", f"{rev_a}:hot/memd.json")
    d.call("hot.note", workspace="w", text="state B")
    assert d.call("snapshot.run", workspace="w")["rev"]
    lock = take_index_lock(Path(snap_status(d, "w")["git_dir"]))  # holds the restore in its first snapshot
    restored: list[Any] = []

    def restore() -> None:
        try:
            restored.append(d.call("snapshot.restore", workspace="w", rev=rev_a, paths=["hot"]))
        except MemdError as exc:
            restored.append(exc)

    (marks / "ls-tree").unlink(missing_ok=True)
    restoring = threading.Thread(target=restore, daemon=True)
    restoring.start()
    wait_for((marks / "ls-tree").exists, "the restore to read the old files")
    with (ws / "cold" / "MEMORY.md").open("a", encoding="utf-8") as f:  # a person edits a file meanwhile
        f.write("# Agent Memory\n\n## Notes\n- [2026-01-01] edited by hand\n")
    wait_for(lambda: snap_status(d, "w")["pending"], "memd to adopt the outside edit")
    wait_for(lambda: snap_status(d, "w")["queued"], "the debounced snapshot for that edit to queue behind the restore")
    assert snap_status(d, "w")["waiting_for_git"] == str(lock)  # the restore, still waiting for the person's git
    lock.unlink()
    restoring.join(DEADLINE)

    [result] = restored
    assert not isinstance(result, Exception), result
    assert hot_text(d, "w") == state_a
    assert trailer_log(ws, "-1")[0].get("Memd-Restored-From") == rev_a


@pytest.mark.parametrize("path", ["../outside", "/etc/passwd", ".git", "hot/../../outside", "notes"])
def test_restore_outside_hot_warm_cold_is_refused(memd: RunningDaemon, path: str) -> None:
    memd.call("hot.note", workspace="refused", text="keep me")
    rev = (
        memd.call("snapshot.run", workspace="refused")["rev"]
        or git(memd.workspace("refused"), "rev-parse", "HEAD").strip()
    )
    before = hot_text(memd, "refused")

    with pytest.raises(InvalidParams) as refused:
        memd.call("snapshot.restore", workspace="refused", rev=rev, paths=[path])

    assert refused.value.code == -32602
    assert hot_text(memd, "refused") == before


# --- retention ----------------------------------------------------------------------------------------------------


def test_retention_commits_a_day_file_before_deleting_it(memd: RunningDaemon) -> None:
    ws = memd.workspace("sweep")
    assert (ws / "warm" / EXPIRED_DAY).exists()

    result = memd.call("retention.sweep", workspace="sweep", dry_run=False, confirm=True)

    assert result["results"][0]["removed"] == [EXPIRED_DAY]
    assert not (ws / "warm" / EXPIRED_DAY).exists()
    revs = git(ws, "log", "--all", "--format=%H", "--", f"warm/{EXPIRED_DAY}").split()
    assert revs, "the deleted day file never reached git history"
    assert any(git(ws, "show", f"{rev}:warm/{EXPIRED_DAY}", check=False) == EXPIRED_TEXT for rev in revs), (
        "no commit holds the day file's content"
    )


# --- special daemons ----------------------------------------------------------------------------------------------


def test_without_git_writes_go_on_and_status_says_snapshots_are_disabled(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    empty = short_root / "bin-without-git"
    empty.mkdir()
    assert shutil.which("git", path=str(empty)) is None
    root = short_root / "nogit"
    d = make_daemon(
        "nogit",
        config=base_config(root, workspaces={"w": root / "ws" / "w"}, snapshot=FAST),
        env={"PATH": str(empty)},
    )

    d.call("session.start", workspace="w", task="No git here")
    d.call("hot.note", workspace="w", text="still written")
    d.call("warm.log", workspace="w", action="still logged")
    result = d.call("snapshot.run", workspace="w")

    assert result["rev"] is None and result["created"] is False
    status = snap_status(d, "w")
    assert status["state"] == "disabled"
    assert "git" in status["reason"]
    assert "still written" in hot_text(d, "w")
    assert not (d.workspace("w") / ".git").exists()
    with pytest.raises(MemdError, match="git"):
        d.call("history.list", workspace="w")


def test_graceful_shutdown_makes_a_final_snapshot(make_daemon: MakeDaemon, short_root: Path) -> None:
    root = short_root / "term"
    slow = {"settle_seconds": 30.0, "max_wait_seconds": 60.0, "interval_seconds": 600.0}
    d = make_daemon("term", config=base_config(root, workspaces={"w": root / "ws" / "w"}, snapshot=slow))
    d.call("hot.note", workspace="w", text="the last words before SIGTERM")

    assert d.stop() == 0

    ws = d.workspace("w")
    assert "the last words before SIGTERM" in git(ws, "show", "HEAD:hot/memd.json")
    assert trailer_log(ws, "-1")[0]["Memd-Reason"]


def test_a_repository_broken_while_memd_was_down_is_reported_not_replaced(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    root = short_root / "broken"
    config = base_config(root, workspaces={"w": root / "ws" / "w"}, snapshot=FAST)
    d = make_daemon("broken", config=config)
    d.call("hot.note", workspace="w", text="committed before the crash")
    assert d.call("snapshot.run", workspace="w")["rev"]
    assert d.stop() == 0
    ws = d.workspace("w")
    (ws / ".git" / "HEAD").write_bytes(b"garbage\n")  # e.g. a torn write, a disk error

    d.start()
    d.call("hot.note", workspace="w", text="written after the restart")
    d.call("snapshot.run", workspace="w")

    status = snap_status(d, "w")
    assert not (root / "state" / "git" / "w.git").exists(), "memd forked the history into a new repository"
    assert status["state"] == "error", status


def test_writes_are_acknowledged_while_a_snapshot_stages_and_the_commit_is_the_state_it_began_with(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    """Staging hashes today's whole day file (~12 ms a MB), so git must not do it under the writer: the snapshot
    mirrors the workspace under the writer (memd.git_mirror) and stages the mirror after. A write sent while git
    stages is acknowledged at once; the commit holds the state the snapshot began with, the next one the rest."""
    gate = short_root / "gate-marks"
    root = short_root / "gated"
    only_asked = {"settle_seconds": 60.0, "max_wait_seconds": 120.0}  # no debounced snapshot gets in between
    config = base_config(root, workspaces={"w": root / "ws" / "w"}, snapshot=only_asked)
    d = make_daemon("gated", config=config, env=instrumented_git(gate))
    ws = d.workspace("w")
    d.call("warm.log", workspace="w", action="before the snapshot")
    assert d.call("snapshot.run", workspace="w")["rev"]  # the repository exists: only staging is gated below
    d.call("warm.log", workspace="w", action="in the snapshot")
    (gate / "gate").touch()
    results: list[Any] = []
    snapshotting = threading.Thread(target=lambda: results.append(d.call("snapshot.run", workspace="w")))
    snapshotting.start()
    try:
        wait_for((gate / "adding").exists, "the snapshot's git add to start")
        acked: list[Any] = []
        writing = threading.Thread(
            target=lambda: acked.append(d.call("warm.log", workspace="w", action="while git stages")), daemon=True
        )
        writing.start()
        wait_for(lambda: acked, "the write to be acknowledged while git add is held")
        assert (gate / "gate").exists() and snapshotting.is_alive()
    finally:
        (gate / "gate").unlink(missing_ok=True)
        snapshotting.join(DEADLINE)
    day = sorted((ws / "warm").glob("*.md"))[-1].name
    committed = git(ws, "show", f"{results[0]['rev']}:warm/{day}")
    assert "in the snapshot" in committed and "while git stages" not in committed
    assert "while git stages" in (ws / "warm" / day).read_text()
    later = d.call("snapshot.run", workspace="w")["rev"]
    assert "while git stages" in git(ws, "show", f"{later}:warm/{day}")
    mirror = Path(snap_status(d, "w")["git_dir"]) / "memd-stage"  # its directories stay; no file of it may
    assert not [p for p in mirror.rglob("*") if not p.is_dir() or p.is_symlink()]


def test_the_gc_job_packs_a_repository_that_snapshots_filled_with_loose_objects(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    """memd runs git with gc.auto=0: without its own gc job, each snapshot's copy of today's file stays loose for
    ever. A snapshot that commits a person's 1,000 notes leaves over 1,000 loose objects: the next job packs them."""
    root = short_root / "gc"
    snapshot = {**FAST, "gc_interval_seconds": 0.2}
    d = make_daemon("gc", config=base_config(root, workspaces={"w": root / "ws" / "w"}, snapshot=snapshot))
    d.call("warm.log", workspace="w", action="before the notes")
    git_dir = git_dir_of(d, "w")
    notes = d.workspace("w") / "cold" / "notes"
    notes.mkdir()
    for i in range(1000):
        (notes / f"{i}.txt").write_text(f"note {i}\n")
    d.call("warm.log", workspace="w", action="with the notes")
    assert d.call("snapshot.run", workspace="w")["rev"]

    wait_for(lambda: snap_status(d, "w")["gcs"] >= 1, "the gc job to pack the repository", DEADLINE)
    assert snap_status(d, "w")["last_gc_at"]
    assert len([p for p in git_dir.glob("objects/??/*") if p.is_file()]) < 10
    assert list(git_dir.glob("objects/pack/*.pack"))
    day = sorted((d.workspace("w") / "warm").glob("*.md"))[-1].name
    assert "with the notes" in git(d.workspace("w"), f"--git-dir={git_dir}", "show", f"HEAD:warm/{day}")
    assert git(d.workspace("w"), f"--git-dir={git_dir}", "show", "HEAD:cold/notes/999.txt") == "note 999\n"
    job = d.call("status")["jobs"]["snapshot-gc"]
    assert job["errors"] == 0 and job["runs"] >= 1


def test_a_stop_ends_a_gc_under_way_and_still_makes_its_last_snapshot(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    """A first gc of a big history runs for minutes and holds its repository's lock, which the stop's last snapshot
    needs: waiting for it outlasts systemd's stop timeout, and the daemon is killed with its last writes never
    committed. A stop ends the gc; the repository stays sound, and a later gc packs it."""
    marks = short_root / "git-marks"
    env = instrumented_git(marks)
    (marks / "gc-gate").touch()
    root = short_root / "gcstop"
    snapshot = {**FAST, "gc_interval_seconds": 0.2}
    d = make_daemon("gcstop", config=base_config(root, workspaces={"w": root / "ws" / "w"}, snapshot=snapshot), env=env)
    try:
        d.call("warm.log", workspace="w", action="before the notes")
        notes = d.workspace("w") / "cold" / "notes"
        notes.mkdir()
        for i in range(1000):
            (notes / f"{i}.txt").write_text(f"note {i}\n")
        git_dir = git_dir_of(d, "w")
        wait_for(lambda: (marks / "gc").exists(), "the gc job to start a gc", DEADLINE)
        d.call("warm.log", workspace="w", action="written while the gc ran")

        assert d.stop(timeout=DEADLINE) == 0
    finally:
        (marks / "gc-gate").unlink()
    assert "ended 1 background git process(es) (a snapshot gc): memd is stopping" in d.log()
    day = sorted((d.workspace("w") / "warm").glob("*.md"))[-1].name
    assert "written while the gc ran" in git(d.workspace("w"), f"--git-dir={git_dir}", "show", f"HEAD:warm/{day}")
    git(d.workspace("w"), f"--git-dir={git_dir}", "fsck", "--no-progress")

    d.start()
    d.call("warm.log", workspace="w", action="after the restart")
    assert d.call("snapshot.run", workspace="w")["rev"]
    wait_for(lambda: snap_status(d, "w")["gcs"] >= 1, "the next gc to pack the repository", DEADLINE)
    assert len([p for p in git_dir.glob("objects/??/*") if p.is_file()]) < 10


def test_a_sweep_during_the_first_snapshot_does_not_hang_the_workspace(
    make_daemon: MakeDaemon, short_root: Path
) -> None:
    marks = short_root / "git-marks"
    env = instrumented_git(marks)
    (marks / "slow").touch()  # the first snapshot's repository lookup takes a while
    root = short_root / "race"
    ws = root / "ws" / "w"
    seed_expired_day(ws)
    # A `.git` above the workspace (not a repository): memd must ask git whether the workspace lies in a work tree.
    (root / "ws" / ".git").mkdir()
    config = base_config(root, workspaces={"w": ws}, snapshot={"settle_seconds": 30.0, "max_wait_seconds": 60.0})
    d = make_daemon("race", config=config, env=env)
    snapshot_result: list[Any] = []

    def first_snapshot() -> None:
        try:
            with d.client(timeout=5) as c:
                snapshot_result.append(c.call("snapshot.run", workspace="w"))
        except (MemdError, OSError) as exc:
            snapshot_result.append(exc)

    threading.Thread(target=first_snapshot, daemon=True).start()
    wait_for((marks / "locating").exists, "the first snapshot to start locating its repository")
    with d.client(timeout=5) as c:
        swept = c.call("retention.sweep", workspace="w", dry_run=False, confirm=True)
    with d.client(timeout=5) as c:
        c.call("hot.note", workspace="w", text="the workspace still takes writes")

    assert swept["results"][0]["removed"] == [EXPIRED_DAY]
    wait_for(lambda: snapshot_result, "the first snapshot to finish")
    assert not isinstance(snapshot_result[0], Exception), snapshot_result


# --- pushing ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pushing() -> Iterator[RunningDaemon]:
    """Workspaces `plain` (own .git) and `nested` (inside a project repo), each pushing to a bare repository."""
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        root = Path(d) / "p"
        project = root / "project"
        project.mkdir(parents=True)
        git(project, "init", "--quiet", "--initial-branch=main")
        (project / "README.md").write_text("a project\n")
        git(project, "add", "README.md")
        git(project, "commit", "--quiet", "-m", "project")
        remotes = root / "remotes"
        for name in ("plain", "nested"):
            git(root, "init", "--quiet", "--bare", "--initial-branch=main", str(remotes / f"{name}.git"))
        config = base_config(
            root,
            workspaces={"plain": root / "ws" / "plain", "nested": project / "agent-memory"},
            snapshot={**FAST, "remote": str(remotes / "{name}.git"), "push_interval_seconds": 0.5},
        )
        daemon = module_daemon(root, config)
        try:
            yield daemon.start()
        finally:
            daemon.kill()


def remote_of(daemon: RunningDaemon, name: str) -> Path:
    return Path(daemon.config["snapshot"]["remote"].replace("{name}", name))


def remote_head(daemon: RunningDaemon, name: str) -> str:
    return git(remote_of(daemon, name), "rev-parse", "--verify", "--quiet", "main", check=False).strip()


def diverge(daemon: RunningDaemon, name: str, scratch: Path) -> tuple[str, dict[str, Any]]:
    """Someone else pushes to the workspace's remote; memd's next commits diverge. Returns (foreign rev, status)."""
    if (snap_status(daemon, name)["push"] or {}).get("state") != "diverged":
        daemon.call("hot.note", workspace=name, text="pushed before the divergence")
        rev = daemon.call("snapshot.run", workspace=name)["rev"]
        wait_for(lambda: remote_head(daemon, name) == rev, f"{name}'s snapshot to reach its remote")
        other = scratch / f"other-{name}"
        git(scratch, "clone", "--quiet", "--branch", "main", str(remote_of(daemon, name)), str(other))
        (other / "foreign.txt").write_text("committed on another machine\n")
        git(other, "add", "foreign.txt")
        git(other, "commit", "--quiet", "-m", "foreign")
        git(other, "push", "--quiet", "origin", "main")
        daemon.call("hot.note", workspace=name, text="written after the divergence")
        assert daemon.call("snapshot.run", workspace=name)["rev"]
        wait_for(
            lambda: (snap_status(daemon, name)["push"] or {}).get("state") == "diverged",
            f"memd to notice that {name}'s remote diverged",
        )
    foreign = git(remote_of(daemon, name), "log", "-1", "--format=%H", "--grep=^foreign$", "main").strip()
    return foreign, snap_status(daemon, name)


def test_snapshots_are_pushed_to_the_remote(pushing: RunningDaemon) -> None:
    pushing.call("hot.note", workspace="plain", text="for the remote")
    rev = pushing.call("snapshot.run", workspace="plain")["rev"]

    wait_for(lambda: remote_head(pushing, "plain") == rev, "the snapshot to reach the bare repository")

    remote_log = git(remote_of(pushing, "plain"), "log", "--format=%H", "main").split()
    assert remote_log == git(pushing.workspace("plain"), "log", "--format=%H").split()
    assert "for the remote" in git(remote_of(pushing, "plain"), "show", "main:hot/memd.json")
    assert snap_status(pushing, "plain")["push"]["state"] == "ok"


def test_a_diverged_remote_is_never_force_pushed(pushing: RunningDaemon, tmp_path: Path) -> None:
    foreign, status = diverge(pushing, "plain", tmp_path)
    pushing.call("hot.note", workspace="plain", text="more work")
    pushing.call("snapshot.run", workspace="plain")
    again = pushing.call("snapshot.push", workspace="plain")

    assert again["result"] == "diverged"
    assert remote_head(pushing, "plain") == foreign
    ours = git(pushing.workspace("plain"), "rev-parse", "HEAD").strip()
    assert not git_ok(remote_of(pushing, "plain"), "cat-file", "-e", f"{ours}^{{commit}}")
    message = status["push"]["error"]
    assert status["push"]["state"] == "diverged"
    assert str(remote_of(pushing, "plain")) in message
    assert "git pull" in message and "never forces" in message


def test_a_branch_lock_left_on_the_remote_stops_no_push_for_good_and_is_named_until_removed(
    make_daemon: Callable[..., RunningDaemon], short_root: Path
) -> None:
    remote = short_root / "remotes" / "plain.git"
    git(short_root, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    config = base_config(
        short_root / "d",
        workspaces={"plain": short_root / "ws" / "plain"},
        snapshot={**FAST, "remote": str(remote.parent / "{name}.git"), "push_interval_seconds": 0.3},
    )
    daemon = make_daemon("d", config)
    daemon.call("hot.note", workspace="plain", text="pushed once")
    first = daemon.call("snapshot.run", workspace="plain")["rev"]
    wait_for(lambda: remote_head(daemon, "plain") == first, "the first snapshot to reach the remote")
    lock = remote / "refs" / "heads" / "main.lock"
    lock.write_bytes(b"")  # a push killed on the remote's machine in the middle of its ref update leaves this
    daemon.call("hot.note", workspace="plain", text="while the remote is locked")
    second = daemon.call("snapshot.run", workspace="plain")["rev"]

    wait_for(lambda: snap_status(daemon, "plain")["push"]["state"] == "error", "the push to fail on the lock")
    push = snap_status(daemon, "plain")["push"]
    assert str(lock) in push["error"] and "remove that file" in push["error"]
    assert "git pull" not in push["error"]  # nothing to reconcile: this is not a divergence

    lock.unlink()  # the person's fix; the push job goes on by itself, no `memd push` needed
    wait_for(lambda: remote_head(daemon, "plain") == second, "the push to go through once the lock is gone")
    # the remote's ref moves before `git push` returns and the job records its result: wait for that too
    wait_for(lambda: snap_status(daemon, "plain")["push"]["state"] == "ok", "the push's state to say ok")


def test_the_divergence_advice_names_a_memd_command_that_exists(pushing: RunningDaemon, tmp_path: Path) -> None:
    _, status = diverge(pushing, "plain", tmp_path)
    commands = re.findall(r"`(memd [^`]+)`", status["push"]["error"])
    assert commands, status["push"]["error"]

    for command in commands:  # it exists and runs; still diverged (nothing reconciled yet), so it says so
        ran = memd_cli(pushing, *command.split()[1:])
        assert ran.returncode in (0, 1), f"{command!r}: {ran.stderr}"
        assert "push: diverged" in ran.stdout


def test_the_divergence_advice_for_a_separate_git_dir_names_memds_repository(
    pushing: RunningDaemon, tmp_path: Path
) -> None:
    _, status = diverge(pushing, "nested", tmp_path)

    assert status["git_dir"] and status["git_dir"] in status["push"]["error"]


def test_after_reconciling_memd_pushes_again(pushing: RunningDaemon, tmp_path: Path) -> None:
    foreign, _ = diverge(pushing, "plain", tmp_path)
    ws = pushing.workspace("plain")
    git(ws, "pull", "--quiet", "--no-rebase", "--no-edit", str(remote_of(pushing, "plain")), "main")

    result = pushing.call("snapshot.push", workspace="plain")

    assert result["result"] == "ok"
    assert remote_head(pushing, "plain") == git(ws, "rev-parse", "HEAD").strip()
    assert git_ok(ws, "merge-base", "--is-ancestor", foreign, "HEAD")
    assert snap_status(pushing, "plain")["push"]["state"] == "ok"


# --- someone else's repositories ------------------------------------------------------------------------------------


ProjectState = dict[str, tuple[str, str]]  # workspace name -> (project's `git status --porcelain`, its HEAD)


@pytest.fixture(scope="module")
def nested() -> Iterator[tuple[RunningDaemon, ProjectState]]:
    """Two workspaces at `<project>/agent-memory`: one untracked in its project, one listed in .gitignore."""
    with tempfile.TemporaryDirectory(prefix="memd-") as d:
        root = Path(d) / "n"
        spaces = {}
        for name in ("untracked", "ignored"):
            project = root / f"project-{name}"
            project.mkdir(parents=True)
            git(project, "init", "--quiet", "--initial-branch=main")
            (project / "README.md").write_text("a project\n")
            files = ["README.md"]
            if name == "ignored":
                (project / ".gitignore").write_text("agent-memory/\n")
                files.append(".gitignore")
            git(project, "add", *files)
            git(project, "commit", "--quiet", "-m", "project")
            spaces[name] = project / "agent-memory"
            (spaces[name] / "cold").mkdir(parents=True)
            (spaces[name] / "cold" / "MEMORY.md").write_text("# Agent Memory\n\n## Notes\n- [2026-01-01] kept\n")
        config = base_config(root, workspaces=spaces, snapshot=FAST)
        daemon = module_daemon(root, config)
        before = {
            name: (git(path.parent, "status", "--porcelain"), git(path.parent, "rev-parse", "HEAD"))
            for name, path in spaces.items()
        }
        try:
            yield daemon.start(), before
        finally:
            daemon.kill()


@pytest.mark.parametrize("name", ["untracked", "ignored"])
def test_a_workspace_inside_a_project_repository_leaves_the_project_alone(
    nested: tuple[RunningDaemon, ProjectState], name: str
) -> None:
    daemon, before = nested
    ws = daemon.workspace(name)
    project = ws.parent
    status_before, head_before = before[name]
    assert status_before == ("?? agent-memory/\n" if name == "untracked" else "")

    daemon.call("session.start", workspace=name, task="Work in a project", session_id=f"sess-{name}")
    daemon.call("hot.note", workspace=name, text="inside a project")
    daemon.call("warm.log", workspace=name, action="edited src/app.py")
    daemon.call("cold.learn", workspace=name, category="Notes", learning="the project has its own repo")
    result = daemon.call("snapshot.run", workspace=name)
    wait_for(lambda: not snap_status(daemon, name)["pending"], "pending snapshots to be done")

    status = snap_status(daemon, name)
    git_dir = Path(daemon.config["daemon"]["state_dir"]) / "git" / f"{name}.git"
    assert result["rev"] or status["last_commit"]
    assert status["git_dir"] == str(git_dir)
    assert not (ws / ".git").exists()
    assert git(project, "status", "--porcelain") == status_before
    assert git(project, "rev-parse", "HEAD") == head_before
    assert git(project, "log", "--all", "--format=%s") == "project\n"
    commits = daemon.call("history.list", workspace=name)["commits"]
    assert commits and commits[0]["session"] == f"sess-{name}"
    memd_git = ("--git-dir", str(git_dir), "--work-tree", str(ws))
    assert "inside a project" in git(project, *memd_git, "show", "HEAD:hot/memd.json")


def user_repo(path: Path) -> str:
    """A person's own repository in the workspace directory, with one commit. Returns its HEAD."""
    (path / "cold").mkdir(parents=True)
    git(path, "init", "--quiet", "--initial-branch=main")
    (path / "README.md").write_text("my notes repo\n")
    (path / "cold" / "MEMORY.md").write_text("# Agent Memory\n")
    git(path, "add", "README.md", "cold/MEMORY.md")
    git(path, "commit", "--quiet", "-m", "mine")
    return git(path, "rev-parse", "HEAD").strip()


def test_a_workspace_with_its_own_repository_is_not_committed_into(make_daemon: MakeDaemon, short_root: Path) -> None:
    root = short_root / "own"
    ws = root / "ws" / "mine"
    head = user_repo(ws)
    d = make_daemon("own", config=base_config(root, workspaces={"mine": ws}, snapshot=FAST))

    d.call("session.start", workspace="mine", task="Keep out of my repo")
    d.call("hot.note", workspace="mine", text="memd's note")
    result = d.call("snapshot.run", workspace="mine")

    git_dir = root / "state" / "git" / "mine.git"
    assert result["rev"] or snap_status(d, "mine")["last_commit"]
    assert snap_status(d, "mine")["git_dir"] == str(git_dir)
    assert git(ws, "log", "--format=%H").split() == [head]
    assert git(ws, "config", "--get", "memd.managed", check=False) == ""
    assert d.call("history.list", workspace="mine")["commits"]
    assert "memd's note" in git(ws, "--git-dir", str(git_dir), "show", "HEAD:hot/memd.json")


@pytest.fixture
def adopting(make_daemon: MakeDaemon, short_root: Path) -> RunningDaemon:
    """snapshot.adopt_existing = true; workspace `mine` is a person's repository; `staged` also has staged work."""
    root = short_root / "adopt"
    user_repo(root / "ws" / "mine")
    staged = root / "ws" / "staged"
    user_repo(staged)
    (staged / "README.md").write_text("my notes repo\nhalf-done edit, staged on purpose\n")
    git(staged, "add", "README.md")
    config = base_config(
        root,
        workspaces={"mine": root / "ws" / "mine", "staged": staged},
        snapshot={**FAST, "adopt_existing": True},
    )
    return make_daemon("adopt", config=config)


def test_adopt_existing_commits_into_the_workspaces_own_repository(adopting: RunningDaemon) -> None:
    ws = adopting.workspace("mine")
    head = git(ws, "rev-parse", "HEAD").strip()

    adopting.call("hot.note", workspace="mine", text="adopted")
    result = adopting.call("snapshot.run", workspace="mine")

    assert result["rev"]
    assert snap_status(adopting, "mine")["git_dir"] == str(ws / ".git")
    assert git(ws, "rev-parse", "HEAD").strip() == result["rev"]
    assert git_ok(ws, "merge-base", "--is-ancestor", head, "HEAD")
    assert trailer_log(ws, "-1")[0]["Memd-Reason"]
    assert "adopted" in git(ws, "show", "HEAD:hot/memd.json")


def test_adopting_never_commits_what_the_person_staged(adopting: RunningDaemon) -> None:
    ws = adopting.workspace("staged")

    adopting.call("hot.note", workspace="staged", text="memd's own change")
    result = adopting.call("snapshot.run", workspace="staged")

    assert result["rev"]
    assert "README.md" not in git(ws, "show", "--name-only", "--format=", "HEAD").split()
    assert git(ws, "diff", "--cached", "--name-only").split() == ["README.md"]
