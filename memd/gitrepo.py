"""The git CLI adapter for one workspace's snapshot repository. Blocking calls: run them in a worker thread.

Where the repository lives: `<workspace>/.git` when memd creates it there (so `git log hot/context.json` works
in the workspace), unless that would nest inside, or take over, a repository memd did not create: a workspace
inside someone's project work tree, or one that already has its own `.git`, gets a separate git dir under the
state directory (`core.worktree` pointing at the workspace), which never touches the outer repository. A
`.git` that exists is used only if it says `memd.managed = true`, or if the config says to adopt it.

Every call: a timeout, `GIT_TERMINAL_PROMPT=0`, an explicit identity, hooks disabled, no detached gc,
`core.fsync=all` for durable objects and refs, `safe.directory` set for the paths memd owns.
Imports only memd.errors.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memd.errors import MemdError, NotFound, Unavailable

GIT_TIMEOUT = 30.0
STALE_LOCK_SECONDS = 30.0
FIELD, RECORD = "\x1f", "\x1e"
TRAILERS = (
    "Memd-Reason",
    "Memd-Session",
    "Memd-Step",
    "Memd-Tiers",
    "Memd-Checkpoint",
    "Memd-Tokens-Before",
    "Memd-Tokens-After",
)
_UNSAFE_MARKERS = ("MERGE_HEAD", "rebase-merge", "rebase-apply", "CHERRY_PICK_HEAD", "REVERT_HEAD", "BISECT_LOG")


class GitError(MemdError):
    code = -32010


class RepoUnsafe(GitError):
    """A merge, rebase or similar is in progress: memd will not commit into the middle of it."""


class GitMissing(Unavailable):
    pass


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


def find_git() -> str:
    git = shutil.which("git")
    if git is None:
        raise GitMissing("git is not on PATH: snapshots are disabled (install git; writes are unaffected)")
    return git


def inside_other_work_tree(path: Path, git: str) -> bool:
    """True when `path`'s parent belongs to a git work tree (someone's project repository)."""
    try:
        out = subprocess.run(
            [git, "-C", str(path.parent), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            timeout=GIT_TIMEOUT,
            env={**_base_env(), "GIT_CEILING_DIRECTORIES": ""},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == b"true"


def _base_env() -> dict[str, str]:
    # What git needs to run and to reach a push remote (an ssh agent, a custom ssh command); nothing else.
    passed = ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "SSH_AUTH_SOCK", "GIT_SSH_COMMAND", "GIT_SSH")
    keep = {k: v for k, v in os.environ.items() if k in passed}
    return {
        **keep,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "memd",
        "GIT_AUTHOR_EMAIL": "memd@localhost",
        "GIT_COMMITTER_NAME": "memd",
        "GIT_COMMITTER_EMAIL": "memd@localhost",
        "GIT_OPTIONAL_LOCKS": "0",
    }


class GitRepo:
    def __init__(self, work_tree: Path, git_dir: Path, git: str, paths: Sequence[str]) -> None:
        self.work_tree = work_tree
        self.git_dir = git_dir
        self.git = git
        self.paths = tuple(paths)

    @classmethod
    def locate(cls, work_tree: Path, separate_dir: Path, git: str, paths: Sequence[str], adopt: bool) -> GitRepo:
        """Choose where this workspace's snapshot repository lives (see the module docstring)."""
        own = work_tree / ".git"
        if own.is_dir():
            if adopt or _managed_marker(git, own) == "true":
                return cls(work_tree, own, git, paths)
            return cls(work_tree, separate_dir, git, paths)
        if own.exists() or inside_other_work_tree(work_tree, git):
            return cls(work_tree, separate_dir, git, paths)
        return cls(work_tree, own, git, paths)

    # --- plumbing --------------------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        return {**_base_env(), "GIT_DIR": str(self.git_dir), "GIT_WORK_TREE": str(self.work_tree)}

    def run(self, *args: str, check: bool = True, timeout: float = GIT_TIMEOUT, input: bytes | None = None) -> bytes:
        return self._exec(args, check, timeout, input).stdout

    def returncode(self, *args: str) -> int:
        return self._exec(args, False, GIT_TIMEOUT, None).returncode

    def _exec(
        self, args: Sequence[str], check: bool, timeout: float, input: bytes | None
    ) -> subprocess.CompletedProcess[bytes]:
        cmd = [
            self.git,
            "-c", "core.hooksPath=/dev/null",
            "-c", "gc.autoDetach=false",
            "-c", "gc.auto=0",
            "-c", "core.fsync=all",
            "-c", "core.fsyncMethod=fsync",
            "-c", f"safe.directory={self.work_tree}",
            "-c", f"safe.directory={self.git_dir}",
            "-c", "commit.gpgSign=false",
            "-c", "core.quotePath=false",
            *args,
        ]  # fmt: skip
        try:
            out = subprocess.run(
                cmd, cwd=self.work_tree, env=self._env(), capture_output=True, timeout=timeout, input=input, check=False
            )
        except FileNotFoundError:
            raise GitMissing(f"git binary {self.git} is gone: snapshots are disabled") from None
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} timed out after {timeout:.0f}s in {self.git_dir}") from None
        except OSError as exc:  # E2BIG for an absurd argument list, EMFILE, ...
            raise GitError(f"cannot run git {args[0]}: {exc.strerror or exc}") from None
        if check and out.returncode != 0:
            err = out.stderr.decode(errors="replace").strip()
            raise GitError(f"git {args[0]} failed in {self.git_dir}: {err or f'exit {out.returncode}'}")
        return out

    # --- snapshots -------------------------------------------------------------------------------------------

    def ensure(self, branch: str) -> None:
        """Create the repository on first use (memd-managed, with what it must ignore)."""
        if (self.git_dir / "HEAD").exists():
            return
        if not self.work_tree.is_dir():
            raise GitError(f"workspace directory {self.work_tree} is gone; not creating a repository for it")
        self.git_dir.parent.mkdir(parents=True, exist_ok=True)
        # Built under a temporary name and renamed into place, so a kill half-way never leaves a `.git` without
        # its memd.managed mark (which memd would then take for someone else's repository).
        final = self.git_dir
        for leftover in final.parent.glob(f"{final.name}.memd-tmp-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        self.git_dir = final.parent / f"{final.name}.memd-tmp-{os.getpid()}"
        try:
            self.run("init", "--quiet", f"--initial-branch={branch}")
            self.run("config", "memd.managed", "true")
            self.run("config", "core.worktree", str(self.work_tree))
            exclude = self.git_dir / "info" / "exclude"
            exclude.parent.mkdir(parents=True, exist_ok=True)
            exclude.write_text("# written by memd\n*.memd-tmp-*\n.git.memd-tmp-*\n")
            os.rename(self.git_dir, final)
        except BaseException:
            shutil.rmtree(self.git_dir, ignore_errors=True)
            raise
        finally:
            self.git_dir = final

    def check_safe(self) -> None:
        for marker in _UNSAFE_MARKERS:
            if (self.git_dir / marker).exists():
                raise RepoUnsafe(
                    f"repo-unsafe: {marker} in {self.git_dir} (a merge/rebase is in progress); memd skips snapshots "
                    "until it is finished or aborted"
                )

    def wait_for_index_lock(self, timeout: float = GIT_TIMEOUT) -> None:
        """Wait for a live git's index.lock; remove one left by a git that died (old, nobody running)."""
        lock = self.git_dir / "index.lock"
        deadline = time.monotonic() + timeout
        while lock.exists():
            try:
                age = time.time() - lock.stat().st_mtime
            except FileNotFoundError:
                return
            if age > STALE_LOCK_SECONDS and not _git_running_in(self.git_dir, self.work_tree):
                lock.unlink(missing_ok=True)
                return
            if time.monotonic() > deadline:
                raise GitError(f"{lock} is held by a running git for over {timeout:.0f}s; snapshot postponed")
            time.sleep(0.05)

    def stage(self, lock_wait: float = GIT_TIMEOUT) -> list[str]:
        """Stage the snapshot paths. Returns the files that differ from HEAD (deletions included); [] if none."""
        self.check_safe()
        self.wait_for_index_lock(lock_wait)
        present = [p for p in self.paths if (self.work_tree / p).exists() or self._tracked(p)]
        if not present:
            return []
        self.run("add", "--all", "--", *present)
        if self.returncode("rev-parse", "--verify", "--quiet", "HEAD") != 0:  # no commit yet
            listing = self.run("ls-files", "-z", "--", *present)
        else:
            listing = self.run("diff", "--cached", "--name-only", "--no-renames", "-z", "HEAD", "--", *present)
        return [name for name in listing.decode("utf-8", "surrogateescape").split("\0") if name]

    def _tracked(self, path: str) -> bool:
        if not (self.git_dir / "HEAD").exists():
            return False
        return bool(self.run("ls-files", "--", path, check=False).strip())

    def commit(self, paths: Sequence[str], subject: str, body: str, trailers: Mapping[str, str]) -> str:
        """Commit exactly the files `stage` listed (`--only`: anything else someone staged in an adopted
        repository stays staged and out of memd's commit)."""
        lines = [subject, ""]
        if body:
            lines += [body, ""]
        lines += [f"{k}: {_one_line(v)}" for k, v in trailers.items() if v != ""]
        message = "\n".join(lines).encode()
        self.run(
            "commit",
            "--quiet",
            "--no-verify",
            "--allow-empty-message",
            "-F",
            "-",
            "--only",
            "--",
            *paths,
            input=message,
        )
        return self.head()

    def head(self) -> str:
        return self.run("rev-parse", "HEAD").decode().strip()

    # --- history ---------------------------------------------------------------------------------------------

    def log(self, path: str | None, limit: int) -> list[Commit]:
        if not (self.git_dir / "HEAD").exists() or not self.run(
            "rev-parse", "--verify", "--quiet", "HEAD", check=False
        ):
            return []
        fmt = FIELD.join(["%H", "%aI", "%s", "%(trailers:only,unfold)"]) + RECORD
        args = ["log", f"--max-count={limit}", f"--format={fmt}"]
        if path:
            args += ["--", path]
        out = self.run(*args).decode(errors="replace")
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

    def resolve(self, rev: str) -> str:
        if rev.startswith("-"):
            raise NotFound(f"{rev!r} is not a revision")
        out = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False).decode().strip()
        if not out:
            raise NotFound(f"no commit {rev!r} in the snapshot history of {self.work_tree}")
        return out

    def show(self, rev: str, path: str) -> bytes:
        commit = self.resolve(rev)
        out = subprocess.run(
            [self.git, "show", f"{commit}:{path}"],
            cwd=self.work_tree, env=self._env(), capture_output=True, timeout=GIT_TIMEOUT, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            raise NotFound(f"{path} does not exist at {rev}")
        return out.stdout

    def files_at(self, rev: str, paths: Sequence[str]) -> dict[str, bytes]:
        """Every file under `paths` at `rev` (relative path -> bytes)."""
        commit = self.resolve(rev)
        names = self.run("ls-tree", "-r", "-z", "--name-only", commit, "--", *paths).decode().split("\0")
        return {name: self.show(commit, name) for name in names if name}

    def diff(self, rev: str, rev2: str | None, paths: Sequence[str]) -> str:
        args = ["diff", self.resolve(rev)] + ([self.resolve(rev2)] if rev2 else []) + ["--", *paths]
        return self.run(*args).decode(errors="replace")

    # --- push ------------------------------------------------------------------------------------------------

    def push(self, remote: str, branch: str, timeout: float) -> str:
        """Fast-forward push of HEAD. Returns "ok", "diverged" or raises GitError."""
        cmd = [self.git, "-c", "core.hooksPath=/dev/null", "push", "--porcelain", remote, f"HEAD:refs/heads/{branch}"]
        try:
            out = subprocess.run(
                cmd, cwd=self.work_tree, env=self._env(), capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise GitError(f"git push to {remote} timed out after {timeout:.0f}s") from None
        text = (out.stdout + out.stderr).decode(errors="replace")
        if out.returncode == 0:
            return "ok"
        if "non-fast-forward" in text or "fetch first" in text or "[rejected]" in text:
            return "diverged"
        raise GitError(f"git push to {remote} failed: {text.strip()[-500:]}")

    def fsck(self) -> str:
        return self.run("fsck", "--no-progress", check=False).decode(errors="replace")


def _managed_marker(git: str, git_dir: Path) -> str:
    """`memd.managed` read from the config file itself: a repository whose HEAD or objects broke while memd was
    down is still recognised as memd's (and reported as broken) instead of being replaced by a fresh one."""
    config = git_dir / "config"
    if not config.exists():
        return ""
    try:
        out = subprocess.run(
            [git, "config", "--file", str(config), "--get", "memd.managed"],
            capture_output=True, timeout=GIT_TIMEOUT, env=_base_env(), check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if out.returncode not in (0, 1):  # 1: key absent; anything else: the file cannot be read
        raise GitError(f"cannot read {config} to tell whether memd manages it: {out.stderr.decode().strip()}")
    return out.stdout.decode().strip()


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]


def _git_running_in(git_dir: Path, work_tree: Path) -> bool:
    """Is any git process working in this repository? (Linux /proc scan, good enough for a lock heuristic.)"""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if not cmdline or not cmdline[0].endswith(b"git"):
                continue
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd in (str(work_tree), str(git_dir)) or cwd.startswith(str(work_tree) + "/"):
            return True
    return False
