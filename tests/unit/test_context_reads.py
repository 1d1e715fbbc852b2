"""Specification of reads that cost what they return (memd.context with the warm store's parsed entries): a huge
day gives the newest entries within budget, looking at only those; each entry is rendered and counted once; and
`warm.recent` pages return every entry exactly once."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from clocks import START, FixedClock

from memd import context
from memd.config import BudgetConfig, WorkspaceConfig
from memd.context import MAX_PASSED_OVER, Position, build_context, recent_page, recent_warm, render_warm
from memd.tiers import warm_format
from memd.tiers.warm_format import WarmEntry, day_header, render_entry
from memd.tokens import TokenCounter
from memd.workspace import Workspace

DAY_ENTRIES = 5_000


def huge_day(path: Path, day: date, entries: int = DAY_ENTRIES) -> None:
    path.mkdir(parents=True, exist_ok=True)
    parts = [day_header(day, "UTC+00:00, UTC")]
    parts += [
        render_entry(WarmEntry(f"{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}", f"entry {i}", (("n", str(i)),)))
        for i in range(entries)
    ]
    (path / warm_format.day_filename(day)).write_text("".join(parts), encoding="utf-8")


@pytest.fixture
def ws(tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor) -> Workspace:
    huge_day(tmp_path / "alpha" / "warm", START.date())
    config = WorkspaceConfig("alpha", tmp_path / "alpha", budget=BudgetConfig(warm=2_000))
    workspace = Workspace(config, counter, FixedClock(START), io)
    workspace.open()
    asyncio.run(context.load_recent(workspace, 3))
    return workspace


def log(ws: Workspace, *actions: str) -> None:
    async def go() -> None:
        for action in actions:
            await ws.write(lambda d, a=action: d.log(a))

    asyncio.run(go())


@pytest.fixture
def rendered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[WarmEntry]]:
    """Every warm entry rendered from now on."""
    seen: list[WarmEntry] = []
    original = warm_format.render_entry
    monkeypatch.setattr(warm_format, "render_entry", lambda e: seen.append(e) or original(e))
    yield seen


def test_a_huge_day_gives_its_newest_entries_within_the_budget(ws: Workspace, counter: TokenCounter) -> None:
    result = build_context(ws, None)

    included = result["included"]["warm"]
    text = result["text"]
    assert 0 < included < DAY_ENTRIES
    assert result["omitted"]["warm"] == DAY_ENTRIES - included
    assert result["usage"]["warm"]["tokens"] <= 2_000
    newest = [f"entry {i}" for i in range(DAY_ENTRIES - 1, DAY_ENTRIES - 1 - included, -1)]
    assert [text.index(f"- {a}\n") for a in newest] == sorted(text.index(f"- {a}\n") for a in newest)
    assert f"- entry {DAY_ENTRIES - 1 - included}\n" not in text
    assert "older activity entries omitted to fit the warm budget" in text


def test_the_warm_usage_is_the_count_of_the_warm_text(ws: Workspace, counter: TokenCounter) -> None:
    for budget in (0, 7, 150, 2_000, 20_000):
        section = render_warm(recent_warm(ws, 3), counter, budget, ws.warm.piece)

        assert section.usage.tokens == counter.count(section.text) <= budget


def test_assembling_looks_only_at_what_it_returns_and_a_few_entries_past_it(
    ws: Workspace, counter: TokenCounter
) -> None:
    looked: list[int] = []

    def piece(day: date, index: int, entry: WarmEntry) -> tuple[str, int]:
        looked.append(index)
        return ws.warm.piece(day, index, entry)

    days = recent_warm(ws, 3)
    section = render_warm(days, counter, 2_000, piece)

    kept = len(days[0][1])  # the day's newest entries (warm_parse.DAY_WINDOW), the rest let go
    assert kept + ws.warm.first_kept(days[0][0]) == DAY_ENTRIES
    assert len(looked) <= section.items + MAX_PASSED_OVER + 1
    assert min(looked) >= kept - section.items - MAX_PASSED_OVER - 1


def test_an_entry_too_big_for_what_is_left_is_passed_over_for_smaller_older_ones(counter: TokenCounter) -> None:
    day = date(2024, 3, 15)
    entries = [WarmEntry("09:00:00", f"small {i}") for i in range(3)] + [WarmEntry("10:00:00", "huge " * 400)]

    section = render_warm([(day, entries)], counter, 60)

    assert "huge" not in section.text and "small 2" in section.text
    assert (section.items + section.omitted) == 4


def test_each_entry_is_rendered_and_counted_once_across_reads(ws: Workspace, rendered: list[WarmEntry]) -> None:
    first = build_context(ws, None)
    assert len(rendered) >= first["included"]["warm"]
    rendered.clear()

    build_context(ws, None)
    assert rendered == []

    log(ws, "one more")
    rendered.clear()
    again = build_context(ws, None)

    assert [e.action for e in rendered] == ["one more"]
    assert "- one more\n" in again["text"]


# --- warm.recent pages -------------------------------------------------------------------------------------------


def pages(ws: Workspace, days: int, limit: int, between: Any = None) -> list[list[tuple[date, list[WarmEntry]]]]:
    out = []
    position: Position | None = None
    while True:
        page, position = asyncio.run(recent_page(ws, days, limit, position))
        assert sum(len(entries) for _, entries in page) <= limit
        out.append(page)
        if position is None:
            return out
        if between is not None:
            between()


def flat(all_pages: list[list[tuple[date, list[WarmEntry]]]]) -> list[tuple[date, str]]:
    """Newest first, as the pages come."""
    return [(day, e.action) for page in all_pages for day, entries in page for e in reversed(entries)]


def test_pages_return_every_entry_exactly_once_newest_first(ws: Workspace) -> None:
    got = flat(pages(ws, 1, 700))

    assert got == [(START.date(), f"entry {i}") for i in range(DAY_ENTRIES - 1, -1, -1)]


def test_pages_return_every_entry_once_while_entries_are_appended_and_across_days(ws: Workspace) -> None:
    clock = ws.clock
    assert isinstance(clock, FixedClock)
    clock.current = START + timedelta(days=1)
    log(ws, *(f"next day {i}" for i in range(5)))
    counter = iter(range(1000))

    got = flat(pages(ws, 2, 333, between=lambda: log(ws, f"meanwhile {next(counter)}")))

    expected = [(clock.current.date(), f"next day {i}") for i in range(4, -1, -1)]
    expected += [(START.date(), f"entry {i}") for i in range(DAY_ENTRIES - 1, -1, -1)]
    assert got == expected  # what was appended meanwhile is newer than the first page: it is not in these pages


def test_a_page_ending_at_the_start_of_a_day_continues_with_the_day_before(ws: Workspace) -> None:
    clock = ws.clock
    assert isinstance(clock, FixedClock)
    clock.current = START + timedelta(days=1)
    log(ws, "a", "b")

    page, position = asyncio.run(recent_page(ws, 2, 2))

    assert [(d, [e.action for e in es]) for d, es in page] == [(clock.current.date(), ["a", "b"])]
    assert position == (START.date(), None)
    page, _ = asyncio.run(recent_page(ws, 2, 1, position))
    assert [e.action for _, es in page for e in es] == [f"entry {DAY_ENTRIES - 1}"]


def test_a_person_editing_an_entry_in_a_day_that_kept_its_length_shows_in_the_next_payload(ws: Workspace) -> None:
    assert "- entry 4998\n" in build_context(ws, None)["text"]
    path = ws.warm.path_for(START.date())
    tmp = path.with_name("edit.tmp")
    tmp.write_bytes(path.read_bytes().replace(b"- entry 4998\n", b"- entry 4998, edited\n"))
    os.replace(tmp, path)

    ws.refresh()
    asyncio.run(context.load_recent(ws, 3))
    text = build_context(ws, None)["text"]

    assert "- entry 4998, edited\n" in text and "- entry 4998\n" not in text


def test_recent_days_bigger_together_than_the_parse_bound_are_not_parsed_again_on_the_loop(
    tmp_path: Path, counter: TokenCounter, io: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memd.tiers import warm_store

    root = tmp_path / "alpha"
    huge_day(root / "warm", START.date(), entries=400)
    huge_day(root / "warm", START.date() - timedelta(days=1), entries=400)
    each = (root / "warm" / warm_format.day_filename(START.date())).stat().st_size
    monkeypatch.setattr(warm_store, "PARSED_MAX_BYTES", each + each // 2)  # room for one day's parse, not two
    ws = Workspace(WorkspaceConfig("alpha", root, budget=BudgetConfig(warm=2_000)), counter, FixedClock(START), io)
    ws.open()
    parses: list[date] = []
    real_parse = ws.warm._parse
    monkeypatch.setattr(
        ws.warm, "_parse", lambda job, whole_if_rewritten: parses.append(job.day) or real_parse(job, whole_if_rewritten)
    )

    async def context_get() -> tuple[dict[str, Any], list[date]]:
        recent = await context.load_recent(ws, 2)
        parsed_loading = list(parses)
        return build_context(ws, None, recent=recent), parsed_loading

    result, while_loading = asyncio.run(context_get())

    assert sorted(while_loading) == [START.date() - timedelta(days=1), START.date()]
    assert parses == while_loading  # building the context parsed nothing more (the store kept only one of them)
    assert "entry 399" in result["text"]


def test_a_small_budget_reaches_the_activity_beneath_a_checkpoints_flush_of_many_notes(counter: TokenCounter) -> None:
    """A checkpoint appends one `note from hot` entry per compressed note, each bigger than a 100-token budget has
    room for: the walk passes over them to the older activity that fits (CI once saw a tiny-budget context with
    no warm entry at all, when an automatic checkpoint flushed twelve notes after the agent's last log)."""
    day = date(2024, 3, 15)
    activity = [WarmEntry("09:00:00", f"measured run {i:02d}", (("hit_rate", str(i / 10)),)) for i in range(1, 11)]
    flush = [
        WarmEntry(
            "09:30:00",
            "note from hot",
            (
                ("id", f"n-{i:02d}"),
                ("ts", "2024-03-15T09:00:00Z"),
                ("text", f"note {i:02d}: the cache misses on cold start, case {i}"),
                ("checkpoint", "ckpt-20240315-093000-1a2b"),
                ("from", "hot"),
            ),
        )
        for i in range(1, 21)
    ]
    budget = 60
    assert all(counter.count(warm_format.render_entry(e)) > budget for e in flush)

    section = render_warm([(day, activity + flush)], counter, budget)

    assert "measured run 10" in section.text and "note from hot" not in section.text
    assert section.items >= 1 and section.usage.tokens <= budget
