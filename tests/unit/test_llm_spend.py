"""The daily LLM token ledger (memd.llm_spend): a cap per workspace and day, kept across restarts in a private
file of the state directory; a file that cannot be read or written costs a warning, never a crash."""

from __future__ import annotations

import json
import logging
import stat
from pathlib import Path

import pytest

from memd.llm_spend import SpendLedger

DAY, NEXT = "2026-03-21", "2026-03-22"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "llm-spend.json"


def test_a_charge_counts_against_todays_cap_and_what_is_left_never_goes_below_zero(path: Path) -> None:
    ledger = SpendLedger(path, max_tokens_per_day=1000)

    ledger.charge("alpha", DAY, 600, {})

    assert ledger.left("alpha", DAY) == 400
    assert ledger.left("beta", DAY) == 1000  # one cap per workspace
    assert ledger.would_exceed("alpha", DAY, 400) is False  # exactly at the cap is allowed
    assert ledger.would_exceed("alpha", DAY, 401) is True
    ledger.charge("alpha", DAY, 600, {})
    assert ledger.left("alpha", DAY) == 0


def test_a_new_day_starts_at_zero_but_the_running_total_goes_on(path: Path) -> None:
    ledger = SpendLedger(path, max_tokens_per_day=1000)
    ledger.charge("alpha", DAY, 900, {"aws": 1})

    assert ledger.left("alpha", NEXT) == 1000
    ledger.charge("alpha", NEXT, 50, {"aws": 2, "jwt": 1})

    spend = ledger.get("alpha")
    assert spend is not None
    assert (spend.day, spend.tokens_today, spend.tokens) == (NEXT, 50, 950)
    assert spend.redactions == {"aws": 3, "jwt": 1}


def test_todays_spend_survives_a_restart_in_a_private_file(path: Path) -> None:
    SpendLedger(path, max_tokens_per_day=1000).charge("alpha", DAY, 700, {})

    again = SpendLedger(path, max_tokens_per_day=1000)

    assert again.left("alpha", DAY) == 300
    assert json.loads(path.read_bytes()) == {"workspaces": {"alpha": {"day": DAY, "tokens": 700}}}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_ledger_without_a_file_counts_in_memory_only() -> None:
    ledger = SpendLedger(None, max_tokens_per_day=10)
    ledger.charge("alpha", DAY, 4, {})

    assert ledger.left("alpha", DAY) == 6


@pytest.mark.parametrize(
    "content",
    [b"not json", b'{"workspaces": {"alpha": {"day": "2026-03-21"}}}', b'{"workspaces": {"alpha": {"tokens": "x"}}}'],
    ids=["not json", "no tokens", "tokens not a number"],
)
def test_an_unreadable_ledger_counts_from_zero_with_a_warning(
    path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(content)

    ledger = SpendLedger(path, max_tokens_per_day=100)

    assert ledger.left("alpha", DAY) == 100
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(f"could not read LLM spend from {path} (")
    assert warnings[0].endswith("); counting from zero today")
    if content == b"not json":
        assert warnings == [
            f"could not read LLM spend from {path} (Expecting value: line 1 column 1 (char 0)); "
            "counting from zero today"
        ]


def test_a_missing_ledger_is_a_first_start_without_a_warning(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert SpendLedger(path, max_tokens_per_day=100).left("alpha", DAY) == 100
    assert caplog.records == []


def test_a_ledger_that_cannot_be_saved_still_counts_and_warns(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path.parent.mkdir(parents=True)
    path.mkdir()  # the file's name is taken by a directory

    ledger = SpendLedger(path, max_tokens_per_day=100)
    ledger.charge("alpha", DAY, 30, {})

    assert ledger.left("alpha", DAY) == 70
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # reading it, then saving it
    assert warnings[1].startswith(f"could not save LLM spend to {path}: [Errno ")
