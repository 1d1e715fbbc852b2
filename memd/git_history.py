"""Reading a snapshot repository's past: the commits (`log`, with memd's trailers parsed back), a file or a tree
of files at a commit (`show`, `files_at`) and the difference between two commits (`diff`). Blocking: run it in a
worker thread.

Nothing here writes to the repository. A revision is resolved to a commit first (`resolve`): one that looks like
an option, or names no commit, is NotFound, never handed to git as an argument. Imports memd.gitrepo,
memd.gitrepo_setup and memd.errors.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memd.errors import NotFound
from memd.gitrepo import GitRepo
from memd.gitrepo_setup import GIT_TIMEOUT

FIELD, RECORD = "\x1f", "\x1e"


@dataclass(frozen=True)
class Commit:
    rev: str
    time: str
    subject: str
    trailers: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        t = self.trailers
        return {
            "rev": self.rev,
            "time": self.time,
            "subject": self.subject,
            "reason": t.get("Memd-Reason", ""),
            "session": t.get("Memd-Session", ""),
            "step": t.get("Memd-Step", ""),
            "trailers": dict(t),
        }


def log(repo: GitRepo, path: str | None, limit: int) -> list[Commit]:
    if not (repo.git_dir / "HEAD").exists() or not repo.run("rev-parse", "--verify", "--quiet", "HEAD", check=False):
        return []
    fmt = FIELD.join(["%H", "%aI", "%s", "%(trailers:only,unfold)"]) + RECORD
    args = ["log", f"--max-count={limit}", f"--format={fmt}"]
    if path:
        args += ["--", path]
    out = repo.run(*args).decode(errors="replace")
    commits = []
    for record in out.split(RECORD):
        record = record.strip("\n")
        if not record:
            continue
        rev, when, subject, trailer_text = [*record.split(FIELD), "", "", "", ""][:4]
        trailers = {}
        for line in trailer_text.splitlines():
            key, sep, value = line.partition(": ")
            if sep:
                trailers[key] = value
        commits.append(Commit(rev, when, subject, trailers))
    return commits


def resolve(repo: GitRepo, rev: str) -> str:
    if rev.startswith("-"):
        raise NotFound(f"{rev!r} is not a revision")
    out = repo.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False).decode().strip()
    if not out:
        raise NotFound(f"no commit {rev!r} in the snapshot history of {repo.work_tree}")
    return out


def show(repo: GitRepo, rev: str, path: str) -> bytes:
    commit = resolve(repo, rev)
    repo.check_root()
    out = subprocess.run(
        [repo.git, "show", f"{commit}:{path}"],
        cwd=repo.work_tree, env=repo.env(), capture_output=True, timeout=GIT_TIMEOUT, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise NotFound(f"{path} does not exist at {rev}")
    return out.stdout


def files_at(repo: GitRepo, rev: str, paths: Sequence[str]) -> dict[str, bytes]:
    """Every file under `paths` at `rev` (relative path -> bytes)."""
    commit = resolve(repo, rev)
    names = repo.run("ls-tree", "-r", "-z", "--name-only", commit, "--", *paths).decode().split("\0")
    return {name: show(repo, commit, name) for name in names if name}


def trailers_of_changes(repo: GitRepo, rev: str, path: str, key: str, limit: int) -> list[str]:
    """The `key` trailers of the last `limit` commits up to `rev` that changed `path`, newest first (commits
    without one left out)."""
    fmt = f"--format=%(trailers:key={key},valueonly,unfold)%x00"
    out = repo.run("log", f"--max-count={limit}", fmt, resolve(repo, rev), "--", path).decode(errors="replace")
    return [value.strip().splitlines()[0] for value in out.split("\0") if value.strip()]


def diff(repo: GitRepo, rev: str, rev2: str | None, paths: Sequence[str]) -> str:
    args = ["diff", resolve(repo, rev)] + ([resolve(repo, rev2)] if rev2 else []) + ["--", *paths]
    return repo.run(*args).decode(errors="replace")
