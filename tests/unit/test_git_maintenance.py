"""Packing what snapshots leave loose (memd.git_maintenance), with the real git CLI.

memd runs git with `gc.auto=0`, so without this job every snapshot's copy of today's day file stays a loose object
for ever. What must hold: a repository memd made is packed once its loose objects pass a count or a size, and not
before; its history reads the same after; a repository memd did not make is left to its owner's git.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from harness import person_env

from memd import git_maintenance
from memd.git_maintenance import Loose, loose_objects, maintain
from memd.git_staging import stage
from memd.gitrepo import GitRepo
from memd.gitrepo_setup import find_git

GIT = find_git()
PATHS = ("hot", "warm", "cold")


def person_git(cwd: Path, *args: str) -> str:
    out = subprocess.run([GIT, *args], cwd=cwd, env=person_env(), capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"git {' '.join(args)} failed: {out.stderr}"
    return out.stdout


def locate(workspace: Path, state: Path, adopt: bool = False) -> GitRepo:
    for tier in PATHS:
        (workspace / tier).mkdir(parents=True, exist_ok=True)
    return GitRepo.locate(workspace, state / "git" / "ws.git", GIT, PATHS, adopt)


def snapshot(r: GitRepo) -> None:
    paths = stage(r)
    assert paths
    r.commit(paths, "memd: writes", "", {"Memd-Reason": "writes"})


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    r = locate(tmp_path / "ws", tmp_path / "state")
    r.ensure("main")
    return r


def history(r: GitRepo) -> list[str]:
    return r.run("log", "--format=%H %s", "--", "warm").decode().splitlines()


def grow_a_day(r: GitRepo, snapshots: int) -> None:
    """A day file appended to and committed again and again, as snapshots under steady writes do."""
    day = r.work_tree / "warm" / "2026-12-01.md"
    text = "# Activity Log 2026-12-01\n\n"
    for i in range(snapshots):
        text += f"### 10:{i:02d}:00 - step {i}\n```\nfile: src/m{i}.py\n```\nResult: {os.urandom(1000).hex()}\n\n"
        day.write_text(text, encoding="utf-8")
        snapshot(r)


def test_loose_objects_counts_each_object_file_and_its_size(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    (objects / "ab").mkdir(parents=True)
    (objects / "ab" / ("c" * 38)).write_bytes(b"x" * 100)
    (objects / "ff").mkdir()
    (objects / "ff" / ("0" * 62)).write_bytes(b"y" * 7)  # a sha256 repository's name
    (objects / "ff" / "tmp_obj_123456").write_bytes(b"z" * 1000)  # git's temporary, not an object
    (objects / "pack").mkdir()
    (objects / "pack" / "pack-1.pack").write_bytes(b"p" * 5000)
    (objects / "info").mkdir()

    assert loose_objects(tmp_path) == Loose(2, 107)
    assert loose_objects(tmp_path / "missing") == Loose(0, 0)


def test_a_count_or_a_size_makes_a_gc_due(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(git_maintenance, "LOOSE_OBJECTS_MAX", 10)
    monkeypatch.setattr(git_maintenance, "LOOSE_BYTES_MAX", 1000)
    assert not Loose(9, 999).due
    assert Loose(10, 0).due
    assert Loose(0, 1000).due


def test_a_repository_below_both_thresholds_is_left_as_it_is(repo: GitRepo) -> None:
    grow_a_day(repo, 3)
    before = loose_objects(repo.git_dir)

    assert maintain(repo) is None
    assert loose_objects(repo.git_dir) == before
    assert not list((repo.git_dir / "objects" / "pack").glob("*.pack"))


def test_a_repository_past_a_threshold_is_packed_and_reads_the_same(
    repo: GitRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    grow_a_day(repo, 12)
    before = loose_objects(repo.git_dir)
    log = history(repo)
    monkeypatch.setattr(git_maintenance, "LOOSE_BYTES_MAX", before.bytes)
    ran: list[tuple[str, ...]] = []
    real = repo.run_niced
    monkeypatch.setattr(repo, "run_niced", lambda *args, **kw: ran.append(args) or real(*args, **kw))

    assert maintain(repo) == before
    # one delta try per object: a day's next version is its best base, and ten tries cost 2.5-7x the CPU
    assert [args for args in ran if "gc" in args] and all("pack.window=1" in args for args in ran)
    after = loose_objects(repo.git_dir)
    assert after.objects == 0
    assert list((repo.git_dir / "objects" / "pack").glob("*.pack"))
    packed = sum(p.stat().st_size for p in (repo.git_dir / "objects" / "pack").glob("*.pack"))
    assert packed < before.bytes / 3, "a day file's versions should be stored as deltas of each other"
    assert history(repo) == log
    person_git(repo.work_tree, f"--git-dir={repo.git_dir}", "fsck", "--strict", "--no-progress")
    assert maintain(repo) is None  # nothing loose any more


def test_a_repository_memd_did_not_make_is_left_to_its_owners_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    person_git(ws, "init", "--quiet", "--initial-branch=main")
    adopted = locate(ws, tmp_path / "state", adopt=True)
    adopted.ensure("main")
    grow_a_day(adopted, 3)
    monkeypatch.setattr(git_maintenance, "LOOSE_OBJECTS_MAX", 1)
    before = loose_objects(adopted.git_dir)

    assert maintain(adopted) is None
    assert loose_objects(adopted.git_dir) == before
