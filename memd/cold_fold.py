"""The fold of the learnings a burst appended to one workspace's cold/MEMORY.md (memd.tiers.cold_store): when it
runs, one at a time, made in a worker, written through the workspace's writer.

A fold runs TIDY_AFTER_SECONDS after the last batch that appended (each batch re-arms the timer, so a steady burst
folds by count instead: at once after APPENDED_MAX appends), on demand before an edit that would otherwise fold
in its draft on the loop (`fold_now`: accepting a proposal), after a file with a run was opened or adopted, and
at close. Its text is made, counted and parsed in a worker (a big file's count and parse would hold the loop),
then written like any batch, guarded, with whatever was appended meanwhile after it. A person's edit meanwhile
is never lost: the fold made before it is dropped and the next one starts from their file. Imports memd.batch
(types), memd.errors and the cold store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from memd.batch import Edit
from memd.errors import MemdError
from memd.tiers.cold_store import APPENDED_MAX, TIDY_AFTER_SECONDS, ColdStore

log = logging.getLogger(__name__)


class ColdFolder:
    def __init__(
        self, name: str, cold: ColdStore, io: Executor, write: Callable[[Edit[bool]], Awaitable[bool]]
    ) -> None:
        self.name = name
        self._cold = cold
        self._io = io
        self._write = write
        self.timer: asyncio.TimerHandle | None = None  # the fold armed, not started yet
        self.running: set[asyncio.Task[None]] = set()  # the fold under way (at most one)
        self._closing = False

    def committed(self) -> None:
        """A batch that touched cold/MEMORY.md is durable: fold what it appended, soon or at once."""
        if self._cold.run_start is not None:
            self.arm(0.0 if self._cold.appended >= APPENDED_MAX else TIDY_AFTER_SECONDS)

    def found(self) -> None:
        """The file was read with a run in it (opened, adopted): fold it soon, unless a fold is armed already."""
        if self._cold.run_start is not None and self.timer is None:
            self.arm(TIDY_AFTER_SECONDS)

    def arm(self, delay: float) -> None:
        if self._closing:  # close() folds what is left itself
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # outside a loop (opened in a worker, a test's direct call): the next append arms it
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer = loop.call_later(delay, self._start)

    def _start(self) -> None:
        self.timer = None
        if self.running:  # one fold at a time: the one running arms the next if anything is left to fold
            return
        task = asyncio.get_running_loop().create_task(self.fold())
        self.running.add(task)
        task.add_done_callback(self.running.discard)

    async def fold_now(self) -> None:
        """Fold a run now, made in a worker: before an edit of cold/MEMORY.md other than a learning (accepting a
        proposal), which would otherwise fold it in its draft, on the loop, and have the file counted again there
        (~290 ms for a 1.8 MB MEMORY.md)."""
        if self.running:
            await asyncio.gather(*self.running, return_exceptions=True)
        if self._cold.run_start is not None:
            await self.fold()

    async def close(self) -> None:
        """Fold what is left (a stopped daemon leaves MEMORY.md as inserting would have) and arm nothing more."""
        self._closing = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.running:
            await asyncio.gather(*self.running, return_exceptions=True)
        await self.fold()

    async def fold(self) -> None:
        """One fold (see the module docstring); armed again while a run is left (appended meanwhile, dropped)."""
        cold = self._cold
        if cold.error is not None or cold.run_start is None:
            return
        loop = asyncio.get_running_loop()
        try:
            released = cold.released
            if released is not None:  # the start the last fold wrote, let go of: read back here, not on the loop
                head = await loop.run_in_executor(self._io, cold.read_back, released)
                taken, head = cold.take_back(released, head), None  # (the store holds it now, or no one does)
                if not taken and cold.released is not None:
                    log.info("workspace %s: cold/MEMORY.md changed outside memd; folding waits for it", self.name)
                    if cold.released is released:
                        cold.found_changed()  # the next batch reads their file (and its append arms the fold again)
                    return
            text, run_start, known, tokens = cold.text, cold.run_start, cold.parsed_if_any, cold.tokens
            if cold.error is not None or run_start is None:
                return
            fold = await loop.run_in_executor(self._io, cold.prepare_fold, text, run_start, known, tokens)
            if fold is None:  # not blocks as memd appends them: nothing of memd's to fold
                log.warning("workspace %s: cold/MEMORY.md's end is not what memd appended; left as it is", self.name)
                if cold.text is text:
                    cold.run_start = None
                return
            if await self._write(lambda draft: draft.fold_cold(fold)):
                log.debug("workspace %s: folded the learnings a burst appended to cold/MEMORY.md", self.name)
        except MemdError as exc:  # stopping, a corrupt file, a full disk: the next append arms it again
            log.info("workspace %s: folding appended learnings postponed: %s", self.name, exc.message)
            return
        except Exception:
            log.exception("workspace %s: folding appended learnings failed", self.name)
            return
        if self.timer is None and cold.run_start is not None:  # appended since, or dropped
            self.arm(TIDY_AFTER_SECONDS)
