"""Scheduled jobs (APScheduler 3.x on the daemon's event loop).

Jobs: warm retention sweep (cron per time zone), reconcile scan (interval), budget scan (interval), and the
ones later parts register (snapshot flush). Every job is a coroutine run on the loop with an explicit
misfire grace time, coalescing and at most one instance, and each is bounded by `jobs.job_timeout_seconds`, so a
hanging job cannot block the others or the socket. Missed and failed runs are logged and shown in status.
Last-run times persist in `<state_dir>/jobs.json`; a sweep whose fire time passed while memd was down runs at
startup. Imports memd.config and memd.fsio only (the daemon hands in the work as callables).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
    _scheduler: AsyncIOScheduler | None = None
    _persisted: dict[str, str] = field(default_factory=dict)
    _functions: dict[str, JobFn] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            raw = json.loads(self.state_file.read_text(encoding="utf-8"))
            self._persisted = {str(k): str(v) for k, v in raw.get("last_run", {}).items()}
        except (FileNotFoundError, ValueError, AttributeError):
            self._persisted = {}

    def start(self) -> None:
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._scheduler.add_listener(self._on_event, EVENT_JOB_MISSED | EVENT_JOB_ERROR)
        self._scheduler.start()

    def shutdown(self) -> None:
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def every(self, job_id: str, seconds: float, fn: JobFn) -> None:
        self._add(job_id, IntervalTrigger(seconds=seconds, timezone=UTC), fn)

    def cron(self, job_id: str, crontab: str, timezone: str, fn: JobFn, catch_up: bool = True) -> None:
        trigger = CronTrigger.from_crontab(crontab, timezone=timezone)
        self._add(job_id, trigger, fn)
        last = self._persisted.get(job_id)
        if catch_up and last:
            missed_fire = trigger.get_next_fire_time(None, datetime.fromisoformat(last))
            if missed_fire is not None and missed_fire <= datetime.now(UTC):
                log.info("job %s: a run was due at %s while memd was down; running it now", job_id, missed_fire)
                asyncio.get_running_loop().create_task(self.run_now(job_id))
        elif catch_up and not last:
            self._persisted[job_id] = datetime.now(UTC).isoformat(timespec="seconds")  # first start: not "missed"
            self._save()

    def remove_all_except(self, keep: set[str]) -> None:
        if self._scheduler is None:
            return
        for job in self._scheduler.get_jobs():
            if job.id not in keep:
                job.remove()
                self._functions.pop(job.id, None)

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
        record.last_run = datetime.now(UTC).isoformat(timespec="seconds")
        self._persisted[job_id] = record.last_run
        self._save()
        return result

    def _on_event(self, event: JobExecutionEvent) -> None:
        record = self.records.setdefault(event.job_id, JobRecord())
        if event.code == EVENT_JOB_MISSED:
            record.missed += 1
            log.warning("job %s missed its run at %s", event.job_id, event.scheduled_run_time)
        else:
            record.errors += 1
            record.last_error = repr(event.exception)
            log.error("job %s raised %r", event.job_id, event.exception)

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
