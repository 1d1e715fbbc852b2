"""Specification of the scheduled jobs (memd.jobs) across wall-clock steps, against a real AsyncIOScheduler.

The machine's clock is never touched: APScheduler's modules and the jobs' watchdog read a wall clock the test
steps (`SteppedClock`), while the event loop's timers and the monotonic clock stay real, as they are when an
administrator or NTP steps the system clock. Waits are for events, with generous bounds that only a failure
reaches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import apscheduler.executors.base
import apscheduler.schedulers.base
import apscheduler.triggers.interval
import pytest

from memd.config import JobsConfig
from memd.jobs import CLOCK_STEP_SECONDS, Jobs

BOUND = 10.0  # seconds: only a broken scheduler waits this long
CHECK = 0.02  # the watchdog's period in these tests
NOON = datetime(2030, 6, 1, 12, 0, 0, tzinfo=UTC)


class SteppedClock:
    """The wall clock as the test sets it: the real one plus an offset that a step changes at once."""

    offset = 0.0

    @classmethod
    def time(cls) -> float:
        return time.time() + cls.offset

    @classmethod
    def set(cls, when: datetime) -> None:
        cls.offset = when.timestamp() - time.time()

    @classmethod
    def step(cls, seconds: float) -> None:
        cls.offset += seconds


class SteppedDatetime(datetime):
    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime.fromtimestamp(SteppedClock.time(), tz)


@pytest.fixture(autouse=True)
def stepped_wall_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[SteppedClock]]:
    SteppedClock.offset = 0.0
    for module in (apscheduler.schedulers.base, apscheduler.executors.base, apscheduler.triggers.interval):
        monkeypatch.setattr(module, "datetime", SteppedDatetime)
    yield SteppedClock


def make_jobs(tmp_path: Path, check: float = CHECK) -> Jobs:
    return Jobs(
        JobsConfig(),  # misfire grace: one hour
        tmp_path / "jobs.json",
        clock_check_seconds=check,
        wall_clock=SteppedClock.time,
    )


def counter() -> tuple[list[datetime], Callable[[], Awaitable[None]], asyncio.Event]:
    runs: list[datetime] = []
    ran = asyncio.Event()

    async def job() -> None:
        runs.append(SteppedDatetime.now(UTC))
        ran.set()

    return runs, job, ran


async def next_run(ran: asyncio.Event, what: str) -> None:
    ran.clear()
    try:
        await asyncio.wait_for(ran.wait(), BOUND)
    except TimeoutError:
        raise AssertionError(f"timed out after {BOUND}s waiting for {what}") from None


async def settle() -> None:
    """Let the scheduler process what was just added and set its timer (it does so on the next loop turns)."""
    for _ in range(20):
        await asyncio.sleep(0)


def run(tmp_path: Path, scenario: Callable[[Jobs], Awaitable[None]], check: float = CHECK) -> Jobs:
    async def main() -> Jobs:
        jobs = make_jobs(tmp_path, check)
        jobs.start()
        try:
            await scenario(jobs)
        finally:
            jobs.shutdown()
        return jobs

    return asyncio.run(main())


# --- steps back ----------------------------------------------------------------------------------------------


def test_interval_jobs_keep_running_after_the_clock_is_set_back_an_hour(tmp_path: Path) -> None:
    async def scenario(jobs: Jobs) -> None:
        runs, job, ran = counter()
        jobs.every("tick", 0.2, job)
        await next_run(ran, "the first run")

        SteppedClock.step(-3600)
        await next_run(ran, "a run after the clock went back an hour")
        await next_run(ran, "the run after that")

        assert jobs.clock_steps == 1
        assert runs[-1] - runs[-2] < timedelta(seconds=BOUND)

    run(tmp_path, scenario)


def test_a_step_back_moves_interval_jobs_by_the_step_and_leaves_cron_jobs_at_their_wall_time(tmp_path: Path) -> None:
    SteppedClock.set(NOON - timedelta(hours=6))

    async def scenario(jobs: Jobs) -> None:
        _, job, _ = counter()
        jobs.every("hourly", 3600, job)
        jobs.cron("noon", "0 12 * * *", "UTC", job)
        before = {job_id: s["next_run"] for job_id, s in jobs.status().items()}

        SteppedClock.step(-1800)
        jobs.check_clock()

        after = {job_id: s["next_run"] for job_id, s in jobs.status().items()}
        moved = datetime.fromisoformat(before["hourly"]) - datetime.fromisoformat(after["hourly"])
        assert abs(moved - timedelta(seconds=1800)) < timedelta(seconds=2)
        assert after["noon"] == before["noon"] == NOON.isoformat(timespec="seconds")

    run(tmp_path, scenario)


# --- steps forward -------------------------------------------------------------------------------------------


def test_a_cron_job_the_clock_was_set_forward_past_runs_at_once(tmp_path: Path) -> None:
    SteppedClock.set(NOON - timedelta(hours=12))

    async def scenario(jobs: Jobs) -> None:
        runs, job, ran = counter()
        jobs.cron("noon", "0 12 * * *", "UTC", job)
        await settle()  # the scheduler's timer now waits 12 hours

        SteppedClock.set(NOON + timedelta(seconds=5))  # within the misfire grace: the scheduler runs it itself
        await next_run(ran, "the noon run the clock step made due")

        assert len(runs) == 1
        assert jobs.records["noon"].missed == 0

    run(tmp_path, scenario)


def test_a_cron_run_a_forward_step_pushed_past_the_grace_is_caught_up_once(tmp_path: Path) -> None:
    SteppedClock.set(NOON - timedelta(hours=1))

    async def scenario(jobs: Jobs) -> None:
        runs, job, ran = counter()
        jobs.cron("noon", "0 12 * * *", "UTC", job)
        await settle()  # the scheduler's timer now waits an hour

        SteppedClock.set(NOON + timedelta(hours=3))  # the grace is one hour
        await next_run(ran, "the caught-up noon run")
        while jobs.records["noon"].missed == 0:  # the scheduler's own verdict on the skipped run
            await asyncio.sleep(CHECK)

        assert len(runs) == 1
        assert jobs.status()["noon"]["next_run"] == (NOON + timedelta(days=1)).isoformat(timespec="seconds")

    run(tmp_path, scenario)


def test_interval_jobs_keep_their_elapsed_schedule_when_the_clock_jumps_forward(tmp_path: Path) -> None:
    async def scenario(jobs: Jobs) -> None:
        _, job, _ = counter()
        jobs.every("hourly", 3600, job)
        before = datetime.fromisoformat(jobs.status()["hourly"]["next_run"])

        SteppedClock.step(86_400)
        jobs.check_clock()

        after = datetime.fromisoformat(jobs.status()["hourly"]["next_run"])
        assert abs(after - before - timedelta(days=1)) < timedelta(seconds=2)
        assert jobs.records["hourly"].runs == 0

    run(tmp_path, scenario)


def test_an_interval_job_the_scheduler_ran_before_the_step_was_seen_stays_within_one_interval(tmp_path: Path) -> None:
    async def scenario(jobs: Jobs) -> None:
        runs, job, ran = counter()
        jobs.every("hourly", 3600, job)

        SteppedClock.step(86_400)
        assert jobs._scheduler is not None
        jobs._scheduler.wakeup()  # the scheduler's timer fires before the watchdog looks
        await next_run(ran, "the overdue run")
        jobs.check_clock()

        after = datetime.fromisoformat(jobs.status()["hourly"]["next_run"])
        assert after <= SteppedDatetime.now(UTC) + timedelta(hours=1)
        assert len(runs) == 1

    run(tmp_path, scenario, check=3600)  # the watchdog looks only when the test calls check_clock()


# --- the step detector ---------------------------------------------------------------------------------------


class ManualClocks:
    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def advance(self, seconds: float, wall_extra: float = 0.0) -> None:
        self.mono += seconds
        self.wall += seconds + wall_extra


def test_only_a_difference_of_a_second_or_more_between_the_clocks_is_a_step(tmp_path: Path) -> None:
    clocks = ManualClocks()
    jobs = Jobs(
        JobsConfig(), tmp_path / "jobs.json", wall_clock=lambda: clocks.wall, monotonic_clock=lambda: clocks.mono
    )

    clocks.advance(5.0)
    assert jobs.check_clock() == 0.0
    clocks.advance(5.0, wall_extra=0.0025)  # NTP slewing at its fastest, 500 ppm
    assert jobs.check_clock() == 0.0
    clocks.advance(300.0)  # a stalled loop: both clocks moved alike
    assert jobs.check_clock() == 0.0
    clocks.advance(5.0, wall_extra=-CLOCK_STEP_SECONDS)
    assert jobs.check_clock() == -CLOCK_STEP_SECONDS
    clocks.advance(5.0, wall_extra=7200.0)
    assert jobs.check_clock() == 7200.0

    assert jobs.clock_steps == 2


def test_shutdown_stops_the_watchdog(tmp_path: Path) -> None:
    async def main() -> None:
        jobs = make_jobs(tmp_path)
        jobs.start()
        assert jobs._clock_timer is not None
        jobs.shutdown()
        assert jobs._clock_timer is None

    asyncio.run(main())
