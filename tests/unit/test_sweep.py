"""A workspace's retention sweep (memd.sweep) and its promotion: what the report says about every candidate, what
goes into cold/PROPOSED.md (never MEMORY.md), which backend chose, and what the sweep does when promotion is off.

Real workspaces on real files and an I/O thread; the day files are written as literal markdown (the oracle shares
no code with memd's renderer), and the expected proposals are literal values.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from clocks import FixedClock
from edits import note

from memd import sweep
from memd.config import WarmConfig, WorkspaceConfig
from memd.tiers.proposals_format import Proposal
from memd.tiers.warm_format import WarmEntry
from memd.tokens import TokenCounter
from memd.workspace import Workspace

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
OLD, OLDER = "2026-10-21", "2026-10-20"  # both past the 7-day window on 2026-11-20

FENCE = "`" * 3
LEARNED = f"""# Activity Log {{day}}

### 10:00:00 - found why the cache missed
{FENCE}
learn: true
{FENCE}
Result: keys need the tenant id
"""
DECIDED = f"""# Activity Log {{day}}

### 09:00:00 - decision: pin the parser to 2.3
{FENCE}
reason: 2.4 drops the line numbers
{FENCE}
"""
EMPTY = "# Activity Log {day}\n"


def entry(time: str, action: str, result: str = "") -> str:
    """One entry marked as a learning, as docs/format.md writes it."""
    return f"\n### {time} - {action}\n{FENCE}\nlearn: true\n{FENCE}\n" + (f"Result: {result}\n" if result else "")


def open_ws(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, promote_max_per_day: int = 3, chooser: Any = None
) -> Workspace:
    warm = WarmConfig(timezone="UTC", retention_days=7, promote_max_per_day=promote_max_per_day)
    ws = Workspace(WorkspaceConfig("w", root, warm=warm), counter, FixedClock(NOW), io, promoter=lambda: chooser)
    ws.open()
    return ws


def day(root: Path, name: str, text: str) -> None:
    (root / "warm").mkdir(parents=True, exist_ok=True)
    (root / "warm" / f"{name}.md").write_text(text.format(day=name), encoding="utf-8")


def memory(root: Path, text: str) -> None:
    (root / "cold").mkdir(parents=True, exist_ok=True)
    (root / "cold" / "MEMORY.md").write_text(text, encoding="utf-8")


def proposed_file(root: Path) -> str:
    path = root / "cold" / "PROPOSED.md"
    return path.read_text(encoding="utf-8") if path.exists() else ""


def without_ids(proposals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for p in proposals:
        assert re.fullmatch(r"p-[0-9a-f]{8}", p["id"]), p
    return [{k: v for k, v in p.items() if k != "id"} for p in proposals]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "w"


# --- the report --------------------------------------------------------------------------------------------------


def test_a_sweep_reports_each_proposal_in_full_and_what_it_did_not_propose_with_the_reason(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    day(root, OLDER, LEARNED)
    day(root, OLD, DECIDED + entry("11:00:00", "found why the cache missed", "keys need the tenant id"))
    ws = open_ws(root, counter, io)

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert result["promote_backend"] == "extractive" and "promote_fallback" not in result
    assert without_ids(result["proposed"]) == [
        {
            "category": "Learnings",
            "date": OLDER,
            "text": "found why the cache missed: keys need the tenant id",
            "from": {"day": OLDER, "time": "10:00:00", "action": "found why the cache missed"},
            "kind": "notable",
            "supersedes": None,
        },
        {
            "category": "Decisions",
            "date": OLD,
            "text": "pin the parser to 2.3 (because 2.4 drops the line numbers)",
            "from": {"day": OLD, "time": "09:00:00", "action": "decision: pin the parser to 2.3"},
            "kind": "decision",
            "supersedes": None,
        },
    ]
    (skipped,) = result["not_proposed"]
    assert {k: skipped[k] for k in ("day", "time", "action", "text")} == {
        "day": OLD,
        "time": "11:00:00",
        "action": "found why the cache missed",
        "text": "found why the cache missed: keys need the tenant id",
    }
    assert skipped["reason"]  # a duplicate of the one proposed from the day before
    text = proposed_file(root)
    assert all(p["id"] in text for p in result["proposed"])
    assert result["removed"] == [f"{OLDER}.md", f"{OLD}.md"]
    assert not (root / "cold" / "MEMORY.md").exists() or "tenant" not in (root / "cold" / "MEMORY.md").read_text()


def test_a_candidate_that_updates_a_learning_says_which_one_it_supersedes(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    memory(root, "# Long-term Memory\n\n## Decisions\n- [2026-10-01] pin the parser to 2.2 (because 2.3 was broken)\n")
    day(root, OLD, DECIDED)
    ws = open_ws(root, counter, io)
    before = (root / "cold" / "MEMORY.md").read_bytes()

    (proposal,) = asyncio.run(sweep.run(ws, dry_run=False))["proposed"]

    assert proposal["supersedes"] == {"date": "2026-10-01", "text": "pin the parser to 2.2 (because 2.3 was broken)"}
    assert (root / "cold" / "MEMORY.md").read_bytes() == before  # proposed, never written into MEMORY.md


def test_a_day_with_no_entries_is_passed_over_and_the_next_days_candidates_are_still_taken(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    day(root, OLDER, EMPTY)
    day(root, OLD, LEARNED)
    ws = open_ws(root, counter, io)

    result = asyncio.run(sweep.run(ws, dry_run=True))

    assert [p["from"]["day"] for p in result["proposed"]] == [OLD]


def test_what_is_already_proposed_stays_and_is_not_proposed_again(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    day(root, OLDER, LEARNED)
    ws = open_ws(root, counter, io)
    first = asyncio.run(sweep.run(ws, dry_run=False))["proposed"]
    day(root, OLD, LEARNED + entry("12:00:00", "the export needs 10 minutes"))

    second = asyncio.run(sweep.run(ws, dry_run=False))

    assert [p["text"] for p in second["proposed"]] == ["the export needs 10 minutes"]
    assert [s["text"] for s in second["not_proposed"]] == ["found why the cache missed: keys need the tenant id"]
    text = proposed_file(root)
    assert first[0]["id"] in text and second["proposed"][0]["id"] in text
    assert text.count("keys need the tenant id") == 1


def test_a_learning_written_in_the_same_batch_as_the_proposals_counts_as_already_known(
    root: Path, counter: TokenCounter
) -> None:
    day(root, OLD, LEARNED)
    with ThreadPoolExecutor(max_workers=1) as one_io:
        ws = open_ws(root, counter, one_io)

        async def go() -> dict[str, Any]:
            gate = threading.Event()
            one_io.submit(gate.wait)  # the I/O thread is busy: what is queued meanwhile goes in one batch
            first = asyncio.ensure_future(ws.write(note("in flight")))
            while ws.writer.in_flight is None:
                await asyncio.sleep(0.001)
            learned = asyncio.ensure_future(
                ws.write(lambda d: d.learn("Learnings", "found why the cache missed: keys need the tenant id"))
            )
            sweeping = asyncio.ensure_future(sweep.run(ws, dry_run=False))
            while ws.writer.pending < 2:
                await asyncio.sleep(0.001)
            gate.set()
            await first
            await learned
            return await sweeping

        result = asyncio.run(go())

    assert result["proposed"] == []
    assert [s["text"] for s in result["not_proposed"]] == ["found why the cache missed: keys need the tenant id"]
    assert proposed_file(root) == ""
    assert result["removed"] == [f"{OLD}.md"]


# --- promotion off, and the chooser ---------------------------------------------------------------------------------


def test_with_promotion_off_every_expired_day_goes_and_nothing_is_proposed(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    day(root, OLD, LEARNED)
    ws = open_ws(root, counter, io, promote_max_per_day=0)

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert {k: result[k] for k in ("proposed", "not_proposed", "promote_backend")} == {
        "proposed": [],
        "not_proposed": [],
        "promote_backend": "off",
    }
    assert "promote_fallback" not in result
    assert result["removed"] == [f"{OLD}.md"] and proposed_file(root) == ""


def test_a_cap_of_one_proposes_one_candidate_per_day(root: Path, counter: TokenCounter, io: ThreadPoolExecutor) -> None:
    day(root, OLD, DECIDED + entry("11:00:00", "the export needs 10 minutes"))
    ws = open_ws(root, counter, io, promote_max_per_day=1)

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert [p["text"] for p in result["proposed"]] == ["the export needs 10 minutes"]  # marked: first
    assert result["promote_backend"] == "extractive"
    assert [s["text"] for s in result["not_proposed"]] == ["pin the parser to 2.3 (because 2.4 drops the line numbers)"]


class Chooser:
    name = "fake-llm"

    def __init__(self, fail_on: str = "") -> None:
        self.fail_on = fail_on
        self.calls: list[tuple[Any, str, list[str], int]] = []

    async def choose(self, ws: Any, day: str, entries: Sequence[WarmEntry], limit: int) -> list[Proposal]:
        self.calls.append((ws, day, [e.action for e in entries], limit))
        if day == self.fail_on:
            raise RuntimeError("the endpoint is down")
        return [Proposal(f"p-{day}", "Chosen", day, f"chosen from {day}", day, "10:00:00", entries[0].action, "llm")]


def test_a_chooser_is_asked_per_day_with_the_days_entries_and_the_cap_and_its_choice_is_proposed(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    day(root, OLDER, LEARNED)
    day(root, OLD, DECIDED)
    chooser = Chooser()
    ws = open_ws(root, counter, io, promote_max_per_day=2, chooser=chooser)

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert chooser.calls == [
        (ws, OLDER, ["found why the cache missed"], 2),
        (ws, OLD, ["decision: pin the parser to 2.3"], 2),
    ]
    assert result["promote_backend"] == "fake-llm" and "promote_fallback" not in result
    assert [p["text"] for p in result["proposed"]] == [f"chosen from {OLDER}", f"chosen from {OLD}"]


def test_a_chooser_that_fails_on_a_day_falls_back_to_the_extractive_rules_for_it_and_says_so(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    day(root, OLDER, LEARNED)
    day(root, OLD, DECIDED)
    ws = open_ws(root, counter, io, chooser=Chooser(fail_on=OLD))

    result = asyncio.run(sweep.run(ws, dry_run=False))

    assert result["promote_fallback"] == f"{OLD}: the endpoint is down"
    assert [p["text"] for p in result["proposed"]] == [
        f"chosen from {OLDER}",
        "pin the parser to 2.3 (because 2.4 drops the line numbers)",
    ]
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "memd.sweep"] == [
        (logging.WARNING, "workspace w: promotion by fake-llm failed, extractive instead: the endpoint is down")
    ]


def test_a_held_sweep_asks_no_chooser(root: Path, counter: TokenCounter, io: ThreadPoolExecutor) -> None:
    day(root, OLD, LEARNED)
    chooser = Chooser()
    warm = WarmConfig(timezone="UTC", retention_days=7)
    config = WorkspaceConfig("w", root, warm=warm)
    ws = Workspace(config, counter, FixedClock(NOW), io, promoter=lambda: chooser, adoption_file=root.parent / "w.json")
    ws.open()

    held = asyncio.run(sweep.run(ws, dry_run=False))

    assert held["held"] is True and chooser.calls == []
    assert held["promote_backend"] == "extractive"
    assert [p["text"] for p in held["proposed"]] == ["found why the cache missed: keys need the tenant id"]
