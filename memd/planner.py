"""The planner of one workspace's writer: requests' edits -> a draft -> the file writes of one batch, and, once the
writes are durable, the new in-memory state of the tiers.

It holds no queue, lock or thread: the writer (memd.writer) calls it in order (`plan`, then `count_ahead` while the
disk works, then `publish`, or `reread` when a person's save sent the batch back, or `forget` when the disk
failed). Every file write it plans is a guarded replace or an append (memd.fsio); it never writes itself. Imports
memd.batch, memd.early_ack, the tier stores and memd.fsio.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from memd import fsio, fsio_batch
from memd.batch import Batch, Draft, Edit
from memd.early_ack import EarlyAck
from memd.errors import MemdError
from memd.tiers import warm_format
from memd.tiers.cold_store import ColdStore
from memd.tiers.hot_store import HotStore
from memd.tiers.proposals_store import ProposalsStore
from memd.tiers.warm_store import WarmStore

log = logging.getLogger(__name__)

# An edit, the future its result goes to, and where the worker may send its answer itself (None: the loop answers).
Request = tuple[Edit[Any], "asyncio.Future[Any]", EarlyAck | None]


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware."""
        ...


class TierPlanner:
    """Turns a batch of requests into the writes of the three tiers of one workspace, and publishes them."""

    def __init__(
        self,
        name: str,
        hot: HotStore,
        warm: WarmStore,
        cold: ColdStore,
        proposals: ProposalsStore,
        clock: Clock,
        timezone: str,
    ) -> None:
        self.name = name
        self.hot, self.warm, self.cold, self.proposals = hot, warm, cold, proposals
        self.clock = clock
        self.reconfigure(timezone)

    def reconfigure(self, timezone: str) -> None:
        """A reloaded `warm.timezone`: the day a batch logs into, and the zone its day header names."""
        self.timezone = timezone
        self.tz = ZoneInfo(timezone)

    def plan(self, requests: Sequence[Request], replans: int, made: dict[int, list[Any]] | None = None) -> Batch:
        """Apply each request's edit to a draft and turn the draft into file writes. A request whose edit raises
        fails alone (its part of the draft is undone); one already failed or cancelled in an earlier plan of the
        same requests is not run again. A batch the disk would refuse comes back with `refused` set. `made`: what
        the requests made in the earlier plan of a re-plan (the draft's `made`), made again. Raises
        fsio_batch.OutsideChange when a file the plan read back changed outside memd (ColdStore.text): nothing is
        planned, and the requests not failed yet are to be planned again on the file as it is."""
        now = self.clock.now()
        local = now.astimezone(self.tz)
        today = local.date()
        draft = Draft(now, local, self.hot, self.cold, _proposals_store=self.proposals, made=made or {})
        accepted: list[tuple[asyncio.Future[Any], Any]] = []
        early: list[tuple[EarlyAck, Any]] = []
        for index, (edit, future, ack) in enumerate(requests):
            if future.done():
                continue
            draft.begin_request(index)
            hot, proposals, logged = draft.hot, draft.proposals, len(draft.warm)
            cold = draft.cold_state()
            try:
                result = edit(draft)
                accepted.append((future, result))
                if ack is not None:
                    early.append((ack, result))
            except fsio_batch.OutsideChange:  # a file read back for the plan changed: the writer plans them again
                raise
            except Exception as exc:
                draft.hot, draft.proposals = hot, proposals
                draft.restore_cold(cold)
                del draft.warm[logged:], draft.warm_text[logged:]
                if not isinstance(exc, MemdError):
                    log.exception("workspace %s: an edit failed", self.name)
                future.set_exception(exc)
        plan = Batch(draft, today, accepted, list(requests), replans, early=early)
        if draft.warm:
            try:
                self.warm.refresh_day(today)
                header = warm_format.day_header(today, warm_format.zone_label(local, self.timezone))
                plan.warm_write = self.warm.plan_append(today, draft.warm_text, header)
            except OSError as exc:  # today's file is a symlink, a FIFO, unreadable: refuse, never follow
                plan.refused = exc
                return plan
        if draft.cold is not None and not self.cold.holds(draft.cold):
            plan.cold_write = self.cold.write_for(draft.cold, draft.cold_inserts, draft.cold_run_start)
        elif draft.cold is None and draft.cold_appends and draft.cold_run_start is not None:
            plan.cold_write = self.cold.append_write(draft.cold_appends, draft.cold_run_start)
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
            if write is None:
                continue
            size = len(write.data) + ((write.expected_size or 0) if write.append else 0)  # what the file becomes
            if size > cap:  # memd would write a file it then refuses to read
                message = f"this batch would take the file past [limits] {key} ({cap} bytes)"
                plan.refused = OSError(errno.EFBIG, message, str(write.path))
                return plan
        writes = (plan.warm_write, plan.cold_write, plan.proposals_write, *hot_writes)
        plan.writes = [w for w in writes if w is not None]
        return plan

    def count_ahead(self, plan: Batch) -> None:
        """Token counts of what is being written, taken while the worker waits on the disk, not after (tiktoken
        lets go of the GIL, so the worker is not held up). A count that fails here is taken again on publish."""
        try:
            if plan.warm_write is not None:
                plan.warm_tokens = self.warm.count_append(plan.warm_write)
            if plan.hot_writes is not None and plan.draft.hot is not None:
                plan.hot_tokens = self.hot.count(plan.draft.hot)
        except Exception:
            log.exception("workspace %s: counting tokens ahead failed", self.name)

    def as_planned(self, plan: Batch, fps: Sequence[fsio.Fingerprint]) -> bool:
        """Did the batch land exactly as planned, so that publishing it gives the usage figures predicted for it?
        False when someone else appended to today's file around memd's append (it is counted again on publish).
        Called from the worker thread: reads only the batch."""
        write = plan.warm_write
        if write is None:
            return True
        fp = next(fp for w, fp in zip(plan.writes, fps, strict=True) if w is write)
        return fp.size == (write.expected_size or 0) + len(write.data)

    def publish(self, plan: Batch, fps: Sequence[fsio.Fingerprint]) -> frozenset[str]:
        """The batch is durable: make it the tiers' state. Returns the tiers that changed."""
        by_write = dict(zip((id(w) for w in plan.writes), fps, strict=True))
        draft, changed = plan.draft, set()
        if plan.warm_write is not None:
            fp = by_write[id(plan.warm_write)]
            tokens = self.warm.count_append(plan.warm_write) if plan.warm_tokens is None else plan.warm_tokens
            self.warm.commit_append(plan.today, fp, plan.warm_write, draft.warm, tokens)
            changed.add("warm")
        if plan.cold_write is not None and draft.cold is not None:
            fp = by_write[id(plan.cold_write)]
            self.cold.commit(draft.cold, plan.cold_write, fp, draft.cold_inserts, draft.cold_fold, draft.cold_run_start)
            changed.add("cold")
        elif plan.cold_write is not None and draft.cold_run_start is not None:
            fp = by_write[id(plan.cold_write)]
            self.cold.commit_appends(draft.cold_appends, plan.cold_write, fp, draft.cold_run_start)
            changed.add("cold")
        if plan.proposals_write is not None and draft.proposals is not None:
            self.proposals.commit(draft.proposals, plan.proposals_write, by_write[id(plan.proposals_write)])
            changed.add("cold")
        if plan.hot_writes is not None and draft.hot is not None:
            tokens = self.hot.count(draft.hot) if plan.hot_tokens is None else plan.hot_tokens
            self.hot.commit(draft.hot, plan.hot_writes, [by_write[id(w)] for w in plan.hot_writes.writes], tokens)
            changed.add("hot")
        return frozenset(changed)

    def reread(self, path: Path) -> None:
        """A person saved `path` while a batch was being published: load their version to plan on."""
        if path in self.hot.paths:
            self.hot.load()
        elif path == self.cold.path:
            self.cold.load()
        elif path == self.proposals.path:
            self.proposals.load()

    def forget(self) -> None:
        """The disk failed part-way: what reached it is re-read by the next batch (fingerprints differ)."""
        self.hot.forget()
        self.cold.fingerprint = None
        self.proposals.fingerprint = None
