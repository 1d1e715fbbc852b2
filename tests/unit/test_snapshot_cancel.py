"""Specification: a snapshot cancelled half-way (a job's timeout, shutdown) loses neither the knowledge of what is
still uncommitted nor the consistency of what git is committing: the writer stays held until the git command
under it has finished, and the tiers it was about to commit stay marked, so the next flush commits them."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from clocks import START, FixedClock
from edits import note

from memd.config import SnapshotConfig, WorkspaceConfig
from memd.gitrepo import GitRepo
from memd.snapshots import Snapshotter
from memd.tokens import TokenCounter
from memd.workspace import Workspace


@pytest.fixture
def io() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-io")
    yield executor
    executor.shutdown()


def test_a_snapshot_cancelled_while_git_commits_keeps_the_writer_until_git_is_done_and_its_tiers_marked(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(WorkspaceConfig("alpha", tmp_path / "alpha"), counter, FixedClock(START), io)
    ws.open()
    snapshots = Snapshotter(SnapshotConfig(settle_seconds=60), tmp_path / "state", io)
    committing, finish = threading.Event(), threading.Event()
    real_commit = GitRepo.commit

    def gated_commit(self: GitRepo, *args: Any) -> str:  # git is still writing the commit when the job is cancelled
        committing.set()
        finish.wait(30)
        return real_commit(self, *args)

    async def go() -> tuple[bool, bool, set[str], str]:
        snapshots.track(ws)
        await snapshots.snapshot(ws, "start")  # the repository exists; from here on a commit is what is tested
        await ws.write(note("to be committed"))
        snapshots.on_change(ws, frozenset({"hot"}), "write")
        monkeypatch.setattr(GitRepo, "commit", gated_commit)
        job = asyncio.ensure_future(snapshots.snapshot(ws, "interval"))
        await asyncio.get_running_loop().run_in_executor(None, committing.wait)
        job.cancel()
        for _ in range(3):
            await asyncio.sleep(0)
        held, done = ws.exclusive.locked(), job.done()
        finish.set()
        with pytest.raises(asyncio.CancelledError):
            await job
        monkeypatch.undo()
        pending = set(snapshots.repo_state(ws).dirty)
        rev, made = await snapshots.snapshot(ws, "shutdown flush")
        return held, done, pending, rev if made else ""

    held, done, pending, flushed = asyncio.run(go())

    assert (held, done) == (True, False)  # no batch wrote into the tree git was reading
    assert pending == {"hot"}  # still known as not committed: the flush at shutdown looks at this
    assert flushed == "" or len(flushed) >= 40  # committed by the cancelled job's git, or by the flush


def test_a_restore_cancelled_while_it_rewrites_files_leaves_the_restored_tiers_marked_for_the_flush(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memd import fsio

    ws = Workspace(WorkspaceConfig("alpha", tmp_path / "alpha"), counter, FixedClock(START), io)
    ws.open()
    snapshots = Snapshotter(SnapshotConfig(settle_seconds=60), tmp_path / "state", io)
    rewriting, finish = threading.Event(), threading.Event()
    real_restore = fsio.restore_tree

    def gated_restore(*args: Any) -> list[str]:
        rewriting.set()
        finish.wait(30)
        return real_restore(*args)

    async def go() -> tuple[set[str], str, bool]:
        snapshots.track(ws)
        await ws.write(note("old"))
        old, _ = await snapshots.snapshot(ws, "start")
        await ws.write(note("new"))
        await snapshots.snapshot(ws, "after new")
        monkeypatch.setattr(fsio, "restore_tree", gated_restore)
        job = asyncio.ensure_future(snapshots.restore(ws, old, ["hot"]))
        await asyncio.get_running_loop().run_in_executor(None, rewriting.wait)
        job.cancel()
        for _ in range(3):
            await asyncio.sleep(0)
        finish.set()
        with pytest.raises(asyncio.CancelledError):
            await job
        monkeypatch.undo()
        pending = set(snapshots.repo_state(ws).dirty)
        rev, made = await snapshots.snapshot(ws, "shutdown flush")
        return pending, rev, made

    pending, rev, made = asyncio.run(go())

    assert pending == {"hot"}
    assert made and len(rev) >= 40  # the restored hot/ is in git after the flush, not only on disk
