"""One workspace and its single writer: every change to a workspace's files goes through `Workspace.write`.

Group commit: writes that arrive while a batch is being made durable wait in the queue and form the next batch.
A batch applies each request's edit to a draft (hot document, cold text, warm entries), turns the draft into at
most one atomic replace per file plus one append per warm day, makes that durable in a worker thread (the event
loop never blocks on fsync), and only then publishes the new state and acknowledges the requests. If the disk
write fails, every request of the batch gets a StorageError and the in-memory state stays as it was.

Before a batch, each file it may rewrite is checked against what memd last saw (size, mtime, inode): a file
changed by someone else is re-read first and the edits are applied on top of it (contract 2).
Imports the tiers, memd.retention, memd.fsio, memd.tokens, memd.config and memd.errors.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar
from zoneinfo import ZoneInfo

from memd import fsio, retention
from memd.config import WorkspaceConfig
from memd.errors import Busy, MemdError, ShuttingDown, StorageError
from memd.tiers import cold_format, warm_format
from memd.tiers.cold_store import ColdStore
from memd.tiers.hot_format import HotDoc
from memd.tiers.hot_store import HotStore
from memd.tiers.warm_format import WarmEntry
from memd.tiers.warm_store import WarmStore
from memd.tokens import TierUsage, TokenCounter

log = logging.getLogger(__name__)
T = TypeVar("T")
TIERS = ("hot", "warm", "cold")


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware."""
        ...


@dataclass
class Draft:
    """What one batch will write. Edits replace `hot`/`cold` with new values; warm entries accumulate."""

    hot: HotDoc
    cold: str
    now: datetime
    local: datetime
    warm: list[WarmEntry] = field(default_factory=list)
    warm_text: list[str] = field(default_factory=list)
    _hot_store: HotStore | None = None
    _cold_store: ColdStore | None = None

    def set_hot(self, doc: HotDoc) -> None:
        self.hot = doc

    def edit_hot(self) -> HotDoc:
        """The current draft hot document, after checking that the hot file is writable (not corrupt)."""
        if self._hot_store is not None:
            self._hot_store.require_valid()
        return self.hot

    def log(self, action: str, details: tuple[tuple[str, str], ...] = (), result: str | None = None) -> WarmEntry:
        entry = WarmEntry(time=self.local.strftime("%H:%M:%S"), action=action, details=details, result=result)
        rendered = warm_format.render_entry(entry)
        rendered.encode("utf-8")  # fail this request now, not the whole batch later
        self.warm.append(entry)
        self.warm_text.append(rendered)
        return entry

    def learn(self, category: str, text: str) -> str:
        if self._cold_store is not None:
            self._cold_store.require_valid()
        day = self.local.date().isoformat()
        self.cold = cold_format.insert_learning(self.cold, category, day, text)
        return day


Edit = Callable[[Draft], T]


@dataclass
class Health:
    """What status shows about this workspace's storage."""

    last_write_error: str = ""
    last_write_error_at: str = ""
    write_fault: bool = False  # the last batch that wrote failed; cleared by the next one that succeeds
    writes: int = 0
    batches: int = 0


class Workspace:
    def __init__(
        self,
        config: WorkspaceConfig,
        counter: TokenCounter,
        clock: Clock,
        io: Executor,
        max_pending: int = 10_000,
        on_commit: Callable[[Workspace, frozenset[str]], None] | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.root = config.path
        self.counter = counter
        self.clock = clock
        self.tz = ZoneInfo(config.warm.timezone)
        self._io = io
        self.max_pending = max_pending
        self.on_commit = on_commit
        self.hot = HotStore(self.root / "hot" / "context.json", counter)
        self.warm = WarmStore(self.root / "warm", counter)
        self.cold = ColdStore(self.root / "cold" / "MEMORY.md", counter)
        self.health = Health()
        self._usage_cache: tuple[Any, dict[str, Any]] | None = None
        self._queue: list[tuple[Edit[Any], asyncio.Future[Any]]] = []
        self.before_destructive: Callable[[Workspace, str], Awaitable[None]] | None = None
        self.last_sweep: dict[str, Any] = {}
        self._exclusive = asyncio.Lock()  # a batch, or a sweep: never both at once
        self._writer: asyncio.Task[None] | None = None
        self._in_flight = False
        self._closing = False

    # --- lifecycle ------------------------------------------------------------------------------------------

    def open(self) -> list[str]:
        """Create the tier directories, remove memd's stale temp files, load every tier. Returns removed temps."""
        for tier in TIERS:
            fsio.ensure_dir(self.root / tier)
        removed = fsio.remove_stale_temp_files([self.root / t for t in TIERS])
        self.hot.load()
        self.cold.load()
        self.warm.scan()
        for day in self.warm.recent_days(self.today(), self.config.warm.recent_days):
            self.warm.tokens_for(day)  # a 10 MB day file is counted now, not by the first write after start
        return [str(p) for p in removed]

    def reconfigure(self, config: WorkspaceConfig) -> None:
        """Take a reloaded config for the same directory (budgets, retention, access lists)."""
        self.config = config
        self.tz = ZoneInfo(config.warm.timezone)

    async def close(self) -> None:
        """Stop taking writes and wait until every queued one is durable or failed."""
        self._closing = True
        if self._writer is not None:
            await asyncio.shield(self._writer)

    @property
    def pending(self) -> int:
        return len(self._queue)

    # --- writes ---------------------------------------------------------------------------------------------

    async def write(self, edit: Edit[T]) -> T:
        """Apply `edit` in the next batch; returns its result once the batch is durable on disk."""
        if self._closing:
            raise ShuttingDown("memd is shutting down; retry against the restarted daemon")
        if len(self._queue) >= self.max_pending:
            raise Busy(f"workspace {self.name!r} has {len(self._queue)} writes queued; retry shortly")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append((edit, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name=f"writer:{self.name}")
        return await future

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                async with self._exclusive:
                    await self._commit(batch)
            except Exception as exc:  # a bug: fail the batch loudly rather than hang its clients
                log.exception("workspace %s: batch failed unexpectedly", self.name)
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)

    async def _commit(self, batch: list[tuple[Edit[Any], asyncio.Future[Any]]]) -> None:
        now = self.clock.now()
        local = now.astimezone(self.tz)
        today = local.date()
        self.hot.refresh()
        self.cold.refresh()
        self.warm.refresh_day(today)
        draft = Draft(self.hot.doc, self.cold.text, now, local, _hot_store=self.hot, _cold_store=self.cold)
        accepted: list[tuple[asyncio.Future[Any], Any]] = []
        for edit, future in batch:
            if future.cancelled():
                continue
            hot, cold, logged = draft.hot, draft.cold, len(draft.warm)
            try:
                accepted.append((future, edit(draft)))
            except Exception as exc:  # this request fails alone: undo its part of the draft
                draft.hot, draft.cold = hot, cold
                del draft.warm[logged:], draft.warm_text[logged:]
                if not isinstance(exc, MemdError):
                    log.exception("workspace %s: an edit failed", self.name)
                future.set_exception(exc)
        writes: list[fsio.FileWrite] = []
        warm_write = None
        if draft.warm:
            try:
                warm_write = self.warm.plan_append(today, draft.warm_text)
            except OSError as exc:  # today's file is a symlink, a FIFO, unreadable: refuse, never follow
                self._fail(accepted, exc)
                return
            writes.append(warm_write)
        cold_write = self.cold.write_for(draft.cold) if draft.cold is not self.cold.text else None
        hot_write = self.hot.write_for(draft.hot) if draft.hot is not self.hot.doc else None
        writes += [w for w in (cold_write, hot_write) if w is not None]
        if writes:
            self._in_flight = True
            try:
                fps = await asyncio.get_running_loop().run_in_executor(self._io, _apply_writes, self.root, writes)
            except OSError as exc:
                self._fail(accepted, exc)
                return
            finally:
                self._in_flight = False
            changed = self._publish(draft, today, writes, fps, warm_write, cold_write, hot_write)
            if self.health.write_fault:
                self.health.write_fault = False
                log.info("workspace %s: writes succeed again", self.name)
        else:
            changed = frozenset()
        self.health.batches += 1
        self.health.writes += len(accepted)
        for future, result in accepted:
            if not future.done():
                future.set_result(result)
        if changed and self.on_commit is not None:
            self.on_commit(self, changed)

    def _publish(
        self,
        draft: Draft,
        today: date,
        writes: list[fsio.FileWrite],
        fps: list[fsio.Fingerprint],
        warm_write: fsio.FileWrite | None,
        cold_write: fsio.FileWrite | None,
        hot_write: fsio.FileWrite | None,
    ) -> frozenset[str]:
        by_write = dict(zip((id(w) for w in writes), fps, strict=True))
        changed: set[str] = set()
        if warm_write is not None:
            self.warm.commit_append(today, by_write[id(warm_write)], warm_write, draft.warm)
            changed.add("warm")
        if cold_write is not None:
            self.cold.commit(draft.cold, by_write[id(cold_write)])
            changed.add("cold")
        if hot_write is not None:
            self.hot.commit(draft.hot, by_write[id(hot_write)], self.hot.count(draft.hot))
            changed.add("hot")
        return frozenset(changed)

    def _fail(self, accepted: list[tuple[asyncio.Future[Any], Any]], exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        where = exc.filename or self.root
        message = f"could not write workspace {self.name!r} durably: {reason} ({where}); nothing was acknowledged"
        self.health.last_write_error = message
        self.health.write_fault = True
        self.health.last_write_error_at = self.clock.now().isoformat(timespec="seconds")
        log.error("%s", message)
        # What reached the disk before the failure is re-read on the next batch (fingerprints differ).
        self.hot.fingerprint = self.cold.fingerprint = None
        for future, _ in accepted:
            if not future.done():
                future.set_exception(StorageError(message, data={"errno": exc.errno}))

    @property
    def exclusive(self) -> asyncio.Lock:
        """Held while a batch is written; hold it to see (or change) the files with no batch half-way through."""
        return self._exclusive

    async def restore_files(self, files: dict[str, bytes], paths: list[str]) -> list[str]:
        """Make `paths` hold exactly `files` (relative path -> bytes), durably. Returns the paths changed."""
        loop = asyncio.get_running_loop()
        async with self._exclusive:
            changed = await loop.run_in_executor(self._io, _replace_tree, self.root, files, paths)
            self.hot.load()
            self.cold.load()
            self.warm.scan()
        return changed

    # --- retention -----------------------------------------------------------------------------------------

    async def sweep(self, dry_run: bool) -> dict[str, Any]:
        """Delete or archive expired warm days (exactly what a dry run lists); log it in today's warm file."""
        policy = self.config.warm
        today = self.today()
        loop = asyncio.get_running_loop()
        removed: list[str] = []
        plan = retention.plan_sweep(self.warm.directory, today, policy.retention_days)
        if plan.expired and not dry_run:
            if self.before_destructive is not None:  # commits the files first; takes the writer itself
                await self.before_destructive(self, "retention")
            async with self._exclusive:
                # Planned again under the writer: only what is still expired (and was just committed) goes.
                plan = retention.plan_sweep(self.warm.directory, today, policy.retention_days)
                action = retention.archive_expired if policy.mode == "archive" else retention.delete_expired
                try:
                    removed = await loop.run_in_executor(self._io, action, plan)
                except OSError as exc:
                    raise StorageError(
                        f"retention sweep of {self.name!r} stopped: {exc.strerror or exc} ({exc.filename or ''}); "
                        "files not yet removed stay in warm/",
                        data={"errno": exc.errno},
                    ) from None
                finally:
                    self.warm.scan()
        result: dict[str, Any] = {
            "workspace": self.name,
            "dry_run": dry_run,
            "mode": policy.mode,
            "retention_days": policy.retention_days,
            "today": today.isoformat(),
            "expired": list(plan.expired),
            "removed": removed,
            "at": self.clock.now().isoformat(timespec="seconds"),
        }
        if removed:
            details = (("mode", policy.mode), ("removed", ", ".join(removed)))
            try:
                await self.write(lambda draft: draft.log("retention-sweep", details, f"{len(removed)} day file(s)"))
            except MemdError as exc:  # the files are gone either way; say why the log line is missing
                result["log_error"] = exc.message
        if not dry_run:
            self.last_sweep = result
        return result

    # --- reads ----------------------------------------------------------------------------------------------

    def refresh(self) -> set[str]:
        """Adopt outside changes before a read. Skipped while a batch is in flight (it re-checks itself)."""
        if self._in_flight:
            return set()
        changed = set()
        if self.hot.refresh():
            changed.add("hot")
        if self.warm.scan():
            changed.add("warm")
        if self.cold.refresh():
            changed.add("cold")
        return changed

    def day_entries(self, day: date) -> tuple[list[WarmEntry], str]:
        """A day's entries from warm/ or, once swept into it, from the archive. Returns (entries, source)."""
        if day in self.warm.days:
            return self.warm.entries_for(day), "warm"
        archived = retention.read_archived_day(self.warm.directory, day)
        if archived is not None:
            return warm_format.parse_day(archived), "archive"
        return [], "none"

    def today(self) -> date:
        return self.clock.now().astimezone(self.tz).date()

    def usage(self) -> dict[str, TierUsage]:
        budget = self.config.budget
        recent = self.warm.recent_days(self.today(), self.config.warm.recent_days)
        return {
            "hot": TierUsage(self.hot.tokens, budget.hot),
            "warm": TierUsage(sum(self.warm.tokens_for(d) for d in recent), budget.warm),
            "cold": TierUsage(self.cold.tokens, budget.cold),
        }

    def usage_dict(self) -> dict[str, Any]:
        """Usage for replies; cached until a tier changes (every write's reply carries it). Do not mutate."""
        key = (self.hot.tokens, self.cold.tokens, self.warm.version, self.today(), self.config.budget)
        if self._usage_cache is None or self._usage_cache[0] != key:
            usage = {tier: u.as_dict() for tier, u in self.usage().items()}
            key = (self.hot.tokens, self.cold.tokens, self.warm.version, self.today(), self.config.budget)
            self._usage_cache = (key, usage)
        return self._usage_cache[1]


def _regular_files(base: Path) -> list[Path]:
    """Regular files under `base`, never descending into symlinked directories."""
    found: list[Path] = []
    for directory, _dirs, names in os.walk(base, followlinks=False):
        for name in names:
            path = Path(directory) / name
            if path.is_file() and not path.is_symlink():
                found.append(path)
    return found


def _apply_writes(root: Path, writes: list[fsio.FileWrite]) -> list[fsio.Fingerprint]:
    """Runs in a worker thread. A tier directory someone removed is made again (the workspace root never is:
    a removed workspace stays removed), so one `rm -r warm` does not fail every later write."""
    for write in writes:
        tier_dir = write.path.parent
        if not tier_dir.exists() and not tier_dir.is_symlink() and root.is_dir():
            fsio.ensure_dir(tier_dir)
    return fsio.apply_writes(writes)


def _replace_tree(root: Path, files: dict[str, bytes], paths: list[str]) -> list[str]:
    """Runs in a worker thread: write every file of `files`, remove the other files under `paths`."""
    changed: list[str] = []
    for top in {rel.split("/")[0] for rel in files} | set(paths):
        if (root / top).is_symlink():
            raise OSError(errno.ELOOP, f"{root / top} is a symlink; memd does not restore through it")
    for rel, data in sorted(files.items()):
        target = root / rel
        if fsio.read_bytes(target) != data:
            fsio.ensure_dir(target.parent)
            fsio.atomic_replace(target, data)
            changed.append(rel)
    for top in paths:
        base = root / top
        candidates = (
            [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file() and not p.is_symlink())
        )
        for path in candidates:
            rel = str(path.relative_to(root))
            if rel not in files and not fsio.is_temp_name(path.name):
                path.unlink()
                fsio.fsync_dir(path.parent)
                changed.append(rel)
    return changed
