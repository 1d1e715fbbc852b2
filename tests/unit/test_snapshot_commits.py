"""Specification: how a snapshot commits. The index as it is when it holds nothing but the workspace's files
(`git commit --only` would hash every listed file again: a busy day's 40 MB file at every snapshot, more of git's
CPU than the `add`); with `--only` when a checkpoint commits the hot tier alone or a person staged something else,
which stays staged and out of memd's commit."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest
from edits import note

from memd.gitrepo import GitRepo
from memd.snapshots import Snapshotter
from memd.workspace import Workspace


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The `only` of every commit memd makes."""
    made: list[bool] = []
    real = GitRepo.commit

    def spy(self: GitRepo, *args: Any, only: bool = True) -> str:
        made.append(only)
        return real(self, *args, only=only)

    monkeypatch.setattr(GitRepo, "commit", spy)
    return made


def git(ws: Workspace, *args: str) -> str:
    return subprocess.run(["git", "-C", str(ws.root), *args], capture_output=True, text=True, check=True).stdout


def snapshot_after_a_write(ws: Workspace, snapshots: Snapshotter, **kwargs: Any) -> None:
    async def go() -> None:
        snapshots.track(ws)
        await ws.write(lambda draft: draft.log("a day file in the index"))
        await snapshots.snapshot(ws, "start")
        await ws.write(note("to be committed"))
        snapshots.on_change(ws, frozenset({"hot"}), "write")
        await snapshots.snapshot(ws, "interval", **kwargs)

    asyncio.run(go())


def test_a_snapshot_of_the_workspace_alone_commits_the_index_as_it_is(
    ws: Workspace, snapshots: Snapshotter, commits: list[bool]
) -> None:
    snapshot_after_a_write(ws, snapshots)

    assert commits[-1] is False
    assert "to be committed" in git(ws, "show", "HEAD:hot/memd.json")
    assert git(ws, "status", "--porcelain", "--", "hot", "warm", "cold") == ""


def test_a_checkpoints_commit_of_the_hot_tier_alone_uses_only(
    ws: Workspace, snapshots: Snapshotter, commits: list[bool]
) -> None:
    snapshot_after_a_write(ws, snapshots, tiers=["hot"])

    assert commits[-1] is True  # the index holds warm/ too, which this commit leaves as HEAD has it
    assert "to be committed" in git(ws, "show", "HEAD:hot/memd.json")


def test_what_a_person_staged_stays_staged_and_out_of_the_snapshot(
    ws: Workspace, snapshots: Snapshotter, commits: list[bool]
) -> None:
    asyncio.run(snapshots.snapshot(ws, "start"))
    (ws.root / "mine.txt").write_text("a person's\n", encoding="utf-8")
    git(ws, "add", "-f", "mine.txt")

    snapshot_after_a_write(ws, snapshots)

    assert commits[-1] is True
    assert "mine.txt" not in git(ws, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert git(ws, "diff", "--cached", "--name-only") == "mine.txt\n"
