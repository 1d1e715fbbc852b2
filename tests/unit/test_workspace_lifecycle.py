"""A workspace's life around its writes: what `open` recovers and records the first time memd serves it (the
adoption of another tool's day files), a reloaded config taking effect, usage and its cache, reading a day from
warm, the archive or nowhere, and what the change sink hears. Real files, real I/O threads."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from clocks import START, FixedClock
from edits import note

from memd import retention
from memd.config import BudgetConfig, LimitsConfig, WarmConfig, WorkspaceConfig
from memd.errors import Busy, StorageError
from memd.tiers import cold_learnings
from memd.tokens import TokenCounter
from memd.workspace import Workspace

TODAY = START.date()
OLD_DAY = "2024-02-01"


class RecordingSink:
    def __init__(self) -> None:
        self.changes: list[tuple[Any, frozenset[str], str]] = []

    def registered(self, ws: Workspace) -> None:
        pass

    def changed(self, ws: Workspace, tiers: frozenset[str], origin: str) -> None:
        self.changes.append((ws, tiers, origin))

    async def before_destructive(self, ws: Workspace, why: str, days: Sequence[str] = ()) -> None:
        return None


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "alpha"


def make(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, config: WorkspaceConfig | None = None, **kwargs: Any
) -> Workspace:
    return Workspace(config or WorkspaceConfig("alpha", root), counter, FixedClock(START), io, **kwargs)


def day_file(root: Path, name: str = OLD_DAY) -> Path:
    (root / "warm").mkdir(parents=True, exist_ok=True)
    path = root / "warm" / f"{name}.md"
    path.write_text(f"# Activity Log {name}\n\n### 10:00:00 - another tool's entry\nResult: done\n", encoding="utf-8")
    return path


def archive(root: Path, name: str, text: str) -> None:
    """`name`'s day archived by retention's own archiving (its members carry a checksum), before memd opens it."""
    (root / "warm").mkdir(parents=True, exist_ok=True)
    (root / "warm" / f"{name}.md").write_text(text, encoding="utf-8")
    plan = retention.SweepPlan(root / "warm", (f"{name}.md",))
    assert retention.archive_expired(plan, max_bytes=8 << 20).removed == [f"{name}.md"]


# --- open: recovery, and the adoption record ------------------------------------------------------------------------


def test_open_removes_memds_stale_temp_files_and_names_them(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    (root / "hot").mkdir(parents=True)
    stale = root / "hot" / ".context.json.memd-tmp-1-abcdef-1"
    stale.write_text("half a write", encoding="utf-8")
    (root / "hot" / "notes.txt").write_text("a person's file", encoding="utf-8")

    removed = make(root, counter, io).open()

    assert removed == [str(stale)]
    assert not stale.exists() and (root / "hot" / "notes.txt").exists()


def test_open_parses_memory_md_so_that_the_first_read_after_a_start_does_not_parse_it_on_the_event_loop(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak started on 36,000 learnings a workspace held every client ~0.3 s at its first reads: the first
    `context.get` parsed MEMORY.md on the loop. `open` (at start, before the socket serves) parses it instead."""
    (root / "cold").mkdir(parents=True)
    lines = "".join(f"- [2024-03-01] learning {i}\n" for i in range(50))
    (root / "cold" / "MEMORY.md").write_text(f"# Memory\n\n## Testing\n{lines}", encoding="utf-8")
    ws = make(root, counter, io)
    ws.open()
    parses: list[int] = []
    parse = cold_learnings.Learnings.parse
    monkeypatch.setattr(cold_learnings.Learnings, "parse", lambda text: parses.append(len(text)) or parse(text))

    assert len(ws.cold.parsed.items) == 50  # what context.get and cold.get read first

    assert parses == []


def test_the_first_open_of_a_workspace_with_another_tools_day_files_records_the_adoption_and_logs_it(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memd.workspace")
    day_file(root, OLD_DAY)
    day_file(root, "2024-02-02")
    record = root.parent / "state" / "alpha.json"

    ws = make(root, counter, io, adoption_file=record)
    ws.open()

    assert json.loads(record.read_bytes()) == {
        "adopted": True,
        "first_served": START.isoformat(timespec="seconds"),
        "day_files": 2,
        "confirmed_at": "",
    }
    assert ws.adoption is not None and ws.adoption.pending
    assert ws.warm.zoneless_as_written is True  # another tool's day files: their text as written
    assert [r.getMessage() for r in caplog.records if r.name == "memd.workspace"] == [
        "workspace alpha: adopted with 2 day file(s) in warm/; retention only reports until a sweep is confirmed"
    ]


@pytest.mark.parametrize(
    "memds_hand",
    [
        lambda root: (root / "hot" / "memd.json").write_text('{"version": 2, "notes": []}', encoding="utf-8"),
        lambda root: (root / "hot" / "context.json").write_text('{"version": 1, "task": ""}', encoding="utf-8"),
    ],
    ids=["hot/memd.json", "a version key in context.json"],
)
def test_day_files_beside_memds_own_hot_state_are_memds_and_are_not_adopted(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, memds_hand: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memd.workspace")
    day_file(root)
    (root / "hot").mkdir(parents=True)
    memds_hand(root)
    record = root.parent / "state" / "alpha.json"

    ws = make(root, counter, io, adoption_file=record)
    ws.open()

    assert json.loads(record.read_bytes())["adopted"] is False
    assert ws.adoption is not None and not ws.adoption.pending
    assert ws.warm.zoneless_as_written is False
    assert [r for r in caplog.records if r.name == "memd.workspace"] == []


def test_a_recorded_adoption_is_read_back_at_the_next_open_and_not_made_again(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    day_file(root)
    record = root.parent / "state" / "alpha.json"
    make(root, counter, io, adoption_file=record).open()
    first = record.read_bytes()
    (root / "hot" / "memd.json").write_text('{"version": 2}', encoding="utf-8")  # memd has written since

    again = make(root, counter, io, adoption_file=record)
    again.open()

    assert record.read_bytes() == first
    assert again.adoption is not None and again.adoption.pending and again.warm.zoneless_as_written is True


def test_an_adoption_that_cannot_be_recorded_still_holds_for_this_run_and_says_why(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture, monkeypatch: Any
) -> None:
    day_file(root)
    record = root.parent / "state" / "alpha.json"

    def disk_full(path: Path, adoption: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(retention, "save_adoption", disk_full)
    ws = make(root, counter, io, adoption_file=record)
    ws.open()

    assert ws.adoption is not None and ws.adoption.pending
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "memd.workspace"] == [
        f"workspace alpha: could not record its adoption in {record}: [Errno 28] No space left on device: '{record}'"
    ]


# --- the writer's collaborators ------------------------------------------------------------------------------------


def test_the_change_sink_hears_each_write_with_the_workspace_and_the_tiers_it_changed(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    sink = RecordingSink()
    ws = make(root, counter, io, sink=sink)
    ws.open()

    asyncio.run(ws.write(note("first")))

    assert sink.changes == [(ws, frozenset({"hot"}), "write")]


def test_a_workspace_queues_at_most_ten_thousand_writes_by_default(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    ws = make(root, counter, io)
    ws.open()

    assert ws.writer.max_pending == 10_000


def test_the_workspaces_own_io_threads_do_its_work(root: Path, counter: TokenCounter) -> None:
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="alpha-io") as one_io:
        ws = make(root, counter, one_io)
        archive(root, "2024-01-15", "# Activity Log 2024-01-15\n\n### 08:00:00 - archived work\n")
        ws.open()
        day_file(root, TODAY.isoformat())

        async def go() -> tuple[bool, str]:
            gate = threading.Event()
            one_io.submit(gate.wait)  # the workspace's I/O thread is busy
            adopting = asyncio.ensure_future(ws.adopt())
            reading = asyncio.ensure_future(ws.in_worker_to_the_end(lambda: threading.current_thread().name))
            archived = asyncio.ensure_future(ws.read_day(date(2024, 1, 15)))
            await asyncio.sleep(0.05)
            waited = not adopting.done() and not reading.done() and not archived.done()
            gate.set()
            await adopting
            assert (await archived)[1] == "archive"
            return waited, await reading

        waited, thread = asyncio.run(go())

    assert waited and thread.startswith("alpha-io")


def test_the_warm_days_size_cap_comes_from_the_limits(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    (root / "warm").mkdir(parents=True)
    (root / "warm" / f"{TODAY.isoformat()}.md").write_bytes(b"# Activity Log\n" + b"x" * 2000 + b"\n")
    ws = make(root, counter, io, limits=LimitsConfig(warm_day_max_bytes=1000))
    ws.open()

    with pytest.raises(StorageError, match="warm_day_max_bytes"):
        asyncio.run(ws.write(lambda d: d.log("one more line")))


# --- a reloaded config ------------------------------------------------------------------------------------------


def test_a_reloaded_config_moves_today_the_budgets_the_size_caps_and_the_queue_bound(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    config = WorkspaceConfig("alpha", root, warm=WarmConfig(timezone="UTC"))
    ws = make(root, counter, io, config=config)
    ws.open()
    asyncio.run(ws.write(note("x" * 300)))
    assert ws.today() == TODAY  # START is 09:30 UTC

    reloaded = replace(config, warm=WarmConfig(timezone="Pacific/Honolulu"), budget=replace(config.budget, hot=12_345))
    ws.reconfigure(reloaded, LimitsConfig(hot_max_bytes=200, cold_max_bytes=100, warm_day_max_bytes=50), 1)

    assert ws.config is reloaded
    assert ws.today() == date.fromordinal(TODAY.toordinal() - 1)  # UTC-10: still yesterday
    assert ws.usage()["hot"].budget == 12_345
    assert ws.writer.max_pending == 1
    with pytest.raises(StorageError, match="hot_max_bytes"):
        asyncio.run(ws.write(note("y" * 300)))
    with pytest.raises(StorageError, match="cold_max_bytes"):
        asyncio.run(ws.write(lambda d: d.learn("Testing", "z" * 200)))
    with pytest.raises(StorageError, match="warm_day_max_bytes"):
        asyncio.run(ws.write(lambda d: d.log("w" * 100)))

    def propose(draft: Any) -> None:
        draft.proposals = draft.edit_proposals() + "p" * 200

    with pytest.raises(StorageError, match="cold_max_bytes"):  # PROPOSED.md is capped like MEMORY.md
        asyncio.run(ws.write(propose))


def test_a_reloaded_queue_bound_refuses_what_does_not_fit(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    ws = make(root, counter, io)
    ws.open()
    ws.reconfigure(ws.config, max_pending=1)

    async def go() -> None:
        first = asyncio.ensure_future(ws.write(note("one")))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(ws.write(note("two")))
        third = ws.write(note("three"))
        with pytest.raises(Busy):
            await third
        await first
        await second

    asyncio.run(go())


# --- usage ----------------------------------------------------------------------------------------------------------


def test_usage_counts_each_tier_against_its_budget_and_the_cached_reply_follows_every_write(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    budget = BudgetConfig(hot=4000, warm=3000, cold=2000)
    ws = make(root, counter, io, config=WorkspaceConfig("alpha", root, budget=budget))
    ws.open()
    before = ws.usage_dict()

    asyncio.run(ws.write(note("a note of several words")))
    asyncio.run(ws.write(lambda d: d.learn("Testing", "run the slow suite before a release")))
    asyncio.run(ws.write(lambda d: d.log("ran the tests")))
    after = ws.usage_dict()

    usage = ws.usage()
    assert {tier: u.budget for tier, u in usage.items()} == {"hot": 4000, "warm": 3000, "cold": 2000}
    assert after == {tier: u.as_dict() for tier, u in usage.items()}
    for tier in ("hot", "warm", "cold"):
        assert after[tier]["tokens"] > before[tier]["tokens"]
    assert ws.usage_dict() is after  # cached while nothing changes


# --- reading a day --------------------------------------------------------------------------------------------


def test_a_day_is_read_from_warm_then_from_its_archive_and_a_day_never_kept_reads_as_none(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    day_file(root, "2024-02-02")
    archive(root, "2024-01-15", "# Activity Log 2024-01-15\n\n### 08:00:00 - archived work\nResult: kept\n")
    ws = make(root, counter, io)
    ws.open()

    in_warm, source = asyncio.run(ws.read_day(date(2024, 2, 2)))
    assert source == "warm" and [(e.time, e.action, e.result) for e in in_warm] == [
        ("10:00:00", "another tool's entry", "done")
    ]
    in_archive, source = asyncio.run(ws.read_day(date(2024, 1, 15)))
    assert source == "archive" and [(e.time, e.action, e.result) for e in in_archive] == [
        ("08:00:00", "archived work", "kept")
    ]
    assert asyncio.run(ws.read_day(date(2024, 1, 16))) == ([], "none")


def test_an_archive_over_the_cap_is_a_clear_error_when_the_day_is_read(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor
) -> None:
    archive(root, "2024-01-15", "# Activity Log 2024-01-15\n\n### 08:00:00 - big\nResult: " + "x" * (2 << 20) + "\n")
    config = WorkspaceConfig("alpha", root, warm=WarmConfig(archive_max_bytes=1 << 20))
    ws = make(root, counter, io, config=config)
    ws.open()

    with pytest.raises(Exception, match="archive_max_bytes"):
        asyncio.run(ws.read_day(date(2024, 1, 15)))


def test_moving_memds_own_keys_out_of_a_legacy_context_json_is_logged_once(
    root: Path, counter: TokenCounter, io: ThreadPoolExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memd.workspace")
    (root / "hot").mkdir(parents=True)
    legacy = {"version": 1, "task": "t", "notes": [{"id": "n-1", "ts": START.isoformat(), "text": "x"}], "summary": ""}
    (root / "hot" / "context.json").write_text(json.dumps(legacy), encoding="utf-8")
    ws = make(root, counter, io)
    ws.open()

    assert asyncio.run(ws.split_hot()) is True
    assert asyncio.run(ws.split_hot()) is False

    assert [r.getMessage() for r in caplog.records if r.name == "memd.workspace"] == [
        "workspace alpha: moved memd's own hot state from hot/context.json to hot/memd.json"
    ]
