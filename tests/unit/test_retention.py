"""Specification of warm retention (memd.retention, memd.archive, Workspace.sweep): what expires, delete and archive
modes.

Contract 5: retention deletes only files in `warm/` named like a real calendar date past the retention window,
never symlinks, never anything else, and a dry run lists exactly what a real run deletes. "Today" is the date
in the workspace's time zone and the window is counted in dates, so a DST switch cannot move it. Given what git
holds, a day goes only when git holds its exact bytes; the others stay, each with the reason. An archive is
replaced whole after a read-back check, never cut: a damaged one is kept as it is and the month goes on in the
next file; reading is capped, so a gzip bomb is a clear error.
Pure: no daemon; sweeps through a Workspace run on a fake clock.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import tomllib
import tracemalloc
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from memd import fsio, retention, sweep
from memd.archive import DEFAULT_ARCHIVE_MAX_BYTES, ArchiveTooLarge, read_archive_text
from memd.config import WarmConfig, WorkspaceConfig, parse_config
from memd.errors import ConfigError, CorruptFile
from memd.tiers.warm_format import parse_day
from memd.tokens import TokenCounter
from memd.workspace import Workspace

TODAY = date(2026, 11, 20)
MIB = 1024 * 1024
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
    removed = retention.delete_expired(plan).removed

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
    assert retention.delete_expired(plan).removed == []
    assert retention.archive_expired(plan).removed == []
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

    assert retention.delete_expired(plan).removed == []
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
    removed = retention.delete_expired(retention.plan_sweep(warm, TODAY, RETENTION)).removed

    assert removed == list(dry.expired)
    assert listing(warm) == before - set(dry.expired)
    assert retention.plan_sweep(warm, TODAY, RETENTION).expired == ()


# --- archive mode --------------------------------------------------------------------------------------------


def test_archive_moves_days_into_monthly_gzip_and_gives_back_the_exact_text(warm: Path) -> None:
    days = [date(2026, 1, 30), date(2026, 1, 31), date(2026, 2, 1)]
    contents = make_days(warm, days)

    moved = retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION)).removed

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
    assert retention.archive_expired(plan).removed == [day_name(d) for d in days]

    assert archive.read_bytes() == archived_bytes  # nothing appended twice
    text = read_archive_text(archive)
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
    assert read_archive_text(warm / "archive" / "2026-05.md.gz").count(day_name(second)) == 1


def test_a_torn_archive_is_kept_as_it_is_and_every_day_stays_readable(warm: Path) -> None:
    # Archives are replaced whole now, so memd never tears one; an older memd, a copy cut short or a full disk
    # elsewhere can. Such an archive is never cut or rewritten: later days go to the month's next file.
    first, torn, later = date(2026, 6, 1), date(2026, 6, 2), date(2026, 6, 3)
    contents = make_days(warm, [first])
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    archive = warm / "archive" / "2026-06.md.gz"
    whole = archive.stat().st_size
    contents |= make_days(warm, [torn])
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    # Only half of the torn day's gzip member is left, and its day file is back in warm/.
    os.truncate(archive, whole + (archive.stat().st_size - whole) // 2)
    torn_bytes = archive.read_bytes()
    (warm / day_name(torn)).write_bytes(contents[day_name(torn)])
    contents |= make_days(warm, [later])

    assert retention.read_archived_day(warm, first) == contents[day_name(first)].decode()
    outcome = retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))

    assert outcome.removed == [day_name(torn), day_name(later)]
    assert archive.read_bytes() == torn_bytes
    assert any("2026-06.md.gz is damaged" in w and "torn" in w for w in outcome.warnings), outcome.warnings
    for day in (first, torn, later):
        assert retention.read_archived_day(warm, day) == contents[day_name(day)].decode()
    assert listing(warm) == {"archive"}
    assert listing(warm / "archive") == {"2026-06.md.gz", "2026-06.1.md.gz"}
    assert gzip.decompress((warm / "archive" / "2026-06.1.md.gz").read_bytes()).count(b"memd-archive: ") == 2


def member_spans(raw: bytes) -> list[tuple[int, int]]:
    """(start, end) of each gzip member of a well-formed archive."""
    spans, offset = [], 0
    while offset < len(raw):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        d.decompress(raw[offset:])
        spans.append((offset, len(raw) - len(d.unused_data)))
        offset = spans[-1][1]
    return spans


def damage_member(archive: Path, index: int) -> bytes:
    """Flip one byte in the middle of member `index`; returns the damaged bytes."""
    raw = bytearray(archive.read_bytes())
    start, end = member_spans(bytes(raw))[index]
    raw[(start + end) // 2] ^= 0xFF
    archive.write_bytes(bytes(raw))
    return bytes(raw)


def test_one_damaged_byte_keeps_the_archive_as_it_is_and_the_next_days_go_to_a_new_file(warm: Path) -> None:
    first = [date(2026, 11, 1), date(2026, 11, 2), date(2026, 11, 3)]
    contents = make_days(warm, first)
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    archive = warm / "archive" / "2026-11.md.gz"
    damaged = damage_member(archive, 1)
    later = [date(2026, 11, 4), date(2026, 11, 5)]
    contents |= make_days(warm, later)

    outcome = retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))

    assert outcome.removed == [day_name(d) for d in later]
    assert archive.read_bytes() == damaged
    assert len(outcome.warnings) == 1 and "warm/archive/2026-11.md.gz is damaged" in outcome.warnings[0]
    assert listing(warm / "archive") == {"2026-11.md.gz", "2026-11.1.md.gz"}
    for day in (first[0], first[2], *later):  # every intact member, before and after the damaged one
        assert retention.read_archived_day(warm, day) == contents[day_name(day)].decode()
    with pytest.raises(CorruptFile, match="damaged"):  # the damaged day: a clear error, not "no such day"
        retention.read_archived_day(warm, first[1])
    assert retention.read_archived_day(warm, date(2026, 10, 30)) is None  # another month: nothing to say

    # The next sweep adds to the new file, never to the damaged one.
    contents |= make_days(warm, [date(2026, 11, 6)])
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    assert archive.read_bytes() == damaged
    assert listing(warm / "archive") == {"2026-11.md.gz", "2026-11.1.md.gz"}
    assert retention.read_archived_day(warm, date(2026, 11, 6)) == contents[day_name(date(2026, 11, 6))].decode()


def test_a_member_that_is_not_memds_counts_as_damage(warm: Path) -> None:
    make_days(warm, [date(2026, 9, 1)])
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    archive = warm / "archive" / "2026-09.md.gz"
    with archive.open("ab") as f:  # someone appended their own notes with `gzip >>`
        f.write(gzip.compress(b"my own notes\n"))
    before = archive.read_bytes()
    make_days(warm, [date(2026, 9, 2)])

    outcome = retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))

    assert archive.read_bytes() == before
    assert (warm / "archive" / "2026-09.1.md.gz").exists()
    assert "not a memd day" in outcome.warnings[0]


def test_a_day_already_in_a_later_archive_file_is_not_added_twice(warm: Path) -> None:
    make_days(warm, [date(2026, 8, 1)])
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    damage_member(warm / "archive" / "2026-08.md.gz", 0)
    contents = make_days(warm, [date(2026, 8, 2)])
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    second = warm / "archive" / "2026-08.1.md.gz"
    before = second.read_bytes()
    (warm / day_name(date(2026, 8, 2))).write_bytes(contents[day_name(date(2026, 8, 2))])  # a crash before unlink

    outcome = retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))

    assert outcome.removed == [day_name(date(2026, 8, 2))]
    assert second.read_bytes() == before
    assert listing(warm / "archive") == {"2026-08.md.gz", "2026-08.1.md.gz"}


def test_an_archive_is_replaced_whole_and_leaves_no_temporary_file(warm: Path) -> None:
    make_days(warm, [date(2026, 7, 1)])
    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))
    archive = warm / "archive" / "2026-07.md.gz"
    inode = archive.stat().st_ino
    stale = warm / "archive" / f".2026-07.md.gz{fsio.TEMP_MARKER}1-dead"  # a sweep that died before its rename
    stale.write_bytes(b"half")
    make_days(warm, [date(2026, 7, 2)])

    retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION))

    assert archive.stat().st_ino != inode  # a new file renamed into place, not an append to the old one
    assert listing(warm / "archive") == {"2026-07.md.gz"}
    assert gzip.decompress(archive.read_bytes()).count(b"memd-archive: ") == 2


def bomb(path: Path, megabytes: int) -> None:
    """`megabytes` MiB of zeros in one gzip member, written in pieces (never held whole in memory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * (1 << 20)
    with path.open("wb") as f:
        for _ in range(megabytes):
            f.write(z.compress(zeros))
        f.write(z.flush())


def test_reading_an_archive_is_capped_so_a_gzip_bomb_is_a_clear_error(warm: Path) -> None:
    bomb(warm / "archive" / "2026-01.md.gz", 256)  # ~250 KiB on disk, 256 MiB decompressed
    cap = 4 << 20

    tracemalloc.start()
    try:
        with pytest.raises(ArchiveTooLarge, match="archive_max_bytes") as raised:
            retention.read_archived_day(warm, date(2026, 1, 5), max_bytes=cap)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert peak < 4 * cap, f"reading the bomb took {peak} bytes"
    assert raised.value.code == -32005
    assert raised.value.data == {"file": "warm/archive/2026-01.md.gz", "archive_max_bytes": cap}


def test_a_bomb_in_the_month_blocks_neither_the_sweep_nor_the_other_files(warm: Path) -> None:
    bomb(warm / "archive" / "2026-02.md.gz", 64)
    contents = make_days(warm, [date(2026, 2, 1)])

    outcome = retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION), max_bytes=1 << 20)

    assert outcome.removed == [day_name(date(2026, 2, 1))]
    assert "archive_max_bytes" in outcome.warnings[0]
    assert retention.read_archived_day(warm, date(2026, 2, 1), max_bytes=1 << 20) == contents["2026-02-01.md"].decode()
    with pytest.raises(ArchiveTooLarge):  # not found elsewhere, and one file could not be read
        retention.read_archived_day(warm, date(2026, 2, 2), max_bytes=1 << 20)


def test_an_archive_never_grows_past_the_cap_and_a_day_bigger_than_the_cap_stays(warm: Path) -> None:
    days = [date(2026, 3, d) for d in range(1, 5)]
    warm.mkdir(parents=True, exist_ok=True)
    contents = {}
    for day in days:
        data = (entry_text(day, "work") + os.urandom(300).hex() + "\n").encode()  # ~800 bytes each
        (warm / day_name(day)).write_bytes(data)
        contents[day_name(day)] = data
    huge = date(2026, 3, 9)
    (warm / day_name(huge)).write_bytes(b"x" * 5000)

    outcome = retention.archive_expired(retention.plan_sweep(warm, TODAY, RETENTION), max_bytes=2000)

    assert outcome.removed == [day_name(d) for d in days]
    assert list(outcome.kept) == [day_name(huge)] and "archive_max_bytes" in outcome.kept[day_name(huge)]
    assert (warm / day_name(huge)).read_bytes() == b"x" * 5000
    files = sorted(listing(warm / "archive"))
    assert files == ["2026-03.1.md.gz", "2026-03.md.gz"]
    for name in files:
        assert len(gzip.decompress((warm / "archive" / name).read_bytes())) <= 2000
    for day in days:
        assert retention.read_archived_day(warm, day, max_bytes=2000) == contents[day_name(day)].decode()


@pytest.mark.parametrize("value", [1000, (1 << 30) + 1, -1])
def test_the_archive_cap_is_range_checked_in_the_config_globally_and_per_workspace(value: int) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(
            {
                "warm": {"archive_max_bytes": value},
                "workspaces": {"w": {"path": "/w", "warm": {"archive_max_bytes": value}}},
            },
            {"HOME": "/home/ada"},
        )
    assert "warm.archive_max_bytes: must be between 1048576 (1 MiB) and 1073741824 (1 GiB)" in raised.value.errors
    assert any(e.startswith("workspaces.w.warm.archive_max_bytes:") for e in raised.value.errors)


def test_the_example_config_states_the_archive_cap_default() -> None:
    example = tomllib.loads((Path(__file__).parents[2] / "config.example.toml").read_text(encoding="utf-8"))

    assert example["warm"]["archive_max_bytes"] == WarmConfig().archive_max_bytes == DEFAULT_ARCHIVE_MAX_BYTES
    assert parse_config({"warm": example["warm"]}, {"HOME": "/home/ada", "TZ": "UTC"}).warm == WarmConfig()


# --- nothing leaves warm/ that git does not hold ---------------------------------------------------------------


def held_as_is(warm: Path, names: list[str], commit: str = "c0ffee" * 6 + "abcd") -> retention.Held:
    return retention.Held(commit, {name: retention.blob_id((warm / name).read_bytes()) for name in names})


@pytest.mark.parametrize("mode", ["delete", "archive"])
def test_only_days_git_holds_byte_for_byte_are_removed_the_others_are_kept_with_the_reason(
    warm: Path, mode: str
) -> None:
    held_day, changed, missing = date(2026, 10, 1), date(2026, 10, 2), date(2026, 10, 3)
    contents = make_days(warm, [held_day, changed, missing])
    held = held_as_is(warm, [day_name(held_day), day_name(changed)])
    (warm / day_name(changed)).write_bytes(contents[day_name(changed)] + b"appended after the commit\n")
    plan = retention.plan_sweep(warm, TODAY, RETENTION)

    run = retention.archive_expired if mode == "archive" else retention.delete_expired
    outcome = run(plan, held)

    assert outcome.removed == [day_name(held_day)]
    assert set(outcome.kept) == {day_name(changed), day_name(missing)}
    assert "differs from the snapshot at c0ffeec0ffee" in outcome.kept[day_name(changed)]
    assert "not in the snapshot" in outcome.kept[day_name(missing)]
    assert listing(warm) - {"archive"} == {day_name(changed), day_name(missing)}
    if mode == "archive":
        assert retention.read_archived_day(warm, held_day) == contents[day_name(held_day)].decode()
        assert retention.read_archived_day(warm, changed) is None


def test_without_what_git_holds_every_expired_day_goes_as_before(warm: Path) -> None:
    days = [date(2026, 10, 1), date(2026, 10, 2)]
    make_days(warm, days)

    outcome = retention.delete_expired(retention.plan_sweep(warm, TODAY, RETENTION), None)

    assert outcome.removed == [day_name(d) for d in days] and outcome.kept == {}


def test_the_blob_id_is_gits_for_sha1_and_sha256() -> None:
    assert retention.blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git hash-object /dev/null
    assert retention.blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert retention.blob_id(b"", 64) == "473a0f4c3be8a93681a267e3b1e9a7dcda1185436fe141f7749120a303721813"


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

    result: dict[str, Any] = asyncio.run(sweep.run(ws, dry_run=True))

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
        return await sweep.run(ws, dry_run=True), await sweep.run(ws, dry_run=False)

    dry, real = asyncio.run(both())

    expired = [day_name(today - timedelta(days=k)) for k in (40, 9, 7)]
    assert dry["expired"] == real["expired"] == real["removed"] == expired
    assert ws.last_sweep == real
    assert {day_name(today - timedelta(days=k)) for k in (6, 1)} | {"notes.md", day_name(today)} <= listing(warm)
    assert not set(real["removed"]) & listing(warm)
    logged = parse_day((warm / day_name(today)).read_text())
    assert [e.action for e in logged] == ["retention-sweep"]
    assert dict(logged[0].details) == {"mode": mode, "removed": ", ".join(real["removed"])}  # nothing proposed
    if mode == "archive":
        for name in real["removed"]:
            day = date.fromisoformat(name.removesuffix(".md"))
            assert asyncio.run(ws.read_day(day)) == (parse_day(contents[name].decode()), "archive")


# --- a workspace adopted with day files: sweeps only report until one is confirmed --------------------------------


def adopted_workspace(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, adopted_sweep: str = "report"
) -> Workspace:
    warm_config = WarmConfig(timezone="UTC", retention_days=RETENTION, adopted_sweep=adopted_sweep)  # type: ignore[arg-type]
    clock = FakeClock(datetime(2026, 11, 20, 12, 0, tzinfo=UTC))
    config = WorkspaceConfig(name="w", path=root, warm=warm_config)
    ws = Workspace(config, counter, clock, io, adoption_file=root.parent / "state" / "workspaces" / "w.json")
    ws.open()
    return ws


def test_a_workspace_that_had_day_files_before_memd_served_it_only_reports_until_a_sweep_is_confirmed(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    root = tmp_path / "ws"
    old = [TODAY - timedelta(days=k) for k in (30, 9)]
    make_days(root / "warm", old)  # written by another tool (agents after the article) before memd
    ws = adopted_workspace(root, counter, io)

    held = asyncio.run(sweep.run(ws, dry_run=False))

    assert held["held"] and held["removed"] == [] and held["expired"] == [day_name(d) for d in old]
    assert "memd sweep w --confirm" in held["confirm"] and "adopted_sweep" in held["reason"]
    assert listing(root / "warm") >= {day_name(d) for d in old}
    logged = parse_day((root / "warm" / day_name(TODAY)).read_text())
    assert [e.action for e in logged] == ["retention-sweep"] and dict(logged[0].details)["held"]
    assert ws.last_sweep == held

    ws = adopted_workspace(root, counter, io)  # a restart: the record in the state dir says it is still pending
    assert asyncio.run(sweep.run(ws, dry_run=False))["held"]
    assert asyncio.run(sweep.run(ws, dry_run=True))["expired"] == held["expired"]  # a dry run is a dry run

    confirmed = asyncio.run(sweep.run(ws, dry_run=False, confirm=True))

    assert confirmed["removed"] == [day_name(d) for d in old] and "held" not in confirmed
    make_days(root / "warm", [TODAY - timedelta(days=20)])
    ws = adopted_workspace(root, counter, io)  # confirmed for good
    assert asyncio.run(sweep.run(ws, dry_run=False))["removed"] == [day_name(TODAY - timedelta(days=20))]


class CountingChooser:
    """An LLM promoter that only counts the days it was asked about."""

    name = "openai"

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def choose(self, ws: Any, day: str, entries: Any, limit: int) -> list[Any]:
        self.asked.append(day)
        return []


def test_a_sweep_held_for_an_adopted_workspace_spends_no_llm_tokens_on_days_it_keeps(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    root = tmp_path / "ws"
    old = [TODAY - timedelta(days=k) for k in (30, 9)]
    make_days(root / "warm", old)
    chooser = CountingChooser()
    warm_config = WarmConfig(timezone="UTC", retention_days=RETENTION)
    clock = FakeClock(datetime(2026, 11, 20, 12, 0, tzinfo=UTC))
    config = WorkspaceConfig(name="w", path=root, warm=warm_config)
    state = root.parent / "state" / "workspaces" / "w.json"
    ws = Workspace(config, counter, clock, io, adoption_file=state, promoter=lambda: chooser)
    ws.open()

    held = asyncio.run(sweep.run(ws, dry_run=False))

    assert held["held"] and chooser.asked == []  # the scheduled sweep of a held workspace asks no LLM
    asyncio.run(sweep.run(ws, dry_run=False, confirm=True))
    assert chooser.asked == [d.isoformat() for d in old]  # the sweep that removes them does


def test_a_workspace_memd_made_or_served_before_sweeps_at_once(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    fresh = adopted_workspace(tmp_path / "fresh", counter, io)
    make_days(fresh.root / "warm", [TODAY - timedelta(days=30)])
    assert asyncio.run(sweep.run(fresh, dry_run=False))["removed"] == [day_name(TODAY - timedelta(days=30))]

    served = tmp_path / "served"  # days and a hot file memd wrote before adoption records existed
    make_days(served / "warm", [TODAY - timedelta(days=30)])
    (served / "hot").mkdir()
    (served / "hot" / "context.json").write_text('{"version": 1, "task": "t"}', encoding="utf-8")
    ws = adopted_workspace(served, counter, io)
    assert ws.adoption is not None and not ws.adoption.adopted
    assert asyncio.run(sweep.run(ws, dry_run=False))["removed"] == [day_name(TODAY - timedelta(days=30))]


def test_adopted_sweep_run_turns_the_hold_off(tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor) -> None:
    root = tmp_path / "ws"
    make_days(root / "warm", [TODAY - timedelta(days=30)])
    ws = adopted_workspace(root, counter, io, adopted_sweep="run")

    assert ws.adoption is not None and ws.adoption.pending
    assert asyncio.run(sweep.run(ws, dry_run=False))["removed"] == [day_name(TODAY - timedelta(days=30))]


def test_an_unreadable_adoption_record_keeps_the_days(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    root = tmp_path / "ws"
    make_days(root / "warm", [TODAY - timedelta(days=30)])
    record = tmp_path / "state" / "workspaces" / "w.json"
    record.parent.mkdir(parents=True)
    record.write_text("{not json", encoding="utf-8")

    ws = adopted_workspace(root, counter, io)

    assert asyncio.run(sweep.run(ws, dry_run=False))["held"]


# --- a real sweep through a Workspace whose change sink commits first (snapshots on) ------------------------------


class PersonAfterTheCommit:
    """The daemon's change sink (a Snapshotter behind a Fanout), and a person who edits one expired day right
    after memd committed it and before it is removed: what git holds no longer matches what is on disk."""

    def __init__(self, snapshots: Any, edit: Path | None) -> None:
        from memd.changes import Fanout

        self.fanout = Fanout(snapshots, [])
        self.edit = edit
        self.whys: list[str] = []

    def registered(self, ws: Workspace) -> None:
        self.fanout.registered(ws)

    def changed(self, ws: Workspace, tiers: frozenset[str], origin: str) -> None:
        self.fanout.changed(ws, tiers, origin)

    async def before_destructive(self, ws: Workspace, why: str, days: Sequence[str] = ()) -> Any:
        self.whys.append(why)
        held = await self.fanout.before_destructive(ws, why, days)
        if self.edit is not None:
            with self.edit.open("a", encoding="utf-8") as f:
                f.write("- a line a person added after memd's commit\n")
        return held


def committed_workspace(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, mode: str, edit_day: date | None
) -> tuple[Workspace, PersonAfterTheCommit]:
    from memd.config import SnapshotConfig
    from memd.snapshots import Snapshotter

    snapshots = Snapshotter(SnapshotConfig(settle_seconds=60), root.parent / "state", io)
    sink = PersonAfterTheCommit(snapshots, root / "warm" / day_name(edit_day) if edit_day else None)
    warm_config = WarmConfig(timezone="UTC", retention_days=RETENTION, mode=mode)  # type: ignore[arg-type]
    clock = FakeClock(datetime(2026, 11, 20, 12, 0, tzinfo=UTC))
    ws = Workspace(WorkspaceConfig(name="w", path=root, warm=warm_config), counter, clock, io, sink=sink)
    ws.open()
    return ws, sink


@pytest.mark.parametrize("mode", ["delete", "archive"])
def test_a_real_sweep_reports_exactly_what_it_did_and_keeps_a_day_edited_after_its_commit(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, mode: str
) -> None:
    import subprocess

    root = tmp_path / "ws"
    edited, gone = TODAY - timedelta(days=20), TODAY - timedelta(days=30)
    make_days(root / "warm", [gone, edited, TODAY - timedelta(days=1)])
    ws, sink = committed_workspace(root, counter, io, mode, edited)

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert sink.whys == ["retention"]
    subjects = subprocess.run(
        ["git", "-C", str(root), "log", "--format=%s"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert any(s.startswith("memd: before retention") for s in subjects)
    kept = result.pop("kept")
    assert [k["day"] for k in kept] == [day_name(edited)] and "differs from the snapshot at" in kept[0]["reason"]
    assert {k: result[k] for k in ("workspace", "dry_run", "mode", "retention_days", "today", "at")} == {
        "workspace": "w",
        "dry_run": False,
        "mode": mode,
        "retention_days": RETENTION,
        "today": TODAY.isoformat(),
        "at": "2026-11-20T12:00:00+00:00",
    }
    assert result["expired"] == [day_name(gone), day_name(edited)]
    assert result["removed"] == [day_name(gone)]
    assert result["warnings"] == []
    assert (root / "warm" / day_name(edited)).exists() and not (root / "warm" / day_name(gone)).exists()
    assert ws.last_sweep is not None and ws.last_sweep["removed"] == [day_name(gone)]


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (OSError(5, "Input/output error", "warm/x.md"), "Input/output error (warm/x.md)"),
        (OSError(28, "No space left on device"), "No space left on device"),  # no file name: no empty "()"
    ],
    ids=["with a file name", "without"],
)
def test_a_sweep_stopped_by_the_disk_says_so(
    tmp_path: Path,
    counter: TokenCounter,
    io: ThreadPoolExecutor,
    monkeypatch: pytest.MonkeyPatch,
    error: OSError,
    said: str,
) -> None:
    root = tmp_path / "ws"
    make_days(root / "warm", [TODAY - timedelta(days=30)])
    ws = open_workspace(root, counter, io, datetime(2026, 11, 20, 12, 0, tzinfo=UTC), "UTC")

    def failing(*args: Any) -> Any:
        raise error

    monkeypatch.setattr(retention, "delete_expired", failing)

    from memd.errors import StorageError

    with pytest.raises(StorageError) as stopped:
        asyncio.run(sweep.run(ws, dry_run=False))

    assert stopped.value.message == f"retention sweep of 'w' stopped: {said}; files not yet removed stay in warm/"
    assert stopped.value.data == {"errno": error.errno}


def test_a_sweep_in_archive_mode_keeps_to_the_workspaces_archive_cap(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    root = tmp_path / "ws"
    small, huge = TODAY - timedelta(days=31), TODAY - timedelta(days=30)
    make_days(root / "warm", [small])
    (root / "warm" / day_name(huge)).write_bytes(b"x" * (MIB + 1))  # one byte over the smallest cap allowed
    warm_config = WarmConfig(timezone="UTC", retention_days=RETENTION, mode="archive", archive_max_bytes=MIB)
    clock = FakeClock(datetime(2026, 11, 20, 12, 0, tzinfo=UTC))
    ws = Workspace(WorkspaceConfig(name="w", path=root, warm=warm_config), counter, clock, io)
    ws.open()

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert result["removed"] == [day_name(small)]
    assert [k["day"] for k in result["kept"]] == [day_name(huge)]
    assert "archive_max_bytes" in result["kept"][0]["reason"]
    assert (root / "warm" / day_name(huge)).stat().st_size == MIB + 1


def an_expired_day_and_no_room_for_today(root: Path) -> date:
    """One expired day, and the path of today's day file taken by a directory: nothing can be logged today,
    everything else works. Returns the expired day."""
    old = TODAY - timedelta(days=30)
    make_days(root / "warm", [old])
    (root / "warm" / day_name(TODAY)).mkdir(parents=True)
    return old


def test_a_sweep_whose_log_line_cannot_be_written_still_removes_and_reports_why_the_line_is_missing(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    root = tmp_path / "ws"
    old = an_expired_day_and_no_room_for_today(root)
    ws = open_workspace(root, counter, io, datetime(2026, 11, 20, 12, 0, tzinfo=UTC), "UTC")

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert result["removed"] == [day_name(old)]
    assert day_name(TODAY) in result["log_error"]
    assert ws.last_sweep == result


def test_a_held_sweep_whose_log_line_cannot_be_written_reports_why_the_line_is_missing(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    root = tmp_path / "ws"
    old = an_expired_day_and_no_room_for_today(root)
    ws = adopted_workspace(root, counter, io)

    held = asyncio.run(sweep.run(ws, dry_run=False))

    assert held["held"] is True and held["removed"] == []
    assert day_name(TODAY) in held["log_error"]
    assert (root / "warm" / day_name(old)).exists()


def test_a_held_sweep_logs_what_it_kept_and_how_to_confirm_and_a_confirmation_is_logged(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="memd.sweep")
    root = tmp_path / "ws"
    old = [TODAY - timedelta(days=k) for k in (30, 9)]
    make_days(root / "warm", old)
    ws = adopted_workspace(root, counter, io)

    held = asyncio.run(sweep.run(ws, dry_run=False))

    how = "memd sweep w --confirm (retention.sweep with confirm: true)"
    assert held["confirm"] == how and "log_error" not in held
    today = parse_day((root / "warm" / day_name(TODAY)).read_text(encoding="utf-8"))
    sweep_entries = [e for e in today if e.action == "retention-sweep"]
    assert [(dict(e.details), e.result) for e in sweep_entries] == [
        (
            {"held": ", ".join(day_name(d) for d in old), "confirm": how},
            "held: 2 day file(s) kept until a sweep is confirmed",
        )
    ]

    caplog.clear()
    asyncio.run(sweep.run(ws, dry_run=False, confirm=True))

    assert [r.getMessage() for r in caplog.records if r.levelname == "INFO"] == [
        "workspace w: retention confirmed; sweeps of its adopted day files run from now on"
    ]


def test_a_confirmation_that_cannot_be_recorded_still_runs_this_sweep_and_says_why(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "ws"
    make_days(root / "warm", [TODAY - timedelta(days=30)])
    ws = adopted_workspace(root, counter, io)
    record = root.parent / "state" / "workspaces" / "w.json"
    record.unlink()
    record.mkdir()  # the record's path is now a directory: saving it fails

    result = asyncio.run(sweep.run(ws, dry_run=False, confirm=True))

    assert result["removed"] == [day_name(TODAY - timedelta(days=30))]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name == "memd.sweep"]
    assert len(warnings) == 1 and warnings[0].startswith("workspace w: could not record the confirmation: [Errno")


def test_a_real_sweep_proposes_what_an_expiring_day_marked_as_a_learning_and_logs_it_dry_runs_do_not(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    from memd.tiers.warm_format import WarmEntry, render_entry

    root = tmp_path / "ws"
    old = TODAY - timedelta(days=30)
    (root / "warm").mkdir(parents=True)
    learned = [
        WarmEntry("10:00:00", "found why the cache missed", (("learn", "true"),), "keys need the tenant id"),
        WarmEntry("11:00:00", "the nightly export timed out", (("learn", "true"),), "raise statement_timeout to 10m"),
    ]
    (root / "warm" / day_name(old)).write_text(
        f"# Activity Log {old.isoformat()}\n\n" + "".join(render_entry(e) for e in learned), encoding="utf-8"
    )
    ws = open_workspace(root, counter, io, datetime(2026, 11, 20, 12, 0, tzinfo=UTC), "UTC")
    proposals = root / "cold" / "PROPOSED.md"

    dry = asyncio.run(sweep.run(ws, dry_run=True))

    assert [p["text"] for p in dry["proposed"]] and not proposals.exists()  # listed, not written
    assert (root / "warm" / day_name(old)).exists()

    real = asyncio.run(sweep.run(ws, dry_run=False))

    ids = [p["id"] for p in real["proposed"]]
    assert len(ids) == 2 and real["removed"] == [day_name(old)] and real["kept"] == []
    assert all(i in proposals.read_text(encoding="utf-8") for i in ids)  # durable before the day went
    today = parse_day((root / "warm" / day_name(TODAY)).read_text(encoding="utf-8"))
    assert [(dict(e.details), e.result) for e in today if e.action == "retention-sweep"] == [
        ({"mode": "delete", "removed": day_name(old), "proposed": ", ".join(ids)}, "1 day file(s)")
    ]


def test_proposals_that_cannot_be_written_keep_every_expired_day_with_the_reason(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    from memd.tiers.warm_format import WarmEntry, render_entry

    root = tmp_path / "ws"
    learned_day, plain_day = TODAY - timedelta(days=30), TODAY - timedelta(days=29)
    make_days(root / "warm", [plain_day])
    learned = WarmEntry("10:00:00", "found why the cache missed", (("learn", "true"),), "keys need the tenant id")
    (root / "warm" / day_name(learned_day)).write_text(
        f"# Activity Log {learned_day.isoformat()}\n\n" + render_entry(learned), encoding="utf-8"
    )
    ws = open_workspace(root, counter, io, datetime(2026, 11, 20, 12, 0, tzinfo=UTC), "UTC")
    elsewhere = tmp_path / "elsewhere.md"
    elsewhere.write_text("", encoding="utf-8")
    (root / "cold" / "PROPOSED.md").symlink_to(elsewhere)  # memd never writes through a symlink

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert result["removed"] == []
    assert [k["day"] for k in result["kept"]] == [day_name(learned_day), day_name(plain_day)]
    assert all(k["reason"].startswith("its candidate learnings could not be written to cold/PROPOSED.md (")
               for k in result["kept"])  # fmt: skip
    assert (root / "warm" / day_name(learned_day)).exists() and (root / "warm" / day_name(plain_day)).exists()
    assert elsewhere.read_text(encoding="utf-8") == ""
    reason = result["kept"][0]["reason"]
    why = reason.removeprefix("its candidate learnings could not be written to cold/PROPOSED.md (").removesuffix(
        "); kept"
    )
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "memd.sweep"] == [
        ("ERROR", f"workspace w: proposals not written, expired days kept: {why}")
    ]


def _git_log(root: Path, *args: str) -> list[str]:
    import subprocess

    return subprocess.run(
        ["git", "-C", str(root), "log", "--format=%s", *args], capture_output=True, text=True, check=True
    ).stdout.splitlines()


def _git_show(root: Path, rev: str, path: str) -> bytes:
    import subprocess

    return subprocess.run(["git", "-C", str(root), "show", f"{rev}:{path}"], capture_output=True, check=True).stdout


def test_a_sweep_of_days_git_already_holds_commits_nothing_first_and_removes_them(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    root = tmp_path / "ws"
    expired = [TODAY - timedelta(days=30), TODAY - timedelta(days=20)]
    make_days(root / "warm", [*expired, TODAY - timedelta(days=1)])
    ws, sink = committed_workspace(root, counter, io, "delete", None)
    asyncio.run(sink.fanout.keeper.snapshot(ws, "written days ago"))  # type: ignore[union-attr]
    asyncio.run(ws.write(lambda draft: draft.log("work", (), "today's work, not committed yet")))
    before = _git_log(root)

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert result["removed"] == [day_name(d) for d in expired] and result["kept"] == []
    # No "before retention" commit (HEAD held every day already): today's work is committed by the next snapshot.
    assert _git_log(root) == before
    for day in expired:
        assert not (root / "warm" / day_name(day)).exists()
        assert _git_show(root, "HEAD", f"warm/{day_name(day)}").startswith(b"# Activity Log")


def test_a_sweep_of_a_day_changed_since_its_commit_commits_it_first_and_then_removes_it(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    root = tmp_path / "ws"
    changed, unchanged = TODAY - timedelta(days=30), TODAY - timedelta(days=20)
    make_days(root / "warm", [changed, unchanged, TODAY - timedelta(days=1)])
    ws, sink = committed_workspace(root, counter, io, "delete", None)
    asyncio.run(sink.fanout.keeper.snapshot(ws, "written days ago"))  # type: ignore[union-attr]
    with (root / "warm" / day_name(changed)).open("a", encoding="utf-8") as f:
        f.write("- a line another tool added since\n")
    edited = (root / "warm" / day_name(changed)).read_bytes()

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert result["removed"] == [day_name(changed), day_name(unchanged)] and result["kept"] == []
    assert _git_log(root, "-1")[0].startswith("memd: before retention")
    assert _git_show(root, "HEAD", f"warm/{day_name(changed)}") == edited


def test_a_sweep_of_days_git_holds_is_still_refused_while_a_merge_is_in_progress(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    from memd.errors import Unavailable

    root = tmp_path / "ws"
    expired = TODAY - timedelta(days=30)
    make_days(root / "warm", [expired, TODAY - timedelta(days=1)])
    ws, sink = committed_workspace(root, counter, io, "delete", None)
    keeper = sink.fanout.keeper
    asyncio.run(keeper.snapshot(ws, "written days ago"))  # type: ignore[union-attr]
    git_dir = keeper.repo_state(ws).repo.git_dir  # type: ignore[union-attr]
    (git_dir / "MERGE_HEAD").write_text(_git_log(root, "-1", "--format=%H")[0] + "\n")  # a person's merge, unfinished

    with pytest.raises(Unavailable, match="repo-unsafe: MERGE_HEAD"):
        asyncio.run(sweep.run(ws, dry_run=False))

    assert (root / "warm" / day_name(expired)).exists()
