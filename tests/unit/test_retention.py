"""Specification of warm retention (memd.retention, Workspace.sweep): what expires, delete and archive modes.

Contract 5: retention deletes only files in `warm/` named like a real calendar date past the retention window,
never symlinks, never anything else, and a dry run lists exactly what a real run deletes. "Today" is the date
in the workspace's time zone and the window is counted in dates, so a DST switch cannot move it.
Pure: no daemon; sweeps through a Workspace run on a fake clock.
"""

from __future__ import annotations

import asyncio
import gzip
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from memd import retention
from memd.config import WarmConfig, WorkspaceConfig
from memd.tiers.warm_format import parse_day
from memd.tokens import TokenCounter
from memd.workspace import Workspace

TODAY = date(2026, 11, 20)
RETENTION = 7


def day_name(day: date) -> str:
    return f"{day.isoformat()}.md"


def entry_text(day: date, action: str) -> str:
    return f"# Activity Log {day.isoformat()}\n\n### 10:00:00 - {action}\n```\nfile: a.py\n```\nResult: ok\n\n"


def make_days(warm: Path, days: list[date]) -> dict[str, bytes]:
    warm.mkdir(parents=True, exist_ok=True)
    contents = {}
    for day in days:
        data = entry_text(day, f"work of {day.isoformat()}").encode()
        (warm / day_name(day)).write_bytes(data)
        contents[day_name(day)] = data
    return contents


def listing(directory: Path) -> set[str]:
    return set(os.listdir(directory))


@pytest.fixture
def warm(tmp_path: Path) -> Path:
    path = tmp_path / "ws" / "warm"
    path.mkdir(parents=True)
    return path


# --- what expires --------------------------------------------------------------------------------------------


def test_expired_are_valid_day_names_at_least_retention_days_old_oldest_first(warm: Path) -> None:
    days = [TODAY - timedelta(days=k) for k in (30, 8, 7, 6, 1, 0)]
    make_days(warm, days)

    plan = retention.plan_sweep(warm, TODAY, RETENTION)

    assert plan.directory == warm
    assert plan.expired == tuple(day_name(TODAY - timedelta(days=k)) for k in (30, 8, 7))


def test_future_dates_never_expire(warm: Path) -> None:
    make_days(warm, [TODAY + timedelta(days=1), TODAY + timedelta(days=400), TODAY - timedelta(days=RETENTION)])

    assert retention.plan_sweep(warm, TODAY, RETENTION).expired == (day_name(TODAY - timedelta(days=RETENTION)),)


def test_other_names_and_directories_named_like_days_are_never_listed(warm: Path) -> None:
    old = TODAY - timedelta(days=100)
    others = ["notes.md", "2026-13-01.md", "2026-02-30.md", "2026-11-01.md.bak", "2020-1-01.md", "x2020-01-01.md"]
    for name in others:
        (warm / name).write_text("not a day log\n")
    (warm / day_name(old - timedelta(days=1))).mkdir()  # a directory named like an old day
    (warm / day_name(old - timedelta(days=1)) / "inner.md").write_text("inside\n")
    make_days(warm, [old])

    plan = retention.plan_sweep(warm, TODAY, RETENTION)
    removed = retention.delete_expired(plan)

    assert plan.expired == (day_name(old),)
    assert removed == [day_name(old)]
    assert listing(warm) == {*others, day_name(old - timedelta(days=1))}
    assert (warm / day_name(old - timedelta(days=1)) / "inner.md").read_text() == "inside\n"


def test_a_symlink_named_like_an_old_day_is_neither_listed_nor_deleted_nor_followed(warm: Path) -> None:
    outside = warm.parent.parent / "outside.md"
    outside.write_text("precious, not memd's\n")
    link = warm / day_name(TODAY - timedelta(days=50))
    link.symlink_to(outside)
    dangling = warm / day_name(TODAY - timedelta(days=51))
    dangling.symlink_to(warm.parent.parent / "missing.md")

    plan = retention.plan_sweep(warm, TODAY, RETENTION)

    assert plan.expired == ()
    assert retention.delete_expired(plan) == []
    assert retention.archive_expired(plan) == []
    assert link.is_symlink() and dangling.is_symlink()
    assert outside.read_text() == "precious, not memd's\n"


def test_a_file_swapped_for_a_symlink_after_planning_is_not_deleted(warm: Path) -> None:
    old = TODAY - timedelta(days=20)
    make_days(warm, [old])
    outside = warm.parent.parent / "outside.md"
    outside.write_text("keep\n")
    plan = retention.plan_sweep(warm, TODAY, RETENTION)
    (warm / day_name(old)).unlink()
    (warm / day_name(old)).symlink_to(outside)

    assert retention.delete_expired(plan) == []
    assert (warm / day_name(old)).is_symlink()
    assert outside.read_text() == "keep\n"


def test_a_missing_warm_directory_plans_nothing(tmp_path: Path) -> None:
    assert retention.plan_sweep(tmp_path / "nope", TODAY, RETENTION).expired == ()


# --- delete mode ---------------------------------------------------------------------------------------------


def test_delete_removes_exactly_what_the_dry_run_plan_lists(warm: Path) -> None:
    days = [TODAY - timedelta(days=k) for k in range(0, 40, 3)]
    make_days(warm, days)
    (warm / "notes.md").write_text("mine\n")
    before = listing(warm)

    dry = retention.plan_sweep(warm, TODAY, RETENTION)
    assert listing(warm) == before  # planning touches nothing
    removed = retention.delete_expired(retention.plan_sweep(warm, TODAY, RETENTION))

    assert removed == list(dry.expired)
    assert listing(warm) == before - set(dry.expired)
    assert retention.plan_sweep(warm, TODAY, RETENTION).expired == ()


# --- archive mode --------------------------------------------------------------------------------------------


def test_archive_moves_days_into_monthly_gzip_and_gives_back_the_exact_text(warm: Path) -> None:
    days = [date(2026, 1, 30), date(2026, 1, 31), date(2026, 2, 1)]
    contents = make_days(warm, days)

    moved = retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))

    assert moved == [day_name(d) for d in days]
    assert listing(warm) == {"archive"}
    assert listing(warm / "archive") == {"2026-01.md.gz", "2026-02.md.gz"}
    for day in days:
        assert retention.read_archived_day(warm, day) == contents[day_name(day)].decode()
    assert retention.read_archived_day(warm, date(2026, 1, 29)) is None
    # A plain gzip reader (zcat) sees every day too.
    assert contents[day_name(days[0])] in gzip.decompress((warm / "archive" / "2026-01.md.gz").read_bytes())


def test_a_crash_between_append_and_unlink_never_duplicates_a_day(warm: Path) -> None:
    days = [date(2026, 3, 1), date(2026, 3, 2)]
    contents = make_days(warm, days)
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    archive = warm / "archive" / "2026-03.md.gz"
    archived_bytes = archive.read_bytes()
    # The crash: the day files were appended to the archive but are still in warm/.
    for name, data in contents.items():
        (warm / name).write_bytes(data)

    plan = retention.plan_sweep(warm, TODAY, RETENTION)
    assert plan.expired == tuple(day_name(d) for d in days)
    assert retention.archive_expired(plan) == [day_name(d) for d in days]

    assert archive.read_bytes() == archived_bytes  # nothing appended twice
    text = retention.read_archive_text(archive)
    for day in days:
        assert text.count(f"memd-archive: {day_name(day)} ") == 1
        assert retention.read_archived_day(warm, day) == contents[day_name(day)].decode()
    assert listing(warm) == {"archive"}


def test_a_day_edited_after_archiving_is_archived_again_and_its_latest_text_wins(warm: Path) -> None:
    day = date(2026, 4, 2)
    make_days(warm, [day])
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    (warm / day_name(day)).write_text("restored and edited by hand\n")

    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))

    assert retention.read_archived_day(warm, day) == "restored and edited by hand\n"


def test_a_hand_written_day_without_final_newline_reads_back_exactly(warm: Path) -> None:
    first, second = date(2026, 5, 1), date(2026, 5, 2)
    (warm / day_name(first)).write_text("### 09:00:00 - written by another tool, no final newline")
    (warm / day_name(second)).write_text("### 10:00:00 - second\n")

    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))

    assert retention.read_archived_day(warm, first) == "### 09:00:00 - written by another tool, no final newline"
    assert retention.read_archived_day(warm, second) == "### 10:00:00 - second\n"
    (warm / day_name(second)).write_text("### 10:00:00 - second\n")  # a crash before the unlink, repaired
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    assert retention.read_archive_text(warm / "archive" / "2026-05.md.gz").count(day_name(second)) == 1


def test_a_crash_mid_append_leaves_every_later_day_readable(warm: Path) -> None:
    first, torn, later = date(2026, 6, 1), date(2026, 6, 2), date(2026, 6, 3)
    contents = make_days(warm, [first])
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    archive = warm / "archive" / "2026-06.md.gz"
    whole = archive.stat().st_size
    contents |= make_days(warm, [torn])
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    # The crash: only half of the torn day's gzip member reached the disk, and its day file was not unlinked.
    os.truncate(archive, whole + (archive.stat().st_size - whole) // 2)
    (warm / day_name(torn)).write_bytes(contents[day_name(torn)])
    contents |= make_days(warm, [later])

    assert retention.read_archived_day(warm, first) == contents[day_name(first)].decode()
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))

    for day in (first, torn, later):
        assert retention.read_archived_day(warm, day) == contents[day_name(day)].decode()
    assert listing(warm) == {"archive"}
    assert gzip.decompress(archive.read_bytes()).count(b"memd-archive: ") == 3  # zcat reads it whole again


# --- through a Workspace: the local date, DST ----------------------------------------------------------------


@dataclass
class FakeClock:
    instant: datetime

    def now(self) -> datetime:
        return self.instant


def open_workspace(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, instant: datetime, tz: str, mode: str = "delete"
) -> Workspace:
    warm_config = WarmConfig(timezone=tz, retention_days=RETENTION, mode=mode)  # type: ignore[arg-type]
    ws = Workspace(WorkspaceConfig(name="w", path=root, warm=warm_config), counter, FakeClock(instant), io)
    ws.open()
    return ws


def local(tz: str, year: int, month: int, day: int, hour: int, minute: int, fold: int = 0) -> datetime:
    """A local wall-clock time, returned as the UTC instant a system clock would report."""
    return datetime(year, month, day, hour, minute, tzinfo=ZoneInfo(tz), fold=fold).astimezone(UTC)


DST_CASES = [
    # (zone, instant, the local date: "today")
    ("Europe/Paris", local("Europe/Paris", 2026, 3, 29, 0, 30), date(2026, 3, 29)),  # UTC still says 03-28
    ("Europe/Paris", local("Europe/Paris", 2026, 3, 29, 3, 30), date(2026, 3, 29)),  # just after spring-forward
    ("Europe/Paris", local("Europe/Paris", 2026, 3, 28, 23, 59), date(2026, 3, 28)),
    ("Europe/Paris", local("Europe/Paris", 2026, 10, 25, 0, 30), date(2026, 10, 25)),  # UTC still says 10-24
    ("Europe/Paris", local("Europe/Paris", 2026, 10, 25, 2, 30, fold=0), date(2026, 10, 25)),  # first 02:30
    ("Europe/Paris", local("Europe/Paris", 2026, 10, 25, 2, 30, fold=1), date(2026, 10, 25)),  # second 02:30
    ("Europe/Paris", local("Europe/Paris", 2026, 10, 25, 3, 30), date(2026, 10, 25)),
    ("America/New_York", local("America/New_York", 2026, 3, 8, 1, 30), date(2026, 3, 8)),
    ("America/New_York", local("America/New_York", 2026, 3, 8, 3, 30), date(2026, 3, 8)),
    ("America/New_York", local("America/New_York", 2026, 11, 1, 1, 30, fold=1), date(2026, 11, 1)),
    ("America/New_York", local("America/New_York", 2026, 11, 1, 23, 30), date(2026, 11, 1)),  # UTC says 11-02
    ("America/New_York", local("America/New_York", 2026, 3, 7, 20, 0), date(2026, 3, 7)),  # UTC says 03-08
]


@pytest.mark.parametrize(("tz", "instant", "today"), DST_CASES, ids=[f"{c[0]}-{c[1].isoformat()}" for c in DST_CASES])
def test_today_is_the_local_date_and_the_window_is_counted_in_dates_across_dst(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, tz: str, instant: datetime, today: date
) -> None:
    ws = open_workspace(tmp_path / "ws", counter, io, instant, tz)
    days = [today + timedelta(days=k) for k in range(-RETENTION - 3, 3)]
    make_days(ws.root / "warm", days)
    expected = tuple(day_name(d) for d in days if (today - d).days >= RETENTION)

    result: dict[str, Any] = asyncio.run(ws.sweep(dry_run=True))

    assert result["today"] == today.isoformat()
    assert tuple(result["expired"]) == expected
    assert result["removed"] == []
    assert listing(ws.root / "warm") == {day_name(d) for d in days}


@pytest.mark.parametrize("mode", ["delete", "archive"])
def test_a_real_sweep_removes_what_the_dry_run_listed_and_logs_it_in_the_local_day(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, mode: str
) -> None:
    tz, instant, today = "Europe/Paris", local("Europe/Paris", 2026, 3, 29, 0, 30), date(2026, 3, 29)
    ws = open_workspace(tmp_path / "ws", counter, io, instant, tz, mode=mode)
    warm = ws.root / "warm"
    days = [today - timedelta(days=k) for k in (40, 9, 7, 6, 1)]
    contents = make_days(warm, days)
    (warm / "notes.md").write_text("mine\n")

    async def both() -> tuple[dict[str, Any], dict[str, Any]]:
        return await ws.sweep(dry_run=True), await ws.sweep(dry_run=False)

    dry, real = asyncio.run(both())

    expired = [day_name(today - timedelta(days=k)) for k in (40, 9, 7)]
    assert dry["expired"] == real["expired"] == real["removed"] == expired
    assert ws.last_sweep == real
    assert {day_name(today - timedelta(days=k)) for k in (6, 1)} | {"notes.md", day_name(today)} <= listing(warm)
    assert not set(real["removed"]) & listing(warm)
    logged = parse_day((warm / day_name(today)).read_text())
    assert [e.action for e in logged] == ["retention-sweep"]
    assert dict(logged[0].details)["removed"] == ", ".join(real["removed"])
    if mode == "archive":
        for name in real["removed"]:
            day = date.fromisoformat(name.removesuffix(".md"))
            assert ws.day_entries(day) == (parse_day(contents[name].decode()), "archive")
