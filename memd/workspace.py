"""One workspace and its single writer: every change to a workspace's files goes through `Workspace.write`.

Group commit: writes that arrive while a batch is being made durable wait in the queue and form the next batch.
A batch applies each request's edit to a draft (hot document, cold text, warm entries), turns the draft into at
most one atomic replace per file plus one append per warm day, makes that durable in a worker thread (the event
loop never blocks on fsync), and only then publishes the new state and acknowledges the requests. If the disk
write fails, every request of the batch gets a StorageError and the in-memory state stays as it was.

Before a batch, each file it may rewrite is checked against what memd last saw (size, mtime, inode): a file
changed by someone else is re-read first and the edits are applied on top of it (contract 2). The decision is
taken again when the batch is published: a replace goes in only over the exact bytes it was planned from
(fsio's guarded replace); a person's save in between sends the batch back to planning on their version.
The workspace directory is pinned (device, inode) when opened: a swapped-in symlink or directory fails every
batch, read, sweep and restore of this workspace with a StorageError instead of touching another place.
Imports memd.batch (the draft, the plan, the worker side), the tiers, memd.retention, memd.fsio, memd.tokens,
memd.exclusive, memd.config and memd.errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar
from zoneinfo import ZoneInfo

from memd import fsio, promote, retention
from memd.batch import Batch, Draft, Edit, apply_writes, call_in_loop, fail_futures, replace_tree
from memd.config import LimitsConfig, WorkspaceConfig
from memd.errors import Busy, MemdError, ShuttingDown, StorageError
from memd.exclusive import ExclusiveLock
from memd.tiers import cold_format, proposals_format, warm_format
from memd.tiers.cold_store import ColdStore
from memd.tiers.hot_store import HotStore
from memd.tiers.proposals_store import ProposalsStore
from memd.tiers.warm_format import WarmEntry
from memd.tiers.warm_store import WarmStore
from memd.tokens import TierUsage, TokenCounter

log = logging.getLogger(__name__)
T = TypeVar("T")
TIERS = ("hot", "warm", "cold")
MAX_REPLANS = 16  # a file that changes under every attempt this often is being rewritten in a loop: give up


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware."""
        ...


@dataclass
class Health:
    """What status shows about this workspace's storage."""

    last_write_error: str = ""
    last_write_error_at: str = ""
    write_fault: bool = False  # the last batch that wrote failed; cleared by the next one that succeeds
    writes: int = 0
    batches: int = 0
    replans: int = 0  # batches planned again because a person saved a file while they were being published
    identity_error: str = ""  # the workspace directory is not the one memd opened


@dataclass
class Promotion:
    """What a sweep promotes: the days whose candidates were taken (only those may go), the candidates (None:
    promotion off), what is (or would be) proposed, and by which backend."""

    days: frozenset[str]
    candidates: list[proposals_format.Proposal] | None
    selection: promote.Selection | None
    backend: str
    fallback: str = ""  # why the configured backend was not used for some day

    def report(self) -> dict[str, Any]:
        if self.selection is None:
            return {"proposed": [], "not_proposed": [], "promote_backend": self.backend}
        out: dict[str, Any] = {
            "proposed": [proposal_json(p) for p in self.selection.proposed],
            "not_proposed": [s.as_dict() for s in self.selection.skipped],
            "promote_backend": self.backend,
        }
        if self.fallback:
            out["promote_fallback"] = self.fallback
        return out


def proposal_json(p: proposals_format.Proposal) -> dict[str, Any]:
    """A proposal as replies show it."""
    return {
        "id": p.id,
        "category": p.category,
        "date": p.date,
        "text": p.text,
        "from": {"day": p.day, "time": p.time, "action": p.action} if p.day else None,
        "kind": p.kind,
        "supersedes": {"date": p.supersedes[0], "text": p.supersedes[1]} if p.supersedes else None,
    }


class Workspace:
    def __init__(
        self,
        config: WorkspaceConfig,
        counter: TokenCounter,
        clock: Clock,
        io: Executor,
        max_pending: int = 10_000,
        on_commit: Callable[[Workspace, frozenset[str]], None] | None = None,
        on_batch: Callable[[int, float], None] | None = None,  # (requests, seconds of durable I/O): metrics
        limits: LimitsConfig | None = None,
        adoption_file: Path | None = None,
        promoter: promote.Chooser | None = None,
    ) -> None:
        limits = limits or LimitsConfig()
        self.config = config
        self.name = config.name
        self.root = config.path
        self.counter = counter
        self.clock = clock
        self.tz = ZoneInfo(config.warm.timezone)
        self._io = io
        self.max_pending = max_pending
        self.on_commit = on_commit
        self._on_batch = on_batch
        self._write_started = 0.0  # when the batch in flight went to a worker
        self.hot = HotStore(self.root / "hot" / "context.json", counter, limits.hot_max_bytes)
        self.warm = WarmStore(self.root / "warm", counter, limits.warm_day_max_bytes)
        self.cold = ColdStore(self.root / "cold" / "MEMORY.md", counter, limits.cold_max_bytes)
        # cold/PROPOSED.md: candidates retention's promotion found (memd.promote); not counted, not in the context.
        self.proposals = ProposalsStore(self.root / "cold" / "PROPOSED.md", limits.cold_max_bytes)
        self.health = Health()
        self._usage_cache: tuple[Any, dict[str, Any]] | None = None
        self._queue: list[tuple[Edit[Any], asyncio.Future[Any]]] = []
        self.before_destructive: Callable[[Workspace, str], Awaitable[retention.Held | None]] | None = None
        self.last_sweep: dict[str, Any] = {}
        self.promoter = promoter  # chooses a swept day's candidate learnings ([promote] backend); None: extractive
        # Where memd records whether this workspace had day files before it first served it (the state dir), and
        # what it found; None: not recorded, sweeps run as configured.
        self._adoption_file = adoption_file
        self.adoption: retention.Adoption | None = None
        self._exclusive = ExclusiveLock()  # a batch, or a sweep: never both at once
        self._batching = False  # a batch is waiting for the lock, being planned or being written
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._in_flight: Batch | None = None  # the batch whose files a worker is writing right now
        self._closing = False
        self._pinned: fsio.PinnedDir | None = None  # the directory open() found, by device and inode
        self._adopting = False  # a worker thread is reading outside changes in; reads serve the last good state

    # --- lifecycle ------------------------------------------------------------------------------------------

    def open(self) -> list[str]:
        """Create the tier directories, remove memd's stale temp files, load every tier. Returns removed temps."""
        for tier in TIERS:
            fsio.ensure_dir(self.root / tier)
        self._pinned = fsio.PinnedDir.pin(self.root)
        removed = fsio.remove_stale_temp_files([self.root / t for t in TIERS])
        self.hot.load()
        self.cold.load()
        self.proposals.load()
        self.warm.scan()
        for day in self.warm.recent_days(self.today(), self.config.warm.recent_days):
            self.warm.tokens_for(day)  # a 10 MB day file is counted now, not by the first write after start
        self._record_adoption()
        return [str(p) for p in removed]

    def _record_adoption(self) -> None:
        """The first time memd serves this workspace, record whether warm/ already held day files that memd did not
        write (hot/ shows memd's hand: hot/memd.json, or the `version` key memd has always written). Those stay
        until a person confirms a sweep (retention.Adoption)."""
        if self._adoption_file is None:
            return
        self.adoption = retention.load_adoption(self._adoption_file)
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
            retention.save_adoption(self._adoption_file, self.adoption)
        except OSError as exc:
            log.warning("workspace %s: could not record its adoption in %s: %s", self.name, self._adoption_file, exc)

    def reconfigure(self, config: WorkspaceConfig, limits: LimitsConfig | None = None) -> None:
        """Take a reloaded config for the same directory (budgets, retention, access lists, file size caps)."""
        self.config = config
        self.tz = ZoneInfo(config.warm.timezone)
        if limits is not None:
            self.hot.max_bytes, self.cold.max_bytes = limits.hot_max_bytes, limits.cold_max_bytes
            self.proposals.max_bytes = limits.cold_max_bytes
            self.warm.max_bytes = limits.warm_day_max_bytes

    async def close(self) -> None:
        """Stop taking writes and wait until every queued one is durable or failed."""
        self._closing = True
        while self._batching:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(waiter)
            await asyncio.shield(waiter)

    @property
    def pending(self) -> int:
        return len(self._queue)

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

    # --- writes ---------------------------------------------------------------------------------------------

    async def write(self, edit: Edit[T]) -> T:
        """Apply `edit` in the next batch; returns its result once the batch is durable on disk."""
        if self._closing:
            raise ShuttingDown("memd is shutting down; retry against the restarted daemon")
        if len(self._queue) >= self.max_pending:
            raise Busy(f"workspace {self.name!r} has {len(self._queue)} writes queued; retry shortly")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append((edit, future))
        if not self._batching:  # formed on the next loop turn: writes arriving together share one fsync
            self._batching = True
            asyncio.get_running_loop().call_soon(self._exclusive.acquire_then, self._begin_batch)
        return await future

    # The writer is a chain of loop callbacks, not a Task: _begin_batch (under the lock: edits, plan, hand the
    # I/O to a worker thread) -> _written (called from the worker through call_soon_threadsafe: publish,
    # acknowledge) -> the next batch at once, formed from everything that queued meanwhile. A single client's
    # write costs one thread hand-off each way and one loop turn of its own.

    def _begin_batch(self) -> None:
        batch, self._queue = self._queue, []
        self._plan_and_write(batch, 0)

    def _plan_and_write(self, batch: list[tuple[Edit[Any], asyncio.Future[Any]]], replans: int) -> None:
        """Plan `batch` and hand its writes to a worker; ends the batch here unless a worker now has it."""
        try:
            plan = self._plan(batch, replans)
        except BaseException as exc:  # a bug: fail the batch loudly rather than hang its clients (and the writer)
            log.exception("workspace %s: batch failed unexpectedly", self.name)
            fail_futures((f for _, f in batch), exc if isinstance(exc, Exception) else ShuttingDown(str(exc)))
            self._end_batch()
            if not isinstance(exc, Exception | asyncio.CancelledError):
                raise
            return
        if plan is None:
            self._end_batch()
        elif not plan.writes:
            self._acknowledge(plan, frozenset())
            self._end_batch()
        else:
            self._in_flight = plan
            self._write_started = time.perf_counter()
            loop = asyncio.get_running_loop()
            try:
                done = self._io.submit(apply_writes, self.pinned, plan.writes)
            except RuntimeError as exc:  # the executor is shut down: the daemon is stopping
                self._in_flight = None
                fail_futures((f for _, f in batch), ShuttingDown(f"memd is shutting down ({exc}); nothing was written"))
                self._end_batch()
                return
            done.add_done_callback(lambda d: call_in_loop(loop, self._written, plan, d))
            self._count_while_writing(plan)

    def _count_while_writing(self, plan: Batch) -> None:
        """Token counts of what is being written, taken while the worker waits on the disk, not after (tiktoken
        lets go of the GIL, so the worker is not held up). A count that fails here is taken again on publish."""
        try:
            if plan.warm_write is not None:
                plan.warm_tokens = self.warm.count_append(plan.warm_write)
            if plan.hot_writes is not None and plan.draft.hot is not None:
                plan.hot_tokens = self.hot.count(plan.draft.hot)
        except Exception:
            log.exception("workspace %s: counting tokens ahead failed", self.name)

    def _plan(self, batch: list[tuple[Edit[Any], asyncio.Future[Any]]], replans: int = 0) -> Batch | None:
        """Apply each request's edit to a draft and turn the draft into file writes. None: the batch failed.
        A request that already failed (or was cancelled) in an earlier plan of the same batch is not run again."""
        try:
            self.check_identity()  # before the edits read anything through the workspace path
        except StorageError as exc:
            self.health.write_fault = True
            self.health.last_write_error = exc.message
            fail_futures((f for _, f in batch), exc)
            return None
        now = self.clock.now()
        local = now.astimezone(self.tz)
        today = local.date()
        draft = Draft(now, local, self.hot, self.cold, _proposals_store=self.proposals)
        accepted: list[tuple[asyncio.Future[Any], Any]] = []
        for edit, future in batch:
            if future.done():
                continue
            hot, cold, proposals, logged = draft.hot, draft.cold, draft.proposals, len(draft.warm)
            try:
                accepted.append((future, edit(draft)))
            except Exception as exc:  # this request fails alone: undo its part of the draft
                draft.hot, draft.cold, draft.proposals = hot, cold, proposals
                del draft.warm[logged:], draft.warm_text[logged:]
                if not isinstance(exc, MemdError):
                    log.exception("workspace %s: an edit failed", self.name)
                future.set_exception(exc)
        plan = Batch(draft, today, accepted, batch, replans)
        if draft.warm:
            try:
                self.warm.refresh_day(today)
                header = warm_format.day_header(today, warm_format.zone_label(local, self.config.warm.timezone))
                plan.warm_write = self.warm.plan_append(today, draft.warm_text, header)
            except OSError as exc:  # today's file is a symlink, a FIFO, unreadable: refuse, never follow
                self._fail(accepted, exc)
                return None
        if draft.cold is not None and draft.cold is not self.cold.text:
            plan.cold_write = self.cold.write_for(draft.cold)
        if draft.proposals is not None and draft.proposals is not self.proposals.text:
            plan.proposals_write = self.proposals.write_for(draft.proposals)
        if draft.hot is not None and (draft.hot is not self.hot.doc or draft.normalize_hot):
            plan.hot_writes = self.hot.writes_for(draft.hot, draft.normalize_hot) or None
        hot_writes = plan.hot_writes.writes if plan.hot_writes is not None else []
        for write, cap, key in (
            *((w, self.hot.max_bytes, "hot_max_bytes") for w in hot_writes),
            (plan.cold_write, self.cold.max_bytes, "cold_max_bytes"),
            (plan.proposals_write, self.proposals.max_bytes, "cold_max_bytes"),
        ):
            if write is not None and len(write.data) > cap:  # memd would write a file it then refuses to read
                self._fail(
                    accepted,
                    OSError(
                        errno.EFBIG,
                        f"this batch would take the file past [limits] {key} ({cap} bytes)",
                        str(write.path),
                    ),
                )
                return None
        writes = (plan.warm_write, plan.cold_write, plan.proposals_write, *hot_writes)
        plan.writes = [w for w in writes if w is not None]
        return plan

    def _written(self, plan: Batch, done: Future[list[fsio.Fingerprint]]) -> None:
        self._in_flight = None
        replanned = False
        try:
            try:
                fps = done.result()
            except fsio.OutsideChange as exc:
                replanned = self._replan(plan, exc)
                return
            except OSError as exc:
                self._fail(plan.accepted, exc)
                return
            changed = self._publish(plan, fps)
            if self._on_batch is not None:
                self._on_batch(len(plan.accepted), time.perf_counter() - self._write_started)
            if self.health.write_fault:
                self.health.write_fault = False
                log.info("workspace %s: writes succeed again", self.name)
            self._acknowledge(plan, changed)
        except (Exception, asyncio.CancelledError) as exc:  # a bug, or a cancelled worker: never hang the clients
            log.exception("workspace %s: batch failed unexpectedly", self.name)
            failure = exc if isinstance(exc, Exception) else ShuttingDown("memd is shutting down; nothing was written")
            fail_futures((f for f, _ in plan.accepted), failure)
        finally:
            if not replanned:  # else the new attempt is in a worker's hands, or has ended the batch itself
                self._end_batch()

    def _replan(self, plan: Batch, exc: fsio.OutsideChange) -> bool:
        """A person saved a file this batch replaces between planning and publishing; nothing of the batch was
        written. Read their version and plan the same requests again on top of it. False: gave up (the batch
        fails with a StorageError: a file rewritten that often by someone else needs a look)."""
        self.health.replans += 1
        if plan.replans >= MAX_REPLANS:
            message = (
                f"{exc.path} changed outside memd (or was held open for writing) during each of {MAX_REPLANS + 1} "
                f"attempts to publish a batch of workspace {self.name!r}; nothing was written or acknowledged: stop "
                "the tool rewriting or holding it, then retry"
            )
            log.error("%s", message)
            fail_futures((f for f, _ in plan.accepted), StorageError(message, data={"path": str(exc.path)}))
            return False
        if exc.busy:  # a writer holds the old file open: give its write a moment to land, then read it
            delay = min(0.001 * 2**plan.replans, 0.1)
            log.info(
                "workspace %s: %s is held open for writing; planning again in %.0f ms", self.name, exc.path, delay * 1e3
            )
            asyncio.get_running_loop().call_later(delay, self._replan_now, plan, exc.path)
        else:
            log.info(
                "workspace %s: %s was saved outside memd while publishing; planning again on it", self.name, exc.path
            )
            self._replan_now(plan, exc.path)
        return True

    def _replan_now(self, plan: Batch, path: Path) -> None:
        try:
            if path in self.hot.paths:
                self.hot.load()
            elif path == self.cold.path:
                self.cold.load()
            elif path == self.proposals.path:
                self.proposals.load()
        except Exception as exc:  # hot/ replaced by a file, no permission: fail the batch, never hang the writer
            log.exception("workspace %s: re-reading %s for a re-plan failed", self.name, path)
            fail_futures((f for f, _ in plan.accepted), StorageError(f"could not re-read {path}: {exc}"))
            self._end_batch()
            return
        self._plan_and_write(plan.requests, plan.replans + 1)

    def _acknowledge(self, plan: Batch, changed: frozenset[str]) -> None:
        self.health.batches += 1
        self.health.writes += len(plan.accepted)
        for future, result in plan.accepted:
            if not future.done():
                future.set_result(result)
        if changed and self.on_commit is not None:
            self.on_commit(self, changed)

    def _end_batch(self) -> None:
        self._exclusive.release()
        if self._queue:
            self._exclusive.acquire_then(self._begin_batch)
            return
        self._batching = False
        idle, self._idle_waiters = self._idle_waiters, []
        for waiter in idle:
            if not waiter.done():
                waiter.set_result(None)

    def _publish(self, plan: Batch, fps: list[fsio.Fingerprint]) -> frozenset[str]:
        by_write = dict(zip((id(w) for w in plan.writes), fps, strict=True))
        draft, changed = plan.draft, set()
        if plan.warm_write is not None:
            fp = by_write[id(plan.warm_write)]
            tokens = self.warm.count_append(plan.warm_write) if plan.warm_tokens is None else plan.warm_tokens
            self.warm.commit_append(plan.today, fp, plan.warm_write, draft.warm, tokens)
            changed.add("warm")
        if plan.cold_write is not None and draft.cold is not None:
            self.cold.commit(draft.cold, plan.cold_write, by_write[id(plan.cold_write)])
            changed.add("cold")
        if plan.proposals_write is not None and draft.proposals is not None:
            self.proposals.commit(draft.proposals, plan.proposals_write, by_write[id(plan.proposals_write)])
            changed.add("cold")
        if plan.hot_writes is not None and draft.hot is not None:
            tokens = self.hot.count(draft.hot) if plan.hot_tokens is None else plan.hot_tokens
            self.hot.commit(draft.hot, plan.hot_writes, [by_write[id(w)] for w in plan.hot_writes.writes], tokens)
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
        self.hot.forget()
        self.cold.fingerprint = None
        self.proposals.fingerprint = None
        fail_futures((f for f, _ in accepted), StorageError(message, data={"errno": exc.errno}))

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

    async def restore_files(self, files: dict[str, bytes], paths: list[str]) -> list[str]:
        """Make `paths` hold exactly `files` (relative path -> bytes), durably. Returns the paths changed."""
        loop = asyncio.get_running_loop()
        async with self._exclusive:
            changed = await loop.run_in_executor(self._io, replace_tree, self.pinned, files, paths)
            self.hot.load()
            self.cold.load()
            self.proposals.load()
            self.warm.scan()
        return changed

    async def publish_merged(self, decide: Callable[[], dict[str, bytes | None]]) -> list[str]:
        """Write what `decide` returns (relative path -> bytes; None: remove the file), durably, under the writer.
        `decide` runs in a worker while the writer is held, so it reads the files as every acknowledged write left
        them and merges those writes in (a sync's publish: memd.sync). Returns the paths changed."""

        def work() -> list[str]:
            chosen = decide()
            return replace_tree(self.pinned, {p: d for p, d in chosen.items() if d is not None}, list(chosen))

        async with self._exclusive:
            self.check_identity()
            changed = await asyncio.get_running_loop().run_in_executor(self._io, work)
            self.hot.load()
            self.cold.load()
            self.proposals.load()
            self.warm.scan()
        return changed

    # --- retention -----------------------------------------------------------------------------------------

    async def sweep(self, dry_run: bool, confirm: bool = False) -> dict[str, Any]:
        """Delete or archive expired warm days (exactly what a dry run lists); log it in today's warm file.
        A workspace adopted with day files only reports (`held`) until a sweep is run with `confirm`."""
        policy = self.config.warm
        today = self.today()
        loop = asyncio.get_running_loop()
        outcome = retention.SweepOutcome()
        self.check_identity()
        plan = retention.plan_sweep(self.warm.directory, today, policy.retention_days)
        report_only = not dry_run and self._retention_held(confirm)
        promotion = await self._promotion(plan)
        if promotion.candidates is not None and not dry_run and not report_only:
            # Promote before expire: the proposals are durable (an acknowledged batch) before any day goes.
            failure = await self._write_proposals(promotion)
            if failure:  # nothing goes: every expired day stays, and says why
                outcome.kept.update({name: failure for name in plan.expired})
        if plan.expired and not dry_run and not report_only and not outcome.kept:
            held = None  # what git holds of warm/ (None: snapshots off or without warm, nothing is checked)
            if self.before_destructive is not None:  # commits the files first; takes the writer itself
                held = await self.before_destructive(self, "retention")
            async with self._exclusive:
                self.check_identity()
                # Planned again under the writer: only what is still expired (and was just committed) goes, and
                # only a day whose candidates were taken above (the same `today`: no day can have joined).
                again = retention.plan_sweep(self.warm.directory, today, policy.retention_days)
                plan = retention.SweepPlan(again.directory, tuple(d for d in again.expired if d in promotion.days))
                try:
                    if policy.mode == "archive":
                        max_bytes = policy.archive_max_bytes
                        outcome = await loop.run_in_executor(self._io, retention.archive_expired, plan, held, max_bytes)
                    else:
                        outcome = await loop.run_in_executor(self._io, retention.delete_expired, plan, held)
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
            "removed": outcome.removed,
            "kept": [{"day": day, "reason": reason} for day, reason in outcome.kept.items()],
            "warnings": outcome.warnings,
            "at": self.clock.now().isoformat(timespec="seconds"),
            **promotion.report(),
        }
        if report_only:
            return await self._report_held(result)
        removed = outcome.removed
        if removed:
            details: tuple[tuple[str, str], ...] = (("mode", policy.mode), ("removed", ", ".join(removed)))
            if promotion.selection is not None and promotion.selection.proposed:
                details += (("proposed", ", ".join(p.id for p in promotion.selection.proposed)),)
            try:
                await self.write(lambda draft: draft.log("retention-sweep", details, f"{len(removed)} day file(s)"))
            except MemdError as exc:  # the files are gone either way; say why the log line is missing
                result["log_error"] = exc.message
        if not dry_run:
            self.last_sweep = result
        return result

    async def _promotion(self, plan: retention.SweepPlan) -> Promotion:
        """The candidate learnings of the days `plan` would remove, and (against MEMORY.md and PROPOSED.md as they
        are now) what would be proposed: what a dry run reports, and what a real run writes unless the files
        change in between (the selection is made again in the write's batch)."""
        limit = self.config.warm.promote_max_per_day
        days = [d for name in plan.expired if (d := warm_format.parse_day_filename(name)) is not None]
        if limit <= 0:  # promotion is off: every expired day may go
            return Promotion(frozenset(plan.expired), None, None, "off")
        candidates: list[proposals_format.Proposal] = []
        backend, fallback = "extractive", ""
        for day in days:
            self.warm.refresh_day(day)
            entries = self.warm.entries_for(day)
            if not entries:
                continue
            found: list[proposals_format.Proposal] | None = None
            if self.promoter is not None:
                try:
                    found = await self.promoter.choose(self, day.isoformat(), entries, limit)
                    backend = self.promoter.name
                except Exception as exc:  # any failure: the extractive rules, and the report says why
                    fallback = f"{day.isoformat()}: {exc}"
                    log.warning("workspace %s: promotion by %s failed, extractive instead: %s",
                                self.name, self.promoter.name, exc)  # fmt: skip
            candidates += found if found is not None else promote.extract(day.isoformat(), entries)
        self.refresh()
        selection = promote.select(candidates, self.cold.learnings, self.proposals.proposals, limit)
        return Promotion(frozenset(plan.expired), candidates, selection, backend, fallback)

    async def _write_proposals(self, promotion: Promotion) -> str:
        """Write the selection (made again on the files as this batch finds them) into cold/PROPOSED.md, durably.
        Returns why it could not ("" when it could, or when there was nothing to write)."""
        candidates, limit = promotion.candidates or [], self.config.warm.promote_max_per_day

        def edit(draft: Draft) -> promote.Selection:
            text = draft.edit_proposals()
            learnings = cold_format.parse_memory(draft.cold) if draft.cold is not None else self.cold.learnings
            selection = promote.select(candidates, learnings, proposals_format.parse(text), limit)
            for proposal in selection.proposed:
                text = proposals_format.insert(text, proposal)
            if selection.proposed:
                draft.proposals = text
            return selection

        if not candidates:
            return ""
        try:
            promotion.selection = await self.write(edit)
        except MemdError as exc:
            log.error("workspace %s: proposals not written, expired days kept: %s", self.name, exc.message)
            return f"its candidate learnings could not be written to cold/PROPOSED.md ({exc.message}); kept"
        return ""

    def _retention_held(self, confirm: bool) -> bool:
        """Does this real sweep only report? Yes while the workspace's adoption is pending, unless this sweep
        confirms it (which is recorded, so later sweeps run too) or warm.adopted_sweep = "run"."""
        if self.adoption is None or not self.adoption.pending or self.config.warm.adopted_sweep == "run":
            return False
        if not confirm:
            return True
        self.adoption = self.adoption.confirmed(self.clock.now().isoformat(timespec="seconds"))
        if self._adoption_file is not None:
            try:
                retention.save_adoption(self._adoption_file, self.adoption)
            except OSError as exc:  # confirmed for this run; the next start asks again
                log.warning("workspace %s: could not record the confirmation: %s", self.name, exc)
        log.info("workspace %s: retention confirmed; sweeps of its adopted day files run from now on", self.name)
        return False

    async def _report_held(self, result: dict[str, Any]) -> dict[str, Any]:
        expired = result["expired"]
        how = f"memd sweep {self.name} --confirm (retention.sweep with confirm: true)"
        result.update(
            held=True,
            confirm=how,
            reason=(
                f"workspace {self.name!r} had day files in warm/ before memd first served it: sweeps only report "
                f'what they would remove until one is confirmed with {how}, or warm.adopted_sweep = "run"'
            ),
        )
        if expired:
            details = (("held", ", ".join(expired)), ("confirm", how))
            note = f"held: {len(expired)} day file(s) kept until a sweep is confirmed"
            try:
                await self.write(lambda draft: draft.log("retention-sweep", details, note))
            except MemdError as exc:
                result["log_error"] = exc.message
        self.last_sweep = result
        return result

    # --- reads ----------------------------------------------------------------------------------------------

    def looks_changed(self) -> bool:
        """Did any tier file change outside memd? Stat only, nothing read: cheap enough for the loop."""
        return (
            self.hot.looks_changed()
            or fsio.fingerprint(self.cold.path) != self.cold.fingerprint
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
                work = asyncio.get_running_loop().run_in_executor(self._io, self._refresh_and_count)
                try:
                    return await asyncio.shield(work)
                except asyncio.CancelledError:
                    # Cancelled (a job's timeout, shutdown): the worker still changes the stores, so the writer
                    # stays locked until it has finished, never planning a batch on a half-loaded store.
                    with contextlib.suppress(Exception):
                        await work
                    raise
        finally:
            self._adopting = False

    def _refresh_and_count(self) -> set[str]:
        changed = self._refresh_now()
        if self.health.identity_error:  # nothing is read through a swapped-in directory
            return changed
        for day in self.warm.recent_days(self.today(), self.config.warm.recent_days):
            self.warm.tokens_for(day)  # counted here, not by the next read on the loop
        if "cold" in changed:
            _ = self.cold.learnings
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
        writing = self._in_flight
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
            return await self.warm.load(day), "warm"  # a big day is parsed in a worker thread
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

    def usage_dict(self) -> dict[str, Any]:
        """Usage for replies; cached until a tier changes (every write's reply carries it). Do not mutate."""
        key = (self.hot.tokens, self.cold.tokens, self.warm.version, self.today(), self.config.budget)
        if self._usage_cache is None or self._usage_cache[0] != key:
            usage = {tier: u.as_dict() for tier, u in self.usage().items()}
            key = (self.hot.tokens, self.cold.tokens, self.warm.version, self.today(), self.config.budget)
            self._usage_cache = (key, usage)
        return self._usage_cache[1]
