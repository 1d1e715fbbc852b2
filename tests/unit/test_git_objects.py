"""Specification of memd.git_objects.index_paths: the index file read as `git ls-files` lists it, or None where git
must be asked (a version or an extension it does not read), with the real git CLI writing every index.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness import person_env

from memd import git_objects
from memd.gitrepo_setup import find_git

GIT = find_git()


def git(cwd: Path, *args: str) -> str:
    out = subprocess.run([GIT, *args], cwd=cwd, env=person_env(), capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"git {' '.join(args)} failed: {out.stderr}"
    return out.stdout


def repository(path: Path, *init: str) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "--quiet", *init)
    return path


def listed(path: Path) -> list[str]:
    return [name for name in git(path, "ls-files", "-z").split("\0") if name]


def write(path: Path, text: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_no_index_file_is_an_empty_index(tmp_path: Path) -> None:
    repo = repository(tmp_path / "r")

    assert git_objects.index_paths(repo / ".git") == []


def test_the_paths_are_git_ls_files_own_whatever_their_length_and_characters(tmp_path: Path) -> None:
    repo = repository(tmp_path / "r")
    names = ["hot/context.json", "warm/2026-01-01.md", "cold/MEMORY.md", "a b/ünïcödé ✓.md", "x" * 200 + "/y.md"]
    for name in names:
        write(repo / name)
    git(repo, "add", "--", *names)
    # Over 4,095 bytes (the entry's length field saturates): no file system takes such a path, the index does.
    long = "/".join(["d" * 200] * 21) + ".md"
    blob = git(repo, "hash-object", "-w", "--", names[0]).strip()
    git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{long}")
    names.append(long)

    found = git_objects.index_paths(repo / ".git")

    assert found == listed(repo) and sorted(found) == sorted(names)


def test_an_entry_with_extended_flags_is_stepped_over_correctly(tmp_path: Path) -> None:
    repo = repository(tmp_path / "r")
    for name in ("a.md", "b.md", "c.md"):
        write(repo / name)
    git(repo, "add", "a.md", "c.md")
    git(repo, "add", "--intent-to-add", "b.md")  # intent-to-add is an extended flag: a version 3 index

    assert (repo / ".git" / "index").read_bytes()[4:8] == b"\0\0\0\3"
    assert git_objects.index_paths(repo / ".git") == listed(repo) == ["a.md", "b.md", "c.md"]


def test_a_sha256_index_is_read_with_its_own_id_length(tmp_path: Path) -> None:
    repo = repository(tmp_path / "r", "--object-format=sha256")
    write(repo / "warm" / "2026-01-01.md")
    write(repo / "cold" / "MEMORY.md")
    git(repo, "add", ".")

    assert git_objects.index_paths(repo / ".git", sha256=True) == listed(repo)


@pytest.mark.parametrize(
    "setting",
    [("update-index", "--index-version", "4"), ("update-index", "--split-index")],
    ids=["version 4", "split index"],
)
def test_an_index_this_does_not_read_is_left_to_git(tmp_path: Path, setting: tuple[str, ...]) -> None:
    repo = repository(tmp_path / "r")
    write(repo / "one.md")
    write(repo / "two.md")
    git(repo, "add", ".")
    git(repo, *setting)

    assert git_objects.index_paths(repo / ".git") is None


def test_a_truncated_or_foreign_index_is_left_to_git(tmp_path: Path) -> None:
    repo = repository(tmp_path / "r")
    write(repo / "one.md")
    git(repo, "add", ".")
    index = repo / ".git" / "index"
    data = index.read_bytes()

    index.write_bytes(data[:40])
    assert git_objects.index_paths(repo / ".git") is None
    index.write_bytes(b"NOTANINDEX" + data[10:])
    assert git_objects.index_paths(repo / ".git") is None
