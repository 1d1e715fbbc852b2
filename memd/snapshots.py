"""Snapshots: each workspace's state committed to git, debounced off the write path, one serialized worker per repo.

Triggers: changes reported by the registry (writes and outside edits, debounced by `settle_seconds` and bounded
by `max_wait_seconds`, so sustained load gives at most one commit per window), the interval flush job (retries
what failed), session start, before a retention sweep deletes, before and after a checkpoint (the hot tier alone:
`tiers`), and shutdown.
Only the workspace's mirror is made while its writer is held (memd.git_mirror: hard links, copies of the small
day files memd appends to), so a snapshot is a consistent state that no batch is half way through; git stages and
commits the mirror after the writer is let go, off the write path. Without a mirror (a restore, which holds the
writer already, or a workspace no mirror can be made of) git stages and commits the workspace under the writer.
Faults degrade snapshots only: git missing, an unsafe repository (merge/rebase in progress), a corrupt repository
or a failing push show in status, and writes go on.
A repository someone deleted (nothing left where its git dir was) is made again by the next snapshot, without a
restart: the old history is gone (logged once), the new one starts from the files. Before that, before every
commit and before any `git init`, the workspace directory must still be the one memd opened
(`Workspace.check_identity`; `GitRepo` checks it again before each git command), so a directory swapped for a
symlink is never initialised or committed through.
The hot tier's layout change (memd's own keys out of hot/context.json into hot/memd.json), which must follow a
commit of the state before it: memd.hot_split, one `HotSplit` per snapshotter (`hot_split`), scheduled when a
workspace is tracked, when a change or a restore (`maybe_split`) leaves memd's keys in context.json, and from every
flush.
Before a retention sweep deletes, `before_destructive` commits and hands back what git holds of `warm/` at HEAD
(`retention.Held`); the sweep deletes or archives only the days whose bytes are that blob.
Reading the history back and restoring files from it: memd.snapshot_history; pushing it to the remote:
memd.snapshot_push. Both drive a Snapshotter through its public methods (`repo_for`, `states`, `commit_locked`,
`io`), as memd.sync and memd.hot_split do.
Imports memd.gitrepo, memd.gitrepo_setup (git's errors, `find_git`), memd.hot_split, memd.git_staging,
memd.git_mirror, memd.workspace, memd.retention (its `Held`), memd.debounce, memd.config and memd.errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from memd import git_mirror, git_staging
from memd.config import SnapshotConfig
from memd.debounce import Debouncer
from memd.errors import MemdError, StorageError, Unavailable
from memd.gitrepo import GitRepo
from memd.gitrepo_setup import GIT_TIMEOUT, GitError, GitMissing, RepoUnsafe, find_git
from memd.hot_split import HotSplit
from memd.retention import Held
from memd.workspace import Workspace

log = logging.getLogger(__name__)
T = TypeVar("T")
State = Literal["new", "ok", "disabled", "repo-unsafe", "error"]
UNDER_WRITER_LOCK_WAIT = 0.5  # seconds a snapshot may wait for index.lock while writes queue behind it
# The trailer of a commit whose cold/MEMORY.md ends with blocks a burst of learnings appended: the file's run mark
# (memd.tiers.cold_store.mark_for). Git keeps no extended attributes; a restore of the file marks it with this
# (memd.snapshot_history), else the blocks were a person's sections to every later fold: a heading twice for good.
COLD_RUN_TRAILER = "Memd-Cold-Run"
COLD_FILE = "cold/MEMORY.md"


@dataclass
class RepoState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    repo: GitRepo | None = None
    state: State = "new"
    dirty: set[str] = field(default_factory=set)
    commits: int = 0
    last_commit: str = ""
    last_commit_at: str = ""
    last_reason: str = ""
    last_error: str = ""
    failures: int = 0  # failed snapshots since start (metrics)
    push_state: str = ""  # "", "ok", "diverged", "error"
    push_error: str = ""
    pushed_head: str = ""
    history_lost: bool = False  # the repository was deleted and not made again yet (logged once)
    sync: dict[str, Any] = field(default_factory=dict)  # the last two-way sync, as memd.sync reports it
    # The hot files as this machine last committed them, where a sync then moved HEAD to another machine's
    # (path -> bytes). While the file still holds them, routine snapshots leave it out: committing it again
    # would only undo the other machine's session in the shared history, and each would do that after every
    # sync, for ever (memd.sync). A change made here, or a `whole` snapshot, commits it.
    hot_kept: dict[str, bytes] = field(default_factory=dict)
    queued: int = 0  # snapshots waiting for `lock` (a restore, a sync, a checkpoint or another snapshot holds it)
    packed_at_commits: int = -1  # `commits` when the maintenance job last looked at the repository
    gcs: int = 0  # `git gc`s run by the maintenance job since start
    last_gc_at: str = ""


class Snapshotter:
    def __init__(self, config: SnapshotConfig, state_dir: Path, io: Executor, adopt_existing: bool = False) -> None:
        self.config = config
        self.state_dir = state_dir
        self.io = io  # the git threads: every git command of these repositories runs in one
        self._adopt = adopt_existing
        # The daemon makes its snapshotter once, as it starts: a git lock older than this was left by a git killed
        # with the previous daemon (GitRepo.ensure clears such locks at once only right after the start).
        self.started_at = time.time()
        self._states: dict[str, RepoState] = {}
        self._workspaces: dict[str, Workspace] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.hot_split = HotSplit(self)
        self._debounce: Debouncer[str] = Debouncer(config.settle_seconds, config.max_wait_seconds, self._fire)
        try:
            self._git: str | None = find_git()
            self._git_problem = ""
        except GitMissing as exc:
            self._git = None
            self._git_problem = exc.message
            if config.enabled:
                log.warning("%s", exc.message)

    # --- wiring ----------------------------------------------------------------------------------------------

    def track(self, ws: Workspace) -> None:
        self._workspaces[ws.name] = ws
        self._states.setdefault(ws.name, RepoState())
        self.hot_split.schedule(ws)

    def reconfigure(self, config: SnapshotConfig) -> None:
        self.config = config
        self._debounce.settle, self._debounce.max_wait = config.settle_seconds, config.max_wait_seconds

    def prune(self, live: set[str]) -> None:
        """Forget workspaces that were removed (reload, discovery)."""
        for name in list(self._workspaces):
            if name not in live:
                self._workspaces.pop(name, None)
                self._debounce.cancel(name)

    def on_change(self, ws: Workspace, tiers: frozenset[str], origin: str) -> None:
        """Change listener (the daemon's Fanout): schedule a debounced snapshot when a snapshotted tier changed."""
        if "hot" in tiers:
            self.hot_split.schedule(ws)
        relevant = tiers & set(self.config.paths)
        if not relevant or not self.config.enabled:
            return
        if ws.name not in self._workspaces:
            self.track(ws)
        self._states[ws.name].dirty |= relevant
        self._debounce.poke(ws.name, "external edit" if origin == "external" else "writes")

    def request(self, ws: Workspace, reason: str) -> None:
        """Snapshot soon, without waiting for it (session start)."""
        if self.config.enabled:
            self.spawn(self.snapshot(ws, reason))

    def _fire(self, name: str, reasons: set[str]) -> None:
        ws = self._workspaces.get(name)
        if ws is not None:
            self.spawn(self.snapshot(ws, " + ".join(sorted(reasons)) or "writes"))

    def spawn(self, coro: Any) -> None:
        """Run `coro` as a task of this snapshotter's: `flush` waits for it (memd.hot_split's too)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def before_destructive(self, ws: Workspace, why: str, days: Sequence[str] = ()) -> Held | None:
        """Commit what is about to be deleted (the day files `days`) and return what git then holds of `warm/`
        (None when snapshots are off or leave out warm: nothing to check against). Refuses (raises) when that
        fails, so nothing leaves history. When HEAD holds each of `days` byte for byte already (they were
        committed as they were written, days ago: the usual sweep), nothing is committed first; the deletion is
        committed with the next snapshot."""
        if not self.config.enabled or "warm" not in self.config.paths:
            return None
        if ws.name not in self._workspaces:
            self.track(ws)
        state = self._states[ws.name]
        held: Held | None = None
        async with state.lock:  # the commit and the listing of what it holds: no other commit in between
            if days and (held := await self._held_at_head(ws, state, days)) is not None:
                return held
            rev, _ = await self._snapshot_locked(ws, state, f"before {why}", None)
            if rev and state.repo is not None:
                try:
                    # The commit just made (or HEAD, when nothing had changed): no `rev-parse` to find it again.
                    head, blobs = await asyncio.get_running_loop().run_in_executor(
                        self.io, state.repo.committed_files, "warm", rev
                    )
                    held = Held(head, blobs)
                except GitError as exc:
                    state.last_error = exc.message
        if held is None:
            raise Unavailable(
                f"not running {why} on {ws.name!r}: its files could not be committed to git first "
                f"({state.last_error or 'unknown error'}); fix the snapshot repository and retry"
            )
        return held

    async def _held_at_head(self, ws: Workspace, state: RepoState, days: Sequence[str]) -> Held | None:
        """What HEAD holds of `warm/`, when it holds each of `days` exactly as the file is now; else None (the
        caller commits first). Nothing that goes wrong here is an error: the caller's commit finds it again, records
        it in status and refuses the sweep with it (git missing, a merge in progress, a swapped directory, ...)."""
        try:
            ws.check_identity()
            repo = await self._repo(ws, state)
            return await asyncio.get_running_loop().run_in_executor(
                self.io, git_staging.held_at_head, repo, ws.warm.directory, days
            )
        except (MemdError, OSError):
            return None

    async def flush(self, reason: str) -> int:
        """Snapshot every dirty workspace now (interval job, shutdown). Returns commits made."""
        self._debounce.drain()  # what was waiting to settle is committed below, under this reason
        for tracked in list(self._workspaces.values()):
            self.hot_split.schedule(tracked)  # one postponed because a commit failed is tried again
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        made = 0
        for name, state in list(self._states.items()):
            ws = self._workspaces.get(name)
            if ws is not None and state.dirty:
                _, created = await self.snapshot(ws, reason)
                made += int(created)
        return made

    # --- the snapshot ----------------------------------------------------------------------------------------

    async def snapshot(
        self,
        ws: Workspace,
        reason: str,
        trailers: dict[str, str] | None = None,
        whole: bool = False,
        tiers: Collection[str] | None = None,
    ) -> tuple[str, bool]:
        """Commit the workspace's current state. Returns (HEAD after, whether a commit was made). `whole`: hot
        files kept from before a sync are committed too (a commit that later stands for this machine's hot state:
        a checkpoint's before and after, an undo). `tiers`: commit only these tiers' paths (a checkpoint's hot
        tier), the others staying as HEAD has them and marked for the next snapshot.

        Errors are recorded in status and returned as ("", False); writes are never affected.
        Lock order, everywhere: this repository's lock, then the workspace's writer.
        """
        if not self.config.enabled:
            return "", False
        if ws.name not in self._workspaces:
            self.track(ws)
        state = self._states[ws.name]
        state.queued += 1
        try:
            await state.lock.acquire()
        finally:
            state.queued -= 1
        try:
            return await self._snapshot_locked(ws, state, reason, trailers, whole=whole, tiers=tiers)
        finally:
            state.lock.release()

    async def _snapshot_locked(
        self,
        ws: Workspace,
        state: RepoState,
        reason: str,
        trailers: dict[str, str] | None,
        held: bool = False,
        whole: bool = False,
        tiers: Collection[str] | None = None,
    ) -> tuple[str, bool]:
        """Commit the workspace as it is; (the commit, True), or (HEAD, False) when nothing changed, or ("", False)
        when it failed (`state` says why). `held`: the caller holds the writer already (a restore). `whole` and
        `tiers`: see `snapshot`."""
        loop = asyncio.get_running_loop()
        try:
            ws.check_identity()
            whole_repo = await self._repo(ws, state)
            # A part of the workspace (a checkpoint's hot tier) is staged and committed from a view limited to its
            # paths: a checkpoint commits twice, several times a minute under a busy agent, and with the whole
            # workspace each commit hashed and compressed today's day file again (~0.3 s of git a commit at
            # 36 MB: over half a core in the soak's last minutes, growing with the day).
            repo = whole_repo if tiers is None else whole_repo.narrowed(tiers)
            # A person's git may hold index.lock for as long as their editor is open: wait for it here, without
            # the writer; under the writer, give up quickly and retry later rather than stall acknowledgements.
            if not held:
                await loop.run_in_executor(self.io, repo.wait_for_index_lock)
            # The marks stay set until the commit is made: a flush that looks meanwhile (shutdown, without this
            # repository's lock) sees the workspace as dirty and waits for the lock, and a snapshot cancelled or
            # failing half-way leaves them for the next one.
            dirty = set(state.dirty) if tiers is None else state.dirty & set(repo.paths)
            doc = ws.hot.doc
            all_trailers = {
                "Memd-Reason": reason,
                "Memd-Session": str(doc.get("session_id") or ""),
                "Memd-Step": str(doc.get("current_step") or ""),
                "Memd-Tiers": ", ".join(sorted(dirty)) if dirty else "",
                **(trailers or {}),
            }
            subject = f"memd: {reason}" + (f" ({', '.join(sorted(dirty))})" if dirty else "")
            body = f"Task: {doc.get('task') or '(none)'}"
            # The commit must be one consistent state that no batch is half-way through: under the writer, the
            # workspace is mirrored (hard links and a copy of the small day files memd appends to: a few ms; the
            # size of a big one), and git stages and commits the mirror once the writer is let go, the big day
            # files' recorded prefixes copied first (memd.git_mirror). Where no mirror can be made, git reads the
            # workspace itself under the writer (~25 ms plus ~12 ms per MB of changed files).
            mirror: git_mirror.Mirror | None = None

            async def stage_and_commit(where: GitRepo, lock_wait: float) -> str:
                staged = await self._to_the_end(git_staging.stage_snapshot, where, state.hot_kept, whole, lock_wait)
                if not staged:
                    return ""
                return await self._to_the_end(git_staging.commit_staged, where, staged, subject, body, all_trailers)

            async with contextlib.nullcontext() if held else ws.exclusive:
                ws.check_identity()
                run_mark = ws.cold.file_run_mark() if "cold" in repo.paths else None
                if run_mark:  # read with the files, under the writer: the mark of the bytes committed
                    all_trailers[COLD_RUN_TRAILER] = run_mark
                if not held:
                    mirror = await self._to_the_end(_mirror, repo, _live_days(ws))
                if mirror is None:
                    rev = await stage_and_commit(repo, UNDER_WRITER_LOCK_WAIT)
            if mirror is not None:
                tree = mirror.tree
                view = repo.over(tree)
                try:
                    await self._to_the_end(git_mirror.complete, mirror)
                    rev = await stage_and_commit(view, GIT_TIMEOUT)
                finally:
                    repo.has_commits = view.has_commits
                    await self._to_the_end(git_mirror.clear, tree, mirror.dirs)
            whole_repo.has_commits = repo.has_commits
            state.dirty -= dirty  # committed (or nothing differed from HEAD); marks set meanwhile stay
            if not rev:
                head = await loop.run_in_executor(self.io, head_or_empty, repo)
                state.state = "ok"
                return head, False
        except RepoUnsafe as exc:
            return self._failed(ws, state, "repo-unsafe", exc.message)
        except GitMissing as exc:
            return self._failed(ws, state, "disabled", exc.message)
        except (GitError, StorageError, OSError) as exc:
            return self._failed(ws, state, "error", getattr(exc, "message", None) or str(exc))
        state.state = "ok"
        state.last_error = ""
        state.commits += 1
        state.last_commit = rev
        state.last_commit_at = ws.clock.now().isoformat(timespec="seconds")
        state.last_reason = reason
        log.debug("workspace %s: snapshot %s (%s)", ws.name, rev[:10], reason)
        return rev, True

    async def _to_the_end(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` (a git command run under the writer) in a worker; cancelled meanwhile, this raises only once
        the command has finished, so that the writer is not let go while git reads the working tree."""
        job = self.io.submit(fn, *args)
        running = asyncio.wrap_future(job)
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            if job.cancel():  # still queued behind other git work (a push): it never touched the tree
                raise
            while not running.done():  # cancelled again meanwhile: still git's end first
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.shield(running)
            raise

    def _failed(self, ws: Workspace, state: RepoState, kind: State, message: str) -> tuple[str, bool]:
        state.dirty |= set(self.config.paths)  # try again on the next trigger or flush
        if state.last_error != message:
            log.warning("workspace %s: snapshot skipped (%s): %s", ws.name, kind, message)
        state.state = kind
        state.last_error = message
        state.failures += 1
        return "", False

    async def _repo(self, ws: Workspace, state: RepoState) -> GitRepo:
        if self._git is None:
            raise GitMissing(self._git_problem)
        loop = asyncio.get_running_loop()
        if state.repo is not None and await loop.run_in_executor(self.io, state.repo.gone):
            # Someone deleted the repository. A workspace that is still the one memd opened (checked above and by
            # `gone`) gets a new one, starting from its files; the next push will report the divergence.
            if not state.history_lost:
                log.warning(
                    "workspace %s: snapshot repository %s was deleted: its history is gone; memd starts a new "
                    "history from the files as they are now",
                    ws.name,
                    state.repo.git_dir,
                )
                state.history_lost = True
            state.repo = None
            state.pushed_head = ""
        if state.repo is None:
            separate = self.state_dir / "git" / f"{ws.name}.git"
            git = self._git
            ws.check_identity()  # never locate, let alone `git init`, in a directory swapped in for the workspace
            repo = await loop.run_in_executor(
                self.io, lambda: GitRepo.locate(ws.root, separate, git, self.config.paths, self._adopt)
            )
            ws.check_identity()
            await loop.run_in_executor(self.io, repo.ensure, self.config.branch, self.started_at)
            state.repo = repo
            state.history_lost = False
        return state.repo

    async def repo_for(self, ws: Workspace) -> GitRepo:
        if not self.config.enabled:
            raise Unavailable("snapshots are disabled (snapshot.enabled = false)")
        if ws.name not in self._workspaces:
            self.track(ws)
        state = self._states[ws.name]
        async with state.lock:
            try:
                return await self._repo(ws, state)
            except GitMissing:
                raise
            except GitError as exc:
                raise Unavailable(f"snapshot repository of {ws.name!r} is unusable: {exc.message}") from None

    # --- memd.sync, memd.snapshot_history and memd.snapshot_push drive these -----------------------------------

    def tracked(self) -> list[Workspace]:
        return list(self._workspaces.values())

    @property
    def states(self) -> Mapping[str, RepoState]:
        """Each tracked workspace's repository state, by name (looked up without tracking anything)."""
        return self._states

    def repo_state(self, ws: Workspace) -> RepoState:
        """This workspace's repository state; its `lock` is the repository lock (taken before the writer)."""
        if ws.name not in self._workspaces:
            self.track(ws)
        return self._states[ws.name]

    def commits(self, tier: str) -> bool:
        """Do snapshots commit `tier` (snapshots on, git found, the tier among `snapshot.paths`)?"""
        return self.config.enabled and self._git is not None and tier in self.config.paths

    def maybe_split(self, ws: Workspace) -> None:
        """Schedule the hot split (memd.hot_split) if `ws` needs one; memd.snapshot_history calls it after a
        restore."""
        self.hot_split.schedule(ws)

    async def repo_locked(self, ws: Workspace, state: RepoState) -> GitRepo:
        """The repository, made if needed; the caller holds `state.lock`."""
        return await self._repo(ws, state)

    async def commit_locked(
        self,
        ws: Workspace,
        state: RepoState,
        reason: str,
        trailers: dict[str, str] | None = None,
        held: bool = False,
        whole: bool = False,
    ) -> tuple[str, bool]:
        """A snapshot; the caller holds `state.lock` (and the writer too when `held`: a restore). Returns (HEAD
        after, whether a commit was made); ("", False) when it failed (`state.last_error` says why) or there is
        nothing to commit in a repository without commits. `whole`: see `snapshot`."""
        return await self._snapshot_locked(ws, state, reason, trailers, held=held, whole=whole)

    def status_for(self, name: str) -> dict[str, Any]:
        if not self.config.enabled:
            return {"state": "disabled", "reason": "snapshot.enabled = false"}
        if self._git is None:
            return {"state": "disabled", "reason": self._git_problem}
        s = self._states.get(name)
        if s is None:
            return {"state": "new"}
        return {
            "state": s.state,
            "git_dir": str(s.repo.git_dir) if s.repo else None,
            "commits": s.commits,
            "last_commit": s.last_commit or None,
            "last_commit_at": s.last_commit_at or None,
            "last_reason": s.last_reason or None,
            "last_error": s.last_error or None,
            "failures": s.failures,
            "pending": bool(s.dirty),
            "queued": s.queued,
            "waiting_for_git": str(s.repo.git_dir / "index.lock") if s.repo and s.repo.lock_waits.count else None,
            "gcs": s.gcs,
            "last_gc_at": s.last_gc_at or None,
            "push": {"state": s.push_state or None, "error": s.push_error or None} if self.config.remote else None,
            "sync": (s.sync or {"state": None}) if self.config.remote else None,
        }


def head_or_empty(repo: GitRepo) -> str:
    try:
        return repo.head()
    except GitError:
        return ""


def _mirror(repo: GitRepo, live_days: set[str]) -> git_mirror.Mirror | None:
    """(In a worker, under the writer.) The workspace's mirror to stage from, or None to stage the workspace itself
    (no mirror where hard links cannot reach it; none either when making it failed, a full disk say: logged)."""
    try:
        return git_mirror.build(repo, live_days)
    except OSError as exc:
        log.warning("snapshot of %s staged under the writer: its mirror could not be made: %s", repo.root, exc)
        with contextlib.suppress(OSError):
            git_mirror.remove(repo.git_dir / git_mirror.MIRROR_DIR)
        return None


def _live_days(ws: Workspace) -> set[str]:
    """The warm day files memd may append to while git reads a mirror: the workspace's today and its neighbours."""
    today = ws.today()
    return {f"{today + timedelta(days=d)}.md" for d in (-1, 0, 1)}
