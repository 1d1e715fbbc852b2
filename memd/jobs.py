"""Scheduled jobs (APScheduler 3.x on the daemon's event loop).

Jobs: warm retention sweep (cron per time zone), reconcile scan (interval), budget scan (interval), and the
ones later parts register (snapshot flush). Every job is a coroutine run on the loop with an explicit
misfire grace time, coalescing and at most one instance, and each is bounded by `jobs.job_timeout_seconds`, so a
hanging job cannot block the others or the socket. Missed and failed runs are logged and shown in status.
Last-run times persist in `<state_dir>/jobs.json`; a sweep whose fire time passed while memd was down runs at
startup. Imports memd.config and memd.fsio only (the daemon hands in the work as callables).

Wall-clock steps. APScheduler keeps next run times in wall-clock time but sleeps on one loop timer, which runs on
the monotonic clock: set the clock back an hour and every job waits an hour more; set it forward and due jobs wait
out the old timer, a sweep possibly past its misfire grace. A small watchdog on the loop compares how far the wall
clock and the monotonic clock moved every `clock_check_seconds`; when they differ by `CLOCK_STEP_SECONDS` or more
(NTP slewing is at most 0.5 ms/s; a suspended machine counts as a step forward, since the loop's timers did not
run), the clock stepped: interval jobs are moved by the step (at most one interval ahead), so they keep their
elapsed-time schedule; cron jobs keep their wall-clock times and the scheduler recomputes its timer from the new
time. A cron run missed by more than the grace (a forward step, a suspended machine) runs once at once, as a run
missed while memd was down runs at startup.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from memd import fsio
from memd.config import JobsConfig

log = logging.getLogger(__name__)

JobFn = Callable[[], Awaitable[Any]]

CLOCK_CHECK_SECONDS = 5.0  # how often the watchdog compares the wall clock with the monotonic clock
CLOCK_STEP_SECONDS = 1.0  # a difference this large between the two is a step, not drift or jitter


@dataclass
class JobRecord:
    last_run: str = ""
    last_result: Any = None
    last_error: str = ""
    runs: int = 0
    missed: int = 0
    errors: int = 0
    running: bool = False


@dataclass
class Jobs:
    """The scheduler plus what status shows about each job."""

    config: JobsConfig
    state_file: Path
    records: dict[str, JobRecord] = field(default_factory=dict)
    clock_check_seconds: float = CLOCK_CHECK_SECONDS
    wall_clock: Callable[[], float] = time.time  # what APScheduler schedules by (tests step a fake one)
    monotonic_clock: Callable[[], float] = time.monotonic  # what the loop's timers run on
    clock_steps: int = 0  # wall-clock steps seen since start
    _scheduler: AsyncIOScheduler | None = None
    _persisted: dict[str, str] = field(default_factory=dict)
    _functions: dict[str, JobFn] = field(default_factory=dict)
    _catch_up: set[str] = field(default_factory=set)
    _loop: asyncio.AbstractEventLoop | None = None
    _clock_timer: asyncio.TimerHandle | None = None
    _clock_mark: tuple[float, float] = (0.0, 0.0)

    def __post_init__(self) -> None:
        try:
            raw = json.loads(self.state_file.read_text(encoding="utf-8"))
            self._persisted = {str(k): str(v) for k, v in raw.get("last_run", {}).items()}
        except (FileNotFoundError, ValueError, AttributeError):
            self._persisted = {}
        self._clock_mark = (self.wall_clock(), self.monotonic_clock())

    def reconfigure(self, config: JobsConfig) -> None:
        """A reloaded [jobs]: timeouts and grace times of runs from now on (the daemon re-adds the schedules)."""
        self.config = config

    def start(self) -> None:
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._scheduler.add_listener(self._on_event, EVENT_JOB_MISSED | EVENT_JOB_ERROR)
        self._scheduler.start()
        self._loop = asyncio.get_running_loop()
        self._clock_mark = (self.wall_clock(), self.monotonic_clock())
        self._clock_timer = self._loop.call_later(self.clock_check_seconds, self._clock_tick)

    def shutdown(self) -> None:
        if self._clock_timer is not None:
            self._clock_timer.cancel()
            self._clock_timer = None
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.wall_clock(), UTC)

    # --- wall-clock steps ------------------------------------------------------------------------------------

    def _clock_tick(self) -> None:
        try:
            self.check_clock()
        except Exception:  # the watchdog must outlive any one bad check
            log.exception("checking the wall clock for steps failed")
        if self._clock_timer is not None and self._loop is not None:
            self._clock_timer = self._loop.call_later(self.clock_check_seconds, self._clock_tick)

    def check_clock(self) -> float:
        """Compare how far the wall and monotonic clocks moved since the last check; on a step, reschedule.
        Returns the step in seconds (0.0 when there was none)."""
        wall, mono = self.wall_clock(), self.monotonic_clock()
        last_wall, last_mono = self._clock_mark
        self._clock_mark = (wall, mono)
        step = (wall - last_wall) - (mono - last_mono)
        if abs(step) < CLOCK_STEP_SECONDS:
            return 0.0
        self.clock_steps += 1
        log.warning(
            "the wall clock stepped %s by %.1f s; rescheduling jobs", "forward" if step > 0 else "back", abs(step)
        )
        if self._scheduler is not None and self._scheduler.running:
            now = self._now()
            for job in self._scheduler.get_jobs():
                if isinstance(job.trigger, IntervalTrigger) and job.next_run_time is not None:  # not paused
                    # Never more than one interval ahead: the scheduler may have run the job since the step.
                    moved = job.next_run_time + timedelta(seconds=step)
                    job.modify(next_run_time=min(moved, now + job.trigger.interval))
            self._scheduler.wakeup()  # its timer was set from the old wall time
        return step

    def every(self, job_id: str, seconds: float, fn: JobFn) -> None:
        self._add(job_id, IntervalTrigger(seconds=seconds, timezone=UTC), fn)

    def cron(self, job_id: str, crontab: str, timezone: str, fn: JobFn, catch_up: bool = True) -> None:
        trigger = CronTrigger.from_crontab(crontab, timezone=timezone)
        self._add(job_id, trigger, fn)
        if catch_up:
            self._catch_up.add(job_id)
        else:
            self._catch_up.discard(job_id)
        last = self._persisted.get(job_id)
        if catch_up and last:
            missed_fire = trigger.get_next_fire_time(None, datetime.fromisoformat(last))
            if missed_fire is not None and missed_fire <= self._now():
                log.info("job %s: a run was due at %s while memd was down; running it now", job_id, missed_fire)
                asyncio.get_running_loop().create_task(self.run_now(job_id))
        elif catch_up and not last:
            self._persisted[job_id] = self._now().isoformat(timespec="seconds")  # first start: not "missed"
            self._save()

    def remove_all_except(self, keep: set[str]) -> None:
        if self._scheduler is None:
            return
        for job in self._scheduler.get_jobs():
            if job.id not in keep:
                job.remove()
                self._functions.pop(job.id, None)
                self._catch_up.discard(job.id)

    def _add(self, job_id: str, trigger: Any, fn: JobFn) -> None:
        assert self._scheduler is not None, "start() the scheduler first"
        self._functions[job_id] = fn
        self.records.setdefault(job_id, JobRecord(last_run=self._persisted.get(job_id, "")))
        self._scheduler.add_job(
            self.run_now,
            trigger,
            args=[job_id],
            id=job_id,
            name=job_id,
            replace_existing=True,
            misfire_grace_time=int(self.config.misfire_grace_seconds),
            coalesce=True,
            max_instances=1,
        )

    async def run_now(self, job_id: str) -> Any:
        fn = self._functions.get(job_id)
        record = self.records.setdefault(job_id, JobRecord())
        if fn is None or record.running:
            return None
        record.running = True
        try:
            result = await asyncio.wait_for(fn(), self.config.job_timeout_seconds)
        except TimeoutError:
            record.errors += 1
            record.last_error = f"timed out after {self.config.job_timeout_seconds:.0f}s"
            log.error("job %s %s", job_id, record.last_error)
            return None
        except Exception as exc:
            record.errors += 1
            record.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("job %s failed", job_id)
            return None
        finally:
            record.running = False
        record.runs += 1
        record.last_result = result
        record.last_error = ""
        record.last_run = self._now().isoformat(timespec="seconds")
        self._persisted[job_id] = record.last_run
        self._save()
        return result

    def _on_event(self, event: JobExecutionEvent) -> None:
        record = self.records.setdefault(event.job_id, JobRecord())
        if event.code == EVENT_JOB_MISSED:
            record.missed += 1
            log.warning("job %s missed its run at %s", event.job_id, event.scheduled_run_time)
            if event.job_id in self._catch_up and self._loop is not None:
                # Missed by more than the grace (the clock stepped forward, the machine slept): run it once now,
                # as a run missed while memd was down runs at startup.
                log.info("job %s: running the missed run now", event.job_id)
                self._loop.call_soon_threadsafe(self._run_soon, event.job_id)
        else:
            record.errors += 1
            record.last_error = repr(event.exception)
            log.error("job %s raised %r", event.job_id, event.exception)

    def _run_soon(self, job_id: str) -> None:
        assert self._loop is not None
        self._loop.create_task(self.run_now(job_id))

    def _save(self) -> None:
        try:
            fsio.atomic_replace(self.state_file, json.dumps({"last_run": self._persisted}, indent=1).encode(), 0o600)
        except OSError as exc:  # losing a last-run time only means a sweep may run once more
            log.warning("cannot record job times in %s: %s", self.state_file, exc)

    def status(self) -> dict[str, Any]:
        next_runs: dict[str, str] = {}
        if self._scheduler is not None:
            for job in self._scheduler.get_jobs():
                if job.next_run_time is not None:
                    next_runs[job.id] = job.next_run_time.isoformat(timespec="seconds")
        return {
            job_id: {
                "last_run": r.last_run or None,
                "next_run": next_runs.get(job_id),
                "runs": r.runs,
                "missed": r.missed,
                "errors": r.errors,
                "last_error": r.last_error or None,
                "running": r.running,
            }
            for job_id, r in sorted(self.records.items())
        }
