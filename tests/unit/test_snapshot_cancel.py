"""Specification: a snapshot cancelled half-way (a job's timeout, shutdown) loses neither the knowledge of what is
still uncommitted nor the consistency of what git is committing: the writer stays held until the mirror git reads
is made (or, where git reads the workspace itself, until git's command has finished), a git command runs to its
end, the tiers it was committing stay marked until the commit is made, so the flush at shutdown (which looks at
the marks) waits for a snapshot in flight instead of skipping its workspace."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

import pytest
from edits import note

from memd import fsio_batch, git_mirror, snapshot_history
from memd.gitrepo import GitRepo
from memd.snapshots import Snapshotter
from memd.workspace import Workspace

WAIT = 30.0  # seconds: only a gate never reached gets near this (a hang detector, not a timing check)


class Gate:
    """Holds a function in its worker thread until the test opens the gate."""

    def __init__(self) -> None:
        self.reached, self.open = threading.Event(), threading.Event()

    def around(self, real: Any) -> Any:
        def gated(*args: Any, **kwargs: Any) -> Any:
            self.reached.set()
            assert self.open.wait(WAIT), "the test never opened the gate"
            return real(*args, **kwargs)

        return gated

    async def wait_reached(self) -> None:
        reached = await asyncio.get_running_loop().run_in_executor(None, self.reached.wait, WAIT)
        assert reached, "the gated function was never called"


def committed(ws: Workspace, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ws.root), "show", f"HEAD:{path}"], capture_output=True, text=True, check=True
    ).stdout


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@dataclass
class Cancelled:
    """What a snapshot cancelled at a gate left: the writer held and the job done while the gate was closed, the
    tiers still marked and a mirror still there after it ended, the marks left after the shutdown flush."""

    held: bool
    done: bool
    pending: set[str]
    mirror_left: bool
    left: int


def cancel_at(
    ws: Workspace, snapshots: Snapshotter, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str,
    no_mirror: bool = False, meanwhile: str = "",
) -> Cancelled:  # fmt: skip
    """A snapshot of a hot write, cancelled while `owner.name` (gated) runs; `meanwhile`: a note written then."""
    gate = Gate()

    async def go() -> Cancelled:
        snapshots.track(ws)
        await snapshots.snapshot(ws, "start")  # the repository exists; from here on a commit is what is tested
        await ws.write(note("to be committed"))
        snapshots.on_change(ws, frozenset({"hot"}), "write")
        if no_mirror:
            monkeypatch.setattr(git_mirror, "build", lambda *_: None)  # the git dir on another file system
        monkeypatch.setattr(owner, name, gate.around(getattr(owner, name)))
        job = asyncio.ensure_future(snapshots.snapshot(ws, "interval"))
        await gate.wait_reached()
        job.cancel()
        await settle()
        held, done = ws.exclusive.locked(), job.done()
        if meanwhile:
            await ws.write(note(meanwhile))
        gate.open.set()
        with pytest.raises(asyncio.CancelledError):
            await job
        monkeypatch.undo()
        pending = set(snapshots.repo_state(ws).dirty)
        repo = snapshots.repo_state(ws).repo
        mirror = None if repo is None else repo.git_dir / git_mirror.MIRROR_DIR
        # Its directories stay for the next snapshot; no file (a link to a workspace file) may.
        mirror_left = mirror is not None and any(not p.is_dir() or p.is_symlink() for p in mirror.rglob("*"))
        await snapshots.flush("shutdown")
        return Cancelled(held, done, pending, mirror_left, len(snapshots.repo_state(ws).dirty))

    return asyncio.run(go())


def test_a_snapshot_cancelled_while_it_mirrors_the_workspace_keeps_the_writer_until_the_mirror_is_made(
    ws: Workspace, snapshots: Snapshotter, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = cancel_at(ws, snapshots, monkeypatch, git_mirror, "build")

    assert (result.held, result.done) == (True, False)  # no batch wrote into the tree while it was mirrored
    assert result.pending == {"hot"}  # not known to be committed: the flush at shutdown looks at this
    assert result.left == 0
    assert "to be committed" in committed(ws, "hot/memd.json")


def test_a_snapshot_cancelled_while_git_commits_its_mirror_lets_writes_go_on_and_keeps_its_tiers_marked(
    ws: Workspace, snapshots: Snapshotter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer is free while git commits the mirror: a note is written meanwhile.
    result = cancel_at(ws, snapshots, monkeypatch, GitRepo, "commit", meanwhile="written while git commits")

    assert (result.held, result.done) == (False, False)  # git's command runs to its end, but not under the writer
    assert result.pending == {"hot"}
    assert not result.mirror_left
    assert result.left == 0
    assert "written while git commits" in committed(ws, "hot/memd.json")


def test_where_no_mirror_can_be_made_a_cancelled_snapshot_keeps_the_writer_until_git_has_committed(
    ws: Workspace, snapshots: Snapshotter, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = cancel_at(ws, snapshots, monkeypatch, GitRepo, "commit", no_mirror=True)

    assert (result.held, result.done) == (True, False)  # git reads the workspace itself: no batch writes meanwhile
    assert result.pending == {"hot"}
    assert result.left == 0
    assert "to be committed" in committed(ws, "hot/memd.json")


def test_the_flush_at_shutdown_waits_for_a_snapshot_in_flight_instead_of_skipping_its_workspace(
    ws: Workspace, snapshots: Snapshotter, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate()

    async def go() -> bool:
        snapshots.track(ws)
        await snapshots.snapshot(ws, "start")
        await ws.write(note("written just before shutdown"))
        snapshots.on_change(ws, frozenset({"hot"}), "write")
        monkeypatch.setattr(GitRepo, "commit", gate.around(GitRepo.commit))
        job = asyncio.ensure_future(snapshots.snapshot(ws, "interval"))
        await gate.wait_reached()
        flushing = asyncio.ensure_future(snapshots.flush("shutdown"))
        await settle()
        flushed_early = flushing.done()
        gate.open.set()
        await job
        await flushing
        return flushed_early

    assert asyncio.run(go()) is False  # it saw the workspace as dirty and waited for the repository's lock
    assert "written just before shutdown" in committed(ws, "hot/memd.json")
    assert snapshots.repo_state(ws).dirty == set()


@pytest.mark.parametrize("how", ["cancelled", "failed"])
def test_a_restore_stopped_while_it_rewrites_files_leaves_the_restored_tiers_for_the_flush(
    ws: Workspace, snapshots: Snapshotter, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    gate = Gate()
    real_restore = fsio_batch.restore_tree

    def restore_then_fail(*args: Any) -> list[str]:  # the disk fills after the files were replaced
        real_restore(*args)
        raise OSError(28, "No space left on device")

    async def go() -> set[str]:
        snapshots.track(ws)
        await ws.write(note("old"))
        old, _ = await snapshots.snapshot(ws, "start")
        await ws.write(note("new"))
        await snapshots.snapshot(ws, "after new")
        monkeypatch.setattr(
            fsio_batch, "restore_tree", gate.around(real_restore) if how == "cancelled" else restore_then_fail
        )
        job = asyncio.ensure_future(snapshot_history.restore(snapshots, ws, old, ["hot"]))
        if how == "cancelled":
            await gate.wait_reached()
            job.cancel()
            await settle()
            gate.open.set()
        with pytest.raises(asyncio.CancelledError if how == "cancelled" else OSError):
            await job
        monkeypatch.undo()
        pending = set(snapshots.repo_state(ws).dirty)
        await snapshots.flush("shutdown")
        return pending

    pending = asyncio.run(go())

    assert pending == {"hot"}
    notes = committed(ws, "hot/memd.json")
    assert "old" in notes and "new" not in notes  # the restored hot/ is in git after the flush, not only on disk
