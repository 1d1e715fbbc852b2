"""Retention (memd.retention) when the warm directory changes under a sweep: days removed, replaced by a symlink
or edited between the plan and the unlink, months with nothing to archive, archives that warn, git's blob ids.

Contract 5: a sweep deletes only what it planned and git holds byte for byte; a day someone touched meanwhile
stays (with the reason) or is left to whoever removed it, and the other days still go. No daemon, real files.
"""

from __future__ import annotations

import hashlib
import logging
import os
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from memd import archive, retention
from memd.retention import Held, SweepPlan

TODAY = date(2026, 11, 20)
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def day(name: str, text: str = "work") -> bytes:
    return f"# Activity Log {name[:10]}\n\n### 10:00:00 - {text}\n\n".encode()


def warm_with(tmp_path: Path, names: list[str]) -> Path:
    warm = tmp_path / "warm"
    warm.mkdir()
    for name in names:
        (warm / name).write_bytes(day(name))
    return warm


def held(warm: Path, names: list[str], hex_digits: int = 40) -> Held:
    return Held(COMMIT, {n: retention.blob_id((warm / n).read_bytes(), hex_digits) for n in names})


def test_blob_ids_are_gits_for_sha1_and_sha256_repositories() -> None:
    assert retention.blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"  # git hash-object
    assert retention.blob_id(b"hello\n", 64) == hashlib.sha256(b"blob 6\0hello\n").hexdigest()


def test_a_sha256_repository_holds_the_day_by_its_64_digit_id(tmp_path: Path) -> None:
    warm = warm_with(tmp_path, ["2020-01-01.md"])

    assert held(warm, ["2020-01-01.md"], 64).why_not("2020-01-01.md", day("2020-01-01.md")) is None


def test_why_a_day_stays_names_the_commit_by_twelve_digits() -> None:
    h = Held(COMMIT, {"2020-01-01.md": retention.blob_id(b"other")})

    assert h.why_not("2020-01-02.md", b"x") == "not in the snapshot at 0123456789ab; kept until a snapshot holds it"
    assert h.why_not("2020-01-01.md", b"x") == (
        "differs from the snapshot at 0123456789ab; kept until a snapshot holds these exact bytes"
    )


def test_a_warm_directory_that_is_a_symlink_plans_nothing(tmp_path: Path) -> None:
    warm_with(tmp_path, ["2020-01-01.md"])
    (tmp_path / "link").symlink_to(tmp_path / "warm")

    assert retention.plan_sweep(tmp_path / "link", TODAY, 7) == SweepPlan(tmp_path / "link", ())


@pytest.mark.parametrize("with_held", [False, True])
def test_a_day_removed_by_someone_else_after_planning_is_skipped_and_the_next_days_still_go(
    tmp_path: Path, with_held: bool
) -> None:
    names = ["2020-01-01.md", "2020-01-02.md"]
    warm = warm_with(tmp_path, names)
    what_git_holds = held(warm, names) if with_held else None
    plan = retention.plan_sweep(warm, TODAY, 7)
    (warm / names[0]).unlink()

    outcome = retention.delete_expired(plan, what_git_holds)

    assert (outcome.removed, outcome.kept) == ([names[1]], {})
    assert os.listdir(warm) == []


@pytest.mark.parametrize("mode", ["delete", "archive"])
def test_a_day_replaced_by_a_symlink_after_planning_is_neither_followed_nor_removed(tmp_path: Path, mode: str) -> None:
    names = ["2020-01-01.md", "2020-01-02.md"]
    warm = warm_with(tmp_path, names)
    what_git_holds = held(warm, names)
    plan = retention.plan_sweep(warm, TODAY, 7)
    (tmp_path / "elsewhere.md").write_bytes(day(names[0]))
    (warm / names[0]).unlink()
    (warm / names[0]).symlink_to(tmp_path / "elsewhere.md")

    sweep = retention.delete_expired if mode == "delete" else retention.archive_expired
    outcome = sweep(plan, what_git_holds)

    assert (outcome.removed, outcome.kept) == ([names[1]], {})
    assert (warm / names[0]).is_symlink()
    assert (tmp_path / "elsewhere.md").read_bytes() == day(names[0])


def test_an_archived_day_removed_or_edited_before_its_unlink_is_left_or_kept_and_the_others_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["2020-01-01.md", "2020-01-02.md", "2020-01-03.md"]
    warm = warm_with(tmp_path, names)
    plan = retention.plan_sweep(warm, TODAY, 7)
    real_add = archive.add_to_month

    def meanwhile(*args: Any) -> list[str]:
        warnings = real_add(*args)
        (warm / names[0]).unlink()  # someone removed it
        with open(warm / names[1], "ab") as f:  # someone appended an entry to it
            f.write(b"### 11:00:00 - late\n\n")
        return warnings

    monkeypatch.setattr(archive, "add_to_month", meanwhile)

    outcome = retention.archive_expired(plan, held(warm, names))

    assert outcome.removed == [names[2]]
    assert outcome.kept == {names[1]: "changed during the sweep; kept for the next one"}
    assert sorted(os.listdir(warm)) == ["2020-01-02.md", "archive"]


def test_a_month_with_nothing_to_archive_does_not_stop_the_next_month(tmp_path: Path) -> None:
    names = ["2020-01-01.md", "2020-02-01.md"]
    warm = warm_with(tmp_path, names)
    plan = retention.plan_sweep(warm, TODAY, 7)

    outcome = retention.archive_expired(plan, held(warm, names[1:]))

    assert outcome.removed == ["2020-02-01.md"]
    assert list(outcome.kept) == ["2020-01-01.md"]


@pytest.mark.parametrize("over", [0, 1])
def test_the_archive_cap_counts_the_marker_line_and_a_day_exactly_at_it_is_archived(tmp_path: Path, over: int) -> None:
    name = "2020-01-01.md"
    warm = warm_with(tmp_path, [name])
    size = archive.plain_size(name, day(name))
    assert size > len(day(name)) + len(name)  # the marker line names the day and carries its hash

    outcome = retention.archive_expired(retention.plan_sweep(warm, TODAY, 7), None, max_bytes=size - over)

    if over:
        assert (outcome.removed, list(outcome.kept)) == ([], [name])
        assert outcome.kept[name] == f"larger than warm.archive_max_bytes ({size - 1} bytes); kept in warm/"
    else:
        assert (outcome.removed, outcome.kept) == ([name], {})


def test_every_months_archive_warnings_are_reported_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    names = ["2020-01-01.md", "2020-02-01.md"]
    warm = warm_with(tmp_path, names)
    (warm / "archive" / "2020-01.md.gz").mkdir(parents=True)  # not a regular file: left alone, with a warning
    plan = retention.plan_sweep(warm, TODAY, 7)

    with caplog.at_level(logging.WARNING, logger="memd.retention"):
        outcome = retention.archive_expired(plan, None)

    assert outcome.removed == names
    assert len(outcome.warnings) == 1 and "is not a regular file" in outcome.warnings[0]
    assert [r.getMessage() for r in caplog.records] == [f"{warm}: {outcome.warnings[0]}"]


# --- the adoption record: day files memd found, swept only once a person confirmed ------------------------------


def test_the_adoption_record_round_trips_privately_and_a_confirmation_keeps_what_was_found(tmp_path: Path) -> None:
    path = tmp_path / "state" / "adoption" / "alpha.json"
    found = retention.Adoption(True, "2026-11-01T10:00:00+00:00", 12)

    retention.save_adoption(path, found)
    confirmed = found.confirmed("2026-11-02T09:00:00+00:00")
    loaded = retention.load_adoption(path)

    assert loaded == found and loaded.pending is True
    assert confirmed == retention.Adoption(True, "2026-11-01T10:00:00+00:00", 12, "2026-11-02T09:00:00+00:00")
    assert confirmed.pending is False
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    retention.save_adoption(path, confirmed)
    assert retention.load_adoption(path) == confirmed
    assert path.read_text() == (  # a record a person can read with cat
        "{\n"
        '  "adopted": true,\n'
        '  "first_served": "2026-11-01T10:00:00+00:00",\n'
        '  "day_files": 12,\n'
        '  "confirmed_at": "2026-11-02T09:00:00+00:00"\n'
        "}\n"
    )


def test_a_record_without_day_files_counts_none_and_no_record_means_never_served(tmp_path: Path) -> None:
    path = tmp_path / "alpha.json"
    path.write_text('{"adopted": false, "first_served": "2026-11-01T10:00:00+00:00"}')

    assert retention.load_adoption(path) == retention.Adoption(False, "2026-11-01T10:00:00+00:00", 0, "")
    assert retention.load_adoption(tmp_path / "missing.json") is None


def test_an_unreadable_record_keeps_the_days_and_is_logged_with_its_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "alpha.json"
    path.write_text("{not json")

    with caplog.at_level(logging.WARNING, logger="memd.retention"):
        outcome = retention.load_adoption(path)

    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"adoption record {path} is unreadable (Expecting property name")  # the parser's reason
    assert outcome == retention.Adoption(True, "", 0)  # the safe reading: a sweep only reports, the days stay
