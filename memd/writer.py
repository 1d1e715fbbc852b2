"""The single writer of one workspace: every change to its files goes through `Writer.write`.

Read top to bottom, a write goes: `write` queues the request -> `_begin` takes the workspace's exclusive lock and
the whole queue as one batch (group commit: writes that arrive while a batch is on the disk form the next one)
-> the planner turns the batch into file writes (`TierPlanner.plan`) -> a worker thread makes them durable
(`fsio_batch.write_batch`: staged, fsynced, published over the exact bytes they were planned from) while the loop
counts the batch's tokens and encodes the answers it can predict -> `_disk_done`, in the worker: the batch joins
`Completions`, and the worker sends the predicted answers itself (memd.early_ack) -> `_written`, on the loop
(woken by the worker, or earlier by the next request, which settles completions before it reads anything): the
planner publishes the new tier state, the remaining requests are acknowledged, the change sink is told which
tiers changed -> the next batch at once, or the lock is let go.

If the disk write fails, every request of the batch gets a StorageError and the tiers keep their last good state
(contract 1: an acknowledged write is on disk, a failed one is not acknowledged): the worker sends answers only
after the batch's fsync returned. If a person saved a file the batch replaces while it was being published,
nothing of the batch was written: the planner re-reads their version and the same requests are planned again on
it (contract 2), at most MAX_REPLANS times.

The writer is a chain of loop callbacks, not a Task: a single client's write costs one thread hand-off each way
and one loop turn of its own. Its collaborators come in through the constructor: the planner, the I/O executor,
the exclusive lock it shares with sweeps and adoptions, the identity guard of the workspace directory, the change
sink, the completions it shares with the other workspaces, and the usage figures its answers carry. Imports
memd.planner, memd.batch, memd.early_ack, memd.fsio, memd.fsio_batch and memd.errors.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from memd import fsio, fsio_batch
from memd.batch import Batch, Edit
from memd.early_ack import EarlyAck
from memd.errors import Busy, ShuttingDown, StorageError
from memd.exclusive import ExclusiveLock
from memd.planner import Clock, Request, TierPlanner

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_REPLANS = 16  # a file that changes under every attempt this often is being rewritten in a loop: give up


@dataclass
class Health:
    """What status shows about a workspace's storage."""

    last_write_error: str = ""
    last_write_error_at: str = ""
    write_fault: bool = False  # the last batch that wrote failed; cleared by the next one that succeeds
    writes: int = 0
    batches: int = 0
    replans: int = 0  # batches planned again because a person saved a file while they were being published
    identity_error: str = ""  # the workspace directory is not the one memd opened
    early_answers: int = 0  # answers the worker sent itself, straight after the fsync (memd.early_ack)
    early_usage_mismatches: int = 0  # early answers whose usage figures publishing did not confirm (see below)


def fail_futures(futures: Iterable[asyncio.Future[Any]], exc: BaseException) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(exc)


def call_in_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """From a worker thread: run fn(*args) on the loop. A closed loop means the daemon is gone; nothing waits."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        log.warning("a batch finished after the event loop closed; its requests were never acknowledged")


Usage = Callable[[], Mapping[str, Any]]  # the workspace's usage figures now
UsageAfter = Callable[[Batch], Mapping[str, Any] | None]  # ... once a batch is published; None: not predictable


class Completions:
    """Batches whose disk write is over, in the order they finished, until the loop takes them in (`settle`:
    publish, the answers the worker did not send, the next batch). Shared by every workspace's writer.

    The worker adds a batch before it sends any answer of it, and every request settles completions before it
    reads a workspace, so an acknowledged write is visible to the next request whatever order the loop sees the
    worker's wake-up and that request in (uvloop runs a socket's callbacks before queued ones)."""

    def __init__(self) -> None:
        self._done: deque[tuple[Writer, Batch, Future[list[fsio.Fingerprint]]]] = deque()

    def add(self, writer: Writer, plan: Batch, done: Future[list[fsio.Fingerprint]]) -> None:
        self._done.append((writer, plan, done))  # deque.append is atomic: safe from the worker thread

    def settle(self) -> None:
        """On the loop: take in every finished batch, oldest first."""
        done = self._done
        while done:
            try:
                writer, plan, result = done.popleft()
            except IndexError:  # taken in by a settle that ran inside this one
                return
            writer._written(plan, result)


class Writer:
    def __init__(
        self,
        name: str,
        root: Path,
        planner: TierPlanner,
        io: Executor,
        lock: ExclusiveLock,
        guard: Callable[[], fsio.PinnedDir],
        committed: Callable[[frozenset[str]], None],
        health: Health,
        clock: Clock,
        max_pending: int = 10_000,
        on_batch: Callable[[int, float], None] | None = None,
        completions: Completions | None = None,
        usage_after: UsageAfter | None = None,
        usage_now: Usage | None = None,
    ) -> None:
        """`guard` returns the workspace directory as memd opened it, or raises StorageError (swapped, removed);
        `committed` is told the tiers each acknowledged batch changed; `on_batch` (metrics) each durable batch's
        size and the seconds its writes and fsyncs took; `completions` the finished batches the loop takes in
        (a writer of its own when not shared); `usage_after` the usage figures a batch will leave, for answers the
        worker sends (none without it), and `usage_now` the figures after publishing, to check the prediction."""
        self.name = name
        self.root = root
        self._planner = planner
        self._io = io
        self._lock = lock
        self._guard = guard
        self._committed = committed
        self.health = health
        self._clock = clock
        self.max_pending = max_pending
        self._on_batch = on_batch
        self._completions = completions or Completions()
        self._usage_after = usage_after
        self._usage_now = usage_now
        self._write_started = 0.0  # when the batch in flight went to a worker
        self._queue: list[Request] = []
        self._batching = False  # a batch is waiting for the lock, being planned or being written
        self._idle_waiters: list[asyncio.Future[None]] = []
        self.in_flight: Batch | None = None  # the batch whose files a worker is writing right now
        self._closing = False

    def reconfigure(self, max_pending: int) -> None:
        self.max_pending = max_pending

    @property
    def pending(self) -> int:
        return len(self._queue)

    # --- request ---------------------------------------------------------------------------------------------

    async def write(self, edit: Edit[T], early: EarlyAck | None = None) -> T:
        """Apply `edit` in the next batch; returns its result once the batch is durable on disk. With `early`, the
        worker that made the batch durable may send the request's answer itself before the loop publishes it."""
        if self._closing:
            raise ShuttingDown("memd is shutting down; retry against the restarted daemon")
        if len(self._queue) >= self.max_pending:
            raise Busy(f"workspace {self.name!r} has {len(self._queue)} writes queued; retry shortly")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append((edit, future, early if self._usage_after is not None else None))
        if not self._batching:  # formed on the next loop turn: writes arriving together share one fsync
            self._batching = True
            asyncio.get_running_loop().call_soon(self._lock.acquire_then, self._begin)
        return await future

    # --- batch: plan, hand the I/O to a worker ---------------------------------------------------------------

    def _begin(self) -> None:
        batch, self._queue = self._queue, []
        self._plan_and_write(batch, 0)

    def _plan_and_write(self, requests: list[Request], replans: int, made: dict[int, list[Any]] | None = None) -> None:
        """Plan `requests` and hand their writes to a worker; ends the batch here unless a worker now has it.
        `made`: a re-plan's, what the earlier plan's requests made (ids, dates; memd.batch.Draft.made)."""
        if replans:
            for _, _, ack in requests:
                if ack is not None:
                    ack.payload = None  # nothing prepared for an earlier plan of these requests may go out
        try:
            pinned = self._guard()  # before the edits read anything through the workspace path
        except StorageError as exc:
            self.health.write_fault = True
            self.health.last_write_error = exc.message
            fail_futures((f for _, f, _ in requests), exc)
            self._end()
            return
        try:
            plan = self._planner.plan(requests, replans, made)
        except fsio_batch.OutsideChange as exc:  # a file read back for the plan changed: nothing was written
            if not self._plan_again(requests, replans, made, exc):
                self._end()
            return
        except BaseException as exc:  # a bug: fail the batch loudly rather than hang its clients (and the writer)
            log.exception("workspace %s: batch failed unexpectedly", self.name)
            fail_futures((f for _, f, _ in requests), exc if isinstance(exc, Exception) else ShuttingDown(str(exc)))
            self._end()
            if not isinstance(exc, Exception | asyncio.CancelledError):
                raise
            return
        if plan.refused is not None:
            self._fail(plan, plan.refused)
            self._end()
        elif not plan.writes:
            self._acknowledge(plan, frozenset())
            self._end()
        else:
            self.in_flight = plan
            self._write_started = time.perf_counter()
            loop = asyncio.get_running_loop()
            try:
                done = self._io.submit(fsio_batch.write_batch, pinned, plan.writes)
            except RuntimeError as exc:  # the executor is shut down: the daemon is stopping
                self.in_flight = None
                stopping = ShuttingDown(f"memd is shutting down ({exc}); nothing was written")
                fail_futures((f for _, f, _ in requests), stopping)
                self._end()
                return
            done.add_done_callback(lambda d: self._disk_done(loop, plan, d))
            self._planner.count_ahead(plan)
            if plan.early:
                self._prepare_answers(plan)

    def _prepare_answers(self, plan: Batch) -> None:
        """While the worker waits on the disk: encode the answer of a lone request that asked for an early answer,
        with the usage figures the batch will leave. Unpredictable figures: the loop answers it.

        Only a batch of one request is answered by its worker. Under concurrent load the loop's Python is what
        bounds the rate, and a worker that sends a batch's answers itself takes the GIL from it once per answer
        (figure 2 of docs/benchmarks.md: 16 clients 7,710 -> 6,156 writes/s when every batch was answered so);
        a lone writer is where the loop's wake-up after the fsync is latency, not throughput."""
        if len(plan.accepted) != 1:
            plan.early.clear()
            return
        assert self._usage_after is not None
        try:
            usage = self._usage_after(plan)
            plan.usage_after = usage
            if usage is not None:
                for ack, result in plan.early:
                    ack.prepare(result, usage)
        except Exception:  # an answer that cannot be encoded early is encoded (and its error reported) by the loop
            log.exception("workspace %s: preparing early answers failed", self.name)

    # --- durable: the worker sends what it can, the loop takes the batch in ----------------------------------

    def _disk_done(self, loop: asyncio.AbstractEventLoop, plan: Batch, done: Future[list[fsio.Fingerprint]]) -> None:
        """In the worker thread (or on the loop, for a write over before the callback was added): queue the batch
        for the loop, then send the answers the loop prepared, if the batch landed exactly as planned."""
        try:
            landed = bool(plan.early) and not done.cancelled() and done.exception() is None
            plan.as_planned = landed and self._planner.as_planned(plan, done.result())
        except Exception:  # never keep the loop from taking the batch in: it answers whatever was not sent
            log.exception("workspace %s: checking a durable batch for early answers failed", self.name)
            plan.as_planned = False
        self._completions.add(self, plan, done)  # before any answer: the next request settles it first
        try:
            if plan.as_planned:
                for ack, _ in plan.early:
                    ack.send()
                    # This thread is the only one that counts these (one batch of a workspace in flight at a time).
                    self.health.early_answers += ack.sent
        except Exception:
            log.exception("workspace %s: sending early answers failed; the loop answers them", self.name)
        finally:
            call_in_loop(loop, self._completions.settle)

    # --- durable: publish, acknowledge (or plan again, or fail) ----------------------------------------------

    def _written(self, plan: Batch, done: Future[list[fsio.Fingerprint]]) -> None:
        self.in_flight = None
        replanned = False
        try:
            try:
                fps = done.result()
            except fsio_batch.OutsideChange as exc:
                replanned = self._replan(plan, exc)
                return
            except OSError as exc:
                self._fail(plan, exc)
                return
            changed = self._planner.publish(plan, fps)
            if self._usage_now is not None and plan.usage_after is not None and plan.as_planned:
                self._check_prediction(plan)
            if self.health.write_fault:
                self.health.write_fault = False
                log.info("workspace %s: writes succeed again", self.name)
            self._acknowledge(plan, changed)
            self._measured(len(plan.accepted), time.perf_counter() - self._write_started)
        except (Exception, asyncio.CancelledError) as exc:  # a bug, or a cancelled worker: never hang the clients
            log.exception("workspace %s: batch failed unexpectedly", self.name)
            failure = exc if isinstance(exc, Exception) else ShuttingDown("memd is shutting down; nothing was written")
            fail_futures((f for f, _ in plan.accepted), failure)
        finally:
            if not replanned:  # else the new attempt is in a worker's hands, or has ended the batch itself
                self._end()

    def _acknowledge(self, plan: Batch, changed: frozenset[str]) -> None:
        self.health.batches += 1
        self.health.writes += len(plan.accepted)
        for future, result in plan.accepted:
            if not future.done():
                future.set_result(result)
        if changed:
            try:
                self._committed(changed)
            except Exception:  # the batch is durable and acknowledged; a listener's bug must not undo that
                log.exception("workspace %s: the change sink failed", self.name)

    def _check_prediction(self, plan: Batch) -> None:
        """The usage an early answer carried is what publishing left, unless something else changed the figures
        between the two (an outside edit taken in by a read, a reload of the budgets, midnight): counted (status:
        `early_usage_mismatches`) and logged; the figures are advisory, the write itself is not affected."""
        assert self._usage_now is not None
        now = self._usage_now()
        if now != plan.usage_after:
            self.health.early_usage_mismatches += 1
            log.warning(
                "workspace %s: an early answer carried usage %s, publishing left %s", self.name, plan.usage_after, now
            )

    def _measured(self, requests: int, seconds: float) -> None:
        """Tell metrics about a batch already acknowledged: a failure there is logged, never the batch's."""
        if self._on_batch is None:
            return
        try:
            self._on_batch(requests, seconds)
        except Exception:
            log.exception("workspace %s: recording the batch's metrics failed", self.name)

    def _replan(self, plan: Batch, exc: fsio_batch.OutsideChange) -> bool:
        """A person saved a file this batch replaces between planning and publishing; nothing of the batch was
        written. Read their version and plan the same requests again on top of it. False: gave up (the batch
        fails with a StorageError: a file rewritten that often by someone else needs a look)."""
        return self._plan_again(plan.requests, plan.replans, plan.draft.made, exc)

    def _plan_again(
        self, requests: list[Request], replans: int, made: dict[int, list[Any]] | None, exc: fsio_batch.OutsideChange
    ) -> bool:
        """`_replan` of `requests`, planned `replans` times so far (`made`: what they made; None: not planned)."""
        self.health.replans += 1
        if replans >= MAX_REPLANS:
            message = (
                f"{exc.path} changed outside memd (or was held open for writing) during each of {MAX_REPLANS + 1} "
                f"attempts to publish a batch of workspace {self.name!r}; nothing was written or acknowledged: stop "
                "the tool rewriting or holding it, then retry"
            )
            log.error("%s", message)
            fail_futures((f for _, f, _ in requests), StorageError(message, data={"path": str(exc.path)}))
            return False
        if exc.busy:  # a writer holds the old file open: give its write a moment to land, then read it
            delay = min(0.001 * 2**replans, 0.1)
            log.info(
                "workspace %s: %s is held open for writing; planning again in %.0f ms", self.name, exc.path, delay * 1e3
            )
            asyncio.get_running_loop().call_later(delay, self._replan_now, requests, replans, made, exc.path)
        else:
            log.info(
                "workspace %s: %s was saved outside memd while publishing; planning again on it", self.name, exc.path
            )
            self._replan_now(requests, replans, made, exc.path)
        return True

    def _replan_now(self, requests: list[Request], replans: int, made: dict[int, list[Any]] | None, path: Path) -> None:
        try:
            self._planner.reread(path)
        except Exception as exc:  # hot/ replaced by a file, no permission: fail the batch, never hang the writer
            log.exception("workspace %s: re-reading %s for a re-plan failed", self.name, path)
            fail_futures((f for _, f, _ in requests), StorageError(f"could not re-read {path}: {exc}"))
            self._end()
            return
        self._plan_and_write(requests, replans + 1, made)

    def _fail(self, plan: Batch, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        where = exc.filename or self.root
        message = f"could not write workspace {self.name!r} durably: {reason} ({where}); nothing was acknowledged"
        self.health.last_write_error = message
        self.health.write_fault = True
        self.health.last_write_error_at = self._clock.now().isoformat(timespec="seconds")
        log.error("%s", message)
        self._planner.forget()
        fail_futures((f for f, _ in plan.accepted), StorageError(message, data={"errno": exc.errno}))

    # --- between batches -------------------------------------------------------------------------------------

    def _end(self) -> None:
        self._lock.release()
        if self._queue:
            self._lock.acquire_then(self._begin)
            return
        self._batching = False
        idle, self._idle_waiters = self._idle_waiters, []
        for waiter in idle:
            if not waiter.done():
                waiter.set_result(None)

    async def close(self) -> None:
        """Stop taking writes and wait until every queued one is durable or failed."""
        self._closing = True
        while self._batching:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(waiter)
            await asyncio.shield(waiter)
