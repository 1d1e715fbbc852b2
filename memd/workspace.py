"""One workspace: its tier state (hot, warm, cold stores), its reads, and its writer (its retention sweep is
memd/sweep.py).

Every change to the workspace's files goes through `Workspace.write`, which hands the edit to the workspace's
single writer (memd.writer: queue, group commit, durable I/O, publish, acknowledge) with the tier planner
(memd.planner) that turns edits into file writes. Outside changes are adopted here (`adopt`, `refresh`), under
the same exclusive lock as the writer's batches, so a batch is never planned on a half-loaded store.

The workspace directory is pinned (device, inode) when opened: a swapped-in symlink or directory fails every
batch, read, sweep and restore of this workspace with a StorageError instead of touching another place. What
happened is told to one change sink given at construction (memd.changes). Imports memd.writer, memd.planner,
memd.changes, memd.batch, memd.early_ack, the tiers, memd.retention, memd.fsio, memd.fsio_batch, memd.tokens,
memd.exclusive, memd.config and memd.errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import date
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from memd import fsio, fsio_batch, promote, retention
from memd.batch import Batch, Edit
from memd.changes import ChangeSink, NoSink
from memd.cold_fold import ColdFolder
from memd.config import LimitsConfig, WorkspaceConfig
from memd.early_ack import EarlyAck
from memd.errors import StorageError
from memd.exclusive import ExclusiveLock
from memd.planner import Clock, TierPlanner
from memd.tiers import warm_format
from memd.tiers.cold_store import ColdStore
from memd.tiers.hot_store import HotStore
from memd.tiers.proposals_store import ProposalsStore
from memd.tiers.warm_format import WarmEntry
from memd.tiers.warm_store import WarmStore
from memd.tokens import TierUsage, TokenCounter
from memd.writer import Completions, Health, Writer

log = logging.getLogger(__name__)
T = TypeVar("T")
TIERS = ("hot", "warm", "cold")


class Workspace:
    """One workspace: its tier state and reads, its writer, its retention. Changes go through `write`."""

    def __init__(
        self,
        config: WorkspaceConfig,
        counter: TokenCounter,
        clock: Clock,
        io: Executor,
        max_pending: int = 10_000,
        sink: ChangeSink | None = None,
        limits: LimitsConfig | None = None,
        adoption_file: Path | None = None,
        promoter: Callable[[], promote.Chooser | None] = lambda: None,
        on_batch: Callable[[int, float], None] | None = None,
        completions: Completions | None = None,
    ) -> None:
        """`promoter` gives the chooser of a swept day's candidate learnings at each sweep ([promote] backend;
        None: the extractive rules); `on_batch` hears each durable batch (requests, seconds of I/O): metrics;
        `completions` the finished batches of every workspace, which each request settles before it reads."""
        limits = limits or LimitsConfig()
        self.config = config
        self.name = config.name
        self.root = config.path
        self.counter = counter
        self.clock = clock
        self.tz = ZoneInfo(config.warm.timezone)
        self._io = io
        self.sink: ChangeSink = sink or NoSink()
        self.hot = HotStore(self.root / "hot" / "context.json", counter, limits.hot_max_bytes)
        self.warm = WarmStore(self.root / "warm", counter, limits.warm_day_max_bytes)
        self.cold = ColdStore(self.root / "cold" / "MEMORY.md", counter, limits.cold_max_bytes)
        # cold/PROPOSED.md: candidates retention's promotion found (memd.promote); not counted, not in the context.
        self.proposals = ProposalsStore(self.root / "cold" / "PROPOSED.md", limits.cold_max_bytes)
        self.promoter = promoter
        self.health = Health()
        self._usage_cache: tuple[Any, dict[str, Any]] | None = None
        self.last_sweep: dict[str, Any] = {}
        # Where memd records whether this workspace had day files before it first served it (the state dir), and
        # what it found; None: not recorded, sweeps run as configured.
        self.adoption_file = adoption_file
        self.adoption: retention.Adoption | None = None
        self._exclusive = ExclusiveLock()  # a batch, or a sweep, or an adoption: never two at once
        self._pinned: fsio.PinnedDir | None = None  # the directory open() found, by device and inode
        self._adopting = False  # a worker thread is reading outside changes in; reads serve the last good state
        self.planner = TierPlanner(
            self.name, self.hot, self.warm, self.cold, self.proposals, clock, config.warm.timezone
        )
        self.writer = Writer(
            self.name,
            self.root,
            self.planner,
            io,
            self._exclusive,
            self._checked_directory,
            self._committed,
            self.health,
            clock,
            max_pending,
            on_batch,
            completions,
            self.usage_after,
            self.usage_dict,
        )
        self.folder = ColdFolder(self.name, self.cold, io, self.write)  # a burst's learnings folded back

    # --- lifecycle ------------------------------------------------------------------------------------------

    def open(self) -> list[str]:
        """Create the tier directories, remove memd's stale temp files, load every tier. Returns removed temps."""
        for tier in TIERS:
            fsio.ensure_dir(self.root / tier)
        self._pinned = fsio.PinnedDir.pin(self.root)
        removed = fsio.remove_stale_temp_files([self.root / t for t in TIERS])
        self.hot.load()
        self.cold.load()
        _ = self.cold.parsed  # parsed now (at start: before the socket serves), not by the first read
        self.proposals.load()
        self.warm.scan()
        for day in self.warm.recent_days(self.today(), self.config.warm.recent_days):
            self.warm.tokens_for(day)  # a 10 MB day file is counted now, not by the first write after start
        self._record_adoption()
        self.folder.found()  # a run a daemon killed in a burst left (opened on the loop: folded soon)
        return [str(p) for p in removed]

    def _record_adoption(self) -> None:
        """The first time memd serves this workspace, record whether warm/ already held day files that memd did not
        write (hot/ shows memd's hand: hot/memd.json, or the `version` key memd has always written). Those stay
        until a person confirms a sweep (retention.Adoption)."""
        if self.adoption_file is None:
            return
        self.adoption = retention.load_adoption(self.adoption_file)
        if self.adoption is not None:
            self.warm.zoneless_as_written = self.adoption.adopted
            return
        served_before = self.hot.own_fingerprint is not None or "version" in self.hot.origin
        days = len(self.warm.days)
        now = self.clock.now().isoformat(timespec="seconds")
        self.adoption = retention.Adoption(days > 0 and not served_before, now, days)
        self.warm.zoneless_as_written = self.adoption.adopted  # their day files are another tool's: text as written
        if self.adoption.adopted:
            log.info(
                "workspace %s: adopted with %d day file(s) in warm/; retention only reports until a sweep is confirmed",
                self.name, days,
            )  # fmt: skip
        try:
            retention.save_adoption(self.adoption_file, self.adoption)
        except OSError as exc:
            log.warning("workspace %s: could not record its adoption in %s: %s", self.name, self.adoption_file, exc)

    def reconfigure(
        self, config: WorkspaceConfig, limits: LimitsConfig | None = None, max_pending: int | None = None
    ) -> None:
        """Take a reloaded config for the same directory (budgets, retention, access lists, file size caps, the
        writer's queue bound)."""
        self.config = config
        self.tz = ZoneInfo(config.warm.timezone)
        self.planner.reconfigure(config.warm.timezone)
        if max_pending is not None:
            self.writer.reconfigure(max_pending)
        if limits is not None:
            self.hot.reconfigure(limits.hot_max_bytes)
            self.cold.reconfigure(limits.cold_max_bytes)
            self.proposals.reconfigure(limits.cold_max_bytes)
            self.warm.reconfigure(limits.warm_day_max_bytes)

    async def close(self) -> None:
        """Fold what a burst of learnings appended (a stopped daemon leaves MEMORY.md as inserting would have), stop
        taking writes and wait until every queued one is durable or failed. The writer is closed even when the
        fold fails or close() is cancelled; a learning that comes while the fold is written starts a run of its
        own, which the file's mark (fsio_append.RUN_XATTR) has the next start fold."""
        try:
            await self.folder.close()
        finally:
            await self.writer.close()

    @property
    def pending(self) -> int:
        return self.writer.pending

    @property
    def pinned(self) -> fsio.PinnedDir:
        if self._pinned is None:
            self._pinned = fsio.PinnedDir.pin(self.root)
        return self._pinned

    def check_identity(self) -> None:
        """Raise StorageError unless the workspace path still names the directory memd opened (not a symlink
        swapped in, not another directory moved into its place). Status shows why until it holds again."""
        try:
            self.pinned.verify()
        except OSError as exc:
            message = f"workspace {self.name!r}: {exc.strerror or exc}"
            if self.health.identity_error != message:
                log.error("%s", message)
            self.health.identity_error = message
            raise StorageError(message, data={"errno": exc.errno, "path": str(self.root)}) from None
        if self.health.identity_error:
            log.info("workspace %s: its directory is the one memd opened again", self.name)
            self.health.identity_error = ""

    def _checked_directory(self) -> fsio.PinnedDir:
        """The writer's guard: the workspace directory as opened, or StorageError (see check_identity)."""
        self.check_identity()
        return self.pinned

    # --- writes ----------------------------------------------------------------------------------------------

    async def write(self, edit: Edit[T], early: EarlyAck | None = None) -> T:
        """Apply `edit` in the next batch of this workspace's writer; returns its result once it is on disk. With
        `early`, the answer may reach the client from the worker that made it durable (memd.early_ack)."""
        return await self.writer.write(edit, early)

    def _committed(self, tiers: frozenset[str]) -> None:
        """A batch is durable and acknowledged: arm the fold of learnings it appended, tell the change sink."""
        if "cold" in tiers:
            self.folder.committed()
        self.sink.changed(self, tiers, "write")

    async def fold_appended(self) -> None:
        """Fold a run of learnings a burst appended now, in a worker (memd.cold_fold: before accepting a proposal)."""
        await self.folder.fold_now()

    async def split_hot(self) -> bool:
        """Write the hot tier in its two-file layout: memd's own keys (notes, summary, checkpoint records, version)
        to hot/memd.json, the article's to hot/context.json, through the writer (guarded, all or none). The
        snapshotter calls it once it has committed the state as it is, so the commit before undoes it. Returns
        whether anything moved."""
        moved: bool = await self.write(lambda draft: draft.split_hot())
        if moved:
            log.info("workspace %s: moved memd's own hot state from hot/context.json to hot/memd.json", self.name)
        return moved

    @property
    def exclusive(self) -> ExclusiveLock:
        """Held while a batch is written; hold it to see (or change) the files with no batch half-way through."""
        return self._exclusive

    async def restore_files(
        self, files: dict[str, bytes], paths: list[str], held: bool = False, marks: dict[str, bytes] | None = None
    ) -> list[str]:
        """Make `paths` hold exactly `files` (relative path -> bytes), durably. Returns the paths changed.
        `held`: the caller holds `exclusive` already (a restore that commits before and after under it). `marks`:
        the run mark (fsio_append.RUN_XATTR) a restored file gets (cold/MEMORY.md restored with the blocks a burst
        had appended: they are memd's again, for the next fold)."""
        return await self._rewrite_in_worker(
            lambda: fsio_batch.restore_tree(self.pinned, files, paths, marks or {}), held
        )

    async def publish_merged(self, publish: Callable[[fsio.PinnedDir], T]) -> T:
        """Run `publish` in a worker while the writer is held, with the workspace directory memd opened: it reads
        the files as every acknowledged write left them, merges those writes in and writes the result (a sync's
        publish: memd.sync, which guards each replace against an outside edit). Returns what `publish` returns."""
        self.check_identity()
        return await self._rewrite_in_worker(lambda: publish(self.pinned))

    async def _rewrite_in_worker(self, work: Callable[[], T], held: bool = False) -> T:
        """`work` (which rewrites files outside a batch) in a worker, under the writer (taken here unless `held`),
        then every tier loaded again. Cancelled meanwhile (a job's timeout, shutdown), the writer stays held until
        the worker has finished and the tiers are loaded again: a batch let in earlier would append to a file the
        worker is about to replace from bytes it read before, and the acknowledged append would be lost."""
        async with contextlib.nullcontext() if held else self._exclusive:
            try:
                return await self.in_worker_to_the_end(work)
            finally:
                self._reload()  # whatever the worker wrote, even when it failed half-way

    async def in_worker_to_the_end(self, work: Callable[[], T]) -> T:
        """`work` in a worker; cancelled meanwhile, this still returns (raising CancelledError) only once the
        worker has finished, so that a caller holding the writer does not let it go while files are rewritten."""
        running = asyncio.get_running_loop().run_in_executor(self._io, work)
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            while not running.done():  # cancelled again meanwhile: still the worker's end first
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.shield(running)
            raise

    def _reload(self) -> None:
        """Load every tier again after memd itself rewrote files outside a batch (a restore, a sync's merge)."""
        self.hot.load()
        self.cold.load()
        self.proposals.load()
        self.warm.scan()
        self.folder.found()  # a restored MEMORY.md that ends with a burst's blocks: folded soon

    # --- reads ----------------------------------------------------------------------------------------------

    def looks_changed(self) -> bool:
        """Did any tier file change outside memd? Stat only, nothing read: cheap enough for the loop."""
        return (
            self.hot.looks_changed()
            or self.cold.looks_changed()
            or self.proposals.looks_changed()
            or self.warm.looks_changed()
        )

    async def adopt(self) -> set[str]:
        """Adopt outside changes off the event loop: the reads, parses and token counts of the changed files run in
        a worker thread while this workspace's writer waits, so a big file dropped into one workspace never stalls
        the others (the caps in [limits] bound it). Reads meanwhile serve the last good state."""
        if self._adopting:
            return set()
        self._adopting = True
        try:
            async with self._exclusive:
                # Cancelled (a job's timeout, then shutdown: even twice), the worker still changes the stores, so
                # the writer stays locked until it has finished, never planning a batch on a half-loaded store.
                changed = await self.in_worker_to_the_end(self._refresh_and_count)
        finally:
            self._adopting = False
        if "cold" in changed:
            self.folder.found()  # a file adopted with a run a burst appended (a killed daemon's)
        return changed

    def _refresh_and_count(self) -> set[str]:
        changed = self._refresh_now()
        if self.health.identity_error:  # nothing is read through a swapped-in directory
            return changed
        for day in self.warm.recent_days(self.today(), self.config.warm.recent_days):
            self.warm.tokens_for(day)  # counted here, not by the next read on the loop
        if "cold" in changed:
            _ = self.cold.parsed
        return changed

    def refresh(self) -> set[str]:
        """Adopt outside changes before a read. A file that a worker is writing right now is left alone (its new
        fingerprint is memd's own, not yet published; the next batch that touches it checks it again). Reads
        nothing when the workspace directory was swapped (`check_identity` raises for the caller that must know)."""
        if self._adopting:
            return set()
        return self._refresh_now()

    def _refresh_now(self) -> set[str]:
        try:
            self.check_identity()
        except StorageError:  # nothing is read from a swapped-in directory; status says why
            return set()
        writing = self.writer.in_flight
        changed = set()
        if (writing is None or writing.hot_writes is None) and self.hot.refresh():
            changed.add("hot")
        if self.warm.scan(skip=writing.today if writing is not None and writing.warm_write is not None else None):
            changed.add("warm")
        if (writing is None or writing.cold_write is None) and self.cold.refresh():
            changed.add("cold")
        if (writing is None or writing.proposals_write is None) and self.proposals.refresh():
            changed.add("cold")
        return changed

    async def read_day(self, day: date) -> tuple[list[WarmEntry], str]:
        """A day's entries from warm/ or, once swept into it, from the archive. Returns (entries, source). An
        archive is decompressed (capped at warm.archive_max_bytes) in a worker thread, never on the loop."""
        if day in self.warm.days:
            return await self.warm.load_all(day), "warm"  # a big day is parsed in a worker thread
        self.check_identity()
        directory, cap = self.warm.directory, self.config.warm.archive_max_bytes

        def load() -> list[WarmEntry] | None:
            text = retention.read_archived_day(directory, day, cap)
            return None if text is None else warm_format.parse_day(text, self.warm.zoneless_as_written)

        entries = await asyncio.get_running_loop().run_in_executor(self._io, load)
        return (entries, "archive") if entries is not None else ([], "none")

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

    def usage_after(self, plan: Batch) -> dict[str, Any] | None:
        """The usage figures `usage_dict` will give once `plan` is published, for answers sent before that; None
        when the batch's effect is not known ahead: a learning or a proposal (counted on publish), a count not
        taken yet, a batch planned for another day than today."""
        if plan.cold_write is not None or plan.proposals_write is not None:
            return None
        today = self.today()
        if plan.today != today:
            return None
        budget = self.config.budget
        hot = self.hot.tokens
        if plan.hot_writes is not None:
            if plan.hot_tokens is None:
                return None
            hot = plan.hot_tokens
        recent_days = self.config.warm.recent_days
        warm = sum(self.warm.tokens_for(d) for d in self.warm.recent_days(today, recent_days) if d != today)
        if recent_days >= 1:
            counted = self.warm.counted_tokens(today)  # not tokens_for: the worker may be appending right now
            if counted is None:
                return None
            if plan.warm_write is not None:
                if plan.warm_tokens is None:
                    return None
                counted += plan.warm_tokens
            warm += counted
        return {
            "hot": TierUsage(hot, budget.hot).as_dict(),
            "warm": TierUsage(warm, budget.warm).as_dict(),
            "cold": TierUsage(self.cold.tokens, budget.cold).as_dict(),
        }

    def usage_dict(self) -> dict[str, Any]:
        """Usage for replies; cached until a tier changes (every write's reply carries it). Do not mutate."""
        key = (self.hot.tokens, self.cold.tokens, self.warm.version, self.today(), self.config.budget)
        if self._usage_cache is None or self._usage_cache[0] != key:
            usage = {tier: u.as_dict() for tier, u in self.usage().items()}
            key = (self.hot.tokens, self.cold.tokens, self.warm.version, self.today(), self.config.budget)
            self._usage_cache = (key, usage)
        return self._usage_cache[1]
