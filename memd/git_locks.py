"""The locks git leaves in a snapshot repository: waiting for a live git's `index.lock`, and removing the ones a
git killed half-way left behind. Blocking: run it in a worker thread.

A person's git may hold `index.lock` for as long as their `git commit` editor is open: a snapshot waits for it
(`index_lock_released`; `GitRepo.wait_for_index_lock` turns a wait that runs out into a GitError), and status
shows that it waits (`Waiters`, shared by a repository and its views). A git killed in the middle of a commit or a
sync (a daemon killed with its process group) leaves `HEAD.lock`, `refs/**/*.lock` and the like, which would fail
every later commit: `clear_stale_locks` removes them once they are old enough (`STALE_LOCK_SECONDS`, or less right
after the daemon's start: `start_lock_age`) and no git is running in the repository (a /proc scan). Nothing is
ever removed outside the workspace directory the repository was made for (`GitRepo.check_root` first).
Imports memd.fsio (memd.gitrepo's `GitRepo` only for annotations: memd.gitrepo calls this module when it opens
a repository).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from memd import fsio

if TYPE_CHECKING:
    from memd.gitrepo import GitRepo

STALE_LOCK_SECONDS = 30.0


class Waiters:
    """How many of memd's snapshots are waiting for a running git's index.lock right now (status shows it: a
    person whose `git commit` editor is open sees why memd has not committed). One per repository; its views
    (`GitRepo.over`) share it, so their waits count as the repository's."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        with self._lock:
            self.count += 1
        try:
            yield
        finally:
            with self._lock:
                self.count -= 1


def start_lock_age(started_at: float | None, now: float | None = None) -> float:
    """The age at which `ensure` takes a lock for stale: 0 at the daemon's start-up (no git of this daemon has run
    yet, so a lock from before its start was left by a git killed with the previous one), growing with the time
    since, up to STALE_LOCK_SECONDS; STALE_LOCK_SECONDS when the start is not known (not a daemon start)."""
    if started_at is None:
        return STALE_LOCK_SECONDS
    elapsed = (time.time() if now is None else now) - started_at
    return min(STALE_LOCK_SECONDS, max(0.0, elapsed))


def clear_stale_locks(repo: GitRepo, min_age: float = STALE_LOCK_SECONDS) -> list[str]:
    """Remove the ref and config locks (`HEAD.lock`, `refs/**/*.lock`, ...) a git killed half-way left behind
    (a daemon killed with its process group in the middle of a commit or a sync): at least `min_age` seconds
    old, and no git running in this repository. A left ref lock would fail every later commit. Returns what
    was removed. `ensure` lowers `min_age` only right after the daemon started (`start_lock_age`): a lock
    older than this daemon was not made by any git of it, whereas later a fresh lock may be a live git's (of
    another user, whose processes memd may not see), so it waits the full STALE_LOCK_SECONDS."""
    repo.check_root()
    found = [repo.git_dir / f"{name}.lock" for name in ("index", "HEAD", "ORIG_HEAD", "config", "packed-refs")]
    refs = repo.git_dir / "refs"
    if fsio.is_real_dir(refs):  # os.walk: a third of rglob's time, and this runs before every snapshot
        found += [Path(top, name) for top, _, names in os.walk(refs) for name in names if name.endswith(".lock")]
    present = [p for p in found if p.is_file() and not p.is_symlink()]
    now = time.time()
    old = []
    for lock in present:
        with contextlib.suppress(FileNotFoundError):
            if now - lock.stat().st_mtime >= min_age:
                old.append(lock)
    if not old or _git_running_in(repo.git_dir, repo.root):
        return []
    for lock in old:
        lock.unlink(missing_ok=True)
    return [str(p.relative_to(repo.git_dir)) for p in old]


def index_lock_released(repo: GitRepo, timeout: float) -> bool:
    """Wait for a live git's index.lock; remove one left by a git that died (old, nobody running), and the stale
    ref locks such a git leaves (`clear_stale_locks`). False when a running git still holds it after `timeout`
    seconds (`GitRepo.wait_for_index_lock` raises then), else True."""
    repo.check_root()  # a stale lock is removed below: only ever in the workspace memd opened
    clear_stale_locks(repo)
    lock = repo.git_dir / "index.lock"
    if not lock.exists():
        return True
    with repo.lock_waits.waiting():
        deadline = time.monotonic() + timeout
        while lock.exists():
            try:
                age = time.time() - lock.stat().st_mtime
            except FileNotFoundError:
                return True
            if age > STALE_LOCK_SECONDS and not _git_running_in(repo.git_dir, repo.root):
                lock.unlink(missing_ok=True)
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
    return True


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
